"""Channels: ordered, bounded queues of stream elements between two subtasks (M-E1).

A channel has a producer side (:class:`OutputChannel`) and a consumer side
(:class:`InputChannel`). :class:`LocalChannel` implements both in memory for
subtasks of one process; the Spark executor adds network channels with the
same interface.

Bound: a data batch is admitted only when it fits under ``capacity_bytes`` or
the channel is empty, and the record writer never sends a batch larger than
its buffer size (validated to be at most the capacity), so the data queued in
a channel never exceeds ``capacity_bytes``. A producer that finds the channel
full blocks until the consumer takes data or the channel is cancelled.
Control elements (watermarks, barriers, ...) are tiny and always admitted, so a
mailbox action (a checkpoint trigger) never deadlocks behind a full channel.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Protocol

from ..core.batch import is_batch, nbytes
from ..core.elements import StreamElement
from ..errors import TaskCancelledError


class OutputChannel(Protocol):
    def put(self, element: StreamElement) -> None:
        """Append ``element``; blocks while the channel is full (data only)."""

    def put_priority(self, element: StreamElement) -> list[StreamElement]:
        """Append ``element`` (an unaligned barrier) ahead of the data batches queued
        after the last control element, without blocking; return those overtaken batches
        (they stay queued behind it). Channels that cannot reorder return ``[]`` (M-B7)."""

    def has_capacity(self) -> bool:
        """Whether a data batch put now would be admitted without blocking."""

    def set_producer_signal(self, signal: threading.Event) -> None:
        """``signal`` is set whenever the consumer frees space."""

    def cancel(self) -> None:
        """Wake and fail blocked producers; later puts raise ``TaskCancelledError``."""


class InputChannel(Protocol):
    def poll(self) -> StreamElement | None:
        """The next element, or ``None`` when none is queued. Never blocks."""

    def set_consumer_signal(self, signal: threading.Event) -> None:
        """``signal`` is set whenever an element is appended."""

    def cancel(self) -> None: ...


class LocalChannel:
    """An in-memory channel between two subtasks of one process."""

    def __init__(self, capacity_bytes: int, name: str = "channel") -> None:
        if capacity_bytes <= 0:
            raise ValueError(f"channel capacity must be positive, got {capacity_bytes}")
        self.name = name
        self.capacity_bytes = capacity_bytes
        self._queue: deque[tuple[StreamElement, int]] = deque()
        self._bytes = 0
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._consumer_signal: threading.Event | None = None
        self._producer_signal: threading.Event | None = None
        self._cancelled = False
        self.peak_bytes = 0
        #: bytes of the data batches taken by the consumer so far (metrics)
        self.taken_bytes = 0
        self.blocked_puts = 0
        self.refused_puts = 0

    # producer side -------------------------------------------------------
    def put(self, element: StreamElement) -> None:
        size = nbytes(element) if is_batch(element) else 0
        with self._lock:
            if size and self._bytes > 0 and self._bytes + size > self.capacity_bytes:
                self.blocked_puts += 1
                while (
                    self._bytes > 0
                    and self._bytes + size > self.capacity_bytes
                    and not self._cancelled
                ):
                    self._not_full.wait()
            if self._cancelled:
                raise TaskCancelledError(f"{self.name} was cancelled")
            self._queue.append((element, size))
            self._bytes += size
            if self._bytes > self.peak_bytes:
                self.peak_bytes = self._bytes
        signal = self._consumer_signal
        if signal is not None:
            signal.set()

    def put_priority(self, element: StreamElement) -> list[StreamElement]:
        """Insert ``element`` in front of the batches queued after the last control
        element (so it never overtakes a barrier, watermark or end of partition) and
        return the batches it overtook. Never blocks (M-B7)."""
        with self._lock:
            if self._cancelled:
                raise TaskCancelledError(f"{self.name} was cancelled")
            queue = self._queue
            position = len(queue)
            while position > 0 and queue[position - 1][1] > 0:
                position -= 1
            overtaken = [queue[i][0] for i in range(position, len(queue))]
            queue.insert(position, (element, 0))
        signal = self._consumer_signal
        if signal is not None:
            signal.set()
        return overtaken

    def has_capacity(self) -> bool:
        return self._bytes < self.capacity_bytes

    def can_accept(self, size: int) -> bool:
        """Whether a data batch of ``size`` bytes put now would be admitted at once.
        A refusal counts in :attr:`refused_puts` (the producer then holds the batch)."""
        if self._bytes == 0 or self._bytes + size <= self.capacity_bytes:
            return True
        self.refused_puts += 1
        return False

    def takes_idle_flush(self) -> bool:
        """Nagle's rule for the producer's idle flush: a partial buffer goes out at once
        only when the consumer has taken every batch before it. Otherwise the buffer
        grows until the consumer takes them (its take wakes the producer, which flushes
        then), the buffer fills or its timeout passes: a busy consumer is sent fewer,
        larger batches instead of one per pause of its producer."""
        return self._bytes == 0

    @property
    def backpressured(self) -> int:
        """How often a producer had to wait for space: puts that blocked plus batches the
        producer held back because the channel could not take them at once."""
        return self.blocked_puts + self.refused_puts

    def set_producer_signal(self, signal: threading.Event) -> None:
        self._producer_signal = signal

    # consumer side -------------------------------------------------------
    def poll(self) -> StreamElement | None:
        if not self._queue:
            return None
        with self._lock:
            if not self._queue:
                return None
            element, size = self._queue.popleft()
            if size:
                self._bytes -= size
                self.taken_bytes += size
                self._not_full.notify_all()
        if size:
            signal = self._producer_signal
            if signal is not None:
                signal.set()
        return element

    def set_consumer_signal(self, signal: threading.Event) -> None:
        self._consumer_signal = signal

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._queue)

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            self._not_full.notify_all()
        for signal in (self._consumer_signal, self._producer_signal):
            if signal is not None:
                signal.set()

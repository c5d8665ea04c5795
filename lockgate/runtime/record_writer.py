"""The record writer: partitions a subtask's output over its channels and buffers it.

Small batches headed for one channel are buffered and sent together when the
buffer reaches ``max_rows`` rows or ``max_bytes`` bytes, or when its oldest part
has waited ``timeout_ms`` (Flink's buffer timeout), so a slow source still
delivers with bounded latency. Large batches are cut into pieces of at most
``max_bytes`` so no single element exceeds the channel bound. Control
elements flush the buffers first: nothing overtakes data written before it.
"""

from __future__ import annotations

from .batch import Batch, concat, nbytes, num_rows, slice_batch
from .channels import OutputChannel
from .elements import StreamElement
from .partitioners import Partitioner
from ..time.clock import Clock


class RecordWriter:
    def __init__(
        self,
        channels: list[OutputChannel],
        partitioner: Partitioner,
        clock: Clock,
        *,
        timeout_ms: float,
        max_rows: int,
        max_bytes: int,
    ) -> None:
        self.channels = channels
        self.partitioner = partitioner
        self.clock = clock
        self.timeout_ms = timeout_ms
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        n = len(channels)
        self._pending: list[list[Batch]] = [[] for _ in range(n)]
        self._pending_rows = [0] * n
        self._pending_bytes = [0] * n
        self._since: list[float | None] = [None] * n

    def write(self, batch: Batch) -> None:
        for target, part in self.partitioner.partition(batch):
            self._add(target, part)

    def _add(self, target: int, part: Batch) -> None:
        rows = num_rows(part)
        if rows == 0:
            return
        size = nbytes(part)
        if size > self.max_bytes and rows > 1:
            self._flush(target)
            per_piece = max(1, rows * self.max_bytes // size)
            channel = self.channels[target]
            for start in range(0, rows, per_piece):
                channel.put(slice_batch(part, start, per_piece))
            return
        if not self._pending[target] and (rows >= self.max_rows or self.timeout_ms == 0):
            self.channels[target].put(part)
            return
        if self._pending_bytes[target] + size > self.max_bytes:
            self._flush(target)
        self._pending[target].append(part)
        self._pending_rows[target] += rows
        self._pending_bytes[target] += size
        if self._since[target] is None:
            self._since[target] = self.clock.monotonic_ms()
        if self._pending_rows[target] >= self.max_rows or self.timeout_ms == 0:
            self._flush(target)

    def _flush(self, target: int) -> None:
        parts = self._pending[target]
        if not parts:
            return
        self._pending[target] = []
        self._pending_rows[target] = 0
        self._pending_bytes[target] = 0
        self._since[target] = None
        self.channels[target].put(concat(parts))

    def flush_all(self) -> None:
        for target in range(len(self.channels)):
            self._flush(target)

    def flush_due(self, now_ms: float) -> float | None:
        """Flush buffers older than the timeout; return the next deadline (or None)."""
        deadline: float | None = None
        for target, since in enumerate(self._since):
            if since is None:
                continue
            due = since + self.timeout_ms
            if due <= now_ms:
                self._flush(target)
            elif deadline is None or due < deadline:
                deadline = due
        return deadline

    def broadcast_event(self, element: StreamElement) -> None:
        """Flush, then send ``element`` to every channel (watermarks, barriers, end)."""
        self.flush_all()
        for channel in self.channels:
            channel.put(element)

    def broadcast_priority(self, element: StreamElement) -> list[tuple[int, Batch]]:
        """Send ``element`` (an unaligned barrier) to every channel ahead of the data not
        yet consumed: the buffered batches and those queued in the channels stay behind
        it. Returns every overtaken batch with its channel index: they are the output
        in-flight state of the checkpoint (M-B7). Never blocks on a full channel."""
        overtaken: list[tuple[int, Batch]] = []
        for target, channel in enumerate(self.channels):
            overtaken.extend((target, b) for b in channel.put_priority(element))
            overtaken.extend((target, b) for b in self._pending[target])
        return overtaken

    def is_available(self) -> bool:
        return all(c.has_capacity() for c in self.channels)

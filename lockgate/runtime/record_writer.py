"""The record writer: partitions a subtask's output over its channels and buffers it.

Small batches headed for one channel are buffered and sent together when the
buffer reaches ``max_rows`` rows or ``max_bytes`` bytes, or when its oldest part
has waited ``timeout_ms`` (Flink's buffer timeout), so a slow source still
delivers with bounded latency. The task also cuts every buffer as soon as its input
runs dry (:meth:`flush_idle`, before it waits): a record never waits for the timeout
while the task has nothing else to do, so at low rates latency does not depend on it.
The idle flush follows Nagle's rule where the channel can tell: a partial buffer goes
to an in-process channel only when its consumer has taken everything before it (its
take wakes the producer), and to a network channel only when the peer is on this host
(between hosts nothing tells when the peer has taken a message, and many small messages
over a slow link cost more than they gain: there the buffer timeout rules, as in Flink).
Large batches are cut into pieces of at most ``max_bytes`` so no single element
exceeds the channel bound. Control elements flush the buffers first: nothing overtakes
data written before it.

Writing data never blocks the task thread. A buffer that is due (full or timed out)
becomes a *ready* batch, sent as soon as its channel can take it without waiting;
until then it waits here, in order, and :meth:`is_available` is False, so the task
takes no new input but keeps running its mailbox: a checkpoint trigger or an
unaligned barrier is never stuck behind a blocked send (M-B7, M-T1). What a subtask
holds beyond its channels is therefore bounded by one buffer per channel plus what one
unit of work (one input batch, one source poll) produced. Control elements
(:meth:`broadcast_event`) send everything before them and may wait for space.
"""

from __future__ import annotations

from collections import deque

import pyarrow as pa

from ..core.batch import Batch, concat, nbytes, num_rows, slice_batch
from ..core.clock import Clock
from ..core.elements import StreamElement
from ..core.partitioners import Partitioner
from .channels import OutputChannel


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
        #: batches cut and due, waiting (in order) for their channel to take them
        self._ready: list[deque[Batch]] = [deque() for _ in range(n)]
        self._pending_rows = [0] * n
        self._pending_bytes = [0] * n
        self._since: list[float | None] = [None] * n
        #: in-memory bytes of the data written (metrics; counted while ``count_bytes``)
        self.bytes_out = 0
        self.count_bytes = True

    def write(self, batch: Batch) -> None:
        for target, part in self.partitioner.partition(batch):
            self._add(target, part)

    def _add(self, target: int, part: Batch) -> None:
        rows = num_rows(part)
        if rows == 0:
            return
        size = nbytes(part)
        if self.count_bytes:
            self.bytes_out += size
        if size > self.max_bytes and rows > 1:
            self._cut(target)
            per_piece = max(1, rows * self.max_bytes // size)
            ready = self._ready[target]
            for start in range(0, rows, per_piece):
                ready.append(slice_batch(part, start, per_piece))
            self._send_ready(target)
            return
        if not self._pending[target] and (rows >= self.max_rows or self.timeout_ms == 0):
            self._ready[target].append(part)
            self._send_ready(target)
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

    def _cut(self, target: int) -> None:
        """Turn the buffer of ``target`` into one ready batch (after the ready ones)."""
        parts = self._pending[target]
        if not parts:
            return
        self._pending[target] = []
        self._pending_rows[target] = 0
        self._pending_bytes[target] = 0
        self._since[target] = None
        ready = self._ready[target]
        for run in _same_form_runs(parts):
            ready.append(concat(run))

    def _send_ready(self, target: int) -> None:
        """Send the ready batches of ``target`` while its channel takes them at once."""
        ready = self._ready[target]
        channel = self.channels[target]
        can_accept = getattr(channel, "can_accept", None)
        while ready:
            batch = ready[0]
            if not (
                can_accept(nbytes(batch)) if can_accept is not None else channel.has_capacity()
            ):
                return
            channel.put(ready.popleft())

    def _flush(self, target: int) -> None:
        """The buffer of ``target`` is due: cut it and send what its channel takes."""
        self._cut(target)
        self._send_ready(target)

    def _flush_blocking(self, target: int) -> None:
        """Send every ready and buffered batch of ``target``, waiting for space."""
        self._cut(target)
        ready = self._ready[target]
        channel = self.channels[target]
        while ready:
            channel.put(ready.popleft())

    def flush_all(self) -> None:
        """Send everything buffered or ready, waiting for space (before a control
        element, and at the end)."""
        for target in range(len(self.channels)):
            self._flush_blocking(target)

    def flush_idle(self) -> None:
        """The task's input ran dry: cut the buffer of every channel that takes an idle
        flush now (:func:`takes_idle_flush`: Nagle's rule) and send what it takes at
        once, never waiting (what a full channel cannot take stays ready, in order, and
        :meth:`is_available` says so). The other buffers wait for their timeout, for
        filling up, or for the next idle flush their channel takes."""
        for target, since in enumerate(self._since):
            if since is not None and takes_idle_flush(self.channels[target]):
                self._flush(target)

    def flush_due(self, now_ms: float) -> float | None:
        """Cut buffers older than the timeout, send what the channels take at once, and
        return the next deadline (or None)."""
        deadline: float | None = None
        for target, since in enumerate(self._since):
            if self._ready[target]:
                self._send_ready(target)
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
            overtaken.extend((target, b) for b in self._ready[target])
            overtaken.extend((target, b) for b in self._pending[target])
        return overtaken

    def is_available(self) -> bool:
        """Whether the task may take more input: no batch is waiting for its channel
        (those that fit now are sent) and every channel has room."""
        for target, ready in enumerate(self._ready):
            if ready:
                self._send_ready(target)
                if ready:
                    return False
        return all(c.has_capacity() for c in self.channels)


def takes_idle_flush(channel: OutputChannel) -> bool:
    """Whether an idle flush may send ``channel`` a partial buffer now: the channel's
    ``takes_idle_flush()`` (an in-process channel: its consumer has taken everything
    before; a network channel: its peer is on this host), True for channels without one."""
    rule = getattr(channel, "takes_idle_flush", None)
    return True if rule is None else bool(rule())


def _same_form_runs(parts: list[Batch]) -> list[list[Batch]]:
    """``parts`` cut, in order, where an Arrow batch's schema differs from the previous
    Arrow batch's: each run concatenates as Arrow. Arrow batches of different schemas (a
    column whose type changed between batches) are never joined as Python rows, which
    would infer one type for both (int64 IDs above 2**53 next to floats fail there; a
    receiver of the rows would fail on every attempt)."""
    runs: list[list[Batch]] = [[parts[0]]]
    for prev, part in zip(parts, parts[1:]):
        if (
            isinstance(part, pa.RecordBatch)
            and isinstance(prev, pa.RecordBatch)
            and not part.schema.equals(prev.schema, check_metadata=True)
        ):
            runs.append([part])
        else:
            runs[-1].append(part)
    return runs

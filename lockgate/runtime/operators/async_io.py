"""The async I/O operator: ``AsyncDataStream.ordered_wait / unordered_wait`` (M-W7).

Every input record enters an element queue (:mod:`lockgate.runtime.async_queue`) and
starts a request of the user's ``async def`` function on the subtask's
:class:`~lockgate.runtime.async_runner.AsyncRunner`. A request's completion comes back
to the task thread through the task's mailbox, completes the record's entry and emits
whatever may leave the queue. Watermarks enter the queue too, so the ordered queue
keeps input order and the unordered one never moves a record across a watermark.

Guarantees:

* each result keeps the event timestamp of the record it came from;
* at most ``capacity`` entries (records and watermarks) are in the queue: when it is
  full, the operator waits, running the task's mails (where completions arrive), until
  an entry has left: backpressure on its input;
* a request that fails (or times out without a user fallback) fails the task, with
  the record in the message;
* ``finish`` (end of input) returns only after every entry has left the queue;
* a checkpoint stores every input the operator has taken but whose results have not
  left yet (records in flight, records complete but held back by the queue's order,
  watermarks in the queue) with the records' timestamps; a restore puts them back
  into the queue, in input order, and issues the records' requests again before any
  new input. Their results were not emitted before the checkpoint's barrier, so in
  the exactly-once output each record's results appear once (M-T3, M-T4, M-R1).

Inputs the operator took but has not put into the queue yet (the rest of a batch
while it waits for room, or restored inputs beyond the capacity) wait in a backlog
that goes into the queue, in order, before anything newer, and into checkpoints.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ...core.batch import NO_TIMESTAMP, Batch, RowBatch, timestamps_of, to_rows
from ...core.elements import StreamStatus, Watermark
from ...errors import ConfigurationError, LockgateError
from ...state.operator_state import even_chunk
from ...state.snapshot import OperatorStateSnapshot, payload_part
from ..async_queue import (
    Completion,
    ElementQueue,
    OrderedElementQueue,
    RecordEntry,
    UnorderedElementQueue,
    _check_capacity,
)
from ..async_runner import AsyncRunner, AsyncTimeoutError, _check_timeout, describe_record
from .basic import _FunctionOperator

#: the key of the operator's in-flight inputs in the "function" part of its snapshot
STATE_KEY = "async_io"
STATE_VERSION = 1


class InFlightRecord(NamedTuple):
    """A record the operator took, with its event timestamp (:data:`NO_TIMESTAMP`: none)."""

    value: Any
    timestamp: int


Pending = InFlightRecord | Watermark


class AsyncRequestError(LockgateError, RuntimeError):
    """An async I/O request failed; the message names the record and the error (the
    user's exception is the ``__cause__``)."""

    @classmethod
    def for_record(cls, record: Any, error: BaseException) -> AsyncRequestError:
        return cls(
            f"the async I/O request for record {describe_record(record)} failed: "
            f"{type(error).__name__}: {error}"
        )


class _Collector:
    """A :class:`~lockgate.runtime.async_queue.QueueOutput` that gathers the results
    leaving the queue into one batch, emitted before each watermark and at the end."""

    def __init__(self, op: AsyncWaitOperator) -> None:
        self._op = op
        self._rows: list[Any] = []
        self._stamps: list[int] = []
        self._stamped = False

    def emit_results(self, record: InFlightRecord, results: list[Any]) -> None:
        if not results:
            return
        self._rows.extend(results)
        self._stamps.extend([record.timestamp] * len(results))
        self._stamped = self._stamped or record.timestamp != NO_TIMESTAMP

    def emit_watermark(self, watermark: Watermark) -> None:
        self.flush()
        self._op.output.emit_element(watermark)

    def flush(self) -> None:
        if not self._rows:
            return
        stamps = np.asarray(self._stamps, dtype=np.int64) if self._stamped else None
        rows = self._rows
        self._rows, self._stamps, self._stamped = [], [], False
        self._op.emit(RowBatch(rows, stamps))


class AsyncWaitOperator(_FunctionOperator):
    """Runs ``fn`` (an ``async def fn(record)`` or an ``AsyncFunction``) per record with
    at most ``capacity`` queue entries; ``ordered``: results in input order, else in
    completion order within watermark segments (M-W7). ``timeout_ms``: per request."""

    method = "async_invoke"

    def __init__(self, fn: Any, timeout_ms: float, capacity: int, ordered: bool) -> None:
        super().__init__(fn)
        self.timeout_ms = _check_timeout(timeout_ms)
        self.capacity = _check_capacity(capacity)
        if not isinstance(ordered, bool):
            raise ConfigurationError(f"ordered must be True or False, got {ordered!r}")
        self.ordered = ordered
        self._queue: ElementQueue | None = None
        self._runner: AsyncRunner | None = None
        #: inputs taken but not in the queue yet, oldest first (they go in before newer ones)
        self._backlog: deque[Pending] = deque()
        #: an IDLE status that arrived while results were pending (M-W2)
        self._held_status: StreamStatus | None = None
        #: > 0 while the operator waits for room in the middle of taking input
        self._waiting_for_room = 0

    # lifecycle -----------------------------------------------------------------------
    def open(self) -> None:
        super().open()  # operator state, restored inputs (into the backlog), fn.open(ctx)
        ctx = self.ctx
        if ctx.mailbox is None or ctx.run_mail_until is None:
            raise RuntimeError(
                f"async I/O operator '{self.name}' runs only inside a task (it needs the "
                f"task's mailbox)"
            )
        self._queue = (OrderedElementQueue if self.ordered else UnorderedElementQueue)(
            self.capacity
        )
        self._runner = AsyncRunner(
            self.function,
            self._post,
            timeout_ms=self.timeout_ms,
            name=f"{self.name} ({ctx.subtask_index + 1}/{ctx.parallelism})",
        )
        self._runner.start()
        if self._backlog:
            # restored inputs go into the queue (and their requests out) from the first
            # mail: before any newer input, which queues up behind them in the backlog,
            # and after the task replayed its channel state, so nothing is emitted before
            # the output in-flight data it recorded
            ctx.mailbox.put(
                lambda: self._drain(wait=False), f"async I/O restored inputs ({self.name})"
            )

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        stamps = timestamps_of(batch)
        if stamps is None:
            self._backlog.extend(InFlightRecord(r, NO_TIMESTAMP) for r in rows)
        else:
            self._backlog.extend(InFlightRecord(r, int(t)) for r, t in zip(rows, stamps))
        self._drain(wait=True)

    def advance_watermark(self, watermark: Watermark) -> None:
        """The watermark enters the queue behind every record before it (M-W7); what is
        complete in front of it leaves at once."""
        self._backlog.append(watermark)
        self._drain(wait=True)

    def process_status(self, status: StreamStatus, input_index: int = 0) -> None:
        """IDLE waits until every pending result has left (no record follows IDLE
        downstream, M-W2); ACTIVE cancels a held IDLE, else goes out at once."""
        if status is StreamStatus.IDLE:
            if self._all_out():
                self.output.emit_element(status)
            else:
                self._held_status = status
        elif self._held_status is StreamStatus.IDLE:
            self._held_status = None
        else:
            self.output.emit_element(status)

    def finish(self) -> None:
        """End of input: returns once every record's results and every watermark left."""
        self._drain(wait=True, taking_input=False)
        self._wait(self._all_out)
        self._release_status()

    def close(self) -> None:
        """Cancel pending requests and stop the runner's thread, then close ``fn``."""
        runner, self._runner = self._runner, None
        try:
            if runner is not None:
                runner.close()
        finally:
            super().close()

    # checkpoints (M-T3, M-T4) --------------------------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> Any:
        """Copies of every input whose results have not left (queue order, then the
        backlog), plus the function's operator state. Always a snapshot (also an empty
        one), so a restore at the same parallelism finds every subtask's own."""
        if self._waiting_for_room:
            raise RuntimeError(
                f"async I/O operator '{self.name}' was asked for a snapshot while it waited "
                f"for room in its queue in the middle of a batch; the snapshot would not be "
                f"consistent with its input (is it chained to a source?)"
            )
        assert self._queue is not None
        inputs: list[Pending] = [*self._queue.pending_inputs(), *self._backlog]
        stored = [
            ("watermark", e.timestamp)
            if isinstance(e, Watermark)
            else ("record", e.value, e.timestamp)
            for e in inputs
        ]
        snapshot = super().snapshot_state(checkpoint_id)
        if snapshot is None:
            snapshot = OperatorStateSnapshot()
        snapshot.function = {STATE_KEY: {"version": STATE_VERSION, "inputs": copy.deepcopy(stored)}}
        return snapshot

    def restore_state(self, restored: Any) -> None:
        """At the same parallelism a subtask takes back its own inputs (records and
        watermarks, in input order); at another, the old subtasks' records are
        concatenated and dealt out in contiguous even chunks (each exactly once), and
        their watermarks are dropped (new ones come from upstream)."""
        super().restore_state(restored)
        ctx = self.ctx
        if restored.same_parallelism:
            inputs = _stored_inputs(restored.own(), self.name)
        else:
            every = [
                e
                for state in restored.all()
                for e in _stored_inputs(state, self.name)
                if not isinstance(e, Watermark)
            ]
            inputs = even_chunk(every, ctx.subtask_index, ctx.parallelism)
        for e in inputs:
            if isinstance(e, Watermark) and e.timestamp > self.current_watermark:
                self.note_watermark(e.timestamp)
        self._backlog.extend(inputs)

    # the queue -----------------------------------------------------------------------
    def _drain(self, *, wait: bool, taking_input: bool = True) -> None:
        """Move the backlog into the queue in order, issuing the records' requests. With
        ``wait``, wait for room when the queue is full (backpressure); without, stop."""
        queue, runner = self._queue, self._runner
        assert queue is not None and runner is not None
        backlog = self._backlog
        while backlog:
            if not queue.has_capacity():
                if not wait:
                    return
                held = 1 if taking_input else 0
                self._waiting_for_room += held
                try:
                    self._wait(lambda: queue.has_capacity() or not backlog)
                finally:
                    self._waiting_for_room -= held
                continue
            item = backlog.popleft()
            if isinstance(item, Watermark):
                queue.add_watermark(item)
                self._emit()
            else:
                entry = queue.add_record(item)
                runner.submit(item.value, self._completer(entry))

    def _completer(self, entry: RecordEntry) -> Callable[[Completion], None]:
        def on_complete(completion: Completion) -> None:
            self._on_complete(entry, completion)

        return on_complete

    def _on_complete(self, entry: RecordEntry, completion: Completion) -> None:
        """Task thread (a mail): complete the entry, emit what may leave, refill."""
        error = completion.error
        if error is not None:
            record = entry.record.value
            cause = (
                error
                if isinstance(error, AsyncTimeoutError)
                else AsyncRequestError.for_record(record, error)
            )
            raise self.user_error(cause) from error
        entry.settle(completion)
        self._emit()
        self._drain(wait=False)

    def _emit(self) -> None:
        queue = self._queue
        assert queue is not None
        if not queue.has_completed():
            return
        out = _Collector(self)
        queue.emit_completed(out)
        out.flush()
        self._release_status()

    def _all_out(self) -> bool:
        queue = self._queue
        return (queue is None or queue.is_empty()) and not self._backlog

    def _release_status(self) -> None:
        if self._held_status is not None and self._all_out():
            status, self._held_status = self._held_status, None
            self.output.emit_element(status)

    def _post(self, action: Callable[[], None]) -> object:
        return self.ctx.mailbox.put(action, f"async I/O completion ({self.name})")

    def _wait(self, done: Callable[[], bool]) -> None:
        self.ctx.run_mail_until(done)


def _stored_inputs(state: Any, operator: str) -> list[Pending]:
    """The inputs a snapshot of the operator stored ([] when it has none)."""
    function = payload_part(state, "function") if state is not None else None
    if not isinstance(function, dict) or STATE_KEY not in function:
        return []
    stored = function[STATE_KEY]
    if not isinstance(stored, dict) or stored.get("version") != STATE_VERSION:
        raise ConfigurationError(
            f"async I/O operator '{operator}': the restored in-flight inputs have an unknown "
            f"format ({stored!r:.80}); restore with the lockgate version that wrote them"
        )
    inputs: list[Pending] = []
    for item in stored["inputs"]:
        if item[0] == "watermark":
            inputs.append(Watermark(int(item[1])))
        else:
            inputs.append(InFlightRecord(item[1], int(item[2])))
    return inputs

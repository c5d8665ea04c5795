"""The operator contract and the outputs that connect chained operators.

Lifecycle, in order: ``setup`` → ``open`` → ``process_batch``* → ``finish``
(only at end of input) → ``close`` (always, also after a failure).
``process_batch`` is never called after ``finish``; nothing is called after
``close``. Exceptions from user code are raised as
:class:`~lockgate.errors.UserFunctionError` naming the operator and subtask.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ...core.batch import Batch, has_changes, kinds_of, num_rows
from ...core.elements import MIN_WATERMARK, StreamElement, StreamStatus, Watermark
from ...core.latency.marker import LatencyMarker
from ...core.row_kind import RowKind
from ...core.user_functions import PLAIN_CALLABLES
from ...errors import ChangelogError, TaskCancelledError, UserFunctionError
from ..context import RuntimeContext
from ..metrics import OperatorCounters


class RestoredState(Protocol):
    """What :meth:`StreamOperator.initialize_state` is given to restore from: the states
    the old subtasks of a checkpoint wrote for one operator, as one subtask of the new
    attempt (``subtask`` of ``parallelism``) sees them.

    :class:`lockgate.recovery.restore.OperatorRestore` reads them from a checkpoint's
    storage, :class:`lockgate.testing.OperatorHarness` from its in-memory snapshots; both
    subclass this protocol, so an operator sees the same interface from either.
    """

    #: this subtask's index in the new attempt
    subtask: int
    #: the new attempt's parallelism
    parallelism: int

    @property
    def same_parallelism(self) -> bool:
        """Whether every old subtask wrote state and there were ``parallelism`` of them."""
        ...

    def own(self) -> Any:
        """The state the old subtask with this subtask's index wrote, or None."""
        ...

    def by_subtask(self) -> dict[int, Any]:
        """Old subtask index -> its state, for every old subtask that wrote one."""
        ...

    def assigned(self) -> list[Any]:
        """The states of the old subtasks ``j`` with ``j % parallelism == subtask`` (the
        ones this subtask takes over), in subtask order."""
        ...

    def all(self) -> list[Any]:
        """The states of every old subtask, in subtask order."""
        ...


class Output:
    """Where an operator's results go: its main output and its side outputs."""

    def emit(self, batch: Batch) -> None:
        raise NotImplementedError

    def emit_side(self, tag: str, batch: Batch) -> None:
        raise NotImplementedError

    def emit_element(self, element: StreamElement) -> None:
        """Forward a control element (watermark, status)."""
        raise NotImplementedError


class Cancellation:
    """The cancellation flag of one subtask, shared by its chained operators.

    The task sets it when cancelled (any thread); an operator running user code per
    record reads :attr:`requested` between two records (one attribute read) and calls
    :meth:`check` after its loop, so a cancelled task stops within one record rather
    than one batch."""

    __slots__ = ("requested", "task")

    def __init__(self, task: str = "task") -> None:
        self.requested = False
        #: the subtask, as ``name (index)``, for the error
        self.task = task

    def check(self) -> None:
        """Raise ``TaskCancelledError`` once cancellation was requested."""
        if self.requested:
            raise TaskCancelledError(f"{self.task} was cancelled")


#: the flag of an operator outside any chain (tests driving it alone): never set
NOT_CANCELLED = Cancellation()


class StreamOperator:
    """Base of every operator. Subclasses implement ``process_batch``; the rest defaults."""

    #: the subtask's cancellation flag (set by the chain): see :class:`Cancellation`
    cancellation: Cancellation = NOT_CANCELLED

    #: the operator has two logical inputs (``process_batch(batch, 0 | 1)``)
    two_input = False
    #: the operator carries row kinds (a changelog: updates, deletes) from its input to
    #: its output, or applies them; one that does not is given only inserts, and a
    #: changelog record fails the job at it (see :func:`refusing_changes`)
    accepts_changes = False
    #: the operator's event time: the last watermark it processed (M-W1)
    current_watermark: int = MIN_WATERMARK
    _combined: Any = None

    def __init__(self) -> None:
        self.name = "operator"
        self.uid = ""
        self.ctx: RuntimeContext
        self.output: Output
        self.counters = OperatorCounters()

    def setup(self, name: str, uid: str, ctx: RuntimeContext, output: Output) -> None:
        self.name = name
        self.uid = uid
        self.ctx = ctx
        self.output = output

    def initialize_state(self, restored: RestoredState | None) -> None:
        """Called once before ``open``: ``restored`` is the operator's recorded state to
        take over (a :class:`RestoredState`), or None on a
        fresh start or when the restored checkpoint holds nothing for this operator
        (M-R1). Stateless operators ignore it."""

    def open(self) -> None:
        """Called once before the first batch."""

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """End of input: emit whatever is still held. Not called on failure."""

    # event time (M-W1, M-W5, M-W6) -------------------------------------------------
    def process_watermark(self, watermark: Watermark, input_index: int = 0) -> None:
        """A watermark reached input ``input_index``. An operator with two inputs goes on
        with the minimum of its inputs' watermarks, only when it advances (M-W5)."""
        if self.two_input:
            combined = self._input_watermarks().input_watermark(watermark.timestamp, input_index)
            if combined is None:
                return
            watermark = Watermark(combined)
        if watermark.timestamp <= self.current_watermark:
            return
        self.note_watermark(watermark.timestamp)
        self.advance_watermark(watermark)

    def note_watermark(self, timestamp: int) -> None:
        """Record the operator's new event time (metrics and diagnostics, M-W1)."""
        self.current_watermark = timestamp
        self.counters.watermark = timestamp

    def advance_watermark(self, watermark: Watermark) -> None:
        """Event time reached ``watermark``: fire what became due (event-time timers,
        windows) in timestamp order, then forward the watermark (M-W6). The default
        forwards it."""
        self.output.emit_element(watermark)

    def process_status(self, status: StreamStatus, input_index: int = 0) -> None:
        """An input went IDLE or ACTIVE (M-W2); forwarded (combined over two inputs)."""
        if not self.two_input:
            self.output.emit_element(status)
            return
        for element in self._input_watermarks().input_status(status, input_index):
            if isinstance(element, Watermark):
                if element.timestamp > self.current_watermark:
                    self.note_watermark(element.timestamp)
                    self.advance_watermark(element)
            else:
                self.output.emit_element(element)

    def process_latency_marker(self, marker: LatencyMarker) -> None:
        """A latency marker reached the operator (end-to-end latency): forwarded at
        once, as Flink's operators forward theirs; sinks record it."""
        self.output.emit_element(marker)

    def _input_watermarks(self) -> Any:
        if self._combined is None:
            from ...time.valve import MultiInputWatermark

            self._combined = MultiInputWatermark(2)
        return self._combined

    # checkpoints (M-T1, M-T3, M-T4) ------------------------------------------------
    def prepare_snapshot_pre_barrier(self, checkpoint_id: int) -> None:
        """Emit what must precede the barrier of ``checkpoint_id`` (called before the
        barrier is forwarded)."""

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """The synchronous part of a snapshot: None (no state), a picklable value that
        later processing cannot change, or an object with ``materialize()`` (run in the
        background, returns the picklable state) and ``release()``."""
        return None

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed (every task acknowledged it)."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` was aborted."""

    def close(self) -> None:
        """Release resources. Always called, after ``finish`` or after a failure."""

    # helpers ---------------------------------------------------------------
    def user_error(self, error: BaseException) -> UserFunctionError:
        """``error`` wrapped with this operator's name and subtask; an error already
        wrapped (by an operator chained behind this one) keeps the operator it names."""
        if isinstance(error, UserFunctionError):
            return error
        return UserFunctionError(self.name, self.ctx.subtask_index, self.ctx.parallelism, error)

    def emit(self, batch: Batch) -> None:
        n = num_rows(batch)
        if n:
            self.counters.records_out += n
            self.output.emit(batch)


def open_function(obj: Any, ctx: RuntimeContext) -> None:
    """Call ``obj.open(ctx)`` for function objects that define it."""
    if isinstance(obj, PLAIN_CALLABLES):
        return
    opener = getattr(obj, "open", None)
    if callable(opener):
        opener(ctx)


def close_function(obj: Any) -> None:
    if isinstance(obj, PLAIN_CALLABLES):
        return
    closer = getattr(obj, "close", None)
    if callable(closer):
        closer()


def refusing_changes(op: StreamOperator) -> Any:
    """``op.process_batch`` behind a check that its batch holds only inserts: an
    operator without ``accepts_changes`` (windows, joins, rolling aggregates, async
    I/O, ...) would take an update or a delete for a new record, and its results would
    be wrong without a word. Costs a schema lookup per batch."""
    process = op.process_batch

    def process_batch(batch: Batch, input_index: int = 0) -> None:
        if has_changes(batch):
            kinds = kinds_of(batch)
            assert kinds is not None
            first = RowKind(int(kinds[np.flatnonzero(kinds)[0]]))
            raise ChangelogError(
                f"operator '{op.name}' ({type(op).__name__}) takes append-only input, but "
                f"a {first.short} ({first.name}) record reached it: its input is a "
                "changelog. Changelogs go through map, filter, flat_map, process, key_by, "
                "to_table/to_changelog/to_upserts, the changelog aggregate "
                "(key_by(...).aggregate(...)) and sinks that apply changes; keep only the "
                "rows as records with .kinds_to_field('op') first if that is what you mean"
            )
        process(batch, input_index)

    return process_batch

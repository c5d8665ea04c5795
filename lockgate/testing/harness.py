"""Drive one operator by hand, without a job: Flink's one- and two-input operator test
harnesses for lockgate.

A test builds a harness around a user function (or one of lockgate's operators), feeds
it records, watermarks and idleness, moves processing time with a manual clock, takes
snapshots and restores them (at another parallelism too), and reads what came out::

    from lockgate.testing import OperatorHarness

    h = OperatorHarness.for_keyed_process(CountPerKey(), key="user").open()
    h.process([{"user": "a"}, {"user": "a"}], timestamps=[1_000, 2_000])
    h.process_watermark(10_000)                  # fires event-time timers up to 10 s
    assert h.output == [...]
    snapshot = h.snapshot()                      # what a checkpoint would hold
    h2 = OperatorHarness.for_keyed_process(CountPerKey(), key="user").open(restored=snapshot)

Guarantees: the operator sees exactly the calls a task makes, in the same order
(``setup``, ``initialize_state``, ``open``, then batches, watermarks and processing-time
callbacks one at a time, ``finish``, ``close``); a snapshot goes through the same
encoding a checkpoint's state file does (:mod:`lockgate.checkpoint.state_tree`), so state
that would not survive a real checkpoint fails here too; a restore hands each subtask
the states of the old subtasks as a real restore does (key groups, operator list state
split, union state to all). Processing time moves only when the test says
(:meth:`OperatorHarness.advance_processing_time`); nothing sleeps.

The test thread is the subtask's task thread: an operator that hands work to the task's
mailbox (the async I/O operator's completions) has it run by :meth:`OperatorHarness.run_mails`
or :meth:`OperatorHarness.run_mails_until`, and when the operator itself waits for its
mailbox (a full queue, the end of input) the harness runs the actions the test queued
with :meth:`OperatorHarness.when_waiting`, one per turn, to let the wait end.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..api.async_stream import DEFAULT_CAPACITY
from ..checkpoint.state_tree import decode_tree, encode_tree
from ..core.batch import Batch, RowBatch, timestamps_of, to_rows
from ..core.clock import ManualClock
from ..core.elements import StreamStatus, Watermark
from ..core.partitioners import KeySelector
from ..errors import ConfigurationError
from ..runtime.context import RuntimeContext
from ..runtime.mailbox import Mailbox
from ..runtime.operators.async_io import AsyncWaitOperator
from ..runtime.operators.base import Output, RestoredState, StreamOperator
from ..runtime.operators.basic import FlatMapOperator, MapOperator, ProcessOperator
from ..runtime.operators.broadcast import BroadcastProcessOperator, KeyedBroadcastProcessOperator
from ..runtime.operators.co_process import (
    CoFlatMapOperator,
    CoMapOperator,
    CoProcessOperator,
    KeyedCoProcessOperator,
)
from ..runtime.operators.join.interval_join import IntervalJoinOperator
from ..runtime.operators.keyed import KeyedProcessOperator, tag_name
from ..runtime.operators.window.contents import (
    AggregateFunctionContents,
    BuiltinContents,
    ProcessContents,
    ReduceContents,
)
from ..runtime.operators.window.operator import WindowOperator
from ..runtime.processing_time import ProcessingTimeService
from ..state.backends import HashMapStateBackend, StateBackend
from ..state.descriptors import MapStateDescriptor
from ..windowing.aggregate_specs import WindowAggregate
from ..windowing.aggregates import WindowAggregation
from ..windowing.assigners import WindowAssigner

Key = str | Sequence[str] | Callable[[Any], Any]


@dataclass(frozen=True)
class OperatorSnapshot:
    """What one subtask's checkpoint held for the operator: its state as a checkpoint's
    state file encodes it, and the subtask and parallelism that wrote it."""

    subtask_index: int
    parallelism: int
    checkpoint_id: int
    #: the encoded state (None: the operator has no state)
    payload: bytes | None

    def state(self) -> Any:
        """The state the snapshot holds, decoded (None: the operator had none): what the
        operator restores from, to look into in a test."""
        if self.payload is None:
            return None
        return decode_tree(self.payload, where=f"the snapshot of subtask {self.subtask_index}")

    @classmethod
    def of_state(
        cls, state: Any, *, subtask_index: int = 0, parallelism: int = 1, checkpoint_id: int = 1
    ) -> OperatorSnapshot:
        """A snapshot holding ``state`` (as an operator's ``snapshot_state`` returns it,
        encoded as a state file holds it), to restore a state a test wrote by hand."""
        payload = None if state is None else encode_tree(state)
        return cls(subtask_index, parallelism, checkpoint_id, payload)


class PendingSnapshot:
    """A snapshot whose synchronous part ran (:meth:`OperatorHarness.begin_snapshot`):
    :meth:`complete` runs the asynchronous part, as a checkpoint does in the background
    while the operator goes on processing."""

    def __init__(self, view: Any, subtask_index: int, parallelism: int, checkpoint_id: int) -> None:
        self._view = view
        self._done: OperatorSnapshot | None = None
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.checkpoint_id = checkpoint_id

    def complete(self) -> OperatorSnapshot:
        """Materialize the state the synchronous part captured (later processing must
        not have changed it), release the operator's view and encode it. Once; later
        calls return the same snapshot."""
        if self._done is None:
            view, self._view = self._view, None
            payload = None
            if view is not None:
                materialize = getattr(view, "materialize", None)
                try:
                    state = materialize() if callable(materialize) else view
                finally:
                    release = getattr(view, "release", None)
                    if callable(release):
                        release()
                payload = encode_tree(state)
            self._done = OperatorSnapshot(
                self.subtask_index, self.parallelism, self.checkpoint_id, payload
            )
        return self._done


@dataclass(frozen=True)
class OutputBatch:
    """One batch the operator emitted, as :attr:`OperatorHarness.elements` lists it."""

    #: its records, as :attr:`OperatorHarness.output` gives them
    records: list[Any]
    #: their event timestamps (None: the batch carries none)
    timestamps: list[int] | None
    #: the side output's name, None for the main output
    tag: str | None
    #: the batch as the operator emitted it (an Arrow record batch or a row batch)
    batch: Batch


#: what :attr:`OperatorHarness.elements` holds: batches, watermarks and statuses
OutputElement = OutputBatch | Watermark | StreamStatus


class _Restore(RestoredState):
    """The :class:`~lockgate.runtime.operators.base.RestoredState` a restoring operator is
    given (as ``OperatorRestore`` gives it from a checkpoint), over in-memory snapshots."""

    def __init__(self, snapshots: list[OperatorSnapshot], subtask: int, parallelism: int) -> None:
        self._states = {s.subtask_index: s.payload for s in snapshots if s.payload is not None}
        self.subtask = subtask
        self.parallelism = parallelism

    @property
    def same_parallelism(self) -> bool:
        return set(self._states) == set(range(self.parallelism))

    def _load(self, subtask: int) -> Any:
        return decode_tree(self._states[subtask], where=f"the snapshot of subtask {subtask}")

    def own(self) -> Any:
        return self._load(self.subtask) if self.subtask in self._states else None

    def by_subtask(self) -> dict[int, Any]:
        return {j: self._load(j) for j in sorted(self._states)}

    def assigned(self) -> list[Any]:
        return [self._load(j) for j in sorted(self._states) if j % self.parallelism == self.subtask]

    def all(self) -> list[Any]:
        return [self._load(j) for j in sorted(self._states)]


class _Collected(Output):
    def __init__(self) -> None:
        self.records: list[Any] = []
        self.timestamps: list[int | None] = []
        self.side: dict[str, list[Any]] = {}
        self.side_timestamps: dict[str, list[int | None]] = {}
        self.watermarks: list[int] = []
        self.statuses: list[StreamStatus] = []
        self.elements: list[OutputElement] = []

    def emit(self, batch: Batch) -> None:
        rows, stamps = self._add(batch, None)
        self.records.extend(rows)
        self.timestamps.extend([None] * len(rows) if stamps is None else stamps)

    def emit_side(self, tag: str, batch: Batch) -> None:
        rows, stamps = self._add(batch, tag)
        self.side.setdefault(tag, []).extend(rows)
        self.side_timestamps.setdefault(tag, []).extend(
            [None] * len(rows) if stamps is None else stamps
        )

    def _add(self, batch: Batch, tag: str | None) -> tuple[list[Any], list[int] | None]:
        rows = to_rows(batch)
        array = timestamps_of(batch)
        stamps = None if array is None else [int(t) for t in array.tolist()]
        self.elements.append(OutputBatch(list(rows), stamps, tag, batch))
        return rows, stamps

    def emit_element(self, element: Any) -> None:
        if isinstance(element, Watermark):
            self.watermarks.append(element.timestamp)
            self.elements.append(element)
        elif isinstance(element, StreamStatus):
            self.statuses.append(element)
            self.elements.append(element)

    def clear(self) -> None:
        for collected in (
            self.records,
            self.timestamps,
            self.side,
            self.side_timestamps,
            self.watermarks,
            self.statuses,
            self.elements,
        ):
            collected.clear()


class OperatorHarness:
    """One operator, driven by hand (see the module docstring). Build it around a user
    function with a class method (``for_process``, ``for_keyed_process``,
    ``for_map``, ``for_flat_map``, ``for_co_process``, ``for_keyed_co_process``,
    ``for_co_map``, ``for_co_flat_map``, ``for_broadcast_process``,
    ``for_keyed_broadcast_process``, ``for_window``, ``for_interval_join``,
    ``for_async_wait``) or around any lockgate operator, then :meth:`open` it.

    ``wait_timeout_s``: how long :meth:`run_mails_until` (and an operator waiting for its
    mailbox) waits for the next mail before it fails the test with ``TimeoutError``."""

    def __init__(
        self,
        operator: StreamOperator,
        *,
        subtask_index: int = 0,
        parallelism: int = 1,
        max_parallelism: int = 128,
        state_backend: StateBackend | None = None,
        clock: ManualClock | None = None,
        attempt_number: int = 0,
        name: str = "operator",
        uid: str = "operator",
        wait_timeout_s: float = 5.0,
    ) -> None:
        if not isinstance(operator, StreamOperator):
            raise ConfigurationError(
                f"OperatorHarness drives a lockgate operator, got {operator!r}: build one "
                "from a function with OperatorHarness.for_process(fn), "
                ".for_keyed_process(fn, key=...), .for_map(fn), ..."
            )
        for what, value, low in (
            ("parallelism", parallelism, 1),
            ("max_parallelism", max_parallelism, 1),
            ("subtask_index", subtask_index, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigurationError(
                    f"OperatorHarness {what} must be an int >= {low}, got {value!r}"
                )
        if subtask_index >= parallelism:
            raise ConfigurationError(
                f"OperatorHarness subtask_index {subtask_index} is not below parallelism "
                f"{parallelism}"
            )
        if parallelism > max_parallelism:
            raise ConfigurationError(
                f"OperatorHarness parallelism {parallelism} is above max_parallelism "
                f"{max_parallelism}"
            )
        self.operator = operator
        #: processing time: moves only through :meth:`advance_processing_time`
        self.clock = clock if clock is not None else ManualClock()
        self._timers = ProcessingTimeService(self.clock)
        self.ctx = RuntimeContext(
            task_name=name,
            operator_name=name,
            operator_uid=uid,
            subtask_index=subtask_index,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            attempt_number=attempt_number,
            job_name="harness",
            clock=self.clock,
            state_backend=state_backend or HashMapStateBackend(),
            processing_time_service=self._timers,
        )
        # the task thread's mailbox: the test thread runs its mails
        self._signal = threading.Event()
        #: the subtask's mailbox (``ctx.mailbox``): actions other threads hand to the task
        self.mailbox = Mailbox(self._signal)
        self.ctx.mailbox = self.mailbox
        self.ctx.run_mail_until = self._wait_for_mail
        self._when_waiting: deque[Callable[[], None]] = deque()
        self._wait_timeout_s = float(wait_timeout_s)
        self._waits = 0
        self._mails_run = 0
        self._out = _Collected()
        self._name, self._uid = name, uid
        self._opened = False
        self._closed = False
        self._checkpoint_id = 0

    # -- building around a user function ----------------------------------------------
    @classmethod
    def for_process(cls, fn: Any, **options: Any) -> OperatorHarness:
        """A ``ProcessFunction`` (``stream.process(fn)``)."""
        return cls(ProcessOperator(fn), **options)

    @classmethod
    def for_keyed_process(cls, fn: Any, *, key: Key, **options: Any) -> OperatorHarness:
        """A ``KeyedProcessFunction`` on a stream keyed by ``key`` (a column, columns or a
        function, as ``key_by``): keyed state, timers, ``ctx.current_key``."""
        return cls(KeyedProcessOperator(fn, KeySelector(_key(key))), **options)

    @classmethod
    def for_map(cls, fn: Any, **options: Any) -> OperatorHarness:
        """A map function (``stream.map(fn)``)."""
        return cls(MapOperator(fn), **options)

    @classmethod
    def for_flat_map(cls, fn: Any, **options: Any) -> OperatorHarness:
        """A flat-map function (``stream.flat_map(fn)``)."""
        return cls(FlatMapOperator(fn), **options)

    @classmethod
    def for_co_map(cls, fn: Any, **options: Any) -> OperatorHarness:
        """A ``CoMapFunction`` of connected streams (inputs 1 and 2)."""
        return cls(CoMapOperator(fn), **options)

    @classmethod
    def for_co_flat_map(cls, fn: Any, **options: Any) -> OperatorHarness:
        """A ``CoFlatMapFunction`` of connected streams."""
        return cls(CoFlatMapOperator(fn), **options)

    @classmethod
    def for_co_process(cls, fn: Any, **options: Any) -> OperatorHarness:
        """A ``CoProcessFunction`` of connected streams."""
        return cls(CoProcessOperator(fn), **options)

    @classmethod
    def for_keyed_co_process(
        cls, fn: Any, *, key1: Key, key2: Key, **options: Any
    ) -> OperatorHarness:
        """A ``KeyedCoProcessFunction``: input 1 keyed by ``key1``, input 2 by ``key2``, one
        keyed state for both."""
        op = KeyedCoProcessOperator(fn, KeySelector(_key(key1)), KeySelector(_key(key2)))
        return cls(op, **options)

    @classmethod
    def for_broadcast_process(
        cls, fn: Any, descriptors: Sequence[MapStateDescriptor[Any]], **options: Any
    ) -> OperatorHarness:
        """A ``BroadcastProcessFunction`` (``stream.connect(broadcast).process(fn)``):
        input 1 is the data stream (``process_element``), input 2 the broadcast stream
        (``process_broadcast_element``), ``descriptors`` the broadcast states (those given
        to ``stream.broadcast``)."""
        return cls(BroadcastProcessOperator(fn, list(descriptors)), **options)

    @classmethod
    def for_keyed_broadcast_process(
        cls, fn: Any, descriptors: Sequence[MapStateDescriptor[Any]], *, key: Key, **options: Any
    ) -> OperatorHarness:
        """A ``KeyedBroadcastProcessFunction``: as :meth:`for_broadcast_process`, the data
        stream (input 1) keyed by ``key``."""
        op = KeyedBroadcastProcessOperator(fn, list(descriptors), KeySelector(_key(key)))
        return cls(op, **options)

    @classmethod
    def for_window(
        cls,
        assigner: WindowAssigner,
        *,
        key: Key,
        aggregate: Any = None,
        reduce: Any = None,
        process: Any = None,
        allowed_lateness: int = 0,
        late_tag: Any = None,
        **options: Any,
    ) -> OperatorHarness:
        """A keyed window (``stream.key_by(key).window(assigner)``) with exactly one of
        ``aggregate`` (``lg.agg`` aggregates, one or a list, or an ``lg.AggregateFunction``),
        ``reduce`` (``fn(a, b)`` or an ``lg.ReduceFunction``) or ``process`` (an
        ``lg.ProcessWindowFunction``); ``allowed_lateness`` in ms, ``late_tag`` the side
        output of late records (an ``lg.OutputTag`` or its name)."""
        given = [
            n
            for n, f in (("aggregate", aggregate), ("reduce", reduce), ("process", process))
            if f is not None
        ]
        if len(given) != 1:
            raise ConfigurationError(
                "OperatorHarness.for_window takes exactly one of aggregate=, reduce= or "
                f"process=, got {given or 'none'}"
            )
        contents: Any
        if process is not None:
            contents = ProcessContents(process)
        elif reduce is not None:
            contents = ReduceContents(reduce)
        else:
            aggregates = list(aggregate) if isinstance(aggregate, (list, tuple)) else [aggregate]
            if all(isinstance(a, WindowAggregate) for a in aggregates):
                contents = BuiltinContents(WindowAggregation(tuple(aggregates)))
            elif len(aggregates) == 1 and callable(getattr(aggregate, "add", None)):
                contents = AggregateFunctionContents(aggregate)
            else:
                raise ConfigurationError(
                    "OperatorHarness.for_window(aggregate=...) takes lg.agg aggregates or "
                    f"one lg.AggregateFunction, got {aggregate!r}"
                )
        tag = None if late_tag is None else tag_name(late_tag)
        op = WindowOperator(assigner, KeySelector(_key(key)), contents, allowed_lateness, tag)
        return cls(op, **options)

    @classmethod
    def for_interval_join(
        cls,
        lower: int,
        upper: int,
        *,
        key1: Key,
        key2: Key,
        fn: Any = None,
        lower_exclusive: bool = False,
        upper_exclusive: bool = False,
        suffixes: tuple[str, str] = ("_left", "_right"),
        late_tags: tuple[Any, Any] = (None, None),
        **options: Any,
    ) -> OperatorHarness:
        """An interval join (``left.key_by(key1).interval_join(right.key_by(key2))
        .between(lower, upper)``, bounds in ms, inclusive unless ``*_exclusive``): input
        1 is the left stream, input 2 the right. Without ``fn`` the vectorized join
        (column keys; clashing columns get ``suffixes``); with one, an
        ``lg.ProcessJoinFunction`` per pair. ``late_tags``: the side outputs of late left
        and right records (None: dropped and counted)."""
        lo, hi = int(lower) + bool(lower_exclusive), int(upper) - bool(upper_exclusive)
        tags = (
            None if late_tags[0] is None else tag_name(late_tags[0]),
            None if late_tags[1] is None else tag_name(late_tags[1]),
        )
        op = IntervalJoinOperator(
            KeySelector(_key(key1)), KeySelector(_key(key2)), lo, hi, fn, suffixes, tags
        )
        return cls(op, **options)

    @classmethod
    def for_async_wait(
        cls,
        fn: Any,
        *,
        timeout_ms: float,
        capacity: int = DEFAULT_CAPACITY,
        ordered: bool = True,
        **options: Any,
    ) -> OperatorHarness:
        """Async I/O (``AsyncDataStream.ordered_wait`` / ``unordered_wait`` with
        ``ordered=False``): ``fn`` an ``async def`` function or an ``lg.AsyncFunction``.
        Its requests run on an event loop thread of their own; their completions come
        back through the mailbox: run them with :meth:`run_mails` or
        :meth:`run_mails_until`, and queue what ends a wait of the operator (a full
        queue, :meth:`finish`) with :meth:`when_waiting`."""
        return cls(AsyncWaitOperator(fn, timeout_ms, capacity, ordered), **options)

    # -- lifecycle ---------------------------------------------------------------------
    def open(
        self, restored: OperatorSnapshot | Sequence[OperatorSnapshot] | None = None
    ) -> OperatorHarness:
        """Set the operator up, restore ``restored`` (one snapshot, or the snapshots of
        every old subtask: at another parallelism each subtask takes its share, as a real
        restore gives it) and open it. Returns the harness."""
        if self._opened:
            raise RuntimeError("OperatorHarness.open() was called already")
        snapshots = [restored] if isinstance(restored, OperatorSnapshot) else list(restored or [])
        bad = [s for s in snapshots if not isinstance(s, OperatorSnapshot)]
        if bad:
            raise ConfigurationError(
                f"OperatorHarness.open(restored=...) takes snapshots of harness.snapshot(), got "
                f"{bad[0]!r}"
            )
        self.operator.setup(self._name, self._uid, self.ctx, self._out)
        self.operator.initialize_state(
            _Restore(snapshots, self.ctx.subtask_index, self.ctx.parallelism) if snapshots else None
        )
        self.operator.open()
        self._opened = True
        if snapshots:
            self._checkpoint_id = max(s.checkpoint_id for s in snapshots)
        return self

    def finish(self) -> None:
        """The end of the input: the operator emits what it still holds (a bounded
        source's end; event-time timers fire only with :meth:`process_watermark`)."""
        self._check_open()
        self.operator.finish()

    def close(self) -> None:
        """Release the operator (always call it; also after a failure)."""
        if self._opened and not self._closed:
            self._closed = True
            try:
                self.operator.close()
            finally:
                self.mailbox.close()

    def __enter__(self) -> OperatorHarness:
        return self if self._opened else self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- input ---------------------------------------------------------------------------
    def process(
        self,
        records: Sequence[Any] | Batch,
        *,
        timestamps: Sequence[int] | None = None,
        input: int = 1,
    ) -> None:
        """Give the operator ``records`` (a list, or an Arrow record batch) as one batch
        at input ``input`` (1, or 2 for the second input of a two-input operator), with
        event ``timestamps`` (ms, one per record) when given."""
        self._check_open()
        index = self._input_index(input)
        if isinstance(records, (pa.RecordBatch, RowBatch)):
            if timestamps is not None:
                raise ConfigurationError(
                    "OperatorHarness.process(batch, timestamps=...): give the timestamps "
                    "with a list of records, or put them in the batch"
                )
            batch: Batch = records
        else:
            rows = list(records)
            stamps = None
            if timestamps is not None:
                stamps = np.asarray(list(timestamps), dtype=np.int64)
                if len(stamps) != len(rows):
                    raise ConfigurationError(
                        f"OperatorHarness.process: {len(rows)} records but {len(stamps)} "
                        "timestamps; give one timestamp per record"
                    )
            batch = RowBatch(rows, stamps)
        self.operator.process_batch(batch, index)

    def process_watermark(self, timestamp: int, *, input: int = 1) -> None:
        """A watermark reaches input ``input``: event-time timers and windows up to it fire."""
        self._check_open()
        self.operator.process_watermark(Watermark(int(timestamp)), self._input_index(input))

    def set_idle(self, idle: bool = True, *, input: int = 1) -> None:
        """Input ``input`` goes idle (or active again): it stops holding the watermark of a
        two-input operator back (M-W2)."""
        self._check_open()
        status = StreamStatus.IDLE if idle else StreamStatus.ACTIVE
        self.operator.process_status(status, self._input_index(input))

    def advance_processing_time(self, ms: int) -> int:
        """Move processing time ``ms`` forward and run every processing-time callback now
        due (timers, processing-time windows), in time order; returns how many ran."""
        self._check_open()
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise ConfigurationError(f"advance_processing_time takes ms >= 0, got {ms!r}")
        self.clock.advance(ms)
        return self._timers.fire_due()

    # -- the task thread's mailbox -----------------------------------------------------------
    def run_mails(self) -> int:
        """Run the mails queued now, oldest first (one turn of the task loop between
        batches); returns how many ran. A mail's exception (a failed async request) is
        raised here, as it fails the task."""
        self._check_open()
        ran = self.mailbox.run_pending()
        self._mails_run += ran
        return ran

    def run_mails_until(self, condition: Callable[[], bool]) -> None:
        """Run mails as they arrive (as the task loop does between batches) until
        ``condition()`` holds; fails with ``TimeoutError`` when no mail comes within
        ``wait_timeout_s``. Actions queued with :meth:`when_waiting` are not run: they
        are for the operator's own waits."""
        self._check_open()
        saved, self._when_waiting = self._when_waiting, deque()
        try:
            self._run_until(condition)
        finally:
            self._when_waiting = saved

    def when_waiting(self, *actions: Callable[[], None]) -> None:
        """Queue ``actions`` for the operator's next waits for its mailbox (a full
        queue, the end of input): each turn of such a wait runs the mails queued, then
        the next action (e.g. completing a request), then waits for a mail."""
        self._when_waiting.extend(actions)

    @property
    def actions_left(self) -> int:
        """How many actions queued with :meth:`when_waiting` did not run yet."""
        return len(self._when_waiting)

    @property
    def waits(self) -> int:
        """How often the operator waited for its mailbox (``ctx.run_mail_until``)."""
        return self._waits

    @property
    def mails_run(self) -> int:
        """How many mails ran so far (an async request's completion is one)."""
        return self._mails_run

    def _wait_for_mail(self, done: Callable[[], bool]) -> None:
        """``ctx.run_mail_until``: the operator waits in the task thread."""
        self._waits += 1
        self._run_until(done)

    def _run_until(self, done: Callable[[], bool]) -> None:
        while not done():
            self._signal.clear()
            self._mails_run += self.mailbox.run_pending()
            if done():
                return
            if self._when_waiting:
                self._when_waiting.popleft()()
            if not self._signal.wait(self._wait_timeout_s):
                raise TimeoutError(
                    f"OperatorHarness: waited {self._wait_timeout_s}s and no mail came "
                    f"(actions queued with when_waiting left: {len(self._when_waiting)})"
                )

    # -- checkpoints ---------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int | None = None) -> OperatorSnapshot:
        """Take a checkpoint's snapshot of the operator (id: the next one by default): what
        it emits before the barrier goes to the output, its state is encoded as a state
        file holds it."""
        return self.begin_snapshot(checkpoint_id).complete()

    def begin_snapshot(self, checkpoint_id: int | None = None) -> PendingSnapshot:
        """The synchronous part of a checkpoint's snapshot (id: the next one by default):
        the operator emits what must precede the barrier (``prepare_snapshot_pre_barrier``)
        and captures its state; :meth:`PendingSnapshot.complete` runs the asynchronous
        part later, so a test can go on processing in between (M-T3)."""
        self._check_open()
        cid = self._checkpoint_id + 1 if checkpoint_id is None else int(checkpoint_id)
        self._checkpoint_id = max(self._checkpoint_id, cid)
        self.operator.prepare_snapshot_pre_barrier(cid)
        view = self.operator.snapshot_state(cid)
        return PendingSnapshot(view, self.ctx.subtask_index, self.ctx.parallelism, cid)

    def notify_checkpoint_complete(self, checkpoint_id: int | None = None) -> None:
        """Checkpoint ``checkpoint_id`` (the last snapshot's by default) completed."""
        self._check_open()
        self.operator.notify_checkpoint_complete(
            self._checkpoint_id if checkpoint_id is None else int(checkpoint_id)
        )

    # -- output --------------------------------------------------------------------------
    @property
    def output(self) -> list[Any]:
        """Every record the operator emitted so far, in order."""
        return list(self._out.records)

    @property
    def timestamps(self) -> list[int | None]:
        """The event timestamp of each record of :attr:`output` (None: none)."""
        return list(self._out.timestamps)

    @property
    def watermarks(self) -> list[int]:
        """The watermarks the operator forwarded, in order."""
        return list(self._out.watermarks)

    @property
    def statuses(self) -> list[StreamStatus]:
        """The stream statuses (idle, active) the operator forwarded, in order."""
        return list(self._out.statuses)

    @property
    def elements(self) -> list[OutputElement]:
        """Everything the operator emitted, in order: each batch (main or side output)
        as an :class:`OutputBatch`, each ``Watermark`` and ``StreamStatus``."""
        return list(self._out.elements)

    @property
    def batches(self) -> list[Batch]:
        """The batches of the main output as the operator emitted them (their Arrow
        schemas, their column types), in order."""
        return [e.batch for e in self._out.elements if isinstance(e, OutputBatch) and e.tag is None]

    def side_output(self, tag: Any) -> list[Any]:
        """The records the operator sent to side output ``tag`` (an ``lg.OutputTag`` or
        its name), in order."""
        return list(self._out.side.get(tag_name(tag), []))

    def side_timestamps(self, tag: Any) -> list[int | None]:
        """The event timestamp of each record of :meth:`side_output` (None: none)."""
        return list(self._out.side_timestamps.get(tag_name(tag), []))

    def take_output(self) -> list[Any]:
        """:attr:`output`, and forget everything emitted so far (records, timestamps,
        side outputs, watermarks, statuses, elements)."""
        records = self.output
        self._out.clear()
        return records

    def take_elements(self) -> list[OutputElement]:
        """:attr:`elements`, and forget everything emitted so far."""
        elements = self.elements
        self._out.clear()
        return elements

    @property
    def next_processing_time(self) -> int | None:
        """When the next processing-time callback is due (ms; None: none is scheduled)."""
        return self._timers.next_time()

    # -- helpers -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if not self._opened:
            raise RuntimeError("call OperatorHarness.open() first")
        if self._closed:
            raise RuntimeError("this OperatorHarness is closed")

    def _input_index(self, input: int) -> int:
        inputs = 2 if self.operator.two_input else 1
        if input not in range(1, inputs + 1):
            raise ConfigurationError(
                f"input must be 1{' or 2' if inputs == 2 else ''} for "
                f"{type(self.operator).__name__}, got {input!r}"
            )
        return input - 1

    def __repr__(self) -> str:
        return (
            f"OperatorHarness({type(self.operator).__name__}, subtask "
            f"{self.ctx.subtask_index + 1}/{self.ctx.parallelism})"
        )


def _key(key: Any) -> Any:
    """``key`` as ``key_by`` takes it, or a ConfigurationError saying what to give."""
    if isinstance(key, str) and key:
        return key
    if isinstance(key, (list, tuple)) and key and all(isinstance(k, str) and k for k in key):
        return tuple(key)
    if callable(key) and not isinstance(key, type):
        return key
    raise ConfigurationError(
        f"key must be a column name, a list of column names or a function of the record "
        f"(as key_by takes it), got {key!r}"
    )

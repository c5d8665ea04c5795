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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..checkpoint.state_tree import decode_tree, encode_tree
from ..core.batch import Batch, RowBatch, timestamps_of, to_rows
from ..core.clock import ManualClock
from ..core.elements import StreamStatus, Watermark
from ..core.partitioners import KeySelector
from ..errors import ConfigurationError
from ..runtime.context import RuntimeContext
from ..runtime.operators.base import Output, StreamOperator
from ..runtime.operators.basic import FlatMapOperator, MapOperator, ProcessOperator
from ..runtime.operators.co_process import (
    CoFlatMapOperator,
    CoMapOperator,
    CoProcessOperator,
    KeyedCoProcessOperator,
)
from ..runtime.operators.keyed import KeyedProcessOperator, tag_name
from ..runtime.processing_time import ProcessingTimeService
from ..state.backends import HashMapStateBackend, StateBackend

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


class _Restore:
    """What a restoring operator is given (an ``OperatorRestore``), over snapshots."""

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
        self.watermarks: list[int] = []
        self.statuses: list[StreamStatus] = []

    def emit(self, batch: Batch) -> None:
        rows = to_rows(batch)
        self.records.extend(rows)
        stamps = timestamps_of(batch)
        self.timestamps.extend([None] * len(rows) if stamps is None else stamps.tolist())

    def emit_side(self, tag: str, batch: Batch) -> None:
        self.side.setdefault(tag, []).extend(to_rows(batch))

    def emit_element(self, element: Any) -> None:
        if isinstance(element, Watermark):
            self.watermarks.append(element.timestamp)
        elif isinstance(element, StreamStatus):
            self.statuses.append(element)


class OperatorHarness:
    """One operator, driven by hand (see the module docstring). Build it around one of
    user function with a class method (``for_process``, ``for_keyed_process``,
    ``for_map``, ``for_flat_map``, ``for_co_process``, ``for_keyed_co_process``,
    ``for_co_map``, ``for_co_flat_map``) or around any lockgate operator, then
    :meth:`open` it."""

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
            self.operator.close()

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

    # -- checkpoints ---------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int | None = None) -> OperatorSnapshot:
        """Take a checkpoint's snapshot of the operator (id: the next one by default): what
        it emits before the barrier goes to the output, its state is encoded as a state
        file holds it."""
        self._check_open()
        cid = self._checkpoint_id + 1 if checkpoint_id is None else int(checkpoint_id)
        self._checkpoint_id = max(self._checkpoint_id, cid)
        self.operator.prepare_snapshot_pre_barrier(cid)
        view = self.operator.snapshot_state(cid)
        payload = None
        if view is not None:
            materialize = getattr(view, "materialize", None)
            state = materialize() if callable(materialize) else view
            release = getattr(view, "release", None)
            if callable(release):
                release()
            payload = encode_tree(state)
        return OperatorSnapshot(self.ctx.subtask_index, self.ctx.parallelism, cid, payload)

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

    def side_output(self, tag: Any) -> list[Any]:
        """The records the operator sent to side output ``tag`` (an ``lg.OutputTag`` or
        its name), in order."""
        return list(self._out.side.get(tag_name(tag), []))

    def take_output(self) -> list[Any]:
        """:attr:`output`, and forget it (records, timestamps, side outputs, watermarks)."""
        records = self.output
        self._out.records.clear()
        self._out.timestamps.clear()
        self._out.side.clear()
        self._out.watermarks.clear()
        return records

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

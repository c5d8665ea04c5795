"""Stateless one-input operators: map, filter, flat_map, map_batches, process."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc

from ...core.batch import (
    NO_TIMESTAMP,
    SCALAR_COLUMN,
    Batch,
    RowBatch,
    is_scalar_schema,
    kinds_of,
    scalar_batch,
    timestamps_of,
    to_arrow,
    to_rows,
    user_view,
    with_kinds,
    with_timestamps,
)
from ...core.excerpt import excerpt
from ...core.row_kind import RowKind, changes_made
from ...core.user_functions import bind_function
from ...errors import ChangelogError
from ...state.operator_state import UNION, OperatorStateStore
from ...state.snapshot import OperatorStateSnapshot, payload_part
from .base import StreamOperator, close_function, open_function
from .changes import needs_kinds, output_kinds
from .element_context import ElementContext

#: results a flat_map/process function returns by mistake for one record
_SINGLE_RECORDS = (str, bytes, dict)


def single_record_error(method: str, result: object) -> TypeError:
    return TypeError(
        f"{method}() must return an iterable of records (or yield them), but returned a "
        f"{type(result).__name__} ({result!r:.80}); wrap a single record in a list"
    )


def not_iterable_error(
    method: str, result: object, record: object, origin: str = "the input record"
) -> TypeError:
    """The error for a flat_map/process result that cannot be iterated (an int, a
    float, ...), naming its type and value and the input record."""
    return TypeError(
        f"{method}() must return an iterable of records (or yield them), or None for no "
        f"records, but returned {type(result).__name__} {excerpt(result)} for {origin} "
        f"{excerpt(record)}; wrap a single record in a list"
    )


def is_iterable(value: object) -> bool:
    try:
        iter(value)  # type: ignore[call-overload]
    except TypeError:
        return False
    return True


def first_none(values: list[Any]) -> int:
    """The index of the first None in ``values`` (by identity), or -1.

    None is falsy, so one ``all()`` (a loop in C, a few ns a record) clears a batch of
    truthy records: the usual dicts, tuples and objects. Only a batch holding a falsy
    record (0, "", {}) or one whose truth is undefined (an array) is scanned by identity."""
    try:
        if all(values):
            return -1
    except Exception:  # noqa: BLE001 - e.g. a numpy array's truth: scan by identity
        pass
    for i, v in enumerate(values):
        if v is None:
            return i
    return -1


def none_result_error(record: object) -> TypeError:
    """The error for a map function that returned None for ``record``."""
    return TypeError(
        f"map() returned None for the input record {excerpt(record)}; a map function must "
        "return a record for every input record: use filter() to drop records, or "
        "flat_map() to return zero or more"
    )


class _FunctionOperator(StreamOperator):
    """An operator running a user function, with the function's operator state (and, in
    keyed subclasses, keyed state) restored before ``open`` and snapshotted as one
    payload (M-T4, :mod:`lockgate.state.snapshot`)."""

    method = "__call__"
    _restored: Any = None

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.function = fn
        self.call = bind_function(fn, self.method)

    def initialize_state(self, restored: Any) -> None:
        self._restored = restored

    def open(self) -> None:
        self.operator_state = OperatorStateStore(self.name)
        self.ctx._operator_state = self.operator_state
        restored, self._restored = self._restored, None
        if restored is not None:
            self.restore_state(restored)
        try:
            open_function(self.function, self.ctx)
        except Exception as e:
            raise self.user_error(e) from e

    def restore_state(self, restored: Any) -> None:
        """Take over the restored payloads (an ``OperatorRestore``); keyed operators
        extend this. At the same parallelism only the subtask's own payload is read,
        unless it holds union list state (which needs every old subtask's)."""
        ctx = self.ctx
        own = restored.own() if restored.same_parallelism else None
        states = {ctx.subtask_index: own}
        if own is None or _has_union(payload_part(own, "operator")):
            states = restored.by_subtask()
        self.operator_state.restore(
            {j: payload_part(s, "operator") for j, s in states.items()},
            ctx.subtask_index,
            ctx.parallelism,
            restored.same_parallelism,
        )

    def keyed_snapshot(self) -> Any:
        """The keyed backend's snapshot view, or None (no keyed state)."""
        return None

    def timers_snapshot(self) -> Any:
        """The timer service's snapshot view, or None (no timers)."""
        return None

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """Keyed state (a copy-on-write view) and copies of the operator state (M-T3)."""
        operator = None if self.operator_state.is_empty() else self.operator_state.snapshot()
        keyed = self.keyed_snapshot()
        timers = self.timers_snapshot()
        if keyed is None and operator is None and timers is None:
            return None
        return OperatorStateSnapshot(keyed, operator, timers=timers)

    def close(self) -> None:
        try:
            close_function(self.function)
        except Exception as e:
            raise self.user_error(e) from e


def _has_union(operator_states: Any) -> bool:
    return isinstance(operator_states, dict) and any(
        isinstance(e, dict) and e.get("mode") == UNION for e in operator_states.values()
    )


class MapOperator(_FunctionOperator):
    """One output record per input record: the function must return a value for every
    record, as in Flink. Returning None fails the job at this operator, naming it and the
    input record: use ``filter`` to drop records, ``flat_map`` for zero or more."""

    accepts_changes = True

    method = "map"

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        fn = self.call
        cancel = self.cancellation
        made = changes_made()
        try:
            # stop within one record, not one batch (the test costs ~5 ns a record)
            out = [fn(r) for r in rows if not cancel.requested]
        except Exception as e:
            raise self.user_error(e) from e
        cancel.check()
        missing = first_none(out)
        if missing >= 0:
            raise self.user_error(none_result_error(rows[missing]))
        kinds = kinds_of(batch)
        if needs_kinds(kinds, made):
            kinds = output_kinds(out, kinds, None, made)
        self.emit(RowBatch(out, timestamps_of(batch), kinds))


class FlatMapOperator(_FunctionOperator):
    """Zero or more output records per input record (the function returns an iterable)."""

    accepts_changes = True

    method = "flat_map"

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        fn = self.call
        out: list[Any] = []
        extend = out.extend
        timestamps = timestamps_of(batch)
        kinds = kinds_of(batch)
        counts = None if timestamps is None and kinds is None else [0] * len(rows)
        cancel = self.cancellation
        made = changes_made()
        try:
            for i, r in enumerate(rows):
                if cancel.requested:  # stop within one record, not one batch
                    break
                result = fn(r)
                if result is not None:
                    if isinstance(result, _SINGLE_RECORDS):
                        raise single_record_error("flat_map", result)
                    before = len(out)
                    try:
                        extend(result)
                    except TypeError:
                        if is_iterable(result):
                            raise
                        raise not_iterable_error("flat_map", result, r) from None
                    if counts is not None:
                        counts[i] = len(out) - before
        except Exception as e:
            raise self.user_error(e) from e
        cancel.check()
        if needs_kinds(kinds, made):
            kinds = output_kinds(out, kinds, counts, made)
        self.emit(RowBatch(out, repeat_timestamps(timestamps, counts), kinds))


def filter_by_expression(batch: pa.RecordBatch, expression: pc.Expression) -> pa.RecordBatch:
    """The rows of ``batch`` for which ``expression`` is true, in order.

    Same result as ``batch.filter(expression)``, which runs an Acero plan on Arrow's
    CPU thread pool; here the plan runs in the calling (task) thread, which costs a
    third as much per batch (a window operator's output can be many small batches)."""
    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration(
                "table_source", acero.TableSourceNodeOptions(pa.Table.from_batches([batch]))
            ),
            acero.Declaration("filter", acero.FilterNodeOptions(expression)),
        ]
    )
    table = plan.to_table(use_threads=False)
    if table.num_rows == 0:
        return batch.slice(0, 0)
    return table.combine_chunks().to_batches()[0]


class FilterOperator(_FunctionOperator):
    """Keeps records whose predicate is true. A ``pyarrow.compute.Expression``
    predicate is evaluated on whole batches."""

    accepts_changes = True

    method = "filter"

    def __init__(self, fn: Any) -> None:
        if isinstance(fn, pc.Expression):
            StreamOperator.__init__(self)
            self.function = None
            self.expression: pc.Expression | None = fn
        else:
            super().__init__(fn)
            self.expression = None

    def open(self) -> None:
        if self.expression is None:
            super().open()

    def close(self) -> None:
        if self.expression is None:
            super().close()

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """An expression filter holds no state: it snapshots nothing."""
        if self.expression is not None:
            return None
        return super().snapshot_state(checkpoint_id)

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        if self.expression is not None:
            try:
                arrow = to_arrow(batch, operator=f"filter '{self.name}'")
            except TypeError as e:
                raise self.user_error(e) from e
            self.counters.records_in += arrow.num_rows
            try:
                self.emit(filter_by_expression(arrow, self.expression))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                raise self.user_error(e) from e
            return
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        fn = self.call
        cancel = self.cancellation
        try:
            # stop within one record, not one batch (the test costs ~5 ns a record)
            mask = [bool(fn(r)) for r in rows if not cancel.requested]
        except Exception as e:
            raise self.user_error(e) from e
        cancel.check()
        if isinstance(batch, pa.RecordBatch):
            self.emit(batch.filter(pa.array(mask, type=pa.bool_())))
        else:
            timestamps = timestamps_of(batch)
            kinds = kinds_of(batch)
            keep_at = np.asarray(mask, bool)
            self.emit(
                RowBatch(
                    [r for r, keep in zip(rows, mask) if keep],
                    None if timestamps is None else timestamps[keep_at],
                    None if kinds is None else kinds[keep_at],
                )
            )


class MapBatchesOperator(_FunctionOperator):
    """Applies a function to whole ``pyarrow.RecordBatch``es (vectorized path).

    The function returns a ``RecordBatch``, a ``Table`` or ``None`` (no output).
    If the input held bare values and the result is a single column named
    ``value``, the result holds bare values too.
    """

    accepts_changes = True

    method = "map_batch"

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        try:
            arrow = to_arrow(batch, operator=f"map_batches '{self.name}'")
        except TypeError as e:
            raise self.user_error(e) from e
        self.counters.records_in += arrow.num_rows
        timestamps = timestamps_of(arrow)
        kinds = kinds_of(arrow)
        try:
            result = self.call(user_view(arrow))
        except Exception as e:
            raise self.user_error(e) from e
        if result is None:
            return
        if isinstance(result, pa.Table):
            result = result.combine_chunks().to_batches()
            result = result[0] if len(result) == 1 else pa.Table.from_batches(result)
        if kinds is not None:
            result = self._with_input_kinds(result, arrow.num_rows, kinds)
        if isinstance(result, pa.Table):
            for b in result.to_batches():
                self._emit_result(arrow, b, None)
        elif isinstance(result, pa.RecordBatch):
            # a result with one row per input row keeps the input's event timestamps
            same = timestamps is not None and result.num_rows == len(timestamps)
            self._emit_result(arrow, result, timestamps if same else None)
        else:
            raise self.user_error(
                TypeError(
                    f"map_batches functions must return a pyarrow.RecordBatch, a pyarrow.Table "
                    f"or None, got {type(result).__name__}"
                )
            )

    def _with_input_kinds(self, result: Any, rows: int, kinds: np.ndarray) -> Any:
        """The result of a function given a changelog batch: one row per input row keeps
        the input's kinds (row i is the change of input row i); any other shape loses
        what each row changes, which fails unless the input was all inserts."""
        if isinstance(result, pa.Table):
            result = pa.Table.from_batches(result.to_batches()).combine_chunks()
            if result.num_rows == rows:
                result = result.to_batches()[0] if rows else pa.RecordBatch.from_pylist([])
        if isinstance(result, pa.RecordBatch) and result.num_rows == rows:
            return with_kinds(result, kinds)
        if not np.any(kinds):
            return result
        first = RowKind(int(kinds[np.flatnonzero(kinds)[0]])).short
        raise ChangelogError(
            f"map_batches '{self.name}': the input is a changelog (a {first} record among "
            f"{rows}), and the function returned {getattr(result, 'num_rows', '?')} rows: "
            "a function over a changelog must return one row per input row (each keeps "
            "its input row's kind); to filter or reshape, turn the kinds into a field "
            "first (.kinds_to_field('op')) and back after (.kinds_from_field('op'))"
        )

    def _emit_result(
        self, source: pa.RecordBatch, result: pa.RecordBatch, timestamps: np.ndarray | None
    ) -> None:
        if (
            result.num_columns == 1
            and result.schema.names[0] == SCALAR_COLUMN
            and not is_scalar_schema(result.schema)
            and is_scalar_schema(source.schema)
        ):
            result = scalar_batch(result.column(0))
        if timestamps is not None:
            result = with_timestamps(result, timestamps)
        self.emit(result)


class ProcessOperator(_FunctionOperator):
    """A ``ProcessFunction`` on a non-keyed stream: ``process_element(value, ctx)``."""

    accepts_changes = True

    method = "process_element"

    def open(self) -> None:
        super().open()
        self.element_ctx = ElementContext(self, None)

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        fn = self.call
        ectx = self.element_ctx
        out: list[Any] = []
        extend = out.extend
        timestamps = timestamps_of(batch)
        kinds = kinds_of(batch)
        if timestamps is not None or kinds is not None:
            self.emit(process_timestamped(self, rows, timestamps, fn, ectx, kinds=kinds))
            return
        cancel = self.cancellation
        made = changes_made()
        try:
            for r in rows:
                if cancel.requested:  # stop within one record, not one batch
                    break
                result = fn(r, ectx)
                if result is not None:
                    if isinstance(result, _SINGLE_RECORDS):
                        raise single_record_error("process_element", result)
                    try:
                        extend(result)
                    except TypeError:
                        if is_iterable(result):
                            raise
                        raise not_iterable_error("process_element", result, r) from None
        except Exception as e:
            raise self.user_error(e) from e
        cancel.check()
        ectx.flush_side_outputs()
        self.emit(RowBatch(out, None, output_kinds(out, None, None, made)))


_INSERT = RowKind.INSERT
_KINDS = tuple(RowKind)


def process_timestamped(
    op: StreamOperator,
    rows: list[Any],
    timestamps: np.ndarray | None,
    fn: Any,
    ectx: Any,
    keys: list[Any] | None = None,
    backend: Any = None,
    kinds: np.ndarray | None = None,
) -> RowBatch:
    """The records of a batch with event timestamps or row kinds, one at a time:
    ``ctx.timestamp`` and ``ctx.kind`` are each record's, and each output record gets
    the timestamp and kind of the record it came from (a Change output its own kind).
    With ``keys``, the current key is set per record (keyed process functions)."""
    out: list[Any] = []
    counts = [0] * len(rows)
    cancel = op.cancellation
    made = changes_made()
    n = len(rows)
    stamps = [NO_TIMESTAMP] * n if timestamps is None else timestamps.tolist()  # ints, once
    kind_of = [0] * n if kinds is None else kinds.tolist()
    try:
        for i, (r, ts) in enumerate(zip(rows, stamps)):
            if cancel.requested:  # stop within one record, not one batch
                break
            ectx.timestamp = None if ts == NO_TIMESTAMP else ts
            ectx.kind = _KINDS[kind_of[i]]
            if keys is not None:
                k = keys[i]
                backend.current_key = k
                backend.current_timestamp = ectx.timestamp
                ectx.current_key = k
            result = fn(r, ectx)
            if result is not None:
                if isinstance(result, _SINGLE_RECORDS):
                    raise single_record_error("process_element", result)
                before = len(out)
                try:
                    out.extend(result)
                except TypeError:
                    if is_iterable(result):
                        raise
                    raise not_iterable_error("process_element", result, r) from None
                counts[i] = len(out) - before
    except Exception as e:
        raise op.user_error(e) from e
    finally:
        ectx.timestamp = None
        ectx.kind = _INSERT
        if backend is not None:
            backend.current_timestamp = None
    cancel.check()
    ectx.flush_side_outputs()
    out_kinds = output_kinds(out, kinds, counts, made) if needs_kinds(kinds, made) else None
    return RowBatch(out, repeat_timestamps(timestamps, counts), out_kinds)


def repeat_timestamps(timestamps: np.ndarray | None, counts: list[int] | None) -> np.ndarray | None:
    """Each record's timestamp repeated for each output it produced (flat_map, process)."""
    if timestamps is None or counts is None:
        return None
    return np.repeat(timestamps, counts)

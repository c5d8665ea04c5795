"""Stateless one-input operators: map, filter, flat_map, map_batches, process."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..batch import (
    Batch,
    RowBatch,
    SCALAR_COLUMN,
    is_scalar_schema,
    scalar_batch,
    to_arrow,
    to_rows,
)
from ...state.operator_state import UNION, OperatorStateStore
from ...state.snapshot import OperatorStateSnapshot, payload_part
from .base import StreamOperator, bind_function, close_function, open_function


#: results a flat_map/process function returns by mistake for one record
_SINGLE_RECORDS = (str, bytes, dict)


def single_record_error(method: str, result: object) -> TypeError:
    return TypeError(
        f"{method}() must return an iterable of records (or yield them), but returned a "
        f"{type(result).__name__} ({result!r:.80}); wrap a single record in a list"
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
            ctx.subtask_index, ctx.parallelism, restored.same_parallelism)

    def keyed_snapshot(self) -> Any:
        """The keyed backend's snapshot view, or None (no keyed state)."""
        return None

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """Keyed state (a copy-on-write view) and copies of the operator state (M-T3)."""
        operator = None if self.operator_state.is_empty() else self.operator_state.snapshot()
        keyed = self.keyed_snapshot()
        if keyed is None and operator is None:
            return None
        return OperatorStateSnapshot(keyed, operator)

    def close(self) -> None:
        try:
            close_function(self.function)
        except Exception as e:
            raise self.user_error(e) from e


def _has_union(operator_states: Any) -> bool:
    return isinstance(operator_states, dict) and any(
        isinstance(e, dict) and e.get("mode") == UNION for e in operator_states.values())


class MapOperator(_FunctionOperator):
    """One output record per input record."""

    method = "map"

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        fn = self.call
        try:
            out = [fn(r) for r in rows]
        except Exception as e:
            raise self.user_error(e) from e
        self.emit(RowBatch(out))


class FlatMapOperator(_FunctionOperator):
    """Zero or more output records per input record (the function returns an iterable)."""

    method = "flat_map"

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        fn = self.call
        out: list[Any] = []
        extend = out.extend
        try:
            for r in rows:
                result = fn(r)
                if result is not None:
                    if isinstance(result, _SINGLE_RECORDS):
                        raise single_record_error("flat_map", result)
                    extend(result)
        except Exception as e:
            raise self.user_error(e) from e
        self.emit(RowBatch(out))


class FilterOperator(_FunctionOperator):
    """Keeps records whose predicate is true. A ``pyarrow.compute.Expression``
    predicate is evaluated on whole batches."""

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

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        if self.expression is not None:
            try:
                arrow = to_arrow(batch, operator=f"filter '{self.name}'")
            except TypeError as e:
                raise self.user_error(e) from e
            self.counters.records_in += arrow.num_rows
            try:
                self.emit(arrow.filter(self.expression))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                raise self.user_error(e) from e
            return
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        fn = self.call
        try:
            mask = [bool(fn(r)) for r in rows]
        except Exception as e:
            raise self.user_error(e) from e
        if isinstance(batch, pa.RecordBatch):
            self.emit(batch.filter(pa.array(mask, type=pa.bool_())))
        else:
            self.emit(RowBatch([r for r, keep in zip(rows, mask) if keep]))


class MapBatchesOperator(_FunctionOperator):
    """Applies a function to whole ``pyarrow.RecordBatch``es (vectorized path).

    The function returns a ``RecordBatch``, a ``Table`` or ``None`` (no output).
    If the input held bare values and the result is a single column named
    ``value``, the result holds bare values too.
    """

    method = "map_batch"

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        try:
            arrow = to_arrow(batch, operator=f"map_batches '{self.name}'")
        except TypeError as e:
            raise self.user_error(e) from e
        self.counters.records_in += arrow.num_rows
        try:
            result = self.call(arrow)
        except Exception as e:
            raise self.user_error(e) from e
        if result is None:
            return
        if isinstance(result, pa.Table):
            for b in result.to_batches():
                self._emit_result(arrow, b)
        elif isinstance(result, pa.RecordBatch):
            self._emit_result(arrow, result)
        else:
            raise self.user_error(
                TypeError(
                    f"map_batches functions must return a pyarrow.RecordBatch, a pyarrow.Table "
                    f"or None, got {type(result).__name__}"
                )
            )

    def _emit_result(self, source: pa.RecordBatch, result: pa.RecordBatch) -> None:
        if (
            result.num_columns == 1
            and result.schema.names[0] == SCALAR_COLUMN
            and not is_scalar_schema(result.schema)
            and is_scalar_schema(source.schema)
        ):
            result = scalar_batch(result.column(0))
        self.emit(result)


class ProcessOperator(_FunctionOperator):
    """A ``ProcessFunction`` on a non-keyed stream: ``process_element(value, ctx)``."""

    method = "process_element"

    def open(self) -> None:
        super().open()
        from .keyed import ElementContext

        self.element_ctx = ElementContext(self, None)

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        fn = self.call
        ectx = self.element_ctx
        out: list[Any] = []
        extend = out.extend
        try:
            for r in rows:
                result = fn(r, ectx)
                if result is not None:
                    if isinstance(result, _SINGLE_RECORDS):
                        raise single_record_error("process_element", result)
                    extend(result)
        except Exception as e:
            raise self.user_error(e) from e
        ectx.flush_side_outputs()
        self.emit(RowBatch(out))

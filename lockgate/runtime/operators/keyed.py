"""The keyed process operator and the per-record context of process functions."""

from __future__ import annotations

from typing import Any

from ...errors import ConfigurationError
from ...graph.key_groups import key_group_range
from ...state.snapshot import keyed_parts
from ..batch import Batch, RowBatch, to_rows
from ..partitioners import KeySelector
from .base import StreamOperator
from .basic import _SINGLE_RECORDS, _FunctionOperator, single_record_error


def tag_name(tag: Any) -> str:
    name = getattr(tag, "name", tag)
    if not isinstance(name, str) or not name:
        raise ConfigurationError(
            f"a side output needs an lg.OutputTag('name') (or a non-empty string), got {tag!r}"
        )
    return name


class ElementContext:
    """The ``ctx`` of ``process_element(value, ctx)``: the current key, the record's
    timestamp and side outputs. Reused across records: do not keep it."""

    __slots__ = ("_operator", "current_key", "timestamp", "_side")

    def __init__(self, operator: StreamOperator, key: Any) -> None:
        self._operator = operator
        self.current_key = key
        self.timestamp: int | None = None
        self._side: dict[str, list[Any]] = {}

    def output(self, tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``tag`` (an ``lg.OutputTag``)."""
        self._side.setdefault(tag_name(tag), []).append(value)

    def timer_service(self) -> Any:
        raise NotImplementedError(
            f"operator '{self._operator.name}': timers are not available yet in this version "
            "of lockgate (they come with event-time support)"
        )

    def flush_side_outputs(self) -> None:
        if not self._side:
            return
        side, self._side = self._side, {}
        op = self._operator
        for name, rows in side.items():
            op.counters.side_out[name] = op.counters.side_out.get(name, 0) + len(rows)
            op.output.emit_side(name, RowBatch(rows))


class KeyedProcessOperator(_FunctionOperator):
    """Runs a ``KeyedProcessFunction`` with keyed state scoped to each record's key."""

    method = "process_element"

    def __init__(self, fn: Any, key_selector: KeySelector) -> None:
        super().__init__(fn)
        self.key_selector = key_selector

    def open(self) -> None:
        ctx = self.ctx
        self.backend = ctx.state_backend.create_keyed_backend(
            self.name, ctx.max_parallelism, clock=ctx.clock, subtask_index=ctx.subtask_index)
        ctx._keyed_backend = self.backend
        self.element_ctx = ElementContext(self, None)
        super().open()

    def restore_state(self, restored: Any) -> None:
        """Operator state as every function operator, then keyed state: at the same
        parallelism a subtask's own payload holds exactly its key groups; otherwise every
        old subtask's payload is read and filtered by key group (M-R1, M-R3, rescaling)."""
        super().restore_state(restored)
        payloads = [restored.own()] if restored.same_parallelism else restored.all()
        ctx = self.ctx
        self.backend.restore(
            keyed_parts(payloads),
            key_group_range(ctx.subtask_index, ctx.parallelism, ctx.max_parallelism))

    def keyed_snapshot(self) -> Any:
        """A copy-on-write view of the keyed state, grouped by key group (M-T3, M-T4)."""
        return self.backend.snapshot()

    def close(self) -> None:
        try:
            super().close()
        finally:
            backend = getattr(self, "backend", None)
            if backend is not None:
                backend.close()

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        try:
            keys = self.key_selector.keys(batch, rows)
        except Exception as e:
            raise self.user_error(e) from e
        backend = self.backend
        ectx = self.element_ctx
        fn = self.call
        out: list[Any] = []
        extend = out.extend
        try:
            for r, k in zip(rows, keys):
                backend.current_key = k
                ectx.current_key = k
                result = fn(r, ectx)
                if result is not None:
                    if isinstance(result, _SINGLE_RECORDS):
                        raise single_record_error("process_element", result)
                    extend(result)
        except Exception as e:
            raise self.user_error(e) from e
        ectx.flush_side_outputs()
        self.emit(RowBatch(out))

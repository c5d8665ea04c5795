"""The per-record context of process functions (``ctx`` of ``process_element``) and
side output tag names: shared by the keyed and the non-keyed process operators."""

from __future__ import annotations

from typing import Any

from ...core.batch import RowBatch
from ...core.row_kind import RowKind
from ...errors import ConfigurationError
from .base import StreamOperator


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

    __slots__ = ("_operator", "current_key", "timestamp", "kind", "_side", "_timers")

    def __init__(self, operator: StreamOperator, key: Any, timers: Any = None) -> None:
        self._operator = operator
        self.current_key = key
        self.timestamp: int | None = None
        #: the current record's :class:`~lockgate.core.row_kind.RowKind` (INSERT in an
        #: append-only stream, and in timers)
        self.kind: RowKind = RowKind.INSERT
        self._side: dict[str, list[Any]] = {}
        self._timers = timers

    def output(self, tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``tag`` (an ``lg.OutputTag``)."""
        self._side.setdefault(tag_name(tag), []).append(value)

    def timer_service(self) -> Any:
        """The current key's timers (keyed process functions): register event-time and
        processing-time timers; ``on_timer(timestamp, ctx)`` is called when they fire."""
        if self._timers is None:
            raise ConfigurationError(
                f"operator '{self._operator.name}': timers are for keyed process functions; "
                "apply the function after key_by(...), e.g. stream.key_by('k').process(fn) "
                "(connected streams: a.key_by(ka).connect(b.key_by(kb)).process(fn))"
            )
        return self._timers

    def flush_side_outputs(self) -> None:
        if not self._side:
            return
        side, self._side = self._side, {}
        op = self._operator
        for name, rows in side.items():
            op.counters.side_out[name] = op.counters.side_out.get(name, 0) + len(rows)
            op.output.emit_side(name, RowBatch(rows))

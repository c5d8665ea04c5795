"""Keyed functions over changelogs (:mod:`lockgate.core.row_kind`).

* :class:`LatestRowPerKey` (``changelog.to_table(key)``, ``upserts.to_changelog(key)``):
  keeps each key's latest row in keyed state and emits the changes that row went
  through, normalized: ``+I`` for a new key, ``-U`` old / ``+U`` new for a changed row,
  ``-D`` with the full old row for a delete; a row set again to what it was, or a delete
  or ``-U`` of a key it does not hold, emits nothing. An ``-U`` emits the old row as
  ``-U`` and forgets it, so the ``+U`` that follows comes out as ``+I`` (a key-changing
  update leaves nothing behind). So an upsert stream (``+U`` without ``-U``, a ``-D``
  holding only the key) becomes a full changelog (Flink's ``ChangelogNormalize``).
* :class:`ChangelogAggregate` (``changelog.key_by(k).aggregate(lg.agg.count(), ...)``):
  a group aggregate that retracts: an addition (``+I``, ``+U``) adds a row to its group,
  a retraction (``-U``, ``-D``) takes it back, and each change of a group's result goes
  out as a changelog (``+I`` first, then ``-U`` old / ``+U`` new, ``-D`` when the group
  has no row left). Supports ``count``, ``sum``, ``mean``, ``min``, ``max`` and
  ``count_distinct``; ``min``/``max``/``count_distinct`` keep each value's multiplicity
  so that a retraction of the current minimum finds the next one (Flink's
  ``MinWithRetractAggFunction``). ``first``, ``last`` and ``approx_count_distinct`` cannot
  retract and are refused when the job is built.

Both keep their state as keyed ``ValueState`` (checkpointed, rescaled with its key,
heap or RocksDB) and are exactly-once like any keyed state (M-T4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.row_kind import Change, RowKind
from ..errors import ConfigurationError, MalformedRecordError
from ..state.descriptors import ValueStateDescriptor
from ..windowing.aggregate_specs import WindowAggregate
from .functions import KeyedProcessFunction

_MINUS_U, _PLUS_U = RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER
_INSERT, _DELETE = RowKind.INSERT, RowKind.DELETE


class LatestRowPerKey(KeyedProcessFunction):
    """Each key's latest row, and the normalized changes of it (see the module)."""

    def open(self, ctx: Any) -> None:
        self.row = ctx.get_state(ValueStateDescriptor("latest row"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        before = self.row.value()
        kind = ctx.kind
        if kind.is_addition:
            if before is None:
                self.row.update(value)
                return (Change(_INSERT, value),)
            if before == value:
                return None
            self.row.update(value)
            return (Change(_MINUS_U, before), Change(_PLUS_U, value))
        if before is None:
            return None
        self.row.clear()
        return (Change(_MINUS_U if kind is _MINUS_U else _DELETE, before),)


RETRACTABLE = ("count", "sum", "mean", "min", "max", "count_distinct")


def check_retractable(aggregates: Sequence[WindowAggregate]) -> list[WindowAggregate]:
    """``aggregates`` if a changelog aggregate can take each back, else a
    ConfigurationError naming the one that cannot."""
    if not aggregates:
        raise ConfigurationError(
            "aggregate() needs at least one aggregate, e.g. lg.agg.count(), lg.agg.sum('v')"
        )
    names = set()
    for a in aggregates:
        if not isinstance(a, WindowAggregate):
            raise ConfigurationError(
                f"aggregate() takes lg.agg aggregates (lg.agg.count(), lg.agg.sum('v'), ...), "
                f"got {a!r}"
            )
        if a.kind not in RETRACTABLE:
            raise ConfigurationError(
                f"lg.agg.{a.kind} cannot take back a row an update or delete retracts; a "
                f"keyed aggregate over a changelog supports {', '.join(RETRACTABLE)}"
            )
        if a.name in names:
            raise ConfigurationError(f"two aggregates write the column {a.name!r}; name one")
        names.add(a.name)
    return list(aggregates)


class ChangelogAggregate(KeyedProcessFunction):
    """A group aggregate with retractions, emitting its results' changelog (see the
    module). ``key_fields`` name the key's fields in the output (the key_by columns)."""

    def __init__(self, aggregates: Sequence[WindowAggregate], key_fields: Sequence[str]) -> None:
        self.aggregates = check_retractable(aggregates)
        self.key_fields = tuple(key_fields)

    def open(self, ctx: Any) -> None:
        self.state = ctx.get_state(ValueStateDescriptor("changelog aggregate"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        if not isinstance(value, dict):
            raise MalformedRecordError(
                f"a changelog aggregate takes dict records, got {type(value).__name__} "
                f"{value!r:.80}",
                location="aggregate()",
                raw=value,
            )
        sign = 1 if ctx.kind.is_addition else -1
        held = self.state.value()
        acc: dict[str, Any]
        if held is None:
            if sign < 0:
                return None  # a retraction of a row this group never held: nothing
            acc = {"rows": 0, "aggs": [_empty(a.kind) for a in self.aggregates]}
        else:
            # a new value, never the stored one changed in place: a checkpoint taken
            # before this record may still hold that object (copy-on-write snapshots)
            acc = {"rows": held["rows"], "aggs": [_copy(slot) for slot in held["aggs"]]}
        before = self._result(acc, ctx.current_key) if acc["rows"] > 0 else None
        acc["rows"] += sign
        for a, slot in zip(self.aggregates, acc["aggs"]):
            _fold(a, slot, value, sign)
        if acc["rows"] <= 0:
            self.state.clear()
            return None if before is None else (Change(_DELETE, before),)
        self.state.update(acc)
        after = self._result(acc, ctx.current_key)
        if before is None:
            return (Change(_INSERT, after),)
        if after == before:
            return None
        return (Change(_MINUS_U, before), Change(_PLUS_U, after))

    def _result(self, acc: dict[str, Any], key: Any) -> dict[str, Any]:
        fields = self.key_fields
        out: dict[str, Any] = {fields[0]: key} if len(fields) == 1 else dict(zip(fields, key))
        for a, slot in zip(self.aggregates, acc["aggs"]):
            out[a.name] = _value(a.kind, slot)
        return out


def _empty(kind: str) -> Any:
    if kind in ("min", "max", "count_distinct"):
        return {}
    return [0, 0]  # count: [n, 0]; sum/mean: [total, non-null count]


def _copy(slot: Any) -> Any:
    return dict(slot) if isinstance(slot, dict) else list(slot)


def _fold(a: WindowAggregate, slot: Any, record: dict[str, Any], sign: int) -> None:
    if a.column is None:  # count() of rows
        slot[0] += sign
        return
    v = record.get(a.column)
    if v is None:
        return
    if a.kind == "count":
        slot[0] += sign
    elif a.kind in ("sum", "mean"):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise MalformedRecordError(
                f"lg.agg.{a.kind}({a.column!r}) needs numbers, got {v!r} in {record!r:.120}",
                location="aggregate()",
                raw=record,
            )
        slot[0] += sign * v
        slot[1] += sign
    else:  # min, max, count_distinct: a multiset
        n = slot.get(v, 0) + sign
        if n > 0:
            slot[v] = n
        else:
            slot.pop(v, None)


def _value(kind: str, slot: Any) -> Any:
    if kind == "count":
        return slot[0]
    if kind == "sum":
        return slot[0] if slot[1] else None
    if kind == "mean":
        return slot[0] / slot[1] if slot[1] else None
    if kind == "count_distinct":
        return len(slot)
    if not slot:
        return None
    return min(slot) if kind == "min" else max(slot)

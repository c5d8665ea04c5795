"""The rows ``(key, namespace, value)`` of one state, from the parts its subtasks wrote.

* keyed value / reducing / aggregating state: one row per key, the value (for
  aggregating state: the accumulator); keyed list state: the list; keyed map
  state: the dict. Values are stripped of their TTL wrappers
  (``lockgate.state.ttl.strip_ttl``). The rows of every subtask that wrote the state.
* operator list and union list state: one row per element, subtasks in order, key None.
* broadcast state: one row per map entry of the lowest subtask that wrote it (every
  subtask holds the same), key = the map key.
* raw state: one row per subtask, in order, key = the subtask index.

``namespace`` is None in every row (windows will add namespaces). Rows are sorted by
key when the keys are sortable; otherwise (mixed key types) they keep the order above
(subtasks in order, then key groups in order).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from .decode import StatePart
from .model import StateKind

#: one row of a state frame: (key, namespace, value)
Row = tuple[Any, Any, Any]


def state_rows(kind: StateKind, parts: list[tuple[int, StatePart]]) -> list[Row]:
    """The rows of a state of ``kind`` from ``(subtask, part)`` pairs (any order)."""
    ordered = sorted(parts, key=lambda p: p[0])
    if kind.keyed:
        strip = ttl_stripper()
        rows: list[Row] = []
        for _, part in ordered:
            key_groups: Mapping[Any, Mapping[Any, Any]] = part.data
            for key_group in sorted(key_groups):
                for key, stored in key_groups[key_group].items():
                    rows.append((key, None, strip(kind.value, stored)))
        return sorted_by_key(rows)
    if kind in (StateKind.OPERATOR_LIST, StateKind.UNION_LIST):
        return [(None, None, item) for _, part in ordered for item in part.data]
    if kind is StateKind.BROADCAST:
        if not ordered:
            return []
        entries: Mapping[Any, Any] = ordered[0][1].data
        return sorted_by_key([(key, None, value) for key, value in entries.items()])
    return [(subtask, None, part.data) for subtask, part in ordered]


def sorted_by_key(rows: list[Row]) -> list[Row]:
    """``rows`` sorted by key (stable), or unchanged when the keys cannot be compared."""
    try:
        return sorted(rows, key=lambda row: row[0])
    except (TypeError, ValueError):  # mixed types; numpy arrays refuse truth values
        return rows


def _identity(kind: str, stored: Any) -> Any:
    return stored


def ttl_stripper() -> Callable[[str, Any], Any]:
    """``lockgate.state.ttl.strip_ttl(kind, stored)`` (the user value of a stored keyed
    state value); the identity when that module does not exist (no state can hold TTL
    wrappers then)."""
    try:
        module = importlib.import_module("lockgate.state.ttl")
    except ModuleNotFoundError as e:
        if e.name != "lockgate.state.ttl":
            raise
        return _identity
    strip: Callable[[str, Any], Any] = module.strip_ttl
    return strip

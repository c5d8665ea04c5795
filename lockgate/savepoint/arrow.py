"""Rows ``(key, namespace, value)`` as a ``pyarrow.Table`` with inferred column types.

Arrow infers each column's type from the Python values, after two adjustments:

* a tuple becomes a struct with fields ``_1``, ``_2``, ... (a named tuple: its field
  names), so composite keys and tuple values are typed per position;
* the values of keyed map state become an Arrow ``map`` (key and item types inferred
  from every entry), not a struct named after the map's keys.

Values Arrow cannot type (mixed types in one column, custom classes, maps with
non-string keys outside map state, ...) raise :class:`StateConversionError` naming the
state and pointing to ``to_pandas()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from .errors import StateConversionError
from .model import StateKind
from .rows import Row

COLUMNS = ("key", "namespace", "value")


def rows_to_arrow(rows: list[Row], kind: StateKind, what: str) -> pa.Table:
    """The table of ``rows``; ``what`` names the state in errors."""
    keys = [_arrowable(row[0]) for row in rows]
    namespaces = [_arrowable(row[1]) for row in rows]
    values = [row[2] for row in rows]
    column = "key"
    try:
        key_array = pa.array(keys)
        column = "namespace"
        namespace_array = pa.array(namespaces)
        column = "value"
        value_array = (
            _map_array(values)
            if kind is StateKind.MAP
            else pa.array([_arrowable(v) for v in values])
        )
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        raise StateConversionError(
            f"{what}: its {column} column cannot be converted to an Arrow type ({e}); the "
            "values are Python objects Arrow cannot type (mixed types, custom classes, ...): "
            "use to_pandas() to get them as they are"
        ) from e
    return pa.Table.from_arrays([key_array, namespace_array, value_array], names=list(COLUMNS))


def _arrowable(value: Any) -> Any:
    """``value`` with tuples turned into dicts (structs) and containers walked."""
    if isinstance(value, tuple):
        fields = getattr(value, "_fields", None)
        names = list(fields) if fields is not None else [f"_{i + 1}" for i in range(len(value))]
        return {name: _arrowable(v) for name, v in zip(names, value)}
    if isinstance(value, list):
        return [_arrowable(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _arrowable(v) for k, v in value.items()}
    return value


def _map_array(values: list[Any]) -> pa.Array:
    """Dicts (or None) as an Arrow map array."""
    entries: list[list[tuple[Any, Any]] | None] = []
    for value in values:
        if value is None:
            entries.append(None)
        elif isinstance(value, Mapping):
            entries.append([(_arrowable(k), _arrowable(v)) for k, v in value.items()])
        else:
            raise TypeError(f"a map state value is a {type(value).__name__}, not a dict")
    map_keys = [k for entry in entries if entry for k, _ in entry]
    map_items = [v for entry in entries if entry for _, v in entry]
    key_type = pa.array(map_keys).type if map_keys else pa.string()
    item_type = pa.array(map_items).type if map_items else pa.null()
    return pa.array(entries, type=pa.map_(key_type, item_type))

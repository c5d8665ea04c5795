"""The key types of the two inputs of a join or keyed connect: made alike, or refused.

Key groups already route equal values of compatible key types alike: the stable hash
(:mod:`.key_hash`) hashes every integer width as int64 and ``string``,
``large_string`` and dictionary-encoded strings by their UTF-8 bytes, and keyed state
holds Python values (``1`` of an int32 column is ``1`` of an int64 one). Two places
still tell compatible types apart, and this module serves both:

* Arrow's hash join and column concatenation need the *same* Arrow type on both
  sides: :func:`canonical_key_columns` casts key columns (vectorized) to one type per
  kind - integers to ``int64``, floats to ``float64``, strings to ``string``, binary
  to ``binary``.
* Keys of different kinds (an integer and a string, an integer and a float) never
  match: ``1`` and ``"1"`` are different keys, and ``1`` and ``1.0`` hash to different
  key groups, so the join would silently produce nothing. :class:`KeyKindCheck`
  compares the kind each input's keys have (from the Arrow schema, or from the
  Python key of a batch's first record) and raises :class:`ConfigurationError`
  naming both keys, their types and how to fix it. A subtask checks once it has seen
  records of both inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigurationError

INTEGER, FLOAT, STRING, BINARY, BOOLEAN = "integer", "float", "string", "binary", "boolean"
#: the kinds compared across inputs (other types are left to the hash and state)
_KNOWN = frozenset({INTEGER, FLOAT, STRING, BINARY, BOOLEAN})


def arrow_kind(t: pa.DataType) -> str | None:
    """The kind of an Arrow key type (None: a type this check leaves alone)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_boolean(t):
        return BOOLEAN
    if pa.types.is_integer(t):
        return INTEGER
    if pa.types.is_floating(t):
        return FLOAT
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return STRING
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return BINARY
    return None


def python_kind(key: Any) -> str | None:
    """The kind of a Python key (None for None and types this check leaves alone)."""
    if isinstance(key, (bool, np.bool_)):
        return BOOLEAN
    if isinstance(key, (int, np.integer)):
        return INTEGER
    if isinstance(key, (float, np.floating)):
        return FLOAT
    if isinstance(key, str):
        return STRING
    if isinstance(key, bytes):
        return BINARY
    return None


def _canonical_type(t: pa.DataType) -> pa.DataType | None:
    kind = arrow_kind(t)
    if kind == INTEGER:
        return pa.int64()
    if kind == FLOAT:
        return pa.float64()
    if kind == STRING:
        return pa.string()
    if kind == BINARY:
        return pa.binary()
    return None


def canonical_key_column(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``column`` cast to its kind's one type (a vectorized cast; the column itself when
    it has that type already). uint64 values above the int64 range wrap, as the key
    hash treats them."""
    target = _canonical_type(column.type)
    if target is None or column.type == target:
        return column
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
        if column.type == target:
            return column
    return pc.cast(column, target, safe=not pa.types.is_uint64(column.type))


def canonical_key_columns(batch: pa.RecordBatch, columns: Sequence[str]) -> pa.RecordBatch:
    """``batch`` with its key ``columns`` cast by :func:`canonical_key_column` (the
    batch itself when none needs a cast)."""
    schema = batch.schema
    for c in columns:
        i = schema.get_field_index(c)
        if i < 0:
            continue
        column = batch.column(i)
        cast = canonical_key_column(column)
        if cast is not column:
            batch = batch.set_column(i, pa.field(c, cast.type), cast)
    return batch


def schema_kinds(schema: pa.Schema, columns: Sequence[str]) -> tuple[str | None, ...] | None:
    """The kinds of the key ``columns`` of ``schema`` (None if one is missing)."""
    kinds: list[str | None] = []
    for c in columns:
        i = schema.get_field_index(c)
        if i < 0:
            return None
        kinds.append(arrow_kind(schema.field(i).type))
    return tuple(kinds)


def key_kinds(key: Any) -> tuple[str | None, ...]:
    """The kinds of a Python key (one per component of a tuple key)."""
    if isinstance(key, tuple):
        return tuple(python_kind(k) for k in key)
    return (python_kind(key),)


class KeyKindCheck:
    """Remembers the key kinds seen on each input and refuses two that cannot match.

    ``what`` names the operator (``"interval join 'J'"``), ``keys`` describes each
    input's key (``("the left key column 'k'", "the right key column 'k'")``)."""

    def __init__(self, what: str, keys: tuple[str, str]) -> None:
        self.what = what
        self.keys = keys
        self.seen: list[tuple[str | None, ...] | None] = [None, None]
        self.types: list[str] = ["", ""]

    def observe(self, side: int, kinds: tuple[str | None, ...] | None, types: str = "") -> None:
        """Record ``kinds`` (with ``types``, the types as the user knows them) for input
        ``side``; raise if the other input's kinds cannot match them."""
        if kinds is None or not any(k in _KNOWN for k in kinds):
            return
        if self.seen[side] is None:
            self.seen[side] = kinds
            self.types[side] = types or ", ".join(str(k) for k in kinds)
        other = self.seen[1 - side]
        if other is None or len(other) != len(kinds):
            return
        for a, b in zip(kinds, other):
            if a in _KNOWN and b in _KNOWN and a != b:
                mine = types or ", ".join(str(k) for k in kinds)
                left, right = (
                    (mine, self.types[1 - side])
                    if side == 0
                    else (
                        self.types[1 - side],
                        mine,
                    )
                )
                raise ConfigurationError(
                    f"{self.what}: {self.keys[0]} is {left} but {self.keys[1]} is {right}; "
                    "keys of these types never match (equal-looking values are different "
                    "keys, so the join would produce nothing). Cast one side's key to the "
                    "other's type before the join, e.g. with map_batches(lambda b: "
                    "b.set_column(i, 'k', pyarrow.compute.cast(b['k'], pyarrow.int64()))) "
                    "or in a map; integer widths, and string/large_string/dictionary "
                    "strings, need no cast"
                )


def arrow_types(schema: pa.Schema, columns: Sequence[str]) -> str:
    """``"int32"`` / ``"(int32, string)"``: the key columns' types for a message."""
    names = [str(schema.field(c).type) for c in columns if schema.get_field_index(c) >= 0]
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def python_types(key: Any) -> str:
    """The Python type name(s) of a key for a message."""
    if isinstance(key, tuple):
        return f"({', '.join(type(k).__name__ for k in key)})"
    return type(key).__name__

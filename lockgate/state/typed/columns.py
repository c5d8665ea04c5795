"""Typed keyed state as Arrow columns: the layout of a typed state in a canonical
keyed snapshot (docs/savepoint_format.md).

One state is one Arrow IPC stream holding one table with the columns

* ``key_group`` (int32): the key group of the key;
* ``key``: the job's key, typed by Arrow (int64, string, ...; a tuple key is a struct
  of fields ``_0``, ``_1``, ...);
* ``value``: the stored form of the state for that key: the value (value, reducing and
  aggregating state), ``list<element>`` (list state) or ``map<user key, value>`` (map
  state); with time-to-live each value, element or map value is a
  ``struct<value, ttl_timestamp: int64>``.

The schema's metadata holds ``lockgate.typed_state`` (the layout version,
:data:`TYPED_STATE_LAYOUT`), ``kind``, ``ttl`` ("0"/"1"), ``key_encoding`` ("arrow" or
"tuple") and ``type`` (the descriptor's type, for people reading the file). Nothing in
it is code: reading runs no user code and imports nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...core.key_groups import key_groups_of_keys
from ..ttl import TtlValue
from .evolution import Evolution
from .types import (
    ListNode,
    MapNode,
    ScalarNode,
    StateType,
    StructField,
    StructNode,
    TypeNode,
    arrow_node,
)

#: the layout version of typed keyed state tables this lockgate writes and reads
TYPED_STATE_LAYOUT = 1
#: the key of the layout version in the schema metadata
LAYOUT_KEY = b"lockgate.typed_state"

_TTL_FIELD = "ttl_timestamp"


class TypedStateFormatError(ValueError):
    """A typed state table this lockgate cannot read (a newer layout, a broken file)."""


def _make_ttl(value: Any, ttl_timestamp: int) -> TtlValue:
    return TtlValue(value, ttl_timestamp)


def ttl_node(element: TypeNode) -> StructNode:
    """``struct<value, ttl_timestamp>`` around ``element``, read back as TtlValue."""
    return StructNode(
        [StructField("value", element), StructField(_TTL_FIELD, ScalarNode(pa.int64()))],
        f"ttl[{element.describe()}]",
        lambda v, name: v.value if name == "value" else v.timestamp,
        _make_ttl,
    )


def stored_node(kind: str, state_type: StateType, ttl: bool) -> TypeNode:
    """The node of one key's stored form of a state of ``kind``."""
    element: TypeNode = state_type.node
    if ttl:
        element = ttl_node(element)
    if kind == "list":
        return ListNode(element)
    if kind == "map":
        assert state_type.key is not None
        return MapNode(state_type.key, element)
    return element


def element_type(kind: str, value: pa.Field, ttl: bool) -> tuple[pa.DataType, bool]:
    """The element type (and its nullability) inside the stored ``value`` field of a
    state of ``kind``."""
    stored, nullable = value.type, value.nullable
    if kind == "list":
        nullable = stored.value_field.nullable
        stored = stored.value_type
    elif kind == "map":
        nullable = stored.item_field.nullable
        stored = stored.item_type
    if ttl:
        field = stored.field("value")
        return field.type, field.nullable
    return stored, nullable


# -- keys ---------------------------------------------------------------------------------------
def _keys_to_arrow(keys: list[Any]) -> tuple[pa.Array, str]:
    if keys and all(type(k) is tuple for k in keys):
        width = len(keys[0])
        if all(len(k) == width for k in keys):
            columns = [pa.array([k[i] for k in keys]) for i in range(width)]
            return pa.StructArray.from_arrays(columns, [f"_{i}" for i in range(width)]), "tuple"
    try:
        return pa.array(keys), "arrow"
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
        shown = ", ".join(repr(k) for k in keys[:3])
        raise TypeError(
            f"the keys of typed state must be values Arrow can type alike (int, str, float, "
            f"bool, bytes, or tuples of those), got {shown} ... ({e})"
        ) from None


def _keys_from_arrow(array: pa.Array, encoding: str) -> list[Any]:
    if encoding == "tuple":
        columns = [c.to_pylist() for c in array.flatten()]
        return list(zip(*columns))
    return array.to_pylist()


# -- encode ------------------------------------------------------------------------------------
def encode_state(
    kind: str,
    state_type: StateType,
    ttl: bool,
    key_groups: Mapping[int, Mapping[Any, Any]] | None,
    where: str,
    *,
    flat: tuple[list[Any], list[Any], int] | None = None,
) -> bytes:
    """The IPC bytes of one typed state's entries ``{key_group: {key: stored}}``, or of
    ``flat`` = ``(keys, stored, max_parallelism)`` (key groups computed here, vectorized);
    raises TypeError naming ``where`` and the first value that does not fit the type."""
    groups: Any
    keys: list[Any]
    stored: list[Any]
    if flat is not None:
        keys, stored, max_parallelism = flat
        groups = key_groups_of_keys(keys, max_parallelism).astype(np.int32)
    else:
        groups, keys, stored = [], [], []
        for kg, entries in (key_groups or {}).items():
            groups.extend([kg] * len(entries))
            keys.extend(entries.keys())
            stored.extend(entries.values())
    node = stored_node(kind, state_type, ttl)
    try:
        values = node.to_arrow(stored)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as e:
        raise TypeError(
            f"{where}: a value does not fit the state's declared type "
            f"{state_type.describe()}: {_first_misfit(node, keys, stored) or e}"
        ) from None
    if keys:
        key_array, encoding = _keys_to_arrow(keys)
    else:
        key_array, encoding = pa.nulls(0), "arrow"
    schema = pa.schema(
        [
            pa.field("key_group", pa.int32(), nullable=False),
            pa.field("key", key_array.type),
            pa.field("value", node.arrow, nullable=node.nullable),
        ],
        metadata=layout_metadata(kind, ttl, encoding, state_type.describe()),
    )
    table = pa.Table.from_arrays([pa.array(groups, pa.int32()), key_array, values], schema=schema)
    return table_bytes(table)


def layout_metadata(kind: str, ttl: bool, key_encoding: str, type_name: str) -> dict[bytes, bytes]:
    """The schema metadata of a typed state table (see the module docstring)."""
    return {
        LAYOUT_KEY: str(TYPED_STATE_LAYOUT).encode(),
        b"kind": kind.encode(),
        b"ttl": b"1" if ttl else b"0",
        b"key_encoding": key_encoding.encode(),
        b"type": type_name.encode(),
    }


def _first_misfit(node: TypeNode, keys: list[Any], stored: list[Any]) -> str | None:
    """``key ...: value ...`` of the first stored value that does not convert alone."""
    for key, value in zip(keys, stored):
        try:
            node.to_arrow([value])
        except Exception as e:  # noqa: BLE001 - named in the error being built
            return f"key {key!r} holds {value!r} ({e})"
    return None


#: typed state tables are written with their buffers compressed (zstd, level 1: fast)
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=1))


def table_bytes(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream, its buffers zstd-compressed."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


# -- decode ------------------------------------------------------------------------------------
class RestoredEntries:
    """The ``(key, stored)`` pairs of a restored typed state; ``canonical_keys``: the
    keys are already what the backends key by (no float in them: no NaN to unify)."""

    def __init__(self, keys: list[Any], values: list[Any], canonical_keys: bool) -> None:
        self.keys = keys
        self.values = values
        self.canonical_keys = canonical_keys

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return zip(self.keys, self.values)


def _no_floats(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return all(_no_floats(f.type) for f in t)
    return not pa.types.is_floating(t)


class TypedTable:
    """A typed state table read back: its kind, TTL flag, key encoding and rows."""

    def __init__(self, table: pa.Table, where: str) -> None:
        meta = table.schema.metadata or {}
        layout = meta.get(LAYOUT_KEY)
        if layout is None or not layout.isdigit():
            raise TypedStateFormatError(f"{where}: not a typed state table (no layout version)")
        if int(layout) > TYPED_STATE_LAYOUT:
            raise TypedStateFormatError(
                f"{where}: typed state layout {int(layout)} was written by a newer lockgate; "
                f"this one reads layout {TYPED_STATE_LAYOUT}"
            )
        self.table = table
        self.kind = meta.get(b"kind", b"").decode()
        self.ttl = meta.get(b"ttl") == b"1"
        self.key_encoding = meta.get(b"key_encoding", b"arrow").decode()
        self.type_name = meta.get(b"type", b"").decode()

    @property
    def stored_type(self) -> pa.DataType:
        return self.table.schema.field("value").type

    def element(self) -> tuple[pa.DataType, bool]:
        return element_type(self.kind, self.table.schema.field("value"), self.ttl)

    def __len__(self) -> int:
        return self.table.num_rows

    def for_key_groups(self, key_groups: range) -> TypedTable:
        column = self.table.column("key_group")
        mask = pc.and_(pc.greater_equal(column, key_groups.start), pc.less(column, key_groups.stop))
        filtered = TypedTable.__new__(TypedTable)
        filtered.__dict__.update(self.__dict__)
        filtered.table = self.table.filter(mask)
        return filtered

    def keys(self) -> list[Any]:
        return _keys_from_arrow(self.table.column("key").combine_chunks(), self.key_encoding)

    def entries(self, state_type: StateType, evolution: Evolution | None) -> RestoredEntries:
        """``(key, stored)`` per row, the values migrated by ``evolution`` and converted to
        ``state_type``'s Python values."""
        values = self.table.column("value").combine_chunks()
        if evolution is not None and evolution.changed:
            values = migrate_stored(values, self.kind, self.ttl, evolution)
        node = stored_node(self.kind, state_type, self.ttl)
        canonical = _no_floats(self.table.schema.field("key").type)
        return RestoredEntries(self.keys(), node.from_arrow(values), canonical)

    def writer_type(self) -> StateType:
        """The type the table was written with, as a :class:`StateType` whose structs
        read back as dicts (for readers that do not have the job's classes)."""
        element, nullable = self.element()
        key = arrow_node(self.stored_type.key_type) if self.kind == "map" else None
        return StateType(None, arrow_node(element, nullable), key)

    def grouped(self) -> dict[int, dict[Any, Any]]:
        """``{key_group: {key: stored}}`` with the values as :meth:`writer_type` reads
        them (TTL values as TtlValue)."""
        out: dict[int, dict[Any, Any]] = {}
        groups = self.table.column("key_group").to_pylist()
        for kg, (key, stored) in zip(groups, self.entries(self.writer_type(), None)):
            out.setdefault(kg, {})[key] = stored
        return out

    def concat(self, other: TypedTable) -> TypedTable:
        merged = TypedTable.__new__(TypedTable)
        merged.__dict__.update(self.__dict__)
        merged.table = pa.concat_tables([self.table, other.table.cast(self.table.schema)])
        return merged


def read_table(data: Any, where: str) -> TypedTable:
    """The typed state table in IPC bytes ``data``."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypedStateFormatError(
            f"{where}: typed state is a {type(data).__name__}, expected Arrow IPC bytes"
        )
    try:
        table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise TypedStateFormatError(
            f"{where}: typed state is not a readable Arrow stream ({e})"
        ) from None
    return TypedTable(table, where)


def migrate_stored(values: pa.Array, kind: str, ttl: bool, evolution: Evolution) -> pa.Array:
    """The stored column ``values`` with every element migrated by ``evolution``."""

    def elements(array: pa.Array) -> pa.Array:
        if not ttl:
            return evolution.migrate(array)
        value, stamp = array.flatten()
        return pa.StructArray.from_arrays(
            [evolution.migrate(value), stamp],
            fields=[
                pa.field("value", evolution.reader.arrow, nullable=evolution.reader.nullable),
                array.type.field(_TTL_FIELD),
            ],
        )

    if kind == "list":
        return pa.ListArray.from_arrays(values.offsets, elements(values.values))
    if kind == "map":
        return pa.MapArray.from_arrays(values.offsets, values.keys, elements(values.items))
    return elements(values)


__all__ = [
    "TYPED_STATE_LAYOUT",
    "TypedStateFormatError",
    "TypedTable",
    "encode_state",
    "element_type",
    "migrate_stored",
    "read_table",
    "stored_node",
    "table_bytes",
]

"""Flat Avro records encoded straight from an Arrow batch's columns, in compiled passes:
the fast path of ``KafkaSink(format="avro", ...)`` for Arrow batches.

The general path makes a dict per record (``to_pylist``) and encodes each with
fastavro's ``schemaless_writer``; for flat records that takes most of a sink's time.
:func:`encode_avro_columns` gives exactly the same bytes (the framed values
``wire.frame(schema_id, schemaless_writer(record))``, a test compares the two on
generated batches) for a batch whose columns map one-to-one, by name, onto the
top-level fields of a record schema of these types, each alone or in a union with
``null`` (``["null", T]`` or ``[T, "null"]``), written in the schema's field order:

- ``boolean`` from bool; ``int`` from int8, int16, int32, uint8, uint16; ``long`` from
  int8 to int64 and uint8 to uint32;
- ``long`` with ``logicalType`` ``timestamp-millis`` from int64 or a timestamp with a
  time zone in seconds or milliseconds; ``timestamp-micros`` from int64 or a timestamp
  with a time zone in microseconds (a timestamp without a time zone is taken as local
  time by fastavro: not here);
- ``float`` from float32; ``double`` from float64; ``string`` from (large) string;
  ``bytes`` from (large) binary.

Anything else (another field type, a column the schema lacks or a field without its
column, another Arrow type, a null in a field that takes none, a timestamp outside
Python's datetimes, invalid UTF-8) makes :func:`encode_avro_columns` return None: the
caller then encodes the batch record by record, with that path's errors (which name the
record's position).

Each batch is encoded in two compiled passes: each record's encoded size, then, into
one buffer of the sum, its bytes (header, union branches, zigzag varints, little-endian
IEEE floats, length-prefixed strings); the records are then the buffer's slices.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...core.batch import is_scalar_schema, user_view
from ..compiled import inline, kernel

#: what a field's values are written as
_BOOL, _VARINT, _FLOAT, _DOUBLE, _BYTES = range(5)
_BOOLEAN_TYPES = (pa.bool_(),)
_INT_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16())
_LONG_TYPES = (*_INT_TYPES, pa.int64(), pa.uint32())
#: per Avro type: (kind, the Arrow types taken)
_PRIMITIVES: dict[str, tuple[int, tuple[pa.DataType, ...]]] = {
    "boolean": (_BOOL, _BOOLEAN_TYPES),
    "int": (_VARINT, _INT_TYPES),
    "long": (_VARINT, _LONG_TYPES),
    "float": (_FLOAT, (pa.float32(),)),
    "double": (_DOUBLE, (pa.float64(),)),
    "string": (_BYTES, (pa.string(), pa.large_string())),
    "bytes": (_BYTES, (pa.binary(), pa.large_binary())),
}
#: per timestamp logical type: the units of a time-zoned timestamp column taken, and
#: the factor to the type's unit
_TIMESTAMP_UNITS = {
    "timestamp-millis": {"s": 1000, "ms": 1},
    "timestamp-micros": {"us": 1},
}
#: the range of a time-zoned timestamp Python's datetimes hold in any time zone (the
#: general path converts each to a datetime first), in microseconds since the epoch,
#: with a day's margin at each end
_DATETIME_MIN_US = -62135596800 * 10**6 + 86400 * 10**6
_DATETIME_MAX_US = 253402300799 * 10**6 - 86400 * 10**6


@inline
def _varint_size(value: int) -> int:  # pragma: no cover - compiled
    """The bytes of ``value``'s zigzag varint."""
    z = np.uint64((value << 1) ^ (value >> 63))
    size = 1
    while z >= np.uint64(0x80):
        z >>= np.uint64(7)
        size += 1
    return size


@inline
def _put_varint(out: np.ndarray, p: int, value: int) -> int:  # pragma: no cover - compiled
    """``value``'s zigzag varint written at ``p``; the position after it."""
    z = np.uint64((value << 1) ^ (value >> 63))
    while z >= np.uint64(0x80):
        out[p] = np.uint8((z & np.uint64(0x7F)) | np.uint64(0x80))
        z >>= np.uint64(7)
        p += 1
    out[p] = np.uint8(z)
    return p + 1


@kernel
def _sizes(
    kinds: np.ndarray, null_branch: np.ndarray, ints: np.ndarray, spans: np.ndarray,
    valid: np.ndarray, sizes: np.ndarray,
) -> None:  # fmt: skip  # pragma: no cover - compiled
    """Each record's framed size into ``sizes``: the 5 header bytes and its fields."""
    fields = len(kinds)
    for i in range(len(sizes)):
        size = 5
        for f in range(fields):
            if null_branch[f] >= 0:
                size += 1  # a branch index of 0 or 1: one byte
                if valid[f, i] == 0:
                    continue
            kind = kinds[f]
            if kind == 0:
                size += 1
            elif kind == 1:
                size += _varint_size(ints[f, i])
            elif kind == 2:
                size += 4
            elif kind == 3:
                size += 8
            else:
                size += _varint_size(spans[f, i]) + spans[f, i]
        sizes[i] = size


@kernel
def _write(
    kinds: np.ndarray, null_branch: np.ndarray, ints: np.ndarray, spans: np.ndarray,
    valid: np.ndarray, data: np.ndarray, header: np.ndarray, offsets: np.ndarray,
    out: np.ndarray,
) -> None:  # fmt: skip  # pragma: no cover - compiled
    """Each record framed at ``out[offsets[i]:offsets[i + 1]]``: ``header``, then each
    field (its union branch, then its value: a boolean's byte, a zigzag varint, the
    little-endian bits of a float or double in ``ints``, or the length and bytes of
    ``data[ints[f, i] : ints[f, i] + spans[f, i]]``)."""
    fields = len(kinds)
    for i in range(len(offsets) - 1):
        p = offsets[i]
        for h in range(5):
            out[p + h] = header[h]
        p += 5
        for f in range(fields):
            branch = null_branch[f]
            if branch >= 0:
                if valid[f, i] == 0:
                    out[p] = np.uint8(2 * branch)  # the zigzag varint of 0 or 1
                    p += 1
                    continue
                out[p] = np.uint8(2 * (1 - branch))
                p += 1
            kind = kinds[f]
            value = ints[f, i]
            if kind == 0:
                out[p] = np.uint8(value)
                p += 1
            elif kind == 1:
                p = _put_varint(out, p, value)
            elif kind == 2 or kind == 3:
                size = 4 if kind == 2 else 8
                for k in range(size):
                    out[p + k] = np.uint8((value >> (8 * k)) & 0xFF)
                p += size
            else:
                length = spans[f, i]
                p = _put_varint(out, p, length)
                for k in range(length):
                    out[p + k] = data[value + k]
                p += length


def _field_plan(t: Any) -> tuple[int, int, tuple[pa.DataType, ...], str | None] | None:
    """``(kind, null branch or -1, Arrow types taken, timestamp logical type)`` of a
    record field's Avro type, or None when it is not encoded here."""
    branch = -1
    if isinstance(t, list):
        if len(t) != 2 or "null" not in t or t[0] == t[1]:
            return None
        branch = t.index("null")
        t = t[1 - branch]
    logical = None
    if isinstance(t, dict):
        logical = t.get("logicalType")
        t = t.get("type")
        if logical is not None and not (t == "long" and logical in _TIMESTAMP_UNITS):
            return None
    if not isinstance(t, str) or t not in _PRIMITIVES:
        return None
    kind, types = _PRIMITIVES[t]
    return kind, branch, types, logical


class AvroColumnsWriter:
    """Encodes Arrow batches against one Avro schema (as parsed JSON) a column at a
    time, when the module docstring allows. Picklable."""

    def __init__(self, schema: Any) -> None:
        #: per field: (name, kind, null branch, Arrow types, logical type); None when
        #: the schema is not a flat record of the types encoded here
        self.fields: list[tuple[str, int, int, tuple[pa.DataType, ...], str | None]] | None
        self.fields = None
        if not isinstance(schema, dict) or schema.get("type") != "record":
            return
        fields = schema.get("fields")
        if not isinstance(fields, list) or not fields:
            return
        plan = []
        for field in fields:
            found = _field_plan(field.get("type")) if isinstance(field, dict) else None
            name = field.get("name") if isinstance(field, dict) else None
            if found is None or not isinstance(name, str):
                return
            plan.append((name, *found))
        if len({name for name, *_ in plan}) != len(plan):
            return
        self.fields = plan
        self.kinds = np.array([f[1] for f in plan], dtype=np.int64)
        self.null_branch = np.array([f[2] for f in plan], dtype=np.int64)

    def encode(self, batch: pa.RecordBatch, schema_id: int) -> list[bytes] | None:
        """Each record of ``batch`` framed with ``schema_id`` (magic byte 0, the id's 4
        bytes big-endian, the Avro binary encoding), or None (see the module
        docstring)."""
        if self.fields is None or batch.num_rows == 0 or is_scalar_schema(batch.schema):
            return None
        view = user_view(batch)
        assert isinstance(view, pa.RecordBatch)
        names = view.schema.names
        if len(names) != len(self.fields) or len(set(names)) != len(names):
            return None
        n = view.num_rows
        count = len(self.fields)
        ints = np.zeros((count, n), dtype=np.int64)
        spans = np.zeros((count, n), dtype=np.int64)
        valid = np.ones((count, n), dtype=np.uint8)
        data: list[np.ndarray] = []
        base = 0
        for f, (name, kind, branch, types, logical) in enumerate(self.fields):
            index = view.schema.get_field_index(name)
            if index < 0:
                return None
            column = view.column(index)
            if column.null_count:
                if branch < 0:
                    return None  # the record-by-record path names the record
                valid[f] = column.is_valid().to_numpy(zero_copy_only=False)
            if kind == _BYTES:
                if column.type not in types:
                    return None
                if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                    try:
                        column.validate(full=True)  # UTF-8, as a Python str holds
                    except pa.ArrowInvalid:
                        return None
                starts, lengths, values = _binary_parts(column)
                ints[f] = starts + base
                spans[f] = lengths
                data.append(values)
                base += len(values)
            else:
                numbers = _numbers(column, kind, types, logical)
                if numbers is None:
                    return None
                ints[f] = numbers
        sizes = np.empty(n, dtype=np.int64)
        _sizes(self.kinds, self.null_branch, ints, spans, valid, sizes)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        out = np.empty(int(offsets[-1]), dtype=np.uint8)
        header = np.frombuffer(struct.pack(">bI", 0, schema_id), dtype=np.uint8)
        joined = (
            np.concatenate(data) if len(data) > 1 else data[0] if data else np.zeros(1, np.uint8)
        )
        _write(self.kinds, self.null_branch, ints, spans, valid, joined, header, offsets, out)
        values = pa.Array.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out)]
        )
        result: list[bytes] = values.to_pylist()
        return result


def _binary_parts(column: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A (large) string or binary column's value starts and lengths (int64) in its data
    buffer, and that buffer's bytes."""
    wide = pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type)
    _, offsets_buffer, data_buffer = column.buffers()
    n = len(column)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32)
    offsets = offsets[column.offset : column.offset + n + 1].astype(np.int64)
    values = (
        np.zeros(0, dtype=np.uint8)
        if data_buffer is None
        else np.frombuffer(data_buffer, dtype=np.uint8)
    )
    return offsets[:-1], np.diff(offsets), values


def _numbers(
    column: pa.Array, kind: int, types: tuple[pa.DataType, ...], logical: str | None
) -> np.ndarray | None:
    """A numeric or boolean column's values as int64 (a float's or double's bits, a
    timestamp in its logical type's unit; 0 for a null), or None when the column's type
    is not the field's."""
    kind_of = column.type
    if pa.types.is_timestamp(kind_of) and logical is not None:
        factor = _TIMESTAMP_UNITS[logical].get(kind_of.unit)
        if factor is None or kind_of.tz is None:
            return None
        values = pc.fill_null(column.cast(pa.int64()), 0).to_numpy().astype(np.int64)
        to_us = 10**6 if kind_of.unit == "s" else 1000 if kind_of.unit == "ms" else 1
        if len(values) and (
            int(values.min()) * to_us < _DATETIME_MIN_US
            or int(values.max()) * to_us > _DATETIME_MAX_US
        ):
            return None
        return values * factor
    if logical is not None and kind_of != pa.int64():
        return None
    if kind_of not in types:
        return None
    if kind == _BOOL:
        return pc.fill_null(column, False).to_numpy(zero_copy_only=False).astype(np.int64)
    filled = pc.fill_null(column, 0).to_numpy()
    if kind == _FLOAT:
        # through a double and back, as the record path goes (Arrow gives a Python
        # float, fastavro writes it as a C float): a signalling NaN is quietened
        with np.errstate(invalid="ignore"):
            quiet = filled.astype(np.float64).astype(np.float32)
        return quiet.view(np.int32).astype(np.int64)
    if kind == _DOUBLE:
        return filled.view(np.int64)
    return filled.astype(np.int64)


def encode_avro_columns(schema: Any, batch: pa.RecordBatch, schema_id: int) -> list[bytes] | None:
    """``batch``'s records encoded against ``schema`` (parsed Avro JSON) and framed with
    ``schema_id``, or None (see the module docstring). Builds the plan each call: keep
    an :class:`AvroColumnsWriter` for repeated use."""
    return AvroColumnsWriter(schema).encode(batch, schema_id)

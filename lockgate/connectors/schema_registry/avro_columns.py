"""Flat Avro records decoded straight from fetched bytes into Arrow columns, in one
compiled pass: the fast path of ``KafkaSource(format="avro", schema=...)``.

fastavro makes a dict per record, and pyarrow then a column of them: about ten times
the time of the JSON path's compiled reader (:mod:`lockgate.connectors.formats.flat_json`).
:class:`AvroColumnsReader` reads the records of one writer schema whose top-level fields
are all of the types below, and gives exactly the columns the general path gives
(fastavro's records through ``pa.RecordBatch.from_pylist``; a test compares the two):

- ``boolean``, ``int``, ``long`` (``timestamp-millis``/``-micros`` too), ``float``,
  ``double``, ``string``, ``bytes`` and ``enum``, each alone or in a union with
  ``null``;
- a column takes a field of its natural type only: int -> int32 or int64; long ->
  int64, or a UTC timestamp of its logical type's unit; float -> float32; double ->
  float64; string and enum -> string; bytes -> binary; boolean -> bool;
- a column the writer's schema lacks takes the reader schema's default (resolved as
  :func:`.avro_read.resolution_plan` allows) or, without a reader schema, nulls.

Anything else (another field type, a value that does not decode, or leaves bytes after
its record, an enum index out of range, invalid UTF-8, a tombstone, values of several
schema ids) makes :meth:`AvroColumnsReader.read` return None: the caller then decodes
the batch the general way, with its errors and dead letters.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..compiled import inline, kernel

_BOOL, _INT, _LONG, _FLOAT, _DOUBLE, _STRING, _BYTES, _ENUM = range(8)
_PRIMITIVES = {
    "boolean": _BOOL,
    "int": _INT,
    "long": _LONG,
    "float": _FLOAT,
    "double": _DOUBLE,
    "string": _STRING,
    "bytes": _BYTES,
}
_NATURAL = {
    _BOOL: (pa.bool_(),),
    _INT: (pa.int32(), pa.int64()),
    _LONG: (pa.int64(),),
    _FLOAT: (pa.float32(),),
    _DOUBLE: (pa.float64(),),
    _STRING: (pa.string(),),
    _BYTES: (pa.binary(),),
    _ENUM: (pa.string(),),
}
_TIMESTAMPS = {
    "timestamp-millis": pa.timestamp("ms", tz="UTC"),
    "timestamp-micros": pa.timestamp("us", tz="UTC"),
}


@inline
def _varint(buf: np.ndarray, p: int, end: int) -> tuple[int, int]:  # pragma: no cover - compiled
    """The zigzag varint at ``p`` and the position after it; position -1 when cut short
    or longer than 10 bytes."""
    result = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(10):
        if p >= end:
            return 0, -1
        b = np.uint64(buf[p])
        p += 1
        result |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            value = np.int64(result >> np.uint64(1)) ^ -np.int64(result & np.uint64(1))
            return value, p
        shift += np.uint64(7)
    return 0, -1


@kernel
def _decode(  # noqa: C901 (one branch per field kind, in one compiled loop)
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, kinds: np.ndarray,
    null_branch: np.ndarray, symbols: np.ndarray, ints: np.ndarray, spans: np.ndarray,
    valid: np.ndarray,
) -> int:  # fmt: skip  # pragma: no cover - compiled
    """Each record at ``buf[starts[i] + 5 : starts[i] + lengths[i]]`` decoded field by
    field: numbers (and a float's or double's bits) into ``ints``, a string's start
    into ``ints`` and length into ``spans``, ``valid`` 0 for a null; the index of the
    first record that does not decode, or -1."""
    n = len(starts)
    fields = len(kinds)
    for i in range(n):
        p = starts[i] + 5
        end = starts[i] + lengths[i]
        for f in range(fields):
            if null_branch[f] >= 0:
                branch, p = _varint(buf, p, end)
                if p < 0:
                    return i
                if branch == null_branch[f]:
                    valid[f, i] = 0
                    continue
                if branch != 1 - null_branch[f]:
                    return i
            valid[f, i] = 1
            kind = kinds[f]
            if kind == 0:  # boolean
                if p >= end or buf[p] > 1:
                    return i
                ints[f, i] = buf[p]
                p += 1
            elif kind == 1 or kind == 2 or kind == 7:  # int, long, enum index
                value, p = _varint(buf, p, end)
                if p < 0:
                    return i
                if kind == 7 and (value < 0 or value >= symbols[f]):
                    return i
                ints[f, i] = value
            elif kind == 3 or kind == 4:  # float, double: their little-endian bits
                size = 4 if kind == 3 else 8
                if size > end - p:
                    return i
                bits = np.int64(0)
                for k in range(size):
                    bits |= np.int64(buf[p + k]) << np.int64(8 * k)
                ints[f, i] = bits
                p += size
            else:  # string, bytes
                size, p = _varint(buf, p, end)
                # never p + size > end: a length near 2**63 wraps it and the reads
                # past the buffer crash the process
                if p < 0 or size < 0 or size > end - p:
                    return i
                ints[f, i] = p
                spans[f, i] = size
                p += size
        if p != end:
            return i
    return -1


def _field_kind(t: Any) -> tuple[int, int, int, str | None, list[str] | None] | None:
    """``(kind, null branch or -1, symbols, logical type, enum symbols)`` of a writer
    field's type, or None when this module does not read it."""
    branch = -1
    if isinstance(t, list):
        if len(t) != 2 or "null" not in t:
            return None
        branch = t.index("null")
        t = t[1 - branch]
    if isinstance(t, str):
        kind = _PRIMITIVES.get(t)
        return None if kind is None else (kind, branch, 0, None, None)
    if not isinstance(t, dict):
        return None
    if t.get("type") == "enum":
        symbols = list(t["symbols"])
        return _ENUM, branch, len(symbols), None, symbols
    kind = _PRIMITIVES.get(t.get("type"))  # type: ignore[arg-type]
    logical = t.get("logicalType")
    if kind is None or (logical is not None and not (kind == _LONG and logical in _TIMESTAMPS)):
        return None
    return kind, branch, 0, logical, None


class AvroColumnsReader:
    """Decodes records of one (parsed) writer schema into ``schema``'s columns in one
    compiled pass, when this module's docstring allows; ``plan``: the resolution to the
    reader schema (:func:`.avro_read.resolution_plan`; ``((), ())`` without one) and
    ``resolved`` whether a reader schema is given."""

    def __init__(self, writer: Any, plan: Any, resolved: bool, schema: pa.Schema) -> None:
        self.schema = schema
        self.usable = (
            isinstance(writer, dict) and writer.get("type") == "record" and plan is not None
        )
        fields = writer.get("fields", []) if isinstance(writer, dict) else []
        self.kinds = np.zeros(len(fields), dtype=np.int64)
        self.null_branch = np.full(len(fields), -1, dtype=np.int64)
        self.symbols = np.zeros(len(fields), dtype=np.int64)
        #: per column: ("field", index, enum symbols or None, target type) or ("const", value)
        self.columns: list[tuple[Any, ...]] = []
        if not self.usable:
            return
        index = {}
        logical: list[str | None] = []
        enums: list[list[str] | None] = []
        for i, f in enumerate(fields):
            found = _field_kind(f["type"])
            if found is None:
                self.usable = False
                return
            kind, branch, count, lt, symbols = found
            self.kinds[i], self.null_branch[i], self.symbols[i] = kind, branch, count
            logical.append(lt)
            enums.append(symbols)
            index[f["name"]] = i
        dropped, added = plan
        defaults = dict(added)
        for column in schema:
            at = index.get(column.name)
            if at is not None and column.name not in dropped:
                i = at
                kind = int(self.kinds[i])
                lt = logical[i]
                natural = _NATURAL[kind] if lt is None else (_TIMESTAMPS[lt],)
                if column.type not in natural:
                    self.usable = False
                    return
                self.columns.append(("field", i, enums[i], column.type))
            elif column.name in defaults:
                try:
                    value = pa.array([defaults[column.name]], type=column.type)
                except (pa.ArrowException, TypeError, ValueError, OverflowError):
                    self.usable = False
                    return
                self.columns.append(("const", value))
            elif not resolved or column.name not in index:
                self.columns.append(("const", pa.nulls(1, column.type)))
            else:
                self.usable = False
                return

    def read(self, buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Table | None:
        """The records at ``buffer[starts[i] : starts[i] + lengths[i]]`` (framed: the
        caller checked that each holds this reader's schema id) as a table of the
        schema's columns, or None (see the module docstring)."""
        n = len(starts)
        if not self.usable or n == 0 or int(lengths.min()) < 5:
            return None
        if int(starts.min()) < 0 or int((starts + lengths).max()) > len(buffer):
            # the kernel does not check its reads: a value outside the buffer is a bug
            raise ValueError("AvroColumnsReader.read: a value lies outside the buffer")
        fields = len(self.kinds)
        ints = np.zeros((fields, n), dtype=np.int64)
        spans = np.zeros((fields, n), dtype=np.int64)
        valid = np.zeros((fields, n), dtype=np.uint8)
        if _decode(buffer, starts, lengths, self.kinds, self.null_branch, self.symbols, ints,
                   spans, valid) >= 0:  # fmt: skip
            return None
        from ..formats.flat_json import _strings

        arrays = []
        for column in self.columns:
            if column[0] == "const":
                arrays.append(column[1].take(np.zeros(n, dtype=np.int64)))
                continue
            _, i, symbols, target = column
            present = valid[i] == 1
            everything = bool(present.all())
            mask = None if everything else ~present
            kind = int(self.kinds[i])
            if kind in (_STRING, _BYTES):
                strings = _strings(buffer, ints[i], spans[i], present, everything)
                if strings is None:
                    return None
                if kind == _BYTES:
                    strings = strings.view(pa.binary())
                else:
                    try:
                        strings.validate(full=True)  # UTF-8, as fastavro decodes it
                    except pa.ArrowInvalid:
                        return None
                arrays.append(strings)
            elif kind == _ENUM:
                indices = pa.array(ints[i].astype(np.int32), mask=mask)
                arrays.append(
                    pa.DictionaryArray.from_arrays(indices, pa.array(symbols, pa.string())).cast(
                        pa.string()
                    )
                )
            elif kind == _FLOAT:
                values = ints[i].astype(np.uint32).view(np.float32)
                arrays.append(pa.array(values, pa.float32(), mask=mask))
            elif kind == _DOUBLE:
                arrays.append(pa.array(ints[i].view(np.float64), pa.float64(), mask=mask))
            elif kind == _BOOL:
                arrays.append(pa.array(ints[i] != 0, pa.bool_(), mask=mask))
            else:
                try:
                    arrays.append(pa.array(ints[i], pa.int64(), mask=mask).cast(target, safe=True))
                except (pa.ArrowException, OverflowError):
                    return None
        return pa.Table.from_arrays(arrays, schema=self.schema)

"""PostgreSQL column values, as their text output, into typed Arrow columns.

Both ways a row reaches the source - pgoutput's tuple data (protocol 1 sends every value
as its type's text output) and the initial snapshot's ``SELECT column::text`` - give the
same text, produced by the same output functions under the same session settings
(:data:`SESSION_OPTIONS`), so one conversion serves both and a row has the same Arrow
types whichever way it came.

=====================================  ==========================================
PostgreSQL                              Arrow
=====================================  ==========================================
smallint, integer, bigint, oid          int16, int32, int64, int64
real, double precision                  float32, float64 (NaN, +-Infinity kept)
numeric(p, s) with p <= 38              decimal128(p, s)
numeric without a precision, or > 38    string (the exact text: no rounding)
boolean                                 bool
text, varchar, char, name, uuid, enum   string
json, jsonb                             string (the JSON text)
timestamp                               timestamp[us]
timestamp with time zone                timestamp[us, UTC]
date                                    date32
time                                    time64[us]
bytea                                   binary
one-dimensional arrays of the above     list<element> (nested arrays: strings)
anything else (interval, ranges ...)    string (the text output)
=====================================  ==========================================

A value Arrow cannot hold (``infinity`` timestamps, years before 1 or after 9999) fails
with :class:`ValueConversionError` naming the column and the value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ....core.state_records import state_record

#: session settings of every connection of the source: the text output of dates,
#: timestamps, floats and bytea depends on them
SESSION_OPTIONS = (
    "-c DateStyle=ISO,MDY -c TimeZone=UTC -c IntervalStyle=postgres "
    "-c extra_float_digits=3 -c bytea_output=hex"
)

BOOL, BYTEA, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 19, 20, 21, 23, 25, 26
JSON, FLOAT4, FLOAT8, BPCHAR, VARCHAR, DATE, TIME = 114, 700, 701, 1042, 1043, 1082, 1083
TIMESTAMP, TIMESTAMPTZ, NUMERIC, UUID, JSONB = 1114, 1184, 1700, 2950, 3802

_SCALARS: dict[int, pa.DataType] = {
    BOOL: pa.bool_(),
    BYTEA: pa.binary(),
    INT2: pa.int16(),
    INT4: pa.int32(),
    INT8: pa.int64(),
    OID: pa.int64(),
    FLOAT4: pa.float32(),
    FLOAT8: pa.float64(),
    DATE: pa.date32(),
    TIME: pa.time64("us"),
    TIMESTAMP: pa.timestamp("us"),
    TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
}
#: integer key types: the initial snapshot splits a table into key ranges on these
INTEGER_TYPES = frozenset({INT2, INT4, INT8})


class ValueConversionError(ValueError):
    """A column's value that its Arrow type cannot hold."""


@state_record("postgres_cdc.column")
@dataclass(frozen=True)
class Column:
    """One column of a replicated table: its name, type OID and type modifier (-1: none),
    whether it is part of the replica identity key, and the element type OID when it is
    an array (0 otherwise)."""

    name: str
    type_oid: int
    type_mod: int = -1
    key: bool = False
    element_oid: int = 0

    def same_shape(self, other: Column) -> bool:
        """Same name and type (the key flag aside)."""
        return (self.name, self.type_oid, self.type_mod) == (
            other.name,
            other.type_oid,
            other.type_mod,
        )


def numeric_precision(type_mod: int) -> tuple[int, int] | None:
    """``(precision, scale)`` of a ``numeric(p, s)`` type modifier, None without one."""
    if type_mod < 4:
        return None
    mod = type_mod - 4
    precision, scale = (mod >> 16) & 0xFFFF, mod & 0xFFFF
    if scale > 0x7FF:  # negative scales (PostgreSQL 15) are stored as 11-bit two's complement
        scale -= 0x800
    return precision, scale


def arrow_type(column: Column) -> pa.DataType:
    """The Arrow type a column's values become."""
    if column.element_oid:
        return pa.list_(_scalar_type(column.element_oid, -1))
    return _scalar_type(column.type_oid, column.type_mod)


def _scalar_type(oid: int, type_mod: int) -> pa.DataType:
    if oid == NUMERIC:
        ps = numeric_precision(type_mod)
        if ps is not None and 1 <= ps[0] <= 38 and 0 <= ps[1] <= ps[0]:
            return pa.decimal128(ps[0], ps[1])
        return pa.string()
    return _SCALARS.get(oid, pa.string())


def to_arrow(column: Column, values: Sequence[str | None]) -> pa.Array:
    """The text outputs ``values`` (None: SQL NULL) of ``column`` as an Arrow array of
    :func:`arrow_type`; raises :class:`ValueConversionError` naming the column."""
    target = arrow_type(column)
    try:
        if column.element_oid:
            element = Column(column.name, column.element_oid)
            return pa.array(
                [None if v is None else _array_items(v, element) for v in values], type=target
            )
        return _scalars(column, target, values)
    except ValueConversionError:
        raise
    except (ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError) as e:
        bad = _first_bad(column, target, values)
        raise ValueConversionError(
            f"column {column.name!r} (type oid {column.type_oid}): value {bad!r} does not fit "
            f"Arrow {target} ({e})"
        ) from e


def text_to_arrow(column: Column, text: pa.Array) -> pa.Array:
    """:func:`to_arrow` of the values of a string array (None: SQL NULL): the same
    array, or the same error. Strings, booleans, numbers, decimals, dates and timestamps
    convert in Arrow without a Python object per value (the conversion :func:`to_arrow`
    itself applies after making such a string array); the other types, and any failure,
    go through :func:`to_arrow`."""
    target = arrow_type(column)
    if column.element_oid or _per_value(target):
        return to_arrow(column, text.to_pylist())
    try:
        return _typed(column, target, text)
    except ValueConversionError:
        raise
    except (ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
        return to_arrow(column, text.to_pylist())  # raises the error naming the value


def _per_value(target: pa.DataType) -> bool:
    """Whether values of ``target`` are converted one Python object at a time."""
    return pa.types.is_binary(target) or pa.types.is_time64(target)


def _scalars(column: Column, target: pa.DataType, values: Sequence[str | None]) -> pa.Array:
    if pa.types.is_binary(target):
        return pa.array([None if v is None else _bytea(v) for v in values], type=target)
    if pa.types.is_time64(target):
        return pa.array([None if v is None else dt.time.fromisoformat(v) for v in values], target)
    return _typed(column, target, pa.array(values, type=pa.string()))


def _typed(column: Column, target: pa.DataType, text: pa.Array) -> pa.Array:
    """A string array as ``target`` (not binary nor time: :func:`_per_value`)."""
    if pa.types.is_string(target):
        return text
    if pa.types.is_boolean(target):
        return pc.equal(text, "t")
    if pa.types.is_timestamp(target):
        infinite = pc.or_(pc.ends_with(text, "infinity"), pc.ends_with(text, "BC"))
        if pc.any(infinite).as_py():
            bad = text.filter(pc.fill_null(infinite, False))[0].as_py()
            raise ValueConversionError(
                f"column {column.name!r}: timestamp {bad!r} has no Arrow value (Arrow "
                "timestamps hold years 1 to 9999)"
            )
        if target.tz is not None:  # PostgreSQL writes "+00"; Arrow wants "+00:00" or "Z"
            if pc.all(pc.ends_with(text, "+00")).as_py():  # TimeZone=UTC: every value
                # the same instants, without a regex per value: UTC wall times
                naive = pc.utf8_slice_codeunits(text, 0, -3).cast(pa.timestamp(target.unit))
                return naive.cast(target)
            text = pc.replace_substring_regex(text, r"([+-]\d\d)$", r"\1:00")
    return text.cast(target)


def _bytea(text: str) -> bytes:
    if not text.startswith("\\x"):
        raise ValueError(f"bytea not in hex output: {text[:20]!r}")
    return bytes.fromhex(text[2:])


def _first_bad(column: Column, target: pa.DataType, values: Sequence[str | None]) -> str | None:
    """The first value that does not convert alone (for the error message)."""
    for v in values:
        if v is None:
            continue
        try:
            if column.element_oid:
                pa.array([_array_items(v, Column(column.name, column.element_oid))], type=target)
            else:
                _scalars(column, target, [v])
        except Exception:  # noqa: BLE001 - looking for the culprit only
            return v
    return None


# -- arrays ---------------------------------------------------------------------------
def _array_items(text: str, element: Column) -> list[object] | None:
    """A one-dimensional PostgreSQL array's text output as Python values of ``element``'s
    Arrow type (nested arrays: their text, as strings)."""
    items = parse_array(text)
    target = _scalar_type(element.type_oid, element.type_mod)
    if not items:
        return []
    if any(isinstance(i, list) for i in items):
        return [None if i is None else format_nested(i) for i in items]
    flat = [i if i is None or isinstance(i, str) else str(i) for i in items]
    return _scalars(element, target, flat).to_pylist()


def format_nested(item: object) -> str:
    if isinstance(item, list):
        return "{" + ",".join("NULL" if i is None else format_nested(i) for i in item) + "}"
    return str(item)


def parse_array(text: str) -> list[object]:
    """PostgreSQL's array text output (``{1,2,NULL}``, ``{"a b","c\\"d"}``, ``{{1},{2}}``,
    with an optional ``[1:2]=`` bounds prefix) as nested lists of str (None for NULL)."""
    if text.startswith("["):
        text = text[text.index("=") + 1 :]
    value, end = _parse_level(text, 0)
    if end != len(text):
        raise ValueError(f"not an array: {text[:40]!r}")
    return value


def _parse_level(text: str, i: int) -> tuple[list[object], int]:
    if text[i] != "{":
        raise ValueError(f"not an array at {i}: {text[:40]!r}")
    i += 1
    out: list[object] = []
    if text[i] == "}":
        return out, i + 1
    while True:
        ch = text[i]
        if ch == "{":
            sub, i = _parse_level(text, i)
            out.append(sub)
        elif ch == '"':
            i += 1
            buf: list[str] = []
            while text[i] != '"':
                if text[i] == "\\":
                    i += 1
                buf.append(text[i])
                i += 1
            i += 1
            out.append("".join(buf))
        else:
            j = i
            while text[j] not in ",}":
                j += 1
            raw = text[i:j]
            out.append(None if raw == "NULL" else raw)
            i = j
        if text[i] == ",":
            i += 1
            continue
        if text[i] == "}":
            return out, i + 1
        raise ValueError(f"unexpected {text[i]!r} at {i} in array {text[:40]!r}")


def batch_of(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str | None]],
    extra: Sequence[tuple[pa.Field, pa.Array]] = (),
) -> pa.RecordBatch:
    """A record batch of ``rows`` (text values in ``columns``' order) plus ``extra``
    columns (metadata) after them."""
    arrays = [to_arrow(c, [r[i] for r in rows]) for i, c in enumerate(columns)]
    return _with_extra(columns, arrays, extra)


def batch_of_text(
    columns: Sequence[Column],
    texts: Sequence[pa.Array],
    extra: Sequence[tuple[pa.Field, pa.Array]] = (),
) -> pa.RecordBatch:
    """:func:`batch_of` of the rows whose values are in ``texts``, one string array per
    column (the same batch, or the same error)."""
    arrays = [text_to_arrow(c, t) for c, t in zip(columns, texts, strict=True)]
    return _with_extra(columns, arrays, extra)


def _with_extra(
    columns: Sequence[Column], arrays: list[pa.Array], extra: Sequence[tuple[pa.Field, pa.Array]]
) -> pa.RecordBatch:
    fields = [pa.field(c.name, a.type) for c, a in zip(columns, arrays)]
    for f, a in extra:
        fields.append(f)
        arrays.append(a)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))

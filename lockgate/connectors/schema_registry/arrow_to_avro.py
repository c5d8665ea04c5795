"""An Avro schema derived from a pyarrow schema, so that a sink whose records have a
known Arrow shape can register and write Avro without writing the schema by hand.

The mapping (each Arrow field becomes a record field of the same name; a nullable
field's type becomes the union ``["null", T]`` with default ``null``, so records
without it encode and a reader of an older version resolves it):

=====================================  =============================================
Arrow                                  Avro
=====================================  =============================================
bool                                   boolean
int8, int16, int32, uint8, uint16      int
int64, uint32, uint64                  long (a uint64 above 2**63 - 1 fails to encode)
float16, float32                       float
float64                                double
string, large_string                   string
binary, large_binary                   bytes
fixed_size_binary(n)                   fixed of size n
decimal128(p, s), decimal256(p, s)     bytes, logicalType decimal (precision, scale)
date32, date64                         int, logicalType date
time32('s'|'ms')                       int, logicalType time-millis
time64('us')                           long, logicalType time-micros
timestamp('s'|'ms'[, tz])              long, logicalType timestamp-millis
timestamp('us'[, tz])                  long, logicalType timestamp-micros
list, large_list, fixed_size_list      array
struct                                 record named ``<field>`` in the namespace of
                                       the record holding it (``ns.Record.field``)
map<string, V>                         map
dictionary<_, V>                       as V
=====================================  =============================================

Types with no faithful Avro form are refused with a :class:`ConfigurationError` that
names the field and the fix (nanosecond timestamps and times: Avro's standard logical
types stop at microseconds; maps with non-string keys; nulls, unions, durations).
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from ...errors import ConfigurationError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def arrow_to_avro(
    schema: pa.Schema, name: str = "Record", namespace: str | None = None
) -> dict[str, Any]:
    """The Avro record schema (a dict, as :func:`json.dumps` writes it) of records with
    the fields of ``schema``, named ``name`` in ``namespace``. Field names must be Avro
    names (letters, digits, ``_``, not starting with a digit)."""
    if not isinstance(schema, pa.Schema):
        raise ConfigurationError(f"arrow_to_avro takes a pyarrow.Schema, got {schema!r}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"arrow_to_avro name must be an Avro name (letters, digits, '_', not starting "
            f"with a digit), got {name!r}"
        )
    if namespace is not None and not (
        isinstance(namespace, str) and all(_NAME.match(p) for p in namespace.split("."))
    ):
        raise ConfigurationError(
            "arrow_to_avro namespace must be None or Avro names separated by '.', e.g. "
            f"'com.example', got {namespace!r}"
        )
    record: dict[str, Any] = {"type": "record", "name": name}
    if namespace:
        record["namespace"] = namespace
    # nested records live in the record's own namespace: no name of theirs can clash
    record["fields"] = _fields(list(schema), name, f"{namespace}.{name}" if namespace else name)
    return record


def _fields(fields: list[pa.Field], path: str, namespace: str) -> list[dict[str, Any]]:
    out = []
    for f in fields:
        where = f"{path}.{f.name}"
        if not _NAME.match(f.name):
            raise ConfigurationError(
                f"arrow_to_avro: field {where!r} is not an Avro name (letters, digits, '_', "
                "not starting with a digit): rename the column"
            )
        avro = _type(f.type, where, f.name, namespace)
        if f.nullable:
            out.append({"name": f.name, "type": ["null", avro], "default": None})
        else:
            out.append({"name": f.name, "type": avro})
    return out


#: Arrow types of one Avro type each (nullable-ness is the field's)
_SIMPLE: dict[pa.DataType, Any] = {
    pa.bool_(): "boolean",
    pa.int8(): "int",
    pa.int16(): "int",
    pa.int32(): "int",
    pa.uint8(): "int",
    pa.uint16(): "int",
    pa.int64(): "long",
    pa.uint32(): "long",
    pa.uint64(): "long",
    pa.float16(): "float",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "bytes",
    pa.large_binary(): "bytes",
    pa.date32(): {"type": "int", "logicalType": "date"},
    pa.date64(): {"type": "int", "logicalType": "date"},
    pa.time32("s"): {"type": "int", "logicalType": "time-millis"},
    pa.time32("ms"): {"type": "int", "logicalType": "time-millis"},
    pa.time64("us"): {"type": "long", "logicalType": "time-micros"},
}
_TIMESTAMPS = {"s": "timestamp-millis", "ms": "timestamp-millis", "us": "timestamp-micros"}


def _type(t: pa.DataType, where: str, name: str, namespace: str) -> Any:
    if pa.types.is_dictionary(t):
        return _type(t.value_type, where, name, namespace)
    simple = _SIMPLE.get(t)
    if simple is not None:
        return dict(simple) if isinstance(simple, dict) else simple
    if pa.types.is_fixed_size_binary(t):
        return {"type": "fixed", "name": name, "size": t.byte_width, **_ns(namespace)}
    if pa.types.is_decimal(t):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    if pa.types.is_timestamp(t) and t.unit in _TIMESTAMPS:
        return {"type": "long", "logicalType": _TIMESTAMPS[t.unit]}
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        raise ConfigurationError(
            f"arrow_to_avro: field {where!r} is {t}, but Avro's standard logical types stop "
            "at microseconds: cast the column to microseconds (e.g. pa.timestamp('us'))"
        )
    return _nested(t, where, name, namespace)


def _nested(t: pa.DataType, where: str, name: str, namespace: str) -> Any:
    """Lists, structs and maps."""
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        items = _type(t.value_type, f"{where}[]", name, namespace)
        if t.value_field.nullable:
            items = ["null", items]
        return {"type": "array", "items": items}
    if pa.types.is_struct(t):
        inner = f"{namespace}.{name}" if namespace else name
        return {
            "type": "record",
            "name": name,
            **_ns(namespace),
            "fields": _fields(list(t), where, inner),
        }
    if pa.types.is_map(t):
        if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
            raise ConfigurationError(
                f"arrow_to_avro: field {where!r} is {t}, but Avro map keys are strings: "
                "cast its keys to pa.string(), or make it a list of structs"
            )
        values = _type(t.item_type, f"{where}{{}}", name, namespace)
        if t.item_field.nullable:
            values = ["null", values]
        return {"type": "map", "values": values}
    raise ConfigurationError(
        f"arrow_to_avro: field {where!r} has Arrow type {t}, which has no Avro form here: "
        "cast the column to a supported type, or pass an Avro schema written by hand"
    )


def _ns(namespace: str) -> dict[str, str]:
    return {"namespace": namespace} if namespace else {}

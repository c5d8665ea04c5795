"""An Avro record schema as a pyarrow schema: the columns
``KafkaSource(format="avro", schema=avro_arrow_schema(reader_schema))`` decodes into.

Types (Avro -> Arrow): null -> null; boolean -> bool; int -> int32; long -> int64;
float -> float32; double -> float64; bytes -> binary; string -> string; record ->
struct; enum -> string (its symbol); array -> list; map -> map<string, ...>; fixed ->
fixed_size_binary; a union of null and one type -> that type, nullable. Logical types:
date -> date32; time-millis -> time32[ms]; time-micros -> time64[us];
timestamp-millis / -micros -> timestamp[ms / us, UTC]; local-timestamp-millis /
-micros -> timestamp[ms / us] (no zone); decimal -> decimal128 (decimal256 above 38
digits); uuid -> string (its text; a uuid on a fixed(16): fixed_size_binary(16), the
bytes as fastavro gives them). Other logical types (duration, timestamp-nanos, ...) take
their underlying type's column, as fastavro gives them undecoded. A nested field is
nullable only when its type is a union with null; the top-level columns are all
nullable (the source gives a tombstone, a record without a value, as a row of nulls).

Refused (ValueError saying which field): a union of two or more non-null types (no
single column type holds it), and a recursive record (Arrow types are finite).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

_PRIMITIVE = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def avro_arrow_schema(avro: dict[str, Any] | str) -> pa.Schema:
    """The pyarrow schema of the Avro record schema ``avro`` (a dict or its JSON
    text): one column per field, in order (see the module docstring for the types);
    ValueError saying what cannot be mapped."""
    data = json.loads(avro) if isinstance(avro, str) else avro
    if not isinstance(data, dict) or data.get("type") not in ("record", "error"):
        raise ValueError(
            "avro_arrow_schema takes an Avro record schema (a dict with type 'record' and "
            f"its fields), got {avro!r:.200}"
        )
    names: dict[str, Any] = {}
    struct = _type(data, names, data.get("namespace", ""), "", frozenset())
    # top-level columns are nullable: a tombstone (a record without a value) is a row
    # of nulls
    return pa.schema([f.with_nullable(True) for f in struct])


def _full(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _nullable(
    t: Any, names: dict[str, Any], ns: str, where: str, active: frozenset[str]
) -> tuple[pa.DataType, bool]:
    """The Arrow type of Avro type ``t`` and whether it may be null."""
    if isinstance(t, list):
        others = [b for b in t if b != "null"]
        if len(others) != 1:
            if not others:
                return pa.null(), True
            raise ValueError(
                f"{where or 'the schema'}: the union {json.dumps(t)} has several non-null "
                "types; no single Arrow column type holds it (use a record, or one type "
                "with null)"
            )
        return _type(others[0], names, ns, where, active), len(others) != len(t)
    typ = _type(t, names, ns, where, active)
    return typ, typ == pa.null()


def _type(  # noqa: C901 (one branch per Avro type)
    t: Any, names: dict[str, Any], ns: str, where: str, active: frozenset[str]
) -> pa.DataType:
    if isinstance(t, str):
        if t in _PRIMITIVE:
            return _PRIMITIVE[t]
        full = _full(t, ns)
        if full in active or t in active:
            raise ValueError(f"{where}: the record {full} refers to itself; Arrow types are finite")
        known = names.get(full, names.get(t))
        if known is None:
            raise ValueError(f"{where or 'the schema'}: unknown Avro type {t!r}")
        return known
    if isinstance(t, list):
        typ, _ = _nullable(t, names, ns, where, active)
        return typ
    if not isinstance(t, dict):
        raise ValueError(f"{where or 'the schema'}: not an Avro type: {t!r}")
    kind = t.get("type")
    logical = t.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(t["precision"]), int(t.get("scale", 0))
        typ = (
            pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
        )
        if kind == "fixed":
            names[_full(t["name"], t.get("namespace", ns))] = typ
        return typ
    if logical == "uuid" and kind == "string":
        return pa.string()  # its text (fastavro gives a uuid.UUID, the source its text)
    if kind == "int" and logical == "date":
        return pa.date32()
    if kind == "int" and logical == "time-millis":
        return pa.time32("ms")
    if kind == "long" and logical == "time-micros":
        return pa.time64("us")
    if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("ms" if logical.endswith("millis") else "us", tz="UTC")
    if kind == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return pa.timestamp("ms" if logical.endswith("millis") else "us")
    if kind in ("record", "error"):
        full = _full(t["name"], t.get("namespace", ns))
        inner_ns = full.rpartition(".")[0]
        inside = active | {full}
        fields = []
        for f in t.get("fields", []):
            name = f["name"]
            typ, nullable = _nullable(
                f["type"], names, inner_ns, f"{where}.{name}" if where else name, inside
            )
            fields.append(pa.field(name, typ, nullable=nullable))
        struct = pa.struct(fields)
        names[full] = struct
        return struct
    if kind == "enum":
        names[_full(t["name"], t.get("namespace", ns))] = pa.string()
        return pa.string()
    if kind == "array":
        item, nullable = _nullable(t["items"], names, ns, f"{where}[]", active)
        return pa.list_(pa.field("item", item, nullable=nullable))
    if kind == "map":
        value, nullable = _nullable(t["values"], names, ns, f"{where}{{}}", active)
        return pa.map_(pa.string(), pa.field("value", value, nullable=nullable))
    if kind == "fixed":
        typ = pa.binary(int(t["size"]))
        names[_full(t["name"], t.get("namespace", ns))] = typ
        return typ
    if kind in _PRIMITIVE or isinstance(kind, (dict, list)):
        return _type(kind, names, ns, where, active)
    raise ValueError(f"{where or 'the schema'}: unknown Avro type {t!r:.200}")

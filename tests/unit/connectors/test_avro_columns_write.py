"""The column-at-a-time Avro encoder of KafkaSink (avro_columns_write) writes exactly
the bytes of the record-by-record path (fastavro's ``schemaless_writer`` of each
record, framed with ``wire.frame``), and returns None (the record-by-record path then
runs, with its errors) for every batch it does not encode."""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lockgate.connectors.schema_registry.avro_columns_write import (
    AvroColumnsWriter,
    encode_avro_columns,
)
from lockgate.connectors.schema_registry.avro_write import AvroWriter
from lockgate.connectors.schema_registry.wire import frame
from lockgate.core.batch import TS_COLUMN, scalar_batch, user_view

_TS_MS = {"type": "long", "logicalType": "timestamp-millis"}
_TS_US = {"type": "long", "logicalType": "timestamp-micros"}
_SEC = 10**6  # microseconds
#: a day inside each end of Python's datetimes, in microseconds since the epoch
_DT_LOW, _DT_HIGH = -62135596800 * _SEC + 2 * 86400 * _SEC, 253402300799 * _SEC - 2 * 86400 * _SEC


def _ints(bits: int, signed: bool = True):
    def gen(r: random.Random) -> int:
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        return r.choice(
            [low, high, 0, 63, 64, r.randint(low, high), max(low, min(high, r.randint(-300, 300)))]
        )

    return gen


def _float(r: random.Random) -> float:
    return r.choice(
        [0.0, -0.0, 1.5, math.inf, -math.inf, math.nan, 1e-45, 3.4e38, r.uniform(-1e6, 1e6)]
    )


def _double(r: random.Random) -> float:
    return r.choice(
        [
            0.0,
            -0.0,
            math.inf,
            -math.inf,
            math.nan,
            5e-324,
            1.7e308,
            r.uniform(-1e300, 1e300),
            r.random(),
        ]
    )


def _text(r: random.Random) -> str:
    alphabet = 'ab"\\\n\x00é€😀\u2028'
    size = r.choice([0, 1, 5, 127, 128, 300])
    return "".join(r.choice(alphabet) for _ in range(size))


def _blob(r: random.Random) -> bytes:
    return bytes(r.getrandbits(8) for _ in range(r.choice([0, 1, 7, 127, 128, 200])))


def _micros(r: random.Random) -> int:
    return r.choice([0, -1, _DT_LOW, _DT_HIGH, r.randint(_DT_LOW, _DT_HIGH)])


#: (Avro type, Arrow type, a value generator)
_CASES: list[tuple[Any, pa.DataType, Any]] = [
    ("boolean", pa.bool_(), lambda r: r.random() < 0.5),
    ("int", pa.int8(), _ints(8)),
    ("int", pa.int16(), _ints(16)),
    ("int", pa.int32(), _ints(32)),
    ("int", pa.uint8(), _ints(8, False)),
    ("int", pa.uint16(), _ints(16, False)),
    ("long", pa.int64(), _ints(64)),
    ("long", pa.int32(), _ints(32)),
    ("long", pa.uint32(), _ints(32, False)),
    ("float", pa.float32(), _float),
    ("double", pa.float64(), _double),
    ("string", pa.string(), _text),
    ("string", pa.large_string(), _text),
    ("bytes", pa.binary(), _blob),
    ("bytes", pa.large_binary(), _blob),
    (_TS_MS, pa.int64(), _ints(64)),
    (_TS_MS, pa.timestamp("ms", tz="UTC"), lambda r: _micros(r) // 1000),
    (_TS_MS, pa.timestamp("ms", tz="America/New_York"), lambda r: _micros(r) // 1000),
    (_TS_MS, pa.timestamp("s", tz="UTC"), lambda r: _micros(r) // _SEC),
    (_TS_US, pa.int64(), _ints(64)),
    (_TS_US, pa.timestamp("us", tz="UTC"), _micros),
    (_TS_US, pa.timestamp("us", tz="Asia/Kolkata"), _micros),
]


def _expected(schema: Any, batch: pa.RecordBatch, schema_id: int) -> list[bytes]:
    """The record-by-record path: each record as a dict, fastavro, framed."""
    writer = AvroWriter(schema)
    rows = user_view(batch).to_pylist()  # type: ignore[union-attr]
    return [frame(schema_id, writer.encode(row)) for row in rows]


def _random_batch(r: random.Random) -> tuple[dict[str, Any], pa.RecordBatch]:
    picked = [r.choice(_CASES) for _ in range(r.randint(1, 7))]
    n = r.choice([1, 2, 3, 17, 200])
    fields: list[dict[str, Any]] = []
    arrays: list[tuple[str, pa.Array]] = []
    for i, (avro, arrow, gen) in enumerate(picked):
        name = f"f{i}"
        shape = r.choice(["plain", "null_first", "null_last"])
        avro_type = (
            avro
            if shape == "plain"
            else ["null", avro]
            if shape == "null_first"
            else [avro, "null"]
        )
        fields.append({"name": name, "type": avro_type})
        nulls = shape != "plain" and r.random() < 0.7
        values = [None if nulls and r.random() < 0.3 else gen(r) for _ in range(n)]
        if pa.types.is_float32(arrow):
            # a float32's value is the nearest float32 (fastavro packs the same)
            values = [
                None if v is None else struct.unpack("<f", struct.pack("<f", v))[0] for v in values
            ]
        arrays.append((name, pa.array(values, type=arrow)))
    r.shuffle(arrays)  # columns are looked up by name; the schema's order is written
    schema = {"type": "record", "name": "R", "namespace": "t", "fields": fields}
    batch = pa.RecordBatch.from_arrays([a for _, a in arrays], names=[k for k, _ in arrays])
    if r.random() < 0.3:
        batch = batch.append_column(TS_COLUMN, pa.array(range(n), pa.int64()))
    if n > 2 and r.random() < 0.3:
        batch = batch.slice(1, n - 2)  # columns at an offset in their buffers
    return schema, batch


@pytest.mark.parametrize("seed", range(40))
def test_columns_encode_the_bytes_of_the_record_path(seed: int) -> None:
    r = random.Random(seed)
    for _ in range(10):
        schema, batch = _random_batch(r)
        schema_id = r.choice([0, 1, 255, 2**31 + 7, 2**32 - 1])
        got = AvroColumnsWriter(schema).encode(batch, schema_id)
        assert got is not None, (schema, batch.schema)
        assert got == _expected(schema, batch, schema_id), (schema, batch.to_pylist())


def test_every_supported_type_with_nulls_in_one_batch() -> None:
    r = random.Random(7)
    fields, arrays = [], []
    for i, (avro, arrow, gen) in enumerate(_CASES):
        fields.append({"name": f"c{i}", "type": ["null", avro]})
        values = [None, *[gen(r) for _ in range(30)], None]
        if pa.types.is_float32(arrow):
            values = [
                None if v is None else struct.unpack("<f", struct.pack("<f", v))[0] for v in values
            ]
        arrays.append(pa.array(values, type=arrow))
    schema = {"type": "record", "name": "All", "fields": fields}
    batch = pa.RecordBatch.from_arrays(arrays, names=[f["name"] for f in fields])
    assert encode_avro_columns(schema, batch, 42) == _expected(schema, batch, 42)


def test_nan_payloads_are_written_as_the_record_path_writes_them() -> None:
    bits32 = np.array([0x7F800001, 0x7FC00001, 0xFFC12345, 0x7F812345, 0x00000001], np.uint32)
    bits64 = np.array([0x7FF0000000000001, 0x7FF8000000000123, 0xFFF4000000000000], np.uint64)
    schema = _record(("f", "float"), ("d", ["null", "double"]))
    batch = pa.RecordBatch.from_pydict(
        {
            "f": pa.array(bits32.view(np.float32)),
            "d": pa.array(np.resize(bits64, 5).view(np.float64)),
        }
    )
    assert encode_avro_columns(schema, batch, 9) == _expected(schema, batch, 9)


def test_a_writer_survives_pickling() -> None:
    import pickle

    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}
    writer = pickle.loads(pickle.dumps(AvroColumnsWriter(schema)))
    batch = pa.RecordBatch.from_pydict({"a": pa.array([1, -1, 2**40], pa.int64())})
    assert writer.encode(batch, 3) == _expected(schema, batch, 3)


def _record(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "R", "fields": [{"name": k, "type": t} for k, t in fields]}


_FLAT = _record(("a", "long"), ("b", ["null", "string"]))


@pytest.mark.parametrize(
    ("schema", "columns"),
    [
        # a nested or other field type
        (_record(("a", {"type": "array", "items": "long"})), {"a": pa.array([[1]])}),
        (_record(("a", {"type": "enum", "name": "E", "symbols": ["X"]})), {"a": pa.array(["X"])}),
        (_record(("a", ["null", "long", "string"])), {"a": pa.array([1])}),
        (_record(("a", {"type": "int", "logicalType": "date"})), {"a": pa.array([1], pa.int32())}),
        (_record(("a", {"type": "string", "logicalType": "uuid"})), {"a": pa.array(["x"])}),
        ({"type": "array", "items": "long"}, {"a": pa.array([1])}),
        ("long", {"a": pa.array([1])}),
        # a column missing (with or without a default), or one the schema lacks
        (_FLAT, {"a": pa.array([1])}),
        (_record(("a", "long"), ("c", "long")), {"a": pa.array([1])}),
        (
            {
                "type": "record",
                "name": "R",
                "fields": [
                    {"name": "a", "type": "long"},
                    {"name": "c", "type": "long", "default": 0},
                ],
            },
            {"a": pa.array([1])},
        ),
        (_FLAT, {"a": pa.array([1]), "b": pa.array(["x"]), "z": pa.array([1])}),
        (_FLAT, {"a": pa.array([1]), "c": pa.array(["x"])}),
        # not the field's natural Arrow type
        (_record(("a", "int")), {"a": pa.array([1], pa.int64())}),
        (_record(("a", "int")), {"a": pa.array([1], pa.uint32())}),
        (_record(("a", "long")), {"a": pa.array([1], pa.uint64())}),
        (_record(("a", "long")), {"a": pa.array([1.0])}),
        (_record(("a", "float")), {"a": pa.array([1.0], pa.float64())}),
        (_record(("a", "double")), {"a": pa.array([1.0], pa.float32())}),
        (_record(("a", "double")), {"a": pa.array([1])}),
        (_record(("a", "string")), {"a": pa.array([b"x"])}),
        (_record(("a", "bytes")), {"a": pa.array(["x"])}),
        (_record(("a", "boolean")), {"a": pa.array([1])}),
        (_record(("a", "string")), {"a": pa.array(["x"]).dictionary_encode()}),
        (_record(("a", "long")), {"a": pa.array([1], pa.timestamp("ms", tz="UTC"))}),
        # a timestamp without a time zone (fastavro takes it as local time), of another
        # unit, or outside Python's datetimes
        (_record(("a", _TS_MS)), {"a": pa.array([1], pa.timestamp("ms"))}),
        (_record(("a", _TS_MS)), {"a": pa.array([1], pa.timestamp("us", tz="UTC"))}),
        (_record(("a", _TS_US)), {"a": pa.array([1], pa.timestamp("ms", tz="UTC"))}),
        (_record(("a", _TS_MS)), {"a": pa.array([2**62], pa.timestamp("ms", tz="UTC"))}),
        (_record(("a", _TS_US)), {"a": pa.array([-(2**62)], pa.timestamp("us", tz="UTC"))}),
        # a null where the schema takes none
        (_record(("a", "long")), {"a": pa.array([1, None])}),
        (_record(("a", "string")), {"a": pa.array(["x", None])}),
    ],
)
def test_what_is_not_encoded_here_returns_none(schema: Any, columns: dict[str, Any]) -> None:
    batch = pa.RecordBatch.from_pydict(columns)
    assert encode_avro_columns(schema, batch, 1) is None


def test_invalid_utf8_returns_none() -> None:
    raw = pa.array([b"\xff\xfe"], pa.binary())
    text = pa.Array.from_buffers(pa.string(), 1, raw.buffers())
    batch = pa.RecordBatch.from_arrays([text], names=["a"])
    assert encode_avro_columns(_record(("a", "string")), batch, 1) is None


def test_empty_and_scalar_batches_return_none() -> None:
    empty = pa.RecordBatch.from_pydict({"a": pa.array([], pa.int64())})
    assert encode_avro_columns(_record(("a", "long")), empty, 1) is None
    assert encode_avro_columns(_record(("a", "long")), scalar_batch([1, 2]), 1) is None


def test_duplicate_column_names_return_none() -> None:
    batch = pa.RecordBatch.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    schema = _record(("a", "long"), ("b", "long"))
    assert encode_avro_columns(schema, batch, 1) is None

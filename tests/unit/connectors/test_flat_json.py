"""The compiled flat JSON reader (``lockgate.connectors.formats.flat_json``) gives exactly what
pyarrow's JSON reader gives with the same schema, or declines (the source then decodes
the general way): compared on generated values, well-formed and broken."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.json as pj
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.connectors.formats.flat_json import FlatJsonReader

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("s", pa.string()),
        ("f", pa.float64()),
        ("b", pa.bool_()),
        ("i8", pa.int8()),
        ("u16", pa.uint16()),
        ("u32", pa.uint32()),
    ]
)


def pyarrow_rows(values: list[bytes | None], schema: pa.Schema) -> pa.Table | None:
    """What pyarrow.json makes of each value alone (a tombstone as ``{}``), or None when
    it refuses one."""
    options = pj.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=True
    )
    tables = []
    for v in values:
        text = b"{}" if v is None else v
        try:
            text.decode("utf-8")
            table = pj.read_json(io.BytesIO(text), parse_options=options)
        except (pa.ArrowException, ValueError):
            return None
        if table.num_rows != 1:
            return None
        tables.append(table)
    return pa.concat_tables(tables).combine_chunks()


def fast_rows(values: list[bytes | None], schema: pa.Schema) -> pa.Table | None:
    """The values framed as a Kafka fetch holds them (bytes between them), then read."""
    buffer = bytearray()
    starts, lengths = [], []
    for v in values:
        buffer += b"\x07framing\x01"
        starts.append(len(buffer))
        lengths.append(-1 if v is None else len(v))
        buffer += v or b""
    arr = np.frombuffer(bytes(buffer) or b"\0", dtype=np.uint8)
    return FlatJsonReader(schema).read(
        arr, np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64)
    )


def same(fast: pa.Table, slow: pa.Table) -> bool:
    return fast.schema == slow.schema and fast.to_pylist() == slow.to_pylist()


ws = st.sampled_from(["", " ", "\t", "\n", "\r\n ", "  "])
number = st.one_of(
    st.integers(-(2**64), 2**64).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.from_regex(r"-?(0|[1-9][0-9]{0,21})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?", fullmatch=True),
    st.sampled_from(["-0", "01", "1.", ".5", "-", "1e", "1.5e+", "+1", "0x10", "1_000"]),
)
text = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=8),
    st.text(max_size=6),  # escapes, control bytes, non-ASCII: pyarrow decides
).map(lambda s: json.dumps(s, ensure_ascii=False))
scalar = st.one_of(
    number, text, st.sampled_from(["true", "false", "null", "nul", "tru", "falsey", "[1, {}]"])
)
names = st.one_of(st.sampled_from(SCHEMA.names), st.sampled_from(["x", "ii", "", "I", "s\\u0073"]))


@st.composite
def objects(draw: st.DrawFn) -> bytes | None:
    if draw(st.integers(0, 30)) == 0:
        return None  # a tombstone
    members = draw(st.lists(st.tuples(names, ws, ws, scalar), max_size=6))
    body = ",".join(f'{w1}"{k}"{w2}:{draw(ws)}{v}{draw(ws)}' for k, w1, w2, v in members)
    raw = f"{draw(ws)}{{{draw(ws)}{body}}}{draw(ws)}".encode()
    mutation = draw(st.integers(0, 12))
    if mutation == 0 and raw:  # a byte changed, cut or added: mostly broken JSON
        at = draw(st.integers(0, len(raw) - 1))
        byte = draw(st.sampled_from([b"", b",", b"}", b"{", b'"', b"\\", b"\xff", b"\x00"]))
        raw = raw[:at] + byte + raw[at + draw(st.integers(0, 1)) :]
    return raw


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(objects(), min_size=1, max_size=6))
def test_the_fast_path_gives_what_pyarrow_gives_or_declines(values: list[bytes | None]) -> None:
    fast = fast_rows(values, SCHEMA)
    if fast is None:
        return
    slow = pyarrow_rows(values, SCHEMA)
    assert slow is not None, f"the fast path read values pyarrow refuses: {values!r}"
    assert same(fast, slow), (values, fast.to_pylist(), slow.to_pylist())


@st.composite
def subset_objects(draw: st.DrawFn) -> bytes:
    """Values inside the fast path's subset: it must read them."""
    fields = {
        "i": st.integers(-(2**63), 2**63 - 1),
        "s": st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=9)
        .filter(lambda s: '"' not in s and "\\" not in s)
        .map(lambda s: f'"{s}"'),
        "f": st.one_of(
            st.integers(-(2**53), 2**53),
            st.from_regex(r"-?[1-9][0-9]{0,8}\.[0-9]{1,6}([eE][+-]?[0-9])?", fullmatch=True),
        ),
        "b": st.sampled_from(["true", "false"]),
        "i8": st.integers(-128, 127),
        "u16": st.integers(0, 2**16 - 1),
        "u32": st.integers(0, 2**32 - 1),
        "other": st.one_of(
            st.integers(-(10**19) + 1, 10**19 - 1), st.just('"x"'), st.just("null"), st.just("true")
        ),
    }
    chosen = draw(st.lists(st.sampled_from(sorted(fields)), unique=True))
    members = [(k, draw(st.one_of(fields[k], st.just("null")))) for k in chosen]
    return ("{" + ", ".join(f'"{k}": {v}' for k, v in members) + "}").encode()


@settings(max_examples=300, deadline=None)
@given(st.lists(subset_objects(), min_size=1, max_size=8))
def test_values_inside_the_subset_are_read_and_equal_pyarrow(values: list[bytes]) -> None:
    fast = fast_rows(values, SCHEMA)  # type: ignore[arg-type]
    slow = pyarrow_rows(values, SCHEMA)  # type: ignore[arg-type]
    assert fast is not None, values
    assert slow is not None and same(fast, slow), (values, fast.to_pylist(), slow.to_pylist())


def test_the_edges_of_each_type() -> None:
    rows = [
        b'{"i": -9223372036854775808, "i8": -128, "u16": 65535, "f": -0, "s": ""}',
        b'{"i": 9223372036854775807, "i8": 127, "u32": 4294967295, "f": 1e22, "b": false}',
        b'{"f": 9007199254740992, "ignored": [1], "s": "a b"}'.replace(b"[1]", b"-1.5e22"),
        b'{"f": 0.1, "f2": -1.5E-7, "b": true}',
        None,
    ]
    fast = fast_rows(rows, SCHEMA)  # type: ignore[arg-type]
    slow = pyarrow_rows(rows, SCHEMA)  # type: ignore[arg-type]
    assert fast is not None and slow is not None and same(fast, slow)
    assert fast.column("f").to_pylist()[:4] == [-0.0, 1e22, 9007199254740992.0, 0.1]


@pytest.mark.parametrize(
    "value",
    [
        b'{"i": 1, "i": 2}',  # a named member twice: pyarrow refuses it
        b'{"i": null, "i": 1}',
        b'{"i": 9223372036854775808}',  # out of range
        b'{"i8": 128}',
        b'{"u16": -0}',  # a sign on an unsigned column
        b'{"i": 1.0}',
        b'{"f": 9007199254740993}',  # beyond the exact fast path: pyarrow's parser decides
        b'{"f": 1e23}',
        b'{"s": "caf\\u00e9"}',  # an escape
        b'{"s": "\xc3\xa9"}',  # non-ASCII
        b'{"x": {"nested": 1}}',
        b'{"i": 1,}',
        b'{"i": 01}',
        b"[1]",
        b"",
    ],
)
def test_values_outside_the_subset_are_declined(value: bytes) -> None:
    assert fast_rows([b'{"i": 1}', value], SCHEMA) is None


def test_a_non_nullable_field_left_out_is_declined_and_an_unusable_schema_never_reads() -> None:
    strict = pa.schema([pa.field("i", pa.int64(), nullable=False)])
    assert fast_rows([b'{"i": 1}'], strict) is not None
    assert fast_rows([b'{"i": 1}', b"{}"], strict) is None
    for odd in (pa.schema([("t", pa.timestamp("ms"))]), pa.schema([("x", pa.float32())])):
        assert fast_rows([b"{}"], odd) is None
    assert fast_rows([b'{"a\\"b": 1}'], pa.schema([('a"b', pa.int64())])) is None


def test_the_kafka_source_decodes_flat_values_with_the_compiled_reader_and_others_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``KafkaSource(schema=...)`` on directly fetched records: flat values never reach
    pyarrow's reader; a poll with one value outside the subset goes the general way and
    gives the same rows, its malformed record reported as before."""
    from test_kafka_record_batches import batch

    from lockgate.connectors.kafka.arrow_decoder import ArrowDecoder
    from lockgate.connectors.kafka.record_batches import decode_partition
    from lockgate.connectors.kafka.source import KafkaSource

    schema = pa.schema([("key", pa.int64()), ("name", pa.string())])
    source = KafkaSource("127.0.0.1:9", "t", schema=schema, key_field="k", timestamp_field="at")
    decoder = ArrowDecoder(source)
    flat = [(b"k%d" % i, b'{"key": %d, "name": "n%d"}' % (i, i)) for i in range(50)]
    records = decode_partition("t", 0, batch(0, flat), 0, None, None, True)
    seen: list[str] = []

    def no_pyarrow(*_: object, **__: object) -> None:
        raise AssertionError("pyarrow's reader was used for flat values")

    monkeypatch.setattr(decoder, "read", no_pyarrow)
    got = decoder.decode_records(records, lambda m, raw, error: seen.append(error))
    assert got is not None and got.num_rows == 50 and not seen
    assert got.column("key").to_pylist() == list(range(50))
    assert got.column("name").to_pylist() == [f"n{i}" for i in range(50)]
    assert got.column("k").to_pylist() == [f"k{i}" for i in range(50)]
    assert got.column("at").to_pylist() == [1_000 + i for i in range(50)]
    monkeypatch.undo()

    escaped = [(b"k", b'{"key": 1, "name": "caf\\u00e9"}'), (b"k", b"{broken")]
    records = decode_partition("t", 0, batch(0, flat[:3] + escaped), 0, None, None, True)
    got = decoder.decode_records(records, lambda m, raw, error: seen.append(m.offset()))
    assert got is not None and got.column("name").to_pylist() == ["n0", "n1", "n2", "café"]
    assert seen == [4], "the malformed record (offset 4) is reported, the rest decoded"


def test_a_value_outside_the_buffer_is_refused_before_the_compiled_pass() -> None:
    reader = FlatJsonReader(SCHEMA)
    buffer = np.frombuffer(b'{"i": 1}', dtype=np.uint8)
    for starts, lengths in (([0], [9]), ([-1], [2]), ([0], [-2])):
        with pytest.raises(ValueError, match="outside the buffer"):
            reader.read(buffer, np.array(starts), np.array(lengths))

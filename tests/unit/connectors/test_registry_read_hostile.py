"""Reading registry-encoded records that a hostile or broken producer wrote: the
decoders (:mod:`lockgate.connectors.schema_registry.formats`, ``avro_read``,
``avro_columns``, ``json_schema_read``) report a bad record as malformed, never crash
the worker, loop without bound or read outside their buffers; a bad writer's schema
fails the job (it is not one record's fault). The registry is a stub here: these are
the decoders' own rules (the real registry and broker are in
``tests/connectors/test_kafka_registry_read.py``).

Cases that could crash the interpreter (a segfault in compiled code, the C stack
overflowing) run in a child process, so that a crash fails the test instead of
killing pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from registry_read_stub import Stub, decode, decoder, zigzag

#: prefixed to a child's code: the helpers of registry_read_stub
_CHILD_PRELUDE = (
    f"import sys\nsys.path.insert(0, {str(Path(__file__).parents[2])!r})\n"
    "from registry_read_stub import Stub, decode, decoder, zigzag\n"
    "import json\nimport numpy as np\nimport pyarrow as pa\n"
)


def _run_child(code: str, timeout: float = 120, memory_bytes: int | None = None) -> str:
    """``code`` (after the helpers) run in a fresh interpreter; its stdout. Fails the
    test on a crash (a signal), an exception or when it outlives ``timeout``;
    ``memory_bytes`` bounds its data (RLIMIT_DATA: unbounded allocation then ends in
    a MemoryError, not in a machine short of memory)."""
    source = _CHILD_PRELUDE + textwrap.dedent(code)

    def limit() -> None:
        if memory_bytes is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))

    try:
        done = subprocess.run(
            [sys.executable, "-c", source],
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child ran past {timeout} s (unbounded work): {e.stdout!r:.500}")
    assert done.returncode == 0, (
        f"the child exited with {done.returncode} (negative: killed by that signal, e.g. "
        f"-11 a segfault)\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-3000:]}"
    )
    return done.stdout


FLAT = {
    "type": "record",
    "name": "R",
    "fields": [{"name": "s", "type": "string"}, {"name": "a", "type": "long"}],
}
FLAT_ARROW = pa.schema([("s", pa.string()), ("a", pa.int64())])


def test_hostile_string_lengths_make_the_compiled_avro_reader_give_up_and_the_record_malformed() -> (
    None
):
    """A string's varint length near 2**63 - 1 wrapped the compiled reader's bound check
    (``p + size > end``) and it read outside the buffer: the worker segfaulted, and
    again after each restart. Every hostile length (huge, negative, just past the end)
    must make the compiled reader return None, and the general path then reports the
    record malformed; a good record around it still arrives."""
    out = _run_child(
        """
        from lockgate.connectors.schema_registry.avro_columns import AvroColumnsReader
        writer = {"type": "record", "name": "R",
                  "fields": [{"name": "s", "type": "string"}, {"name": "a", "type": "long"}]}
        schema = pa.schema([("s", pa.string()), ("a", pa.int64())])
        reader = AvroColumnsReader(writer, ((), ()), False, schema)
        assert reader.usable
        good = b"\\x00\\x00\\x00\\x00\\x07" + zigzag(2) + b"ab" + zigzag(7)
        for size in (2**63 - 1, 2**63 - 3, 2**62, 2**40, -1, -(2**63), 3, 4):
            bad = b"\\x00\\x00\\x00\\x00\\x07" + zigzag(size) + b"ab" + zigzag(7)
            for values in ([bad], [good, bad], [bad, good]):
                lengths = np.array([len(v) for v in values], dtype=np.int64)
                starts = np.zeros(len(values), dtype=np.int64)
                np.cumsum(lengths[:-1], out=starts[1:])
                buf = np.frombuffer(b"".join(values), dtype=np.uint8)
                assert reader.read(buf, starts, lengths) is None, (size, values)
            batch, bad_records = decode(decoder(writer, schema), [good, bad, good])
            assert batch.num_rows == 2 and batch.column("s").to_pylist() == ["ab", "ab"]
            assert [(i, sid) for i, _, sid in bad_records] == [(1, 7)], bad_records
            assert "does not decode" in bad_records[0][1], bad_records
            print("ok", size)
        """
    )
    assert out.count("ok") == 8, out


def test_a_deep_record_of_a_recursive_avro_schema_is_malformed_not_a_stack_overflow() -> None:
    """fastavro's compiled reader recursed on the C stack through a recursive writer
    schema (a linked list, ``next: ["null", "Node"]``) and a 10,000-deep payload
    overflowed it: a segfault. A recursive schema is decoded with fastavro's
    pure-Python reader, whose RecursionError makes the record malformed; a shallow
    list still decodes, also through a reader schema and on a thread (the local
    executor's tasks run on threads)."""
    out = _run_child(
        """
        import threading
        node = {"type": "record", "name": "Node", "fields": [
            {"name": "v", "type": "long", "default": 0},
            {"name": "next", "type": ["null", "Node"]}]}
        reader = dict(node, fields=node["fields"] + [{"name": "w", "type": "int", "default": 5}])
        head = b"\\x00\\x00\\x00\\x00\\x03"
        deep = head + b"\\x02\\x02" * 10_000 + b"\\x02\\x00"
        shallow = head + b"\\x02\\x02" + b"\\x04\\x00"  # v=1 -> v=2 -> end

        def check(d, expected):
            batch, bad = decode(d, [shallow, deep, shallow])
            assert batch.rows == [expected, expected], batch.rows
            assert [(i, sid) for i, _, sid in bad] == [(1, 3)], bad
            assert "RecursionError" in bad[0][1], bad
            print("ok")

        plain = {"v": 1, "next": {"v": 2, "next": None}}
        resolved = {"v": 1, "next": {"v": 2, "next": None, "w": 5}, "w": 5}
        check(decoder(node), plain)
        check(decoder(node, reader=reader), resolved)
        errors = []
        def on_thread():
            try:
                check(decoder(node), plain)
            except BaseException as e:
                errors.append(e)
        t = threading.Thread(target=on_thread)
        t.start()
        t.join()
        assert not errors, errors
        """
    )
    assert out.count("ok") == 3, out


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (FLAT, False),
        (  # named types used twice, nested: not recursive
            {
                "type": "record",
                "name": "A",
                "fields": [
                    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["x"]}},
                    {"name": "f", "type": "E"},
                    {
                        "name": "r",
                        "type": {
                            "type": "record",
                            "name": "B",
                            "fields": [{"name": "e", "type": "E"}],
                        },
                    },
                    {"name": "r2", "type": "B"},
                ],
            },
            False,
        ),
        (  # through another record and an array
            {
                "type": "record",
                "name": "ns.A",
                "fields": [
                    {
                        "name": "b",
                        "type": {
                            "type": "record",
                            "name": "B",
                            "fields": [{"name": "a", "type": {"type": "array", "items": "A"}}],
                        },
                    }
                ],
            },
            True,
        ),
        (  # through a map, with a namespace
            {
                "type": "record",
                "name": "T",
                "namespace": "x",
                "fields": [{"name": "kids", "type": {"type": "map", "values": "T"}}],
            },
            True,
        ),
    ],
)
def test_recursive_avro_schemas_are_told_from_ones_that_reuse_a_named_type(
    schema, expected
) -> None:
    import fastavro

    from lockgate.connectors.schema_registry.avro_read import recursive

    assert recursive(fastavro.parse_schema(schema)) is expected


def _framed_avro(writer: dict[str, Any], record: dict[str, Any], schema_id: int = 9) -> bytes:
    import io

    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(writer), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def test_every_avro_logical_type_arrives_in_the_columns_avro_arrow_schema_gives() -> None:
    """fastavro gives a ``uuid`` string as a ``uuid.UUID``, which pyarrow refused for
    the ``string`` column avro_arrow_schema maps it to: every record was malformed.
    Each logical type (at the top level and nested in a record, an array and a union
    with null) now arrives in its column as its value."""
    import datetime
    import decimal
    import uuid

    from lockgate.connectors.schema_registry.avro_arrow import avro_arrow_schema

    utc = datetime.timezone.utc
    an_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    cases = [
        ({"type": "string", "logicalType": "uuid"}, an_id, str(an_id)),
        (
            {"type": "fixed", "name": "U16", "size": 16, "logicalType": "uuid"},
            an_id.bytes,
            an_id.bytes,
        ),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            decimal.Decimal("-12.34"),
            decimal.Decimal("-12.34"),
        ),
        (
            {
                "type": "fixed",
                "name": "D8",
                "size": 8,
                "logicalType": "decimal",
                "precision": 12,
                "scale": 3,
            },
            decimal.Decimal("1.500"),
            decimal.Decimal("1.500"),
        ),
        (
            {"type": "int", "logicalType": "date"},
            datetime.date(2024, 2, 29),
            datetime.date(2024, 2, 29),
        ),
        (
            {"type": "int", "logicalType": "time-millis"},
            datetime.time(1, 2, 3, 4000),
            datetime.time(1, 2, 3, 4000),
        ),
        (
            {"type": "long", "logicalType": "time-micros"},
            datetime.time(1, 2, 3, 4005),
            datetime.time(1, 2, 3, 4005),
        ),
        (
            {"type": "long", "logicalType": "timestamp-millis"},
            datetime.datetime(2024, 1, 1, 1, 2, 3, 4000, tzinfo=utc),
            datetime.datetime(2024, 1, 1, 1, 2, 3, 4000, tzinfo=utc),
        ),
        (
            {"type": "long", "logicalType": "timestamp-micros"},
            datetime.datetime(2024, 1, 1, 1, 2, 3, 4005, tzinfo=utc),
            datetime.datetime(2024, 1, 1, 1, 2, 3, 4005, tzinfo=utc),
        ),
        (
            {"type": "long", "logicalType": "local-timestamp-millis"},
            datetime.datetime(2024, 1, 1, 1, 2, 3, 4000),
            datetime.datetime(2024, 1, 1, 1, 2, 3, 4000),
        ),
        (
            {"type": "long", "logicalType": "local-timestamp-micros"},
            datetime.datetime(2024, 1, 1, 1, 2, 3, 4005),
            datetime.datetime(2024, 1, 1, 1, 2, 3, 4005),
        ),
    ]
    for typ, written, expected in cases:
        writer = {
            "type": "record",
            "name": "R",
            "fields": [
                {"name": "x", "type": typ},
                {
                    "name": "nested",
                    "type": {
                        "type": "record",
                        "name": "N",
                        "fields": [
                            {
                                "name": "many",
                                "type": {
                                    "type": "array",
                                    "items": typ.get("name", typ),
                                },
                            },
                            {
                                "name": "maybe",
                                "type": ["null", typ.get("name", typ)],
                            },
                        ],
                    },
                },
            ],
        }
        schema = avro_arrow_schema(writer)
        record = {"x": written, "nested": {"many": [written, written], "maybe": written}}
        batch, bad = decode(decoder(writer, schema), [_framed_avro(writer, record)])
        assert bad == [], (typ, bad)
        row = batch.to_pylist()[0]
        assert row == {
            "x": expected,
            "nested": {"many": [expected, expected], "maybe": expected},
        }, typ


def test_a_json_schema_without_dollar_schema_is_draft_7_as_the_sink_and_confluent_read_it() -> None:
    """The reader took a schema naming no ``$schema`` as draft 2020-12, the sink (and
    Confluent's serializers) as Draft 7: a Draft 7 tuple (``"items": [...]``) was not a
    valid 2020-12 schema, and every record of it was refused. Draft 7 by default, for
    the writer's schema and a reader schema alike."""
    from lockgate.connectors.schema_registry.formats import check_registry_format

    tuple_schema = {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]}

    def framed(value: Any) -> bytes:
        return b"\x00\x00\x00\x00\x05" + json.dumps(value).encode()

    for reader in (
        None,
        check_registry_format("t", "reader_schema", "json_schema", tuple_schema).reader_schema,
    ):
        d = decoder(tuple_schema, fmt="json_schema", schema_type="JSON", reader=reader)
        batch, bad = decode(d, [framed([1, "a"]), framed([1, 2]), framed([2, "b", True])])
        assert batch.rows == [[1, "a"], [2, "b", True]]
        assert [(i, sid) for i, _, sid in bad] == [(1, 5)], bad
        assert "is not of type 'string'" in bad[0][1], bad


def _writer_schema_cases() -> list[tuple[str, Any, str, str]]:
    from lockgate.connectors.schema_registry.client import SchemaReference

    ref = (SchemaReference("lgtest.Other", "other-value", 3),)
    ok_avro = json.dumps(FLAT)
    ok_json = json.dumps({"type": "object"})
    return [
        (
            "avro",
            Stub('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nosuch"}]}'),
            "fastavro can parse",
            "avro",
        ),
        ("avro", Stub("not json at all"), "fastavro can parse", "avro"),
        (
            "avro",
            Stub(ok_avro, references=ref, subject="t-value"),
            "lgtest.Other (other-value v3)",
            "avro",
        ),
        ("json_schema", Stub('{"type": 5}', "JSON"), "not a valid JSON Schema", "json"),
        (
            "json_schema",
            Stub(ok_json, "JSON", references=ref, subject="t-value"),
            "lgtest.Other (other-value v3)",
            "json",
        ),
        (
            "json_schema",
            Stub(
                json.dumps(
                    {"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/x.json"}}}
                ),
                "JSON",
            ),
            "http://127.0.0.1:9/x.json",
            "json",
        ),
    ]


@pytest.mark.parametrize(("fmt", "registry", "says", "kind"), _writer_schema_cases())
@pytest.mark.parametrize("arrow", [False, True])
def test_a_writer_schema_that_cannot_decode_fails_the_job_not_every_record(
    fmt, registry, says, kind, arrow
) -> None:
    """A writer's schema fastavro cannot parse, one with references to other schemas
    (ignored, so fastavro reported an unknown type), an invalid JSON Schema or one with
    a $ref to another document made each of its records malformed: with dead_letter
    the whole topic drained into the dead-letter output and the offsets moved on.
    It is the schema that is wrong: WriterSchemaError (not restartable) fails the job,
    naming the schema id, its subject when known, the registry's redacted URL and what
    is wrong; no record is reported malformed."""
    from lockgate.connectors.schema_registry.formats import WriterSchemaError
    from lockgate.errors import NonRestartableError
    from lockgate.recovery.non_restartable import non_restartable_cause

    value = b"\x00\x00\x00\x00\x07" + (b'{"a": 1}' if kind == "json" else b"\x02a\x0e")
    schema = FLAT_ARROW if arrow else None
    d = decoder("unused", schema=schema, fmt=fmt, registry=registry)
    with pytest.raises(WriterSchemaError) as raised:
        decode(d, [value, value])
    message = str(raised.value)
    assert "schema id 7" in message and says in message, message
    assert "http://***@registry.invalid:8081" in message, message
    if registry.subject:
        assert "'t-value'" in message and raised.value.subject == "t-value"
    assert raised.value.schema_id == 7
    assert isinstance(non_restartable_cause(raised.value), NonRestartableError)


def test_an_unknown_id_a_corrupt_payload_and_an_unframed_value_stay_malformed_records() -> None:
    """The other side of the rule: the record's own problems (an id the registry does
    not know, a payload that does not decode, a value without the wire format's
    header) are malformed records, and the good ones around them arrive."""
    from lockgate.connectors.schema_registry.client import UnknownSchemaError

    class Partial(Stub):
        def schema(self, schema_id):
            if schema_id == 8:
                raise UnknownSchemaError("no such id", url=self.redacted_url, status=404)
            return super().schema(schema_id)

    good = b"\x00\x00\x00\x00\x07" + zigzag(1) + b"a" + zigzag(7)
    unknown = b"\x00\x00\x00\x00\x08" + zigzag(1) + b"a" + zigzag(7)
    corrupt = b"\x00\x00\x00\x00\x07" + zigzag(9) + b"a"
    for schema in (None, FLAT_ARROW):
        d = decoder("unused", schema=schema, registry=Partial(json.dumps(FLAT)))
        batch, bad = decode(d, [good, unknown, corrupt, b"plain", good])
        assert len(batch) == 2 if schema is None else batch.num_rows == 2
        assert [(i, sid) for i, _, sid in bad] == [(1, 8), (2, 7), (3, None)], bad


def test_an_array_of_items_that_take_no_bytes_is_refused_not_decoded_without_bound() -> None:
    """An array whose items take no bytes (null, an empty record, a record of nulls, a
    fixed of size 0) let a few payload bytes claim 2**62 items: fastavro looped and
    allocated without bound. A writer's schema with one fails the job
    (WriterSchemaError naming the field); an array of items that take bytes stops at
    the payload's end (malformed), and a map's entries always take their key's bytes."""
    out = _run_child(
        """
        from lockgate.connectors.schema_registry.formats import WriterSchemaError
        empty = {"type": "record", "name": "Empty", "fields": []}
        nulls = {"type": "record", "name": "Nulls", "fields": [{"name": "n", "type": "null"},
                 {"name": "z", "type": {"type": "fixed", "name": "Z", "size": 0}}]}
        for items in ("null", empty, nulls, {"type": "fixed", "name": "Z0", "size": 0}):
            writer = {"type": "record", "name": "A", "fields": [
                {"name": "ok", "type": "long"},
                {"name": "deep", "type": {"type": "record", "name": "In", "fields": [
                    {"name": "a", "type": ["null", {"type": "array", "items": items}]}]}}]}
            bomb = b"\\x00\\x00\\x00\\x00\\x07" + zigzag(1) + zigzag(1) + zigzag(2**62) + b"\\x00"
            try:
                decode(decoder(writer), [bomb])
            except WriterSchemaError as e:
                assert "deep.a" in str(e) and "take no bytes" in str(e), str(e)
                print("refused")
            else:
                raise AssertionError(f"decoded {items}")
        for items in ("long", {"type": "map", "values": "null"}):
            writer = {"type": "record", "name": "A", "fields": [
                {"name": "a", "type": {"type": "array", "items": items}}]}
            bomb = b"\\x00\\x00\\x00\\x00\\x07" + zigzag(2**62) + b"\\x02" * 1000
            batch, bad = decode(decoder(writer), [bomb])
            assert batch is None and [i for i, _, _ in bad] == [0], bad
            print("malformed")
        writer = {"type": "record", "name": "A", "fields": [
            {"name": "m", "type": {"type": "map", "values": "null"}}]}
        bomb = b"\\x00\\x00\\x00\\x00\\x07" + zigzag(2**62) + b"\\x02a" * 1000
        batch, bad = decode(decoder(writer), [bomb])
        assert batch is None and [i for i, _, _ in bad] == [0], bad
        print("malformed")
        """,
        timeout=60,
        memory_bytes=1 << 30,
    )
    assert out.split() == ["refused"] * 4 + ["malformed"] * 3, out


def test_the_json_schema_sink_refuses_a_ref_outside_its_document_and_never_fetches_it() -> None:
    """The sink's validator had no never-retrieve registry: a ``$ref`` to http://...
    went out through urlopen, without a timeout, when the first record was written,
    and its error lost the record's position. Now such a schema is refused when the
    writer is made (ConfigurationError naming the $ref), nothing is fetched, and refs
    inside the document (a JSON pointer, an embedded ``$id``) still work."""
    import http.server
    import threading

    from lockgate.connectors.schema_registry.json_schema_write import JsonSchemaWriter
    from lockgate.errors import ConfigurationError

    asked: list[str] = []

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = b'{"type": "integer"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = f"http://127.0.0.1:{server.server_port}/n.json"
        for schema in (
            {"type": "object", "properties": {"a": {"$ref": remote}}},
            {"type": "array", "items": {"anyOf": [{"type": "null"}, {"$ref": remote + "#/x"}]}},
            {
                "$id": f"http://127.0.0.1:{server.server_port}/root.json",
                "properties": {"a": {"$ref": "n.json"}},
            },
            {"properties": {"a": {"$ref": "#/definitions/missing"}}},
        ):
            with pytest.raises(ConfigurationError, match=r"\$ref") as raised:
                writer = JsonSchemaWriter(schema)
                writer.encode({"a": 1})
            assert "outside" in str(raised.value) or "cannot be resolved" in str(raised.value), (
                raised.value
            )
        assert asked == [], "a $ref was fetched"
    finally:
        server.shutdown()
        server.server_close()
    inside = JsonSchemaWriter(
        {
            "$id": "http://example.invalid/root.json",
            "definitions": {"n": {"type": "integer"}, "e": {"$id": "e.json", "type": "string"}},
            "type": "object",
            "properties": {
                "a": {"$ref": "#/definitions/n"},
                "b": {"$ref": "e.json"},
                "c": {"enum": [{"$ref": "http://data.invalid/data-not-a-ref"}, 1]},
            },
        }
    )
    assert inside.encode({"a": 1, "b": "x"}) == b'{"a": 1, "b": "x"}'
    with pytest.raises(ValueError, match=r"\['a'\] does not fit the JSON Schema"):
        inside.encode({"a": "x", "b": "x"})


def test_avro_references_are_resolved_or_fail_the_job_saying_which_one() -> None:
    """A writer's schema with references is parsed with the named types of the
    subjects' versions they name (their own references first); a reference that is
    not in the registry, is not Avro or does not define the type it names fails the
    job (WriterSchemaError naming it), never each record."""
    from lockgate.connectors.schema_registry.client import (
        RegisteredSchema,
        Schema,
        SchemaReference,
    )
    from lockgate.connectors.schema_registry.formats import WriterSchemaError

    kind = {"type": "enum", "name": "Kind", "namespace": "lg", "symbols": ["A", "B"]}
    other = {"type": "record", "name": "Other", "namespace": "lg", "fields": [
        {"name": "x", "type": "long"}, {"name": "k", "type": "lg.Kind"}]}  # fmt: skip
    main = {"type": "record", "name": "Main", "namespace": "lg", "fields": [
        {"name": "o", "type": "lg.Other"}]}  # fmt: skip

    class Versions(Stub):
        def __init__(self, versions: dict[tuple[str, int], Schema]) -> None:
            super().__init__(json.dumps(main), references=[SchemaReference("lg.Other", "o", 2)])
            self.versions = versions

        def version(self, subject: str, version: int) -> Any:
            found = self.versions.get((subject, version))
            return None if found is None else RegisteredSchema(1, found, subject, version)

    good = {
        ("o", 2): Schema(json.dumps(other), references=(SchemaReference("lg.Kind", "k", 1),)),
        ("k", 1): Schema(json.dumps(kind)),
    }
    value = b"\x00\x00\x00\x00\x07" + zigzag(3) + zigzag(1)
    batch, bad = decode(decoder("unused", registry=Versions(good)), [value])
    assert bad == [] and batch.rows == [{"o": {"x": 3, "k": "B"}}]
    for versions, says in (
        ({("o", 2): good[("o", 2)]}, "lg.Kind (k v1) is not in the registry"),
        (
            {**good, ("k", 1): Schema('{"type": "string"}')},
            "does not define the named type lg.Kind",
        ),
        ({**good, ("k", 1): Schema('{"type": "object"}', "JSON")}, "is a JSON schema, not Avro"),
        ({**good, ("k", 1): Schema('{"type": "enum", "name": "lg.Kind"}')}, "fastavro can parse"),
    ):
        with pytest.raises(WriterSchemaError, match="schema id 7") as raised:
            decode(decoder("unused", registry=Versions(versions)), [value])
        assert says in str(raised.value), str(raised.value)

"""KafkaSink's registry formats (issue 38, writing): Avro, Protobuf and JSON Schema
records framed with their schema's id, registered (or looked up) at job start under the
subject of each strategy, against the real registry (Apicurio's Confluent-compatible
API, ``scripts/services.sh``) and broker.

What the sink writes is read back with confluent-kafka's own deserializers; a schema
the registry's compatibility rule refuses, and a subject that does not hold the schema
with ``auto_register=False``, fail the job before its first record, naming the subject;
a record that does not fit fails with its position; an exactly-once Avro pipeline
(Kafka Avro in -> keyed running total -> Kafka Avro out) through 5 injected failures
writes exactly the failure-free output (M-X1, M-X2).

The unit tests at the top need no service: the ``.proto`` renderer, message indexes,
Arrow -> Avro, the writers' errors and the sink's argument checks.
"""

from __future__ import annotations

import datetime
import io
import json
import pickle
import uuid
from decimal import Decimal
from typing import Any

import cloudpickle
import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

import lockgate as lg
from kafka_fixtures import BOOTSTRAP, read_committed
from lockgate.connectors.kafka.sink import KafkaSink
from lockgate.connectors.schema_registry.arrow_to_avro import arrow_to_avro
from lockgate.connectors.schema_registry.avro_write import AvroWriter
from lockgate.connectors.schema_registry.client import SchemaRegistry
from lockgate.connectors.schema_registry.json_schema_write import JsonSchemaWriter
from lockgate.connectors.schema_registry.protobuf_write import (
    ProtobufWriter,
    message_indexes,
    render_proto,
)
from lockgate.connectors.schema_registry.subjects import subject_name
from lockgate.connectors.schema_registry.wire import decode_message_indexes, schema_id_of
from lockgate.errors import ConfigurationError
from registry_schemas import JSON_V1, REGISTRY_URL, OrderV1, order_v1, proto_row, unique

UTC = datetime.timezone.utc

# ------------------------------------------------------------------ test schemas


def avro_order(namespace: str) -> dict[str, Any]:
    """An Avro ``Order`` in ``namespace`` (unique per test: the ``record`` strategy's
    subject is the record's name)."""
    return {
        "type": "record",
        "name": "Order",
        "namespace": namespace,
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {
                "name": "status",
                "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]},
            },
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    }


def avro_record(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "name": f"order-{i}",
        "tags": [f"t{j}" for j in range(i % 3)],
        "status": "PAID" if i % 2 else "NEW",
        "note": None if i % 3 else f"note {i} é",
        "at": datetime.datetime(2026, 1, 1, tzinfo=UTC) + datetime.timedelta(seconds=i),
    }


def json_order(title: str) -> dict[str, Any]:
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": title,
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "status": {"type": "string", "enum": ["NEW", "PAID"]},
        },
        "required": ["id", "name", "tags", "status"],
        "additionalProperties": False,
    }


def json_record(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "name": f"order-{i}",
        "tags": [f"t{j}" for j in range(i % 3)],
        "status": "PAID" if i % 2 else "NEW",
    }


_F = descriptor_pb2.FieldDescriptorProto


def order_file(package: str) -> descriptor_pb2.FileDescriptorProto:
    """``<package>/order.proto``: an enum, a first message ``Meta`` and ``Order``
    (message index [1]) with a map, a Timestamp, a proto3 optional, a oneof, a nested
    message (``Order.Line``, indexes [1, 1]: the map's entry type is nested type 0), an
    unpacked repeated field and reserved numbers and names."""
    f = descriptor_pb2.FileDescriptorProto(
        name=f"{package.replace('.', '/')}/order.proto",
        package=package,
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )
    status = f.enum_type.add(name="Status")
    status.value.add(name="NEW", number=0)
    status.value.add(name="PAID", number=1)
    meta = f.message_type.add(name="Meta")
    meta.field.add(name="source", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    order = f.message_type.add(name="Order")
    entry = order.nested_type.add(name="CountsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=_F.TYPE_INT64, label=_F.LABEL_OPTIONAL)
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    line.field.add(name="qty", number=2, type=_F.TYPE_INT32, label=_F.LABEL_OPTIONAL)
    kind = order.enum_type.add(name="Kind")
    kind.value.add(name="RETAIL", number=0)
    kind.value.add(name="BULK", number=1)
    add = order.field.add
    add(name="id", number=1, type=_F.TYPE_INT64, label=_F.LABEL_OPTIONAL)
    add(name="name", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    add(name="tags", number=3, type=_F.TYPE_STRING, label=_F.LABEL_REPEATED)
    add(
        name="status",
        number=4,
        type=_F.TYPE_ENUM,
        type_name=f".{package}.Status",
        label=_F.LABEL_OPTIONAL,
    )
    add(
        name="counts",
        number=5,
        type=_F.TYPE_MESSAGE,
        type_name=f".{package}.Order.CountsEntry",
        label=_F.LABEL_REPEATED,
    )
    add(
        name="at",
        number=6,
        type=_F.TYPE_MESSAGE,
        type_name=".google.protobuf.Timestamp",
        label=_F.LABEL_OPTIONAL,
    )
    order.oneof_decl.add(name="contact")  # synthetic oneofs come after the real ones
    order.oneof_decl.add(name="_score")
    add(
        name="score",
        number=7,
        type=_F.TYPE_DOUBLE,
        label=_F.LABEL_OPTIONAL,
        proto3_optional=True,
        oneof_index=1,
    )
    add(name="email", number=8, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL, oneof_index=0)
    add(name="phone", number=9, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL, oneof_index=0)
    add(
        name="line",
        number=10,
        type=_F.TYPE_MESSAGE,
        type_name=f".{package}.Order.Line",
        label=_F.LABEL_OPTIONAL,
    )
    add(
        name="kind",
        number=11,
        type=_F.TYPE_ENUM,
        type_name=f".{package}.Order.Kind",
        label=_F.LABEL_OPTIONAL,
    )
    nums = add(name="nums", number=12, type=_F.TYPE_INT32, label=_F.LABEL_REPEATED)
    nums.options.packed = False
    add(name="blob", number=13, type=_F.TYPE_BYTES, label=_F.LABEL_OPTIONAL)
    order.reserved_range.add(start=20, end=26)
    order.reserved_name.append("old")
    return f


def order_class(package: str) -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(order_file(package))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order"))


def proto_record(i: int) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": i,
        "name": f"order-{i}",
        "tags": [f"t{j}" for j in range(i % 3)],
        "status": "PAID" if i % 2 else "NEW",
        "counts": {"a": i, "b": -i},
        "at": datetime.datetime(2026, 1, 1, tzinfo=UTC) + datetime.timedelta(seconds=i),
        "line": {"sku": f"sku-{i}", "qty": i % 5},
        "kind": "BULK" if i % 4 == 0 else "RETAIL",
        "nums": [i, i + 1],
        "blob": bytes([i % 256, 0, 255]),
    }
    if i % 2:
        record["score"] = i / 8
    record["email" if i % 3 else "phone"] = f"contact-{i}"
    return record


RENDERED = """syntax = "proto3";

package {p};

import "google/protobuf/timestamp.proto";

message Meta {
  string source = 1;
}

message Order {
  reserved 20 to 25;
  reserved "old";
  int64 id = 1;
  string name = 2;
  repeated string tags = 3;
  .{p}.Status status = 4;
  map<string, int64> counts = 5;
  .google.protobuf.Timestamp at = 6;
  optional double score = 7;
  oneof contact {
    string email = 8;
    string phone = 9;
  }
  .{p}.Order.Line line = 10;
  .{p}.Order.Kind kind = 11;
  repeated int32 nums = 12 [packed = false];
  bytes blob = 13;
  message Line {
    string sku = 1;
    int32 qty = 2;
  }
  enum Kind {
    RETAIL = 0;
    BULK = 1;
  }
}

enum Status {
  NEW = 0;
  PAID = 1;
}
"""


# ------------------------------------------------------------------ unit tests


def test_render_proto_writes_the_file_of_a_descriptor() -> None:
    """Messages, nested ones, enums, a map (its entry type not written as a message),
    proto3 optional (its synthetic oneof not written), a oneof, an unpacked repeated
    field, reserved ranges (the descriptor's end is exclusive) and names, imports."""
    assert render_proto(order_file("lgw.unit")) == RENDERED.replace("{p}", "lgw.unit")


def test_render_proto_of_proto2_labels_defaults_and_ranges() -> None:
    f = descriptor_pb2.FileDescriptorProto(name="p2.proto", package="p2")
    m = f.message_type.add(name="M")
    m.field.add(
        name="a", number=1, type=_F.TYPE_STRING, label=_F.LABEL_REQUIRED, default_value='x"y'
    )
    m.field.add(name="b", number=2, type=_F.TYPE_INT32, label=_F.LABEL_OPTIONAL, default_value="7")
    m.field.add(name="c_d", number=3, type=_F.TYPE_INT32, label=_F.LABEL_OPTIONAL, json_name="cD")
    m.field.add(name="e", number=4, type=_F.TYPE_INT32, label=_F.LABEL_OPTIONAL, json_name="ee")
    m.reserved_range.add(start=9, end=10)
    m.reserved_range.add(start=100, end=536_870_912)
    m.extension_range.add(start=50, end=60)
    e = f.enum_type.add(name="E")
    e.options.allow_alias = True
    e.value.add(name="A", number=0)
    e.value.add(name="B", number=0)
    e.reserved_range.add(start=5, end=7)
    assert render_proto(f) == (
        'syntax = "proto2";\n\npackage p2;\n\nmessage M {\n  reserved 9, 100 to max;\n'
        "  extensions 50 to 59;\n"
        '  required string a = 1 [default = "x\\"y"];\n'
        "  optional int32 b = 2 [default = 7];\n"
        "  optional int32 c_d = 3;\n"
        '  optional int32 e = 4 [json_name = "ee"];\n}\n\n'
        "enum E {\n  option allow_alias = true;\n  reserved 5 to 7;\n  A = 0;\n  B = 0;\n}\n"
    )


def test_message_indexes_name_the_message_in_its_file() -> None:
    cls = order_class(f"lgw.idx{uuid.uuid4().hex[:6]}")
    assert message_indexes(cls.DESCRIPTOR) == [1]
    assert message_indexes(cls.DESCRIPTOR.nested_types_by_name["Line"]) == [1, 1]
    assert message_indexes(cls.DESCRIPTOR.file.message_types_by_name["Meta"]) == [0]


def test_protobuf_writer_pickles_its_class_by_descriptor_and_encodes_dicts() -> None:
    """A class built at run time has no module to pickle it by: the writer carries its
    file's descriptors and builds it again, encoding the same bytes."""
    cls = order_class(f"lgw.pk{uuid.uuid4().hex[:6]}")
    writer = ProtobufWriter(cls)
    copy = pickle.loads(cloudpickle.dumps(writer))
    for i in range(6):
        want = cls(**proto_record(i)).SerializeToString()
        assert writer.encode(proto_record(i)) == want
        assert copy.encode(proto_record(i)) == want
        assert copy.encode(cls(**proto_record(i))) == want  # a message of the class
    assert copy.message_indexes == [1] and copy.full_name == cls.DESCRIPTOR.full_name
    with pytest.raises(ValueError, match='has no "nope" field'):
        copy.encode({"id": 1, "nope": 2})
    with pytest.raises(TypeError, match="int"):
        copy.encode({"id": "one"})
    with pytest.raises(TypeError, match="dicts of its fields"):
        copy.encode([1])
    other = order_class(f"lgw.other{uuid.uuid4().hex[:6]}")
    with pytest.raises(TypeError, match="not "):
        copy.encode(other(id=1))


def test_protobuf_writer_refuses_imports_other_than_well_known_types() -> None:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto(name="lgw/dep.proto", package="lgwdep"))
    f = descriptor_pb2.FileDescriptorProto(
        name="lgw/main.proto", package="lgwmain", syntax="proto3", dependency=["lgw/dep.proto"]
    )
    f.message_type.add(name="M")
    pool.Add(f)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("lgwmain.M"))
    with pytest.raises(ConfigurationError, match="imports 'lgw/dep.proto'"):
        ProtobufWriter(cls)
    with pytest.raises(ConfigurationError, match="generated message class"):
        ProtobufWriter(dict)


def test_arrow_to_avro_maps_each_type_and_rows_encode_as_fastavro_reads_them() -> None:
    schema = pa.schema(
        [
            pa.field("i8", pa.int8(), nullable=False),
            ("i64", pa.int64()),
            ("u32", pa.uint32()),
            ("f", pa.float32()),
            ("d", pa.float64()),
            ("b", pa.bool_()),
            ("s", pa.string()),
            ("bin", pa.binary()),
            ("fx", pa.binary(3)),
            ("dec", pa.decimal128(10, 2)),
            ("day", pa.date32()),
            ("ts", pa.timestamp("ms", tz="UTC")),
            ("tus", pa.timestamp("us", tz="UTC")),
            ("l", pa.list_(pa.int32())),
            ("st", pa.struct([("x", pa.string()), ("y", pa.struct([("z", pa.int64())]))])),
            ("m", pa.map_(pa.string(), pa.float64())),
            ("cat", pa.dictionary(pa.int8(), pa.string())),
        ]
    )
    avro = arrow_to_avro(schema, name="Row", namespace="lgw")
    fields = {f["name"]: f["type"] for f in avro["fields"]}
    assert fields["i8"] == "int"
    assert fields["i64"] == ["null", "long"] and fields["u32"] == ["null", "long"]
    assert fields["f"] == ["null", "float"] and fields["d"] == ["null", "double"]
    assert fields["fx"][1] == {"type": "fixed", "name": "fx", "size": 3, "namespace": "lgw.Row"}
    assert fields["dec"][1] == {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": 10,
        "scale": 2,
    }
    assert fields["ts"][1]["logicalType"] == "timestamp-millis"
    assert fields["tus"][1]["logicalType"] == "timestamp-micros"
    assert fields["st"][1]["fields"][1]["type"][1]["namespace"] == "lgw.Row.st"
    assert fields["m"] == ["null", {"type": "map", "values": ["null", "double"]}]
    assert fields["cat"] == ["null", "string"]
    rows = [
        {
            "i8": 1,
            "i64": 2**40,
            "u32": 7,
            "f": 1.5,
            "d": 0.1,
            "b": True,
            "s": "é",
            "bin": b"\x00\x01",
            "fx": b"abc",
            "dec": Decimal("12.34"),
            "day": datetime.date(2026, 3, 1),
            "ts": datetime.datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=UTC),
            "tus": datetime.datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC),
            "l": [1, None, 3],
            "st": {"x": "a", "y": {"z": 9}},
            "m": [("k", 1.0)],
            "cat": "red",
        },
        {name: None for name in schema.names} | {"i8": -1},
    ]
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    writer = AvroWriter(schema)  # a pyarrow schema: converted, named Record
    assert writer.full_name == "Record"
    parsed = fastavro.parse_schema(writer.schema)
    for row in batch.to_pylist(maps_as_pydicts="strict"):  # as the sink takes Arrow rows
        back = fastavro.schemaless_reader(io.BytesIO(writer.encode(row)), parsed, None)
        assert back == row


def test_arrow_to_avro_refuses_what_avro_cannot_hold_naming_the_field() -> None:
    with pytest.raises(ConfigurationError, match=r"'Record.t'.*timestamp\('us'\)"):
        arrow_to_avro(pa.schema([("t", pa.timestamp("ns"))]))
    with pytest.raises(ConfigurationError, match="map keys are strings"):
        arrow_to_avro(pa.schema([("m", pa.map_(pa.int32(), pa.int32()))]))
    with pytest.raises(ConfigurationError, match="not an Avro name"):
        arrow_to_avro(pa.schema([("a b", pa.int32())]))
    with pytest.raises(ConfigurationError, match="no Avro form"):
        arrow_to_avro(pa.schema([("n", pa.null())]))


def test_avro_writer_names_what_does_not_fit() -> None:
    writer = AvroWriter(avro_order("lgw.fit"))
    assert writer.full_name == "lgw.fit.Order"
    ok = avro_record(3)
    writer.encode(ok)
    cases = [
        ({**ok, "id": "three"}, "lgw.fit.Order.id is <three>"),
        ({**ok, "extra": 1}, "more fields than the schema specifies: extra"),
        ({k: v for k, v in ok.items() if k != "name"}, "Field name is specified"),
        ({**ok, "status": "LOST"}, "LOST"),
        (5, "is a dict of its fields, got int"),
    ]
    for record, message in cases:
        with pytest.raises(ValueError, match=message):
            writer.encode(record)
    note_missing = {k: v for k, v in ok.items() if k != "note"}
    assert writer.encode(note_missing) == writer.encode({**ok, "note": None}), "the default"
    with pytest.raises(ConfigurationError, match="not a valid Avro schema"):
        AvroWriter({"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]})


def test_json_schema_writer_validates_and_names_the_path() -> None:
    writer = JsonSchemaWriter(json_order("LgwOrder"))
    assert writer.full_name == "LgwOrder"
    described = {**json_order("LgwOrder"), "description": "commande réglée"}
    assert JsonSchemaWriter(described).schema_text == json.dumps(described), "as Python sends it"
    assert AvroWriter(avro_order("lgw.t")).schema_text == json.dumps(avro_order("lgw.t"))
    assert json.loads(writer.encode(json_record(1))) == json_record(1)
    copy = pickle.loads(pickle.dumps(writer))
    with pytest.raises(ValueError, match=r"\['id'\] does not fit the JSON Schema"):
        copy.encode({**json_record(1), "id": "x"})
    with pytest.raises(ValueError, match="'status' is a required property"):
        copy.encode({k: v for k, v in json_record(1).items() if k != "status"})
    with pytest.raises(ConfigurationError, match="not a valid JSON Schema"):
        JsonSchemaWriter({"type": 5})


def test_subject_names_of_each_strategy() -> None:
    assert subject_name("topic", "orders", "a.B") == "orders-value"
    assert subject_name("topic", "orders", None, key=True) == "orders-key"
    assert subject_name("record", "orders", "a.B") == "a.B"
    assert subject_name("topic_record", "orders", "a.B") == "orders-a.B"
    with pytest.raises(ConfigurationError, match="names none"):
        subject_name("record", "orders", None)


def test_registry_arguments_are_checked_at_construction() -> None:
    registry = SchemaRegistry(REGISTRY_URL)
    avro = avro_order("lgw.args")

    def sink(**kw: Any) -> KafkaSink:
        return KafkaSink(BOOTSTRAP, "t", **kw)

    with pytest.raises(ConfigurationError, match="format must be one of .*'avro'"):
        sink(format="parquet")
    with pytest.raises(ConfigurationError, match=r"pass schema_registry=lg.connectors.Schema"):
        sink(format="avro", schema=avro)
    with pytest.raises(ConfigurationError, match="needs schema="):
        sink(format="avro", schema_registry=registry)
    with pytest.raises(ConfigurationError, match="schema_registry is only used by the registry"):
        sink(format="json", schema_registry=registry)
    with pytest.raises(ConfigurationError, match="schema is for the registry formats"):
        sink(format="text", schema=avro)
    with pytest.raises(ConfigurationError, match="subject_strategy must be one of"):
        sink(format="avro", schema_registry=registry, schema=avro, subject_strategy="name")
    with pytest.raises(ConfigurationError, match="auto_register must be True"):
        sink(format="avro", schema_registry=registry, schema=avro, auto_register="yes")
    with pytest.raises(ConfigurationError, match="names none.*subject_strategy='topic'"):
        sink(format="avro", schema_registry=registry, schema='"long"', subject_strategy="record")
    with pytest.raises(ConfigurationError, match="names none"):
        sink(
            format="json_schema",
            schema_registry=registry,
            schema={"type": "object"},
            subject_strategy="topic_record",
        )
    with pytest.raises(ConfigurationError, match="KafkaSink schema: not a valid Avro schema"):
        sink(format="avro", schema_registry=registry, schema={"type": "recrd"})
    with pytest.raises(ConfigurationError, match="KafkaSink schema: .*generated message class"):
        sink(format="protobuf", schema_registry=registry, schema=avro)
    with pytest.raises(ConfigurationError, match="not a pyarrow.Schema"):
        sink(format="json_schema", schema_registry=registry, schema=pa.schema([("a", pa.int8())]))
    with pytest.raises(ConfigurationError, match="key_format must be None"):
        sink(key="id", key_format="text")
    with pytest.raises(ConfigurationError, match="but key is None: set key="):
        sink(key_format="avro", schema_registry=registry, key_schema=avro)
    with pytest.raises(ConfigurationError, match="needs schema=.*for the keys: key_schema="):
        sink(key="id", key_format="avro", schema_registry=registry)
    with pytest.raises(ConfigurationError, match="key_schema is for a registry key_format"):
        sink(key="id", key_schema=avro)
    keyed = sink(key="id", key_format="avro", schema_registry=registry, key_schema='"long"')
    assert keyed.registry_writer is None and keyed.key_writer.subject("t") == "t-key"
    # the sink travels to Spark workers: picklable with each format's schema
    cls = order_class(f"lgw.args{uuid.uuid4().hex[:6]}")
    for fmt, schema in (
        ("avro", avro),
        ("avro", pa.schema([("a", pa.int64())])),
        ("protobuf", cls),
        ("json_schema", json_order("LgwArgs")),
    ):
        made = sink(format=fmt, schema_registry=registry, schema=schema)
        copy = pickle.loads(cloudpickle.dumps(made))
        assert copy.registry_writer.schema == made.registry_writer.schema


# ------------------------------------------------------------------ against the registry


def sr_client() -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": REGISTRY_URL})


def test_rendered_proto_is_accepted_by_the_registry_and_looked_up_as_the_same_schema() -> None:
    """The registry parses the rendered text (a syntax error is refused with 422/500),
    and a lookup of the same text finds the version registered."""
    cls = order_class(f"lgw.reg{uuid.uuid4().hex[:6]}")
    registry = SchemaRegistry(REGISTRY_URL)
    sink = KafkaSink(
        BOOTSTRAP, unique("proto"), format="protobuf", schema_registry=registry, schema=cls
    )
    writer = sink.registry_writer
    subject = writer.subject(sink.topic)
    schema_id = writer.schema_id(sink.topic)
    found = registry.lookup(subject, writer.schema)
    assert found is not None and found.schema_id == schema_id
    assert registry.schema(schema_id).schema.schema == writer.schema.schema


def read_values(topic: str) -> list[bytes]:
    return read_committed(topic, raw=True)


@pytest.mark.hang_guard(300)
def test_sink_output_is_read_by_confluent_deserializers_per_format_and_strategy(
    executor, tmp_path, kafka_topic
) -> None:
    """Nine sinks, one per format and subject strategy (deliveries exactly_once,
    at_least_once and none in turn); confluent-kafka's AvroDeserializer and
    JSONDeserializer read every topic back, with the writer's schema fetched from the
    registry by the framed id, into exactly the records written; the framed id is the
    one the expected subject holds. Protobuf: ProtobufDeserializer reads the framing,
    message indexes and payload; Apicurio does not answer ``?format=serialized`` (it
    returns the .proto text, which confluent-kafka's deserializer cannot parse), so the
    writer's schema is checked through the registry's API instead."""
    n = 30
    tag = uuid.uuid4().hex[:8]
    registry = SchemaRegistry(REGISTRY_URL)
    # one namespace per format: the record strategy's subject is the record's name
    schemas = {
        "avro": avro_order(f"lgw.a{tag}"),
        "protobuf": order_class(f"lgw.p{tag}"),
        "json_schema": json_order(f"LgwOrder{tag}"),
    }
    makers = {"avro": avro_record, "protobuf": proto_record, "json_schema": json_record}
    deliveries = ["exactly_once", "at_least_once", "none"]
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    numbers = env.from_collection(list(range(n)), name="numbers")
    topics: dict[tuple[str, str], str] = {}
    turn = 0
    for fmt, make in makers.items():
        records = numbers.map(make, name=f"to {fmt}")
        for strategy in ("topic", "record", "topic_record"):
            topic = kafka_topic(1)
            topics[(fmt, strategy)] = topic
            records.sink_to(
                KafkaSink(
                    BOOTSTRAP,
                    topic,
                    format=fmt,
                    schema_registry=registry,
                    schema=schemas[fmt],
                    subject_strategy=strategy,
                    delivery=deliveries[turn % 3],
                ),
                name=f"{fmt} {strategy}",
            ).uid(f"{fmt}-{strategy}")
            turn += 1
    env.execute("registry formats out")

    client = sr_client()
    names = {
        "avro": f"lgw.a{tag}.Order",
        "protobuf": f"lgw.p{tag}.Order",
        "json_schema": f"LgwOrder{tag}",
    }
    cls = schemas["protobuf"]
    for (fmt, strategy), topic in topics.items():
        subject = {
            "topic": f"{topic}-value",
            "record": names[fmt],
            "topic_record": f"{topic}-{names[fmt]}",
        }[strategy]
        latest = client.get_latest_version(subject)
        values = read_values(topic)
        assert len(values) == n, f"{fmt} {strategy}: {len(values)} records"
        assert {schema_id_of(v) for v in values} == {latest.schema_id}, (fmt, strategy)
        ctx = SerializationContext(topic, MessageField.VALUE)
        if fmt == "avro":
            deserializer: Any = AvroDeserializer(schema_registry_client=client)
            got = sorted((deserializer(v, ctx) for v in values), key=lambda r: r["id"])
            assert got == [avro_record(i) for i in range(n)], (fmt, strategy)
        elif fmt == "json_schema":
            deserializer = JSONDeserializer(None, schema_registry_client=client)
            got = sorted((deserializer(v, ctx) for v in values), key=lambda r: r["id"])
            assert got == [json_record(i) for i in range(n)], (fmt, strategy)
        else:
            deserializer = ProtobufDeserializer(cls, {"use.deprecated.format": False})
            got = sorted((deserializer(v, ctx) for v in values), key=lambda m: m.id)
            assert got == [cls(**proto_record(i)) for i in range(n)], (fmt, strategy)
            assert all(decode_message_indexes(v)[0] == [1] for v in values)
            registered = client.get_schema(latest.schema_id)
            assert registered.schema_type == "PROTOBUF"
            assert registered.schema_str == render_proto(order_file(f"lgw.p{tag}"))


@pytest.mark.hang_guard(300)
def test_keys_in_a_registry_format_are_read_by_confluent_deserializers(
    executor, tmp_path, kafka_topic
) -> None:
    """key_format='avro' with JSON values: each key (a record from a key function)
    framed with the id of the ``<topic>-key`` subject; a None key stays None."""
    topic = kafka_topic(1)
    key_schema = {
        "type": "record",
        "name": "OrderKey",
        "namespace": f"lgw.k{uuid.uuid4().hex[:8]}",
        "fields": [{"name": "region", "type": "string"}, {"name": "id", "type": "long"}],
    }

    def key_of(record: dict[str, Any]) -> Any:
        return None if record["id"] == 0 else {"region": f"r{record['id'] % 2}", "id": record["id"]}

    records = [json_record(i) for i in range(10)]
    sink = KafkaSink(
        BOOTSTRAP,
        topic,
        key=key_of,
        key_format="avro",
        key_schema=key_schema,
        schema_registry=SchemaRegistry(REGISTRY_URL),
        delivery="at_least_once",
    )
    registry_job(executor, tmp_path, topic, sink, records).execute("avro keys")
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": BOOTSTRAP, "group.id": unique("keys"), "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        messages = []
        while len(messages) < len(records):
            batch = consumer.consume(100, 10)
            assert batch, f"{len(messages)} of {len(records)} records read from {topic}"
            messages += [m for m in batch if m.error() is None]
    finally:
        consumer.close()
    client = sr_client()
    key_id = client.get_latest_version(f"{topic}-key").schema_id
    deserializer = AvroDeserializer(schema_registry_client=client)
    ctx = SerializationContext(topic, MessageField.KEY)
    got = []
    for m in messages:
        key = m.key()
        if key is not None:
            assert schema_id_of(key) == key_id
            key = deserializer(key, ctx)
        got.append((key, json.loads(m.value())))
    assert got == [(key_of(r), r) for r in records]


ARROW_ROWS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("at", pa.timestamp("ms", tz="UTC")),
        ("attrs", pa.map_(pa.string(), pa.int64())),
        ("line", pa.struct([("sku", pa.string()), ("qty", pa.int32())])),
    ]
)


def arrow_row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "name": None if i % 5 == 0 else f"order-{i}",
        "at": datetime.datetime(2026, 1, 1, tzinfo=UTC) + datetime.timedelta(milliseconds=i),
        "attrs": {"a": i, "b": 2 * i} if i % 2 else None,
        "line": {"sku": f"s{i}", "qty": i % 7},
    }


def to_arrow(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(batch.to_pylist(), schema=ARROW_ROWS)


@pytest.mark.hang_guard(300)
def test_arrow_batches_are_written_as_avro_of_their_pyarrow_schema(
    executor, tmp_path, kafka_topic
) -> None:
    """Arrow RecordBatches (a map, a struct, a timestamp, nulls) going to a sink whose
    schema is their pyarrow schema: encoded by rows as ``arrow_to_avro`` gives it, and
    read back by confluent-kafka's AvroDeserializer as the rows."""
    topic = kafka_topic(1)
    sink = KafkaSink(
        BOOTSTRAP,
        topic,
        format="avro",
        schema_registry=SchemaRegistry(REGISTRY_URL),
        schema=ARROW_ROWS,
        delivery="exactly_once",
    )
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    records = [arrow_row(i) for i in range(200)]
    env.from_collection(records).map_batches(to_arrow, name="to arrow").sink_to(
        sink, name="out"
    ).uid("out")
    env.execute("arrow to avro")
    client = sr_client()
    deserializer = AvroDeserializer(schema_registry_client=client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    values = read_values(topic)
    assert {schema_id_of(v) for v in values} == {
        client.get_latest_version(f"{topic}-value").schema_id
    }
    assert [deserializer(v, ctx) for v in values] == records


def v1_proto_row(i: int) -> dict[str, Any]:
    return proto_row(i, 1, 1)


@pytest.mark.hang_guard(300)
def test_protobuf_and_json_schema_output_reads_back_through_kafka_source(
    executor, tmp_path, kafka_topic
) -> None:
    """lockgate's sink, then lockgate's source (format='protobuf' with the message
    class, format='json_schema'): the registered .proto text and JSON Schema are what
    the reader resolves each record's id to, and the records come back as written."""
    from lockgate.connectors import KafkaSource

    n = 40
    registry = SchemaRegistry(REGISTRY_URL)
    proto_topic, json_topic = kafka_topic(1), kafka_topic(1)
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "out")
    numbers = env.from_collection(list(range(n)))
    numbers.map(v1_proto_row).sink_to(
        KafkaSink(
            BOOTSTRAP, proto_topic, format="protobuf", schema_registry=registry, schema=OrderV1
        ),
        name="proto out",
    ).uid("proto-out")
    numbers.map(order_v1).sink_to(
        KafkaSink(
            BOOTSTRAP, json_topic, format="json_schema", schema_registry=registry, schema=JSON_V1
        ),
        name="json out",
    ).uid("json-out")
    env.execute("protobuf and json schema out")

    for topic, fmt, reader, want in (
        (proto_topic, "protobuf", OrderV1, [proto_row(i, 1, 1) for i in range(n)]),
        (json_topic, "json_schema", None, [order_v1(i) for i in range(n)]),
    ):
        env = lg.StreamEnvironment(parallelism=1, executor=executor)
        source = KafkaSource(
            BOOTSTRAP,
            topic,
            bounded=True,
            format=fmt,
            schema_registry=registry,
            reader_schema=reader,
        )
        got = env.from_source(source, name="in").execute_and_collect(f"{fmt} in")
        assert sorted(got, key=lambda r: r["id"]) == want, fmt


def registry_job(executor, tmp_path, topic: str, sink: KafkaSink, records: list[Any]):
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.none())
    env.from_collection(records, name="records").sink_to(sink, name="out").uid("out")
    return env


@pytest.mark.hang_guard(300)
def test_auto_register_false_fails_at_start_when_the_subject_lacks_the_schema(
    executor, tmp_path, kafka_topic
) -> None:
    """Nothing is registered and nothing written: the job fails before it starts,
    naming the subject and the fix; once the schema is registered, the same sink runs."""
    topic = kafka_topic(1)
    schema = avro_order(f"lgw.ar{uuid.uuid4().hex[:8]}")
    registry = SchemaRegistry(REGISTRY_URL)

    def sink() -> KafkaSink:
        return KafkaSink(
            BOOTSTRAP,
            topic,
            format="avro",
            schema_registry=registry,
            schema=schema,
            auto_register=False,
        )

    records = [avro_record(i) for i in range(5)]
    env = registry_job(executor, tmp_path, topic, sink(), records)
    with pytest.raises(ConfigurationError) as info:
        env.execute("auto_register off")
    text = str(info.value)
    assert f"subject '{topic}-value'" in text and "does not exist" in text, text
    assert "register the schema under that subject first, or set auto_register=True" in text
    assert f"{topic}-value" not in sr_client().get_subjects(), "nothing registered"
    assert read_values(topic) == []

    from confluent_kafka.schema_registry import Schema as CSchema

    schema_id = sr_client().register_schema(f"{topic}-value", CSchema(json.dumps(schema), "AVRO"))
    env = registry_job(executor, tmp_path / "again", topic, sink(), records)
    env.execute("auto_register off, registered")
    values = read_values(topic)
    assert {schema_id_of(v) for v in values} == {schema_id}


@pytest.mark.hang_guard(300)
def test_an_incompatible_schema_is_refused_at_start_naming_subject_and_rule(
    executor, tmp_path, kafka_topic
) -> None:
    """BACKWARD: version 2 adds a field without a default, which a reader of version 2
    cannot fill from records of version 1: refused before the job's first record."""
    topic = kafka_topic(1)
    subject = f"{topic}-value"
    v1 = avro_order(f"lgw.inc{uuid.uuid4().hex[:8]}")
    v2 = {**v1, "fields": [*v1["fields"], {"name": "region", "type": "string"}]}
    client = sr_client()
    from confluent_kafka.schema_registry import Schema as CSchema

    client.register_schema(subject, CSchema(json.dumps(v1), "AVRO"))
    client.set_compatibility(subject_name=subject, level="BACKWARD")
    registry = SchemaRegistry(REGISTRY_URL)
    sink = KafkaSink(BOOTSTRAP, topic, format="avro", schema_registry=registry, schema=v2)
    record = {**avro_record(1), "region": "eu"}
    env = registry_job(executor, tmp_path, topic, sink, [record])
    with pytest.raises(ConfigurationError) as info:
        env.execute("incompatible schema")
    text = str(info.value)
    assert f"subject {subject!r}" in text and "rule BACKWARD refuses it" in text, text
    assert "region" in text, f"the registry's reason names the field: {text}"
    assert "give an added field a default" in text
    assert len(client.get_versions(subject)) == 1, "version 2 was not registered"
    assert read_values(topic) == []


@pytest.mark.hang_guard(300)
def test_a_record_that_does_not_fit_the_schema_fails_with_its_position(
    executor, tmp_path, kafka_topic
) -> None:
    topic = kafka_topic(1)
    schema = avro_order(f"lgw.fit{uuid.uuid4().hex[:8]}")
    registry = SchemaRegistry(REGISTRY_URL)
    sink = KafkaSink(
        BOOTSTRAP,
        topic,
        format="avro",
        schema_registry=registry,
        schema=schema,
        delivery="exactly_once",
    )
    records = [avro_record(i) for i in range(5)]
    records[3] = {**records[3], "id": "three"}
    env = registry_job(executor, tmp_path, topic, sink, records)
    with pytest.raises(lg.JobFailedError) as info:
        env.execute("record that does not fit")
    text = str(info.value)
    assert "record #3" in text and "cannot encode" in text, text
    assert f"subject '{topic}-value'" in text and ".Order.id is <three>" in text, text
    assert read_values(topic) == [], "exactly once: the failed attempt's records roll back"


# ------------------------------------------------------------------ exactly once

EO_N = 90_000
EO_KEYS = 300
EO_PARTITIONS = 3
#: records a source subtask may emit per completed checkpoint (CheckpointPacedSource)
EO_PACE = 5_000


def eo_schemas(tag: str) -> tuple[dict[str, Any], dict[str, Any]]:
    namespace = f"lgw.eo{tag}"
    long_field = [{"name": "k", "type": "long"}, {"name": "v", "type": "long"}]
    return (
        {"type": "record", "name": "Value", "namespace": namespace, "fields": long_field},
        {
            "type": "record",
            "name": "Total",
            "namespace": namespace,
            "fields": [*long_field, {"name": "total", "type": "long"}],
        },
    )


def eo_expected() -> list[tuple[int, int, int]]:
    totals: dict[int, int] = {}
    out = []
    for v in range(EO_N):
        k = v % EO_KEYS
        totals[k] = totals.get(k, 0) + v
        out.append((k, v, totals[k]))
    return sorted(out)


def produce_avro(topic: str, schema: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """``records`` written by confluent-kafka's own AvroSerializer (registering
    ``<topic>-value``), record ``{k, v}`` to partition ``k % EO_PARTITIONS``."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry.avro import AvroSerializer

    serializer = AvroSerializer(sr_client(), json.dumps(schema))
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5, "acks": "all"})
    ctx = SerializationContext(topic, MessageField.VALUE)
    for record in records:
        value = serializer(record, ctx)
        while True:
            try:
                producer.produce(topic, value, partition=record["k"] % EO_PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)  # the local queue is full: let deliveries drain it
    assert producer.flush(60) == 0, f"producing to {topic}: records left unacknowledged"


@pytest.mark.hang_guard(400)
def test_m_x1_m_x2_an_exactly_once_avro_pipeline_through_5_failures_equals_the_failure_free_output(
    executor, tmp_path, kafka_topic
) -> None:
    """Kafka (Avro, written by confluent-kafka's serializer) -> keyed running total ->
    KafkaSink(format='avro', exactly_once); five faults, each waiting for a completed
    checkpoint of its attempt, in the source, the operator and the sink: a
    read_committed consumer decoding with confluent-kafka's AvroDeserializer reads
    exactly the failure-free output."""
    from checkpoint_paced import CheckpointPacedSource
    from lockgate.connectors import KafkaSource
    from lockgate.testing import FailAtRecord, inject_faults
    from running_sums import RunningTotal, key_of

    tag = uuid.uuid4().hex[:8]
    in_schema, out_schema = eo_schemas(tag)
    source_topic = kafka_topic(EO_PARTITIONS)
    produce_avro(source_topic, in_schema, [{"k": v % EO_KEYS, "v": v} for v in range(EO_N)])
    out = kafka_topic(EO_PARTITIONS)
    prefix = f"lgtest-regw-{tag}"
    registry = SchemaRegistry(REGISTRY_URL)

    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=10, delay=0))
    source = KafkaSource(
        BOOTSTRAP, source_topic, bounded=True, format="avro", schema_registry=registry
    )
    (
        env.from_source(CheckpointPacedSource(source, EO_PACE, end_after=2), name="kafka in")
        .uid("kafka-in")
        .key_by(key_of)
        .process(RunningTotal(), name="running total")
        .uid("totals")
        .sink_to(
            KafkaSink(
                BOOTSTRAP,
                out,
                key="k",
                format="avro",
                schema_registry=registry,
                schema=out_schema,
                delivery="exactly_once",
                transactional_id_prefix=prefix,
            ),
            name="kafka out",
        )
        .uid("kafka-out")
    )
    # paced by checkpoints, not time: a source subtask emits nothing before its attempt's
    # first completed checkpoint, then EO_PACE records per completed checkpoint, and ends
    # only after two; so each fault (the 300th record after the attempt's first completed
    # checkpoint) fires whatever the machine's speed, with the input (45,000 records a
    # subtask) far from used up, and the sixth attempt reads to the end
    faults = [
        FailAtRecord("kafka in", record=300, attempt=0, subtask=0, after_checkpoints=1),
        FailAtRecord("running total", record=300, attempt=1, subtask=1, after_checkpoints=1),
        FailAtRecord("kafka out", record=300, attempt=2, subtask=0, after_checkpoints=1),
        FailAtRecord("running total", record=300, attempt=3, subtask=0, after_checkpoints=1),
        FailAtRecord("kafka out", record=300, attempt=4, subtask=1, after_checkpoints=1),
    ]
    inject_faults(env, *faults)
    result = env.execute("avro exactly once")
    assert result.attempts == len(faults) + 1, f"every fault fires once: {result.attempts}"

    client = sr_client()
    deserializer = AvroDeserializer(schema_registry_client=client)
    ctx = SerializationContext(out, MessageField.VALUE)
    values = read_values(out)
    assert {schema_id_of(v) for v in values} == {
        client.get_latest_version(f"{out}-value").schema_id
    }
    got = sorted((r["k"], r["v"], r["total"]) for r in (deserializer(v, ctx) for v in values))
    assert len(got) == EO_N, f"{len(got)} records committed, expected {EO_N}"
    assert got == eo_expected()


def test_a_sink_refused_at_start_registers_nothing(tmp_path, kafka_topic) -> None:
    """A job its exactly-once sink refuses at start (a transaction timeout shorter than a
    checkpoint interval plus timeout, M-X2) adds no version to the shared registry: the
    sink registers its schema only once every other check of its start passed."""
    topic = kafka_topic(1)
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.enable_checkpointing(5_000)
    env.checkpoint_config.timeout = 60_000
    env.from_collection([avro_record(0)]).sink_to(
        KafkaSink(
            BOOTSTRAP,
            topic,
            format="avro",
            schema_registry=SchemaRegistry(REGISTRY_URL),
            schema=avro_order(f"lgw.refused{uuid.uuid4().hex[:8]}"),
            properties={"transaction.timeout.ms": 30_000},
        ),
        name="out",
    )
    with pytest.raises(ConfigurationError, match="65000 ms in all"):
        env.execute("short timeout")
    assert f"{topic}-value" not in sr_client().get_subjects(), "a refused job registered"

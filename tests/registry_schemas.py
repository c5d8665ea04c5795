"""Shared schemas of the Schema Registry tests (issue 38): one record type, ``Order``, in
two versions of each format. Version 2 adds a field with a default (``score``, 0.0 in
Avro and JSON Schema, Protobuf's zero otherwise) and removes one (``legacy``), the
evolution every registry compatibility rule allows, so a topic written by both reads as
one shape through a version-2 reader schema.

Protobuf message classes are built at run time from a ``FileDescriptorProto`` (no
``protoc`` here): each version in a descriptor pool of its own, so both can be named
``lgtest.Order`` as two versions of one producer's ``.proto`` would be.

``REGISTRY_URL`` is the registry ``scripts/services.sh`` starts (Apicurio, its
Confluent-compatible API); ``unique(prefix)`` names a topic or subject for one test
(tests run in parallel against one registry).
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

REGISTRY_URL = os.environ.get(
    "LOCKGATE_TEST_SCHEMA_REGISTRY", "http://127.0.0.1:8081/apis/ccompat/v7"
)


def unique(prefix: str) -> str:
    """A topic or subject name no other test uses."""
    return f"lgtest-{prefix}-{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------------- Avro

AVRO_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "lgtest",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "legacy", "type": "string"},
    ],
}
AVRO_V2: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "lgtest",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "score", "type": "double", "default": 0.0},
    ],
}
AVRO_V1_TEXT = json.dumps(AVRO_V1)
AVRO_V2_TEXT = json.dumps(AVRO_V2)

#: an Avro key schema (a record key, as many topics have)
AVRO_KEY: dict[str, Any] = {
    "type": "record",
    "name": "OrderKey",
    "namespace": "lgtest",
    "fields": [{"name": "region", "type": "string"}, {"name": "id", "type": "long"}],
}


def order_v1(i: int) -> dict[str, Any]:
    """Record ``i`` as version 1 writes it."""
    return {
        "id": i,
        "name": f"order-{i}",
        "tags": [f"t{i % 3}"] * (i % 3),
        "status": "PAID" if i % 2 else "NEW",
        "legacy": f"old-{i}",
    }


def order_v2(i: int) -> dict[str, Any]:
    """Record ``i`` as version 2 writes it."""
    return {
        "id": i,
        "name": f"order-{i}",
        "tags": [f"t{i % 3}"] * (i % 3),
        "status": "PAID" if i % 2 else "NEW",
        "score": i / 4,
    }


def as_v2(record: dict[str, Any]) -> dict[str, Any]:
    """What a version-2 reader sees of a record of either version (``legacy`` dropped,
    ``score`` defaulted to 0.0 where version 1 wrote it)."""
    out = {k: v for k, v in record.items() if k != "legacy"}
    out.setdefault("score", 0.0)
    return out


# --------------------------------------------------------------------------------- JSON Schema

JSON_V1: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "status": {"type": "string", "enum": ["NEW", "PAID"]},
        "legacy": {"type": "string"},
    },
    "required": ["id", "name", "tags", "status", "legacy"],
}
JSON_V2: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "status": {"type": "string", "enum": ["NEW", "PAID"]},
        "score": {"type": "number", "default": 0.0},
    },
    "required": ["id", "name", "tags", "status"],
}
JSON_V1_TEXT = json.dumps(JSON_V1)
JSON_V2_TEXT = json.dumps(JSON_V2)


# --------------------------------------------------------------------------------- Protobuf

_F = descriptor_pb2.FieldDescriptorProto


def _order_file(version: int) -> descriptor_pb2.FileDescriptorProto:
    """``lgtest/order.proto`` of ``version``: ``Order`` with a nested ``Customer``
    message, an enum ``Status`` and a repeated field; version 2 replaces field 5
    (``legacy``, string) by field 6 (``score``, double)."""
    f = descriptor_pb2.FileDescriptorProto(
        name="lgtest/order.proto", package="lgtest", syntax="proto3"
    )
    status = f.enum_type.add(name="Status")
    status.value.add(name="NEW", number=0)
    status.value.add(name="PAID", number=1)
    customer = f.message_type.add(name="Customer")
    customer.field.add(name="email", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    order = f.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=_F.TYPE_INT64, label=_F.LABEL_OPTIONAL)
    order.field.add(name="name", number=2, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    order.field.add(name="tags", number=3, type=_F.TYPE_STRING, label=_F.LABEL_REPEATED)
    order.field.add(
        name="status",
        number=4,
        type=_F.TYPE_ENUM,
        type_name=".lgtest.Status",
        label=_F.LABEL_OPTIONAL,
    )
    if version == 1:
        order.field.add(name="legacy", number=5, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    else:
        order.reserved_range.add(start=5, end=6)
        order.field.add(name="score", number=6, type=_F.TYPE_DOUBLE, label=_F.LABEL_OPTIONAL)
    order.field.add(
        name="customer",
        number=7,
        type=_F.TYPE_MESSAGE,
        type_name=".lgtest.Customer",
        label=_F.LABEL_OPTIONAL,
    )
    return f


def proto_text(version: int) -> str:
    """The ``.proto`` text of ``version`` (what the registry stores: Apicurio refuses
    the base64 descriptor confluent-kafka's ProtobufSerializer registers, so the tests
    register this text and serialize with ``use.latest.version``)."""
    field5 = "  string legacy = 5;" if version == 1 else "  reserved 5;\n  double score = 6;"
    return (
        'syntax = "proto3";\n'
        "package lgtest;\n\n"
        "enum Status {\n  NEW = 0;\n  PAID = 1;\n}\n\n"
        "message Customer {\n  string email = 1;\n}\n\n"
        "message Order {\n"
        "  int64 id = 1;\n"
        "  string name = 2;\n"
        "  repeated string tags = 3;\n"
        "  Status status = 4;\n"
        f"{field5}\n"
        "  Customer customer = 7;\n"
        "}\n"
    )


def _message_class(version: int) -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_order_file(version))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("lgtest.Order"))


#: ``lgtest.Order`` version 1 and version 2 (message classes, as protoc would generate)
OrderV1: Any = _message_class(1)
OrderV2: Any = _message_class(2)


def _proto_texts() -> dict[str, str]:
    """confluent-kafka's registration text of each version's file (a base64
    FileDescriptorProto) -> its ``.proto`` text."""
    from confluent_kafka.schema_registry.common.protobuf import _schema_to_str

    return {
        _schema_to_str(OrderV1.DESCRIPTOR.file): proto_text(1),
        _schema_to_str(OrderV2.DESCRIPTOR.file): proto_text(2),
    }


def protobuf_serializer(cls: Any, conf: dict[str, Any] | None = None) -> Any:
    """confluent-kafka's own ``ProtobufSerializer`` of ``cls`` (``OrderV1`` or
    ``OrderV2``) against the test registry. Its client registers the ``.proto`` text
    in place of the base64 descriptor the serializer sends (Apicurio parses only the
    text); the records are framed by the serializer itself (id, message indexes)."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    texts = _proto_texts()

    class TextClient(SchemaRegistryClient):  # type: ignore[misc]
        def register_schema_full_response(
            self, subject_name: str, schema: Any, *a: Any, **kw: Any
        ) -> Any:
            if schema.schema_type == "PROTOBUF" and schema.schema_str in texts:
                schema = Schema(texts[schema.schema_str], "PROTOBUF", schema.references)
            return super().register_schema_full_response(subject_name, schema, *a, **kw)

    return ProtobufSerializer(cls, TextClient({"url": REGISTRY_URL}), conf or {})


def allow_any_evolution(subject: str) -> None:
    """Let ``subject`` (registered already) take any next version. Apicurio's Protobuf
    compatibility check refuses a removed field under every rule (Confluent's BACKWARD
    allows it), and its Confluent-compatible ``/config`` cannot override the global
    BACKWARD with NONE; its own API sets the subject's rule to NONE."""
    import urllib.request

    base = REGISTRY_URL.split("/apis/")[0]
    request = urllib.request.Request(
        f"{base}/apis/registry/v3/groups/default/artifacts/{subject}/rules",
        method="POST",
        data=json.dumps({"ruleType": "COMPATIBILITY", "config": "NONE"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status in (200, 204), f"setting {subject}'s rule: HTTP {answer.status}"


def proto_v1(i: int) -> Any:
    """Record ``i`` as a version-1 message (customer set on even ``i`` only)."""
    m = OrderV1(id=i, name=f"order-{i}", tags=[f"t{i % 3}"] * (i % 3), status=i % 2)
    m.legacy = f"old-{i}"
    if i % 2 == 0:
        m.customer.email = f"c{i}@example.com"
    return m


def proto_v2(i: int) -> Any:
    """Record ``i`` as a version-2 message."""
    m = OrderV2(id=i, name=f"order-{i}", tags=[f"t{i % 3}"] * (i % 3), status=i % 2)
    m.score = i / 4
    if i % 2 == 0:
        m.customer.email = f"c{i}@example.com"
    return m


def proto_row(i: int, version: int, reader: int) -> dict[str, Any]:
    """What lockgate gives for record ``i`` written by ``version`` and read with the
    ``reader`` version's class: field names as in the .proto, the enum as its name,
    the nested message as a dict (None when unset), unknown fields skipped, missing
    ones at Protobuf's defaults."""
    row: dict[str, Any] = {
        "id": i,
        "name": f"order-{i}",
        "tags": [f"t{i % 3}"] * (i % 3),
        "status": "PAID" if i % 2 else "NEW",
    }
    if reader == 1:
        row["legacy"] = f"old-{i}" if version == 1 else ""
    else:
        row["score"] = i / 4 if version == 2 else 0.0
    row["customer"] = {"email": f"c{i}@example.com"} if i % 2 == 0 else None
    return row

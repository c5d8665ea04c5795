"""The names of the Schema Registry formats, for every connector that offers them."""

from __future__ import annotations

#: record formats framed by the Confluent wire format, their schemas in a Schema
#: Registry (``schema_registry=``): ``avro``, ``protobuf`` and ``json_schema``
REGISTRY_FORMATS = ("avro", "protobuf", "json_schema")

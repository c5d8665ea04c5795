"""Kafka records in a Schema Registry's formats (Avro, Protobuf, JSON Schema).

:class:`SchemaRegistry` is the client of the registry's REST API (Confluent's, or
Apicurio Registry's Confluent-compatible one); :mod:`.wire` frames and unframes the
Confluent wire format.
"""

from .arrow_to_avro import arrow_to_avro
from .avro_arrow import avro_arrow_schema
from .client import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    RegisteredSchema,
    Schema,
    SchemaReference,
    SchemaRegistry,
    SchemaRegistryError,
    SchemaRegistryUnavailable,
    UnknownSchemaError,
)
from .formats import WriterSchemaError

__all__ = [
    "IncompatibleSchemaError",
    "InvalidSchemaError",
    "RegisteredSchema",
    "Schema",
    "SchemaReference",
    "SchemaRegistry",
    "SchemaRegistryError",
    "SchemaRegistryUnavailable",
    "UnknownSchemaError",
    "WriterSchemaError",
    "arrow_to_avro",
    "avro_arrow_schema",
]

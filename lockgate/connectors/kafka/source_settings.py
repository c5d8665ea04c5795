"""What the reader side of the Kafka source reads of its
:class:`~lockgate.connectors.kafka.source.KafkaSource` (a protocol, so that the
reader, fetchers and decoders do not import the source module that builds them)."""

from __future__ import annotations

import re
from typing import Any, Protocol

import pyarrow as pa

from ..formats.debezium import DebeziumConverter
from ..schema_registry.formats import RegistryFormat


class SourceSettings(Protocol):
    """The checked settings of one KafkaSource (see its docstring for each)."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    pattern: re.Pattern[str] | None
    group_id: str | None
    start: Any
    bounded: bool
    format: str
    key_field: str | None
    timestamp_field: str | None
    on_error: str
    isolation: str
    properties: dict[str, Any]
    discovery_interval_s: float | None
    max_record_bytes: int
    key_format: str | None
    schema_registry: Any
    value_decoding: RegistryFormat | None
    key_decoding: RegistryFormat | None
    schema: pa.Schema | None
    fetch: str
    debezium: DebeziumConverter | None

    @property
    def topic_description(self) -> str: ...

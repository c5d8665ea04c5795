"""Avro values of the Schema Registry wire format, decoded with fastavro.

Each value is decoded with its writer's schema (fetched by id from the registry once
per process and parsed once, :class:`AvroValueDecoder` keeps the parsed schemas of the
last :data:`PARSED_CACHE` ids) and, when a reader schema is given, resolved to it by
Avro's rules (fastavro's resolution: a field the writer lacks takes the reader's
default, a field the reader lacks is skipped, ``int`` promotes to ``long``, ``float``,
``double``, ...). Records come out as dicts (enums as their symbols, logical types as
fastavro gives them: ``datetime``, ``date``, ``Decimal``, ``UUID``).

A value that does not decode, leaves bytes after its record, or cannot be resolved to
the reader schema raises :class:`~.formats.MalformedValue` (the record is malformed:
the "Bad input" rule of CONTRIBUTING.md).
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

from .formats import MalformedValue, ParsedCache, writer_schema
from .wire import HEADER_BYTES

if TYPE_CHECKING:
    from .client import SchemaRegistry

#: parsed writer schemas kept per decoder (by schema id)
PARSED_CACHE = 1000


def parse_reader_schema(schema: object) -> dict[str, Any] | str | list[Any]:
    """``schema`` (an Avro schema as a dict, a list (a union) or its JSON text) as JSON
    data, checked by fastavro; ValueError saying what is wrong otherwise."""
    import fastavro

    data: Any = schema
    if isinstance(schema, str):
        try:
            data = json.loads(schema)
        except json.JSONDecodeError:
            data = schema  # a primitive type's bare name, e.g. "string"
    if not isinstance(data, (dict, list, str)):
        raise ValueError(f"an Avro schema is a dict, a list or JSON text, got {schema!r}")
    try:
        fastavro.parse_schema(data)
    except Exception as e:  # noqa: BLE001 - fastavro raises several kinds
        raise ValueError(f"fastavro cannot parse it: {e}") from e
    return data


class AvroValueDecoder:
    """Decodes framed Avro values of one side (value or key) of a source."""

    def __init__(self, registry: SchemaRegistry, reader_schema: Any = None) -> None:
        import fastavro

        self.registry = registry
        self._read = fastavro.schemaless_reader
        self._parse = fastavro.parse_schema
        self.reader = None if reader_schema is None else fastavro.parse_schema(reader_schema)
        self._writers: ParsedCache = ParsedCache(PARSED_CACHE)

    def _writer(self, schema_id: int) -> Any:
        parsed = self._writers.get(schema_id)
        if parsed is None:
            text = writer_schema(self.registry, schema_id, "AVRO")
            try:
                parsed = self._parse(json.loads(text))
            except Exception as e:  # noqa: BLE001 - fastavro raises several kinds
                raise MalformedValue(
                    f"the registry's schema id {schema_id} is not an Avro schema fastavro can "
                    f"parse: {e}"
                ) from e
            self._writers.put(schema_id, parsed)
        return parsed

    def decode(self, schema_id: int, value: bytes) -> Any:
        writer = self._writer(schema_id)
        stream = io.BytesIO(value)
        stream.seek(HEADER_BYTES)
        try:
            record = self._read(stream, writer, self.reader)
        except Exception as e:  # noqa: BLE001 - a corrupt payload fails in many ways
            what = (
                "cannot be resolved to the reader schema"
                if type(e).__name__ == "SchemaResolutionError"
                else "does not decode"
            )
            raise MalformedValue(
                f"its Avro payload {what} with the writer's schema (schema id {schema_id}): "
                f"{type(e).__name__}: {e}"
            ) from e
        left = len(value) - stream.tell()
        if left:
            raise MalformedValue(
                f"{left} bytes follow the Avro record decoded with the writer's schema "
                f"(schema id {schema_id}): the payload is corrupt or was written with another schema"
            )
        return record

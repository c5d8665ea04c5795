"""Writers' schemas as the registry formats' decoders fetch them: the registry's schema
of an id (of the expected type), a bounded cache of parsed schemas, and the errors of a
value or a writer's schema that cannot be decoded. Shared by :mod:`.formats` and the
per-format readers (:mod:`.avro_read`, :mod:`.protobuf_read`, :mod:`.json_schema_read`)."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ...errors import NonRestartableError

if TYPE_CHECKING:
    from .client import SchemaRegistry

#: the registry's name of each format's schemas
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}


class MalformedValue(ValueError):
    """A registry-encoded value that cannot be decoded (the reason is the message)."""


class WriterSchemaError(NonRestartableError):
    """The registry's schema of a record's id cannot decode records (fastavro cannot
    parse it, it refers to other schemas, it is not a valid JSON Schema, it needs a
    ``$ref`` to another document): the writer's schema is wrong, not the record, so
    the job fails (no restart fixes it: a schema id's text never changes) rather than
    report every record of that schema malformed; its records stay unread in the topic.
    ``schema_id`` and ``subject`` (None when unknown) name the schema."""

    def __init__(
        self, message: str, schema_id: int | None = None, subject: str | None = None
    ) -> None:
        super().__init__(message)
        self.schema_id = schema_id
        self.subject = subject

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.schema_id, self.subject)


def bad_writer_schema(
    registry: Any, schema_id: int, what: str, subject: str | None = None
) -> WriterSchemaError:
    """The :class:`WriterSchemaError` of the registry's schema ``schema_id``: ``what``
    says what is wrong; the registry named by its redacted URL."""
    url = getattr(registry, "redacted_url", None) or "the registry"
    named = f"schema id {schema_id}" + (f" (subject {subject!r})" if subject else "")
    return WriterSchemaError(
        f"the writer's schema, {named} at {url}, cannot decode records: {what}. The "
        "schema is wrong, not a record: the job fails rather than report every record "
        "of it malformed (they stay unread in the topic); the producer must register a "
        "schema this reader can use",
        schema_id,
        subject,
    )


class ParsedCache:
    """A bounded map of schema id -> parsed schema (least recently used dropped)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[int, Any] = OrderedDict()

    def get(self, key: int) -> Any:
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
        return item

    def put(self, key: int, item: Any) -> None:
        self._items[key] = item
        if len(self._items) > self.size:
            self._items.popitem(last=False)


def writer_schema(registry: SchemaRegistry, schema_id: int, schema_type: str) -> str:
    """The text of the registry's schema ``schema_id`` (see :func:`registered_writer`)."""
    return registered_writer(registry, schema_id, schema_type).schema.schema


def registered_writer(registry: SchemaRegistry, schema_id: int, schema_type: str) -> Any:
    """The registry's schema ``schema_id`` (a ``RegisteredSchema``), which must be of
    ``schema_type``; :class:`MalformedValue` when the registry does not know the id
    (404) or holds another type (a record of another producer). An unreachable
    registry raises the client's ``SchemaRegistryUnavailable`` (the job fails; not the
    record's fault)."""
    from .client import UnknownSchemaError

    try:
        registered = registry.schema(schema_id)
    except UnknownSchemaError as e:
        raise MalformedValue(f"the registry does not know schema id {schema_id}: {e}") from e
    found = (registered.schema.schema_type or "AVRO").upper()
    if found != schema_type:
        raise MalformedValue(
            f"schema id {schema_id} is a {found} schema in the registry, not {schema_type}"
        )
    return registered

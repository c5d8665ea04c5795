"""The write side of a registry format, as a sink uses it: the schema's writer (Avro,
Protobuf or JSON Schema), the subject it goes under, its id in the registry (registered
or looked up once per subject, then cached), and each record framed with that id.

:meth:`RegistryWriter.check_at_start` runs on the driver before a job's first record
(the sink's ``check_before_run``), so a schema the registry refuses (its compatibility
rule, e.g. BACKWARD) or a subject that does not hold it (``auto_register=False``)
fails the job at start, naming the subject; every subtask then resolves the same id
itself (registering a schema the subject holds already returns its id).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ...errors import ConfigurationError
from ..base import check_bool
from .client import IncompatibleSchemaError, Schema, SchemaRegistry
from .format_names import REGISTRY_FORMATS
from .subjects import check_strategy, subject_name
from .wire import frame

#: each format's ``schemaType`` in the registry
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}
_SCHEMA_HELP = {
    "avro": "an Avro schema (a dict or its JSON text) or a pyarrow.Schema",
    "protobuf": "the generated Protobuf message class (e.g. orders_pb2.Order)",
    "json_schema": "a JSON Schema (a dict or its JSON text)",
}


def make_writer(fmt: str, schema: Any) -> Any:
    """The writer of ``fmt`` for ``schema`` (ConfigurationError when it is not one)."""
    if schema is None:
        raise ConfigurationError(f"format={fmt!r} needs schema=: {_SCHEMA_HELP[fmt]}")
    if fmt == "avro":
        from .avro_write import AvroWriter

        return AvroWriter(schema)
    if fmt == "protobuf":
        from .protobuf_write import ProtobufWriter

        return ProtobufWriter(schema)
    from .json_schema_write import JsonSchemaWriter

    if isinstance(schema, pa.Schema):
        raise ConfigurationError(
            "format='json_schema' takes a JSON Schema (a dict or its JSON text), not a "
            "pyarrow.Schema (derive one by hand, or write format='avro')"
        )
    return JsonSchemaWriter(schema)


class RegistryWriter:
    """Encodes records of one format against one schema, framed with the schema's id
    under the subject ``subject_strategy`` names for each topic. Picklable (the ids
    are resolved again where it is unpickled)."""

    def __init__(
        self,
        owner: str,
        fmt: str,
        registry: Any,
        schema: Any,
        subject_strategy: str,
        auto_register: bool,
        *,
        key: bool = False,
    ) -> None:
        if fmt not in REGISTRY_FORMATS:
            raise ConfigurationError(f"{owner}: {fmt!r} is not a registry format")
        if not isinstance(registry, SchemaRegistry):
            raise ConfigurationError(
                f"{owner} format={fmt!r} needs schema_registry=SchemaRegistry(url) (e.g. "
                "lockgate.connectors.SchemaRegistry('http://registry:8081')), got "
                f"{registry!r}"
            )
        try:
            self.writer = make_writer(fmt, schema)
        except ConfigurationError as e:
            raise ConfigurationError(f"{owner} schema: {e}") from e
        self.owner = owner
        self.format = fmt
        self.registry = registry
        self.strategy = check_strategy(owner, subject_strategy)
        self.auto_register = check_bool(owner, "auto_register", auto_register)
        self.key = key
        self.full_name: str | None = self.writer.full_name
        if self.strategy != "topic":
            try:
                subject_name(self.strategy, "topic", self.full_name, key=key)
            except ConfigurationError as e:
                raise ConfigurationError(f"{owner}: {e}") from e
        self.schema = Schema(self.writer.schema_text, SCHEMA_TYPES[fmt])
        #: Protobuf only: the message's indexes in its file, framed before the payload
        self.message_indexes: list[int] | None = getattr(self.writer, "message_indexes", None)
        self._ids: dict[str, int] = {}
        #: the column-at-a-time Avro encoder, made on first use
        self._columns: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ids"] = {}
        state["_columns"] = None
        return state

    def subject(self, topic: str) -> str:
        """The subject of ``topic``'s values (keys, for a key writer)."""
        return subject_name(self.strategy, topic, self.full_name, key=self.key)

    def check_at_start(self, topic: str | None) -> None:
        """Register or look up the schema for ``topic`` (None: a topic function, whose
        topics are known only from the records; then only the ``record`` strategy's
        subject, which does not depend on the topic, is resolved)."""
        if topic is not None:
            self.schema_id(topic)
        elif self.strategy == "record":
            self.schema_id("")

    def schema_id(self, topic: str) -> int:
        """The registry's id of the schema under ``topic``'s subject (registered or
        looked up on the first call per subject, then cached). Raises
        :class:`ConfigurationError` naming the subject when the registry refuses the
        schema (its compatibility rule) or, with ``auto_register=False``, the subject
        does not hold it; :class:`SchemaRegistryError` when the registry cannot be
        reached (after the client's retries)."""
        subject = self.subject(topic)
        cached = self._ids.get(subject)
        if cached is not None:
            return cached
        schema_id = self._register(subject) if self.auto_register else self._lookup(subject)
        self._ids[subject] = schema_id
        return schema_id

    def _register(self, subject: str) -> int:
        try:
            return int(self.registry.register(subject, self.schema))
        except IncompatibleSchemaError as e:
            raise ConfigurationError(self._incompatible(subject, e)) from e

    def _incompatible(self, subject: str, error: IncompatibleSchemaError) -> str:
        """The message of a schema the subject's compatibility rule refuses: the rule
        and the registry's reasons, as the client read them from its answer."""
        rule = error.level or "its compatibility rule"
        why = "; ".join(error.messages) or str(error)
        return (
            f"{self.owner} cannot register its {self.format} schema under subject "
            f"{subject!r}: the registry's compatibility rule {rule} refuses it ({why}). Make "
            "the new schema compatible with the subject's latest version (e.g. give an added "
            "field a default), write to another subject, or change the subject's "
            "compatibility (PUT /config/<subject>)"
        )

    def _lookup(self, subject: str) -> int:
        found = self.registry.lookup(subject, self.schema)
        if found is not None:
            return int(found.schema_id)
        latest = self.registry.latest(subject)
        state = (
            "does not exist"
            if latest is None
            else f"does not hold it (its latest version is {latest.version}, id {latest.schema_id})"
        )
        raise ConfigurationError(
            f"{self.owner} (auto_register=False) looked up its {self.format} schema under "
            f"subject {subject!r} of registry {self.registry.redacted_url}, which {state}: "
            "register the schema under that subject first, or set auto_register=True"
        )

    def encode_columns(self, batch: pa.RecordBatch, topic: str) -> list[bytes] | None:
        """Each record of ``batch`` (going to ``topic``) encoded and framed a column at a
        time (:mod:`.avro_columns_write`: the bytes :meth:`encode` gives each record), or
        None when it is not encoded that way (not Avro, a schema or column not flat):
        the caller then encodes record by record, with that path's errors."""
        if self.format != "avro" or batch.num_rows == 0:
            return None
        if getattr(self, "_columns", None) is None:
            from .avro_columns_write import AvroColumnsWriter

            self._columns = AvroColumnsWriter(self.writer.schema)
        if self._columns.fields is None:
            return None
        result: list[bytes] | None = self._columns.encode(batch, self.schema_id(topic))
        return result

    def encode(self, record: Any, schema_id: int) -> bytes:
        """``record`` encoded and framed with ``schema_id`` (TypeError or ValueError
        saying why it does not fit the schema)."""
        return frame(schema_id, self.writer.encode(record), self.message_indexes)

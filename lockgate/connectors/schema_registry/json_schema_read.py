"""JSON Schema values of the Schema Registry wire format.

Each value is JSON text after the 5-byte header. It is decoded, then validated against
its writer's JSON Schema (fetched by id, its validator made once per process and
cached per id): a value that is not UTF-8 JSON or does not match the writer's schema is
malformed (the "Bad input" rule). A writer's schema that is not a valid JSON Schema, refers
to other registered schemas (references: not supported yet) or needs a ``$ref`` to
another document (never fetched: jsonschema's default would fetch http(s) URLs) raises
:class:`~.formats.WriterSchemaError`: the job fails (the schema is wrong, not a record).

With a reader schema (a JSON Schema, dict or text) the record is resolved to it as
Avro resolves records, for objects with ``properties`` (at every level): a property
the reader does not name is dropped, one the record lacks takes the reader's
``default`` when it has one; the result must then match the reader schema (else the
record is malformed). Without one, records are the decoded JSON as written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from .wire import HEADER_BYTES
from .writer_schemas import MalformedValue, ParsedCache, bad_writer_schema, registered_writer

if TYPE_CHECKING:
    from .client import SchemaRegistry


def _never_retrieve(uri: str) -> Any:
    """The retrieval of a ``$ref`` to another document: refused (a schema from the
    registry must not make a reader open connections, nor read files)."""
    import referencing.exceptions

    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


def validator_of(schema: Any) -> Any:
    """A jsonschema validator of ``schema`` (its ``$schema`` draft, else Draft 7: the
    registries' and confluent-kafka's default, and the sink's) that never retrieves a
    ``$ref`` outside ``schema`` (jsonschema's default would fetch http(s) URLs);
    ``jsonschema.SchemaError`` when the schema is not valid."""
    import jsonschema
    import referencing

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema, registry=referencing.Registry(retrieve=_never_retrieve))  # type: ignore[call-arg]


#: keywords whose values are data, not schemas (a "$ref" in them is no reference)
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})


def unresolvable_refs(validator: Any, schema: Any) -> list[str]:
    """The ``$ref`` of ``schema`` (whose ``validator`` is :func:`validator_of`'s) that
    do not resolve inside the document (another document's URL, a pointer to nowhere),
    each as ``"<ref>: <why>"``; [] when every one resolves. Nothing is fetched."""
    from urllib.parse import urljoin

    resolver = validator._resolver
    found: list[str] = []

    def walk(node: Any, base: str) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, base)
            return
        if not isinstance(node, dict):
            return
        if isinstance(node.get("$id"), str):
            base = urljoin(base, node["$id"])
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                resolver.lookup(urljoin(base, ref) if base else ref)
            except Exception as e:  # noqa: BLE001 - referencing's Unresolvable and kin
                found.append(f"{ref}: {type(e).__name__}")
        for key, value in node.items():
            if key not in _DATA_KEYWORDS:
                walk(value, base)

    walk(schema, schema.get("$id", "") if isinstance(schema, dict) else "")
    return found


def _valid(validator: Any, record: Any, what: str, broken: Callable[[str], Exception]) -> None:
    """MalformedValue unless ``record`` is valid for ``validator`` (``what`` names the
    schema, e.g. "the writer's JSON Schema (schema id 7)"); ``broken(why)`` raised when
    the schema itself cannot be applied (a ``$ref`` to another document: the schema is
    wrong, not the record)."""
    try:
        if validator.is_valid(record):
            return
        why = _why(validator, record)
    except Exception as e:  # noqa: BLE001 - an unresolvable $ref, and its kin
        raise broken(
            f"it cannot be applied: {type(e).__name__}: {e} (a $ref to another document is "
            "never fetched: a schema from the registry must not make a reader open "
            "connections; inline what it refers to)"
        ) from None
    raise MalformedValue(f"it does not match {what}: {why}")


def _broken_reader(why: str) -> Exception:
    return ConfigurationError(f"the reader schema (reader_schema=) {why}")


def parse_reader_schema(schema: object) -> Any:
    """``schema`` (a JSON Schema as a dict or JSON text) as JSON data, checked;
    ValueError saying what is wrong otherwise."""
    data = schema
    if isinstance(schema, str):
        try:
            data = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ValueError(f"it is not JSON text: {e}") from e
    if not isinstance(data, (dict, bool)):
        raise ValueError(f"a JSON Schema is a dict (or its JSON text), got {schema!r}")
    try:
        validator_of(data)
    except Exception as e:
        raise ValueError(f"it is not a valid JSON Schema: {e}") from e
    return data


def resolve(record: Any, schema: Any) -> Any:
    """``record`` resolved to the reader ``schema`` (see the module docstring)."""
    if not isinstance(schema, dict) or not isinstance(record, dict):
        return record
    props = schema.get("properties")
    if not isinstance(props, dict):
        return record
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if name in record:
            out[name] = resolve(record[name], sub)
        elif isinstance(sub, dict) and "default" in sub:
            out[name] = sub["default"]
    return out


def _why(validator: Any, record: Any) -> str:
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(record))
    if error is None:  # pragma: no cover - only asked after is_valid said no
        return "invalid"
    where = "/".join(str(p) for p in error.absolute_path) or "(the value)"
    return f"{error.message} at {where}"


class JsonSchemaValueDecoder:
    """Decodes framed JSON Schema values of one side (value or key) of a source."""

    def __init__(self, registry: SchemaRegistry, reader_schema: Any = None) -> None:
        self.registry = registry
        self.reader_schema = reader_schema
        self.reader = None if reader_schema is None else validator_of(reader_schema)
        self._validators: ParsedCache = ParsedCache(1000)

    def _validator(self, schema_id: int) -> tuple[Any, str | None]:
        """The validator of the writer's schema ``schema_id`` and its subject (when the
        registry says it); WriterSchemaError when the schema cannot be used."""
        validator = self._validators.get(schema_id)
        if validator is None:
            registered = registered_writer(self.registry, schema_id, "JSON")
            if registered.schema.references:
                names = ", ".join(
                    f"{r.name} ({r.subject} v{r.version})" for r in registered.schema.references
                )
                raise bad_writer_schema(
                    self.registry,
                    schema_id,
                    f"it refers to other schemas ({names}); schema references are not "
                    "supported yet: register the schema with what it refers to inlined",
                    registered.subject,
                )
            try:
                validator = validator_of(json.loads(registered.schema.schema))
            except Exception as e:  # noqa: BLE001 - bad JSON, SchemaError
                raise bad_writer_schema(
                    self.registry,
                    schema_id,
                    f"it is not a valid JSON Schema: {type(e).__name__}: "
                    f"{getattr(e, 'message', e)}",
                    registered.subject,
                ) from None
            self._validators.put(schema_id, (validator, registered.subject))
            return validator, registered.subject
        return validator

    def decode(self, schema_id: int, value: bytes) -> Any:
        validator, subject = self._validator(schema_id)
        try:
            record = json.loads(memoryview(value)[HEADER_BYTES:].tobytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise MalformedValue(
                f"its payload is not UTF-8 JSON (schema id {schema_id}): {e}"
            ) from e
        _valid(
            validator,
            record,
            f"the writer's JSON Schema (schema id {schema_id})",
            lambda why: bad_writer_schema(self.registry, schema_id, why, subject),
        )
        if self.reader is None:
            return record
        record = resolve(record, self.reader_schema)
        try:
            _valid(self.reader, record, "the reader schema", _broken_reader)
        except MalformedValue as e:
            raise MalformedValue(
                f"it cannot be resolved to the reader schema (written with schema id "
                f"{schema_id}): {e}"
            ) from e
        return record

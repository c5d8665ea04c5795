"""Writing Avro records for a Schema Registry: the schema's canonical JSON text (what is
registered) and each record's binary encoding (fastavro's ``schemaless_writer``, as
confluent-kafka's ``AvroSerializer`` writes it).

Records are dicts (or values of a non-record schema). Fields the schema has and the
record lacks take the field's default; a record without such a field and no default,
with a field the schema does not have (it would be silently dropped), or with a value
of the wrong type fails, naming the field.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa

from ...errors import ConfigurationError
from .arrow_to_avro import arrow_to_avro

#: Avro's named types (the ones a ``record`` subject strategy can be named after)
_NAMED = ("record", "enum", "fixed", "error")
_RECORDS = ("record", "error")


class AvroWriter:
    """Encodes records against one Avro schema: a dict, its JSON text, or a
    ``pyarrow.Schema`` (converted by :func:`.arrow_to_avro.arrow_to_avro`, a record
    named ``Record``). Picklable (the parsed schema is built again where it is first
    used)."""

    def __init__(self, schema: dict[str, Any] | str | pa.Schema) -> None:
        import fastavro

        if isinstance(schema, pa.Schema):
            schema = arrow_to_avro(schema)
        if isinstance(schema, str):
            try:
                parsed_json: Any = json.loads(schema)
            except ValueError as e:
                raise ConfigurationError(
                    f"an Avro schema given as text must be JSON: {e}; got {schema[:200]!r}"
                ) from e
        elif isinstance(schema, (dict, list)):
            parsed_json = schema
        else:
            raise ConfigurationError(
                "an Avro schema is a dict, its JSON text, or a pyarrow.Schema (converted by "
                f"arrow_to_avro), got {type(schema).__name__}"
            )
        try:
            fastavro.parse_schema(parsed_json, _write_hint=False)
        except Exception as e:  # fastavro's SchemaParseException, ValueError, ...
            raise ConfigurationError(f"not a valid Avro schema: {e}") from e
        self.schema: Any = parsed_json
        #: the schema text registered: the text as given, or ``json.dumps`` of a dict
        #: (the text a Python producer registering ``json.dumps(schema)`` sends: a
        #: registry that compares texts, as Apicurio's lookups do, then finds it)
        self.schema_text: str = schema if isinstance(schema, str) else json.dumps(parsed_json)
        #: the fully-qualified name of a named schema, None for others
        self.full_name: str | None = _full_name(parsed_json)
        self._parsed: Any = None

    def encode(self, record: Any) -> bytes:
        """``record``'s Avro binary encoding (ValueError naming the field that does
        not fit otherwise)."""
        import fastavro

        if self._parsed is None:
            self._parsed = fastavro.parse_schema(self.schema)
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, self._parsed, record, strict_allow_default=True)
        except (TypeError, ValueError, OverflowError, AttributeError, KeyError) as e:
            raise ValueError(f"it does not fit the Avro schema: {self._why(record, e)}") from e
        return out.getvalue()

    def _why(self, record: Any, error: Exception) -> str:
        """What does not fit: fastavro's own message for a missing or extra field;
        its validation messages (naming the field and its value) for a wrong type."""
        from fastavro.validation import ValidationError, validate

        is_record = isinstance(self.schema, dict) and self.schema.get("type") in _RECORDS
        if is_record and not isinstance(record, dict):
            return (
                f"a record of Avro record type {self.full_name} is a dict of its fields, "
                f"got {type(record).__name__}"
            )
        if type(error) is ValueError:
            return str(error)
        try:
            validate(record, self._parsed, raise_errors=True, strict=True)
        except ValidationError as e:
            return "; ".join(_short(str(m)) for m in e.errors)
        except (TypeError, ValueError) as e:
            return str(e)
        return f"{type(error).__name__}: {error}"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_parsed"] = None
        return state


def _full_name(schema: Any) -> str | None:
    if not isinstance(schema, dict) or schema.get("type") not in _NAMED:
        return None
    name = schema.get("name")
    if not isinstance(name, str):
        return None
    if "." in name:
        return name
    namespace = schema.get("namespace")
    return f"{namespace}.{name}" if namespace else name


def _short(message: str) -> str:
    """A validation message without the parsed schema it may quote in full."""
    head, sep, _ = message.partition(" expected {")
    return f"{head} expected another type" if sep else message[:300]

"""Writing JSON Schema records for a Schema Registry: each record is validated against
the schema and written as JSON text (UTF-8), as confluent-kafka's ``JSONSerializer``
does.

The schema is a dict or its JSON text; its ``$schema`` picks the draft (Draft 7, the
registries' default, when it names none). A ``$ref`` must resolve inside the schema (a
JSON pointer, an embedded ``$id``): one to another document is refused when the writer
is made, never fetched. Its ``title`` is the record type's name for
the ``record`` and ``topic_record`` subject strategies.
"""

from __future__ import annotations

import json
from typing import Any

from ...errors import ConfigurationError
from ..formats.json_values import json_default
from .json_schema_read import unresolvable_refs, validator_of


class JsonSchemaWriter:
    """Validates records against one JSON Schema and encodes them as JSON. Picklable
    (the validator is built again where it is first used)."""

    def __init__(self, schema: dict[str, Any] | str) -> None:
        if isinstance(schema, str):
            try:
                parsed = json.loads(schema)
            except ValueError as e:
                raise ConfigurationError(
                    f"a JSON Schema given as text must be JSON: {e}; got {schema[:200]!r}"
                ) from e
            text = schema
        elif isinstance(schema, dict):
            parsed = schema
            try:
                # as json.dumps(schema) gives it, the text a Python producer registers:
                # a registry comparing texts (Apicurio's lookups) then finds it
                text = json.dumps(schema, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise ConfigurationError(
                    f"a JSON Schema given as a dict must be JSON-serializable: {e}"
                ) from e
        else:
            raise ConfigurationError(
                f"a JSON Schema is a dict or its JSON text, got {type(schema).__name__}"
            )
        if not isinstance(parsed, (dict, bool)):
            raise ConfigurationError(
                f"a JSON Schema is an object (or true/false), got {parsed!r:.200}"
            )
        validator_class = _validator_class(parsed)
        try:
            validator = validator_of(parsed)
        except Exception as e:  # jsonschema.SchemaError
            raise ConfigurationError(
                f"not a valid JSON Schema ({validator_class.__name__}): {getattr(e, 'message', e)}"
            ) from e
        outside = unresolvable_refs(validator, parsed)
        if outside:
            raise ConfigurationError(
                f"the JSON Schema has a $ref that cannot be resolved inside it ("
                f"{'; '.join(outside)}): a $ref to a document outside the schema is never "
                "fetched (a sink must not open connections a schema names); inline what it "
                "refers to, e.g. under definitions, and refer to it as #/definitions/..."
            )
        #: the schema text registered
        self.schema_text: str = text
        self.schema: Any = parsed
        title = parsed.get("title") if isinstance(parsed, dict) else None
        #: the record type's name (the schema's "title"), None without one
        self.full_name: str | None = title if isinstance(title, str) and title else None
        self._validator: Any = None

    def encode(self, record: Any) -> bytes:
        """``record`` as JSON, if the schema accepts it (ValueError naming the first
        violation and where in the record it is otherwise)."""
        if self._validator is None:
            # refs never retrieved (the schema was checked to need none)
            self._validator = validator_of(self.schema)
        from jsonschema.exceptions import best_match

        error = best_match(self._validator.iter_errors(record))
        if error is not None:
            where = "".join(f"[{p!r}]" for p in error.absolute_path) or "the record"
            raise ValueError(f"{where} does not fit the JSON Schema: {error.message}")
        return json.dumps(
            record, default=json_default, ensure_ascii=False, allow_nan=False
        ).encode()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_validator"] = None
        return state


def _validator_class(schema: Any) -> Any:
    import jsonschema
    from jsonschema.validators import validator_for

    return validator_for(schema, default=jsonschema.Draft7Validator)

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
the "Bad input" rule of CONTRIBUTING.md). A writer's schema may refer to named types of
other registered schemas (the registry's ``references``: each a subject's version,
fetched once per writer schema through the client, their own references too); one
fastavro cannot parse, or whose references cannot be fetched or do not define what
they name, raises :class:`~.formats.WriterSchemaError`: the job fails (the schema is
wrong, not a record).

Speed: fastavro resolves record by record, field by field (about three times the time
of decoding with the writer's schema alone). Each writer schema is therefore compared
with the reader schema once (:func:`resolution_plan`): when they are the same, or
differ only by top-level fields the reader drops or adds with a default (every field
both have of the same type, every named type both have the same), a record is decoded
with the writer's schema alone and its fields then dropped and defaulted as fastavro's
resolution would (the same dict); any other difference goes through fastavro's
resolution.
"""

from __future__ import annotations

import copy
import io
import json
from typing import TYPE_CHECKING, Any
from uuid import UUID

from .wire import HEADER_BYTES
from .writer_schemas import MalformedValue, ParsedCache, bad_writer_schema, registered_writer

if TYPE_CHECKING:
    from .client import SchemaRegistry

#: parsed writer schemas kept per decoder (by schema id)
PARSED_CACHE = 1000
#: how deep a writer schema's references may nest (a reference's own references...)
MAX_REFERENCE_DEPTH = 32


class _ReferenceError(Exception):
    """A writer schema's reference that cannot be used (the message says which, why)."""


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
    except Exception as e:
        raise ValueError(f"fastavro cannot parse it: {e}") from e
    return data


#: promotions that keep the Python value as it is (int and long are ints, float and
#: double floats)
_SAME_VALUE = {("int", "long"), ("float", "double")}


def recursive(parsed: Any) -> bool:
    """Whether the parsed (fastavro) schema has a named type reachable from itself (a
    linked list, a tree): its records may nest as deep as their bytes allow."""
    named: dict[str, Any] = {}
    if isinstance(parsed, dict):
        named = parsed.get("__named_schemas", {})
    done: set[str] = set()

    def visit(t: Any, path: frozenset[str]) -> bool:
        if isinstance(t, str):
            if t in path:
                return True
            if t in done or t not in named:
                return False
            found = visit(named[t], path)  # its definition adds it to the path
            done.add(t)
            return found
        if isinstance(t, list):
            return any(visit(b, path) for b in t)
        if not isinstance(t, dict):
            return False
        name = t.get("name")
        if isinstance(name, str) and t.get("type") in ("record", "error"):
            if name in path:
                return True
            path = path | {name}
        kind = t.get("type")
        if kind in ("record", "error"):
            return any(visit(f["type"], path) for f in t.get("fields", []))
        if kind == "array":
            return visit(t.get("items"), path)
        if kind == "map":
            return visit(t.get("values"), path)
        return isinstance(kind, (dict, list)) and visit(kind, path)

    return visit(parsed, frozenset())


def empty_item_array(parsed: Any) -> str | None:
    """Where the parsed schema has an array whose items take no bytes (null, a fixed of
    size 0, a record of only such fields), e.g. ``"a.b[]"``; None when it has none.

    Such an array lets a few bytes claim 2**62 items, and fastavro would loop and
    allocate for each: a record of such a schema cannot be decoded within any bound.
    Every other array is bounded by its payload (each item takes at least a byte, so
    the decoder runs out of bytes), and so is every map (each entry takes its key's)."""
    named = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}
    return _find_empty_array(parsed, "", named, set())


def _takes_no_bytes(t: Any, named: dict[str, Any], seen: frozenset[str]) -> bool:
    if isinstance(t, str):
        if t == "null":
            return True
        if t in seen or t not in named:
            return False  # a primitive, or a record that holds itself
        return _takes_no_bytes(named[t], named, seen | {t})
    if not isinstance(t, dict):
        return False  # a union: its branch index takes a byte
    kind = t.get("type")
    if kind == "fixed":
        return int(t.get("size", 1)) == 0
    if kind in ("record", "error"):
        inside = seen | {t["name"]} if isinstance(t.get("name"), str) else seen
        return all(_takes_no_bytes(f["type"], named, inside) for f in t.get("fields", []))
    if kind in ("array", "map", "enum"):
        return False  # a count or an index takes a byte
    return isinstance(kind, (str, dict)) and _takes_no_bytes(kind, named, seen)


def _find_empty_array(t: Any, where: str, named: dict[str, Any], visited: set[str]) -> str | None:
    if isinstance(t, str):
        if t in named and t not in visited:
            visited.add(t)
            return _find_empty_array(named[t], where, named, visited)
        return None
    if isinstance(t, list):
        found = (_find_empty_array(b, where, named, visited) for b in t)
        return next((f for f in found if f), None)
    if not isinstance(t, dict):
        return None
    kind = t.get("type")
    if kind in ("record", "error"):
        if isinstance(t.get("name"), str):
            visited.add(t["name"])
        found = (
            _find_empty_array(
                f["type"], f"{where}.{f['name']}" if where else f["name"], named, visited
            )
            for f in t.get("fields", [])
        )
        return next((f for f in found if f), None)
    if kind == "array":
        if _takes_no_bytes(t.get("items"), named, frozenset()):
            return f"{where}[]"
        return _find_empty_array(t.get("items"), f"{where}[]", named, visited)
    if kind == "map":
        return _find_empty_array(t.get("values"), f"{where}{{}}", named, visited)
    if isinstance(kind, (dict, list)):
        return _find_empty_array(kind, where, named, visited)
    return None


def has_uuid(parsed: Any) -> bool:
    """Whether the parsed schema has a ``uuid`` string anywhere (fastavro reads it as a
    :class:`uuid.UUID`)."""
    seen: set[int] = set()

    def visit(t: Any) -> bool:
        if isinstance(t, list):
            return any(visit(b) for b in t)
        if not isinstance(t, dict) or id(t) in seen:
            return False
        seen.add(id(t))
        if t.get("logicalType") == "uuid" and t.get("type") == "string":
            return True
        return any(visit(v) for k, v in t.items() if k in ("type", "fields", "items", "values"))
        # a field's dict: its "type"; a record's "fields" list of field dicts

    named = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}
    return visit(parsed) or any(visit(t) for t in named.values())


def uuids_as_text(value: Any) -> Any:
    """``value`` (a decoded record, list or map) with each :class:`uuid.UUID` in it as its
    text (in place for dicts and lists)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list, UUID)):
                value[k] = uuids_as_text(v)
        return value
    if isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, (dict, list, UUID)):
                value[i] = uuids_as_text(v)
        return value
    if isinstance(value, UUID):
        return str(value)
    return value


def resolution_plan(writer: Any, reader: Any) -> tuple[tuple[str, ...], tuple[Any, ...]] | None:
    """How a record of the parsed ``writer`` schema resolves to the parsed ``reader``
    schema without fastavro's per-record resolution: ``(fields to drop, (name, default)
    pairs to add)``, ``((), ())`` when nothing changes; None when fastavro must resolve
    (anything but top-level fields dropped or added with defaults: another record name,
    aliases, a field whose type changed other than int to long or float to double, a
    named type both define differently, a new field without a default, a recursive
    schema)."""
    if writer == reader:
        return (), ()
    if not (isinstance(writer, dict) and isinstance(reader, dict)):
        return None
    if writer.get("type") != "record" or reader.get("type") != "record":
        return None
    if writer.get("name") != reader.get("name") or reader.get("aliases"):
        return None
    if recursive(writer) or recursive(reader):
        return None  # a nested record of the top-level type changes too
    top = writer.get("name")
    named_w, named_r = writer.get("__named_schemas", {}), reader.get("__named_schemas", {})
    for name in set(named_w) & set(named_r):
        if name != top and named_w[name] != named_r[name]:
            return None
    written = {f["name"]: f for f in writer["fields"]}
    read_names = set()
    added = []
    for f in reader["fields"]:
        if f.get("aliases"):
            return None
        name = f["name"]
        read_names.add(name)
        w = written.get(name)
        if w is None:
            if "default" not in f:
                return None  # fastavro says what is missing
            added.append((name, f["default"]))
        elif w["type"] != f["type"] and (w["type"], f["type"]) not in _SAME_VALUE:
            return None
    dropped = tuple(n for n in written if n not in read_names)
    return dropped, tuple(added)


class AvroValueDecoder:
    """Decodes framed Avro values of one side (value or key) of a source."""

    def __init__(self, registry: SchemaRegistry, reader_schema: Any = None) -> None:
        import fastavro

        self.registry = registry
        self._read = fastavro.schemaless_reader
        self._parse = fastavro.parse_schema
        self.reader = None if reader_schema is None else fastavro.parse_schema(reader_schema)
        self._reader_recursive = self.reader is not None and recursive(self.reader)
        #: give a ``uuid`` string as its text, not a :class:`uuid.UUID` (set by a
        #: source with ``schema=``: the column :func:`.avro_arrow.avro_arrow_schema`
        #: gives it is a string)
        self.uuid_as_text = False
        self._reader_uuid = self.reader is not None and has_uuid(self.reader)
        #: schema id -> (parsed writer schema, reader schema for fastavro, plan, the
        #: schemaless_reader to decode with)
        self._writers: ParsedCache = ParsedCache(PARSED_CACHE)

    def _writer(self, schema_id: int) -> tuple[Any, Any, Any, Any, bool]:
        """The parsed writer schema of ``schema_id``, the reader schema fastavro must
        resolve to (None when :func:`resolution_plan` does it), that plan, and the
        fastavro reader to decode with: its compiled one, but the pure-Python one for a
        :func:`recursive` schema (the compiled one recurses on the C stack, and a deep
        enough record overflows it: a segfault; the pure-Python one raises
        RecursionError, and the record is malformed); and whether its records may hold
        a :class:`uuid.UUID`."""
        entry = self._writers.get(schema_id)
        if entry is None:
            registered = registered_writer(self.registry, schema_id, "AVRO")
            named: dict[str, Any] = {}
            try:
                self._references(registered.schema.references, named, 0)
                parsed = self._parse(json.loads(registered.schema.schema), named_schemas=named)
            except _ReferenceError as e:
                raise bad_writer_schema(
                    self.registry, schema_id, str(e), registered.subject
                ) from None
            except Exception as e:  # noqa: BLE001 - fastavro raises several kinds
                raise bad_writer_schema(
                    self.registry,
                    schema_id,
                    f"it is not an Avro schema fastavro can parse: {type(e).__name__}: {e}",
                    registered.subject,
                ) from None
            bomb = empty_item_array(parsed)
            if bomb is not None:
                raise bad_writer_schema(
                    self.registry,
                    schema_id,
                    f"its array {bomb} has items that take no bytes, so a few bytes of a "
                    "record could claim 2**62 of them and decoding would never end; "
                    "lockgate refuses such schemas (give the items a field that takes "
                    "bytes, or count them in a long)",
                    registered.subject,
                )
            plan = None if self.reader is None else resolution_plan(parsed, self.reader)
            read = self._read
            if self._reader_recursive or recursive(parsed):
                from fastavro._read_py import schemaless_reader

                read = schemaless_reader
            uuids = self._reader_uuid or has_uuid(parsed)
            entry = (parsed, self.reader if plan is None else None, plan, read, uuids)
            self._writers.put(schema_id, entry)
        return entry

    def _references(self, references: Any, named: dict[str, Any], depth: int) -> None:
        """The schemas ``references`` name (each a subject's version, fetched through the
        registry client; their own references first) parsed into ``named``, the named
        types the referring schema is parsed with; _ReferenceError saying which one
        cannot be used."""
        for ref in references:
            if ref.name in named:
                continue
            where = f"the schema it refers to as {ref.name} ({ref.subject} v{ref.version})"
            if depth >= MAX_REFERENCE_DEPTH:
                raise _ReferenceError(f"{where}: references nest deeper than {MAX_REFERENCE_DEPTH}")
            found = self.registry.version(ref.subject, ref.version)
            if found is None:
                raise _ReferenceError(f"{where} is not in the registry")
            if (found.schema.schema_type or "AVRO").upper() != "AVRO":
                raise _ReferenceError(f"{where} is a {found.schema.schema_type} schema, not Avro")
            self._references(found.schema.references, named, depth + 1)
            try:
                self._parse(json.loads(found.schema.schema), named_schemas=named)
            except Exception as e:  # noqa: BLE001 - fastavro raises several kinds
                raise _ReferenceError(
                    f"{where} is not an Avro schema fastavro can parse: {type(e).__name__}: {e}"
                ) from None
            if ref.name not in named:
                raise _ReferenceError(f"{where} does not define the named type {ref.name}")

    def decode(self, schema_id: int, value: bytes) -> Any:
        writer, reader, plan, read, uuids = self._writer(schema_id)
        stream = io.BytesIO(value)
        stream.seek(HEADER_BYTES)
        record: Any
        try:
            record = read(stream, writer, reader)
        except Exception as e:
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
        if plan:
            dropped, added = plan
            for name in dropped:
                del record[name]
            for name, default in added:
                record[name] = (
                    default if isinstance(default, (str, int, float)) else copy.deepcopy(default)
                )
        if uuids and self.uuid_as_text:
            return uuids_as_text(record)
        return record

"""Protobuf values of the Schema Registry wire format, parsed by a message class.

The reader names the message class (as Flink's ``protobuf.message-class-name``): a
class protoc generated, or one built from a descriptor. Each value's schema id is
looked up in the registry (an id it does not know makes the record malformed) and its
message indexes read; the payload is then parsed by the class, which applies
Protobuf's own evolution rules: fields the class does not know are skipped, fields the
writer did not set take their defaults.

Records are dicts: field names as in the ``.proto``, 64-bit integers as ints, enums as
their names (a number the enum does not define stays an int), nested messages as dicts
(None when not set), repeated fields as lists, maps as dicts, bytes as bytes, scalars
the writer did not set at their Protobuf defaults.

:class:`MessageClassRef` keeps the class picklable: a source travels to Spark workers
by pickle, and a class built at run time (or one whose module a worker cannot import)
does not pickle; the ref carries the class's file descriptors instead and builds an
equivalent class in a descriptor pool of its own on the other side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .wire import HEADER_BYTES, WireFormatError, decode_message_indexes
from .writer_schemas import MalformedValue, ParsedCache, writer_schema

if TYPE_CHECKING:
    from .client import SchemaRegistry


def is_message_class(value: object) -> bool:
    """``value`` is a Protobuf message class (generated or built from a descriptor)."""
    try:
        from google.protobuf.message import Message
    except ImportError:  # pragma: no cover - the kafka extra installs protobuf
        return False
    return isinstance(value, type) and issubclass(value, Message) and value is not Message


class MessageClassRef:
    """A Protobuf message class that pickles as its file descriptors."""

    def __init__(self, cls: Any) -> None:
        self._cls: Any = cls
        self.full_name: str = cls.DESCRIPTOR.full_name
        self._files: list[bytes] | None = None

    @property
    def cls(self) -> Any:
        if self._cls is None:
            self._cls = _rebuild(self.full_name, self._files or [])
        return self._cls

    def __getstate__(self) -> dict[str, Any]:
        files = self._files if self._files is not None else _files_of(self.cls)
        return {"full_name": self.full_name, "files": files}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._cls = None
        self.full_name = state["full_name"]
        self._files = state["files"]

    def __repr__(self) -> str:
        return f"MessageClassRef({self.full_name})"


def _files_of(cls: Any) -> list[bytes]:
    """The serialized FileDescriptorProtos of ``cls``'s file and its imports,
    dependencies first."""
    from google.protobuf import descriptor_pb2

    out: list[bytes] = []
    seen: set[str] = set()

    def visit(fd: Any) -> None:
        if fd.name in seen:
            return
        seen.add(fd.name)
        for dep in fd.dependencies:
            visit(dep)
        proto = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(proto)
        out.append(proto.SerializeToString())

    visit(cls.DESCRIPTOR.file)
    return out


def _rebuild(full_name: str, files: list[bytes]) -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    for data in files:
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(data))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


Converter = Callable[[Any], dict[str, Any]]


def converter(descriptor: Any, _made: dict[str, Converter] | None = None) -> Converter:  # noqa: C901 (one branch per field kind)
    """A function turning a message of ``descriptor`` into a dict (see the module's
    docstring), made once per message type."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    made = {} if _made is None else _made
    known = made.get(descriptor.full_name)
    if known is not None:
        return known
    plan: list[tuple[str, Callable[[Any], Any]]] = []

    def convert(message: Any) -> dict[str, Any]:
        return {name: get(message) for name, get in plan}

    made[descriptor.full_name] = convert  # recursive messages refer to it

    for field in descriptor.fields:
        name = field.name
        repeated = _repeated(field)
        one: Callable[[Any], Any] | None = None
        if field.type == FD.TYPE_MESSAGE:
            sub = field.message_type
            if repeated and sub.GetOptions().map_entry:
                key_f, value_f = sub.fields_by_name["key"], sub.fields_by_name["value"]
                value_one = _scalar(value_f, made)

                def get_map(m: Any, name: str = name, value_one: Any = value_one) -> Any:
                    items = getattr(m, name)
                    if value_one is None:
                        return dict(items)
                    return {k: value_one(items[k]) for k in items}

                del key_f
                plan.append((name, get_map))
                continue
            one = converter(sub, made)
            if not repeated:

                def get_msg(m: Any, name: str = name, one: Any = one) -> Any:
                    return one(getattr(m, name)) if m.HasField(name) else None

                plan.append((name, get_msg))
                continue
        else:
            one = _scalar(field, made)
        if repeated:
            if one is None:

                def get_list(m: Any, name: str = name, one: Any = None) -> Any:
                    return list(getattr(m, name))
            else:

                def get_list(m: Any, name: str = name, one: Any = one) -> Any:
                    return [one(v) for v in getattr(m, name)]

            plan.append((name, get_list))
        elif one is None:

            def get_plain(m: Any, name: str = name) -> Any:
                return getattr(m, name)

            plan.append((name, get_plain))
        else:

            def get_one(m: Any, name: str = name, one: Any = one) -> Any:
                return one(getattr(m, name))

            plan.append((name, get_one))
    return convert


def _repeated(field: Any) -> bool:
    """``field`` is repeated (``is_repeated`` since protobuf 5; ``label`` before)."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    flag = getattr(field, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    return bool(field.label == FD.LABEL_REPEATED)


def _scalar(field: Any, made: dict[str, Converter]) -> Callable[[Any], Any] | None:
    """How one value of ``field`` converts (None: as it is)."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    if field.type == FD.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}

        def enum_name(v: int, names: dict[int, str] = names) -> Any:
            return names.get(v, v)

        return enum_name
    if field.type == FD.TYPE_MESSAGE:
        return converter(field.message_type, made)
    return None


class ProtobufValueDecoder:
    """Decodes framed Protobuf values of one side (value or key) of a source with the
    message class of ``ref``."""

    def __init__(self, registry: SchemaRegistry, ref: MessageClassRef) -> None:
        self.registry = registry
        self.cls = ref.cls
        self.full_name = ref.full_name
        self.convert = converter(self.cls.DESCRIPTOR)
        #: the schema ids the registry knows as Protobuf schemas
        self._known: ParsedCache = ParsedCache(1000)

    def decode(self, schema_id: int, value: bytes) -> Any:
        from google.protobuf.message import DecodeError

        if self._known.get(schema_id) is None:
            writer_schema(self.registry, schema_id, "PROTOBUF")
            self._known.put(schema_id, True)
        try:
            _, start = decode_message_indexes(value, HEADER_BYTES)
        except WireFormatError as e:
            raise MalformedValue(f"{e} (schema id {schema_id})") from e
        message = self.cls()
        try:
            message.ParseFromString(memoryview(value)[start:])
        except (DecodeError, ValueError, RuntimeError) as e:
            raise MalformedValue(
                f"its Protobuf payload does not parse as {self.full_name} (schema id "
                f"{schema_id}): {e}"
            ) from e
        return self.convert(message)

"""Writing Protobuf records for a Schema Registry: the schema's ``.proto`` text, the
message indexes that name the record's message within its file, and the payload.

A Schema Registry stores a Protobuf schema as the text of its ``.proto`` file. The
Python ``protobuf`` runtime keeps only the compiled descriptor (a
``FileDescriptorProto``) and has no printer back to ``.proto`` text, and neither has
confluent-kafka (its serializer registers the base64 of the serialized descriptor, a
form Confluent's registry converts but other registries need not take), so
:func:`render_proto` writes the text from the descriptor: syntax, package, imports,
messages (nested, map fields, oneofs, proto3 ``optional``, reserved ranges and names),
enums and services. Options other than ``packed``, ``deprecated``, ``allow_alias`` and
``json_name`` are left out: they do not change the encoding. Imports are limited to
Protobuf's well-known types (``google/protobuf/*.proto``), which registries have built
in; a message importing another file of its own is refused (it would need that file
registered as a schema reference).

:class:`ProtobufWriter` is picklable (it travels to Spark workers inside the sink):
a message class built at run time has no importable module, so the writer keeps it as
a :class:`~.protobuf_read.MessageClassRef`, which pickles as the descriptors of its file
and the file's imports and builds the class again in a pool of its own.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.message import Message

from ...errors import ConfigurationError
from .protobuf_read import MessageClassRef, is_message_class

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    _F.TYPE_DOUBLE: "double",
    _F.TYPE_FLOAT: "float",
    _F.TYPE_INT64: "int64",
    _F.TYPE_UINT64: "uint64",
    _F.TYPE_INT32: "int32",
    _F.TYPE_FIXED64: "fixed64",
    _F.TYPE_FIXED32: "fixed32",
    _F.TYPE_BOOL: "bool",
    _F.TYPE_STRING: "string",
    _F.TYPE_BYTES: "bytes",
    _F.TYPE_UINT32: "uint32",
    _F.TYPE_SFIXED32: "sfixed32",
    _F.TYPE_SFIXED64: "sfixed64",
    _F.TYPE_SINT32: "sint32",
    _F.TYPE_SINT64: "sint64",
}
#: a message's largest field number (``reserved 5 to max``)
_MAX_FIELD = 536_870_911
_BUILTIN_PREFIX = "google/protobuf/"


def is_builtin(file_name: str) -> bool:
    """Whether ``file_name`` is one of Protobuf's well-known types (registries have them
    built in, so importing them needs no schema reference)."""
    return file_name.startswith(_BUILTIN_PREFIX)


def message_indexes(descriptor: Any) -> list[int]:
    """The indexes naming the message ``descriptor`` in its file (Confluent's wire
    format): its top-level message's index, then each nested message's index in the
    one holding it."""
    path: list[int] = []
    current = descriptor
    while current.containing_type is not None:
        parent = current.containing_type
        path.append(list(parent.nested_types).index(current))
        current = parent
    path.append(list(current.file.message_types_by_name).index(current.name))
    return path[::-1]


# ---------------------------------------------------------------- the .proto renderer


def render_proto(file: descriptor_pb2.FileDescriptorProto) -> str:
    """The ``.proto`` text of ``file`` (proto3 or proto2; editions are refused)."""
    syntax = file.syntax or "proto2"
    if syntax not in ("proto2", "proto3"):
        raise ConfigurationError(
            f"cannot write the .proto text of {file.name!r}: syntax {syntax!r} is not "
            "supported (proto2 and proto3 are)"
        )
    out = [f'syntax = "{syntax}";']
    if file.package:
        out += ["", f"package {file.package};"]
    if file.dependency:
        out.append("")
        public = set(file.public_dependency)
        weak = set(file.weak_dependency)
        for i, dep in enumerate(file.dependency):
            kind = "public " if i in public else "weak " if i in weak else ""
            out.append(f'import {kind}"{_escape(dep.encode())}";')
    if file.extension:
        raise ConfigurationError(
            f"cannot write the .proto text of {file.name!r}: top-level extensions are not supported"
        )
    for message in file.message_type:
        out.append("")
        _message(message, syntax, 0, out)
    for enum in file.enum_type:
        out.append("")
        _enum(enum, 0, out)
    for service in file.service:
        out.append("")
        _service(service, out)
    return "\n".join(out) + "\n"


def _message(m: descriptor_pb2.DescriptorProto, syntax: str, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    inner = pad + "  "
    out.append(f"{pad}message {m.name} {{")
    if m.extension:
        raise ConfigurationError(
            f"cannot write the .proto text of message {m.name!r}: extensions are not supported"
        )
    entries = {f".{n.name}": n for n in m.nested_type if n.options.map_entry}
    _reserved(m.reserved_range, m.reserved_name, inner, out, end_inclusive=False)
    for r in m.extension_range:
        out.append(f"{inner}extensions {_range(r.start, r.end - 1)};")
    real_oneofs = {
        f.oneof_index for f in m.field if f.HasField("oneof_index") and not f.proto3_optional
    }
    done: set[int] = set()
    for f in m.field:
        if f.HasField("oneof_index") and f.oneof_index in real_oneofs:
            index = f.oneof_index
            if index in done:
                continue
            done.add(index)
            out.append(f"{inner}oneof {m.oneof_decl[index].name} {{")
            for g in m.field:
                if g.HasField("oneof_index") and g.oneof_index == index:
                    out.append(f"{inner}  {_field(g, syntax, entries, m, in_oneof=True)}")
            out.append(f"{inner}}}")
        else:
            out.append(f"{inner}{_field(f, syntax, entries, m, in_oneof=False)}")
    for nested in m.nested_type:
        if not nested.options.map_entry:
            _message(nested, syntax, depth + 1, out)
    for enum in m.enum_type:
        _enum(enum, depth + 1, out)
    out.append(f"{pad}}}")


def _field(
    f: descriptor_pb2.FieldDescriptorProto,
    syntax: str,
    entries: dict[str, descriptor_pb2.DescriptorProto],
    message: descriptor_pb2.DescriptorProto,
    *,
    in_oneof: bool,
) -> str:
    entry = None
    if f.type == _F.TYPE_MESSAGE and f.label == _F.LABEL_REPEATED:
        short = "." + f.type_name.rsplit(".", 1)[-1]
        if short in entries and f.type_name.endswith(f"{message.name}{short}"):
            entry = entries[short]
    if entry is not None:
        key, value = entry.field[0], entry.field[1]
        text = f"map<{_type(key)}, {_type(value)}> {f.name} = {f.number}"
    else:
        if in_oneof:
            label = ""
        elif f.label == _F.LABEL_REPEATED:
            label = "repeated "
        elif f.label == _F.LABEL_REQUIRED:
            label = "required "
        elif syntax == "proto2" or f.proto3_optional:
            label = "optional "
        else:
            label = ""
        text = f"{label}{_type(f)} {f.name} = {f.number}"
    options = []
    if f.HasField("default_value"):
        options.append(f"default = {_default(f)}")
    if f.HasField("json_name") and f.json_name != _json_name(f.name):
        options.append(f'json_name = "{_escape(f.json_name.encode())}"')
    if f.options.HasField("packed"):
        options.append(f"packed = {'true' if f.options.packed else 'false'}")
    if f.options.deprecated:
        options.append("deprecated = true")
    if options:
        text += f" [{', '.join(options)}]"
    return text + ";"


def _type(f: descriptor_pb2.FieldDescriptorProto) -> str:
    if f.type in _SCALARS:
        return _SCALARS[f.type]
    if f.type in (_F.TYPE_MESSAGE, _F.TYPE_ENUM):
        return f.type_name  # fully qualified, with the leading '.'
    raise ConfigurationError(
        f"cannot write the .proto text of field {f.name!r}: groups are not supported"
    )


def _default(f: descriptor_pb2.FieldDescriptorProto) -> str:
    """A proto2 default as written in the .proto (numbers, enum names, true/false and
    inf/nan as the descriptor holds them; bytes defaults are held C-escaped already)."""
    if f.type == _F.TYPE_STRING:
        return f'"{_escape(f.default_value.encode())}"'
    if f.type == _F.TYPE_BYTES:
        return f'"{f.default_value}"'
    return f.default_value


def _json_name(name: str) -> str:
    """protoc's default JSON name: underscores dropped, the letter after one upper-cased."""
    out = []
    upper = False
    for c in name:
        if c == "_":
            upper = True
        elif upper:
            out.append(c.upper())
            upper = False
        else:
            out.append(c)
    return "".join(out)


def _enum(e: descriptor_pb2.EnumDescriptorProto, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    inner = pad + "  "
    out.append(f"{pad}enum {e.name} {{")
    if e.options.allow_alias:
        out.append(f"{inner}option allow_alias = true;")
    _reserved(e.reserved_range, e.reserved_name, inner, out, end_inclusive=True)
    for v in e.value:
        deprecated = " [deprecated = true]" if v.options.deprecated else ""
        out.append(f"{inner}{v.name} = {v.number}{deprecated};")
    out.append(f"{pad}}}")


def _service(s: descriptor_pb2.ServiceDescriptorProto, out: list[str]) -> None:
    out.append(f"service {s.name} {{")
    for m in s.method:
        stream_in = "stream " if m.client_streaming else ""
        stream_out = "stream " if m.server_streaming else ""
        out.append(
            f"  rpc {m.name}({stream_in}{m.input_type}) returns ({stream_out}{m.output_type});"
        )
    out.append("}")


def _reserved(ranges: Any, names: Any, pad: str, out: list[str], *, end_inclusive: bool) -> None:
    if ranges:
        parts = [_range(r.start, r.end if end_inclusive else r.end - 1) for r in ranges]
        out.append(f"{pad}reserved {', '.join(parts)};")
    if names:
        out.append(f"{pad}reserved {', '.join(f'{chr(34)}{n}{chr(34)}' for n in names)};")


def _range(start: int, last: int) -> str:
    if last == start:
        return str(start)
    return f"{start} to {'max' if last >= _MAX_FIELD else last}"


def _escape(raw: bytes) -> str:
    out = []
    for b in raw:
        c = chr(b)
        if c in "\\\"'":
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return "".join(out)


# ---------------------------------------------------------------- the writer


class ProtobufWriter:
    """Encodes records as messages of one Protobuf message class.

    A record is a message of that class (by its full name) or a dict of its fields
    (nested messages as dicts, repeated fields as lists, maps as dicts, enums as names
    or numbers, ``google.protobuf.Timestamp`` fields as datetimes); a field the message
    does not have, or a value of the wrong type, fails the record.
    """

    def __init__(self, message_class: Any) -> None:
        descriptor = getattr(message_class, "DESCRIPTOR", None)
        if not (
            is_message_class(message_class)
            and hasattr(descriptor, "full_name")
            and hasattr(descriptor, "file")
        ):
            raise ConfigurationError(
                "a Protobuf schema must be the generated message class (e.g. "
                f"orders_pb2.Order, or a class from message_factory.GetMessageClass), got "
                f"{message_class!r}"
            )
        descriptor = message_class.DESCRIPTOR
        file = descriptor.file
        for dep in file.dependencies:
            if not is_builtin(dep.name):
                raise ConfigurationError(
                    f"Protobuf message {descriptor.full_name} is in {file.name!r}, which "
                    f"imports {dep.name!r}: only Protobuf's well-known types "
                    f"({_BUILTIN_PREFIX}*.proto) can be imported (registries have them built "
                    "in); put the types it needs into one .proto file"
                )
        self.full_name: str = descriptor.full_name
        self.file_name: str = file.name
        self.message_indexes: list[int] = message_indexes(descriptor)
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        #: the .proto text registered as the schema
        self.schema_text: str = render_proto(proto)
        #: the class, picklable as its file descriptors (rebuilt where unpickled)
        self._ref = MessageClassRef(message_class)

    @property
    def message_class(self) -> Any:
        return self._ref.cls

    def encode(self, record: Any) -> bytes:
        """``record`` as the message's bytes (TypeError or ValueError saying why not)."""
        if isinstance(record, Message):
            name = record.DESCRIPTOR.full_name
            if name != self.full_name:
                raise TypeError(f"a message of type {name}, not {self.full_name}")
            return record.SerializeToString()
        if not isinstance(record, dict):
            raise TypeError(
                f"Protobuf records are {self.full_name} messages or dicts of its fields, got "
                f"{type(record).__name__}"
            )
        fields = {k: v for k, v in record.items() if v is not None}
        try:
            message = self._ref.cls(**fields)
        except TypeError as e:
            raise TypeError(f"{e} (in {self.full_name})") from e
        return bytes(message.SerializeToString())

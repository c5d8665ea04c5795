"""The payload of a state file: a self-describing tree whose pickled parts are marked
and loaded only when allowed (docs/savepoint_format.md).

A state file's payload (inside the LGCK header of :mod:`lockgate.checkpoint.fs_storage`)
is ``b"LGST"``, a format version (uint16 LE, :data:`TREE_VERSION`) and one value:

====  ===========================================================  ==================
tag   followed by                                                  value
====  ===========================================================  ==================
N                                                                  None
T/F                                                                True / False
i     int64 LE                                                     int
I     uint32 length, ASCII decimal                                 int (any size)
f     float64 LE                                                   float
s     uint32 length, UTF-8                                         str
b     uint64 length, bytes                                         bytes
l/t   uint32 count, values                                         list / tuple
d     uint32 count, (key, value) pairs                             dict
R     name (an ``s`` value), uint16 version, fields (a ``d`` value)  a state record (v2)
A     dtype (an ``s`` value), uint8 ndim, uint64 per dim, uint64     numpy array (v2)
      length, the C-order bytes
a     uint8 (0: a type, 1: a schema), uint64 length, an Arrow     Arrow type or
      IPC schema (of one field ``type`` for a type)               schema (v2)
B     uint8 (0: a record batch, 1: a table), uint64 length, an     Arrow data (v2)
      Arrow IPC stream
p     uint64 length, a pickle that names no class or function      plain data (v2)
P     uint32 index of a pickled part                               anything else
====  ===========================================================  ==================

then the pickled parts: uint32 count, uint64 length and one cloudpickle stream of
``count`` pickles made by one pickler (its memo shared), loaded in order by one
unpickler: objects two parts share are shared again, as in one pickle.

The encoder walks dicts, lists and tuples of at most :data:`WALK_LIMIT` items (or of
state records only), to at most :data:`MAX_DEPTH` levels. lockgate's own objects (source
splits, sink transactions, ...) are *records* (:mod:`lockgate.core.state_records`):
a name, a version and their fields, decoded without running code named by the file.
Numeric numpy arrays, Arrow types, schemas, record batches and tables are data. A larger container, a set or a frozenset
of only plain values (None, bool, int, float, str, bytes, bytearray and containers of
them) is one ``p`` pickle, loaded by an unpickler that refuses to name any class or
function, so it runs no code either. Anything else (a user's object, a container holding
one) is one ``P`` part, pickled with cloudpickle. Typed keyed state is bytes (Arrow IPC).

:func:`decode_tree` with ``unpickle=False`` returns :class:`PickledValue` placeholders
for the ``P`` parts: reading such a tree runs no code, whatever the file says. Files
written before this format (the payload is one pickle) decode to one placeholder.
Version 1 trees (no R, A, a, p tags) are read as they were.
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa

from ..core.moved_modules import MovedModulesUnpickler
from ..core.moved_modules import loads as moved_loads
from ..core.state_records import RecordFormatError, spec_named, spec_of

TREE_MAGIC = b"LGST"
#: the version of the tree layout this lockgate writes and reads
TREE_VERSION = 2
#: containers with more items than this (unless all are records) are pickled whole
WALK_LIMIT = 64
#: numpy dtype kinds written as data (bool, integers, floats, complex, datetimes)
ARRAY_KINDS = frozenset("biufcmM")
#: deeper structures are pickled whole below this depth
MAX_DEPTH = 16

_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_U16 = struct.Struct("<H")
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


class TreeFormatError(ValueError):
    """A state payload this lockgate cannot decode (a newer version, a broken tree)."""


class _NotPlain(Exception):
    pass


class _PlainPickler(pickle.Pickler):
    """Pickles only plain data: any object that would need a class or a function named
    in the pickle stops it."""

    def reducer_override(self, obj: Any) -> Any:
        raise _NotPlain(type(obj).__name__)


class _PlainUnpickler(pickle.Unpickler):
    """Loads plain data only: a pickle naming any class or function is refused, so
    loading runs no code."""

    def find_class(self, module: str, name: str) -> Any:
        raise TreeFormatError(f"a plain-data part of a state tree names {module}.{name}")


def _plain_pickle(value: Any) -> bytes | None:
    """``value`` pickled if it is plain data, else None."""
    out = io.BytesIO()
    try:
        _PlainPickler(out, protocol=5).dump(value)
    except (_NotPlain, RecursionError):
        return None
    return out.getvalue()


class _Loader:
    """Loads the pickled parts of one tree in order, through one Unpickler (shared memo)."""

    def __init__(self, stream: bytes, count: int, where: str) -> None:
        self.stream = stream
        self.count = count
        self.where = where
        self._unpickler: pickle.Unpickler | None = None
        self.values: list[Any] = []

    def value(self, index: int) -> Any:
        if not 0 <= index < self.count:
            raise TreeFormatError(f"{self.where}: pickled part {index} of {self.count}")
        if self._unpickler is None:
            self._unpickler = MovedModulesUnpickler(io.BytesIO(self.stream))
        while len(self.values) <= index:
            self.values.append(self._unpickler.load())
        return self.values[index]


class PickledValue:
    """A pickled part of a state file, not loaded: :meth:`load` unpickles it, with the
    parts before it in its file (which runs code named by the file: only for storage you
    trust, or signed checkpoints)."""

    __slots__ = ("_index", "_loader")

    def __init__(self, loader: _Loader, index: int) -> None:
        self._loader = loader
        self._index = index

    @classmethod
    def whole(cls, data: bytes) -> PickledValue:
        """A payload of the format before state trees: one pickle."""
        return cls(_Loader(bytes(data), 1, "state"), 0)

    def load(self) -> Any:
        return self._loader.value(self._index)

    def __repr__(self) -> str:
        return f"<pickled value #{self._index}, not loaded>"


def has_pickles(value: Any) -> bool:
    """Whether a decoded tree holds a :class:`PickledValue` anywhere."""
    if isinstance(value, PickledValue):
        return True
    if isinstance(value, dict):
        return any(has_pickles(k) or has_pickles(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_pickles(v) for v in value)
    spec = spec_of(type(value))
    if spec is not None:
        return any(has_pickles(v) for v in spec.fields_of(value).values())
    return False


# -- encode ------------------------------------------------------------------------------------
class _Pickles:
    """The pickled parts of one tree: one cloudpickle stream, one ``dump`` per part with
    the memo shared, so an object two parts hold is one object again when the stream
    is loaded in order (as it was when the whole state was one pickle)."""

    def __init__(self) -> None:
        self.stream = io.BytesIO()
        self.pickler = cloudpickle.Pickler(self.stream, protocol=5)  # a script's classes by value
        self.count = 0

    def add(self, value: Any) -> int:
        self.pickler.dump(value)
        self.count += 1
        return self.count - 1


def encode_tree(value: Any) -> bytes:
    """The payload of a state file holding ``value``."""
    out = bytearray(TREE_MAGIC)
    out += _U16.pack(TREE_VERSION)
    pickles = _Pickles()
    _encode(value, out, 0, pickles)
    stream = pickles.stream.getvalue()
    out += _U32.pack(pickles.count)
    out += _U64.pack(len(stream))
    out += stream
    return bytes(out)


def _encode(value: Any, out: bytearray, depth: int, pickles: _Pickles) -> None:  # noqa: C901
    t = type(value)
    if value is None:
        out += b"N"
    elif t is bool:
        out += b"T" if value else b"F"
    elif t is int:
        if _INT_MIN <= value <= _INT_MAX:
            out += b"i"
            out += _I64.pack(value)
        else:
            text = str(value).encode("ascii")
            out += b"I"
            out += _U32.pack(len(text))
            out += text
    elif t is float:
        out += b"f"
        out += _F64.pack(value)
    elif t is str:
        data = value.encode("utf-8", "surrogatepass")
        out += b"s"
        out += _U32.pack(len(data))
        out += data
    elif t is bytes:
        out += b"b"
        out += _U64.pack(len(value))
        out += value
    elif t in (list, tuple, dict):
        if depth < MAX_DEPTH and len(value) <= WALK_LIMIT:
            _encode_container(value, t, out, depth, pickles)
        elif (plain := _plain_pickle(value)) is not None:
            _encode_plain(plain, out)
        elif depth < MAX_DEPTH and _structure(value):  # lockgate's structures, walked
            _encode_container(value, t, out, depth, pickles)
        else:
            _encode_pickled(value, out, pickles)
    elif t in (set, frozenset, bytearray):
        _encode_whole(value, out, pickles)
    elif (spec := spec_of(t)) is not None:
        out += b"R"
        _encode(spec.name, out, depth, pickles)
        out += _U16.pack(spec.version)
        _encode_container(spec.fields_of(value), dict, out, depth, pickles)
    elif t is np.ndarray and value.dtype.kind in ARRAY_KINDS and value.dtype.fields is None:
        data = np.ascontiguousarray(value)
        out += b"A"
        _encode(data.dtype.str, out, depth, pickles)
        out += bytes([data.ndim])
        for n in data.shape:
            out += _U64.pack(n)
        out += _U64.pack(data.nbytes)
        out += data.tobytes()
    elif isinstance(value, (pa.DataType, pa.Schema)):
        is_schema = isinstance(value, pa.Schema)
        schema = value if is_schema else pa.schema([pa.field("type", value)])
        data = schema.serialize().to_pybytes()
        out += b"a"
        out += bytes([is_schema])
        out += _U64.pack(len(data))
        out += data
    elif t in (pa.RecordBatch, pa.Table):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, value.schema) as writer:
            writer.write(value)
        data = sink.getvalue().to_pybytes()
        out += b"B"
        out += bytes([t is pa.Table])
        out += _U64.pack(len(data))
        out += data
    else:
        _encode_pickled(value, out, pickles)


def _encode_container(value: Any, t: type, out: bytearray, depth: int, pickles: _Pickles) -> None:
    if t is dict:
        out += b"d"
        out += _U32.pack(len(value))
        for k, v in value.items():
            _encode(k, out, depth + 1, pickles)
            _encode(v, out, depth + 1, pickles)
    else:
        out += b"l" if t is list else b"t"
        out += _U32.pack(len(value))
        for item in value:
            _encode(item, out, depth + 1, pickles)


def _encode_whole(value: Any, out: bytearray, pickles: _Pickles) -> None:
    """A value not walked: plain data as one ``p`` pickle, else one ``P`` part."""
    plain = _plain_pickle(value)
    if plain is None:
        _encode_pickled(value, out, pickles)
    else:
        _encode_plain(plain, out)


def _encode_plain(plain: bytes, out: bytearray) -> None:
    out += b"p"
    out += _U64.pack(len(plain))
    out += plain


def _encode_pickled(value: Any, out: bytearray, pickles: _Pickles) -> None:
    out += b"P"
    out += _U32.pack(pickles.add(value))


_STRUCTURE = (list, tuple, dict)


def _structure(container: Any) -> bool:
    """Whether a large container that is not plain data holds only containers and
    records (lockgate's own structures: walked, so their arrays and records are data);
    one holding a user's objects is pickled whole, as before records."""
    items = container.values() if type(container) is dict else container
    return all(type(v) in _STRUCTURE or spec_of(type(v)) is not None for v in items)


# -- decode ------------------------------------------------------------------------------------
def is_tree(payload: bytes) -> bool:
    return payload[:4] == TREE_MAGIC


def decode_tree(payload: bytes, *, unpickle: bool = True, where: str = "state") -> Any:
    """The value of a state file's payload. ``unpickle=False``: pickled parts stay
    :class:`PickledValue` placeholders (nothing runs); a payload of the format before
    the tree (one pickle) is then one placeholder."""
    if not is_tree(payload):
        return moved_loads(payload) if unpickle else PickledValue.whole(payload)
    if len(payload) < 6:
        raise TreeFormatError(f"{where}: the state tree is truncated")
    (version,) = _U16.unpack_from(payload, 4)
    if version > TREE_VERSION:
        raise TreeFormatError(
            f"{where}: state tree version {version} was written by a newer lockgate; this "
            f"one reads version {TREE_VERSION}"
        )
    reader = _Reader(memoryview(payload), 6, where)
    value = reader.value()
    count = reader.unpack(_U32)
    stream = bytes(reader.take(reader.unpack(_U64)))
    if reader.pos != len(payload):
        raise TreeFormatError(f"{where}: {len(payload) - reader.pos} bytes after the state tree")
    loader = _Loader(stream, count, where)
    if not reader.refs:
        return value
    return _resolve(value, loader, unpickle)


class _Ref:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Record:
    """A record whose fields hold pickled parts: built once they are resolved."""

    __slots__ = ("fields", "spec", "version")

    def __init__(self, spec: Any, version: int, fields: dict[str, Any]) -> None:
        self.spec = spec
        self.version = version
        self.fields = fields


def _has_refs(value: Any) -> bool:
    if type(value) in (_Ref, _Record):
        return True
    if type(value) is dict:
        return any(_has_refs(k) or _has_refs(v) for k, v in value.items())
    if type(value) in (list, tuple):
        return any(_has_refs(v) for v in value)
    return False


def _resolve(value: Any, loader: _Loader, unpickle: bool) -> Any:
    """``value`` with each pickled part loaded (``unpickle``, in file order: the tree is
    walked depth first in the order it was written) or a placeholder."""
    if type(value) is _Ref:
        return loader.value(value.index) if unpickle else PickledValue(loader, value.index)
    if type(value) is _Record:
        fields = {k: _resolve(v, loader, unpickle) for k, v in value.fields.items()}
        try:
            return value.spec.build(value.version, fields, loader.where)
        except RecordFormatError as e:
            raise TreeFormatError(str(e)) from e
    if type(value) is dict:
        return {
            _resolve(k, loader, unpickle): _resolve(v, loader, unpickle) for k, v in value.items()
        }
    if type(value) is list:
        return [_resolve(v, loader, unpickle) for v in value]
    if type(value) is tuple:
        return tuple(_resolve(v, loader, unpickle) for v in value)
    return value


class _Reader:
    __slots__ = ("data", "pos", "refs", "where")

    def __init__(self, data: memoryview, pos: int, where: str) -> None:
        self.data = data
        self.pos = pos
        self.where = where
        self.refs = 0

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if end > len(self.data):
            raise TreeFormatError(f"{self.where}: the state tree is truncated")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def unpack(self, fmt: struct.Struct) -> Any:
        return fmt.unpack(self.take(fmt.size))[0]

    def value(self) -> Any:  # noqa: C901 - one branch per tag
        tag = bytes(self.take(1))
        if tag == b"N":
            return None
        if tag == b"T":
            return True
        if tag == b"F":
            return False
        if tag == b"i":
            return self.unpack(_I64)
        if tag == b"I":
            return int(bytes(self.take(self.unpack(_U32))).decode("ascii"))
        if tag == b"f":
            return self.unpack(_F64)
        if tag == b"s":
            return bytes(self.take(self.unpack(_U32))).decode("utf-8", "surrogatepass")
        if tag == b"b":
            return bytes(self.take(self.unpack(_U64)))
        if tag in (b"l", b"t"):
            items = [self.value() for _ in range(self.unpack(_U32))]
            return items if tag == b"l" else tuple(items)
        if tag == b"d":
            count = self.unpack(_U32)
            out = {}
            for _ in range(count):
                key = self.value()
                out[key] = self.value()
            return out
        if tag == b"P":
            self.refs += 1
            return _Ref(self.unpack(_U32))
        if tag == b"R":
            return self.record()
        if tag == b"A":
            return self.array()
        if tag == b"a":
            is_schema = self.take(1)[0]
            schema = pa.ipc.read_schema(pa.py_buffer(bytes(self.take(self.unpack(_U64)))))
            return schema if is_schema else schema.field(0).type
        if tag == b"B":
            return self.arrow_data()
        if tag == b"p":
            data = bytes(self.take(self.unpack(_U64)))
            try:
                return _PlainUnpickler(io.BytesIO(data)).load()
            except TreeFormatError:
                raise
            except Exception as e:
                raise TreeFormatError(f"{self.where}: a broken plain-data part: {e}") from e
        raise TreeFormatError(f"{self.where}: unknown tag {tag!r} at byte {self.pos - 1}")

    def record(self) -> Any:
        name = self.value()
        version = self.unpack(_U16)
        fields = self.value()
        if type(name) is not str or type(fields) is not dict:
            raise TreeFormatError(f"{self.where}: a broken state record at byte {self.pos}")
        try:
            spec = spec_named(name, self.where)
        except RecordFormatError as e:
            raise TreeFormatError(str(e)) from e
        if _has_refs(fields):
            return _Record(spec, version, fields)  # built once its pickled parts resolve
        try:
            return spec.build(version, fields, self.where)
        except RecordFormatError as e:
            raise TreeFormatError(str(e)) from e

    def arrow_data(self) -> pa.RecordBatch | pa.Table:
        is_table = self.take(1)[0]
        data = bytes(self.take(self.unpack(_U64)))
        try:
            reader = pa.ipc.open_stream(pa.py_buffer(data))
            return reader.read_all() if is_table else reader.read_next_batch()
        except (pa.ArrowException, StopIteration) as e:
            raise TreeFormatError(f"{self.where}: broken Arrow data: {e}") from e

    def array(self) -> np.ndarray:
        dtype = np.dtype(self.value())
        if dtype.kind not in ARRAY_KINDS or dtype.fields is not None:
            raise TreeFormatError(f"{self.where}: an array of dtype {dtype} in a state tree")
        shape = tuple(self.unpack(_U64) for _ in range(self.take(1)[0]))
        data = self.take(self.unpack(_U64))
        count = 1
        for n in shape:
            count *= n
        if count * dtype.itemsize != len(data):
            raise TreeFormatError(f"{self.where}: an array of shape {shape} has {len(data)} bytes")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


__all__ = [
    "TREE_VERSION",
    "PickledValue",
    "TreeFormatError",
    "decode_tree",
    "encode_tree",
    "has_pickles",
    "is_tree",
]

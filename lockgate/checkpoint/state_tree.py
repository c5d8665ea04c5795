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
P     uint32 index of a pickled part                               anything else
====  ===========================================================  ==================

then the pickled parts: uint32 count, uint64 length and one cloudpickle stream of
``count`` pickles made by one pickler (its memo shared), loaded in order by one
unpickler: objects two parts share are shared again, as in one pickle.

The encoder walks dicts, lists and tuples of at most :data:`WALK_LIMIT` items whose
items are plain (None, bool, int, float, str, bytes, list, tuple, dict), to at most
:data:`MAX_DEPTH` levels; any other container (one holding an object, a large one) is
one ``P`` blob, pickled as a whole with cloudpickle (so a large untyped state costs what
it cost before, and objects shared inside it stay shared). Typed keyed state is bytes
(Arrow IPC), so a state made only of typed state and plain values has no ``P`` at all.

:func:`decode_tree` with ``unpickle=False`` returns :class:`PickledValue` placeholders
for the ``P`` blobs: reading such a tree runs no code, whatever the file says. Files
written before this format (the payload is one pickle) decode to one placeholder.
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

import cloudpickle

TREE_MAGIC = b"LGST"
#: the version of the tree layout this lockgate writes and reads
TREE_VERSION = 1
#: containers with more items than this are pickled whole
WALK_LIMIT = 64
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
            self._unpickler = pickle.Unpickler(io.BytesIO(self.stream))
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
    elif t in (list, tuple) and _walkable(value, depth):
        out += b"l" if t is list else b"t"
        out += _U32.pack(len(value))
        for item in value:
            _encode(item, out, depth + 1, pickles)
    elif t is dict and _walkable(value, depth):
        out += b"d"
        out += _U32.pack(len(value))
        for k, v in value.items():
            _encode(k, out, depth + 1, pickles)
            _encode(v, out, depth + 1, pickles)
    else:
        out += b"P"
        out += _U32.pack(pickles.add(value))


_PLAIN = (type(None), bool, int, float, str, bytes, list, tuple, dict)


def _walkable(container: Any, depth: int) -> bool:
    """Whether to walk ``container``: small, not too deep, and holding only plain values
    and containers. A container with an object in it is pickled whole, so objects it
    shares among its items stay shared after a restore."""
    if len(container) > WALK_LIMIT or depth >= MAX_DEPTH:
        return False
    items = container.items() if type(container) is dict else ((None, v) for v in container)
    return all(type(k) in _PLAIN and type(v) in _PLAIN for k, v in items)


# -- decode ------------------------------------------------------------------------------------
def is_tree(payload: bytes) -> bool:
    return payload[:4] == TREE_MAGIC


def decode_tree(payload: bytes, *, unpickle: bool = True, where: str = "state") -> Any:
    """The value of a state file's payload. ``unpickle=False``: pickled parts stay
    :class:`PickledValue` placeholders (nothing runs); a payload of the format before
    the tree (one pickle) is then one placeholder."""
    if not is_tree(payload):
        return pickle.loads(payload) if unpickle else PickledValue.whole(payload)
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


def _resolve(value: Any, loader: _Loader, unpickle: bool) -> Any:
    """``value`` with each pickled part loaded (``unpickle``, in file order: the tree is
    walked depth first in the order it was written) or a placeholder."""
    if type(value) is _Ref:
        return loader.value(value.index) if unpickle else PickledValue(loader, value.index)
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
        raise TreeFormatError(f"{self.where}: unknown tag {tag!r} at byte {self.pos - 1}")


__all__ = [
    "TREE_VERSION",
    "PickledValue",
    "TreeFormatError",
    "decode_tree",
    "encode_tree",
    "has_pickles",
    "is_tree",
]

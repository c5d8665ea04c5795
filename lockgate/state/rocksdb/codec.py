"""How the RocksDB keyed state backend lays out its rows (keys and values as bytes).

Row key::

    key group (2 bytes, big-endian) | state id (2 bytes, big-endian) | encoded key

so the rows of a key-group range are one contiguous range of the database
(rescaling copies or clips ranges, M-T4). The value is the pickled *stored form*
of :mod:`lockgate.state.handles` (``pickle``, or ``cloudpickle`` for objects of
classes defined in a driver script).

Key encoding (:func:`encode_key`) is deterministic, so equal keys always give the
same bytes, and decodable (:func:`decode_key`): a type tag, then ``None``, ``bool``,
``int`` (two's complement, big-endian), ``float`` (IEEE-754; ``-0.0`` is ``0.0``),
``str`` (UTF-8), ``bytes``, ``tuple`` (each element length-prefixed) or, for any
other type, its pickle (which must then be deterministic for equal keys, as it is
for dates, datetimes and decimals). Unlike a dict, keys of different types never
match (``1``, ``1.0`` and ``True`` are three keys), as in Flink where the
serialized key is the identity.

:func:`key_group_of` is a scalar version of the stable key hash of
:mod:`lockgate.core.key_hash` for the common key types (the vectorized one costs
tens of microseconds for one key); other types use
:func:`~lockgate.core.key_groups.key_group_for`.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

import cloudpickle
import numpy as np

from ...core.key_groups import key_group_for
from ...core.moved_modules import loads as moved_loads
from ...errors import UnsupportedKeyError

#: the big-endian uint16 of a key group or a state id
U16 = struct.Struct(">H")
#: bytes before the encoded key in a row key: key group + state id
ROW_PREFIX = 4
#: state ids are 1..MAX_STATE_ID
MAX_STATE_ID = 0xFFFF

_NONE, _FALSE, _TRUE, _INT, _FLOAT, _STR, _BYTES, _TUPLE, _PICKLE = (
    b"\x00",
    b"\x01",
    b"\x02",
    b"\x03",
    b"\x04",
    b"\x05",
    b"\x06",
    b"\x07",
    b"\x7f",
)
_DOUBLE = struct.Struct(">d")


# -- keys ---------------------------------------------------------------------------------------


def encode_key(key: Any) -> bytes:
    """The deterministic bytes of ``key`` (see the module docstring)."""
    t = type(key)
    if t is str:
        return _STR + key.encode("utf-8", "surrogatepass")
    if t is int:
        return _INT + key.to_bytes((key.bit_length() + 8) // 8, "big", signed=True)
    if t is tuple:
        parts = [encode_key(k) for k in key]
        return _TUPLE + b"".join(_varint(len(p)) + p for p in parts)
    if t is bytes:
        return _BYTES + key
    if key is None:
        return _NONE
    if t is bool:
        return _TRUE if key else _FALSE
    if t is float:
        return _FLOAT + _DOUBLE.pack(0.0 if key == 0.0 else key)
    if isinstance(key, np.integer):
        return encode_key(int(key))
    if isinstance(key, np.floating):
        return encode_key(float(key))
    try:
        return _PICKLE + pickle.dumps(key, protocol=5)
    except Exception as e:
        raise UnsupportedKeyError(
            f"the RocksDB state backend cannot serialize the key {key!r} of type "
            f"{t.__name__}: {e}; key by an int, float, str, bytes, bool, None, a date or "
            "a tuple of these"
        ) from e


def decode_key(data: bytes) -> Any:
    """The key :func:`encode_key` encoded as ``data``."""
    key, end = _decode(data, 0, len(data))
    if end != len(data):
        raise ValueError(f"corrupt encoded key {data!r}: {len(data) - end} bytes left over")
    return key


def _decode(data: bytes, start: int, end: int) -> tuple[Any, int]:
    tag = data[start : start + 1]
    body = start + 1
    if tag == _STR:
        return data[body:end].decode("utf-8", "surrogatepass"), end
    if tag == _INT:
        return int.from_bytes(data[body:end], "big", signed=True), end
    if tag == _TUPLE:
        items = []
        pos = body
        while pos < end:
            length, pos = _read_varint(data, pos)
            item, _ = _decode(data, pos, pos + length)
            items.append(item)
            pos += length
        return tuple(items), end
    if tag == _BYTES:
        return data[body:end], end
    if tag == _NONE:
        return None, body
    if tag == _FALSE:
        return False, body
    if tag == _TRUE:
        return True, body
    if tag == _FLOAT:
        return _DOUBLE.unpack_from(data, body)[0], body + 8
    if tag == _PICKLE:
        return loads(data[body:end]), end
    raise ValueError(f"corrupt encoded key: unknown type tag {tag!r}")


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


# -- values -------------------------------------------------------------------------------------


def dumps(stored: Any) -> bytes:
    """The bytes of a stored value: ``pickle``, or ``cloudpickle`` when plain pickle
    cannot reference the value's class (a class defined in a driver script)."""
    try:
        return pickle.dumps(stored, protocol=5)
    except (pickle.PicklingError, AttributeError, TypeError):
        data: bytes = cloudpickle.dumps(stored, protocol=5)
        return data


def loads(data: bytes) -> Any:
    """A stored value (or key part) from its bytes: ``pickle.loads``, and, for a value
    written by an earlier lockgate whose pickle names a class of a module that has moved
    since, the same through :mod:`lockgate.core.moved_modules`."""
    try:
        return pickle.loads(data)
    except (ModuleNotFoundError, AttributeError):
        return moved_loads(data)


# -- row keys -----------------------------------------------------------------------------------


def state_id_bytes(state_id: int) -> bytes:
    return U16.pack(state_id)


def key_group_bytes(key_group: int) -> bytes:
    return U16.pack(key_group)


def key_group_bound(key_group: int) -> bytes:
    """The smallest row key of ``key_group`` (a range's exclusive end for the one before);
    ``key_group`` may be the max parallelism (the end of all rows)."""
    return U16.pack(key_group) if key_group <= 0xFFFF else b"\xff\xff\xff"


def split_row(row: bytes) -> tuple[int, int, bytes]:
    """``(key group, state id, encoded key)`` of a row key."""
    return (row[0] << 8) | row[1], (row[2] << 8) | row[3], row[ROW_PREFIX:]


# -- key groups ---------------------------------------------------------------------------------

_M64 = (1 << 64) - 1
_M1 = 0xFF51AFD7ED558CCD
_M2 = 0xC4CEB9FE1A85EC53
_PRIME = 0x100000001B3
_TAG_STR = 0x9E3779B97F4A7C15
_TAG_FLOAT = 0x2545F4914F6CDD1D
_TAG_TUPLE = 0x27D4EB2F165667C5
_NULL_HASH = 0x61C8864680B583EB
_TAG_INT = 0x165667B19E3779F9
_FLOAT_BITS = struct.Struct("<d")
_U64 = struct.Struct("<Q")


def _fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * _M1) & _M64
    h ^= h >> 33
    h = (h * _M2) & _M64
    return h ^ (h >> 33)


def _hash_bytes(data: bytes) -> int:
    h = 0
    for b in data:
        h = (h * _PRIME + b + 1) & _M64
    return _fmix(h ^ (((len(data) + 1) * _TAG_STR) & _M64))


def _scalar_hash(key: Any) -> int | None:
    """The stable hash of ``key``, or None for a type the scalar path does not cover."""
    t = type(key)
    if t is int or t is bool:
        if -(1 << 63) <= key < (1 << 64):
            return _fmix((key & _M64) ^ _TAG_INT)
        return None
    if t is str:
        try:
            return _hash_bytes(key.encode("utf-8"))
        except UnicodeEncodeError:
            return None
    if t is bytes:
        return _hash_bytes(key)
    if key is None:
        return _NULL_HASH
    if t is float:
        bits = _U64.unpack(_FLOAT_BITS.pack(0.0 if key == 0.0 else key))[0]
        return _fmix(bits ^ _TAG_FLOAT)
    if t is tuple and key:
        h = _TAG_TUPLE
        for part in key:
            p = _scalar_hash(part)
            if p is None:
                return None
            h = _fmix((h * 31 + p) & _M64)
        return h
    return None


def key_group_of(key: Any, max_parallelism: int) -> int:
    """The key group of ``key``: the same as
    :func:`~lockgate.core.key_groups.key_group_for`, faster for one key."""
    h = _scalar_hash(key)
    if h is None:
        return key_group_for(key, max_parallelism)
    return h % max_parallelism

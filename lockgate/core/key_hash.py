"""A stable, vectorized hash of keys.

Python's ``hash()`` of a string differs between processes, so it cannot route
keys between Spark executors. This hash depends only on the key's value:

* integers (and bools) - murmur3's 64-bit finalizer of the two's-complement value;
* floats - the finalizer of the IEEE-754 bits (``-0.0`` and ``0.0`` are one key, and
  every NaN is one key, whatever its sign and payload bits, as Java's
  ``Double.equals`` has it: see :func:`canonical_key` for keyed state);
* strings and bytes - a polynomial hash of the UTF-8 bytes, finalized;
* ``None`` - a constant;
* tuples - the component hashes combined in order;
* other values - through their Arrow representation (dates, times, decimals).

Columns (``pyarrow`` arrays) and lists of Python keys hash to the same values,
so ``key_by("k")`` and ``key_by(lambda r: r["k"])`` route a key alike. Arrays
are hashed with numpy, never key by key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import UnsupportedKeyError

_U64 = np.uint64
_M1 = _U64(0xFF51AFD7ED558CCD)
_M2 = _U64(0xC4CEB9FE1A85EC53)
_PRIME = _U64(0x100000001B3)
_TAG_STR = _U64(0x9E3779B97F4A7C15)
_TAG_FLOAT = _U64(0x2545F4914F6CDD1D)
_TAG_TUPLE = _U64(0x27D4EB2F165667C5)
_NULL_HASH = _U64(0x61C8864680B583EB)
_TAG_INT = _U64(0x165667B19E3779F9)
_S33 = _U64(33)

_pow_table = np.ones(1, dtype=np.uint64)


def _powers(n: int) -> np.ndarray:
    global _pow_table
    if len(_pow_table) < n:
        size = max(n, 2 * len(_pow_table), 256)
        table = np.empty(size, dtype=np.uint64)
        table[0] = 1
        with np.errstate(over="ignore"):
            table[1:] = np.cumprod(np.full(size - 1, _PRIME, dtype=np.uint64))
        _pow_table = table
    return _pow_table


def fmix64(h: np.ndarray) -> np.ndarray:
    """murmur3's finalizer, elementwise on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        h = h ^ (h >> _S33)
        h = h * _M1
        h = h ^ (h >> _S33)
        h = h * _M2
        h = h ^ (h >> _S33)
    return h


def _hash_int64(values: np.ndarray) -> np.ndarray:
    return fmix64(values.astype(np.int64, copy=False).view(np.uint64) ^ _TAG_INT)


def _hash_float64(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.float64, copy=True)
    v[v == 0.0] = 0.0  # -0.0 and 0.0 are one key
    v[np.isnan(v)] = np.nan  # and so is every NaN (sign and payload bits differ)
    with np.errstate(over="ignore"):
        return fmix64(v.view(np.uint64) ^ _TAG_FLOAT)


def _hash_binary_array(arr: pa.Array) -> np.ndarray:
    """Polynomial hash of each value's bytes (``string``/``binary``, 32-bit offsets)."""
    n = len(arr)
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar("", type=arr.type))
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=arr.offset + n + 1)[arr.offset :]
    base = int(offsets[0])
    total = int(offsets[-1]) - base
    lengths = np.diff(offsets).astype(np.int64)
    out = np.zeros(n, dtype=np.uint64)
    if total > 0:
        data = np.frombuffer(bufs[2], dtype=np.uint8, count=base + total)[base:]
        starts = (offsets[:-1] - base).astype(np.int64)
        by_length = _polynomials_by_length(data, starts, lengths, total)
        out = by_length if by_length is not None else _polynomials(data, starts, lengths, total)
    with np.errstate(over="ignore"):
        return fmix64(out ^ ((lengths.astype(np.uint64) + _U64(1)) * _TAG_STR))


#: values of one length are hashed as rows of a matrix (one matrix product) when the
#: column holds at least this many bytes and at most this many distinct lengths
_BY_LENGTH_MIN_BYTES = 2048
_BY_LENGTH_MAX_GROUPS = 8


def _polynomials(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, total: int
) -> np.ndarray:
    """The sum over each value's bytes of ``(byte + 1) * PRIME ** (bytes after it)``,
    modulo 2**64: a pass over every byte with its value's index."""
    n = len(lengths)
    out = np.zeros(n, dtype=np.uint64)
    string_index = np.repeat(np.arange(n), lengths)
    ends = starts + lengths
    pos_from_end = ends[string_index] - 1 - np.arange(total)
    pows = _powers(int(lengths.max()))
    with np.errstate(over="ignore"):
        contrib = (data.astype(np.uint64) + _U64(1)) * pows[pos_from_end]
    nonempty = lengths > 0
    with np.errstate(over="ignore"):
        out[nonempty] = np.add.reduceat(contrib, starts[nonempty])
    return out


def _polynomials_by_length(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, total: int
) -> np.ndarray | None:
    """The same sums as :func:`_polynomials`, the values of each length taken as the rows
    of a ``(count, length)`` byte matrix times the powers ``PRIME ** (length-1) .. 1``
    (plus the sum of those powers, for the ``+ 1`` of each byte): about ten times
    faster on long keys (a payload of a kilobyte), the same values to the bit. None
    when the column is small or has many distinct lengths (the general pass is then as
    fast)."""
    if total < _BY_LENGTH_MIN_BYTES:
        return None
    distinct = np.unique(lengths)
    if len(distinct) > _BY_LENGTH_MAX_GROUPS:
        return None
    n = len(lengths)
    pows = _powers(int(distinct[-1]))
    out = np.zeros(n, dtype=np.uint64)
    for length in distinct.tolist():
        if length == 0:
            continue
        rev = pows[length - 1 :: -1] if length > 1 else pows[:1]
        if len(distinct) == 1:  # every value this long: the bytes are the matrix
            rows = None
            matrix = data[: n * length].reshape(n, length)
        else:
            rows = np.flatnonzero(lengths == length)
            matrix = data[starts[rows][:, None] + np.arange(length)]
        with np.errstate(over="ignore"):
            sums = matrix.astype(np.uint64) @ rev + rev.sum(dtype=np.uint64)
        if rows is None:
            out = sums
        else:
            out[rows] = sums
    return out


def _with_nulls(arr: pa.Array, hashes: np.ndarray) -> np.ndarray:
    if arr.null_count:
        mask = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        hashes = hashes.copy()
        hashes[mask] = _NULL_HASH
    return hashes


def hash_array(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Stable 64-bit hashes of an Arrow column's values."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if pa.types.is_null(t):
        return np.full(len(arr), _NULL_HASH, dtype=np.uint64)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        if pa.types.is_uint64(t):
            values = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False).view(np.int64)
        else:
            values = pc.fill_null(pc.cast(arr, pa.int64()), 0).to_numpy(zero_copy_only=False)
        return _with_nulls(arr, _hash_int64(values))
    if pa.types.is_floating(t):
        values = pc.fill_null(pc.cast(arr, pa.float64()), 0.0).to_numpy(zero_copy_only=False)
        return _with_nulls(arr, _hash_float64(values))
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return _with_nulls(arr, _hash_binary_array(arr))
    if pa.types.is_large_string(t):
        return hash_array(pc.cast(arr, pa.string()))
    if pa.types.is_large_binary(t):
        return hash_array(pc.cast(arr, pa.binary()))
    if pa.types.is_struct(t):
        fields = [arr.field(i) for i in range(t.num_fields)]
        return _with_nulls(arr, _combine([hash_array(f) for f in fields]))
    if pa.types.is_decimal(t):
        return _with_nulls(arr, hash_array(pc.cast(arr, pa.string())))
    if pa.types.is_temporal(t):
        width = getattr(t, "bit_width", 64)
        physical = arr.view(pa.int32() if width == 32 else pa.int64())
        return _with_nulls(arr, hash_array(physical))
    raise UnsupportedKeyError(
        f"cannot hash keys of Arrow type {t}; key by a column of integers, floats, "
        "strings, bytes, booleans, dates/timestamps or a struct of these"
    )


def _combine(parts: list[np.ndarray]) -> np.ndarray:
    h = np.full(len(parts[0]) if parts else 0, _TAG_TUPLE, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for p in parts:
            h = fmix64(h * _U64(31) + p)
    return h


#: the one NaN object keyed state holds for every NaN key (see :func:`canonical_key`)
CANONICAL_NAN = float("nan")

#: key types that never hold a NaN: lists of only these are returned as they are
_NAN_FREE = frozenset({int, str, bytes, bool, type(None)})


def canonical_key(key: Any) -> Any:
    """``key`` with every float NaN in it (also inside tuples, also numpy floats)
    replaced by :data:`CANONICAL_NAN`. ``nan != nan`` in Python, and a dict tells two
    NaN objects apart, so without this each NaN record would get a state entry of its
    own; Flink (Java's ``Double.equals``) treats all NaNs as one key, and so does this."""
    t = type(key)
    if t is float or isinstance(key, np.floating):
        return CANONICAL_NAN if math.isnan(key) else key
    if isinstance(key, tuple) and any(type(k) not in _NAN_FREE for k in key):
        parts = tuple(canonical_key(k) for k in key)
        if any(p is not k for p, k in zip(parts, key)):
            return parts if t is tuple or not hasattr(t, "_make") else t._make(parts)
    return key


def canonical_keys(keys: list[Any]) -> list[Any]:
    """:func:`canonical_key` of each key; ``keys`` itself when none can hold a NaN
    (one pass over the key types, in C)."""
    if _NAN_FREE.issuperset(map(type, keys)):
        return keys
    return [canonical_key(k) for k in keys]


def hash_keys(keys: Sequence[Any]) -> np.ndarray:
    """Stable hashes of a list of Python keys (see the module docstring)."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    kinds = {type(k) for k in keys}
    if len(kinds) == 1:
        return _hash_uniform(keys, next(iter(kinds)))
    # Mixed key types: hash each type's keys together, then scatter back.
    out = np.empty(n, dtype=np.uint64)
    by_kind: dict[type, list[int]] = {}
    for i, k in enumerate(keys):
        by_kind.setdefault(type(k), []).append(i)
    for kind, idx in by_kind.items():
        out[np.asarray(idx)] = _hash_uniform([keys[i] for i in idx], kind)
    return out


def _hash_uniform(keys: Sequence[Any], kind: type) -> np.ndarray:
    if kind is int or kind is bool or issubclass(kind, np.integer):
        try:
            return _hash_int64(np.asarray(keys, dtype=np.int64))
        except OverflowError:
            return np.array([_hash_one_int(int(k)) for k in keys], dtype=np.uint64)
    if kind is str:
        try:
            return _hash_binary_array(pa.array(keys, type=pa.string()))
        except (UnicodeEncodeError, pa.ArrowInvalid) as e:
            raise UnsupportedKeyError(
                f"a string key cannot be encoded as UTF-8 ({e}); clean the key (e.g. "
                "key.encode('utf-8', 'replace').decode()) in the key selector"
            ) from e
    if kind is bytes:
        return _hash_binary_array(pa.array(keys, type=pa.binary()))
    if kind is float or issubclass(kind, np.floating):
        return _hash_float64(np.asarray(keys, dtype=np.float64))
    if kind is type(None):
        return np.full(len(keys), _NULL_HASH, dtype=np.uint64)
    if issubclass(kind, tuple):
        width = len(keys[0])
        if any(len(k) != width for k in keys):
            return np.concatenate([_hash_uniform([k], kind) for k in keys])
        return _combine([hash_keys([k[i] for k in keys]) for i in range(width)])
    try:
        arr = pa.array(list(keys))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
        raise UnsupportedKeyError(
            f"key_by produced a key of type {kind.__name__} ({keys[0]!r}) that lockgate cannot "
            "hash stably across processes; return an int, float, str, bytes, bool, None, a "
            "date/datetime, or a tuple of these from the key selector"
        ) from e
    return hash_array(arr)


def _hash_one_int(k: int) -> int:
    """Ints beyond int64: the uint64 range hashes like a uint64 column, larger ones by bytes."""
    if -(2**63) <= k < 2**64:
        v = np.array([k], dtype=np.uint64 if k >= 2**63 else np.int64).view(np.int64)
        return int(_hash_int64(v)[0])
    return _hash_big_int(k)


def _hash_big_int(k: int) -> int:
    b = k.to_bytes((k.bit_length() + 8) // 8, "little", signed=True)
    return int(_hash_binary_array(pa.array([b], type=pa.binary()))[0])

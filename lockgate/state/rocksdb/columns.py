"""The columnar cache of the RocksDB keyed state backend: the entries of one state with
int keys held in numpy arrays, for :meth:`ValueState.values_of` /
:meth:`ValueState.update_all` (the many-keys calls of vectorized operators).

The per-key write-back cache (:mod:`lockgate.state.rocksdb.cache`) is a Python dict:
a batch of keys costs one interpreter step and one cache miss per key per dict access
(100-350 ns each over a million keys, four accesses per update counting the write-back).
A :class:`ColumnCache` keeps the same entries as arrays indexed by position
(:mod:`lockgate.state.int64_positions`): a batch's lookups, reads and writes are a few
numpy operations, and its write-back builds the dirty rows at once
(:mod:`lockgate.state.rocksdb.rows`).

Modes: a state's table caches either per key (the dict) or in columns, never both. The
first many-keys call whose keys are all ints (within int64) and, for writes, whose
values are ints, floats, strs, bytes, bools or None (immutable, so the cache can hand
the objects out) turns column mode on: the dict's dirty entries are written back and the
dict emptied. The first per-key call (``get``/``[key] = v``/``pop`` of a handle's
``value()``/``update()``/``clear()``, or a many-keys call that does not qualify) turns
it off the same way: dirty columns written back, the columns dropped. Either way the
database plus the cache is at every moment exactly the state the per-call path would
hold, and a snapshot, ``keys()``, ``entries()`` or a restore writes the dirty columns
back first (M-T3).

Bound: each state's columns hold at most ``cache_entries`` entries on their own (the
per-key dict's bound, checked apart from it; ``cached_entries()`` counts both); a column
cache that outgrows it after a call is written back and emptied whole (a batch's keys
are loaded again by the next call that needs them). Memory: 18 to 36 bytes an entry in
typed columns plus the index's 24 to 48 (:mod:`lockgate.state.int64_positions`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..int64_positions import Int64Positions
from .cache import Serialized, is_immutable
from .codec import dumps, loads
from .rows import number_values, pickled_floats, pickled_ints

_START = 1024
_DTYPES: dict[type, Any] = {int: np.int64, float: np.float64}

#: ``keys -> (the keys in row order, their rows' bytes or None)``: the database read
Loader = Callable[[np.ndarray], tuple[np.ndarray, list[bytes | None]]]
#: ``keys -> (their rows, the order that sorts the keys like the rows)``
RowMaker = Callable[[np.ndarray], tuple[list[bytes], np.ndarray]]


class ColumnCache:
    """``key -> (value, present, dirty)`` of one state as arrays by position (task
    thread only). ``values`` is typed while every cached value is an int within int64
    (``int64``) or every one a float (``float64``), so reads and writes never touch
    Python objects; else objects (the value itself when immutable, else its
    :class:`~lockgate.state.rocksdb.cache.Serialized` pickle). ``present`` is False for
    a key without a row (its value slot is meaningless)."""

    __slots__ = ("_last", "_scratch", "dirty", "index", "kind", "present", "values")

    def __init__(self) -> None:
        self.index = Int64Positions()
        #: int, float or object: what ``values`` holds (None: nothing yet)
        self.kind: type | None = None
        self.values = np.empty(_START, dtype=object)
        self.present = np.zeros(_START, dtype=bool)
        self.dirty = np.zeros(_START, dtype=bool)
        #: the keys of the last lookup and their positions (a batch reads, then writes,
        #: the same keys: the second lookup is a comparison)
        self._last: tuple[np.ndarray, np.ndarray] | None = None
        self._scratch = np.zeros(0, dtype=np.int64)  # for _repeats

    def __len__(self) -> int:
        return len(self.index)

    # -- positions --------------------------------------------------------------------
    def _positions(self, keys: np.ndarray, load: Loader) -> np.ndarray:
        """The position of each key, the keys not cached yet read with ``load`` first."""
        last = self._last
        if last is not None and len(last[0]) == len(keys) and np.array_equal(last[0], keys):
            return last[1]
        positions = self.index.find(keys)
        missing = positions < 0
        if missing.any():
            ordered, raws = load(np.unique(keys[missing]))
            at = self._add(ordered)
            present = np.fromiter((r is not None for r in raws), dtype=bool, count=len(raws))
            self.present[at] = present
            if present.any():
                self._store(at[present], [loads_value(r) for r in raws if r is not None])
            positions[missing] = self.index.find(keys[missing])
        self._last = (keys.copy(), positions)  # a copy: the caller may reuse its array
        return positions

    def _add(self, keys: np.ndarray) -> np.ndarray:
        positions = self.index.add(keys)
        end = len(self.index)
        if end > len(self.values):
            size = len(self.values)
            while size < end:
                size *= 2
            self.values = _grown(self.values, size)
            self.present = _grown(self.present, size)
            self.dirty = _grown(self.dirty, size)
        self.present[positions] = False
        self.dirty[positions] = False
        return positions

    # -- values -----------------------------------------------------------------------
    def _store(self, positions: np.ndarray, values: Sequence[Any]) -> None:
        """Put ``values`` (Python objects, positions distinct) at ``positions``, keeping
        the column typed while they allow."""
        if not len(values):
            return
        kinds = set(map(type, values))
        if self.kind is None and len(kinds) == 1:
            (kind,) = kinds
            if kind in _DTYPES:
                self.kind = kind
                self.values = np.zeros(len(self.values), dtype=_DTYPES[kind])
        if self.kind is not object and self.kind is not None:
            if kinds <= {self.kind}:
                try:
                    self.values[positions] = np.fromiter(
                        values, dtype=self.values.dtype, count=len(values)
                    )
                    return
                except OverflowError:
                    pass
            self._to_objects()
        if self.kind is None:
            self.kind = object
        column = np.empty(len(values), dtype=object)
        column[:] = values
        self.values[positions] = column

    def _to_objects(self) -> None:
        """Hold objects from now on (a value of another kind arrived)."""
        n = len(self.index)
        objects = np.empty(len(self.values), dtype=object)
        if n:
            objects[:n] = self.values[:n].tolist()  # Python ints / floats
        self.values = objects
        self.kind = object

    def read(self, keys: np.ndarray, default: Any, load: Loader) -> list[Any]:
        """The value of each key (``default`` where it has none)."""
        positions = self._positions(keys, load)
        values: list[Any] = self.values[positions].tolist()
        present = self.present[positions]
        if not present.all():
            for i in np.flatnonzero(~present).tolist():
                values[i] = default
        if self.kind is object and Serialized in set(map(type, values)):
            for i, v in enumerate(values):
                if type(v) is Serialized:
                    values[i] = loads(v.raw)  # a fresh copy of a mutable value
        return values

    def write(self, keys: np.ndarray, stored: Sequence[Any]) -> None:
        """Set each key's value (a key given twice: its last value), marked dirty. A key
        not cached is not read: its new value replaces whatever its row holds."""
        positions = self._positions(keys, _no_load)
        if self._repeats(positions):
            positions, last = last_of_each(positions)
            stored = [stored[i] for i in last.tolist()]
        self._store(positions, stored)
        self.present[positions] = True
        self.dirty[positions] = True

    def _repeats(self, positions: np.ndarray) -> bool:
        """Whether a position occurs twice: each is stamped with its index, then read
        back; a repeated one reads back one stamp for two indices."""
        scratch = self._scratch
        if len(scratch) < len(self.values):
            scratch = self._scratch = np.zeros(len(self.values), dtype=np.int64)
        stamps = np.arange(len(positions), dtype=np.int64)
        scratch[positions] = stamps
        return bool((scratch[positions] != stamps).any())

    # -- write-back -------------------------------------------------------------------
    def dirty_rows(self, rows_of: RowMaker) -> tuple[list[bytes], list[bytes], np.ndarray]:
        """The rows and values to write for the dirty entries (all present: column mode
        never deletes) and their positions, for :meth:`mark_clean` once written."""
        dirty = np.flatnonzero(self.dirty[: len(self.index)])
        if not len(dirty):
            return [], [], dirty
        rows, order = rows_of(self.index.keys[dirty])
        positions = dirty[order]
        if self.kind is int:
            raws = pickled_ints(self.values[positions])
        elif self.kind is float:
            raws = pickled_floats(self.values[positions])
        else:
            values = self.values[positions].tolist()
            raws = number_values(values) or [
                v.raw if type(v) is Serialized else dumps(v) for v in values
            ]
        return rows, raws, dirty

    def mark_clean(self, positions: np.ndarray) -> None:
        """The entries at ``positions`` are in the database now."""
        self.dirty[positions] = False

    def has_dirty(self) -> bool:
        return bool(self.dirty[: len(self.index)].any())


def loads_value(raw: bytes) -> Any:
    """A row's value as a column holds it: the value when immutable, else its pickle."""
    value = loads(raw)
    return value if is_immutable(value) else Serialized(raw)


def _no_load(keys: np.ndarray) -> tuple[np.ndarray, list[bytes | None]]:
    """A write needs no old values: new keys start without a row."""
    return keys, [None] * len(keys)


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    new = np.zeros(size, dtype=array.dtype)
    new[: len(array)] = array
    return new


def int64_keys(keys: Any) -> np.ndarray | None:
    """``keys`` as an int64 array when every key is an exact int within int64 (or ``keys``
    is a numpy integer array within int64), else None (other keys take the per-key
    path)."""
    if isinstance(keys, np.ndarray):
        if keys.dtype.kind == "i":
            return keys.astype(np.int64, copy=False)
        if keys.dtype.kind == "u" and (not len(keys) or int(keys.max()) < 2**63):
            return keys.astype(np.int64)
        return None
    if not set(map(type, keys)) <= {int}:
        return None
    try:
        return np.fromiter(keys, dtype=np.int64, count=len(keys))
    except OverflowError:
        return None


def last_of_each(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` and, for each, the index of its last occurrence (the value
    that wins when a key is written twice in one call)."""
    reversed_keys = keys[::-1]
    distinct, first_in_reversed = np.unique(reversed_keys, return_index=True)
    return distinct, len(keys) - 1 - first_in_reversed

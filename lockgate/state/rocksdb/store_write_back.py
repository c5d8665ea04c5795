"""The write-back store of a RocksDB state table: the per-key cache of one state
(:mod:`lockgate.state.rocksdb.cache`), across input batches, or, with
``cache_entries=0``, for one batch scope (:mod:`lockgate.state.rocksdb.batch`). See
:mod:`lockgate.state.rocksdb.store` for the stores.

``entries`` maps a cache key (:func:`~lockgate.state.rocksdb.batch.cache_key`) to the
value itself when immutable, its :class:`~lockgate.state.rocksdb.cache.Serialized` bytes,
or ``ABSENT``. ``dirty``: the cache keys written since their last write-back, in write
order and possibly repeated (a list append costs less than a set insert into a large
table, which misses the CPU caches; repeats are dropped at write-back, and the list is
compacted when it grows past ``dirty_limit``).

Guarantees: a read of a cached entry never touches the database, a miss reads its row
once; writes and deletes stay in ``entries`` (dirty) until :meth:`WriteBackStore.write_dirty`
or an eviction writes them back, so the database plus the store is at every moment
exactly the state the per-call path would hold; a mutable value read is a fresh
deserialized copy. A many-keys call with at least 64 int keys (and, for writes, atom
values) turns column mode on when the cache is kept across batches: the dirty entries
are written back and the entries dropped first.
"""

from __future__ import annotations

import pickle
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import islice, repeat
from typing import Any, cast

import numpy as np
from rocksdict import WriteBatch

from ..ttl import TtlValue
from .batch import cache_key
from .cache import ABSENT, ATOMS, Serialized, is_immutable
from .codec import dumps, loads
from .columns import int64_keys
from .rows import number_values
from .store import StoreHost
from .store_columnar import ColumnarStore

_MISSING: Any = object()
_pickle_dumps = pickle.dumps
#: from this many int keys on, a write-back builds their rows at once (rocksdb.rows)
_BULK_ROWS = 256
_SELF_KEYED = frozenset({int, str})
#: many-keys calls with fewer keys stay per key (column mode pays off on batches)
_COLUMN_MIN_KEYS = 64
#: cache entries get_many cannot hand out as they are: not cached, absent or pickled
_SPECIAL = frozenset({object, type(ABSENT), Serialized})


def put_entry(batch: WriteBatch, row: bytes, v: Any) -> None:
    """Add the write of cache entry ``v`` at ``row`` to ``batch`` (a delete for
    ``ABSENT``)."""
    if v is ABSENT:
        batch.delete(row)
    elif type(v) is Serialized:
        batch.put(row, v.raw)
    else:
        batch.put(row, _pickle_dumps(v, 5))


class WriteBackStore:
    """``key -> stored`` of one state through its per-key cache (a
    :class:`~lockgate.state.rocksdb.store.TableStore`; see the module docstring).
    ``to_columns``: turns column mode on (the table's callback, called once this store
    is written back and empty) and returns the columnar store; None: no column mode.
    ``used``: read through the cache before (a batch scope prefetches the batch's
    missing keys of used states)."""

    __slots__ = ("_host", "_sid", "_to_columns", "dirty", "dirty_limit", "entries", "used")

    def __init__(
        self,
        host: StoreHost,
        state_id: bytes,
        dirty_limit: int,
        to_columns: Callable[[], ColumnarStore] | None,
    ) -> None:
        self._host = host
        self._sid = state_id
        self._to_columns = to_columns
        self.entries: dict[Any, Any] = {}
        self.dirty: list[Any] = []
        self.dirty_limit = dirty_limit
        self.used = False

    # -- per-key calls ------------------------------------------------------------------
    def _fetch(self, key: Any, ck: Any) -> Any:
        """Read ``key``'s row (not cached) into the cache; its new entry."""
        host = self._host
        entries = self.entries
        kg, enc = host.admit(key, ck)
        raw: bytes | None = host.db.get(kg + self._sid + enc)
        entry = ABSENT if raw is None else Serialized(raw)
        entries[ck] = entry
        self.used = True
        return entry

    def get(self, key: Any, default: Any = None) -> Any:
        entries = self.entries
        t = type(key)
        ck = key if t is int or t is str else cache_key(key)
        v = entries.get(ck, _MISSING)
        if v is _MISSING:
            v = self._fetch(key, ck)
        if type(v) is Serialized:
            value = loads(v.raw)
            if is_immutable(value):
                entries[ck] = value  # served as the object from now on
            return value
        return default if v is ABSENT else v

    def put(self, key: Any, stored: Any) -> None:
        entries = self.entries
        t = type(key)
        ck = key if t is int or t is str else cache_key(key)
        if ck not in entries:  # every cached key's row is known; this one's may not be
            self._host.admit(key, ck)
        ts = type(stored)
        if ts in ATOMS or ((ts is tuple or ts is TtlValue) and is_immutable(stored)):
            entries[ck] = stored
        else:
            try:
                entries[ck] = Serialized(_pickle_dumps(stored, 5))
            except (pickle.PicklingError, AttributeError, TypeError):
                entries[ck] = Serialized(dumps(stored))  # cloudpickle: a driver script's class
        dirty = self.dirty
        dirty.append(ck)
        if len(dirty) > self.dirty_limit:
            self.compact()

    def pop(self, key: Any, default: Any = None) -> Any:
        entries = self.entries
        t = type(key)
        ck = key if t is int or t is str else cache_key(key)
        v = entries.get(ck, _MISSING)
        if v is _MISSING:
            v = self._fetch(key, ck)
        if v is ABSENT:
            return default
        entries[ck] = ABSENT
        dirty = self.dirty
        dirty.append(ck)
        if len(dirty) > self.dirty_limit:
            self.compact()
        return loads(v.raw) if type(v) is Serialized else v

    def contains(self, key: Any) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    # -- many-keys calls ----------------------------------------------------------------
    def get_many(self, keys: Sequence[Any], default: Any = None) -> list[Any]:
        """One C-level cache lookup per key when the keys are ints or strs and the cache
        holds them (values read once already); the others are read one at a time as
        :meth:`get` does. Enough int keys turn column mode on (module docstring)."""
        if self._to_columns is not None and len(keys) >= _COLUMN_MIN_KEYS:
            ints = int64_keys(keys)
            if ints is not None:
                return self._columns_on().read_ints(ints, default)
        if isinstance(keys, np.ndarray):
            keys = keys.tolist()
        if not set(map(type, keys)) <= _SELF_KEYED:
            get = self.get
            return [get(k, default) for k in keys]
        values = list(map(self.entries.get, keys, repeat(_MISSING)))
        if set(map(type, values)) & _SPECIAL:
            get = self.get
            for i, v in enumerate(values):
                if type(v) in _SPECIAL:
                    values[i] = get(keys[i], default)
        return values

    def put_many(self, keys: Sequence[Any], stored: Sequence[Any]) -> None:
        """Into the cache at once when the keys are ints or strs and the values are ints,
        floats, strs, bytes, bools or None; else one :meth:`put` per key. Enough int keys
        with such values turn column mode on (module docstring)."""
        kinds = set(map(type, stored))
        if kinds <= ATOMS and self._to_columns is not None and len(keys) >= _COLUMN_MIN_KEYS:
            ints = int64_keys(keys)
            if ints is not None:
                self._columns_on().write_ints(ints, stored)
                return
        if isinstance(keys, np.ndarray):
            keys = keys.tolist()
        if not set(map(type, keys)) <= _SELF_KEYED or not kinds <= ATOMS:
            put = self.put
            for k, v in zip(keys, stored):
                put(k, v)
            return
        host = self._host
        if not host.in_batch_scope:  # outside a batch scope the bound holds per store
            host.make_room(len(keys))
        self.entries.update(zip(keys, stored))
        dirty = self.dirty
        dirty.extend(keys)
        if len(dirty) > self.dirty_limit:
            self.compact()

    def _columns_on(self) -> ColumnarStore:
        """Column mode on: the dirty entries written back, the entries dropped."""
        if self.dirty:
            batch = WriteBatch(raw_mode=True)
            self.write_entries(batch, dict.fromkeys(self.dirty))
            self._host.db.write(batch)
            self.dirty = []
        entries = self.entries
        if entries:
            self.entries = {}
            self._host.forget_odd([ck for ck in entries if type(ck) is tuple])
        self.used = False
        assert self._to_columns is not None
        return self._to_columns()

    # -- cache upkeep (the backend's) ---------------------------------------------------
    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        """Forget every entry, dirty or not (after a write-back, or with the database)."""
        self.entries = {}
        self.dirty = []

    def compact(self) -> None:
        """Drop the repeats from the dirty list (it holds at most the cached keys)."""
        self.dirty = list(dict.fromkeys(self.dirty))

    def prefetch(self, cks: list[Any], parts: dict[Any, tuple[bytes, bytes]]) -> None:
        """Read the rows of ``cks`` (their row parts in ``parts``) into the cache with one
        multi-get."""
        if not cks:
            return
        sid = self._sid
        rows_: list[Any] = [kg + sid + enc for kg, enc in (parts[ck] for ck in cks)]
        raws = cast(list[bytes | None], self._host.db.get(rows_))
        entries = self.entries
        for ck, raw in zip(cks, raws):
            entries[ck] = ABSENT if raw is None else Serialized(raw)

    def oldest(self, n: int) -> list[Any]:
        """The ``n`` oldest cache keys (insertion order)."""
        return list(islice(self.entries, n))

    def dirty_among(self, cks: list[Any]) -> list[Any]:
        """The dirty cache keys of ``cks``, in their order."""
        dirty = set(self.dirty)
        return [ck for ck in cks if ck in dirty]

    def forget(self, cks: list[Any]) -> list[Any]:
        """Drop the entries ``cks`` (written back before when dirty); the tuple cache keys
        among them (whose row parts the backend may forget)."""
        entries = self.entries
        odd: list[Any] = []
        for ck in cks:
            del entries[ck]
            if type(ck) is tuple:
                odd.append(ck)
        self.dirty = [ck for ck in dict.fromkeys(self.dirty) if ck in entries]
        return odd

    # -- write-back ---------------------------------------------------------------------
    def has_dirty(self) -> bool:
        return bool(self.dirty)

    def write_dirty(self, batch: WriteBatch) -> Callable[[], None]:
        self.write_entries(batch, dict.fromkeys(self.dirty))
        return self._mark_clean

    def _mark_clean(self) -> None:
        self.dirty = []

    def write_entries(self, batch: WriteBatch, cks: Iterable[Any]) -> None:
        """Add the rows of the cached entries ``cks`` to ``batch``: the int keys' rows
        built at once, in row order (:mod:`lockgate.state.rocksdb.rows`), the others one
        at a time."""
        cks = list(cks)
        only_ints = set(map(type, cks)) == {int}
        ints = cks if only_ints else [ck for ck in cks if type(ck) is int]
        if len(ints) >= _BULK_ROWS and self._write_ints(batch, ints):
            cks = [] if only_ints else [ck for ck in cks if type(ck) is not int]
        if not cks:
            return
        entries = self.entries
        for ck, row in zip(cks, self._host.rows_of(cks, self._sid)):
            put_entry(batch, row, entries[ck])

    def _write_ints(self, batch: WriteBatch, ints: list[int]) -> bool:
        """Add the rows of the int cache keys ``ints`` to ``batch`` in row order, their rows
        and (all ints or all floats) values built at once; False, nothing added, when a
        key is outside int64 (the caller writes them one at a time)."""
        try:
            keys = np.fromiter(ints, dtype=np.int64, count=len(ints))
        except OverflowError:
            return False
        rows, order = self._host.rows_of_ints(keys, self._sid)
        entries = self.entries
        values = list(map(entries.__getitem__, keys[order].tolist()))
        raws = number_values(values)
        if raws is None:
            for row, v in zip(rows, values):
                put_entry(batch, row, v)
        else:
            deque(map(batch.put, rows, raws), maxlen=0)
        return True

"""The state table of the RocksDB keyed state backend: ``key -> stored`` of one state,
what the handles of :mod:`lockgate.state.handles` use (``get``, ``[key] = stored``,
``pop``, ``in``, and the many-keys ``get_many`` / ``put_many``).

A table hands every call to its active store (:mod:`lockgate.state.rocksdb.store`):
the direct store (``cache_entries=0`` outside batch scopes), its write-back store, or,
in column mode, its columnar store. Both the direct and the write-back store are made
with the table; which one is active at first follows the backend's ``cache_entries``,
and the backend switches it only when it opens or closes a batch scope without a cache
across batches (:meth:`RocksDBStateTable.open_batch_cache` /
:meth:`RocksDBStateTable.close_batch_cache`) or drops the cache
(:meth:`RocksDBStateTable.drop_cache`). Column mode goes on and off through the stores'
callbacks (:meth:`RocksDBStateTable.enter_columns` /
:meth:`RocksDBStateTable.leave_columns`). Mutable values read are deserialized copies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .store import StoreHost, TableStore
from .store_columnar import ColumnarStore
from .store_direct import DirectStore
from .store_write_back import WriteBackStore


class RocksDBStateTable:
    """``key -> stored`` of one state, over the backend's database (see the module
    docstring). ``state_id``: the state's id as row key bytes (2 bytes). ``cache``: the
    per-key write-back store (with ``cache_entries=0`` active inside batch scopes
    only); ``columns``: the columnar store while in column mode, else None; ``store``:
    the active one.

    ``get``, ``pop``, ``get_many`` and ``put_many`` are the active store's own methods
    (bound again whenever the store changes, so a handle's call costs no extra Python
    call); ``[key] = stored`` and ``key in table`` call the store's ``put`` and
    ``contains``."""

    __slots__ = (
        "_direct",
        "_host",
        "cache",
        "columns",
        "contains",
        "get",
        "get_many",
        "name",
        "pop",
        "put",
        "put_many",
        "state_id",
        "store",
    )

    #: ``get(key, default=None)``: the stored form of ``key``'s value, or ``default``
    get: Callable[..., Any]
    #: ``pop(key, default=None)``: delete ``key``'s value; the value it had, or ``default``
    pop: Callable[..., Any]
    #: ``get_many(keys, default=None)``: ``[self.get(k, default) for k in keys]``, with one
    #: C-level cache lookup per key when the keys are ints or strs and the cache holds
    #: them, or in column mode for many int keys (:mod:`lockgate.state.rocksdb.columns`)
    get_many: Callable[..., list[Any]]
    #: ``put_many(keys, stored)``: ``self[k] = v`` for each key and value in order (a key
    #: given twice keeps its last value)
    put_many: Callable[[Any, Any], None]
    #: ``put(key, stored)``: ``self[key] = stored``
    put: Callable[[Any, Any], None]
    #: ``contains(key)``: ``key in self``
    contains: Callable[[Any], bool]

    def __init__(self, host: StoreHost, name: str, state_id: bytes, dirty_limit: int) -> None:
        self._host = host
        self.name = name
        self.state_id = state_id
        self._direct = DirectStore(host, state_id)
        cached = bool(host.cache_entries)
        self.cache = WriteBackStore(
            host, state_id, dirty_limit, self.enter_columns if cached else None
        )
        self.columns: ColumnarStore | None = None
        self._use(self.cache if cached else self._direct)

    def _use(self, store: TableStore) -> None:
        """Make ``store`` the active one."""
        self.store = store
        self.get = store.get
        self.pop = store.pop
        self.put = store.put
        self.contains = store.contains
        self.get_many = store.get_many
        self.put_many = store.put_many

    # -- the handles' calls -------------------------------------------------------------
    def __setitem__(self, key: Any, stored: Any) -> None:
        self.put(key, stored)

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    @property
    def used(self) -> bool:
        """Read through the cache before: a batch scope prefetches the batch's missing
        keys of this state."""
        return self.cache.used

    # -- modes --------------------------------------------------------------------------
    def enter_columns(self) -> ColumnarStore:
        """Column mode on (the write-back store calls this once written back and empty)."""
        self.columns = columns = ColumnarStore(self._host, self.state_id, self.leave_columns)
        self._use(columns)
        return columns

    def leave_columns(self) -> TableStore:
        """Column mode off (the columnar store calls this once written back); the
        per-key store, active again."""
        self.columns = None
        self._use(self.cache)
        return self.cache

    def open_batch_cache(self) -> None:
        """A batch scope opened without a cache across batches: the write-back store
        serves the scope."""
        if self.store is self._direct:
            self._use(self.cache)

    def close_batch_cache(self) -> None:
        """The scope's writes are written: forget its entries, back to the database."""
        self.cache.clear()
        self._use(self._direct)

    def drop_cache(self) -> None:
        """Forget every cached entry, per key and columns (after a write-back, or with the
        database); the table starts over in its first mode."""
        self.cache.clear()
        self.columns = None
        self._use(self.cache if self._host.cache_entries else self._direct)

    # -- views for tests ----------------------------------------------------------------
    @property
    def _cache(self) -> dict[Any, Any] | None:
        """The per-key cache's entries (None: every call goes to the database)."""
        return None if self.store is self._direct else self.cache.entries

    @property
    def _dirty(self) -> list[Any]:
        return self.cache.dirty

    @property
    def _limit(self) -> int:
        return self.cache.dirty_limit

    @_limit.setter
    def _limit(self, value: int) -> None:
        self.cache.dirty_limit = value

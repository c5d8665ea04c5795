"""What a RocksDB state table keeps its entries in: the :class:`TableStore` protocol, one
implementation per cache mode, and the :class:`StoreHost` interface they use of the
backend.

A :class:`~lockgate.state.rocksdb.table.RocksDBStateTable` (``key -> stored`` of one
state) delegates every call to its active store:

* :class:`~lockgate.state.rocksdb.store_direct.DirectStore`: every call reads or writes
  the database (``cache_entries=0`` outside batch scopes);
* :class:`~lockgate.state.rocksdb.store_write_back.WriteBackStore`: the per-key
  write-back cache (:mod:`lockgate.state.rocksdb.cache`), across batches, or for one
  batch scope with ``cache_entries=0`` (:mod:`lockgate.state.rocksdb.batch`);
* :class:`~lockgate.state.rocksdb.store_columnar.ColumnarStore`: the columnar cache of
  many-keys calls with int keys (:mod:`lockgate.state.rocksdb.columns`).

The table creates its direct and write-back stores once, with the table; the columnar one
when a many-keys call turns column mode on. The stores switch among themselves only
through the callbacks the table gives them (column mode on, column mode off), and the
backend opens and closes the write-back store of ``cache_entries=0`` with the batch
scopes. Every store keeps the guarantee of the cache modules: the database plus the
store's entries is at every moment exactly the state the per-call path would hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from rocksdict import Rdict, WriteBatch


class TableStore(Protocol):
    """One state's entries in one cache mode (task thread only). ``get``/``put``/``pop``/
    ``contains`` are the table's per-key calls, ``get_many``/``put_many`` its many-keys
    calls (see :class:`~lockgate.state.rocksdb.table.RocksDBStateTable`)."""

    def get(self, key: Any, default: Any = None) -> Any:
        """The stored form of ``key``'s value, or ``default``; a mutable value is a
        deserialized copy."""
        ...

    def put(self, key: Any, stored: Any) -> None:
        """Set ``key``'s stored form."""
        ...

    def pop(self, key: Any, default: Any = None) -> Any:
        """Delete ``key``'s value; the value it had, or ``default``."""
        ...

    def contains(self, key: Any) -> bool:
        """Whether ``key`` has a value."""
        ...

    def get_many(self, keys: Sequence[Any], default: Any = None) -> list[Any]:
        """``[get(k, default) for k in keys]``."""
        ...

    def put_many(self, keys: Sequence[Any], stored: Sequence[Any]) -> None:
        """``put(k, v)`` for each key and value in order (a key given twice keeps its last
        value)."""
        ...

    def __len__(self) -> int:
        """How many entries the store caches (0 for the direct store)."""
        ...

    def has_dirty(self) -> bool:
        """Whether some cached entry is not in the database yet."""
        ...

    def write_dirty(self, batch: WriteBatch) -> Callable[[], None]:
        """Add the rows of the dirty entries to ``batch``; returns what marks them clean,
        to call once ``batch`` is written (not called when the write fails: they stay
        dirty)."""
        ...


class StoreHost(Protocol):
    """What the stores use of the keyed backend
    (:class:`~lockgate.state.rocksdb.backend.RocksDBKeyedStateBackend`)."""

    #: the bound of the per-key cache and of each state's columns; 0: no cache across
    #: batches (and no column mode)
    cache_entries: int

    @property
    def db(self) -> Rdict:
        """The working database (looked up on every use: a restore replaces it)."""
        ...

    @property
    def in_batch_scope(self) -> bool:
        """Whether a batch scope is open (:mod:`lockgate.state.rocksdb.batch`)."""
        ...

    def row_of(self, key: Any, state_id: bytes) -> bytes:
        """The row key of ``key`` in the state ``state_id`` (2 bytes)."""
        ...

    def admit(self, key: Any, ck: Any) -> tuple[bytes, bytes]:
        """Before ``ck`` (``key``'s cache key, not cached) enters a per-key cache: make
        room (outside scopes) and register its row parts; returns them (key-group prefix,
        encoded key)."""
        ...

    def make_room(self, extra: int) -> None:
        """Evict if the per-key caches with ``extra`` more entries would exceed the
        bound."""
        ...

    def rows_of(self, cks: list[Any], state_id: bytes) -> list[bytes]:
        """The row keys of the cached cache keys ``cks`` in the state ``state_id``."""
        ...

    def rows_of_ints(self, keys: np.ndarray, state_id: bytes) -> tuple[list[bytes], np.ndarray]:
        """The row keys of int64 ``keys`` in the state ``state_id``, in row order, and the
        order that sorts ``keys`` like them (:func:`lockgate.state.rocksdb.rows.int_key_rows`)."""
        ...

    def forget_odd(self, cks: list[Any]) -> None:
        """Drop the row parts of the (tuple) cache keys ``cks`` that no state caches now."""
        ...

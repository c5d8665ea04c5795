"""The columnar store of a RocksDB state table: the state's entries with int keys in a
:class:`~lockgate.state.rocksdb.columns.ColumnCache`, for the many-keys calls of
vectorized operators (``ValueState.values_of`` / ``update_all``). See
:mod:`lockgate.state.rocksdb.columns` for when a table enters and leaves column mode, and
:mod:`lockgate.state.rocksdb.store` for the stores.

Guarantees: a many-keys call whose keys are all ints within int64 (and, for writes,
whose values are ints, floats, strs, bytes, bools or None) stays in the columns; any
other call first writes the dirty columns back (one write batch) and leaves column mode,
then runs on the per-key store, so the database plus the cache is at every moment
exactly the state the per-call path would hold. The columns hold at most
``cache_entries`` entries after a call: past that they are written back and emptied
whole.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
from rocksdict import WriteBatch

from .cache import ATOMS
from .columns import ColumnCache, int64_keys
from .store import StoreHost, TableStore


class ColumnarStore:
    """``key -> stored`` of one state in column mode (a
    :class:`~lockgate.state.rocksdb.store.TableStore`). ``to_per_key``: leaves column
    mode (the table's callback, called once the dirty columns are written back) and
    returns the per-key store that takes over."""

    __slots__ = ("_columns", "_host", "_sid", "_to_per_key")

    def __init__(
        self, host: StoreHost, state_id: bytes, to_per_key: Callable[[], TableStore]
    ) -> None:
        self._host = host
        self._sid = state_id
        self._to_per_key = to_per_key
        self._columns = ColumnCache()

    # -- many-keys calls ----------------------------------------------------------------
    def read_ints(self, keys: np.ndarray, default: Any) -> list[Any]:
        """The value of each int64 key (``default`` where it has none); the keys not in
        the columns are read with one multi-get."""
        host = self._host
        sid = self._sid

        def load(new: np.ndarray) -> tuple[np.ndarray, list[bytes | None]]:
            rows, order = host.rows_of_ints(new, sid)
            return new[order], cast(list[bytes | None], host.db.get(cast(list[Any], rows)))

        values = self._columns.read(keys, default, load)
        self._bound()
        return values

    def write_ints(self, keys: np.ndarray, stored: Sequence[Any]) -> None:
        """Set the value of each int64 key (immutable atoms), marked dirty."""
        self._columns.write(keys, stored)
        self._bound()

    def get_many(self, keys: Sequence[Any], default: Any = None) -> list[Any]:
        ints = int64_keys(keys)
        if ints is not None:
            return self.read_ints(ints, default)
        return self._leave().get_many(keys, default)

    def put_many(self, keys: Sequence[Any], stored: Sequence[Any]) -> None:
        if set(map(type, stored)) <= ATOMS:
            ints = int64_keys(keys)
            if ints is not None:
                self.write_ints(ints, stored)
                return
        self._leave().put_many(keys, stored)

    # -- per-key calls: column mode off -------------------------------------------------
    def get(self, key: Any, default: Any = None) -> Any:
        return self._leave().get(key, default)

    def put(self, key: Any, stored: Any) -> None:
        self._leave().put(key, stored)

    def pop(self, key: Any, default: Any = None) -> Any:
        return self._leave().pop(key, default)

    def contains(self, key: Any) -> bool:
        return self._leave().contains(key)

    # -- write-back ---------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._columns)

    def has_dirty(self) -> bool:
        return self._columns.has_dirty()

    def write_dirty(self, batch: WriteBatch) -> Callable[[], None]:
        columns = self._columns
        host = self._host
        sid = self._sid
        rows, raws, positions = columns.dirty_rows(lambda keys: host.rows_of_ints(keys, sid))
        deque(map(batch.put, rows, raws), maxlen=0)
        return lambda: columns.mark_clean(positions)

    def _write_back_now(self) -> None:
        """Write the dirty columns to the database (one write batch)."""
        if self._columns.has_dirty():
            batch = WriteBatch(raw_mode=True)
            done = self.write_dirty(batch)
            self._host.db.write(batch)
            done()

    def _leave(self) -> TableStore:
        """Column mode off: the dirty columns written back, the per-key store's turn."""
        self._write_back_now()
        return self._to_per_key()

    def _bound(self) -> None:
        """Write back and empty the columns when they outgrow the cache bound."""
        if len(self._columns) > self._host.cache_entries:
            self._write_back_now()
            self._columns = ColumnCache()

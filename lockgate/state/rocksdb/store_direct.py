"""The direct store of a RocksDB state table: every call reads or writes the database,
nothing is cached (``cache_entries=0``, outside batch scopes: timers, broadcast state
visits). See :mod:`lockgate.state.rocksdb.store`.

Guarantees: each call is one database read and at most one row write or delete, done
before it returns; a value read is a fresh deserialized copy; nothing is ever dirty.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rocksdict import WriteBatch

from .codec import dumps, loads
from .store import StoreHost


def _nothing() -> None:
    return None


class DirectStore:
    """``key -> stored`` of one state straight in the database (a
    :class:`~lockgate.state.rocksdb.store.TableStore`)."""

    __slots__ = ("_host", "_sid")

    def __init__(self, host: StoreHost, state_id: bytes) -> None:
        self._host = host
        self._sid = state_id

    def get(self, key: Any, default: Any = None) -> Any:
        host = self._host
        raw = host.db.get(host.row_of(key, self._sid))
        return default if raw is None else loads(raw)

    def put(self, key: Any, stored: Any) -> None:
        host = self._host
        host.db.put(host.row_of(key, self._sid), dumps(stored))

    def pop(self, key: Any, default: Any = None) -> Any:
        host = self._host
        row = host.row_of(key, self._sid)
        db = host.db
        raw = db.get(row)
        if raw is None:
            return default
        db.delete(row)
        return loads(raw)

    def contains(self, key: Any) -> bool:
        host = self._host
        return host.db.get(host.row_of(key, self._sid)) is not None

    def get_many(self, keys: Sequence[Any], default: Any = None) -> list[Any]:
        if isinstance(keys, np.ndarray):
            keys = keys.tolist()
        get = self.get
        return [get(k, default) for k in keys]

    def put_many(self, keys: Sequence[Any], stored: Sequence[Any]) -> None:
        if isinstance(keys, np.ndarray):
            keys = keys.tolist()
        put = self.put
        for k, v in zip(keys, stored):
            put(k, v)

    def __len__(self) -> int:
        return 0

    def has_dirty(self) -> bool:
        return False

    def write_dirty(self, batch: WriteBatch) -> Callable[[], None]:
        return _nothing

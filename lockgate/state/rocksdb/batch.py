"""Per-input-batch access to the RocksDB keyed state backend: one multi-get per state
for the keys of an input batch that are not cached, instead of a database call per
state access.

The keyed operator opens a *batch scope* with the keys of an input batch
(``backend.begin_batch(keys)``) and closes it after the batch
(``backend.end_batch()``). Inside the scope:

* every state already read through the cache before (a *used* state) has the rows of
  the batch's keys that it does not cache fetched with one multi-get when the scope
  opens (the *prefetch*);
* the handles' reads are served from the cache (a key not prefetched is read from the
  database once and then cached), their writes and deletes go to the cache and are
  remembered as *dirty*.

With the write-back cache (``cache_entries > 0``, :mod:`lockgate.state.rocksdb.cache`)
the cache outlives the scope: closing the scope only trims it to its bound (evicted
dirty entries are written back), and dirty entries reach the database before anything
reads it directly. With ``cache_entries=0`` the cache lives for one scope: its dirty
entries are written as one ``WriteBatch`` when the scope closes (and before a
snapshot, ``keys()``/``entries()`` or a restore), and timers, which fire outside
scopes, go to the database.

Guarantees: the database plus the cache is at every moment exactly the state the
per-call path would hold; a read in a scope sees every earlier write of the scope
(same key, any state); a snapshot sees every write made before it. A mutable value
is cached as its pickled bytes, so a value read from state is a fresh deserialized
copy, as on the per-call path (immutable values are cached as the objects).

Cache keys: ``int`` and ``str`` keys are their own cache key; any other key is
``(ENCODED, encoded key bytes)`` (numpy integers are their ``int``), so two keys
share a cache entry exactly when they share a database row (``1``, ``1.0`` and
``True`` are three keys, as in the row layout of :mod:`lockgate.state.rocksdb.codec`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from ...core.key_groups import key_groups_of_keys
from .codec import U16, encode_key, key_group_of

#: the tag of cache keys that are encoded bytes
ENCODED: Any = object()


def cache_key(key: Any) -> Any:
    """The cache key of ``key`` (see the module docstring); raises
    :class:`~lockgate.errors.UnsupportedKeyError` for a key that cannot be encoded."""
    t = type(key)
    if t is int or t is str:
        return key
    if isinstance(key, np.integer):
        return int(key)
    return (ENCODED, encode_key(key))


def encoded_of(key: Any, ck: Any) -> bytes:
    """The encoded key of ``key`` whose cache key is ``ck``."""
    return ck[1] if type(ck) is tuple else encode_key(ck)


def int_key_groups(keys: list[int], max_parallelism: int) -> list[int]:
    """The key group of each int key, vectorized (a scalar one costs about 1 us); keys
    beyond 64 bits one at a time."""
    try:
        return cast(list[int], key_groups_of_keys(keys, max_parallelism).tolist())
    except OverflowError:
        return [key_group_of(k, max_parallelism) for k in keys]


class BatchScope:
    """The cache key -> (key-group prefix, encoded key) of the keys seen in one scope,
    and the tables' caches. Belongs to the task thread."""

    __slots__ = ("max_parallelism", "parts", "prefixes")

    def __init__(self, max_parallelism: int) -> None:
        self.max_parallelism = max_parallelism
        self.parts: dict[Any, tuple[bytes, bytes]] = {}
        #: the key-group prefixes of the rows, by key group
        self.prefixes = [U16.pack(g) for g in range(max_parallelism)]

    def add_keys(self, keys: Sequence[Any]) -> None:
        """Register the distinct keys of ``keys`` (a key that cannot be encoded is
        skipped: it fails when, and only if, state is used with it, as per call)."""
        parts = self.parts
        mp = self.max_parallelism
        if keys and set(map(type, keys)) == {int}:
            fresh = [k for k in dict.fromkeys(keys) if k not in parts]
            if not fresh:
                return
            kg = self.prefixes
            for k, g in zip(fresh, int_key_groups(fresh, mp)):
                parts[k] = (kg[g], encode_key(k))
            return
        for key in keys:
            try:
                ck = cache_key(key)
                if ck not in parts:
                    parts[ck] = (self.prefixes[key_group_of(key, mp)], encoded_of(key, ck))
            except Exception:  # noqa: BLE001 - surfaces on first use, as per call
                continue

    def part(self, key: Any, ck: Any) -> tuple[bytes, bytes]:
        """The (key-group prefix, encoded key) of ``key``, registering it if new."""
        p = self.parts.get(ck)
        if p is None:
            p = self.parts[ck] = (
                self.prefixes[key_group_of(key, self.max_parallelism)],
                encoded_of(key, ck),
            )
        return p

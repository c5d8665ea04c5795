"""A vectorized hash index from int64 keys to dense positions ``0, 1, 2, ...``: numpy's
answer to a ``dict`` of int keys when a whole batch of keys is looked up or added at
once.

A Python ``dict`` costs 100-350 ns a key in a batch loop over a million keys (one
interpreter step and a cache miss each, one after the other); this index probes all keys
of a batch per numpy operation (linear probing in a table at most a quarter full: fewer
probe rounds, each a few numpy calls over the keys still probing), so the cache misses
overlap. Memory: 24 to 48 bytes a key (int32 slots, int64 keys, both grown by
doubling). Used by the columnar value cache of the RocksDB backend
(:mod:`lockgate.state.rocksdb.columns`).

Guarantees: :meth:`Int64Positions.find` gives each key's position or -1; :meth:`add`
gives distinct new keys the next positions in order; positions never change until
:meth:`clear`. Task thread only.
"""

from __future__ import annotations

import numpy as np

from ..core.key_hash import fmix64

_EMPTY = -1
_MIN_SLOTS = 1024
#: positions are int32 in the slot table
_MAX_KEYS = 2**31 - 1


class Int64Positions:
    """int64 key -> dense position (see the module docstring)."""

    __slots__ = ("_keys", "_mask", "_n", "_slots")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget every key."""
        self._slots = np.full(_MIN_SLOTS, _EMPTY, dtype=np.int32)  # slot -> position
        self._mask = np.uint64(_MIN_SLOTS - 1)
        self._keys = np.empty(_MIN_SLOTS // 4, dtype=np.int64)  # position -> key
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def keys(self) -> np.ndarray:
        """The keys by position (a view: valid until the next :meth:`add`)."""
        return self._keys[: self._n]

    def _home(self, keys: np.ndarray) -> np.ndarray:
        return (fmix64(keys.view(np.uint64)) & self._mask).astype(np.int64)

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The position of each of the int64 ``keys``, -1 for a key not added."""
        keys = np.asarray(keys, dtype=np.int64)
        out = np.full(len(keys), _EMPTY, dtype=np.int64)
        if not self._n or not len(keys):
            return out
        slots, stored, mask = self._slots, self._keys, int(self._mask)
        slot = self._home(keys)
        todo = np.arange(len(keys))
        while len(todo):
            pos = slots[slot]
            used = pos >= 0
            hit = used.copy()
            hit[used] = stored[pos[used]] == keys[todo[used]]
            out[todo[hit]] = pos[hit]
            going = used & ~hit  # an other key in the slot: probe the next one
            todo = todo[going]
            slot = (slot[going] + 1) & mask
        return out

    def add(self, keys: np.ndarray) -> np.ndarray:
        """Add the distinct int64 ``keys``, none of them added before; their positions
        (``len(self)`` onwards, in the order given)."""
        keys = np.asarray(keys, dtype=np.int64)
        n = len(keys)
        first = self._n
        if self._n + n > len(self._keys):
            self._grow(self._n + n)
        self._keys[first : first + n] = keys
        self._n += n
        self._place(np.arange(first, first + n, dtype=np.int64))
        return np.arange(first, first + n, dtype=np.int64)

    def _place(self, positions: np.ndarray) -> None:
        """Put ``positions`` (whose keys are in ``_keys``) into free slots."""
        slots, mask = self._slots, int(self._mask)
        slot = self._home(self._keys[positions])
        todo = positions
        while len(todo):
            free = slots[slot] < 0
            # several keys may want one free slot: the first of each takes it
            wanted, first = np.unique(slot[free], return_index=True)
            winners = np.flatnonzero(free)[first]
            slots[wanted] = todo[winners]
            waiting = np.ones(len(todo), dtype=bool)
            waiting[winners] = False
            todo = todo[waiting]
            slot = slot[waiting]
            taken = slots[slot] >= 0
            slot[taken] = (slot[taken] + 1) & mask

    def _grow(self, needed: int) -> None:
        if needed > _MAX_KEYS:
            raise OverflowError(f"an Int64Positions holds at most {_MAX_KEYS} keys")
        size = len(self._slots)
        while size < 4 * needed:
            size *= 2
        keys = np.empty(max(needed, 2 * len(self._keys)), dtype=np.int64)
        keys[: self._n] = self._keys[: self._n]
        self._keys = keys
        self._slots = np.full(size, _EMPTY, dtype=np.int32)
        self._mask = np.uint64(size - 1)
        if self._n:
            self._place(np.arange(self._n, dtype=np.int64))

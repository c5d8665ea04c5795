"""Checkpoint ids: strictly increasing per job, also across coordinator restarts (M-E2).

:class:`CheckpointIdCounter` starts after the newest id the job's storage
knows: the durable pointer (``storage.read_latest()``, M-C8) or the newest
folder holding a ``_metadata`` (``storage.completed_ids()``), whichever is
larger; on empty storage it starts at 1. The storage is read on the first
:meth:`next_id` call, not on construction, so a storage that cannot be read
surfaces as "a new id cannot be obtained" (M-C1, ``ID_UNAVAILABLE``) when a
trigger needs an id, and the next call tries again.

Ids of checkpoints that were triggered but never completed are not recorded
anywhere durable: a restarted coordinator may hand them out again. That is
safe because such checkpoints have no ``_metadata`` (they do not exist, M-C7)
and messages of an earlier attempt are dropped by generation on the control
plane.
"""

from __future__ import annotations

import threading

from ..storage import CheckpointStorage


class CheckpointIdCounter:
    """Hands out checkpoint ids. Thread-safe."""

    def __init__(self, storage: CheckpointStorage | None = None, *, start: int | None = None) -> None:
        """``start``: the first id (skips reading ``storage``); without ``start`` and
        ``storage`` the first id is 1."""
        if start is not None and start < 1:
            raise ValueError(f"checkpoint ids start at 1 or later, got {start}")
        self._storage = storage
        self._next: int | None = start if start is not None else (1 if storage is None else None)
        self._lock = threading.Lock()

    @staticmethod
    def first_id_after_storage(storage: CheckpointStorage) -> int:
        """The id following the newest one ``storage`` holds (1 when it holds none)."""
        newest = storage.read_latest() or 0
        ids = storage.completed_ids()
        if ids:
            newest = max(newest, max(ids))
        return newest + 1

    def next_id(self) -> int:
        """The next id; raises whatever reading the storage raised (M-C1)."""
        with self._lock:
            if self._next is None:
                assert self._storage is not None
                self._next = self.first_id_after_storage(self._storage)
            value = self._next
            self._next += 1
            return value

    def peek(self) -> int | None:
        """The id :meth:`next_id` will return, or None before the storage was read."""
        with self._lock:
            return self._next

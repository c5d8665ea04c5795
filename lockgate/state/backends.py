"""State backends: where keyed state lives, chosen with ``env.set_state_backend(...)``.

A backend object is a small picklable configuration; each keyed operator subtask
asks it for its own keyed state store with :meth:`StateBackend.create_keyed_backend`.

Every keyed store offers the same interface (the one
:class:`~lockgate.state.keyed.HeapKeyedStateBackend` has):

* ``current_key`` (set by the operator before each record), ``get_state(descriptor)``;
* ``snapshot()`` (the synchronous part of a checkpoint, M-T3) returning a view with
  ``materialize()`` (the canonical, backend-independent snapshot: what savepoints
  hold, M-S1) and ``release()``; a store with incremental checkpoints also offers
  ``materialize_to(uploader)`` on the view (what checkpoints use, M-R4);
* ``restore(snapshots, key_groups)`` (canonical snapshots from either backend, or
  the store's own checkpoint payloads), ``keys(name)``, ``entries()`` and ``close()``.
"""

from __future__ import annotations

from typing import Any

from ..core.clock import Clock
from ..errors import ConfigurationError
from .rocksdb import (
    DEFAULT_CACHE_ENTRIES,
    DEFAULT_TRANSFER_THREADS,
    check_cache_entries,
    check_transfer_threads,
)


class StateBackend:
    """Base of the state backend configurations."""

    #: the backend's name in plans and errors
    name = "state backend"

    def create_keyed_backend(
        self, operator_name: str, max_parallelism: int, *, clock: Clock, subtask_index: int = 0
    ) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HashMapStateBackend(StateBackend):
    """Keyed state in Python dicts on the heap (the default). Its snapshots are
    copy-on-write views: records keep flowing while the asynchronous part writes
    them (M-T3). Every checkpoint writes the full state."""

    name = "hashmap"

    def create_keyed_backend(
        self, operator_name: str, max_parallelism: int, *, clock: Clock, subtask_index: int = 0
    ) -> Any:
        from .keyed import HeapKeyedStateBackend

        return HeapKeyedStateBackend(operator_name, max_parallelism, clock=clock)


class RocksDBStateBackend(StateBackend):
    """Keyed state in an embedded RocksDB (through ``rocksdict``) on local disk, so
    state can be larger than memory. With ``incremental=True`` a checkpoint uploads
    only the RocksDB files created since the previous one; unchanged files are shared
    between checkpoints and deleted only when no retained checkpoint uses them (M-R4).

    ``local_dir``: where the working databases live (default: a temporary folder per
    subtask, removed when the subtask ends).

    ``cache_entries``: the bound of each keyed operator subtask's write-back state
    cache (:mod:`lockgate.state.rocksdb.cache`): the most recently used (state, key)
    entries stay in memory across input batches, reads of them never touch RocksDB and
    their writes reach it lazily (before every snapshot, and on eviction). Default
    100,000 entries (about 10-15 MB per subtask for small values); 0 turns the cache
    off (each input batch is read with one multi-get and written with one write batch).
    The database plus the cache always hold exactly the state, so checkpoints and
    savepoints see every write made before them.

    ``local_recovery`` (Flink's ``state.backend.local-recovery``; incremental only): each
    subtask keeps hard links to the SST files of its last two checkpoints under
    ``local_dir`` (``lockgate-local-recovery/``), and a restore on the same host (the
    same operator and subtask, the same checkpoint storage) takes every file whose local
    copy matches its handle (size, CRC32, HMAC) from there instead of the storage: a
    restart after a failure does not download the state again
    (:mod:`lockgate.state.rocksdb.local_copies`). Give a ``local_dir`` that outlives the
    subtask's process (the default temporary folder does on one host).

    ``transfer_threads`` (Flink's ``state.backend.rocksdb.checkpoint.transfer.thread.num``,
    default 4, at most 64): the SST files an incremental checkpoint uploads, and a
    restore downloads, at once; an object store's per-request latency bounds one
    stream, not its bandwidth. Each transfer holds its whole file in memory, so a
    subtask may hold that many SST files (RocksDB's are up to about 64 MB) at a time.
    """

    name = "rocksdb"

    def __init__(
        self,
        incremental: bool = True,
        local_dir: str | None = None,
        *,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        local_recovery: bool = False,
        transfer_threads: int = DEFAULT_TRANSFER_THREADS,
    ) -> None:
        if not isinstance(local_recovery, bool):
            raise ConfigurationError(
                f"RocksDBStateBackend(local_recovery=...) must be True or False, got "
                f"{local_recovery!r}"
            )
        if local_recovery and not incremental:
            raise ConfigurationError(
                "RocksDBStateBackend(local_recovery=True) keeps local copies of incremental "
                "checkpoints' files: use it with incremental=True"
            )
        if not isinstance(incremental, bool):
            raise ConfigurationError(
                f"RocksDBStateBackend(incremental=...) must be True or False, got {incremental!r}"
            )
        if local_dir is not None and (not isinstance(local_dir, str) or not local_dir):
            raise ConfigurationError(
                f"RocksDBStateBackend(local_dir=...) must be a folder path, got {local_dir!r}"
            )
        self.incremental = incremental
        self.local_dir = local_dir
        self.cache_entries = check_cache_entries(cache_entries, "RocksDBStateBackend")
        self.local_recovery = local_recovery
        self.transfer_threads = check_transfer_threads(transfer_threads, "RocksDBStateBackend")

    def create_keyed_backend(
        self, operator_name: str, max_parallelism: int, *, clock: Clock, subtask_index: int = 0
    ) -> Any:
        from .rocksdb import RocksDBKeyedStateBackend

        return RocksDBKeyedStateBackend(
            operator_name,
            max_parallelism,
            clock=clock,
            incremental=self.incremental,
            local_dir=self.local_dir,
            subtask_index=subtask_index,
            cache_entries=self.cache_entries,
            local_recovery=self.local_recovery,
            transfer_threads=self.transfer_threads,
        )

    def __repr__(self) -> str:
        return (
            f"RocksDBStateBackend(incremental={self.incremental}, "
            f"cache_entries={self.cache_entries}, local_recovery={self.local_recovery}, "
            f"transfer_threads={self.transfer_threads})"
        )


def check_state_backend(backend: Any) -> StateBackend:
    if not isinstance(backend, StateBackend):
        raise ConfigurationError(
            "set_state_backend needs lg.HashMapStateBackend() or "
            f"lg.RocksDBStateBackend(incremental=True), got {backend!r}"
        )
    return backend

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
    """

    name = "rocksdb"

    def __init__(self, incremental: bool = True, local_dir: str | None = None) -> None:
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

    def create_keyed_backend(
        self, operator_name: str, max_parallelism: int, *, clock: Clock, subtask_index: int = 0
    ) -> Any:
        from .rocksdb_backend import RocksDBKeyedStateBackend

        return RocksDBKeyedStateBackend(
            operator_name,
            max_parallelism,
            clock=clock,
            incremental=self.incremental,
            local_dir=self.local_dir,
            subtask_index=subtask_index,
        )

    def __repr__(self) -> str:
        return f"RocksDBStateBackend(incremental={self.incremental})"


def check_state_backend(backend: Any) -> StateBackend:
    if not isinstance(backend, StateBackend):
        raise ConfigurationError(
            "set_state_backend needs lg.HashMapStateBackend() or "
            f"lg.RocksDBStateBackend(incremental=True), got {backend!r}"
        )
    return backend

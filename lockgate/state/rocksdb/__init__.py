"""The RocksDB keyed state backend (DESIGN.md §3): keyed state in an embedded RocksDB on
local disk, larger than memory, with incremental checkpoints.

``backend`` holds :class:`RocksDBKeyedStateBackend`; ``table`` its state tables, which
delegate to one store per cache mode (``store`` the protocol, ``store_direct``,
``store_write_back``, ``store_columnar``); ``codec`` the row layout; ``cache``,
``batch``, ``columns`` and ``rows`` the write-back cache, the per-input-batch scopes,
the columnar cache and the vectorized rows; ``files``, ``snapshot`` and ``restore`` the
database folders, the checkpoint views and what a restore reads. Jobs choose it with
``lockgate.RocksDBStateBackend`` (:mod:`lockgate.state.backends`).

Importing this package does not load RocksDB: :class:`RocksDBKeyedStateBackend` is
imported on first use, as before the move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .cache import DEFAULT_CACHE_ENTRIES, check_cache_entries
from .columns import int64_keys
from .restore import DEFAULT_TRANSFER_THREADS, check_transfer_threads

if TYPE_CHECKING:
    from .backend import RocksDBKeyedStateBackend

__all__ = [
    "DEFAULT_CACHE_ENTRIES",
    "DEFAULT_TRANSFER_THREADS",
    "RocksDBKeyedStateBackend",
    "check_cache_entries",
    "check_transfer_threads",
    "int64_keys",
]


def __getattr__(name: str) -> Any:
    if name == "RocksDBKeyedStateBackend":
        from .backend import RocksDBKeyedStateBackend

        return RocksDBKeyedStateBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

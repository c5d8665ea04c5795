"""Opening the checkpoint storage behind a URL (:func:`open_storage`): the in-memory
storage of a ``memory://`` URL (tests), else the file system storage of
:mod:`.fs_storage`. Kept apart from :mod:`.storage` (the protocol and the in-memory
storage), which :mod:`.fs_storage` builds on."""

from __future__ import annotations

import threading

from .fs_storage import FileSystemCheckpointStorage
from .storage import CheckpointStorage, MemoryCheckpointStorage
from .storage_options import StorageOptions, register

_memory_storages: dict[str, MemoryCheckpointStorage] = {}
_memory_lock = threading.Lock()


def open_storage(url: str, options: StorageOptions | None = None) -> CheckpointStorage:
    """The storage behind a checkpoint URL: ``memory://...`` is the
    :class:`MemoryCheckpointStorage` of that URL in this process (tests; every attempt of a
    job sees the same one), anything else (a local path,
    ``file://``, ``s3://``, ...) a :class:`~lockgate.checkpoint.fs_storage.FileSystemCheckpointStorage`.

    ``options`` (signing key, permissions): registered for ``url`` in this process, so
    later calls without options use them too; None: the options registered for ``url``,
    else the defaults (see :mod:`lockgate.checkpoint.storage_options`). The in-memory
    storage (tests only) neither signs nor sets permissions.

    Raises :class:`~lockgate.errors.ConfigurationError` for a URL no filesystem opens.
    """
    if isinstance(url, str) and url.startswith("memory://"):
        with _memory_lock:
            storage = _memory_storages.get(url)
            if storage is None:
                storage = _memory_storages[url] = MemoryCheckpointStorage(url)
            return storage
    if options is not None and isinstance(url, str) and url.strip():
        register(url, options)
    return FileSystemCheckpointStorage(url, options)

"""Checkpoint storage: the narrow interface the coordinator and tasks write through.

Layout under the storage root (the job's checkpoint directory)::

    chk-<id>/<name>.<token> one file per (operator, subtask) state handle; ``token`` is
                           random, new for every write
    chk-<id>/_metadata     written last and atomically: a folder without it is not a
                           checkpoint
    shared/...             shared files of incremental checkpoints (see shared_registry)
    _latest                durable pointer: the id of the newest completed checkpoint
    _checkpoint_ids        the checkpoint ids reserved so far (see coordinator.id_counter)

State file names are unique to the write that made them (M-T3): a late asynchronous
snapshot part of a failed attempt, which may still write or delete its files after the
next attempt started, can never overwrite or delete a file another writer made, even
in the same ``chk-<id>/`` folder. Readers never build these names: the handle returned
by ``write_state`` carries the full path.

Every file carries a format version and a CRC32 checksum; a corrupt or
truncated file raises ``CorruptCheckpointError``, never loads silently.
:class:`MemoryCheckpointStorage` is the in-memory fake for unit tests;
:mod:`lockgate.checkpoint.fs_storage` is the filesystem implementation
(local paths, ``file://``, ``s3://``, anything ``pyarrow.fs`` opens).
"""

from __future__ import annotations

import json
import secrets
import threading
import zlib
from typing import Any, Protocol

from ..errors import ConfigurationError, LockgateError
from .state_tree import decode_tree, encode_tree
from .storage_options import DEFAULT_OPTIONS, StorageOptions
from .types import StateHandle


class CorruptCheckpointError(LockgateError):
    """A checkpoint file failed its format or checksum check."""


METADATA = "_metadata"
LATEST = "_latest"


def checkpoint_folder(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id}"


def state_file_path(checkpoint_id: int, name: str) -> str:
    """A new, unique path for the state file ``name`` of ``checkpoint_id``:
    ``chk-<id>/<name>.<16 random hex digits>`` (checked with :func:`check_rel`; raises
    ``ValueError`` for a name that is not one plain path segment or is ``_metadata``)."""
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ConfigurationError(
            f"invalid state file name {name!r}: it must be one non-empty "
            f"path segment such as 'op-<uid>-<subtask>'"
        )
    if name == METADATA:
        raise ConfigurationError(f"a state file cannot be named {METADATA!r}")
    rel = f"{checkpoint_folder(checkpoint_id)}/{name}.{secrets.token_hex(8)}"
    check_rel(rel)
    return rel


def check_rel(rel: str, *, what: str = "checkpoint file path", allow_root: bool = False) -> None:
    """Reject a storage path that is not a plain relative path (``a/b/c``).

    ``allow_root``: the empty string (the storage root itself) is accepted too. Raises
    :class:`~lockgate.errors.ConfigurationError` (a ``ValueError``) naming the path.
    """
    if not isinstance(rel, str):
        raise ConfigurationError(
            f"invalid {what} {rel!r}: it must be a str relative to the "
            f"storage root, such as 'chk-3/_metadata'"
        )
    if allow_root and rel == "":
        return
    segments = rel.split("/")
    if not rel or rel.startswith("/") or any(s in ("", ".", "..") for s in segments):
        raise ConfigurationError(
            f"invalid {what} {rel!r}: it must be relative to the "
            f"storage root, '/'-separated, without empty, '.' or '..' "
            f"segments"
        )


def check_file_data(data: Any) -> None:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ConfigurationError(
            f"file data must be bytes, got {type(data).__name__}; encode "
            f"text first (e.g. text.encode('utf-8'))"
        )


class CheckpointStorage(Protocol):
    """Where checkpoints live. Safe to call from several threads."""

    url: str

    def write_state(self, checkpoint_id: int, name: str, state: Any) -> StateHandle:
        """Serialize ``state`` into a new file ``chk-<id>/<name>.<random token>`` (see
        :func:`state_file_path`: never a file another call wrote); return its handle,
        which names the file."""

    def read_state(self, handle: StateHandle, *, unpickle: bool = True) -> Any:
        """Load the state behind ``handle`` (verifies version, checksum and, with a
        signing key, the MAC, then decodes the state tree and unpickles its pickled
        parts: restoring runs pickled code; ``unpickle=False`` leaves them as
        placeholders and runs nothing)."""

    def verify_state(self, handle: StateHandle) -> bytes:
        """Check the state file behind ``handle`` like :meth:`read_state` without
        decoding it; return its payload."""

    def write_metadata(self, checkpoint_id: int, metadata: dict[str, Any]) -> str:
        """Write ``chk-<id>/_metadata`` atomically (JSON-compatible dict); return the
        checkpoint's path."""

    def read_metadata(self, checkpoint_id: int) -> dict[str, Any]: ...

    def discard(self, checkpoint_id: int) -> None:
        """Delete ``chk-<id>/`` and everything in it (missing is fine)."""

    def discard_handle(self, handle: StateHandle) -> None:
        """Delete one state file (a late acknowledgement's state, M-C5); missing is fine."""

    def completed_ids(self) -> list[int]:
        """Ids of folders that hold a ``_metadata``, ascending."""

    def write_latest(self, checkpoint_id: int) -> None:
        """Durably record ``checkpoint_id`` as the newest completed checkpoint."""

    def read_latest(self) -> int | None: ...

    # raw files: bytes stored as given (no header added, nothing checked) ------------
    def write_file(self, rel: str, data: bytes, *, atomic: bool = False) -> None:
        """Write ``data`` as the file ``rel`` (relative to the storage root), replacing it.
        ``atomic``: readers see the old file or the whole new one, never a part."""

    def read_file(self, rel: str) -> bytes:
        """The bytes of the file ``rel``; ``FileNotFoundError`` when it does not exist."""

    def delete_file(self, rel: str) -> None:
        """Delete the file ``rel``; missing is fine."""

    def exists(self, rel: str) -> bool:
        """Whether the file ``rel`` exists (folders are not files)."""

    def list_files(self, rel_dir: str = "") -> list[str]:
        """Every file under the folder ``rel_dir`` (recursively; ``""`` is the root), as
        sorted paths relative to the storage root (ready for :meth:`read_file`); empty when
        the folder does not exist. Temporary files of atomic writes in progress are left
        out."""


class MemoryCheckpointStorage:
    """In-memory storage for unit tests (same checks as the real one)."""

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self.files: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def write_state(self, checkpoint_id: int, name: str, state: Any) -> StateHandle:
        path = state_file_path(checkpoint_id, name)
        data = encode_tree(state)
        with self._lock:
            self.files[path] = data
        return StateHandle(path, len(data), zlib.crc32(data))

    def verify_state(self, handle: StateHandle) -> bytes:
        with self._lock:
            data = self.files.get(handle.path)
        if data is None or zlib.crc32(data) != handle.checksum:
            raise CorruptCheckpointError(f"state file {handle.path} is missing or corrupt")
        return data

    def read_state(self, handle: StateHandle, *, unpickle: bool = True) -> Any:
        return decode_tree(self.verify_state(handle), unpickle=unpickle, where=handle.path)

    def write_metadata(self, checkpoint_id: int, metadata: dict[str, Any]) -> str:
        if not isinstance(metadata, dict):
            raise TypeError(f"checkpoint metadata must be a dict, got {type(metadata).__name__}")
        path = f"{checkpoint_folder(checkpoint_id)}/{METADATA}"
        # JSON, as the filesystem storage writes it: what is not JSON-compatible fails here too
        data = json.dumps(metadata, allow_nan=False).encode("utf-8")
        with self._lock:
            self.files[path] = data
        separator = "" if self.url.endswith("/") else "/"
        return f"{self.url}{separator}{checkpoint_folder(checkpoint_id)}"

    def read_metadata(self, checkpoint_id: int) -> dict[str, Any]:
        with self._lock:
            data = self.files.get(f"{checkpoint_folder(checkpoint_id)}/{METADATA}")
        if data is None:
            raise FileNotFoundError(f"checkpoint {checkpoint_id} has no metadata")
        result: dict[str, Any] = json.loads(data)
        return result

    def discard(self, checkpoint_id: int) -> None:
        prefix = checkpoint_folder(checkpoint_id) + "/"
        with self._lock:
            for path in [p for p in self.files if p.startswith(prefix)]:
                del self.files[path]

    def discard_handle(self, handle: StateHandle) -> None:
        with self._lock:
            self.files.pop(handle.path, None)

    def completed_ids(self) -> list[int]:
        with self._lock:
            ids = [int(p.split("/")[0][4:]) for p in self.files if p.endswith("/" + METADATA)]
        return sorted(ids)

    def write_latest(self, checkpoint_id: int) -> None:
        with self._lock:
            self.files[LATEST] = str(checkpoint_id).encode()

    def read_latest(self) -> int | None:
        with self._lock:
            data = self.files.get(LATEST)
        return None if data is None else int(data)

    def write_file(self, rel: str, data: bytes, *, atomic: bool = False) -> None:
        """See :meth:`CheckpointStorage.write_file` (a dict update is always atomic)."""
        check_rel(rel)
        check_file_data(data)
        with self._lock:
            self.files[rel] = bytes(data)

    def read_file(self, rel: str) -> bytes:
        check_rel(rel)
        with self._lock:
            data = self.files.get(rel)
        if data is None:
            raise FileNotFoundError(f"{self.url} has no file {rel!r}")
        return data

    def delete_file(self, rel: str) -> None:
        check_rel(rel)
        with self._lock:
            self.files.pop(rel, None)

    def exists(self, rel: str) -> bool:
        check_rel(rel)
        with self._lock:
            return rel in self.files

    def list_files(self, rel_dir: str = "") -> list[str]:
        check_rel(rel_dir, what="folder path", allow_root=True)
        prefix = rel_dir + "/" if rel_dir else ""
        with self._lock:
            return sorted(p for p in self.files if p.startswith(prefix))

    def folders(self) -> set[str]:
        """Checkpoint folders holding at least one file (tests)."""
        with self._lock:
            return {p.split("/")[0] for p in self.files if "/" in p}


def storage_options_of(storage: CheckpointStorage) -> StorageOptions:
    """The signing key and permissions ``storage`` writes and checks files with (the
    defaults for a storage without options, such as the in-memory one)."""
    options = getattr(storage, "options", None)
    return options if isinstance(options, StorageOptions) else DEFAULT_OPTIONS

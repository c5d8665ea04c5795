"""A self-contained copy of a completed checkpoint (M-S3, M-R4): ``lockgate checkpoint export``.

A retained (externalized) checkpoint lives in its job's checkpoint storage and is *not*
self-contained when it is incremental (``RocksDBStateBackend(incremental=True)``): its
``chk-<id>/`` folder holds one file per operator subtask, but those files reference
SST files under the storage's ``shared/`` folder (uploaded by this or an earlier
checkpoint, shared with later ones, deleted by the job once no retained checkpoint
references them), and the RocksDB state names the storage it was written to. Copying
``chk-<id>/`` alone, or deleting the job's storage, loses state.

:func:`export_checkpoint` copies one completed checkpoint into a new folder laid out
like a savepoint folder::

    <dest>/_metadata        the checkpoint's metadata, written last and atomically
    <dest>/<state file>     one per operator subtask (and channel and master states)
    <dest>/shared/...       every shared file the checkpoint references

Guarantees:

* every file is verified before it is copied (state files: header, length and CRC32
  against the handle in ``_metadata``; shared files: size and CRC32) and read back
  after it is written: a damaged checkpoint is never exported, and the export fails
  naming the file;
* the folder refers to nothing outside itself: handles are relative to it, and a
  restore reads the shared files of the RocksDB payloads inside the state files from
  the folder it restores (the payloads' own ``storage_url`` names where they were
  written, and a restore ignores it: :mod:`lockgate.recovery.restore`);
* ``dest`` must not exist or be empty; ``_metadata`` comes last, so an interrupted
  export leaves a folder that no restore accepts; a failed export deletes what it
  wrote (or says which folder to delete);
* the folder restores like the checkpoint itself (``restore_from=dest``,
  ``lockgate run --restore dest``), at any parallelism, and can itself be exported
  again;
* the source is only read, and nothing in it is deserialized: state files are copied
  byte for byte, checked against their handles (size, CRC32 and, with a key, MAC), and
  only ``_metadata`` (JSON) is parsed. Exporting a checkpoint someone else wrote runs
  none of their code (the pickles run when the export is *restored*, which needs the
  signing key or trusted storage: docs/security.md).

Signing: with a signing key (the ``signing_key`` argument, else the environment variable
``LOCKGATE_CHECKPOINT_SIGNING_KEY``, UTF-8), every file read is checked against its MAC
first (unsigned or wrongly signed files fail the export), the files are copied as they
are with their MACs, and ``_metadata``, the one file the export writes anew, is signed
with the key: restore the export with the same key. Without a key, nothing is checked
or signed (MACs already in copied files stay).

An export can be moved as a whole folder, or exported again (``lockgate checkpoint
export OLD NEW``). Savepoints need none of this: they hold canonical state and no
shared files (M-S1).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import zlib
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError, LockgateError
from .coordinator.completed_store import CompletedCheckpoint, handle_json
from .fs_storage import (
    KIND_JSON,
    KIND_PICKLE,
    FileSystemCheckpointStorage,
    decode_file,
    encode_file,
)
from .shared_registry import read_shared_file
from .storage import (
    METADATA,
    CheckpointStorage,
    CorruptCheckpointError,
    storage_options_of,
)
from .storage_options import StorageOptions, signing_key_bytes
from .types import StateHandle

_CHK = re.compile(r"^chk-(0|[1-9][0-9]*)$")


class ExportError(LockgateError, RuntimeError):
    """A checkpoint cannot be exported: it is missing, damaged, or cannot be read."""


@dataclass(frozen=True)
class ExportedCheckpoint:
    """What :func:`export_checkpoint` wrote."""

    checkpoint_id: int
    #: the export's folder (a local path or URL): what ``restore_from`` takes
    location: str
    #: where the checkpoint was read from
    source: str
    state_files: int
    shared_files: int
    bytes_written: int


SIGNING_KEY_ENV = "LOCKGATE_CHECKPOINT_SIGNING_KEY"


def export_checkpoint(
    source: str, dest: str, *, signing_key: bytes | str | None = None
) -> ExportedCheckpoint:
    """Copy the completed checkpoint at ``source`` into the new folder ``dest`` so that
    ``dest`` restores on its own (see the module docstring for the guarantees).

    ``source``: a ``chk-<id>`` folder, a checkpoint storage (its newest completed
    checkpoint) or a savepoint or exported folder (a folder holding ``_metadata``);
    local paths or URLs. ``dest``: a local path or URL that does not exist yet or is an
    empty folder.

    Raises :class:`~lockgate.errors.ConfigurationError` when ``source`` or ``dest``
    cannot be used as given (missing source folder, ``dest`` not empty, ...) and
    :class:`ExportError` (or :class:`~lockgate.checkpoint.storage.CorruptCheckpointError`,
    for a file that fails its check) when the checkpoint cannot be exported.

    ``signing_key``: the job's ``checkpoint_config.signing_key`` (None: the environment
    variable ``LOCKGATE_CHECKPOINT_SIGNING_KEY`` if set): files are checked and the
    export is signed with it (see the module docstring).
    """
    if signing_key is None and os.environ.get(SIGNING_KEY_ENV):
        signing_key = os.environ[SIGNING_KEY_ENV]
    options = StorageOptions(signing_key=signing_key_bytes(signing_key))
    src, metadata, where = _open_source(source, options)
    try:
        checkpoint = CompletedCheckpoint.from_metadata(metadata)
    except (ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{where}: its _metadata is not valid: {e}") from e
    out = _open_dest(dest, options)
    copier = _Copier(src, out, where)
    try:
        operators = {
            uid: {
                str(subtask): copier.state_file(handle)
                for subtask, handle in sorted(by_subtask.items())
            }
            for uid, by_subtask in sorted(checkpoint.operator_states.items())
        }
        masters = {
            ident: copier.state_file(handle)
            for ident, handle in sorted(checkpoint.master_states.items())
        }
        exported = dict(metadata)  # keeps every other field as it is
        exported["operators"] = operators
        exported["master_states"] = masters
        if isinstance(exported.get("stats"), dict):
            exported["stats"] = {**exported["stats"], "external_path": out.url}
        payload = json.dumps(exported, allow_nan=False).encode("utf-8")
        copier.write(METADATA, encode_file(payload, KIND_JSON, options), atomic=True)  # last
    except (ExportError, CorruptCheckpointError) as e:
        raise type(e)(f"{e}; {copier.remove_written()}") from e
    except OSError as e:
        raise ExportError(f"writing the export failed: {e}; {copier.remove_written()}") from e
    return ExportedCheckpoint(
        checkpoint_id=checkpoint.checkpoint_id,
        location=out.url,
        source=where,
        state_files=copier.state_files,
        shared_files=copier.shared_files,
        bytes_written=copier.bytes_written,
    )


# --------------------------------------------------------------------------- source and dest


def _is_url(path: str) -> bool:
    return "://" in path


def _filesystem_storage(
    url: str, what: str, given: str, options: StorageOptions
) -> FileSystemCheckpointStorage:
    if url.startswith("memory://"):
        raise ConfigurationError(
            f"{what} {given!r}: a checkpoint export reads and writes filesystem paths or URLs "
            "(local, file://, s3://, ...), not memory://"
        )
    try:
        # not open_storage(url, options): an export must not change the options other
        # code of this process opens the storage with
        return FileSystemCheckpointStorage(url, options)
    except Exception as e:
        raise ConfigurationError(f"{what} {given!r} cannot be opened: {e}") from e


def _open_source(
    source: str, options: StorageOptions
) -> tuple[CheckpointStorage, dict[str, Any], str]:
    """The storage whose root the handles of the checkpoint at ``source`` are relative
    to, the checkpoint's metadata, and a description of where it is."""
    if not isinstance(source, str) or not source.strip():
        raise ConfigurationError(
            f"the checkpoint to export must be a chk-<id> folder, a checkpoint storage or a "
            f"savepoint folder, got {source!r}"
        )
    trimmed = source.rstrip("/") or source
    if not _is_url(trimmed):
        trimmed = os.path.abspath(os.path.expanduser(trimmed))
        if not os.path.isdir(trimmed):
            raise ConfigurationError(
                f"checkpoint {source!r}: no such folder; give a chk-<id> folder, a checkpoint "
                "storage folder or a savepoint folder"
            )
        head, name = os.path.split(trimmed)
    else:
        head, name = posixpath.split(trimmed)
    match = _CHK.match(name)
    if match is not None:
        storage = _filesystem_storage(head, "checkpoint", source, options)
        checkpoint_id = int(match.group(1))
        try:
            return storage, storage.read_metadata(checkpoint_id), trimmed
        except FileNotFoundError as e:
            raise ExportError(
                f"checkpoint {source!r} has no _metadata: it never completed, or it was "
                "discarded; export a completed checkpoint (one whose folder holds _metadata)"
            ) from e
    storage = _filesystem_storage(trimmed, "checkpoint", source, options)
    if storage.exists(METADATA):  # a savepoint or an exported checkpoint
        return storage, _read_folder_metadata(storage), trimmed
    ids = storage.completed_ids()
    if not ids:
        raise ExportError(
            f"{source!r} holds no completed checkpoint (no chk-<id>/_metadata) and is no "
            "savepoint folder; give a chk-<id> folder, a checkpoint storage or a savepoint "
            "folder"
        )
    newest = max(ids)
    return storage, storage.read_metadata(newest), f"{trimmed}/chk-{newest}"


def _read_folder_metadata(storage: CheckpointStorage) -> dict[str, Any]:
    where = f"{storage.url.rstrip('/')}/{METADATA}"
    payload, _ = decode_file(
        storage.read_file(METADATA), KIND_JSON, where, storage_options_of(storage)
    )
    try:
        metadata = json.loads(payload.decode("utf-8"))
    except ValueError as e:
        raise CorruptCheckpointError(f"{where} holds invalid JSON: {e}") from e
    if not isinstance(metadata, dict):
        raise CorruptCheckpointError(f"{where} does not hold a JSON object")
    return metadata


def _open_dest(dest: str, options: StorageOptions) -> FileSystemCheckpointStorage:
    if not isinstance(dest, str) or not dest.strip():
        raise ConfigurationError(
            f"the export needs a destination folder path or URL (e.g. '/data/exports/chk-7' "
            f"or 's3://bucket/exports/chk-7'), got {dest!r}"
        )
    if not _is_url(dest):
        path = os.path.abspath(os.path.expanduser(dest))
        if os.path.exists(path) and not os.path.isdir(path):
            raise ConfigurationError(f"export destination {dest!r} is a file; give a new folder")
        if os.path.isdir(path) and os.listdir(path):
            raise ConfigurationError(
                f"export destination {dest!r} exists and is not empty; give a new folder (an "
                "export never overwrites or mixes with other files)"
            )
    out = _filesystem_storage(dest, "export destination", dest, options)
    if out.list_files(""):
        raise ConfigurationError(
            f"export destination {dest!r} exists and is not empty; give a new folder (an "
            "export never overwrites or mixes with other files)"
        )
    return out


# --------------------------------------------------------------------------- copying


class _Copier:
    """Copies state and shared files from ``src`` to ``out``, each file once, verified."""

    def __init__(
        self, src: CheckpointStorage, out: FileSystemCheckpointStorage, where: str
    ) -> None:
        self.src = src
        self.out = out
        self.where = where
        self._states: dict[str, dict[str, Any]] = {}  # source path -> exported handle
        self._shared: dict[str, dict[str, Any]] = {}
        self._names: dict[str, str] = {}  # exported path -> source path
        self._written: list[str] = []
        self.state_files = 0
        self.shared_files = 0
        self.bytes_written = 0

    def state_file(self, handle: StateHandle) -> dict[str, Any]:
        """Copy one state file (and the shared files it references); its exported handle."""
        done = self._states.get(handle.path)
        if done is not None:
            return done
        data, crc = self._read_state(handle)  # checked, never unpickled
        name = self._target(handle.path.rsplit("/", 1)[-1], handle.path)
        self.write(name, data)
        exported = handle_json(StateHandle(name, len(data), crc))
        if handle.shared:
            exported["shared"] = [self.shared_file(s) for s in handle.shared]
        self._states[handle.path] = exported
        self.state_files += 1
        return exported

    def shared_file(self, handle: StateHandle) -> dict[str, Any]:
        """Copy one shared file to the same path under the export (the RocksDB payloads
        name it by that path); its handle."""
        done = self._shared.get(handle.path)
        if done is not None:
            return done
        data = read_shared_file(self.src, handle)  # checks size and CRC32
        self.write(self._target(handle.path, handle.path), data)
        exported = handle_json(handle)
        self._shared[handle.path] = exported
        self.shared_files += 1
        return exported

    def write(self, rel: str, data: bytes, *, atomic: bool = False) -> None:
        """Write ``data`` to ``rel`` in the export and read it back to check it."""
        self._written.append(rel)
        self.out.write_file(rel, data, atomic=atomic)
        back = self.out.read_file(rel)
        if back != data:
            raise ExportError(
                f"{self.out.location(rel)} does not read back as written ({len(back)} bytes "
                f"with CRC32 {zlib.crc32(back):#010x}, wrote {len(data)} bytes with CRC32 "
                f"{zlib.crc32(data):#010x}): the destination storage is unreliable"
            )
        self.bytes_written += len(data)

    def remove_written(self) -> str:
        """Delete the files written so far (the export failed; the destination was new or
        empty, so they are all ours); say what is left."""
        left = []
        for rel in reversed(self._written):
            try:
                self.out.delete_file(rel)
            except Exception:  # noqa: BLE001 - reported below
                left.append(rel)
        if left:
            return (
                f"{self.out.url} holds a partial export without {METADATA} (no restore "
                f"accepts it): delete it before exporting again"
            )
        return f"the files written to {self.out.url} were deleted"

    def _target(self, rel: str, source_path: str) -> str:
        other = self._names.setdefault(rel, source_path)
        if other != source_path:
            raise ExportError(
                f"{self.where}: the files {other} and {source_path} would both be exported as "
                f"{rel}; this checkpoint cannot be exported into one folder"
            )
        return rel

    def _read_state(self, handle: StateHandle) -> tuple[bytes, int]:
        where = f"{self.where}: state file {handle.path}"
        try:
            data = self.src.read_file(handle.path)
        except FileNotFoundError as e:
            raise CorruptCheckpointError(f"{where} is missing") from e
        _, crc = decode_file(data, KIND_PICKLE, where, storage_options_of(self.src))
        if crc != handle.checksum or len(data) != handle.size:
            raise CorruptCheckpointError(
                f"{where} does not match its handle: {len(data)} bytes with CRC32 {crc:#010x}, "
                f"the handle says {handle.size} bytes with CRC32 {handle.checksum:#010x}"
            )
        return data, crc

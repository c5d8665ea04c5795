"""Shared state files of incremental checkpoints (M-R4, M-C8).

An incremental checkpoint (the RocksDB backend's) writes the files that are new
since the previous completed checkpoint and *references* the ones that were
uploaded before. Such files live outside any ``chk-<id>/`` folder::

    shared/<operator uid>/<subtask>/<checkpoint id>-<unique>-<name>

and the handle of the operator's state file lists them (``StateHandle.shared``),
so they reach the driver with the acknowledgement and are recorded in
``_metadata``.

Task side
---------
* :class:`SharedStateUploader`: the only channel through which a snapshot view
  writes shared files (``view.materialize_to(uploader)``) for one checkpoint of one
  operator subtask. It writes new files, hands out the handles of files a
  completed checkpoint already uploaded (:meth:`~SharedStateUploader.reuse`) and
  records every file the snapshot references.
* :class:`SharedFileTracker` (one per subtask): remembers what each checkpoint
  uploaded and referenced; only the files of the newest checkpoint *known to be
  complete* may be reused (a file uploaded for a checkpoint that is then aborted is
  deleted by the driver). An abort notice forgets everything, so the next
  checkpoint uploads all its files again: this also heals a missed completion
  notice (see below).

Driver side
-----------
:class:`SharedStateRegistry` (owned by the completed-checkpoint store) counts, per
shared file, the retained checkpoints that reference it, and guarantees:

* a shared file is deleted only when no registered (retained) checkpoint
  references it: discarding an old checkpoint never breaks a retained one;
* :meth:`~SharedStateRegistry.check_available` refuses a checkpoint that
  references a file which is neither registered nor in storage (a task reused the
  file of a checkpoint it did not know was discarded): that checkpoint fails
  instead of completing unrestorable;
* :meth:`~SharedStateRegistry.discard_unreferenced` deletes the files of an
  aborted checkpoint that no retained checkpoint references, and
  :meth:`~SharedStateRegistry.delete_orphans` the files nothing references at all
  (those of tasks that died before acknowledging), so they do not leak.

Not locked: the driver calls the registry under the coordinator's lock.
"""

from __future__ import annotations

import hmac
import logging
import re
import threading
import uuid
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence

from ..errors import ConfigurationError
from .storage import CheckpointStorage, CorruptCheckpointError, storage_options_of
from .transfers import transfer_all
from .types import StateHandle

log = logging.getLogger(__name__)

#: the folder of the shared files, under the storage root
SHARED_FOLDER = "shared"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _segment(text: str) -> str:
    """``text`` as one safe path segment (characters outside ``[A-Za-z0-9._-]`` become
    ``_``; never empty, never ``.`` or ``..``)."""
    safe = _UNSAFE.sub("_", text)
    return safe if safe.strip(".") else f"_{safe}"


def shared_files(handles: Iterable[StateHandle]) -> list[StateHandle]:
    """The shared files ``handles`` reference, each once (first occurrence wins)."""
    seen: dict[str, StateHandle] = {}
    for handle in handles:
        for shared in handle.shared:
            seen.setdefault(shared.path, shared)
    return list(seen.values())


def read_shared_file(storage: CheckpointStorage, handle: StateHandle) -> bytes:
    """The bytes of the shared file ``handle``, checked against its size and CRC32;
    :class:`~lockgate.checkpoint.storage.CorruptCheckpointError` naming it when it is
    missing or does not match."""
    try:
        data = storage.read_file(handle.path)
    except FileNotFoundError as e:
        raise CorruptCheckpointError(
            f"shared state file {handle.path} in {storage.url} is missing (deleted while a "
            f"checkpoint still references it?)"
        ) from e
    crc = zlib.crc32(data)
    if len(data) != handle.size or crc != handle.checksum:
        raise CorruptCheckpointError(
            f"shared state file {handle.path} in {storage.url} does not match its handle: "
            f"{len(data)} bytes with CRC32 {crc:#010x}, the handle says {handle.size} bytes "
            f"with CRC32 {handle.checksum:#010x}"
        )
    options = storage_options_of(storage)
    if options.signed:
        if not handle.mac:
            raise CorruptCheckpointError(
                f"shared state file {handle.path} in {storage.url} is not signed, and "
                f"checkpoint_config.signing_key is set: refusing to load it"
            )
        if not hmac.compare_digest(options.mac(data).hex(), handle.mac):
            raise CorruptCheckpointError(
                f"shared state file {handle.path} in {storage.url} is not signed with this "
                f"job's signing key (its HMAC-SHA256 does not match): refusing to load it"
            )
    return data


# ---------------------------------------------------------------------------- task side


class SharedStateUploader:
    """Writes and reuses the shared files of one snapshot: one checkpoint of one
    operator subtask (``owner``, e.g. ``"<uid>/<subtask>"``).

    ``previous``: file key -> handle of the files a completed checkpoint uploaded,
    which this snapshot may reference without uploading them again. A file key is
    chosen by the snapshot view and names the file's content for good (e.g. the
    database's id and the SST file's name); keys of the views of one operator must
    not collide. Used by one thread at a time (the asynchronous part).
    """

    def __init__(
        self,
        storage: CheckpointStorage,
        checkpoint_id: int,
        owner: str,
        previous: Mapping[str, StateHandle] | None = None,
    ) -> None:
        if (
            isinstance(checkpoint_id, bool)
            or not isinstance(checkpoint_id, int)
            or checkpoint_id < 0
        ):
            raise ConfigurationError(
                f"SharedStateUploader needs a checkpoint id >= 0, got {checkpoint_id!r}"
            )
        if not isinstance(owner, str) or not owner.strip("/"):
            raise ConfigurationError(
                f"SharedStateUploader needs an owner such as '<operator uid>/<subtask>', "
                f"got {owner!r}"
            )
        self.storage = storage
        self.checkpoint_id = checkpoint_id
        self.owner = owner
        self.folder = "/".join([SHARED_FOLDER] + [_segment(p) for p in owner.split("/") if p])
        self._previous = dict(previous or {})
        self._referenced: dict[str, StateHandle] = {}  # file key -> handle
        self._uploaded: list[StateHandle] = []
        self._lock = threading.Lock()  # _uploaded, written by parallel uploads
        #: bytes written by :meth:`upload` (what this checkpoint added to storage)
        self.uploaded_bytes = 0
        #: bytes of the files referenced through :meth:`reuse` (not written again)
        self.reused_bytes = 0

    def reuse(self, key: str) -> StateHandle | None:
        """The handle of the file ``key`` if a completed checkpoint uploaded it (and
        record the reference), else None: then :meth:`upload` it."""
        handle = self._referenced.get(key)
        if handle is not None:
            return handle
        handle = self._previous.get(key)
        if handle is not None:
            self._referenced[key] = handle
            self.reused_bytes += handle.size
        return handle

    def upload(self, key: str, data: bytes, name: str = "file") -> StateHandle:
        """Write ``data`` as a new shared file for ``key`` (``name``: the last part of
        its file name, for people reading the folder) and record the reference."""
        handle = self._write_new(key, data, name)
        self._record(key, handle)
        return handle

    def _write_new(self, key: str, data: bytes, name: str) -> StateHandle:
        """Write a new shared file (thread-safe); remembered for :meth:`discard_uploads`
        at once, referenced only by :meth:`_record`."""
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"a shared file needs a non-empty str key, got {key!r}")
        rel = f"{self.folder}/{self.checkpoint_id}-{uuid.uuid4().hex[:16]}-{_segment(name)}"
        self.storage.write_file(rel, data)
        options = storage_options_of(self.storage)
        handle = StateHandle(
            rel, len(data), zlib.crc32(data), mac=options.mac(data).hex() if options.signed else ""
        )
        with self._lock:
            self._uploaded.append(handle)
        return handle

    def _record(self, key: str, handle: StateHandle) -> None:
        self._referenced[key] = handle
        self.uploaded_bytes += handle.size

    def upload_files(
        self,
        files: Sequence[tuple[str, str, str]],
        threads: int = 1,
        before_each: Callable[[], None] | None = None,
    ) -> list[StateHandle]:
        """:meth:`upload` the bytes of each local file ``(key, local_path, name)``, up
        to ``threads`` at once (an object store's request latency bounds one stream);
        the handles in the order given, each file referenced in that order once all were
        written. ``before_each`` runs before each file (it raises to stop: e.g. the
        snapshot was released). The first failure is raised once the uploads already
        running ended; every file written is still deleted by :meth:`discard_uploads`."""

        def one(item: tuple[str, str, str]) -> StateHandle:
            if before_each is not None:
                before_each()
            key, path, name = item
            with open(path, "rb") as f:
                data = f.read()
            return self._write_new(key, data, name)

        handles = transfer_all(one, files, threads, "lockgate-upload")
        for (key, _, _), handle in zip(files, handles, strict=True):
            self._record(key, handle)
        return handles

    def referenced(self) -> tuple[StateHandle, ...]:
        """Every shared file this snapshot references, uploaded or reused, in the
        order first referenced (what ``StateHandle.shared`` carries)."""
        return tuple(self._referenced.values())

    def files(self) -> dict[str, StateHandle]:
        """File key -> handle of every file referenced (what a later checkpoint may
        reuse once this one is complete)."""
        return dict(self._referenced)

    def discard_uploads(self) -> None:
        """Delete the files this uploader wrote (the snapshot was cancelled or failed;
        reused files are left alone). Best effort; failures are logged."""
        with self._lock:
            uploaded, self._uploaded = self._uploaded, []
        for handle in uploaded:
            try:
                self.storage.delete_file(handle.path)
            except Exception as e:  # noqa: BLE001 - leftover files only cost space
                log.warning("could not delete shared file %s: %s", handle.path, e)


class SharedFileTracker:
    """Per subtask: which shared files the next checkpoint may reuse (task side).

    Only files of the newest checkpoint this subtask knows to be complete are offered
    for reuse: the driver keeps them while that checkpoint is retained, and a newer
    completed checkpoint that reused them registers them too. Thread-safe (the
    asynchronous part records, the task thread confirms and aborts).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: owner -> file key -> handle, of the newest checkpoint known to be complete
        self._confirmed: dict[str, dict[str, StateHandle]] = {}
        self._confirmed_id: int | None = None
        #: checkpoint id -> owner -> file key -> handle, snapshotted and not yet confirmed
        self._pending: dict[int, dict[str, dict[str, StateHandle]]] = {}

    def uploader(
        self, storage: CheckpointStorage, checkpoint_id: int, owner: str
    ) -> SharedStateUploader:
        """An uploader for ``owner``'s snapshot of ``checkpoint_id``, offering the files
        of the newest confirmed checkpoint for reuse."""
        with self._lock:
            previous = dict(self._confirmed.get(owner, {}))
        return SharedStateUploader(storage, checkpoint_id, owner, previous)

    def snapshot_done(self, checkpoint_id: int, uploaders: Iterable[SharedStateUploader]) -> None:
        """The asynchronous part of ``checkpoint_id`` wrote its state through
        ``uploaders`` (call before acknowledging). Without uploaders (a savepoint, or no
        incremental state) nothing is recorded: its completion keeps the files offered
        now."""
        files: dict[str, dict[str, StateHandle]] = {}
        for up in uploaders:
            files.setdefault(up.owner, {}).update(up.files())
        if not files:
            return
        with self._lock:
            self._pending[checkpoint_id] = files

    def complete(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` is complete: its files become the ones to reuse (if it is
        newer than the confirmed one); older pending records are dropped."""
        with self._lock:
            files = self._pending.pop(checkpoint_id, None)
            for older in [i for i in self._pending if i < checkpoint_id]:
                del self._pending[older]
            if files is None or (
                self._confirmed_id is not None and checkpoint_id <= self._confirmed_id
            ):
                return
            self._confirmed = files
            self._confirmed_id = checkpoint_id

    def abort(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` was aborted: forget it, and forget the confirmed files too,
        so the next checkpoint uploads everything again (an abort may mean that this
        subtask missed a completion and reused files that are gone)."""
        with self._lock:
            self._pending.pop(checkpoint_id, None)
            self._confirmed = {}
            self._confirmed_id = None

    @property
    def confirmed_checkpoint(self) -> int | None:
        """The id of the checkpoint whose files are offered for reuse, or None."""
        with self._lock:
            return self._confirmed_id


# ---------------------------------------------------------------------------- driver side


class SharedStateRegistry:
    """Reference counts of the shared files of the retained checkpoints (driver side;
    see the module docstring)."""

    def __init__(self, storage: CheckpointStorage) -> None:
        self.storage = storage
        self._refs: dict[str, int] = {}  # shared path -> number of registered checkpoints
        self._by_checkpoint: dict[int, frozenset[str]] = {}

    def register(self, checkpoint_id: int, handles: Iterable[StateHandle]) -> None:
        """Count ``checkpoint_id``'s references to the shared files of ``handles`` (once
        per checkpoint: registering the same checkpoint again changes nothing)."""
        if checkpoint_id in self._by_checkpoint:
            return
        paths = frozenset(h.path for h in shared_files(handles))
        self._by_checkpoint[checkpoint_id] = paths
        for path in paths:
            self._refs[path] = self._refs.get(path, 0) + 1

    def unregister(self, checkpoint_id: int) -> list[str]:
        """Drop ``checkpoint_id``'s references (it was discarded) and delete the files no
        registered checkpoint references any more; returns their paths."""
        paths = self._by_checkpoint.pop(checkpoint_id, frozenset())
        unused = []
        for path in sorted(paths):
            count = self._refs.get(path, 0) - 1
            if count > 0:
                self._refs[path] = count
            else:
                self._refs.pop(path, None)
                unused.append(path)
        return self._delete(unused)

    def references(self, path: str) -> int:
        """How many registered checkpoints reference the shared file ``path``."""
        return self._refs.get(path, 0)

    def registered(self) -> list[int]:
        """The ids of the registered checkpoints, ascending."""
        return sorted(self._by_checkpoint)

    def referenced_paths(self) -> set[str]:
        """Every shared file a registered checkpoint references."""
        return set(self._refs)

    def check_available(self, checkpoint_id: int, handles: Iterable[StateHandle]) -> None:
        """Raise :class:`~lockgate.checkpoint.storage.CorruptCheckpointError` when
        ``checkpoint_id`` references a shared file that is neither registered nor in
        storage (checked with one ``exists`` per unregistered file: the ones it
        uploaded itself)."""
        for shared in shared_files(handles):
            if shared.path in self._refs:
                continue
            if not self.storage.exists(shared.path):
                raise CorruptCheckpointError(
                    f"checkpoint {checkpoint_id} references the shared state file "
                    f"{shared.path}, which no longer exists in {self.storage.url} (its "
                    "checkpoint was discarded before the task learned that a newer one "
                    "completed); the checkpoint cannot be used and the next one uploads "
                    "its files again"
                )

    def discard_unreferenced(self, handles: Iterable[StateHandle]) -> list[str]:
        """Delete the shared files of ``handles`` (an aborted checkpoint's, or a late
        acknowledgement's) that no registered checkpoint references; returns them."""
        return self._delete(
            sorted(h.path for h in shared_files(handles) if h.path not in self._refs)
        )

    def delete_orphans(self) -> list[str]:
        """Delete every file under ``shared/`` that no registered checkpoint references
        (uploads of checkpoints that never completed, e.g. of a task that died before
        acknowledging). Call only while no checkpoint is in progress (before the first
        trigger of a run); returns the deleted paths."""
        try:
            present = self.storage.list_files(SHARED_FOLDER)
        except Exception as e:  # noqa: BLE001 - leftover files only cost space
            log.warning("listing the shared state files in %s failed: %s", self.storage.url, e)
            return []
        return self._delete([p for p in present if p not in self._refs])

    def _delete(self, paths: list[str]) -> list[str]:
        deleted = []
        for path in paths:
            try:
                self.storage.delete_file(path)
                deleted.append(path)
            except Exception as e:  # noqa: BLE001 - leftover files only cost space
                log.warning("deleting shared state file %s failed: %s", path, e)
        return deleted

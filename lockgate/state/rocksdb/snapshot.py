"""The snapshot views of the RocksDB keyed state backend (M-T3, M-T4, M-R4).

``RocksDBKeyedStateBackend.snapshot()`` (the synchronous part) flushes the
database and makes a RocksDB checkpoint, a folder of hard links, in
milliseconds; the view reads only that folder, so the task keeps processing (and
RocksDB keeps compacting) while the asynchronous part runs on another thread:

* :meth:`RocksDBSnapshot.materialize` returns the canonical snapshot (what the heap
  backend's ``materialize`` returns, and savepoints hold): TTL state with
  ``cleanup_on_snapshot`` leaves out what was expired when ``snapshot()`` ran;
* :meth:`IncrementalRocksDBSnapshot.materialize_to` (``incremental=True`` only)
  writes the incremental checkpoint: SST files through the uploader, reusing the
  ones a completed checkpoint uploaded, and returns the native payload
  (:mod:`lockgate.state.rocksdb.files`) with the small private files inline;
* :meth:`RocksDBSnapshot.release` (idempotent, any thread) deletes the folder once
  no ``materialize`` reads it; a running ``materialize`` stops early with
  :class:`~lockgate.state.keyed.SnapshotReleasedError`.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..keyed import SNAPSHOT_FORMAT, SnapshotReleasedError
from ..ttl import StateTtlConfig, drop_expired
from ..typed.registry import FrozenTypes
from .codec import decode_key, loads, split_row
from .files import (
    NATIVE_FORMAT,
    NATIVE_VERSION,
    first_and_last_row,
    is_shared_file,
    open_read_only,
    rows,
    state_files,
)
from .local_copies import LocalCopies

log = logging.getLogger(__name__)

_CHECK_EVERY = 4096


@dataclass(frozen=True)
class StateInfo:
    """One keyed state in the database: its kind and its id (row key bytes 2-3)."""

    kind: str
    state_id: int


class RocksDBSnapshot:
    """A consistent, immutable view of the backend's database (a RocksDB checkpoint
    folder at ``path``). ``materialize`` and ``release`` may run on any thread."""

    def __init__(
        self,
        *,
        operator_name: str,
        max_parallelism: int,
        path: str,
        db_id: str,
        states: dict[str, StateInfo],
        expiry: dict[str, tuple[StateTtlConfig, int]],
        on_release: Callable[[RocksDBSnapshot], None],
        typed: FrozenTypes | None = None,
        local_copies: Callable[[str], LocalCopies | None] | None = None,
        transfer_threads: int = 1,
    ) -> None:
        self.operator_name = operator_name
        #: SST files an incremental checkpoint uploads at once
        self.transfer_threads = transfer_threads
        #: the task-local copies for a storage URL (None: no local recovery)
        self._local_copies = local_copies
        self._typed = typed
        self.max_parallelism = max_parallelism
        self.path = path
        self.db_id = db_id
        self._states = dict(states)
        self._expiry = dict(expiry)
        self._on_release = on_release
        self._lock = threading.Lock()
        self._readers = 0
        self._released = False
        self._deleted = False

    @property
    def released(self) -> bool:
        return self._released

    def state_names(self) -> list[str]:
        return list(self._states)

    def materialize(self) -> dict[str, Any]:
        """The canonical snapshot ``{"format": 1, "max_parallelism": M, "states": {name:
        {"kind": kind, "key_groups": {key_group: {key: stored}}}}}``, read from the
        snapshot folder (every registered or restored state appears, empty or not).
        Raises :class:`SnapshotReleasedError` if the view is (or gets) released."""
        self._enter()
        try:
            by_id = {info.state_id: (name, info.kind) for name, info in self._states.items()}
            groups: dict[str, dict[int, dict[Any, Any]]] = {name: {} for name in self._states}
            db = open_read_only(self.path)
            try:
                for i, (row, raw) in enumerate(rows(db)):
                    if i % _CHECK_EVERY == _CHECK_EVERY - 1:
                        self._check_released()
                    key_group, state_id, encoded = split_row(row)
                    found = by_id.get(state_id)
                    if found is None:
                        continue
                    name, kind = found
                    stored = loads(raw)
                    expiry = self._expiry.get(name)
                    if expiry is not None:
                        stored = drop_expired(kind, stored, expiry[0], expiry[1])
                        if stored is None:
                            continue
                    groups[name].setdefault(key_group, {})[decode_key(encoded)] = stored
            finally:
                db.close()
                del db
            self._check_released()
            states = {
                name: {"kind": self._states[name].kind, "key_groups": groups[name]}
                for name in self._states
            }
            if self._typed:
                states = self._typed.encode(states, self.max_parallelism)
            return {
                "format": SNAPSHOT_FORMAT,
                "max_parallelism": self.max_parallelism,
                "states": states,
            }
        finally:
            self._leave()

    def release(self) -> None:
        """Give the view back (idempotent): the folder is deleted once no
        ``materialize`` reads it; a running one stops early."""
        with self._lock:
            if self._released:
                return
            self._released = True
            delete = self._readers == 0 and not self._deleted
            if delete:
                self._deleted = True
        if delete:
            self._delete()

    # -- internals ------------------------------------------------------------------------
    def _enter(self) -> None:
        with self._lock:
            if self._released:
                raise SnapshotReleasedError(
                    f"operator '{self.operator_name}': this RocksDB state snapshot was "
                    "released; it cannot be materialized any more"
                )
            self._readers += 1

    def _leave(self) -> None:
        with self._lock:
            self._readers -= 1
            delete = self._released and self._readers == 0 and not self._deleted
            if delete:
                self._deleted = True
        if delete:
            self._delete()

    def _check_released(self) -> None:
        if self._released:
            raise SnapshotReleasedError(
                f"operator '{self.operator_name}': the RocksDB state snapshot was released "
                "(cancelled) while it was being materialized"
            )

    def _delete(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        try:
            self._on_release(self)
        except Exception:  # the folder is gone; bookkeeping must not raise here
            log.exception("operator '%s': releasing a RocksDB snapshot failed", self.operator_name)


class IncrementalRocksDBSnapshot(RocksDBSnapshot):
    """A view that can also write an incremental checkpoint (``incremental=True``)."""

    def materialize_to(self, uploader: Any) -> dict[str, Any]:
        """The incremental checkpoint (M-R4): every SST file of the view is reused from
        a completed checkpoint (``uploader.reuse``) or uploaded
        (``uploader.upload_files``, ``transfer_threads`` at once); the private files
        travel inline. Returns the native payload (:mod:`lockgate.state.rocksdb.files`);
        ``restore`` applies it. Raises :class:`SnapshotReleasedError` if the view is (or
        gets) released: no file starts uploading after that."""
        self._enter()
        try:
            sst: dict[str, Any] = {}
            private: dict[str, bytes] = {}
            new: list[tuple[str, str, str]] = []  # (key, path, name) to upload
            for name in state_files(self.path):
                self._check_released()
                full = os.path.join(self.path, name)
                if not is_shared_file(name):
                    with open(full, "rb") as f:
                        private[name] = f.read()
                    continue
                key = f"{self.db_id}/{name}"
                handle = uploader.reuse(key)
                if handle is None or handle.size != os.path.getsize(full):
                    new.append((key, full, name))
                sst[name] = handle
            self._check_released()
            # the files no completed checkpoint holds, transfer_threads at a time
            handles = uploader.upload_files(new, self.transfer_threads, self._check_released)
            for (_, _, name), handle in zip(new, handles, strict=True):
                sst[name] = handle
            self._check_released()
            copies = self._local_copies(uploader.storage.url) if self._local_copies else None
            if copies is not None:  # task-local recovery: a hard link per SST file
                for name, handle in sst.items():
                    copies.keep(handle, os.path.join(self.path, name))
                copies.snapshot_kept(list(sst.values()))
            span = self._key_group_span()
            return {
                "format": NATIVE_FORMAT,
                "version": NATIVE_VERSION,
                "max_parallelism": self.max_parallelism,
                "storage_url": uploader.storage.url,
                "states": {
                    name: {"kind": info.kind, "id": info.state_id}
                    for name, info in self._states.items()
                },
                "sst": sst,
                "private": private,
                "key_group_span": span,
                **(self._typed.native() if self._typed else {}),
            }
        finally:
            self._leave()

    def _key_group_span(self) -> tuple[int, int] | None:
        """``(first key group, last key group + 1)`` of the rows in the view, or None."""
        db = open_read_only(self.path)
        try:
            rows = first_and_last_row(db)
        finally:
            db.close()
            del db
        if rows is None:
            return None
        return split_row(rows[0])[0], split_row(rows[1])[0] + 1

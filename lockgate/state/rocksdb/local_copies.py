"""Task-local recovery for the RocksDB backend (Flink's ``state.backend.local-recovery``).

A subtask with ``RocksDBStateBackend(incremental=True, local_recovery=True)`` keeps, on
its own disk, a copy of every SST file its incremental checkpoints reference: a hard
link to the file in the snapshot's RocksDB checkpoint folder (no bytes copied; SST files
never change). When the subtask restores on the same host (a restart after a failure,
the same subtask of the same operator on the same checkpoint storage), each SST file
comes from that copy instead of the storage; only what is missing or does not match
its handle is read from the storage. A restart therefore does not download the state
again.

Guarantees:

* a local copy is used only when its size and CRC32 match the handle the checkpoint
  recorded (and its HMAC, when the storage signs its files): the bytes restored are
  those the storage holds; a copy that does not match is deleted and the storage's
  file read instead;
* the folder belongs to one (checkpoint storage, operator, subtask):
  ``<local_dir>/lockgate-local-recovery/<storage hash>/<operator>-<subtask>/``, mode
  0700; only a backend of that same operator and subtask deletes in it, and only copies
  no snapshot of its last two references (the newest completed checkpoint may be
  the one before the newest snapshot); ``last-restore.json`` there says how many files
  the last restore took from the copies and from the storage;
* nothing else depends on it: losing the folder (another host, a wiped disk) only
  means the restore reads the storage, as without local recovery.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import zlib
from collections import deque
from typing import Any

from ...checkpoint.storage import CheckpointStorage, storage_options_of
from ...checkpoint.types import StateHandle

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
#: the file recording how the last restore went: {"local": n, "storage": m}
LAST_RESTORE = "last-restore.json"
#: snapshots whose files are kept (the newest completed one may be the one before)
KEPT_GENERATIONS = 2
_READ_CHUNK = 8 << 20


def copy_name(handle: StateHandle) -> str:
    """The local file name of the copy of shared file ``handle`` (unique per path)."""
    return hashlib.sha256(handle.path.encode()).hexdigest()[:40] + ".sst"


class LocalCopies:
    """The local copies of one subtask's SST files (see the module docstring)."""

    def __init__(self, base: str, storage_url: str, operator_name: str, subtask: int) -> None:
        self.storage_url = storage_url
        storage = hashlib.sha256(storage_url.encode()).hexdigest()[:16]
        name = _UNSAFE.sub("_", operator_name)[:60] or "operator"
        self.folder = os.path.join(base, "lockgate-local-recovery", storage, f"{name}-{subtask}")
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        self._generations: deque[set[str]] = deque(maxlen=KEPT_GENERATIONS)
        #: files restored from the copies / from the storage (the last restore)
        self.restored_locally = 0
        self.restored_remotely = 0

    def keep(self, handle: StateHandle, path: str) -> None:
        """Keep the SST file at ``path`` (uploaded or reused as ``handle``)."""
        target = os.path.join(self.folder, copy_name(handle))
        if os.path.exists(target):
            return
        tmp = f"{target}.{os.getpid()}.tmp"
        try:
            os.link(path, tmp)
        except OSError:
            return  # another filesystem: no local copy of this file (the storage has it)
        os.replace(tmp, target)

    def snapshot_kept(self, handles: list[StateHandle]) -> None:
        """A snapshot referencing ``handles`` was written: drop copies that neither it
        nor the snapshot before it references."""
        self._generations.append({copy_name(h) for h in handles})
        if len(self._generations) < KEPT_GENERATIONS:
            return
        self._drop_all_but(set().union(*self._generations))

    def restored(self, handles: list[StateHandle]) -> None:
        """A restore used ``handles``: copies of anything else are of a past life of this
        subtask that no checkpoint to come needs."""
        names = {copy_name(h) for h in handles}
        self._generations.clear()
        self._generations.append(names)
        self._drop_all_but(names)
        record = {"local": self.restored_locally, "storage": self.restored_remotely}
        try:  # what the last restore took from where, for operators and tests
            tmp = os.path.join(self.folder, f"{LAST_RESTORE}.{os.getpid()}.tmp")
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                json.dump(record, f)
            os.replace(tmp, os.path.join(self.folder, LAST_RESTORE))
        except OSError as e:
            log.debug("cannot record the restore in %s: %s", self.folder, e)

    def _drop_all_but(self, keep: set[str]) -> None:
        try:
            entries = os.listdir(self.folder)
        except OSError:
            return
        for entry in entries:
            if entry.endswith(".sst") and entry not in keep:
                try:
                    os.unlink(os.path.join(self.folder, entry))
                except OSError as e:
                    log.debug("cannot remove the local copy %s: %s", entry, e)

    def start_restore(self) -> None:
        """Count the files of a new restore from zero."""
        self.restored_locally = self.restored_remotely = 0

    def take(self, handle: StateHandle, storage: CheckpointStorage, dest: str) -> bool:
        """Link the local copy of ``handle`` to ``dest`` if it matches the handle (size,
        CRC32, and HMAC when ``storage`` signs); False when there is none or it does not
        match (a mismatching copy is deleted)."""
        path = os.path.join(self.folder, copy_name(handle))
        try:
            if os.path.getsize(path) != handle.size:
                raise ValueError("size")
            crc, mac = _checksums(path, storage)
            if crc != handle.checksum or (mac is not None and not hmac.compare_digest(
                mac, handle.mac or ""
            )):  # fmt: skip
                raise ValueError("checksum")
            os.link(path, dest)
        except FileNotFoundError:
            self.restored_remotely += 1
            return False
        except (OSError, ValueError) as e:
            log.warning(
                "the local copy of %s does not match its checkpoint (%s): reading the "
                "storage's instead",
                handle.path,
                e,
            )
            try:
                os.unlink(path)
            except OSError:
                pass
            self.restored_remotely += 1
            return False
        self.restored_locally += 1
        return True


def _checksums(path: str, storage: CheckpointStorage) -> tuple[int, str | None]:
    """CRC32 of the file, and its HMAC-SHA256 hex when ``storage`` signs its files."""
    options = storage_options_of(storage)
    key = options.signing_key
    signer: Any = hmac.new(key, digestmod=hashlib.sha256) if key is not None else None
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_READ_CHUNK):
            crc = zlib.crc32(chunk, crc)
            if signer is not None:
                signer.update(chunk)
    return crc, (signer.hexdigest() if signer is not None else None)

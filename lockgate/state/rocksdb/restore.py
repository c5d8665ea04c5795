"""Reading what the RocksDB keyed state backend restores (M-R1, M-R3, M-R4, M-T4).

Two kinds of snapshots reach ``RocksDBKeyedStateBackend.restore``:

* canonical snapshots (format 1, from either backend, e.g. savepoints):
  :func:`canonical_states` checks them as the heap backend does and yields their
  states;
* native payloads of incremental checkpoints (:mod:`lockgate.state.rocksdb.files`):
  :func:`download` restores the base (every SST file the checkpoint references,
  checked against its size and CRC32) and the private files into a local folder,
  which is then a complete database.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ...checkpoint.shared_registry import read_shared_file
from ...checkpoint.storage import CheckpointStorage
from ...checkpoint.storage_url import open_storage
from ...checkpoint.transfers import transfer_all
from ...checkpoint.types import StateHandle
from ...errors import ConfigurationError
from ..canonical import (  # noqa: F401 - re-exported for the backend
    SNAPSHOT_FORMAT,
    UnsupportedSnapshotFormatError,
    canonical_states,
    snapshot_kind,
)
from ..handles import STATE_KINDS
from .local_copies import LocalCopies


def native_states(payload: Mapping[str, Any], where: str) -> dict[str, tuple[str, int]]:
    """``name -> (kind, state id)`` of a native payload (checked)."""
    states = payload.get("states")
    if not isinstance(states, Mapping):
        raise UnsupportedSnapshotFormatError(f"{where} has no 'states' mapping")
    out: dict[str, tuple[str, int]] = {}
    for name, info in states.items():
        kind = info.get("kind") if isinstance(info, Mapping) else None
        state_id = info.get("id") if isinstance(info, Mapping) else None
        if kind not in STATE_KINDS or not isinstance(state_id, int):
            raise UnsupportedSnapshotFormatError(
                f"{where}: state '{name}' is described as {info!r}; expected "
                "{'kind': <state kind>, 'id': <int>}"
            )
        out[name] = (kind, state_id)
    return out


def overlaps(payload: Mapping[str, Any], key_groups: range) -> bool:
    """Whether a native payload may hold rows of ``key_groups`` (False when it has none)."""
    span = payload.get("key_group_span")
    if span is None:
        return False
    first, end = span
    return first < key_groups.stop and key_groups.start < end


def payload_storage(
    payload: Mapping[str, Any], storage: CheckpointStorage | None, where: str
) -> CheckpointStorage:
    """The storage holding a native payload's shared files: ``storage`` when given,
    else the one its ``storage_url`` names."""
    if storage is not None:
        return storage
    url = payload.get("storage_url")
    if not isinstance(url, str) or not url:
        raise UnsupportedSnapshotFormatError(f"{where} does not name its checkpoint storage")
    try:
        return open_storage(url)
    except Exception as e:
        raise ConfigurationError(
            f"{where}: cannot open the checkpoint storage {url!r} that holds its shared "
            f"state files: {e}"
        ) from e


#: SST files downloaded at once by a restore (Flink's
#: ``state.backend.rocksdb.checkpoint.transfer.thread.num`` defaults to 4 as well)
DEFAULT_TRANSFER_THREADS = 4


def check_transfer_threads(value: Any, where: str) -> int:
    """``value`` as a number of download threads, or a ConfigurationError naming
    ``where``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
        raise ConfigurationError(
            f"{where}(transfer_threads=...) must be an int from 1 to 64 (the SST files a "
            f"restore downloads at once; default {DEFAULT_TRANSFER_THREADS}), got {value!r}"
        )
    return value


def download(
    payload: Mapping[str, Any],
    storage: CheckpointStorage,
    folder: str,
    where: str,
    copies: LocalCopies | None = None,
    threads: int = DEFAULT_TRANSFER_THREADS,
) -> None:
    """Write the database of a native payload into the new folder ``folder``: every SST
    file from ``storage`` (checked against its handle), or from its task-local copy in
    ``copies`` when that matches the handle, and the private files.

    The files not taken locally are downloaded by up to ``threads`` threads at once
    (an object store serves one request at a time slowly: its latency, not the
    bandwidth, bounds a single stream); at most ``threads`` files are in memory at a
    time. The first failure (a missing or corrupt file) is raised once the downloads
    already running ended; the caller deletes the folder."""
    sst = payload.get("sst")
    private = payload.get("private")
    if not isinstance(sst, Mapping) or not isinstance(private, Mapping):
        raise UnsupportedSnapshotFormatError(f"{where} lacks its 'sst' or 'private' files")
    os.makedirs(folder)
    if copies is not None:
        copies.start_restore()
    remote: list[tuple[str, StateHandle]] = []
    for name, handle in sst.items():
        if not isinstance(handle, StateHandle):
            raise UnsupportedSnapshotFormatError(
                f"{where}: SST file {name!r} has no state handle (found {handle!r})"
            )
        _check_name(name)
        if copies is not None and copies.take(handle, storage, os.path.join(folder, name)):
            continue
        remote.append((name, handle))

    def fetch(item: tuple[str, StateHandle]) -> None:
        name, handle = item
        _write(folder, name, read_shared_file(storage, handle))

    transfer_all(fetch, remote, threads, "lockgate-restore")
    for name, data in private.items():
        _write(folder, name, data)


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
        raise UnsupportedSnapshotFormatError(f"invalid database file name {name!r} in a payload")


def _write(folder: str, name: str, data: bytes) -> None:
    _check_name(name)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)

"""Savepoints in user folders (M-S1): self-contained, portable, never deleted by a job.

A savepoint is taken like a checkpoint (an aligned barrier, canonical state: every
keyed backend materializes its backend-independent format for savepoints, so either
backend restores it), into the job's checkpoint storage as ``chk-<id>``. Once
complete, :func:`publish_savepoint` copies its state files into the user's folder,
writes the folder's ``_metadata`` last (atomically; a folder without ``_metadata`` is
not a savepoint) with paths relative to the folder, and removes ``chk-<id>`` from the
job's storage. The folder can be moved or copied anywhere and restored with
``restore_from=<folder>``.

Layout of a savepoint folder::

    <folder>/_metadata          the checkpoint metadata (JSON, checksummed; see fs_storage)
    <folder>/op-<uid>-<subtask>.<token>  one state file per operator subtask (the name it
                                had in ``chk-<id>/``)

:mod:`lockgate.checkpoint.export` writes checkpoints into folders of the same layout
(plus ``shared/`` for incremental ones), and restores read both alike.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import time
from typing import Any

from ..errors import ConfigurationError
from .coordinator.completed_store import CompletedCheckpoint
from .fs_storage import KIND_JSON, decode_file, encode_file
from .storage import (
    METADATA,
    CheckpointStorage,
    CorruptCheckpointError,
    storage_options_of,
)
from .storage_options import StorageOptions
from .storage_url import open_storage
from .types import StateHandle

log = logging.getLogger(__name__)


def _target_storage(target: str, options: StorageOptions | None = None) -> CheckpointStorage:
    if not isinstance(target, str) or not target.strip():
        raise ConfigurationError(
            f"a savepoint needs a folder path or URL (e.g. '/data/savepoints/sp-1' or "
            f"'s3://bucket/savepoints/sp-1'), got {target!r}"
        )
    if target.startswith("memory://"):
        raise ConfigurationError(
            f"savepoint folder {target!r}: a savepoint must be written to a filesystem path "
            "or URL, not memory://, so that it outlives the job"
        )
    try:
        storage = open_storage(target, options)
    except Exception as e:
        raise ConfigurationError(f"savepoint folder {target!r} cannot be opened: {e}") from e
    if storage.exists(METADATA):
        raise ConfigurationError(
            f"savepoint folder {target!r} already holds a savepoint (it has {METADATA}); "
            "choose a new folder: savepoints are never overwritten"
        )
    return storage


def new_savepoint_folder(savepoint_dir: str, job_name: str, now: float | None = None) -> str:
    """A new folder for a savepoint of ``job_name`` in the default savepoint folder
    ``savepoint_dir`` (``checkpoint_config.savepoint_dir`` / ``LOCKGATE_SAVEPOINT_DIR``),
    as Flink names them under ``state.savepoints.dir``:
    ``<savepoint_dir>/savepoint-<job name>-<UTC time>-<6 random hex digits>`` (the job
    name reduced to letters, digits, ``-`` and ``_``, at most 40 of them). A local
    ``savepoint_dir`` is made absolute (the job's working folder)."""
    if not isinstance(savepoint_dir, str) or not savepoint_dir.strip():
        raise ConfigurationError(
            f"the default savepoint folder must be a folder path or URL, got {savepoint_dir!r}"
        )
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", job_name).strip("-")[:40] or "job"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    name = f"savepoint-{slug}-{stamp}-{secrets.token_hex(3)}"
    if "://" in savepoint_dir:
        return f"{savepoint_dir.rstrip('/')}/{name}"
    return os.path.join(os.path.abspath(os.path.expanduser(savepoint_dir)), name)


def check_savepoint_target(target: str) -> None:
    """Raise ``ConfigurationError`` if a savepoint cannot be written to ``target``."""
    _target_storage(target)


def publish_savepoint(
    storage: CheckpointStorage, completed: CompletedCheckpoint, target: str
) -> str:
    """Copy savepoint ``completed`` (in ``storage``) into the folder ``target``; return
    the folder's location. The job's copy is removed afterwards. The folder gets the
    job storage's signing key and permissions: state files are copied with their MACs,
    ``_metadata`` is signed anew."""
    options = storage_options_of(storage)
    out = _target_storage(target, options)
    moved: dict[str, StateHandle] = {}

    def copy(handle: StateHandle) -> StateHandle:
        done = moved.get(handle.path)
        if done is None:
            name = handle.path.split("/", 1)[-1]
            out.write_file(name, storage.read_file(handle.path))
            done = moved[handle.path] = StateHandle(name, handle.size, handle.checksum)
        return done

    result = CompletedCheckpoint(
        checkpoint_id=completed.checkpoint_id,
        trigger_timestamp=completed.trigger_timestamp,
        completion_timestamp=completed.completion_timestamp,
        operator_states={
            uid: {i: copy(h) for i, h in by.items()}
            for uid, by in completed.operator_states.items()
        },
        master_states={k: copy(h) for k, h in completed.master_states.items()},
        is_savepoint=True,
        job_name=completed.job_name,
        stats=completed.stats,
        finished_operators=dict(completed.finished_operators),
    )
    payload = json.dumps(result.to_metadata(), allow_nan=False).encode("utf-8")
    out.write_file(METADATA, encode_file(payload, KIND_JSON, options), atomic=True)
    try:
        storage.discard(completed.checkpoint_id)
    except Exception as e:  # noqa: BLE001 - the savepoint stands; leftovers only cost space
        log.warning(
            "removing the job's copy of savepoint %d failed: %s", completed.checkpoint_id, e
        )
    location: str = getattr(out, "url", target)
    return location


def is_savepoint_folder(storage: CheckpointStorage) -> bool:
    return storage.exists(METADATA)


def read_savepoint(storage: CheckpointStorage) -> CompletedCheckpoint:
    """The metadata of the savepoint folder ``storage`` is opened at."""
    where = f"{getattr(storage, 'url', storage)}/{METADATA}"
    data = storage.read_file(METADATA)
    payload, _ = decode_file(data, KIND_JSON, where, storage_options_of(storage))
    try:
        metadata: Any = json.loads(payload.decode("utf-8"))
        return CompletedCheckpoint.from_metadata(metadata)
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpointError(f"savepoint metadata {where} is not valid: {e}") from e

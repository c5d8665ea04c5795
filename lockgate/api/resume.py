"""Resuming a job from its own checkpoint storage, as a restarted driver does (M-C8).

A job started without ``restore_from`` on a checkpoint storage whose newest completed
checkpoint belongs to a job of the same name resumes from it, the way a Spark
Structured Streaming query resumes from its checkpoint location: its sources continue
where that checkpoint left them and its two-phase-commit sinks commit what the
checkpoint left pending and roll back what the previous run prepared after it. So
killing a driver and running the same command again neither loses nor repeats output.
The resume is logged at WARNING, naming the checkpoint; ``fresh=True`` (``lockgate run
--fresh``, environment variable ``LOCKGATE_FRESH=1``) starts over instead, from empty
state, which writes the sinks' output again.

A job stopped with a savepoint (``stop_with_savepoint``, ``lockgate stop --savepoint``)
leaves a note in its storage (``_stopped_with_savepoint``): its sinks committed the
savepoint's transactions, so until a checkpoint completes after it, the job resumes
from that savepoint, never from an older retained checkpoint (which would write the
output in between again).

The newest completed checkpoint of the storage is what counts: when it belongs to
another job (two jobs sharing one storage), nothing is resumed. A damaged newest
checkpoint is skipped here (the restore itself falls back past it, guarded as any
restore is, see :func:`lockgate.recovery.restore.resolve_restore_path`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

from ..checkpoint.storage import CheckpointStorage
from ..checkpoint.storage_url import open_storage

log = logging.getLogger(__name__)

#: set to ``1`` by ``lockgate run --fresh``: start from empty state even when the
#: checkpoint storage holds completed checkpoints of the job
FRESH_ENV = "LOCKGATE_FRESH"

#: how many of the newest completed checkpoints are read to find a readable one
_LOOK_BACK = 3


#: the file a stop with savepoint leaves in the job's checkpoint storage
STOPPED_MARKER = "_stopped_with_savepoint"


@dataclass(frozen=True)
class OwnCheckpoint:
    """Where a job resumes from: the newest completed checkpoint of its storage, or the
    savepoint it was stopped with when no checkpoint completed after that."""

    storage_url: str
    checkpoint_id: int
    location: str
    #: what ``restore_from`` is given: the storage (its newest intact checkpoint) or the
    #: savepoint's folder
    restore_path: str
    is_savepoint: bool = False


def fresh_from_environment(fresh: bool) -> bool:
    """``fresh``, or ``True`` when ``lockgate run --fresh`` asked for it."""
    return fresh or os.environ.get(FRESH_ENV) == "1"


def record_stop_with_savepoint(
    storage: CheckpointStorage, job_name: str, savepoint_id: int, location: str
) -> None:
    """Note in the job's checkpoint storage that the job was stopped with the savepoint
    ``savepoint_id`` at ``location``: the sinks committed its transactions, so a job
    resuming there must start from it, not from an older retained checkpoint (that would
    write the output in between again). Never raises: a stop whose note cannot be written
    logs a warning (the savepoint itself is intact)."""
    note = {"job_name": job_name, "savepoint_id": savepoint_id, "savepoint": location}
    try:
        storage.write_file(STOPPED_MARKER, json.dumps(note).encode(), atomic=True)
    except Exception as e:  # noqa: BLE001 - the savepoint stands; only the note is lost
        log.warning(
            "job %r was stopped with the savepoint %s, but the note of it could not be written "
            "to its checkpoint storage %s (%s): run it again with restore_from=%r "
            "(lockgate run --restore), not from its checkpoints",
            job_name,
            location,
            storage.url,
            e,
            location,
        )


def _stopped_with_savepoint(storage: CheckpointStorage, job_name: str) -> OwnCheckpoint | None:
    try:
        note = json.loads(storage.read_file(STOPPED_MARKER))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("ignoring the unreadable %s of %s: %s", STOPPED_MARKER, storage.url, e)
        return None
    if not isinstance(note, dict) or note.get("job_name") != job_name:
        return None
    savepoint_id, location = note.get("savepoint_id"), note.get("savepoint")
    if not isinstance(savepoint_id, int) or not isinstance(location, str):
        return None
    return OwnCheckpoint(storage.url, savepoint_id, location, location, is_savepoint=True)


def newest_own_checkpoint(storage_url: str, job_name: str) -> OwnCheckpoint | None:
    """Where a job named ``job_name`` resumes in the storage at ``storage_url``: its
    newest completed checkpoint, or the savepoint the job was stopped with when no
    checkpoint completed after it. ``None`` when the storage holds neither, its newest
    readable checkpoint is another job's, or it cannot be read (that fails later, with
    context)."""
    try:
        storage = open_storage(storage_url)
        ids = storage.completed_ids()
    except Exception:  # noqa: BLE001 - an unreadable storage fails later, with context
        return None
    newest: OwnCheckpoint | None = None
    for checkpoint_id in sorted(ids, reverse=True)[:_LOOK_BACK]:
        try:
            name = storage.read_metadata(checkpoint_id).get("job_name")
        except Exception:  # noqa: BLE001 - a damaged one: look at the previous one
            continue
        if name != job_name:
            return None
        location = getattr(storage, "location", lambda rel: storage.url)(f"chk-{checkpoint_id}")
        newest = OwnCheckpoint(storage.url, checkpoint_id, location, storage.url)
        break
    stopped = _stopped_with_savepoint(storage, job_name)
    if stopped is not None and (newest is None or stopped.checkpoint_id > newest.checkpoint_id):
        return stopped
    return newest


def log_resume(job_name: str, own: OwnCheckpoint) -> None:
    """Say loudly that the job resumes instead of starting over."""
    what = (
        f"the savepoint it was stopped with: {own.location}"
        if own.is_savepoint
        else f"newest completed checkpoint: {own.location}"
    )
    log.warning(
        "job %r resumes from its checkpoint storage %s (%s), as a restarted driver does: "
        "its sources continue where that left them, its sinks commit what it left pending "
        "and roll back what the previous run prepared after it. To start over from empty "
        "state instead (the sinks then write their output again), pass fresh=True to "
        "execute (lockgate run --fresh)",
        job_name,
        own.storage_url,
        what,
    )


def log_fresh_start(job_name: str, own: OwnCheckpoint) -> None:
    """Say that a job asked to start over ignores its own checkpoints."""
    log.warning(
        "job %r starts from empty state (fresh=True / lockgate run --fresh) although its "
        "checkpoint storage %s holds completed checkpoints of it (newest: %s): its sources "
        "start over and its sinks write their output again",
        job_name,
        own.storage_url,
        own.location,
    )


def resume_failed_text(job_name: str, own: OwnCheckpoint, error: BaseException) -> str:
    """The error of a resume whose checkpoint does not fit the job."""
    return (
        f"job {job_name!r} cannot resume from its checkpoint storage {own.storage_url} "
        f"({'the savepoint it was stopped with' if own.is_savepoint else 'newest completed checkpoint'}: "
        f"{own.location}): {error}. A job resumes from "
        "its own checkpoints by default; give its operators the uids they had, pass "
        "allow_non_restored_state=True (lockgate run --allow-non-restored-state) to drop "
        "the state of operators it no longer has, or start over with fresh=True "
        "(lockgate run --fresh)"
    )

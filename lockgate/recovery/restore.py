"""Choosing and loading the checkpoint an attempt restores (M-R1, M-R3, M-S3).

The driver picks the checkpoint: the newest completed one in the job's
storage after a failure, or the path the user gave (``restore_from``). It
reads every state file the checkpoint references once, checking format and
checksum, before any task starts: a checkpoint with a missing or damaged file
is never loaded. The newest retained checkpoint that fails the check is
skipped with a warning and the previous one is tried; when none is left a
:class:`RestoreError` says so.

What the tasks get is a :class:`RestoreSpec`: plain, picklable data naming
the storage and, per operator uid, the state handle of every subtask. Each
task reads only the files assigned to it (:class:`OperatorRestore`), in its
own thread, when it starts.

An unaligned checkpoint also holds channel state (M-B7): the records in flight on
every channel, in one file per subtask, keyed ``channels:<head operator uid>``.
Those files are read here too (they are verified like every other file); the spec
keeps a summary of each recorded channel (:attr:`RestoreSpec.channels`), named by
the uids at its edge's two ends and its subtask indexes, from which
:mod:`lockgate.recovery.channel_state` checks, before anything runs, that the
new job can take every recorded record, and tells each new subtask which records
to replay.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from ..checkpoint.channel_state import (
    CHANNEL_STATE_PREFIX,
    RecordedChannel,
    RecordedSummary,
    decode,
    summarize,
)
from ..checkpoint.coordinator.completed_store import CompletedCheckpoint
from ..checkpoint.coordinator.plan import is_fully_finished
from ..checkpoint.savepoints import is_savepoint_folder, read_savepoint
from ..checkpoint.storage import CheckpointStorage, CorruptCheckpointError, open_storage
from ..checkpoint.types import StateHandle
from ..errors import LockgateError

log = logging.getLogger(__name__)

_CHK = re.compile(r"^chk-(0|[1-9][0-9]*)$")

__all__ = ["CHANNEL_STATE_PREFIX", "OperatorRestore", "RestoreError", "RestoreSpec",
           "newest_restorable", "operator_states", "resolve_restore_path"]


class RestoreError(LockgateError, RuntimeError):
    """No usable checkpoint at the path given, or every retained one is damaged."""


@dataclass(frozen=True)
class RestoreSpec:
    """The checkpoint an attempt restores: where it lives and every state handle."""

    storage_url: str
    checkpoint_id: int
    #: operator uid (or ``channels:<head operator uid>``) -> subtask -> handle
    operators: dict[str, dict[int, StateHandle]] = field(default_factory=dict)
    is_savepoint: bool = False
    #: the state files and ``_metadata`` are in the storage root (a savepoint folder)
    in_root: bool = False
    #: every channel the checkpoint recorded in-flight records of (M-B7), in file order
    channels: tuple[RecordedSummary, ...] = ()
    #: operator uid -> (parallelism, subtasks that had finished) (FLIP-147)
    finished_operators: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)

    @property
    def location(self) -> str:
        if self.in_root:
            return self.storage_url
        return f"{self.storage_url.rstrip('/')}/chk-{self.checkpoint_id}"

    def operator(self, uid: str, subtask: int, parallelism: int) -> OperatorRestore | None:
        """What subtask ``subtask`` of operator ``uid`` restores, or None (no state)."""
        handles = self.operators.get(uid)
        if not handles:
            return None
        return OperatorRestore(self, uid, handles, subtask, parallelism)

    def read_channel_state(self, state_key: str, subtask: int) -> list[RecordedChannel]:
        """The recorded channels of one channel-state file (``channels:<uid>``, the
        subtask that wrote it), in the order of :attr:`channels`."""
        handle = self.operators[state_key][subtask]
        return decode(_storage(self.storage_url).read_state(handle))

    def operator_uids(self) -> set[str]:
        return {uid for uid in self.operators if not uid.startswith(CHANNEL_STATE_PREFIX)}

    def fully_finished(self, uid: str) -> bool:
        """Whether every subtask of operator ``uid`` had finished when the checkpoint was
        taken: its tasks are deployed as finished, whatever the new parallelism
        (FLIP-147)."""
        return is_fully_finished(self.finished_operators.get(uid))


class OperatorRestore:
    """The recorded state of one operator as one subtask of the new attempt sees it.

    At the parallelism the checkpoint was taken with, subtask ``i`` restores exactly
    the state subtask ``i`` wrote. At another parallelism, :meth:`assigned` gives the
    states of the old subtasks ``j`` with ``j % parallelism == i`` (sources and sinks
    redistribute splits and transactions this way) and :meth:`all` every one (keyed
    state filters it by key group).
    """

    def __init__(self, spec: RestoreSpec, uid: str, handles: dict[int, StateHandle],
                 subtask: int, parallelism: int) -> None:
        self.spec = spec
        self.uid = uid
        self.handles = handles
        self.subtask = subtask
        self.parallelism = parallelism
        self._cache: dict[int, Any] = {}  # states are read once per restoring subtask

    @property
    def same_parallelism(self) -> bool:
        """Whether every old subtask wrote state and there were ``parallelism`` of them."""
        return set(self.handles) == set(range(self.parallelism))

    def _load(self, subtask: int) -> Any:
        cached = self._cache.get(subtask, _UNREAD)
        if cached is not _UNREAD:
            return cached
        state = _unwrap(_storage(self.spec.storage_url).read_state(self.handles[subtask]))
        self._cache[subtask] = state
        return state

    def own(self) -> Any:
        """The state the subtask with this subtask's index wrote, or None."""
        return self._load(self.subtask) if self.subtask in self.handles else None

    def by_subtask(self) -> dict[int, Any]:
        """Old subtask index -> its state, for every old subtask that wrote one."""
        return {j: self._load(j) for j in sorted(self.handles)}

    def assigned(self) -> list[Any]:
        """The states of the old subtasks this subtask takes over, in subtask order."""
        return [self._load(j) for j in sorted(self.handles) if j % self.parallelism == self.subtask]

    def all(self) -> list[Any]:
        """The states of every old subtask, in subtask order."""
        return [self._load(j) for j in sorted(self.handles)]


def _unwrap(payload: Any) -> Any:
    """The operator state in a state file's payload."""
    return payload["state"] if isinstance(payload, dict) and "state" in payload else payload


def operator_states(storage: CheckpointStorage, checkpoint: CompletedCheckpoint,
                    uid: str) -> list[Any]:
    """The states every subtask of operator ``uid`` wrote into ``checkpoint`` (in subtask
    order; empty when the operator has none), read from ``storage`` unverified."""
    by_subtask = checkpoint.operator_states.get(uid, {})
    return [_unwrap(storage.read_state(by_subtask[j])) for j in sorted(by_subtask)]


_UNREAD: Any = object()
_opened: dict[str, CheckpointStorage] = {}


def _storage(url: str) -> CheckpointStorage:
    storage = _opened.get(url)
    if storage is None:
        storage = _opened[url] = open_storage(url)
    return storage


def _verify(storage: CheckpointStorage,
            checkpoint: CompletedCheckpoint) -> tuple[RecordedSummary, ...]:
    """Read every state file of ``checkpoint`` (format and checksum are checked) and
    every shared file they reference (size and CRC32 against the handle, M-R4); return
    the summaries of the channels its channel-state files recorded (M-B7)."""
    from ..checkpoint.shared_registry import read_shared_file, shared_files

    handles = []
    channels: list[RecordedSummary] = []
    for key, by_subtask in sorted(checkpoint.operator_states.items()):
        for subtask, handle in sorted(by_subtask.items()):
            handles.append(handle)
            payload = storage.read_state(handle)
            if key.startswith(CHANNEL_STATE_PREFIX):
                try:
                    channels.extend(summarize(key, subtask, payload))
                except (ValueError, KeyError, TypeError) as e:
                    raise CorruptCheckpointError(
                        f"its channel state {handle.path} cannot be decoded: {e}") from e
    for shared in shared_files(handles):
        read_shared_file(storage, shared)
    return tuple(channels)


def _spec(storage: CheckpointStorage, checkpoint: CompletedCheckpoint,
          channels: tuple[RecordedSummary, ...]) -> RestoreSpec:
    return RestoreSpec(
        storage_url=storage.url, checkpoint_id=checkpoint.checkpoint_id,
        operators={uid: dict(by) for uid, by in checkpoint.operator_states.items()},
        is_savepoint=checkpoint.is_savepoint, channels=channels,
        finished_operators=dict(checkpoint.finished_operators),
    )


def _load(storage: CheckpointStorage, checkpoint_id: int) -> RestoreSpec:
    """The verified checkpoint ``checkpoint_id`` of ``storage``; raises what is wrong."""
    try:
        checkpoint = CompletedCheckpoint.from_metadata(storage.read_metadata(checkpoint_id))
    except (CorruptCheckpointError, FileNotFoundError) as e:
        raise CorruptCheckpointError(f"its _metadata cannot be read: {e}") from e
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpointError(f"its _metadata is not valid: {e}") from e
    return _spec(storage, checkpoint, _verify(storage, checkpoint))


def newest_restorable(storage: CheckpointStorage, *, newer_than: int = 0) -> RestoreSpec | None:
    """The newest completed checkpoint of ``storage`` (id > ``newer_than``) whose files
    are all intact; damaged ones are skipped with a warning. None when there is none."""
    try:
        ids = storage.completed_ids()
    except Exception as e:
        raise RestoreError(
            f"cannot list the checkpoints in {storage.url}: {e}") from e
    return _newest_intact(storage, [i for i in ids if i > newer_than])


def _newest_intact(storage: CheckpointStorage, ids: list[int]) -> RestoreSpec | None:
    """The verified checkpoint with the highest of ``ids`` whose files are intact;
    damaged ones are skipped with a warning."""
    for checkpoint_id in sorted(ids, reverse=True):
        try:
            return _load(storage, checkpoint_id)
        except CorruptCheckpointError as e:
            log.warning("checkpoint %d in %s is damaged and is skipped, falling back to the "
                        "previous retained checkpoint: %s", checkpoint_id, storage.url, e)
    return None


def resolve_restore_path(path: str) -> RestoreSpec:
    """The checkpoint or savepoint at ``path``: a ``chk-<id>`` folder (restored as is,
    falling back to older retained checkpoints of the same storage when it is damaged),
    or a checkpoint storage root (its newest intact checkpoint). Raises
    :class:`RestoreError` naming the path when nothing there can be restored."""
    if not isinstance(path, str) or not path.strip():
        raise RestoreError(
            f"restore_from must be the path of a checkpoint (a chk-<id> folder) or of a "
            f"checkpoint storage folder, got {path!r}")
    trimmed = path.rstrip("/")
    head, name = posixpath.split(trimmed) if "://" in trimmed else _split_local(trimmed)
    match = _CHK.match(name)
    if match is None:
        storage = _open(path, path)
        if is_savepoint_folder(storage):
            return _load_savepoint(storage, path)
        spec = newest_restorable(storage)
        if spec is None:
            raise RestoreError(
                f"restore_from {path!r}: no intact completed checkpoint found there; give a "
                "chk-<id> folder or the checkpoint storage of a job that completed one")
        return spec
    storage = _open(head, path)
    checkpoint_id = int(match.group(1))
    try:
        return _load(storage, checkpoint_id)
    except CorruptCheckpointError as e:
        log.warning("checkpoint %s cannot be restored (%s); falling back to the previous "
                    "retained checkpoint in %s", path, e, storage.url)
        fallback = _newest_intact(
            storage, [i for i in storage.completed_ids() if i < checkpoint_id])
        if fallback is None:
            raise RestoreError(
                f"restore_from {path!r}: the checkpoint is damaged ({e}) and no older intact "
                "checkpoint is retained next to it") from e
        return fallback


def _load_savepoint(storage: CheckpointStorage, given: str) -> RestoreSpec:
    """The savepoint in the folder ``storage`` is opened at, verified (M-S1)."""
    try:
        checkpoint = read_savepoint(storage)
        channels = _verify(storage, checkpoint)
    except (CorruptCheckpointError, FileNotFoundError) as e:
        raise RestoreError(f"restore_from {given!r}: the savepoint is damaged: {e}") from e
    return RestoreSpec(
        storage_url=storage.url, checkpoint_id=checkpoint.checkpoint_id,
        operators={uid: dict(by) for uid, by in checkpoint.operator_states.items()},
        is_savepoint=True, in_root=True, channels=channels,
        finished_operators=dict(checkpoint.finished_operators))


def _split_local(path: str) -> tuple[str, str]:
    return os.path.split(os.path.abspath(path))


def _open(url: str, given: str) -> CheckpointStorage:
    try:
        return open_storage(url)
    except Exception as e:
        raise RestoreError(f"restore_from {given!r}: cannot open {url!r}: {e}") from e

"""Choosing and loading the checkpoint an attempt restores (M-R1, M-R3, M-S3).

The driver picks the checkpoint: the newest completed one in the job's
storage after a failure, or the path the user gave (``restore_from``). It
reads every state file the checkpoint references once, checking format,
checksum and, with ``checkpoint_config.signing_key``, the MAC, before any task
starts, without unpickling them (channel-state files excepted: their summaries are
decoded, after the MAC check when signing is on): a checkpoint with a missing or
damaged file is never loaded. The newest retained checkpoint that fails the check is
skipped with a warning and the previous one is tried; when none is left a
:class:`RestoreError` says so.

Falling back past a damaged checkpoint that *completed* replays output: its
completion notice may already have committed the transactions of the job's
two-phase-commit sinks, and restoring an older checkpoint writes that output again.
With a :class:`CommittedOutputGuard` naming those sinks such a fallback fails with a
:class:`RestoreError` naming the checkpoint, the sinks and the opt-in
(``checkpoint_config.allow_replaying_committed_output = True``, then it is logged).

Restoring unpickles the state files in the tasks: a checkpoint is code. Restore only
from storage that only trusted parties can write, or sign checkpoints.

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
from collections.abc import Mapping
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
from ..checkpoint.storage import CheckpointStorage, CorruptCheckpointError
from ..checkpoint.storage_options import StorageOptions
from ..checkpoint.storage_url import open_storage
from ..checkpoint.types import StateHandle
from ..errors import LockgateError
from ..runtime.operators.base import RestoredState
from ..state.canonical import NATIVE_FORMAT

log = logging.getLogger(__name__)

_CHK = re.compile(r"^chk-(0|[1-9][0-9]*)$")

__all__ = [
    "CHANNEL_STATE_PREFIX",
    "CommittedOutputGuard",
    "OperatorRestore",
    "RestoreError",
    "RestoreSpec",
    "newest_restorable",
    "operator_states",
    "resolve_restore_path",
]


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
    #: the signing key and permissions the tasks read the storage with (None: those
    #: registered for the URL in the task's process)
    storage_options: StorageOptions | None = field(default=None, repr=False)

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
        return decode(_storage(self.storage_url, self.storage_options).read_state(handle))

    def operator_uids(self) -> set[str]:
        return {uid for uid in self.operators if not uid.startswith(CHANNEL_STATE_PREFIX)}

    def fully_finished(self, uid: str) -> bool:
        """Whether every subtask of operator ``uid`` had finished when the checkpoint was
        taken: its tasks are deployed as finished, whatever the new parallelism
        (FLIP-147)."""
        return is_fully_finished(self.finished_operators.get(uid))


class OperatorRestore(RestoredState):
    """The recorded state of one operator as one subtask of the new attempt sees it (the
    :class:`~lockgate.runtime.operators.base.RestoredState` an operator restores from).

    At the parallelism the checkpoint was taken with, subtask ``i`` restores exactly
    the state subtask ``i`` wrote. At another parallelism, :meth:`assigned` gives the
    states of the old subtasks ``j`` with ``j % parallelism == i`` (sources and sinks
    redistribute splits and transactions this way) and :meth:`all` every one (keyed
    state filters it by key group).
    """

    def __init__(
        self,
        spec: RestoreSpec,
        uid: str,
        handles: dict[int, StateHandle],
        subtask: int,
        parallelism: int,
    ) -> None:
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
        storage = _storage(self.spec.storage_url, self.spec.storage_options)
        handle = self.handles[subtask]
        state = _unwrap(storage.read_state(handle))
        if handle.shared:
            # the shared files are in the storage the checkpoint is restored from (an
            # export's folder, a storage that was moved), whatever the payload names
            _native_payloads_in(state, storage.url)
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


def _native_payloads_in(value: Any, storage_url: str, depth: int = 0) -> int:
    """Make every RocksDB native payload (a dict with ``format`` == ``NATIVE_FORMAT``,
    :mod:`lockgate.state.rocksdb.files`) in the plain dicts, lists and tuples of
    ``value`` name ``storage_url`` as the storage of its shared files; return how many
    there were. Handles are relative to the storage a checkpoint is read from, and the
    shared files are there: in the job's storage for its own checkpoints, in the folder
    of an export (``lockgate checkpoint export``, which copies state files unread)."""
    if depth > 32:
        return 0
    if isinstance(value, dict):
        if value.get("format") == NATIVE_FORMAT and "storage_url" in value:
            value["storage_url"] = storage_url
            return 1
        return sum(_native_payloads_in(v, storage_url, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_native_payloads_in(v, storage_url, depth + 1) for v in value)
    return 0


def operator_states(
    storage: CheckpointStorage, checkpoint: CompletedCheckpoint, uid: str
) -> list[Any]:
    """The states every subtask of operator ``uid`` wrote into ``checkpoint`` (in subtask
    order; empty when the operator has none), read from ``storage`` unverified."""
    by_subtask = checkpoint.operator_states.get(uid, {})
    return [_unwrap(storage.read_state(by_subtask[j])) for j in sorted(by_subtask)]


_UNREAD: Any = object()
_opened: dict[str, CheckpointStorage] = {}


def _storage(url: str, options: StorageOptions | None = None) -> CheckpointStorage:
    if options is not None:
        return open_storage(url, options)
    storage = _opened.get(url)
    if storage is None:
        storage = _opened[url] = open_storage(url)
    return storage


@dataclass(frozen=True)
class CommittedOutputGuard:
    """The job's two-phase-commit sinks (uid -> name): restoring a checkpoint older than
    a completed one replays output those sinks may have committed. ``allow``: do it
    anyway (``checkpoint_config.allow_replaying_committed_output``), with a warning."""

    sinks: Mapping[str, str]
    allow: bool = False

    def check_fallback(
        self, storage: CheckpointStorage, damaged: list[tuple[int, str]], restored: str
    ) -> None:
        """``damaged``: the completed checkpoints (id, what is wrong) a restore skips to
        restore ``restored`` (a description: "checkpoint 3", "no checkpoint"). Raises
        :class:`RestoreError` when one of them may have committed sink output, unless
        ``allow``."""
        if not self.sinks or not damaged:
            return
        hits: list[str] = []
        for checkpoint_id, error in damaged:
            try:
                uids = set(storage.read_metadata(checkpoint_id).get("operators", {}))
            except Exception:  # noqa: BLE001 - unreadable metadata: assume every sink
                uids = set(self.sinks)
            sinks = sorted(u for u in self.sinks if u in uids)
            if sinks:
                names = ", ".join(f"'{self.sinks[u]}' (uid {u})" for u in sinks)
                hits.append(f"checkpoint {checkpoint_id} ({error}): sinks {names}")
        if not hits:
            return
        text = (
            f"restoring {restored} from {storage.url} skips damaged checkpoints that "
            f"completed, so the two-phase-commit sinks recorded in them may already have "
            f"committed their output: " + "; ".join(hits) + ". Restoring an older "
            "checkpoint replays that output and writes it again (duplicates)"
        )
        if self.allow:
            log.warning("%s; going ahead because allow_replaying_committed_output=True", text)
            return
        raise RestoreError(
            f"{text}. To proceed: repair the damaged checkpoint's files from a backup and "
            "restore it, or remove what those sinks committed after the older checkpoint, or "
            "accept the duplicates with "
            "env.checkpoint_config.allow_replaying_committed_output = True"
        )


def _verify(
    storage: CheckpointStorage, checkpoint: CompletedCheckpoint
) -> tuple[RecordedSummary, ...]:
    """Check every state file of ``checkpoint`` (format, checksum and, with a signing
    key, MAC; only channel-state files are unpickled, for their summaries) and every
    shared file they reference (size and CRC32 against the handle, M-R4); return
    the summaries of the channels its channel-state files recorded (M-B7)."""
    from ..checkpoint.shared_registry import read_shared_file, shared_files

    handles = []
    channels: list[RecordedSummary] = []
    for key, by_subtask in sorted(checkpoint.operator_states.items()):
        for subtask, handle in sorted(by_subtask.items()):
            handles.append(handle)
            if not key.startswith(CHANNEL_STATE_PREFIX):
                storage.verify_state(handle)  # checked, never unpickled on the driver
                continue
            payload = storage.read_state(handle)  # its summary is needed here
            try:
                channels.extend(summarize(key, subtask, payload))
            except (ValueError, KeyError, TypeError) as e:
                raise CorruptCheckpointError(
                    f"its channel state {handle.path} cannot be decoded: {e}"
                ) from e
    for shared in shared_files(handles):
        read_shared_file(storage, shared)
    return tuple(channels)


def _spec(
    storage: CheckpointStorage,
    checkpoint: CompletedCheckpoint,
    channels: tuple[RecordedSummary, ...],
) -> RestoreSpec:
    return RestoreSpec(
        storage_url=storage.url,
        checkpoint_id=checkpoint.checkpoint_id,
        operators={uid: dict(by) for uid, by in checkpoint.operator_states.items()},
        is_savepoint=checkpoint.is_savepoint,
        channels=channels,
        finished_operators=dict(checkpoint.finished_operators),
        storage_options=getattr(storage, "options", None),
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


def newest_restorable(
    storage: CheckpointStorage, *, newer_than: int = 0, guard: CommittedOutputGuard | None = None
) -> RestoreSpec | None:
    """The newest completed checkpoint of ``storage`` (id > ``newer_than``) whose files
    are all intact; damaged ones are skipped with a warning. None when there is none.

    ``guard``: skipping a damaged checkpoint - to restore an older one, or none (the
    caller then starts from something older still) - that recorded one of the guard's
    two-phase-commit sinks raises :class:`RestoreError` unless the guard allows it."""
    try:
        ids = storage.completed_ids()
    except Exception as e:
        raise RestoreError(f"cannot list the checkpoints in {storage.url}: {e}") from e
    spec, skipped = _newest_intact(storage, [i for i in ids if i > newer_than])
    if guard is not None:
        restored = (
            f"checkpoint {spec.checkpoint_id}"
            if spec is not None
            else f"a state older than checkpoint {newer_than + 1}"
        )
        guard.check_fallback(storage, skipped, restored)
    return spec


def _newest_intact(
    storage: CheckpointStorage, ids: list[int]
) -> tuple[RestoreSpec | None, list[tuple[int, str]]]:
    """The verified checkpoint with the highest of ``ids`` whose files are intact (None
    when there is none), and the damaged ones skipped (id, error), each with a
    warning."""
    skipped: list[tuple[int, str]] = []
    for checkpoint_id in sorted(ids, reverse=True):
        try:
            return _load(storage, checkpoint_id), skipped
        except CorruptCheckpointError as e:
            log.warning(
                "checkpoint %d in %s is damaged and is skipped, falling back to the "
                "previous retained checkpoint: %s",
                checkpoint_id,
                storage.url,
                e,
            )
            skipped.append((checkpoint_id, str(e)))
    return None, skipped


def resolve_restore_path(
    path: str, *, options: StorageOptions | None = None, guard: CommittedOutputGuard | None = None
) -> RestoreSpec:
    """The checkpoint or savepoint at ``path``: a ``chk-<id>`` folder (restored as is,
    falling back to older retained checkpoints of the same storage when it is damaged),
    or a checkpoint storage root (its newest intact checkpoint). Raises
    :class:`RestoreError` naming the path when nothing there can be restored.

    ``options``: the signing key (files without a valid MAC are refused) and
    permissions to read it with; ``guard``: see :func:`newest_restorable`."""
    if not isinstance(path, str) or not path.strip():
        raise RestoreError(
            f"restore_from must be the path of a checkpoint (a chk-<id> folder) or of a "
            f"checkpoint storage folder, got {path!r}"
        )
    trimmed = path.rstrip("/")
    head, name = posixpath.split(trimmed) if "://" in trimmed else _split_local(trimmed)
    match = _CHK.match(name)
    if match is None:
        storage = _open(path, path, options)
        if is_savepoint_folder(storage):
            return _load_savepoint(storage, path)
        spec = newest_restorable(storage, guard=guard)
        if spec is None:
            raise RestoreError(
                f"restore_from {path!r}: no intact completed checkpoint found there; give a "
                "chk-<id> folder or the checkpoint storage of a job that completed one"
            )
        return spec
    storage = _open(head, path, options)
    checkpoint_id = int(match.group(1))
    try:
        return _load(storage, checkpoint_id)
    except CorruptCheckpointError as e:
        log.warning(
            "checkpoint %s cannot be restored (%s); falling back to the previous "
            "retained checkpoint in %s",
            path,
            e,
            storage.url,
        )
        fallback, skipped = _newest_intact(
            storage, [i for i in storage.completed_ids() if i < checkpoint_id]
        )
        if fallback is None:
            raise RestoreError(
                f"restore_from {path!r}: the checkpoint is damaged ({e}) and no older intact "
                "checkpoint is retained next to it"
            ) from e
        if guard is not None:
            guard.check_fallback(
                storage, [(checkpoint_id, str(e))] + skipped, f"checkpoint {fallback.checkpoint_id}"
            )
        return fallback


def _load_savepoint(storage: CheckpointStorage, given: str) -> RestoreSpec:
    """The savepoint in the folder ``storage`` is opened at, verified (M-S1)."""
    try:
        checkpoint = read_savepoint(storage)
        channels = _verify(storage, checkpoint)
    except (CorruptCheckpointError, FileNotFoundError) as e:
        raise RestoreError(f"restore_from {given!r}: the savepoint is damaged: {e}") from e
    return RestoreSpec(
        storage_url=storage.url,
        checkpoint_id=checkpoint.checkpoint_id,
        operators={uid: dict(by) for uid, by in checkpoint.operator_states.items()},
        is_savepoint=True,
        in_root=True,
        channels=channels,
        finished_operators=dict(checkpoint.finished_operators),
        storage_options=getattr(storage, "options", None),
    )


def _split_local(path: str) -> tuple[str, str]:
    return os.path.split(os.path.abspath(path))


def _open(url: str, given: str, options: StorageOptions | None = None) -> CheckpointStorage:
    try:
        return open_storage(url, options)
    except Exception as e:
        raise RestoreError(f"restore_from {given!r}: cannot open {url!r}: {e}") from e

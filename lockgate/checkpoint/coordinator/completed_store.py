"""Completed checkpoints and the store that retains the newest N of them (M-C7, M-C8).

A :class:`CompletedCheckpoint` is what a fully acknowledged pending checkpoint
becomes once its ``_metadata`` is written (M-C7): a checkpoint without
``_metadata`` does not exist. :meth:`CompletedCheckpoint.to_metadata` gives the
JSON-compatible document written as ``_metadata`` and
:meth:`CompletedCheckpoint.from_metadata` reads it back (restore, M-R1).

:class:`CompletedCheckpointStore` guarantees (M-C8):

* it holds at most ``retained`` checkpoints, the newest ones; adding one beyond
  that removes the oldest and calls ``storage.discard(id)`` for it, so the
  storage holds exactly the retained checkpoints' folders (each checkpoint's
  state lives in its own ``chk-<id>/`` folder, so the discarded folder is state
  only that checkpoint references);
* the durable pointer ``storage.write_latest(id)`` is written when a checkpoint
  is added, before any older one is discarded: after a crash at any point the
  pointer names a checkpoint whose folder exists;
* if writing the pointer fails, :meth:`add` raises and the store is unchanged
  (the caller aborts the checkpoint, ``FINALIZE_FAILED``);
* :meth:`recover` adopts the checkpoints a previous run left in storage (not
  savepoints: those are never deleted by the job, M-S1), so retention keeps
  working across coordinator restarts;
* shared state files of incremental checkpoints (M-R4, ``StateHandle.shared``) are
  reference-counted by the store's :class:`~lockgate.checkpoint.shared_registry.SharedStateRegistry`
  (:attr:`CompletedCheckpointStore.shared`): registered on :meth:`add` and
  :meth:`recover`, unregistered when a checkpoint is discarded; a shared file is
  deleted only when no retained checkpoint references it. :meth:`add` refuses a
  checkpoint referencing a shared file that is gone (the store is unchanged).

Savepoints are never added to the store. Not locked: the coordinator calls it
under its own lock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..shared_registry import SharedStateRegistry
from ..storage import CheckpointStorage
from ..types import CheckpointStats, StateHandle

log = logging.getLogger(__name__)

METADATA_FORMAT_VERSION = 1


def handle_json(handle: StateHandle) -> dict[str, Any]:
    """A handle as JSON; ``shared`` only when the handle references shared files."""
    data: dict[str, Any] = {"path": handle.path, "size": handle.size, "checksum": handle.checksum}
    if handle.shared:
        data["shared"] = [handle_json(s) for s in handle.shared]
    if handle.mac:
        data["mac"] = handle.mac
    return data


def _handle_from_json(data: dict[str, Any]) -> StateHandle:
    shared = tuple(_handle_from_json(s) for s in data.get("shared", ()))
    return StateHandle(
        str(data["path"]),
        int(data["size"]),
        int(data["checksum"]),
        shared,
        str(data.get("mac", "")),
    )


@dataclass
class CompletedCheckpoint:
    """A checkpoint (or savepoint) whose ``_metadata`` exists."""

    checkpoint_id: int
    trigger_timestamp: int
    completion_timestamp: int
    operator_states: dict[str, dict[int, StateHandle]] = field(default_factory=dict)
    master_states: dict[str, StateHandle] = field(default_factory=dict)
    is_savepoint: bool = False
    external_path: str | None = None
    job_name: str = ""
    stats: CheckpointStats | None = None
    #: operator uid -> (its parallelism, the subtasks that had finished when the
    #: checkpoint was taken); an operator with every subtask listed is fully finished
    #: and a restore deploys its tasks as finished (FLIP-147)
    finished_operators: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)

    def handles(self) -> list[StateHandle]:
        result = [h for by_subtask in self.operator_states.values() for h in by_subtask.values()]
        result.extend(self.master_states.values())
        return result

    def to_metadata(self) -> dict[str, Any]:
        """The ``_metadata`` document (JSON-compatible, format version 1)."""
        metadata: dict[str, Any] = {
            "format_version": METADATA_FORMAT_VERSION,
            "checkpoint_id": self.checkpoint_id,
            "job_name": self.job_name,
            "trigger_timestamp": self.trigger_timestamp,
            "completion_timestamp": self.completion_timestamp,
            "is_savepoint": self.is_savepoint,
            "operators": {
                uid: {str(subtask): handle_json(h) for subtask, h in sorted(by_subtask.items())}
                for uid, by_subtask in sorted(self.operator_states.items())
            },
            "master_states": {
                ident: handle_json(h) for ident, h in sorted(self.master_states.items())
            },
            "stats": self.stats.to_json() if self.stats is not None else None,
        }
        if self.finished_operators:  # absent when no task had finished (older readers)
            metadata["finished_operators"] = {
                uid: {"parallelism": parallelism, "subtasks": list(subtasks)}
                for uid, (parallelism, subtasks) in sorted(self.finished_operators.items())
            }
        return metadata

    @classmethod
    def from_metadata(
        cls, metadata: dict[str, Any], external_path: str | None = None
    ) -> CompletedCheckpoint:
        """Rebuild from a ``_metadata`` document (the stats stay behind: only their
        JSON form is stored). Raises ``ValueError`` for an unknown format version."""
        version = metadata.get("format_version")
        if version != METADATA_FORMAT_VERSION:
            raise ValueError(
                f"checkpoint metadata has format version {version!r}; this lockgate reads "
                f"version {METADATA_FORMAT_VERSION}"
            )
        return cls(
            checkpoint_id=int(metadata["checkpoint_id"]),
            trigger_timestamp=int(metadata["trigger_timestamp"]),
            completion_timestamp=int(metadata["completion_timestamp"]),
            operator_states={
                uid: {int(subtask): _handle_from_json(h) for subtask, h in by_subtask.items()}
                for uid, by_subtask in metadata.get("operators", {}).items()
            },
            master_states={
                ident: _handle_from_json(h)
                for ident, h in metadata.get("master_states", {}).items()
            },
            is_savepoint=bool(metadata.get("is_savepoint", False)),
            external_path=external_path,
            job_name=str(metadata.get("job_name", "")),
            finished_operators={
                uid: (int(entry["parallelism"]), tuple(int(i) for i in entry["subtasks"]))
                for uid, entry in metadata.get("finished_operators", {}).items()
            },
        )


class CompletedCheckpointStore:
    """The newest ``retained`` completed checkpoints, oldest first (M-C8)."""

    def __init__(self, storage: CheckpointStorage, retained: int) -> None:
        if retained < 1:
            raise ValueError(f"retained must be >= 1, got {retained}")
        self.storage = storage
        self.retained = retained
        self._checkpoints: list[CompletedCheckpoint] = []
        #: reference counts of the shared state files of the retained checkpoints (M-R4)
        self.shared = SharedStateRegistry(storage)

    def recover(self) -> list[CompletedCheckpoint]:
        """Adopt the completed checkpoints (not savepoints) already in storage, ascending
        by id, and register their shared state files; a checkpoint whose metadata cannot
        be read is skipped with a warning. Nothing is discarded here: the next
        :meth:`add` trims to ``retained``. When every checkpoint's metadata was read,
        shared files no retained checkpoint references (uploads of checkpoints that
        never completed) are deleted: call it before the run's first trigger."""
        adopted: list[CompletedCheckpoint] = []
        unreadable = False
        for checkpoint_id in self.storage.completed_ids():
            if any(c.checkpoint_id == checkpoint_id for c in self._checkpoints):
                continue
            try:
                checkpoint = CompletedCheckpoint.from_metadata(
                    self.storage.read_metadata(checkpoint_id)
                )
            except Exception as e:  # noqa: BLE001 - one bad checkpoint must not stop the rest
                log.warning(
                    "checkpoint %d in %s cannot be read and is not adopted: %s",
                    checkpoint_id,
                    self.storage.url,
                    e,
                )
                unreadable = True
                continue
            if not checkpoint.is_savepoint:
                adopted.append(checkpoint)
        self._checkpoints = sorted(self._checkpoints + adopted, key=lambda c: c.checkpoint_id)
        for checkpoint in adopted:
            self.shared.register(checkpoint.checkpoint_id, checkpoint.handles())
        if not unreadable:  # an unreadable checkpoint may reference shared files: keep them
            self.shared.delete_orphans()
        return adopted

    def add(
        self, checkpoint: CompletedCheckpoint, *, discard: bool = True
    ) -> list[CompletedCheckpoint]:
        """Add the newest completed checkpoint: write the durable pointer, register its
        shared files, then remove the oldest beyond ``retained`` and (``discard``)
        discard them; return the removed ones. With ``discard=False`` the caller
        discards them later with :meth:`discard` (the coordinator does, after it has
        notified the tasks: deleting files is not on a commit's path). A failure to
        discard is logged (the new checkpoint stands). Raises (store unchanged) when
        writing the pointer fails or when the checkpoint references a shared file that
        no longer exists."""
        if checkpoint.is_savepoint:
            raise ValueError("savepoints are never added to the completed-checkpoint store")
        if self._checkpoints and checkpoint.checkpoint_id <= self._checkpoints[-1].checkpoint_id:
            raise ValueError(
                f"checkpoint {checkpoint.checkpoint_id} is not newer than the newest completed "
                f"one ({self._checkpoints[-1].checkpoint_id})"
            )
        self.shared.check_available(checkpoint.checkpoint_id, checkpoint.handles())
        self.storage.write_latest(checkpoint.checkpoint_id)
        self._checkpoints.append(checkpoint)
        # registered before older checkpoints are discarded: files it shares with them stay
        self.shared.register(checkpoint.checkpoint_id, checkpoint.handles())
        removed: list[CompletedCheckpoint] = []
        while len(self._checkpoints) > self.retained:
            removed.append(self._checkpoints.pop(0))
        if discard:
            self.discard(removed)
        return removed

    def discard(self, removed: list[CompletedCheckpoint]) -> None:
        """Discard checkpoints :meth:`add` removed from the store (none is retained any
        more: a restore never picks them)."""
        for checkpoint in removed:
            self._discard(checkpoint)

    def _discard(self, checkpoint: CompletedCheckpoint) -> None:
        """Delete the checkpoint's folder, then the shared files only it referenced."""
        try:
            self.storage.discard(checkpoint.checkpoint_id)
        except Exception as e:  # noqa: BLE001 - leftover files only cost space
            log.warning("discarding checkpoint %d failed: %s", checkpoint.checkpoint_id, e)
        self.shared.unregister(checkpoint.checkpoint_id)

    def latest(self) -> CompletedCheckpoint | None:
        return self._checkpoints[-1] if self._checkpoints else None

    def all(self) -> list[CompletedCheckpoint]:
        """The retained checkpoints, oldest first (a copy of the list)."""
        return list(self._checkpoints)

    def __len__(self) -> int:
        return len(self._checkpoints)

    def shutdown(self, retain: bool) -> None:
        """The job ended: keep the checkpoints in storage (``retain``), or discard all
        of them (e.g. cancellation with ``ExternalizedRetention.DELETE_ON_CANCELLATION``)
        with every shared state file they reference (and unreferenced leftovers).
        When they are kept, so are their shared-file registrations: a late
        acknowledgement deleting its unreferenced shared files never deletes one a kept
        checkpoint uses. The durable pointer is left as is (it keeps later ids
        increasing)."""
        if not retain:
            for checkpoint in self._checkpoints:
                self._discard(checkpoint)
            self.shared.delete_orphans()
        self._checkpoints = []

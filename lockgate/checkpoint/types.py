"""Values the checkpoint parts exchange: state handles, acknowledgements, metrics, reasons.

All are small, immutable-by-convention and picklable: they cross the control
plane between slots and the driver.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ..core.state_records import state_record

#: a subtask of the job: (vertex id, subtask index)
TaskKey = tuple[int, int]


class CheckpointFailureReason(enum.Enum):
    """Why a checkpoint did not complete (its stats and abort notices carry it)."""

    SUBSUMED = "subsumed by a newer checkpoint"
    TIMEOUT = "expired before completing"
    DECLINED = "declined by a task"
    CANCELLED_UPSTREAM = "cancelled upstream (cancellation marker)"
    TASK_NOT_RUNNING = "a task was not running"
    TRIGGER_FAILED = "triggering failed"
    FINALIZE_FAILED = "writing the checkpoint failed"
    COORDINATOR_SHUTDOWN = "the coordinator shut down"
    PERIODIC_STOPPED = "periodic scheduling was stopped"
    TOO_MANY_CONCURRENT = "too many checkpoints in progress"
    MIN_PAUSE = "the minimum pause since the last checkpoint has not elapsed"
    ID_UNAVAILABLE = "no new checkpoint id could be obtained"
    ASYNC_FAILED = "the asynchronous snapshot part failed"
    SYNC_FAILED = "the synchronous snapshot part failed"


@state_record("checkpoint.state_handle")
@dataclass(frozen=True)
class StateHandle:
    """A state file in checkpoint storage: its path relative to the storage root, its
    size in bytes and its CRC32 checksum.

    ``shared``: the shared files (incremental checkpoints, M-R4) the state in this file
    references, each a handle of a raw file under ``shared/`` whose ``size`` and
    ``checksum`` are the length and CRC32 of its bytes. They are not owned by one
    checkpoint: the driver's shared-state registry counts the retained checkpoints that
    reference each one and deletes it when none does.

    ``mac``: for a shared file written by a storage with a signing key, the hex
    HMAC-SHA256 of its bytes (the handle itself is in signed files); empty otherwise."""

    path: str
    size: int
    checksum: int
    shared: tuple[StateHandle, ...] = ()
    mac: str = ""


@dataclass
class SubtaskCheckpointMetrics:
    """What one subtask measured for one checkpoint (M-B10, M-T3)."""

    sync_ms: float = 0.0
    async_ms: float = 0.0
    alignment_ms: float = 0.0
    start_delay_ms: float = 0.0
    persisted_inflight_bytes: int = 0
    state_size: int = 0
    unaligned: bool = False


@dataclass
class TaskAcknowledgement:
    """A subtask's acknowledgement: per operator uid, the handle of its state (absent for
    operators without state), and its metrics."""

    task: TaskKey
    checkpoint_id: int
    handles: dict[str, StateHandle] = field(default_factory=dict)
    metrics: SubtaskCheckpointMetrics = field(default_factory=SubtaskCheckpointMetrics)


@dataclass
class CheckpointStats:
    """One checkpoint as ``JobClient.checkpoints()`` reports it."""

    checkpoint_id: int
    trigger_timestamp: int
    status: str  # "in_progress", "completed", "failed"
    is_savepoint: bool = False
    duration_ms: float | None = None
    state_size: int = 0
    persisted_inflight_bytes: int = 0
    failure_reason: str | None = None
    external_path: str | None = None
    subtasks: dict[TaskKey, SubtaskCheckpointMetrics] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "trigger_timestamp": self.trigger_timestamp,
            "status": self.status,
            "is_savepoint": self.is_savepoint,
            "duration_ms": self.duration_ms,
            "state_size": self.state_size,
            "persisted_inflight_bytes": self.persisted_inflight_bytes,
            "failure_reason": self.failure_reason,
            "external_path": self.external_path,
            "subtasks": [
                {"vertex": k[0], "subtask": k[1], **vars(m)}
                for k, m in sorted(self.subtasks.items())
            ],
        }

"""A checkpoint that was triggered and is not yet fully acknowledged (M-C2, M-C5).

:class:`PendingCheckpoint` holds what Flink's PendingCheckpoint holds: the tasks
still to acknowledge, the tasks that did, and operator uid → {subtask → state
handle}; plus master states (M-C9), per-task metrics and whether it was
discarded (aborted). It does no I/O and takes no lock: the coordinator owns it
and calls it under its own lock.

:meth:`PendingCheckpoint.acknowledge` never raises for a bad acknowledgement; it
returns an :class:`AckResult` (DESIGN.md §5) and records the ack only on SUCCESS.
The caller deletes the reported state for UNKNOWN and DISCARDED (M-C5) and keeps
it for DUPLICATE (the handles are the ones already recorded).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ...core.elements import CheckpointOptions, CheckpointType
from ..types import (
    CheckpointFailureReason,
    StateHandle,
    SubtaskCheckpointMetrics,
    TaskAcknowledgement,
    TaskKey,
)


class AckResult(enum.Enum):
    """What became of an acknowledgement (M-C5)."""

    SUCCESS = "success"  # recorded; complete the checkpoint if no task is left
    DUPLICATE = "duplicate"  # this task already acknowledged: ignored
    UNKNOWN = "unknown"  # no such pending checkpoint (or task): the reported state is deleted
    DISCARDED = "discarded"  # the checkpoint was aborted: the reported state is deleted


@dataclass
class PendingCheckpoint:
    """One triggered checkpoint, collecting acknowledgements (M-C2).

    ``trigger_timestamp`` is the barrier's wall-clock timestamp (epoch ms);
    ``trigger_monotonic_ms`` the coordinator clock's monotonic time of the trigger
    (durations and timeouts).
    """

    checkpoint_id: int
    trigger_timestamp: int
    trigger_monotonic_ms: float
    options: CheckpointOptions
    tasks_to_acknowledge: set[TaskKey]
    acknowledged: set[TaskKey] = field(default_factory=set)
    operator_states: dict[str, dict[int, StateHandle]] = field(default_factory=dict)
    master_states: dict[str, StateHandle] = field(default_factory=dict)
    task_metrics: dict[TaskKey, SubtaskCheckpointMetrics] = field(default_factory=dict)
    discarded: bool = False
    failure_reason: CheckpointFailureReason | None = None
    #: tasks finished before the trigger or before acknowledging (FLIP-147)
    finished_tasks: set[TaskKey] = field(default_factory=set)

    @property
    def is_savepoint(self) -> bool:
        return self.options.type is CheckpointType.SAVEPOINT

    @property
    def can_be_subsumed(self) -> bool:
        """Whether a newer completed checkpoint aborts this one (M-C7): checkpoints yes,
        savepoints never (a savepoint is a user's one-off request; it completes or fails
        on its own)."""
        return not self.is_savepoint

    @property
    def is_fully_acknowledged(self) -> bool:
        return not self.tasks_to_acknowledge and not self.discarded

    def acknowledge(self, ack: TaskAcknowledgement) -> AckResult:
        """Record ``ack`` (M-C5). DISCARDED once aborted; DUPLICATE for a task that
        already acknowledged; UNKNOWN for a task this checkpoint does not wait for;
        else SUCCESS: the task moves to ``acknowledged`` and its handles and metrics
        are kept."""
        if ack.checkpoint_id != self.checkpoint_id:
            return AckResult.UNKNOWN
        if self.discarded:
            return AckResult.DISCARDED
        if ack.task in self.acknowledged:
            return AckResult.DUPLICATE
        if ack.task not in self.tasks_to_acknowledge:
            return AckResult.UNKNOWN
        self.tasks_to_acknowledge.discard(ack.task)
        self.acknowledged.add(ack.task)
        subtask = ack.task[1]
        for uid, handle in ack.handles.items():
            self.operator_states.setdefault(uid, {})[subtask] = handle
        self.task_metrics[ack.task] = ack.metrics
        return AckResult.SUCCESS

    def acknowledge_finished(self, task: TaskKey) -> bool:
        """``task`` finished without acknowledging (FLIP-147): a task finishes only after
        its final checkpoint completed, so it has no state left; the checkpoint records
        it as finished instead of waiting for it. False (nothing changes) when this
        checkpoint does not wait for ``task`` or was discarded."""
        if self.discarded or task not in self.tasks_to_acknowledge:
            return False
        self.tasks_to_acknowledge.discard(task)
        self.finished_tasks.add(task)
        return True

    def add_master_state(self, identifier: str, handle: StateHandle) -> None:
        """Master hook ``identifier``'s state for this checkpoint (M-C9)."""
        self.master_states[identifier] = handle

    def discard(self, reason: CheckpointFailureReason) -> bool:
        """Mark aborted; False when it already was (abort happens once)."""
        if self.discarded:
            return False
        self.discarded = True
        self.failure_reason = reason
        return True

    def handles(self) -> list[StateHandle]:
        """Every state handle collected so far (operators, then master states)."""
        result = [h for by_subtask in self.operator_states.values() for h in by_subtask.values()]
        result.extend(self.master_states.values())
        return result

    def state_size(self) -> int:
        """Bytes of all collected state, master states included."""
        return sum(h.size for h in self.handles())

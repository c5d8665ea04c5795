"""The checkpoint coordinator and its collaborators (M-C1 … M-C9).

:class:`CheckpointCoordinator` runs on the driver; it delegates to small parts,
one module each: the request decider (may a checkpoint start now), the id
counter, pending checkpoints, the failure manager, the completed-checkpoint
store, the stats tracker, master hooks and the scheduler of delayed actions.
"""

from .completed_store import METADATA_FORMAT_VERSION, CompletedCheckpoint, CompletedCheckpointStore
from .coordinator import CheckpointCoordinator, TaskGateway
from .failure_manager import COUNTED_REASONS, CheckpointFailureManager
from .hooks import MasterHook, master_state_name
from .id_counter import CheckpointIdCounter
from .pending import AckResult, PendingCheckpoint
from .request_decider import TriggerFacts, decide_trigger, pause_remaining_ms
from .scheduler import ManualScheduler, ScheduledTask, Scheduler, ThreadScheduler
from .stats import CheckpointStatsTracker

__all__ = [
    "COUNTED_REASONS",
    "METADATA_FORMAT_VERSION",
    "AckResult",
    "CheckpointCoordinator",
    "CheckpointFailureManager",
    "CheckpointIdCounter",
    "CheckpointStatsTracker",
    "CompletedCheckpoint",
    "CompletedCheckpointStore",
    "ManualScheduler",
    "MasterHook",
    "PendingCheckpoint",
    "ScheduledTask",
    "Scheduler",
    "TaskGateway",
    "ThreadScheduler",
    "TriggerFacts",
    "decide_trigger",
    "master_state_name",
    "pause_remaining_ms",
]

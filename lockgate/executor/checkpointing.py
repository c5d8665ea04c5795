"""The checkpoint side of one attempt, shared by both executors.

:class:`CheckpointRun` owns the attempt's storage, scheduler and
coordinator: the executor reports task states to it, routes acknowledgements
and declines to it, and calls ``stop`` with the attempt's outcome. On
cancellation, completed checkpoints are deleted unless the externalized
retention keeps them (M-S3); after a failure or a normal end they stay.
"""

from __future__ import annotations

from typing import Any

from ..checkpoint.config import ExternalizedRetention
from ..checkpoint.coordinator import CheckpointCoordinator, ThreadScheduler
from ..checkpoint.storage import CheckpointStorage, open_storage
from ..checkpoint.types import CheckpointFailureReason, TaskAcknowledgement, TaskKey
from ..graph.execution_plan import ExecutionPlan
from ..time.clock import Clock


class CheckpointRun:
    def __init__(self, plan: ExecutionPlan, gateway: Any, clock: Clock) -> None:
        cfg = plan.checkpoint
        assert cfg is not None and cfg.storage is not None
        self.config = cfg
        self.storage: CheckpointStorage = open_storage(cfg.storage)
        self.scheduler = ThreadScheduler(clock)
        self.coordinator = CheckpointCoordinator(
            cfg, job_name=plan.job_name, source_tasks=plan.source_tasks(),
            tasks=plan.subtasks(), gateway=gateway, storage=self.storage, clock=clock,
            scheduler=self.scheduler,
        )
        self._stopped = False

    # responder side (any thread) --------------------------------------------------------
    def acknowledge(self, ack: TaskAcknowledgement) -> None:
        self.coordinator.receive_acknowledge(ack)

    def decline(self, task: TaskKey, checkpoint_id: int,
                reason: CheckpointFailureReason) -> None:
        self.coordinator.receive_decline(task, checkpoint_id, reason)

    # lifecycle --------------------------------------------------------------------------
    def start(self, running: list[TaskKey]) -> None:
        for task in running:
            self.coordinator.task_running(task)
        self.coordinator.start()

    def task_finished(self, task: TaskKey) -> None:
        self.coordinator.task_finished(task)

    def stop(self, *, cancelled: bool) -> None:
        if self._stopped:
            return
        self._stopped = True
        retain = not cancelled or (
            self.config.externalized is ExternalizedRetention.RETAIN_ON_CANCELLATION
        )
        try:
            self.coordinator.shutdown(retain_completed=retain)
        finally:
            self.scheduler.shutdown()

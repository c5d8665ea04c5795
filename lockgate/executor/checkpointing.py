"""The checkpoint side of one attempt, shared by both executors.

:class:`CheckpointRun` owns the attempt's storage, scheduler and
coordinator: the executor reports task states to it, routes acknowledgements
and declines to it, and calls ``stop`` with the attempt's outcome. On
cancellation, completed checkpoints are deleted unless the externalized
retention keeps them (M-S3); after a failure or a normal end they stay.

Tasks report RUNNING themselves once initialized (operators opened, state restored,
in-flight data replayed), as Flink's INITIALIZING state ends: checkpoints are
triggered only when every unfinished task runs, so a slow restore or replay never
eats into the first checkpoint's timeout.

It gives the coordinator the job's :class:`~lockgate.checkpoint.coordinator.plan.JobTopology`
(which tasks feed which, which operators each vertex runs), so checkpoints go on
after tasks finished (FLIP-147): finished tasks are recorded as finished, and a task
whose upstream tasks all finished is triggered itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..checkpoint.config import ExternalizedRetention
from ..checkpoint.coordinator import CheckpointCoordinator, ThreadScheduler
from ..checkpoint.coordinator.plan import JobTopology
from ..checkpoint.storage import CheckpointStorage
from ..checkpoint.storage_url import open_storage
from ..checkpoint.types import CheckpointFailureReason, TaskAcknowledgement, TaskKey
from ..core.clock import Clock
from ..graph.execution_plan import ExecutionPlan


def job_topology(plan: ExecutionPlan) -> JobTopology:
    """Per task, the tasks whose channels feed it; per vertex, its operators' uids and
    its parallelism."""
    upstream: dict[TaskKey, frozenset[TaskKey]] = {}
    for v in plan.vertices:
        for i in range(v.parallelism):
            feeding: set[TaskKey] = set()
            for edge_id in v.in_edges:
                edge = plan.edges[edge_id]
                feeding.update((edge.source_vertex, p) for p in edge.producers_of(i))
            upstream[(v.id, i)] = frozenset(feeding)
    return JobTopology(
        upstream=upstream,
        operators={v.id: tuple(op.uid for op in v.operators) for v in plan.vertices},
        parallelism={v.id: v.parallelism for v in plan.vertices},
    )


class CheckpointRun:
    def __init__(
        self,
        plan: ExecutionPlan,
        gateway: Any,
        clock: Clock,
        *,
        finished_results: dict[TaskKey, Any] | None = None,
    ) -> None:
        """``finished_results``: where the sink results finished tasks report are kept
        (across attempts: a task restored as finished returns its earlier result)."""
        cfg = plan.checkpoint
        assert cfg is not None and cfg.storage is not None
        self.config = cfg
        self.storage: CheckpointStorage = open_storage(cfg.storage)
        self.scheduler = ThreadScheduler(clock)
        self.coordinator = CheckpointCoordinator(
            cfg,
            job_name=plan.job_name,
            source_tasks=plan.source_tasks(),
            tasks=plan.subtasks(),
            gateway=gateway,
            storage=self.storage,
            clock=clock,
            scheduler=self.scheduler,
            topology=job_topology(plan),
        )
        self._stopped = False
        self.finished_results: dict[TaskKey, Any] = (
            finished_results if finished_results is not None else {}
        )
        self._restore = plan.restore
        self._operators = {v.id: [op.uid for op in v.operators] for v in plan.vertices}

    # responder side (any thread) --------------------------------------------------------
    def acknowledge(self, ack: TaskAcknowledgement) -> None:
        self.coordinator.receive_acknowledge(ack)

    def decline(self, task: TaskKey, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self.coordinator.receive_decline(task, checkpoint_id, reason)

    def end_of_data(self, task: TaskKey, last_snapshot_id: int) -> None:
        """``task`` finished its operators and waits for its final checkpoint, one newer
        than ``last_snapshot_id`` (FLIP-147)."""
        self.coordinator.task_reached_end_of_data(task, last_snapshot_id)

    # lifecycle --------------------------------------------------------------------------
    def task_running(self, task: TaskKey) -> None:
        """``task`` is RUNNING: it opened its operators, restored its state and replayed
        its restored in-flight data (Flink's INITIALIZING ends there). Until every task
        that has not finished reports it, no checkpoint is triggered: the trigger is
        cancelled with ``TASK_NOT_RUNNING``, which does not count as a failure (M-C1)."""
        self.coordinator.task_running(task)

    def start(self, running: Iterable[TaskKey] = ()) -> None:
        """Start periodic checkpoints. Tasks report RUNNING themselves
        (:meth:`task_running`) once they initialized; ``running`` marks tasks running at
        once (for callers that know no initialization is left)."""
        for task in running:
            self.coordinator.task_running(task)
        self.coordinator.start()

    def task_finished(self, task: TaskKey, results: dict[str, Any] | None = None) -> None:
        """``task`` ended after its final checkpoint (FLIP-147); ``results``: its sink
        results (None when it was restored as finished and ran nothing). A task the
        restored checkpoint recorded as finished ran from empty state: what it reported
        when it finished before comes first (list results are concatenated)."""
        if results is not None:
            self.finished_results[task] = self._with_earlier(task, results)
        self.coordinator.task_finished(task)

    def _with_earlier(self, task: TaskKey, results: dict[str, Any]) -> dict[str, Any]:
        earlier = self.finished_results.get(task)
        restore = self._restore
        if earlier is None or restore is None:
            return results
        vertex, subtask = task
        combined = dict(results)
        for uid in self._operators.get(vertex, ()):
            entry = restore.finished_operators.get(uid)
            if entry is None or subtask not in entry[1] or uid not in earlier:
                continue
            before, now = earlier[uid], results.get(uid)
            if now is None or now == []:
                combined[uid] = before
            elif isinstance(before, list) and isinstance(now, list):
                combined[uid] = before + now
        return combined

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

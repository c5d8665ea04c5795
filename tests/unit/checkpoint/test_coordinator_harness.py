"""Test doubles shared by the ``test_coordinator_*`` modules (no tests of its own).

A :class:`RecordingGateway` records what the coordinator asks of the tasks; a
:class:`Harness` wires a :class:`CheckpointCoordinator` to it, to a
:class:`MemoryCheckpointStorage`, a :class:`ManualClock` and a
:class:`ManualScheduler`. Nothing sleeps: time moves with ``harness.advance(ms)``.

The job: two source subtasks of vertex 0 (operator uid ``"src"``) feeding two
subtasks of vertex 1 (operator uid ``"sum"``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lockgate.checkpoint.config import CheckpointConfig
from lockgate.checkpoint.coordinator import (
    AckResult,
    CheckpointCoordinator,
    CheckpointIdCounter,
    ManualScheduler,
    MasterHook,
)
from lockgate.checkpoint.coordinator.plan import JobTopology
from lockgate.checkpoint.storage import MemoryCheckpointStorage
from lockgate.checkpoint.types import (
    CheckpointFailureReason,
    StateHandle,
    SubtaskCheckpointMetrics,
    TaskAcknowledgement,
    TaskKey,
)
from lockgate.core.clock import ManualClock
from lockgate.core.elements import CheckpointBarrier

SOURCES: list[TaskKey] = [(0, 0), (0, 1)]
SINKS: list[TaskKey] = [(1, 0), (1, 1)]
TASKS: list[TaskKey] = SOURCES + SINKS
UIDS = {0: "src", 1: "sum"}
#: the job's shape (FLIP-147): every source subtask feeds every sink subtask
TOPOLOGY = JobTopology(
    upstream={**{s: frozenset() for s in SOURCES}, **{t: frozenset(SOURCES) for t in SINKS}},
    operators={vertex: (uid,) for vertex, uid in UIDS.items()},
    parallelism={0: 2, 1: 2},
)
START_MS = 1_700_000_000_000


class RecordingGateway:
    """Records every call; ``fail_trigger_for`` makes ``trigger_source`` raise for
    those tasks; ``on_trigger`` (if set) runs inside ``trigger_source``."""

    def __init__(self) -> None:
        self.triggers: list[tuple[TaskKey, CheckpointBarrier]] = []
        self.completed: list[int] = []
        self.aborted: list[tuple[int, CheckpointFailureReason]] = []
        self.failures: list[BaseException] = []
        self.fail_trigger_for: set[TaskKey] = set()
        self.calls: list[str] = []

    def trigger_source(self, task: TaskKey, barrier: CheckpointBarrier) -> None:
        self.calls.append(f"trigger {barrier.checkpoint_id} {task}")
        if task in self.fail_trigger_for:
            raise ConnectionError(f"task {task} unreachable")
        self.triggers.append((task, barrier))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.calls.append(f"complete {checkpoint_id}")
        self.completed.append(checkpoint_id)

    def notify_checkpoint_aborted(
        self, checkpoint_id: int, reason: CheckpointFailureReason
    ) -> None:
        self.calls.append(f"abort {checkpoint_id}")
        self.aborted.append((checkpoint_id, reason))

    def fail_job(self, error: BaseException) -> None:
        self.calls.append("fail_job")
        self.failures.append(error)

    def barriers(self) -> list[CheckpointBarrier]:
        """The distinct barriers sent, in order."""
        seen: dict[int, CheckpointBarrier] = {}
        for _, barrier in self.triggers:
            seen.setdefault(barrier.checkpoint_id, barrier)
        return list(seen.values())

    def triggered_tasks(self, checkpoint_id: int) -> list[TaskKey]:
        return [t for t, b in self.triggers if b.checkpoint_id == checkpoint_id]

    def aborted_ids(self) -> list[int]:
        return [i for i, _ in self.aborted]

    def abort_reason(self, checkpoint_id: int) -> CheckpointFailureReason:
        return dict(self.aborted)[checkpoint_id]


class RecordingHook:
    """A master hook whose state is ``f"{identifier}@{id}"`` (or ``state``)."""

    def __init__(self, identifier: str = "offsets", state: Any = "", fail: bool = False) -> None:
        self.identifier = identifier
        self.state = state
        self.fail = fail
        self.triggered: list[tuple[int, int]] = []
        self.completed: list[int] = []
        self.during_trigger: Any = None  # a callable run inside trigger_checkpoint

    def trigger_checkpoint(self, checkpoint_id: int, timestamp: int) -> Any | None:
        self.triggered.append((checkpoint_id, timestamp))
        if self.during_trigger is not None:
            self.during_trigger()
        if self.fail:
            raise RuntimeError("hook cannot snapshot")
        if self.state is None:
            return None
        return self.state or f"{self.identifier}@{checkpoint_id}"

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.completed.append(checkpoint_id)


@dataclass
class Harness:
    coordinator: CheckpointCoordinator
    gateway: RecordingGateway
    storage: MemoryCheckpointStorage
    clock: ManualClock
    scheduler: ManualScheduler
    config: CheckpointConfig
    hooks: list[Any] = field(default_factory=list)

    def trigger(self, **kwargs: Any) -> int:
        """Trigger and insist that it worked."""
        result = self.coordinator.trigger_checkpoint(**kwargs)
        assert isinstance(result, int), f"trigger was cancelled: {result}"
        return result

    def handles(
        self, checkpoint_id: int, task: TaskKey, size_hint: str = ""
    ) -> dict[str, StateHandle]:
        """Write the state of ``task`` for ``checkpoint_id`` into storage; its handles."""
        uid = UIDS[task[0]]
        state = f"state of {uid}[{task[1]}] at checkpoint {checkpoint_id}{size_hint}"
        return {uid: self.storage.write_state(checkpoint_id, f"{uid}-{task[1]}", state)}

    def ack(
        self,
        checkpoint_id: int,
        task: TaskKey,
        metrics: SubtaskCheckpointMetrics | None = None,
        handles: dict[str, StateHandle] | None = None,
    ) -> AckResult:
        if handles is None:
            handles = self.handles(checkpoint_id, task)
        ack = TaskAcknowledgement(
            task,
            checkpoint_id,
            handles,
            metrics if metrics is not None else SubtaskCheckpointMetrics(),
        )
        return self.coordinator.receive_acknowledge(ack)

    def ack_all(self, checkpoint_id: int, tasks: Iterable[TaskKey] = TASKS) -> list[AckResult]:
        return [self.ack(checkpoint_id, t) for t in tasks]

    def advance(self, ms: float) -> int:
        return self.scheduler.advance(ms)

    def files_of(self, checkpoint_id: int) -> list[str]:
        prefix = f"chk-{checkpoint_id}/"
        return sorted(p for p in self.storage.files if p.startswith(prefix))


def make_harness(
    *,
    storage: MemoryCheckpointStorage | None = None,
    hooks: Iterable[MasterHook] = (),
    id_counter: CheckpointIdCounter | None = None,
    running: bool = True,
    clock: ManualClock | None = None,
    topology: JobTopology | None = None,
    **config: Any,
) -> Harness:
    """A coordinator of the 2 → 2 job; ``config`` overrides the CheckpointConfig fields
    (defaults: interval 100 ms, timeout 1000 ms). ``running``: report every task
    running. ``topology``: the job's shape for checkpoints after tasks finished
    (:data:`TOPOLOGY`, every source feeding every sink), or none."""
    settings: dict[str, Any] = {"interval": 100, "timeout": 1000}
    settings.update(config)
    cfg = CheckpointConfig(**settings)
    clock = clock if clock is not None else ManualClock(START_MS)
    scheduler = ManualScheduler(clock)
    storage = storage if storage is not None else MemoryCheckpointStorage()
    gateway = RecordingGateway()
    hooks = list(hooks)
    coordinator = CheckpointCoordinator(
        cfg,
        job_name="test job",
        source_tasks=SOURCES,
        tasks=TASKS,
        gateway=gateway,
        storage=storage,
        clock=clock,
        scheduler=scheduler,
        hooks=hooks,
        id_counter=id_counter,
        topology=topology,
    )
    if running:
        for task in TASKS:
            coordinator.task_running(task)
    return Harness(coordinator, gateway, storage, clock, scheduler, cfg, hooks)

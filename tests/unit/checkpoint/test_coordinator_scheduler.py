"""The schedulers behind periodic checkpoint triggers and timeouts (M-C1, M-C4)."""

from __future__ import annotations

import threading

from lockgate.checkpoint.coordinator import ManualScheduler, ThreadScheduler
from lockgate.checkpoint.coordinator.scheduler import THREAD_NAME
from lockgate.core.clock import ManualClock, SystemClock


def test_manual_scheduler_runs_nothing_until_its_time_has_come() -> None:
    clock = ManualClock()
    scheduler = ManualScheduler(clock)
    ran: list[str] = []
    scheduler.schedule(10, lambda: ran.append("a"))
    assert scheduler.run_due() == 0
    clock.advance(9)
    assert scheduler.run_due() == 0 and ran == []
    clock.advance(1)
    assert scheduler.run_due() == 1 and ran == ["a"]
    assert scheduler.run_due() == 0, "an action runs once"


def test_manual_scheduler_runs_due_actions_in_time_order_and_ties_in_scheduling_order() -> None:
    clock = ManualClock()
    scheduler = ManualScheduler(clock)
    ran: list[str] = []
    scheduler.schedule(30, lambda: ran.append("c"))
    scheduler.schedule(10, lambda: ran.append("a1"))
    scheduler.schedule(10, lambda: ran.append("a2"))
    scheduler.schedule(20, lambda: ran.append("b"))
    clock.advance(100)
    assert scheduler.run_due() == 4
    assert ran == ["a1", "a2", "b", "c"]


def test_manual_scheduler_advance_runs_each_action_at_its_own_due_time_and_those_it_schedules() -> (
    None
):
    clock = ManualClock()
    scheduler = ManualScheduler(clock)
    seen: list[tuple[str, float]] = []

    def first() -> None:
        seen.append(("first", clock.monotonic_ms()))
        scheduler.schedule(20, lambda: seen.append(("second", clock.monotonic_ms())))

    scheduler.schedule(10, first)
    assert scheduler.advance(100) == 2
    assert seen == [("first", 10.0), ("second", 30.0)]
    assert clock.monotonic_ms() == 100.0


def test_a_cancelled_action_never_runs_and_shutdown_drops_everything() -> None:
    clock = ManualClock()
    scheduler = ManualScheduler(clock)
    ran: list[str] = []
    task = scheduler.schedule(5, lambda: ran.append("cancelled"))
    scheduler.schedule(5, lambda: ran.append("kept"))
    task.cancel()
    assert task.cancelled
    scheduler.advance(10)
    assert ran == ["kept"]
    scheduler.schedule(5, lambda: ran.append("dropped"))
    scheduler.shutdown()
    late = scheduler.schedule(0, lambda: ran.append("after shutdown"))
    assert late.cancelled
    scheduler.advance(10)
    assert ran == ["kept"]


def test_many_cancelled_actions_do_not_accumulate() -> None:
    clock = ManualClock()
    scheduler = ManualScheduler(clock)
    for _ in range(1000):
        scheduler.schedule(1_000_000, lambda: None).cancel()
    assert len(scheduler) == 0
    assert len(scheduler._queue._heap) < 200


def test_thread_scheduler_runs_actions_on_its_named_thread_survives_an_error_and_joins() -> None:
    scheduler = ThreadScheduler(SystemClock())
    try:
        done = threading.Event()
        threads: list[str] = []

        def boom() -> None:
            raise RuntimeError("an action fails")

        def record() -> None:
            threads.append(threading.current_thread().name)
            done.set()

        cancelled = scheduler.schedule(5, lambda: threads.append("cancelled ran"))
        cancelled.cancel()
        scheduler.schedule(0, boom)
        scheduler.schedule(20, record)
        assert done.wait(5.0), "the action after a failing one never ran"
        assert threads == [THREAD_NAME]
    finally:
        scheduler.shutdown()
    assert not scheduler._thread.is_alive()
    assert scheduler.schedule(0, lambda: None).cancelled


def test_thread_scheduler_shutdown_from_one_of_its_own_actions_does_not_deadlock() -> None:
    scheduler = ThreadScheduler(SystemClock())
    done = threading.Event()

    def stop() -> None:
        scheduler.shutdown()
        done.set()

    scheduler.schedule(0, stop)
    assert done.wait(5.0)
    scheduler._thread.join(5.0)
    assert not scheduler._thread.is_alive()


def test_thread_scheduler_follows_a_manual_clock() -> None:
    clock = ManualClock()
    scheduler = ThreadScheduler(clock)
    try:
        done = threading.Event()
        scheduler.schedule(1000, done.set)
        assert not done.is_set(), "ran before the manual clock reached its time"
        clock.advance(1000)
        assert done.wait(5.0)
    finally:
        scheduler.shutdown()


def test_a_coordinator_on_a_thread_scheduler_triggers_periodically_and_joins_it_on_shutdown() -> (
    None
):
    from test_coordinator_harness import SOURCES, TASKS, RecordingGateway

    from lockgate.checkpoint.config import CheckpointConfig
    from lockgate.checkpoint.coordinator import CheckpointCoordinator
    from lockgate.checkpoint.storage import MemoryCheckpointStorage
    from lockgate.checkpoint.types import TaskAcknowledgement, TaskKey
    from lockgate.core.elements import CheckpointBarrier

    class SignallingGateway(RecordingGateway):
        def __init__(self) -> None:
            super().__init__()
            self.triggered = threading.Event()
            self.done = threading.Event()

        def trigger_source(self, task: TaskKey, barrier: CheckpointBarrier) -> None:
            super().trigger_source(task, barrier)
            self.triggered.set()

        def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
            super().notify_checkpoint_complete(checkpoint_id)
            self.done.set()

    clock = ManualClock()
    scheduler = ThreadScheduler(clock)
    gateway = SignallingGateway()
    coordinator = CheckpointCoordinator(
        CheckpointConfig(interval=100, timeout=10_000),
        job_name="threads",
        source_tasks=SOURCES,
        tasks=TASKS,
        gateway=gateway,
        storage=MemoryCheckpointStorage(),
        clock=clock,
        scheduler=scheduler,
    )
    try:
        for task in TASKS:
            coordinator.task_running(task)
        coordinator.start()
        clock.advance(100)
        assert gateway.triggered.wait(5.0), "the periodic trigger never ran"
        [barrier] = gateway.barriers()
        for task in TASKS:
            coordinator.receive_acknowledge(TaskAcknowledgement(task, barrier.checkpoint_id))
        assert gateway.done.wait(5.0)
        assert gateway.completed == [barrier.checkpoint_id]
    finally:
        coordinator.shutdown()
    assert not scheduler._thread.is_alive()

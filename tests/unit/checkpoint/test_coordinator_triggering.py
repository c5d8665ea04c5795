"""Triggering checkpoints: barriers (M-E2, M-E3), preconditions (M-C1), pending
checkpoints (M-C2), source-only triggers (M-C3), timeouts and trigger errors (M-C4),
periodic scheduling."""

from __future__ import annotations

import pytest
from test_coordinator_harness import (
    SINKS,
    SOURCES,
    START_MS,
    TASKS,
    RecordingHook,
    make_harness,
)

from lockgate.checkpoint.coordinator import CheckpointIdCounter
from lockgate.checkpoint.storage import MemoryCheckpointStorage
from lockgate.checkpoint.types import CheckpointFailureReason
from lockgate.core.elements import CheckpointOptions, CheckpointType
from lockgate.errors import ConfigurationError

R = CheckpointFailureReason

# ------------------------------------------------------------------ M-E2 / M-E3


def test_m_e2_barriers_carry_strictly_increasing_ids_and_the_trigger_timestamp() -> None:
    h = make_harness(max_concurrent=5)
    first = h.trigger()
    h.clock.advance(7)
    second = h.trigger()
    barriers = h.gateway.barriers()
    assert [b.checkpoint_id for b in barriers] == [first, second] and first < second
    assert [b.timestamp for b in barriers] == [START_MS, START_MS + 7]
    assert h.coordinator.pending_checkpoint(second).trigger_timestamp == START_MS + 7  # type: ignore[union-attr]


def test_m_e2_checkpoint_barriers_are_aligned_by_default() -> None:
    h = make_harness()
    h.trigger()
    assert h.gateway.barriers()[0].options == CheckpointOptions(CheckpointType.CHECKPOINT, False)


def test_m_e2_unaligned_config_sends_unaligned_checkpoint_barriers() -> None:
    h = make_harness(unaligned=True)
    h.trigger()
    assert h.gateway.barriers()[0].options == CheckpointOptions(CheckpointType.CHECKPOINT, True)


def test_m_e2_with_a_positive_aligned_timeout_barriers_start_aligned() -> None:
    h = make_harness(unaligned=True, aligned_timeout=50)
    h.trigger()
    assert h.gateway.barriers()[0].options.unaligned is False


def test_m_e2_savepoint_barriers_are_savepoints_and_always_aligned() -> None:
    h = make_harness(unaligned=True)
    h.trigger(savepoint=True)
    assert h.gateway.barriers()[0].options == CheckpointOptions(CheckpointType.SAVEPOINT, False)


def test_m_e2_ids_keep_increasing_after_aborted_checkpoints() -> None:
    # a failure tolerated: past the limit the job fails and nothing is triggered again
    h = make_harness(tolerable_failures=1)
    first = h.trigger()
    h.coordinator.receive_decline(SINKS[0], first, R.DECLINED)
    assert h.trigger() == first + 1


def test_m_e3_barriers_of_several_checkpoints_may_be_in_flight_at_once() -> None:
    h = make_harness(max_concurrent=3)
    ids = [h.trigger(), h.trigger(), h.trigger()]
    assert h.coordinator.pending_ids() == ids
    assert [b.checkpoint_id for b in h.gateway.barriers()] == ids
    h.ack_all(ids[0])
    assert h.gateway.completed == [ids[0]]
    assert h.coordinator.pending_ids() == ids[1:]


# ------------------------------------------------------------------ M-C1 preconditions


def test_m_c1_a_shut_down_coordinator_cancels_every_trigger() -> None:
    h = make_harness()
    h.coordinator.shutdown()
    assert h.coordinator.trigger_checkpoint() is R.COORDINATOR_SHUTDOWN
    assert h.coordinator.trigger_checkpoint(savepoint=True) is R.COORDINATOR_SHUTDOWN
    assert h.gateway.triggers == []


def test_m_c1_stopped_periodic_scheduling_cancels_periodic_triggers_but_not_savepoints() -> None:
    h = make_harness()
    h.coordinator.start()
    h.coordinator.stop_periodic()
    assert h.coordinator.trigger_checkpoint() is R.PERIODIC_STOPPED
    h.advance(1000)
    assert h.gateway.triggers == [], "no periodic trigger after stop_periodic"
    assert isinstance(h.coordinator.trigger_checkpoint(savepoint=True), int)


def test_m_c1_reaching_max_concurrent_cancels_a_periodic_trigger_but_not_a_forced_one() -> None:
    h = make_harness(max_concurrent=1)
    h.trigger()
    assert h.coordinator.trigger_checkpoint() is R.TOO_MANY_CONCURRENT
    assert isinstance(h.coordinator.trigger_checkpoint(forced=True), int)
    assert len(h.coordinator.pending_ids()) == 2


def test_m_c1_the_minimum_pause_after_a_completed_checkpoint_cancels_periodic_triggers() -> None:
    h = make_harness(min_pause=50)
    h.ack_all(h.trigger())
    h.clock.advance(49)
    assert h.coordinator.trigger_checkpoint() is R.MIN_PAUSE
    assert isinstance(h.coordinator.trigger_checkpoint(savepoint=True), int), "forced skips it"
    h.clock.advance(1)
    assert isinstance(h.coordinator.trigger_checkpoint(forced=True), int)


def test_m_c1_min_pause_elapsed_lets_the_next_periodic_trigger_go() -> None:
    h = make_harness(min_pause=50)
    h.ack_all(h.trigger())
    h.clock.advance(50)
    assert isinstance(h.coordinator.trigger_checkpoint(), int)


@pytest.mark.parametrize("missing", [SOURCES[1], SINKS[0]], ids=["source", "non-source"])
def test_m_c1_a_task_not_yet_running_cancels_the_trigger(missing: tuple[int, int]) -> None:
    h = make_harness(running=False)
    for task in TASKS:
        if task != missing:
            h.coordinator.task_running(task)
    assert h.coordinator.trigger_checkpoint() is R.TASK_NOT_RUNNING
    assert h.coordinator.trigger_checkpoint(savepoint=True) is R.TASK_NOT_RUNNING
    assert h.gateway.triggers == []
    h.coordinator.task_running(missing)
    assert isinstance(h.coordinator.trigger_checkpoint(), int)


def test_m_c1_flip147_a_finished_task_is_neither_triggered_nor_waited_for() -> None:
    h = make_harness()
    h.coordinator.task_finished(SOURCES[1])
    checkpoint = h.trigger()
    assert h.gateway.triggered_tasks(checkpoint) == [SOURCES[0]]
    pending = h.coordinator.pending_checkpoint(checkpoint)
    assert pending is not None and SOURCES[1] not in pending.tasks_to_acknowledge
    assert pending.finished_tasks == {SOURCES[1]}


def test_m_c1_flip147_a_task_finishing_counts_as_finished_for_pending_checkpoints() -> None:
    h = make_harness(max_concurrent=2)
    first = h.trigger()
    second = h.trigger()
    h.ack(first, SINKS[1])
    h.coordinator.task_finished(SINKS[1])
    assert h.coordinator.pending_ids() == [first, second], "nothing is aborted"
    assert h.gateway.aborted == []
    second_pending = h.coordinator.pending_checkpoint(second)
    assert second_pending is not None and second_pending.finished_tasks == {SINKS[1]}
    first_pending = h.coordinator.pending_checkpoint(first)
    assert first_pending is not None and first_pending.finished_tasks == set(), (
        "it acknowledged the first before finishing: its state is recorded there"
    )


def test_m_c1_a_new_id_that_cannot_be_obtained_cancels_the_trigger() -> None:
    class Broken(CheckpointIdCounter):
        def next_id(self) -> int:
            raise OSError("id store unreachable")

    h = make_harness(id_counter=Broken(), tolerable_failures=5)
    assert h.coordinator.trigger_checkpoint() is R.ID_UNAVAILABLE
    assert h.coordinator.pending_ids() == [] and h.gateway.triggers == []


def test_m_c1_flip147_a_source_finishing_while_the_master_hooks_run_is_not_triggered() -> None:
    hook = RecordingHook()
    h = make_harness(hooks=[hook])
    # the source finishes while the master hook runs, after the first check passed
    hook.during_trigger = lambda: h.coordinator.task_finished(SOURCES[0])
    checkpoint = h.trigger()
    assert h.gateway.triggered_tasks(checkpoint) == [SOURCES[1]]
    pending = h.coordinator.pending_checkpoint(checkpoint)
    assert pending is not None and pending.finished_tasks == {SOURCES[0]}


def test_m_c1_every_task_finishing_while_the_master_hooks_run_cancels_the_trigger() -> None:
    hook = RecordingHook()
    h = make_harness(hooks=[hook])

    def all_finish() -> None:
        for task in TASKS:
            h.coordinator.task_finished(task)

    # every task finishes while the master hook runs, after the first check passed
    hook.during_trigger = all_finish
    assert h.coordinator.trigger_checkpoint() is R.TASK_NOT_RUNNING
    assert h.gateway.triggers == [], "no trigger sent after the re-check failed"
    assert hook.triggered, "the first check passed: the hook ran"
    assert h.coordinator.pending_ids() == []
    assert h.storage.folders() == set(), "the hook's state was deleted"


def test_m_c1_re_check_sees_checkpoints_triggered_meanwhile_reaching_max_concurrent() -> None:
    hook = RecordingHook()
    h = make_harness(hooks=[hook], max_concurrent=2)
    forced: list[object] = []

    def two_savepoints() -> None:
        hook.during_trigger = None
        forced.append(h.coordinator.trigger_checkpoint(savepoint=True))
        forced.append(h.coordinator.trigger_checkpoint(savepoint=True))

    hook.during_trigger = two_savepoints
    assert h.coordinator.trigger_checkpoint() is R.TOO_MANY_CONCURRENT
    assert all(isinstance(i, int) for i in forced)
    assert [b.checkpoint_id for b in h.gateway.barriers()] == forced


def test_m_c1_re_check_sees_a_checkpoint_completing_meanwhile_within_the_min_pause() -> None:
    hook = RecordingHook()
    h = make_harness(hooks=[hook], max_concurrent=2, min_pause=10)
    older = h.trigger()

    def older_completes() -> None:
        hook.during_trigger = None
        h.ack_all(older)

    hook.during_trigger = older_completes
    assert h.coordinator.trigger_checkpoint() is R.MIN_PAUSE
    assert [b.checkpoint_id for b in h.gateway.barriers()] == [older]
    assert h.gateway.completed == [older]


def test_m_c1_re_check_sees_a_stop_of_periodic_scheduling_during_the_trigger() -> None:
    hook = RecordingHook()
    h = make_harness(hooks=[hook])
    hook.during_trigger = h.coordinator.stop_periodic
    assert h.coordinator.trigger_checkpoint() is R.PERIODIC_STOPPED
    assert h.gateway.triggers == []
    [stats] = h.coordinator.stats()
    assert stats.status == "failed" and stats.failure_reason == R.PERIODIC_STOPPED.value


def test_m_c1_a_shutdown_while_the_master_hooks_run_cancels_the_trigger() -> None:
    hook = RecordingHook()
    h = make_harness(hooks=[hook])
    hook.during_trigger = h.coordinator.shutdown
    assert h.coordinator.trigger_checkpoint(savepoint=True) is R.COORDINATOR_SHUTDOWN
    assert h.gateway.triggers == []


# ------------------------------------------------------------------ M-C2 / M-C3


def test_m_c2_each_trigger_creates_a_pending_checkpoint_waiting_for_every_task() -> None:
    h = make_harness(max_concurrent=2)
    first = h.trigger()
    second = h.trigger()
    assert h.coordinator.pending_ids() == [first, second]
    pending = h.coordinator.pending_checkpoint(first)
    assert pending is not None
    assert pending.tasks_to_acknowledge == set(TASKS)
    assert pending.acknowledged == set() and pending.operator_states == {}
    h.ack(first, SINKS[0])
    pending = h.coordinator.pending_checkpoint(first)
    assert pending is not None
    assert pending.acknowledged == {SINKS[0]}
    assert pending.tasks_to_acknowledge == set(TASKS) - {SINKS[0]}
    assert set(pending.operator_states) == {"sum"} and set(pending.operator_states["sum"]) == {0}


def test_m_c3_only_source_tasks_are_triggered() -> None:
    h = make_harness()
    checkpoint_id = h.trigger()
    assert h.gateway.triggered_tasks(checkpoint_id) == SOURCES


def test_m_c3_every_task_acknowledges_before_completion_and_all_are_told() -> None:
    h = make_harness()
    checkpoint_id = h.trigger()
    for task in TASKS[:-1]:
        h.ack(checkpoint_id, task)
        assert h.gateway.completed == [], "completed before every task acknowledged"
    h.ack(checkpoint_id, TASKS[-1])
    assert h.gateway.completed == [checkpoint_id]


# ------------------------------------------------------------------ M-C4


def test_m_c4_a_checkpoint_exceeding_the_timeout_is_aborted() -> None:
    h = make_harness(timeout=300, tolerable_failures=3)
    checkpoint_id = h.trigger()
    h.ack(checkpoint_id, SOURCES[0])
    h.advance(299)
    assert h.coordinator.pending_ids() == [checkpoint_id]
    h.advance(1)
    assert h.coordinator.pending_ids() == []
    assert h.gateway.aborted == [(checkpoint_id, R.TIMEOUT)]
    assert h.storage.folders() == set(), "the expired checkpoint's state is deleted"
    assert h.coordinator.stats()[-1].failure_reason == R.TIMEOUT.value


def test_m_c4_a_completed_checkpoint_does_not_time_out_later() -> None:
    h = make_harness(timeout=300)
    checkpoint_id = h.trigger()
    h.ack_all(checkpoint_id)
    h.advance(1000)
    assert h.gateway.aborted == []
    assert len(h.scheduler) == 0, "the timeout was cancelled"


def test_m_c4_an_error_while_triggering_a_source_aborts_the_checkpoint() -> None:
    h = make_harness(tolerable_failures=3)
    h.gateway.fail_trigger_for = {SOURCES[1]}
    assert h.coordinator.trigger_checkpoint() is R.TRIGGER_FAILED
    assert h.coordinator.pending_ids() == []
    [(_, reason)] = h.gateway.aborted
    assert reason is R.TRIGGER_FAILED
    assert h.coordinator.stats()[-1].failure_reason == R.TRIGGER_FAILED.value
    assert h.coordinator.consecutive_failures == 1


def test_m_c4_a_master_hook_that_raises_aborts_the_checkpoint_before_any_trigger() -> None:
    h = make_harness(hooks=[RecordingHook(fail=True)], tolerable_failures=3)
    assert h.coordinator.trigger_checkpoint() is R.TRIGGER_FAILED
    assert h.gateway.triggers == [] and h.coordinator.pending_ids() == []


def test_a_timeout_during_the_master_hooks_aborts_and_deletes_what_they_wrote() -> None:
    hook = RecordingHook()
    h = make_harness(hooks=[hook], timeout=100, tolerable_failures=3)
    hook.during_trigger = lambda: h.advance(100)
    assert h.coordinator.trigger_checkpoint() is R.TIMEOUT
    assert h.gateway.triggers == []
    assert h.storage.folders() == set()


# ------------------------------------------------------------------ periodic triggering


def test_m_c1_periodic_triggers_start_one_interval_after_start_and_repeat() -> None:
    h = make_harness(interval=100, max_concurrent=10, timeout=10_000)
    h.coordinator.start()
    h.advance(99)
    assert h.gateway.barriers() == []
    h.advance(1)
    assert [b.timestamp - START_MS for b in h.gateway.barriers()] == [100]
    h.advance(200)
    assert [b.timestamp - START_MS for b in h.gateway.barriers()] == [100, 200, 300]
    h.coordinator.shutdown()


def test_m_c1_a_periodic_trigger_skipped_for_too_many_concurrent_is_no_failure_and_the_next_is_scheduled() -> (
    None
):
    h = make_harness(interval=100, max_concurrent=1, timeout=10_000, tolerable_failures=0)
    h.coordinator.start()
    h.advance(100)
    [first] = [b.checkpoint_id for b in h.gateway.barriers()]
    h.advance(300)  # three ticks skipped
    assert [b.checkpoint_id for b in h.gateway.barriers()] == [first]
    assert h.gateway.failures == [] and h.gateway.aborted == []
    assert h.coordinator.next_periodic_trigger_ms() == START_MS + 500
    h.coordinator.shutdown()


def test_m_c1_a_periodic_trigger_blocked_by_the_min_pause_retries_when_the_pause_ends() -> None:
    h = make_harness(interval=100, min_pause=150, timeout=10_000)
    h.ack_all(h.trigger())  # completes at 0
    h.coordinator.start()  # first periodic trigger due at 100: inside the pause
    h.advance(100)
    assert len(h.gateway.barriers()) == 1
    assert h.coordinator.next_periodic_trigger_ms() == START_MS + 150
    h.advance(50)
    assert [b.timestamp - START_MS for b in h.gateway.barriers()] == [0, 150]
    assert h.gateway.failures == [] and h.gateway.aborted == []
    h.coordinator.shutdown()


def test_start_needs_checkpointing_enabled() -> None:
    h = make_harness(interval=None)
    with pytest.raises(ConfigurationError):
        h.coordinator.start()


def test_m_e2_a_new_coordinator_on_the_same_storage_never_reuses_an_uncompleted_id() -> None:
    """M-E2, M-T3: the next attempt's (or run's) coordinator, with a counter of its own,
    continues after the ids the previous one triggered, although none completed; a
    clean shutdown gives the unused reserved ids back, so ids stay dense."""
    storage = MemoryCheckpointStorage()
    h1 = make_harness(storage=storage, max_concurrent=3)
    triggered = [h1.trigger() for _ in range(3)]
    h1.coordinator.shutdown()
    assert storage.completed_ids() == [] and storage.read_latest() is None
    h2 = make_harness(storage=storage)
    assert h2.trigger() == max(triggered) + 1


def test_m_e2_ids_stay_unique_when_the_previous_coordinator_died_without_shutting_down() -> None:
    storage = MemoryCheckpointStorage()
    h1 = make_harness(storage=storage, max_concurrent=3)
    triggered = [h1.trigger() for _ in range(3)]  # then the driver dies: no shutdown
    h2 = make_harness(storage=storage)
    assert h2.trigger() > max(triggered)


def test_a_new_coordinator_with_the_previous_id_counter_never_reuses_an_id() -> None:
    storage = MemoryCheckpointStorage()
    counter = CheckpointIdCounter(storage)
    h1 = make_harness(storage=storage, id_counter=counter)
    aborted = h1.trigger()
    h1.coordinator.shutdown()
    h2 = make_harness(storage=storage, id_counter=counter)
    assert h2.trigger() == aborted + 1

"""Acknowledgements (M-C5), declines and tolerated failures (M-C6)."""

from __future__ import annotations

import threading

from test_coordinator_harness import SINKS, SOURCES, TASKS, make_harness

from lockgate.checkpoint.coordinator import AckResult, CheckpointIdCounter
from lockgate.checkpoint.types import CheckpointFailureReason, SubtaskCheckpointMetrics
from lockgate.errors import CheckpointFailedError

R = CheckpointFailureReason

# ------------------------------------------------------------------ M-C5


def test_m_c5_an_ack_is_recorded_with_success_and_the_last_one_completes_the_checkpoint() -> None:
    h = make_harness()
    checkpoint_id = h.trigger()
    results = h.ack_all(checkpoint_id)
    assert results == [AckResult.SUCCESS] * len(TASKS)
    assert h.coordinator.pending_ids() == []
    latest = h.coordinator.latest_completed()
    assert latest is not None and latest.checkpoint_id == checkpoint_id


def test_m_c5_a_duplicate_ack_is_ignored_and_its_state_kept() -> None:
    h = make_harness()
    checkpoint_id = h.trigger()
    handles = h.handles(checkpoint_id, SINKS[0])
    assert h.ack(checkpoint_id, SINKS[0], handles=handles) is AckResult.SUCCESS
    assert h.ack(checkpoint_id, SINKS[0], handles=handles) is AckResult.DUPLICATE
    assert handles["sum"].path in h.storage.files, "a duplicate must not delete recorded state"
    assert h.coordinator.pending_ids() == [checkpoint_id]
    h.ack_all(checkpoint_id, [t for t in TASKS if t != SINKS[0]])
    completed = h.coordinator.latest_completed()
    assert completed is not None and completed.operator_states["sum"][0] == handles["sum"]


def test_m_c5_an_ack_for_an_unknown_checkpoint_is_unknown_and_its_state_deleted() -> None:
    h = make_harness()
    handles = h.handles(42, SINKS[0])
    assert h.ack(42, SINKS[0], handles=handles) is AckResult.UNKNOWN
    assert h.storage.folders() == set()


def test_m_c5_an_ack_from_a_task_the_checkpoint_does_not_wait_for_is_unknown_and_deleted() -> None:
    h = make_harness()
    checkpoint_id = h.trigger()
    stranger = (7, 0)
    handle = h.storage.write_state(checkpoint_id, "stranger-0", "x")
    assert h.ack(checkpoint_id, stranger, handles={"stranger": handle}) is AckResult.UNKNOWN
    assert handle.path not in h.storage.files


def test_m_c5_late_ack_of_aborted_checkpoint_is_discarded_and_its_state_deleted() -> None:
    h = make_harness(tolerable_failures=5)
    checkpoint_id = h.trigger()
    h.coordinator.receive_decline(SINKS[1], checkpoint_id, R.DECLINED)
    late = h.handles(checkpoint_id, SINKS[0])
    assert late["sum"].path in h.storage.files
    assert h.ack(checkpoint_id, SINKS[0], handles=late) is AckResult.DISCARDED
    assert late["sum"].path not in h.storage.files
    assert h.coordinator.latest_completed() is None


def test_m_c5_a_stray_repeat_of_an_ack_after_completion_does_not_delete_completed_state() -> None:
    h = make_harness()
    checkpoint_id = h.trigger()
    handles = h.handles(checkpoint_id, SINKS[0])
    h.ack(checkpoint_id, SINKS[0], handles=handles)
    h.ack_all(checkpoint_id, [t for t in TASKS if t != SINKS[0]])
    assert h.ack(checkpoint_id, SINKS[0], handles=handles) is AckResult.UNKNOWN
    assert handles["sum"].path in h.storage.files


def test_acks_record_subtask_metrics_in_the_stats() -> None:
    h = make_harness()
    checkpoint_id = h.trigger()
    h.ack(
        checkpoint_id,
        SINKS[0],
        SubtaskCheckpointMetrics(alignment_ms=3.0, persisted_inflight_bytes=10),
    )
    [stats] = h.coordinator.stats()
    assert stats.status == "in_progress" and stats.subtasks[SINKS[0]].alignment_ms == 3.0


def test_concurrent_acks_from_many_threads_complete_the_checkpoint_exactly_once() -> None:
    h = make_harness()
    checkpoint_id = h.trigger()
    handles = {t: h.handles(checkpoint_id, t) for t in TASKS}
    start = threading.Barrier(len(TASKS) * 2)
    results: list[AckResult] = []
    lock = threading.Lock()

    def ack(task: tuple[int, int]) -> None:
        start.wait(5)
        result = h.ack(checkpoint_id, task, handles=handles[task])
        with lock:
            results.append(result)

    threads = [threading.Thread(target=ack, args=(t,)) for t in TASKS * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(results) == 8
    assert [r for r in results if r is AckResult.SUCCESS] == [AckResult.SUCCESS] * 4
    # the repeats: DUPLICATE while pending, UNKNOWN after completion (state kept either way)
    assert {r for r in results if r is not AckResult.SUCCESS} <= {
        AckResult.DUPLICATE,
        AckResult.UNKNOWN,
    }
    assert h.gateway.completed == [checkpoint_id]
    assert all(hd.path in h.storage.files for by in handles.values() for hd in by.values())


# ------------------------------------------------------------------ M-C6


def test_m_c6_a_decline_aborts_the_checkpoint_and_tells_the_tasks() -> None:
    h = make_harness(tolerable_failures=5)
    checkpoint_id = h.trigger()
    h.ack(checkpoint_id, SOURCES[0])
    h.coordinator.receive_decline(SINKS[0], checkpoint_id, R.DECLINED)
    assert h.coordinator.pending_ids() == []
    assert h.gateway.aborted == [(checkpoint_id, R.DECLINED)]
    assert h.storage.folders() == set(), "the aborted checkpoint's state is deleted"
    assert h.coordinator.stats()[-1].failure_reason == R.DECLINED.value
    h.coordinator.receive_decline(SINKS[1], checkpoint_id, R.DECLINED)
    assert len(h.gateway.aborted) == 1, "a checkpoint is aborted once"


def test_m_c6_consecutive_failures_are_tolerated_up_to_the_setting_then_the_job_fails() -> None:
    h = make_harness(tolerable_failures=2)
    for n in range(2):
        checkpoint_id = h.trigger()
        h.coordinator.receive_decline(SINKS[0], checkpoint_id, R.DECLINED)
        assert h.gateway.failures == [], f"failure {n + 1} of 2 tolerated ones failed the job"
    checkpoint_id = h.trigger()
    h.advance(h.config.timeout_ms)  # the third one expires
    [error] = h.gateway.failures
    assert isinstance(error, CheckpointFailedError)
    message = str(error)
    assert "3 consecutive" in message
    assert R.TIMEOUT.value in message
    assert "tolerable_failures" in message


def test_m_c6_a_completed_checkpoint_resets_the_count_of_failures() -> None:
    h = make_harness(tolerable_failures=1)
    h.coordinator.receive_decline(SINKS[0], h.trigger(), R.DECLINED)
    h.ack_all(h.trigger())
    assert h.coordinator.consecutive_failures == 0
    h.coordinator.receive_decline(SINKS[0], h.trigger(), R.ASYNC_FAILED)
    assert h.gateway.failures == [], "the failure before the success no longer counts"
    h.coordinator.receive_decline(SINKS[0], h.trigger(), R.DECLINED)
    assert len(h.gateway.failures) == 1


def test_m_c6_cancellations_upstream_and_subsumed_checkpoints_do_not_fail_the_job() -> None:
    h = make_harness(tolerable_failures=0, max_concurrent=2)
    h.coordinator.receive_decline(SINKS[0], h.trigger(), R.CANCELLED_UPSTREAM)
    older = h.trigger()
    h.ack_all(h.trigger())  # subsumes the older one
    assert h.gateway.abort_reason(older) is R.SUBSUMED
    assert h.gateway.failures == []


def test_m_c6_triggers_that_cannot_get_an_id_count_as_failures() -> None:
    class Broken(CheckpointIdCounter):
        def next_id(self) -> int:
            raise OSError("storage down")

    h = make_harness(id_counter=Broken(), tolerable_failures=1)
    h.coordinator.trigger_checkpoint()
    assert h.gateway.failures == []
    h.coordinator.trigger_checkpoint()
    [error] = h.gateway.failures
    assert "a checkpoint trigger" in str(error) and R.ID_UNAVAILABLE.value in str(error)


def test_m_c6_task_not_running_cancellations_never_fail_the_job() -> None:
    h = make_harness(tolerable_failures=0, running=False)
    for _ in range(5):
        assert h.coordinator.trigger_checkpoint() is R.TASK_NOT_RUNNING
    assert h.gateway.failures == []

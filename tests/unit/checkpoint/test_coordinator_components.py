"""The coordinator's collaborators on their own: request decider (M-C1), id counter
(M-E2, M-C1), pending checkpoint (M-C2, M-C5), failure manager (M-C6), completed store
(M-C8) and stats tracker."""

from __future__ import annotations

import dataclasses

import pytest

from lockgate.checkpoint.coordinator import (
    AckResult,
    CheckpointFailureManager,
    CheckpointIdCounter,
    CheckpointStatsTracker,
    CompletedCheckpoint,
    CompletedCheckpointStore,
    PendingCheckpoint,
    TriggerFacts,
    decide_trigger,
)
from lockgate.checkpoint.coordinator.id_counter import (
    RESERVATION,
    read_reservation,
    write_reservation,
)
from lockgate.checkpoint.storage import CorruptCheckpointError, MemoryCheckpointStorage
from lockgate.checkpoint.types import (
    CheckpointFailureReason,
    StateHandle,
    SubtaskCheckpointMetrics,
    TaskAcknowledgement,
)
from lockgate.core.clock import ManualClock
from lockgate.core.elements import CheckpointOptions

R = CheckpointFailureReason

GO = TriggerFacts(
    shut_down=False,
    periodic_stopped=False,
    forced=False,
    pending=0,
    max_concurrent=1,
    last_completion_ms=None,
    min_pause_ms=0,
    now_ms=1000,
    tasks_not_running=0,
)

# ------------------------------------------------------------------ request decider (M-C1)


def test_m_c1_decider_lets_a_trigger_go_when_every_precondition_holds() -> None:
    assert decide_trigger(GO) is None
    assert decide_trigger(dataclasses.replace(GO, pending=1, max_concurrent=2)) is None
    assert (
        decide_trigger(
            dataclasses.replace(GO, last_completion_ms=900, min_pause_ms=100, now_ms=1000)
        )
        is None
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"shut_down": True}, R.COORDINATOR_SHUTDOWN),
        ({"periodic_stopped": True}, R.PERIODIC_STOPPED),
        ({"pending": 1, "max_concurrent": 1}, R.TOO_MANY_CONCURRENT),
        ({"last_completion_ms": 950, "min_pause_ms": 100}, R.MIN_PAUSE),
        ({"tasks_not_running": 1}, R.TASK_NOT_RUNNING),
    ],
    ids=lambda v: v.name if isinstance(v, R) else "",
)
def test_m_c1_decider_cancels_a_periodic_trigger_for_each_failed_precondition(
    change: dict[str, object], reason: CheckpointFailureReason
) -> None:
    assert decide_trigger(dataclasses.replace(GO, **change)) is reason  # type: ignore[arg-type]


def test_m_c1_forced_triggers_skip_the_concurrency_pause_and_periodic_checks_only() -> None:
    forced = dataclasses.replace(
        GO,
        forced=True,
        pending=5,
        max_concurrent=1,
        last_completion_ms=999,
        min_pause_ms=1000,
        periodic_stopped=True,
    )
    assert decide_trigger(forced) is None
    assert decide_trigger(dataclasses.replace(forced, shut_down=True)) is R.COORDINATOR_SHUTDOWN
    assert decide_trigger(dataclasses.replace(forced, tasks_not_running=2)) is R.TASK_NOT_RUNNING


def test_m_c1_decider_checks_shutdown_first() -> None:
    everything = dataclasses.replace(
        GO, shut_down=True, periodic_stopped=True, pending=3, tasks_not_running=1
    )
    assert decide_trigger(everything) is R.COORDINATOR_SHUTDOWN


# ------------------------------------------------------------------ id counter (M-E2)


def test_m_e2_id_counter_starts_at_1_on_empty_storage_and_increases_strictly() -> None:
    counter = CheckpointIdCounter(MemoryCheckpointStorage())
    assert [counter.next_id() for _ in range(3)] == [1, 2, 3]


def test_m_e2_id_counter_continues_after_the_durable_pointer_or_the_newest_metadata() -> None:
    storage = MemoryCheckpointStorage()
    storage.write_latest(7)
    counter = CheckpointIdCounter(storage)
    assert counter.next_id() == 8
    counter.release()
    storage.write_metadata(11, {"format_version": 1})
    counter = CheckpointIdCounter(storage)
    assert counter.next_id() == 12
    counter.release()
    assert CheckpointIdCounter(storage, start=40).next_id() == 40


def test_m_e2_ids_of_checkpoints_that_never_completed_are_never_handed_out_again() -> None:
    """M-E2, M-T3: a driver that died (no release) after triggering checkpoints that never
    completed: the next counter on the storage skips every id it may have used."""
    storage = MemoryCheckpointStorage()
    dead = CheckpointIdCounter(storage, reserve=4)
    used = [dead.next_id() for _ in range(6)]
    assert used == [1, 2, 3, 4, 5, 6] and storage.completed_ids() == []
    assert CheckpointIdCounter(storage).next_id() == 9, "after the reserved block 5..8"


def test_m_e2_a_released_counter_lets_the_next_one_continue_right_after_its_last_id() -> None:
    storage = MemoryCheckpointStorage()
    first = CheckpointIdCounter(storage)
    assert [first.next_id() for _ in range(3)] == [1, 2, 3]
    first.release()
    second = CheckpointIdCounter(storage, reserve=5)
    assert second.next_id() == 4
    assert first.next_id() == 9, "a released counter stays usable and skips what others got"
    assert second.next_id() == 5, "ids 5..8 are the second counter's"


def test_m_e2_ids_are_reserved_durably_one_write_per_block_before_they_are_handed_out() -> None:
    class Counting(MemoryCheckpointStorage):
        writes: list[int] = []

        def write_file(self, rel: str, data: bytes, *, atomic: bool = False) -> None:
            assert atomic, "the reservation must be written atomically"
            super().write_file(rel, data, atomic=atomic)
            self.writes.append(read_reservation(self))

    storage = Counting()
    counter = CheckpointIdCounter(storage, reserve=10)
    ids = [counter.next_id() for _ in range(25)]
    assert ids == list(range(1, 26))
    assert storage.writes == [10, 20, 30], "one durable write per 10 ids"
    assert all(i <= read_reservation(storage) for i in ids)


def test_m_c1_an_id_is_not_handed_out_when_its_reservation_cannot_be_written() -> None:
    class ReadOnly(MemoryCheckpointStorage):
        broken = True

        def write_file(self, rel: str, data: bytes, *, atomic: bool = False) -> None:
            if self.broken:
                raise PermissionError("read-only storage")
            super().write_file(rel, data, atomic=atomic)

    storage = ReadOnly()
    counter = CheckpointIdCounter(storage)
    with pytest.raises(PermissionError):
        counter.next_id()
    storage.broken = False
    assert counter.next_id() == 1, "the id whose reservation failed was not used"


def test_a_damaged_id_reservation_says_what_is_wrong_and_how_to_fix_it() -> None:
    storage = MemoryCheckpointStorage()
    storage.write_file(RESERVATION, b"garbage", atomic=True)
    with pytest.raises(CorruptCheckpointError, match="Delete the file"):
        CheckpointIdCounter(storage).next_id()
    write_reservation(storage, 3)
    assert CheckpointIdCounter(storage).next_id() == 4


def test_m_c1_id_counter_passes_a_storage_failure_on_and_retries_later() -> None:
    class Flaky(MemoryCheckpointStorage):
        broken = True

        def read_latest(self) -> int | None:
            if self.broken:
                raise OSError("storage unreachable")
            return super().read_latest()

    storage = Flaky()
    counter = CheckpointIdCounter(storage)
    with pytest.raises(OSError):
        counter.next_id()
    storage.broken = False
    assert counter.next_id() == 1


# ------------------------------------------------------------------ pending checkpoint (M-C2, M-C5)


def _pending() -> PendingCheckpoint:
    return PendingCheckpoint(5, 1000, 0.0, CheckpointOptions(), {(0, 0), (1, 0), (1, 1)})


def _ack(task: tuple[int, int], uid: str = "op", checkpoint_id: int = 5) -> TaskAcknowledgement:
    return TaskAcknowledgement(
        task,
        checkpoint_id,
        {uid: StateHandle(f"chk-5/{uid}-{task[1]}", 10, 1)},
        SubtaskCheckpointMetrics(sync_ms=1.0),
    )


def test_m_c2_pending_checkpoint_moves_tasks_from_waiting_to_acknowledged_and_collects_state() -> (
    None
):
    pending = _pending()
    assert pending.acknowledge(_ack((1, 1), "sum")) is AckResult.SUCCESS
    assert pending.tasks_to_acknowledge == {(0, 0), (1, 0)}
    assert pending.acknowledged == {(1, 1)}
    assert pending.operator_states == {"sum": {1: StateHandle("chk-5/sum-1", 10, 1)}}
    assert pending.task_metrics[(1, 1)].sync_ms == 1.0
    assert not pending.is_fully_acknowledged
    pending.acknowledge(_ack((1, 0), "sum"))
    pending.acknowledge(_ack((0, 0), "src"))
    assert pending.is_fully_acknowledged
    assert set(pending.operator_states["sum"]) == {0, 1}
    assert pending.state_size() == 30


def test_m_c5_pending_checkpoint_answers_duplicate_unknown_and_discarded() -> None:
    pending = _pending()
    assert pending.acknowledge(_ack((1, 0))) is AckResult.SUCCESS
    assert pending.acknowledge(_ack((1, 0))) is AckResult.DUPLICATE
    assert pending.acknowledge(_ack((9, 9))) is AckResult.UNKNOWN
    assert pending.acknowledge(_ack((1, 1), checkpoint_id=6)) is AckResult.UNKNOWN
    assert pending.discard(R.DECLINED)
    assert not pending.discard(R.TIMEOUT), "a checkpoint is aborted once"
    assert pending.failure_reason is R.DECLINED
    assert pending.acknowledge(_ack((1, 1))) is AckResult.DISCARDED
    assert not pending.is_fully_acknowledged


# ------------------------------------------------------------------ failure manager (M-C6)


@pytest.mark.parametrize(
    "reason",
    [R.DECLINED, R.TIMEOUT, R.ASYNC_FAILED, R.FINALIZE_FAILED, R.TRIGGER_FAILED, R.ID_UNAVAILABLE],
    ids=lambda r: r.name,
)
def test_m_c6_failures_that_count_fail_the_job_beyond_the_tolerated_number(
    reason: CheckpointFailureReason,
) -> None:
    manager = CheckpointFailureManager(tolerable_failures=2)
    assert not manager.handle_failure(reason, 1)
    assert not manager.handle_failure(reason, 2)
    assert manager.handle_failure(reason, 3), "the third consecutive failure exceeds 2"
    assert manager.exceeded_count == 3 and manager.last_reason is reason


@pytest.mark.parametrize(
    "reason",
    [
        R.SUBSUMED,
        R.MIN_PAUSE,
        R.TOO_MANY_CONCURRENT,
        R.COORDINATOR_SHUTDOWN,
        R.PERIODIC_STOPPED,
        R.TASK_NOT_RUNNING,
        R.CANCELLED_UPSTREAM,
    ],
    ids=lambda r: r.name,
)
def test_m_c6_reasons_that_are_not_checkpoint_failures_never_count(
    reason: CheckpointFailureReason,
) -> None:
    manager = CheckpointFailureManager(tolerable_failures=0)
    assert not any(manager.handle_failure(reason, i) for i in range(1, 10))
    assert manager.consecutive_failures == 0


def test_m_c6_a_success_resets_the_count_and_older_failures_do_not_count() -> None:
    manager = CheckpointFailureManager(tolerable_failures=1)
    assert not manager.handle_failure(R.DECLINED, 1)
    manager.handle_success(2)
    assert manager.consecutive_failures == 0
    assert not manager.handle_failure(R.TIMEOUT, 1), "checkpoint 1 is older than the success"
    assert not manager.handle_failure(R.TIMEOUT, 3)
    assert not manager.handle_failure(R.TIMEOUT, 3), "one checkpoint counts once"
    assert manager.handle_failure(R.DECLINED, 4)


def test_m_c6_with_zero_tolerable_failures_the_first_failure_fails_the_job() -> None:
    assert CheckpointFailureManager(0).handle_failure(R.DECLINED, 1)


# ------------------------------------------------------------------ completed store (M-C8)


def _completed(
    storage: MemoryCheckpointStorage, checkpoint_id: int, savepoint: bool = False
) -> CompletedCheckpoint:
    handle = storage.write_state(checkpoint_id, "op-0", f"state {checkpoint_id}")
    checkpoint = CompletedCheckpoint(
        checkpoint_id,
        1000 + checkpoint_id,
        2000 + checkpoint_id,
        {"op": {0: handle}},
        is_savepoint=savepoint,
    )
    storage.write_metadata(checkpoint_id, checkpoint.to_metadata())
    return checkpoint


def test_m_c8_store_keeps_the_newest_n_and_discards_the_state_of_the_removed_ones() -> None:
    storage = MemoryCheckpointStorage()
    store = CompletedCheckpointStore(storage, retained=2)
    for i in (1, 2):
        assert store.add(_completed(storage, i)) == []
    removed = store.add(_completed(storage, 3))
    assert [c.checkpoint_id for c in removed] == [1]
    assert [c.checkpoint_id for c in store.all()] == [2, 3]
    assert storage.folders() == {"chk-2", "chk-3"}
    assert storage.read_latest() == 3
    assert store.latest() is not None and store.latest().checkpoint_id == 3  # type: ignore[union-attr]


def test_m_c8_the_pointer_is_written_before_the_oldest_is_discarded() -> None:
    order: list[str] = []

    class Recording(MemoryCheckpointStorage):
        def write_latest(self, checkpoint_id: int) -> None:
            order.append(f"latest {checkpoint_id}")
            super().write_latest(checkpoint_id)

        def discard(self, checkpoint_id: int) -> None:
            order.append(f"discard {checkpoint_id}")
            super().discard(checkpoint_id)

    storage = Recording()
    store = CompletedCheckpointStore(storage, retained=1)
    store.add(_completed(storage, 1))
    store.add(_completed(storage, 2))
    assert order == ["latest 1", "latest 2", "discard 1"]


def test_m_c8_a_pointer_that_cannot_be_written_leaves_the_store_unchanged() -> None:
    class NoPointer(MemoryCheckpointStorage):
        def write_latest(self, checkpoint_id: int) -> None:
            raise OSError("read-only")

    storage = NoPointer()
    store = CompletedCheckpointStore(storage, retained=1)
    with pytest.raises(OSError):
        store.add(_completed(storage, 1))
    assert store.all() == []


def test_m_c8_store_refuses_savepoints_and_older_checkpoints() -> None:
    storage = MemoryCheckpointStorage()
    store = CompletedCheckpointStore(storage, retained=3)
    with pytest.raises(ValueError):
        store.add(_completed(storage, 1, savepoint=True))
    store.add(_completed(storage, 5))
    with pytest.raises(ValueError):
        store.add(_completed(storage, 4))


def test_m_c8_recover_adopts_checkpoints_left_in_storage_but_not_savepoints() -> None:
    storage = MemoryCheckpointStorage()
    for i in (1, 2):
        _completed(storage, i)
    _completed(storage, 3, savepoint=True)
    storage.files["chk-4/_metadata"] = b"not a pickle"
    store = CompletedCheckpointStore(storage, retained=2)
    adopted = store.recover()
    assert [c.checkpoint_id for c in adopted] == [1, 2]
    assert store.all()[0].operator_states["op"][0].path.startswith("chk-1/op-0.")
    store.add(_completed(storage, 5))
    assert [c.checkpoint_id for c in store.all()] == [2, 5]
    assert "chk-1" not in storage.folders() and "chk-3" in storage.folders()


def test_store_shutdown_discards_everything_unless_retained() -> None:
    storage = MemoryCheckpointStorage()
    store = CompletedCheckpointStore(storage, retained=2)
    for i in (1, 2):
        store.add(_completed(storage, i))
    store.shutdown(retain=True)
    assert storage.folders() == {"chk-1", "chk-2"}
    store2 = CompletedCheckpointStore(storage, retained=2)
    store2.recover()
    store2.shutdown(retain=False)
    assert storage.folders() == set()


def test_metadata_round_trips_through_from_metadata() -> None:
    storage = MemoryCheckpointStorage()
    checkpoint = _completed(storage, 3)
    checkpoint.master_states = {"hook": StateHandle("chk-3/master-hook", 4, 9)}
    back = CompletedCheckpoint.from_metadata(checkpoint.to_metadata())
    assert back.operator_states == checkpoint.operator_states
    assert back.master_states == checkpoint.master_states
    assert (back.checkpoint_id, back.trigger_timestamp, back.completion_timestamp) == (
        3,
        1003,
        2003,
    )
    with pytest.raises(ValueError, match="format version"):
        CompletedCheckpoint.from_metadata({**checkpoint.to_metadata(), "format_version": 99})


# ------------------------------------------------------------------ stats tracker


def test_stats_tracker_reports_in_progress_completed_and_failed_checkpoints() -> None:
    clock = ManualClock(0)
    tracker = CheckpointStatsTracker(clock)
    tracker.report_pending(1, 5000)
    tracker.report_pending(2, 5010, is_savepoint=True)
    tracker.report_acknowledged(1, (0, 0), SubtaskCheckpointMetrics(persisted_inflight_bytes=7))
    tracker.report_acknowledged(1, (0, 1), SubtaskCheckpointMetrics(persisted_inflight_bytes=5))
    clock.advance(40)
    stats = tracker.completion_stats(1, state_size=123)
    assert tracker.get(1).status == "in_progress"  # type: ignore[union-attr]
    tracker.report_completed(stats)
    clock.advance(10)
    tracker.report_failed(2, R.TIMEOUT)
    one, two = tracker.snapshot()
    assert (one.status, one.duration_ms, one.state_size, one.persisted_inflight_bytes) == (
        "completed",
        40.0,
        123,
        12,
    )
    assert set(one.subtasks) == {(0, 0), (0, 1)}
    assert (two.status, two.failure_reason, two.is_savepoint, two.duration_ms) == (
        "failed",
        R.TIMEOUT.value,
        True,
        50.0,
    )


def test_stats_tracker_keeps_the_newest_entries_and_hands_out_copies() -> None:
    tracker = CheckpointStatsTracker(ManualClock(0), history=100)
    for i in range(1, 131):
        tracker.report_pending(i, i)
    snapshot = tracker.snapshot()
    assert [s.checkpoint_id for s in snapshot] == list(range(31, 131))
    snapshot[0].status = "mutated"
    assert tracker.snapshot()[0].status == "in_progress"

"""Completion (M-C7), the completed-checkpoint store and its durable pointer (M-C8),
master hooks (M-C9), savepoints, stats and shutdown."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_coordinator_harness import (
    SINKS,
    SOURCES,
    START_MS,
    TASKS,
    RecordingHook,
    make_harness,
)

import lockgate as lg
from lockgate.checkpoint.coordinator import AckResult
from lockgate.checkpoint.storage import MemoryCheckpointStorage
from lockgate.checkpoint.types import (
    CheckpointFailureReason,
    StateHandle,
    SubtaskCheckpointMetrics,
)

R = CheckpointFailureReason

# ------------------------------------------------------------------ M-C7


def test_m_c7_completion_writes_metadata_with_every_operator_state_handle() -> None:
    h = make_harness()
    checkpoint_id = h.trigger()
    h.clock.advance(25)
    handles = {t: h.handles(checkpoint_id, t) for t in TASKS}
    for task in TASKS:
        h.ack(checkpoint_id, task, handles=handles[task])
    assert f"chk-{checkpoint_id}/_metadata" in h.storage.files
    metadata = h.storage.read_metadata(checkpoint_id)
    assert json.loads(json.dumps(metadata)) == metadata, "metadata must be JSON-compatible"
    assert metadata["format_version"] == 1
    assert metadata["checkpoint_id"] == checkpoint_id
    assert metadata["job_name"] == "test job"
    assert metadata["trigger_timestamp"] == START_MS
    assert metadata["completion_timestamp"] == START_MS + 25
    assert metadata["is_savepoint"] is False
    src0 = handles[SOURCES[0]]["src"]
    assert metadata["operators"]["src"]["0"] == {
        "path": src0.path,
        "size": src0.size,
        "checksum": src0.checksum,
    }
    assert set(metadata["operators"]) == {"src", "sum"}
    assert set(metadata["operators"]["sum"]) == {"0", "1"}
    assert metadata["stats"]["status"] == "completed"
    assert metadata["stats"]["duration_ms"] == 25.0
    completed = h.coordinator.latest_completed()
    assert completed is not None and completed.operator_states["src"][0] == src0
    assert completed.external_path == f"memory://chk-{checkpoint_id}"


def test_m_c7_completion_subsumes_every_older_pending_checkpoint_but_not_newer_ones() -> None:
    h = make_harness(max_concurrent=4)
    first, second, third, fourth = (h.trigger() for _ in range(4))
    h.ack(first, SOURCES[0])
    h.ack_all(third)
    assert h.gateway.abort_reason(first) is R.SUBSUMED
    assert h.gateway.abort_reason(second) is R.SUBSUMED
    assert h.coordinator.pending_ids() == [fourth]
    assert h.files_of(first) == [] and h.files_of(second) == []
    assert h.ack(first, SOURCES[1]) is AckResult.DISCARDED
    assert h.gateway.failures == []


def test_m_c7_a_pending_savepoint_is_never_subsumed_by_a_newer_checkpoint() -> None:
    """M-C7: completing a checkpoint aborts the older pending checkpoints, but not an
    older pending savepoint: it still completes when its acknowledgements arrive."""
    h = make_harness(max_concurrent=4)
    older = h.trigger()
    savepoint = h.trigger(savepoint=True)
    newer = h.trigger()
    h.ack_all(newer)
    assert h.gateway.abort_reason(older) is R.SUBSUMED
    assert savepoint not in h.gateway.aborted_ids()
    assert h.coordinator.pending_ids() == [savepoint]
    assert h.ack_all(savepoint) == [AckResult.SUCCESS] * len(TASKS)
    completed = h.coordinator.wait_for_savepoint(savepoint, timeout_s=0)
    assert completed.checkpoint_id == savepoint and completed.is_savepoint
    assert h.storage.read_metadata(savepoint)["is_savepoint"] is True
    assert h.gateway.completed == [newer], "a savepoint that stops nothing commits nothing"
    assert [c.checkpoint_id for c in h.coordinator.completed()] == [newer]
    assert h.storage.read_latest() == newer, "the savepoint does not move the pointer back"
    assert h.gateway.failures == []


def test_m_s1_m_x2_only_a_savepoint_the_job_stops_with_is_told_to_the_tasks() -> None:
    """Flink >= 1.15: an intermediate savepoint is no recovery point, so its completion
    commits nothing in the tasks and subsumes no older pending checkpoint; a savepoint
    the job stops with (``stop=True``, or ``drain=True``) is told as a checkpoint is."""
    h = make_harness(max_concurrent=4)
    older = h.trigger()
    intermediate = h.trigger(savepoint=True)
    h.ack_all(intermediate)
    assert h.gateway.completed == [] and older in h.coordinator.pending_ids()
    h.ack_all(older)
    stopping = h.trigger(savepoint=True, stop=True)
    h.ack_all(stopping)
    assert h.gateway.completed == [older, stopping]
    with pytest.raises(lg.ConfigurationError, match="savepoints only"):
        h.coordinator.trigger_checkpoint(stop=True)


def test_m_c7_tasks_are_notified_once_the_checkpoint_is_durable() -> None:
    seen_pointer: list[int | None] = []
    h = make_harness()
    original = h.gateway.notify_checkpoint_complete

    def notify(checkpoint_id: int) -> None:
        seen_pointer.append(h.storage.read_latest())
        original(checkpoint_id)

    h.gateway.notify_checkpoint_complete = notify  # type: ignore[method-assign]
    checkpoint_id = h.trigger()
    h.ack_all(checkpoint_id)
    assert h.gateway.completed == [checkpoint_id]
    assert seen_pointer == [checkpoint_id], "tasks were told before the pointer was durable"


def test_m_c7_the_next_periodic_trigger_comes_at_least_min_pause_after_completion() -> None:
    h = make_harness(interval=100, min_pause=80, timeout=10_000)
    h.coordinator.start()
    h.advance(100)
    [first] = h.gateway.barriers()
    h.clock.advance(50)
    h.ack_all(first.checkpoint_id)  # completes at 150; the periodic trigger was due at 200
    assert h.coordinator.next_periodic_trigger_ms() == START_MS + 230
    h.advance(79)
    assert len(h.gateway.barriers()) == 1
    h.advance(1)
    assert [b.timestamp - START_MS for b in h.gateway.barriers()] == [100, 230]
    h.coordinator.shutdown()


def test_m_c7_a_periodic_trigger_skipped_while_one_was_pending_comes_right_after_completion() -> (
    None
):
    h = make_harness(interval=100, min_pause=0, max_concurrent=1, timeout=10_000)
    h.coordinator.start()
    h.advance(100)
    [first] = h.gateway.barriers()
    h.advance(150)  # the trigger at 200 was skipped (too many concurrent); next due at 300
    h.ack_all(first.checkpoint_id)  # completes at 250
    assert h.coordinator.next_periodic_trigger_ms() == START_MS + 250
    h.scheduler.run_due()
    assert [b.timestamp - START_MS for b in h.gateway.barriers()] == [100, 250]
    h.coordinator.shutdown()


def test_m_c7_a_failure_while_writing_the_metadata_aborts_with_finalize_failed() -> None:
    class NoMetadata(MemoryCheckpointStorage):
        def write_metadata(self, checkpoint_id: int, metadata: dict[str, Any]) -> str:
            raise OSError("disk full")

    h = make_harness(storage=NoMetadata(), tolerable_failures=3)
    checkpoint_id = h.trigger()
    h.ack_all(checkpoint_id)
    assert h.gateway.aborted == [(checkpoint_id, R.FINALIZE_FAILED)]
    assert h.gateway.completed == []
    assert h.coordinator.latest_completed() is None
    assert h.storage.folders() == set()
    assert h.coordinator.consecutive_failures == 1


def test_m_c7_a_pointer_that_cannot_be_written_aborts_with_finalize_failed() -> None:
    class NoPointer(MemoryCheckpointStorage):
        def write_latest(self, checkpoint_id: int) -> None:
            raise OSError("read-only")

    h = make_harness(storage=NoPointer(), tolerable_failures=3)
    checkpoint_id = h.trigger()
    h.ack_all(checkpoint_id)
    assert h.gateway.abort_reason(checkpoint_id) is R.FINALIZE_FAILED
    assert h.storage.completed_ids() == [], "a checkpoint the pointer does not reach is removed"


def test_completed_stats_have_duration_state_size_inflight_bytes_and_subtask_metrics() -> None:
    hook = RecordingHook(state="x" * 100)
    h = make_harness(hooks=[hook])
    checkpoint_id = h.trigger()
    h.clock.advance(40)
    sizes = 0
    for n, task in enumerate(TASKS):
        handles = h.handles(checkpoint_id, task)
        sizes += sum(hd.size for hd in handles.values())
        h.ack(
            checkpoint_id,
            task,
            SubtaskCheckpointMetrics(persisted_inflight_bytes=n + 1),
            handles=handles,
        )
    [stats] = h.coordinator.stats()
    master = h.coordinator.latest_completed().master_states["offsets"]  # type: ignore[union-attr]
    assert stats.status == "completed" and stats.duration_ms == 40.0
    assert stats.state_size == sizes + master.size
    assert stats.persisted_inflight_bytes == 1 + 2 + 3 + 4
    assert set(stats.subtasks) == set(TASKS)
    assert stats.external_path == f"memory://chk-{checkpoint_id}"


# ------------------------------------------------------------------ savepoints


def test_savepoints_complete_with_metadata_but_never_enter_the_store() -> None:
    h = make_harness(retained=1)
    h.ack_all(h.trigger())
    savepoint = h.trigger(savepoint=True)
    h.ack_all(savepoint)
    assert h.storage.read_metadata(savepoint)["is_savepoint"] is True
    assert h.coordinator.savepoint_path(savepoint) == f"memory://chk-{savepoint}"
    assert [c.checkpoint_id for c in h.coordinator.completed()] == [1]
    assert h.storage.read_latest() == 1, "the pointer names checkpoints, not savepoints"
    h.ack_all(h.trigger())
    h.ack_all(h.trigger())
    assert f"chk-{savepoint}" in h.storage.folders(), "a savepoint is never deleted by the job"
    h.coordinator.shutdown(retain_completed=False)
    assert h.storage.folders() == {f"chk-{savepoint}"}
    assert savepoint not in h.gateway.completed, "it stopped nothing: it commits nothing"


# ------------------------------------------------------------------ M-C8


def test_m_c8_storage_holds_exactly_the_newest_n_completed_checkpoints() -> None:
    h = make_harness(retained=2)
    ids = []
    for _ in range(5):
        checkpoint_id = h.trigger()
        h.ack_all(checkpoint_id)
        ids.append(checkpoint_id)
    assert [c.checkpoint_id for c in h.coordinator.completed()] == ids[-2:]
    assert h.storage.completed_ids() == ids[-2:]
    assert h.storage.folders() == {f"chk-{i}" for i in ids[-2:]}
    assert h.storage.read_latest() == ids[-1]


def test_m_c7_m_c8_tasks_are_notified_before_the_subsumed_checkpoint_is_discarded() -> None:
    """Discarding a subsumed checkpoint's files is not on the path of the sinks' commits
    (the notice): it comes after, and the retained set is the same as before."""
    storage = MemoryCheckpointStorage()
    h = make_harness(storage=storage, retained=1)
    h.ack_all(h.trigger())
    seen: list[list[int]] = []
    notify = h.gateway.notify_checkpoint_complete

    def record(checkpoint_id: int) -> None:
        seen.append(storage.completed_ids())
        notify(checkpoint_id)

    h.gateway.notify_checkpoint_complete = record  # type: ignore[method-assign]
    h.ack_all(h.trigger())
    assert seen == [[1, 2]], "checkpoint 1 still there when 2's notice went out"
    assert storage.completed_ids() == [2], "and discarded right after"


def test_m_c8_a_restarted_coordinator_finds_the_pointer_and_continues_ids_after_it() -> None:
    storage = MemoryCheckpointStorage()
    first = make_harness(storage=storage, retained=2)
    for _ in range(3):
        first.ack_all(first.trigger())
    first.trigger()  # pending when the driver goes away: never completed
    last_completed = storage.read_latest()
    assert last_completed == 3

    second = make_harness(storage=storage, retained=2)
    latest = second.coordinator.latest_completed()
    assert latest is not None and latest.checkpoint_id == 3
    assert [c.checkpoint_id for c in second.coordinator.completed()] == [2, 3]
    new_id = second.trigger()
    assert new_id > last_completed
    second.ack_all(new_id)
    assert storage.completed_ids() == [3, new_id], "retention goes on across restarts"


def test_m_c8_shutdown_keeps_retained_checkpoints_unless_told_to_discard_them() -> None:
    storage = MemoryCheckpointStorage()
    h = make_harness(storage=storage, retained=2)
    h.ack_all(h.trigger())
    h.coordinator.shutdown(retain_completed=True)
    assert storage.completed_ids() == [1]
    h2 = make_harness(storage=storage, retained=2)
    h2.ack_all(h2.trigger())
    h2.coordinator.shutdown(retain_completed=False)
    assert storage.completed_ids() == []


# ------------------------------------------------------------------ M-C9


def test_m_c9_master_hook_state_is_stored_and_listed_in_the_metadata() -> None:
    hook = RecordingHook("offsets")
    empty = RecordingHook("nothing", state=None)
    h = make_harness(hooks=[hook, empty])
    checkpoint_id = h.trigger()
    assert hook.triggered == [(checkpoint_id, START_MS)]
    assert [p for p in h.storage.files if p.startswith(f"chk-{checkpoint_id}/master-offsets.")], (
        "written at trigger time"
    )
    h.ack_all(checkpoint_id)
    metadata = h.storage.read_metadata(checkpoint_id)
    assert set(metadata["master_states"]) == {"offsets"}
    entry = metadata["master_states"]["offsets"]
    handle = StateHandle(entry["path"], entry["size"], entry["checksum"])
    assert h.storage.read_state(handle) == f"offsets@{checkpoint_id}"


def test_m_c9_master_hooks_run_before_the_sources_are_triggered() -> None:
    hook = RecordingHook()
    h = make_harness(hooks=[hook])
    hook.during_trigger = lambda: h.gateway.calls.append("hook")
    checkpoint_id = h.trigger()
    assert h.gateway.calls == ["hook"] + [f"trigger {checkpoint_id} {t}" for t in SOURCES]


def test_m_c9_master_hooks_are_notified_of_completion_only() -> None:
    hook = RecordingHook()
    h = make_harness(hooks=[hook], tolerable_failures=5)
    declined = h.trigger()
    h.coordinator.receive_decline(SINKS[0], declined, R.DECLINED)
    completed = h.trigger()
    h.ack_all(completed)
    assert hook.completed == [completed]


def test_m_c9_a_hook_failing_on_notification_leaves_the_checkpoint_complete() -> None:
    class Grumpy(RecordingHook):
        def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
            raise RuntimeError("cannot commit")

    h = make_harness(hooks=[Grumpy()])
    checkpoint_id = h.trigger()
    h.ack_all(checkpoint_id)
    assert h.gateway.completed == [checkpoint_id] and h.gateway.failures == []


def test_master_hook_identifiers_must_be_unique() -> None:
    from lockgate.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="unique"):
        make_harness(hooks=[RecordingHook("a"), RecordingHook("a")])


# ------------------------------------------------------------------ shutdown


def test_shutdown_aborts_pending_checkpoints_without_failing_the_job() -> None:
    h = make_harness(max_concurrent=2, tolerable_failures=0)
    h.coordinator.start()
    ids = [h.trigger(), h.trigger()]
    h.coordinator.shutdown()
    assert h.gateway.aborted == [(i, R.COORDINATOR_SHUTDOWN) for i in ids]
    assert h.gateway.failures == []
    assert h.scheduler.is_shut_down
    h.advance(10_000)
    assert len(h.gateway.barriers()) == 2
    h.coordinator.shutdown()  # idempotent

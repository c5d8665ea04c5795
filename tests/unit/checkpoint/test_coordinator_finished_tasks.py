"""Checkpoints after tasks finished, on the coordinator (Flink's FLIP-147; M-C1, M-C3, M-C5,
M-C7): a finished task is neither triggered nor waited for and the checkpoint records it
as finished; once every task feeding a task finished, that task is triggered itself; a
task finishing while a checkpoint waits for it counts as finished; a task at its end of
data gets its final checkpoint without waiting a whole interval.

The job of :mod:`test_coordinator_harness`: sources (0, 0) and (0, 1), operator ``src``,
both feeding the sinks (1, 0) and (1, 1), operator ``sum``. Time is a manual clock.
"""

from __future__ import annotations

from test_coordinator_harness import SINKS, SOURCES, START_MS, TASKS, TOPOLOGY, make_harness

from lockgate.checkpoint.coordinator.completed_store import CompletedCheckpoint
from lockgate.checkpoint.coordinator.plan import (
    is_fully_finished,
    plan_checkpoint,
)
from lockgate.checkpoint.types import CheckpointFailureReason
from lockgate.recovery.restore import RestoreSpec

R = CheckpointFailureReason


# ------------------------------------------------------------- finished tasks (M-C1, M-C3)


def test_m_c3_flip147_a_finished_source_is_not_triggered_and_checkpoints_go_on() -> None:
    h = make_harness(topology=TOPOLOGY)
    h.coordinator.task_finished(SOURCES[0])
    checkpoint = h.trigger()
    assert h.gateway.triggered_tasks(checkpoint) == [SOURCES[1]]
    h.ack_all(checkpoint, [SOURCES[1], *SINKS])
    assert h.gateway.completed == [checkpoint], "no acknowledgement of the finished source"
    latest = h.coordinator.latest_completed()
    assert latest is not None and latest.finished_operators == {"src": (2, (0,))}
    assert "src" in latest.operator_states and set(latest.operator_states["src"]) == {1}
    # the record survives in _metadata (what a restore reads)
    stored = CompletedCheckpoint.from_metadata(h.storage.read_metadata(checkpoint))
    assert stored.finished_operators == {"src": (2, (0,))}


def test_m_c3_flip147_once_every_upstream_task_finished_the_next_running_tasks_are_triggered() -> (
    None
):
    h = make_harness(topology=TOPOLOGY)
    for source in SOURCES:
        h.coordinator.task_finished(source)
    checkpoint = h.trigger()
    assert h.gateway.triggered_tasks(checkpoint) == SINKS
    h.ack_all(checkpoint, SINKS)
    latest = h.coordinator.latest_completed()
    assert latest is not None and latest.finished_operators == {"src": (2, (0, 1))}
    assert is_fully_finished(latest.finished_operators["src"])
    assert "src" not in latest.operator_states, "a finished task leaves no state"


def test_m_c3_without_the_topology_only_sources_are_ever_triggered() -> None:
    h = make_harness()
    for source in SOURCES:
        h.coordinator.task_finished(source)
    checkpoint = h.trigger()
    assert h.gateway.triggered_tasks(checkpoint) == []


def test_m_c5_flip147_a_task_finishing_before_acknowledging_counts_as_finished() -> None:
    h = make_harness(topology=TOPOLOGY)
    checkpoint = h.trigger()
    h.ack_all(checkpoint, [*SOURCES, SINKS[0]])
    assert h.gateway.completed == []
    h.coordinator.task_finished(SINKS[1])
    assert h.gateway.completed == [checkpoint] and h.gateway.aborted == []
    latest = h.coordinator.latest_completed()
    assert latest is not None and latest.finished_operators == {"sum": (2, (1,))}
    assert set(latest.operator_states["sum"]) == {0}


def test_m_c5_flip147_a_late_acknowledgement_of_a_task_counted_as_finished_is_unknown() -> None:
    h = make_harness(topology=TOPOLOGY, max_concurrent=2)
    first = h.trigger()
    second = h.trigger()
    h.coordinator.task_finished(SINKS[1])
    pending = h.coordinator.pending_checkpoint(second)
    assert pending is not None and pending.finished_tasks == {SINKS[1]}
    # an acknowledgement still in flight when it finished: its state is deleted (M-C5)
    assert h.ack(second, SINKS[1]).name == "UNKNOWN"
    h.ack_all(first, [*SOURCES, SINKS[0]])
    assert h.gateway.completed == [first]


def test_m_c1_flip147_a_triggered_task_ending_before_taking_the_checkpoint_aborts_it() -> None:
    """Its barrier never left it, so the sinks below it may never see that checkpoint: it
    is aborted (no counted failure) and the next one, triggered at once for the task still
    waiting for its final checkpoint, reaches the sinks directly."""
    h = make_harness(interval=10_000, topology=TOPOLOGY, tolerable_failures=0)
    h.coordinator.start()
    h.coordinator.task_finished(SOURCES[0])
    checkpoint = h.trigger()
    assert h.gateway.triggered_tasks(checkpoint) == [SOURCES[1]]
    h.coordinator.task_reached_end_of_data(SINKS[0], 0)
    h.coordinator.task_finished(SOURCES[1])  # ended with the trigger still in its mailbox
    assert h.gateway.abort_reason(checkpoint) is R.TASK_NOT_RUNNING
    assert h.gateway.failures == [] and h.coordinator.consecutive_failures == 0
    h.advance(0)
    [_, retry] = h.gateway.barriers()
    assert h.gateway.triggered_tasks(retry.checkpoint_id) == SINKS
    h.coordinator.shutdown()


def test_m_c1_flip147_a_task_reported_running_after_it_finished_stays_finished() -> None:
    h = make_harness(running=False, topology=TOPOLOGY)
    h.coordinator.task_finished(SOURCES[0])  # finished before the executor saw all running
    for task in TASKS:
        h.coordinator.task_running(task)
    checkpoint = h.trigger()
    assert h.gateway.triggered_tasks(checkpoint) == [SOURCES[1]]


def test_m_c1_flip147_a_job_whose_tasks_all_finished_takes_no_checkpoint() -> None:
    h = make_harness(topology=TOPOLOGY)
    for task in TASKS:
        h.coordinator.task_finished(task)
    assert h.coordinator.trigger_checkpoint() is R.TASK_NOT_RUNNING
    assert h.coordinator.trigger_checkpoint(savepoint=True) is R.TASK_NOT_RUNNING
    assert h.gateway.triggers == []


# --------------------------------------------------------- the final checkpoint, promptly


def test_flip147_a_task_at_its_end_of_data_gets_a_checkpoint_now_not_after_the_interval() -> None:
    h = make_harness(interval=10_000, topology=TOPOLOGY)
    h.coordinator.start()
    assert h.coordinator.next_periodic_trigger_ms() == START_MS + 10_000
    h.coordinator.task_reached_end_of_data(SOURCES[0], 0)
    assert h.coordinator.next_periodic_trigger_ms() == START_MS
    h.advance(0)
    [barrier] = h.gateway.barriers()
    h.ack_all(barrier.checkpoint_id)
    # that checkpoint was its final one: the periodic rhythm resumes
    assert h.coordinator.next_periodic_trigger_ms() == START_MS + 10_000
    h.coordinator.shutdown()


def test_flip147_the_prompt_final_checkpoint_still_respects_the_minimum_pause() -> None:
    h = make_harness(interval=10_000, min_pause=300, topology=TOPOLOGY)
    h.ack_all(h.trigger())  # completes at START_MS
    h.coordinator.start()
    h.clock.advance(100)
    h.coordinator.task_reached_end_of_data(SINKS[0], 1)
    assert h.coordinator.next_periodic_trigger_ms() == START_MS + 300
    h.coordinator.shutdown()


def test_flip147_a_pending_checkpoint_newer_than_the_tasks_last_snapshot_serves_it() -> None:
    h = make_harness(interval=10_000, topology=TOPOLOGY)
    h.coordinator.start()
    pending = h.trigger()
    # the task had snapshotted nothing newer than `pending - 1`: `pending` is its final one
    h.coordinator.task_reached_end_of_data(SOURCES[0], pending - 1)
    assert h.coordinator.next_periodic_trigger_ms() == START_MS + 10_000
    h.coordinator.shutdown()


def test_flip147_a_checkpoint_the_task_took_before_its_end_of_data_is_not_its_final_one() -> None:
    h = make_harness(interval=10_000, topology=TOPOLOGY)
    h.coordinator.start()
    pending = h.trigger()
    h.coordinator.task_reached_end_of_data(SOURCES[0], pending)  # snapshotted it before
    h.advance(0)  # the prompt trigger finds max_concurrent reached
    assert [b.checkpoint_id for b in h.gateway.barriers()] == [pending]
    h.ack_all(pending)
    # it completed, but was taken before the end of data: another one comes at once
    assert h.coordinator.next_periodic_trigger_ms() == START_MS
    h.advance(0)
    assert len(h.gateway.barriers()) == 2
    h.coordinator.shutdown()


def test_flip147_no_prompt_checkpoint_while_periodic_checkpoints_are_stopped() -> None:
    h = make_harness(interval=10_000, topology=TOPOLOGY)
    h.coordinator.start()
    h.coordinator.stop_periodic()  # stop_with_savepoint: the savepoint is the final one
    h.coordinator.task_reached_end_of_data(SOURCES[0], 0)
    assert h.coordinator.next_periodic_trigger_ms() is None
    h.coordinator.start()  # the savepoint failed: checkpoints resume, the waiting task first
    assert h.coordinator.next_periodic_trigger_ms() == START_MS
    h.coordinator.shutdown()


def test_flip147_a_finished_task_no_longer_waits_for_a_final_checkpoint() -> None:
    h = make_harness(interval=10_000, topology=TOPOLOGY)
    h.coordinator.start()
    h.coordinator.task_finished(SOURCES[0])
    h.coordinator.task_reached_end_of_data(SOURCES[0], 0)  # a late report
    assert h.coordinator.next_periodic_trigger_ms() == START_MS + 10_000
    h.coordinator.shutdown()


# ------------------------------------------------------------------ the plan (pure)


def test_flip147_plan_triggers_a_task_only_when_every_task_feeding_it_finished() -> None:
    a, b, c = (0, 0), (0, 1), (1, 0)
    upstream = {a: frozenset(), b: frozenset(), c: frozenset({a, b})}
    plan = plan_checkpoint([a, b, c], [a, b], upstream, running={b, c}, finished={a})
    assert plan.to_trigger == (b,)
    assert plan.to_acknowledge == {b, c} and plan.finished == {a} and plan.possible
    plan = plan_checkpoint([a, b, c], [a, b], upstream, running={c}, finished={a, b})
    assert plan.to_trigger == (c,)


def test_flip147_plan_counts_tasks_neither_running_nor_finished() -> None:
    a, c = (0, 0), (1, 0)
    plan = plan_checkpoint([a, c], [a], {c: frozenset({a})}, running={a}, finished=set())
    assert plan.not_running == 1 and not plan.possible
    plan = plan_checkpoint([a, c], [a], {c: frozenset({a})}, running=set(), finished={a, c})
    assert not plan.possible, "nothing runs: nothing to checkpoint"


def test_flip147_an_operator_is_fully_finished_when_every_subtask_finished() -> None:
    spec = RestoreSpec("memory://x", 7, finished_operators={"src": (2, (0, 1)), "sum": (2, (1,))})
    assert spec.fully_finished("src")
    assert not spec.fully_finished("sum"), "subtask 0 still ran: it restores normally"
    assert not spec.fully_finished("other")

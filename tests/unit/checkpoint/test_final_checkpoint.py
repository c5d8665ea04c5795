"""The task side of checkpoints after tasks finished (Flink's FLIP-147; M-T1, M-T2, M-B6,
M-W1, M-X2), driven directly: a task at its end of data sends ``END_OF_DATA``, keeps taking
checkpoints, and sends its end of partition only once a checkpoint it took after that
completed and its completion notice was handled; a task triggered because its upstream
tasks finished snapshots once every input channel ended; a task restored as finished runs
nothing; a draining savepoint stops a source first; the wait is bounded.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import lockgate as lg
from conftest import wait_until
from lockgate.checkpoint.storage import MemoryCheckpointStorage
from lockgate.connectors import DiscardingSink, SequenceSource
from lockgate.core import elements as el
from lockgate.core.batch import is_batch, scalar_batch, to_rows
from lockgate.core.clock import ManualClock
from lockgate.errors import CheckpointFailedError
from lockgate.executor.task_builder import build_task
from lockgate.recovery.restore import RestoreSpec
from lockgate.runtime.channels import LocalChannel
from lockgate.runtime.final_checkpoint import FinalCheckpoint, wait_limit_ms


class Responder:
    """Records what the task tells the coordinator."""

    def __init__(self) -> None:
        self.acks: list[int] = []
        self.declines: list[tuple[int, Any]] = []
        self.reports: list[tuple[Any, int]] = []
        self.running: list[Any] = []

    def acknowledge(self, ack: Any) -> None:
        self.acks.append(ack.checkpoint_id)

    def decline(self, task: Any, checkpoint_id: int, reason: Any) -> None:
        self.declines.append((checkpoint_id, reason))

    def task_running(self, task: Any) -> None:
        self.running.append(task)

    def end_of_data(self, task: Any, last_snapshot_id: int) -> None:
        self.reports.append((task, last_snapshot_id))


def plan_of(source: SequenceSource, *, checkpoints: bool = True, timeout: int = 600_000):
    """source --rebalance--> map --rebalance--> sink, parallelism 1."""
    env = lg.StreamEnvironment(parallelism=1)
    if checkpoints:
        env.enable_checkpointing(60_000)
        env.checkpoint_config.storage = "memory://final"
        env.checkpoint_config.timeout = timeout
    (
        env.from_source(source, name="src")
        .uid("src")
        .rebalance()
        .map(lambda x: x, name="m")
        .uid("m")
        .rebalance()
        .sink_to(DiscardingSink(), name="sink")
        .uid("sink")
    )
    plan = env.get_execution_plan("final checkpoint")
    return plan, {v.name: v for v in plan.vertices}


def make_task(
    plan: Any,
    vertex: Any,
    inputs: list[LocalChannel] = (),  # type: ignore[assignment]
    clock: Any = None,
) -> tuple[Any, list[LocalChannel], Responder]:
    outputs = {eid: [LocalChannel(1 << 20, name=f"out {eid}")] for eid in vertex.out_edges}
    responder = Responder()
    task = build_task(
        plan,
        vertex,
        0,
        output_channels=outputs,
        input_channels=[(c, 0) for c in inputs],
        signal=threading.Event(),
        clock=clock or lg.SystemClock(),
        storage=MemoryCheckpointStorage(),
        responder=responder,
    )
    return task, [c for chans in outputs.values() for c in chans], responder


def drain(channel: LocalChannel) -> list[Any]:
    out = []
    while (e := channel.poll()) is not None:
        out.append(to_rows(e) if is_batch(e) else e)
    return out


class Running:
    """``task.run()`` in a thread; ``stop()`` cancels and joins it (tests never leak it)."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="test task")
        self.thread.start()

    def _run(self) -> None:
        try:
            self.task.run()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.error = e

    def join(self, timeout_s: float = 10.0) -> None:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the task did not end"

    def stop(self) -> None:
        self.task.cancel()
        self.thread.join(10)


def barrier(checkpoint_id: int, **options: Any) -> el.CheckpointBarrier:
    return el.CheckpointBarrier(checkpoint_id, 0, el.CheckpointOptions(**options))


def test_flip147_a_source_ends_only_after_a_checkpoint_it_took_at_its_end_completed() -> None:
    plan, v = plan_of(SequenceSource(0, 10, batch_size=5))
    task, [out], responder = make_task(plan, v["src"])
    running = Running(task)
    try:
        wait_until(lambda: responder.reports, "the source reports its end of data")
        assert responder.reports == [(task.key, 0)], "nothing snapshotted before"
        assert not task.finished
        task.trigger_checkpoint(barrier(3))
        wait_until(lambda: responder.acks == [3], "the final checkpoint is acknowledged")
        assert not task.finished, "not before the checkpoint completed"
        task.notify_checkpoint_complete(3)
        running.join()
    finally:
        running.stop()
    assert running.error is None and task.finished
    got = drain(out)
    assert got[-4:] == [
        el.Watermark(el.MAX_WATERMARK),
        el.END_OF_DATA,
        barrier(3),
        el.END_OF_PARTITION,
    ]
    assert [x for e in got if isinstance(e, list) for x in e] == list(range(10))


def test_flip147_a_checkpoint_snapshotted_before_the_end_of_data_does_not_end_the_task() -> None:
    final = FinalCheckpoint(ManualClock(0), 1_000, "t (0)")
    final.completed(4)
    assert not final.done, "a notice before the end of data counts for nothing"
    final.start(last_snapshot_id=4)
    final.completed(4)
    assert not final.done, "checkpoint 4 was taken before the end of data"
    final.completed(5)
    assert final.done and final.final_id == 5


def test_flip147_the_wait_for_the_final_checkpoint_is_bounded() -> None:
    clock = ManualClock(0)
    final = FinalCheckpoint(clock, 1_000, "t (0)")
    final.start(0)
    clock.advance(999)
    final.check_deadline()
    clock.advance(1)
    with pytest.raises(CheckpointFailedError, match="final checkpoint"):
        final.check_deadline()


def test_flip147_the_wait_limit_covers_the_tolerated_failures_and_one_more_checkpoint() -> None:
    cfg = lg.CheckpointConfig(interval=100, min_pause=10, timeout=1_000, tolerable_failures=2)
    assert wait_limit_ms(cfg) == 4 * (100 + 10 + 1_000)


def test_flip147_a_task_waiting_for_its_final_checkpoint_fails_past_the_limit() -> None:
    clock = ManualClock(0)
    plan, v = plan_of(SequenceSource(0, 3), timeout=1_000)
    task, _, responder = make_task(plan, v["src"], clock=clock)
    running = Running(task)
    try:
        wait_until(lambda: responder.reports, "the source reports its end of data")
        clock.advance(wait_limit_ms(plan.checkpoint))
        running.join()
    finally:
        running.stop()
    assert isinstance(running.error, CheckpointFailedError)
    assert "no checkpoint it took since then completed" in str(running.error)


def test_flip147_m_b6_a_directly_triggered_task_snapshots_once_every_input_ended() -> None:
    plan, v = plan_of(SequenceSource(0, 3))
    first, second = LocalChannel(1 << 20), LocalChannel(1 << 20)
    task, [out], responder = make_task(plan, v["m"], [first, second])
    for channel in (first, second):
        channel.put(scalar_batch([1]))
        channel.put(el.END_OF_DATA)
    first.put(el.END_OF_PARTITION)
    running = Running(task)
    try:
        wait_until(lambda: responder.reports, "the task reached its end of data")
        # its upstream tasks finished: the coordinator triggers it; one channel is open
        task.trigger_checkpoint(barrier(9))
        task.trigger_checkpoint(barrier(10))  # a newer one supersedes it
        wait_until(lambda: responder.declines, "the older trigger is declined")
        assert [c for c, _ in responder.declines] == [9] and responder.acks == []
        second.put(el.END_OF_PARTITION)
        wait_until(lambda: responder.acks == [10], "the snapshot once every input ended")
        task.notify_checkpoint_complete(10)
        running.join()
    finally:
        running.stop()
    assert running.error is None and task.finished
    got = drain(out)
    assert got[-4:] == [el.END_OF_DATA, el.CancellationMarker(9), barrier(10), el.END_OF_PARTITION]


def test_flip147_m_w1_a_task_restored_as_finished_runs_nothing_and_ends_at_once() -> None:
    plan, v = plan_of(SequenceSource(0, 1_000))
    plan.restore = RestoreSpec("memory://final", 4, finished_operators={"src": (1, (0,))})
    task, [out], responder = make_task(plan, v["src"])
    task.trigger_checkpoint(barrier(5))  # ignored: the coordinator records it as finished
    task.run()
    assert task.finished and task.restored_finished
    assert drain(out) == [el.Watermark(el.MAX_WATERMARK), el.END_OF_DATA, el.END_OF_PARTITION]
    assert responder.acks == [] and responder.declines == [] and responder.reports == []
    assert responder.running == [], "a task restored as finished never runs (FLIP-147)"
    assert task.chain.source is not None and task.chain.source.reader is None, (
        "the source was never opened: it does not read its input again"
    )


def test_flip147_without_checkpoints_a_task_ends_right_after_its_end_of_data() -> None:
    plan, v = plan_of(SequenceSource(0, 3), checkpoints=False)
    outputs = {eid: [LocalChannel(1 << 20)] for eid in v["src"].out_edges}
    task = build_task(
        plan,
        v["src"],
        0,
        output_channels=outputs,
        input_channels=[],
        signal=threading.Event(),
        clock=lg.SystemClock(),
    )
    task.run()
    [out] = [c for chans in outputs.values() for c in chans]
    assert drain(out)[-2:] == [el.END_OF_DATA, el.END_OF_PARTITION]


def test_flip147_m_t1_a_draining_savepoint_ends_the_source_first_then_snapshots() -> None:
    plan, v = plan_of(SequenceSource(0, 10**9, rows_per_second=1_000, batch_size=10))
    task, [out], responder = make_task(plan, v["src"])
    running = Running(task)
    try:
        wait_until(lambda: len(out) > 0, "the source emits")
        savepoint = el.CheckpointBarrier(
            2, 0, el.CheckpointOptions(el.CheckpointType.SAVEPOINT, drain=True)
        )
        task.trigger_checkpoint(savepoint)
        wait_until(lambda: responder.acks == [2], "the savepoint is acknowledged")
        assert responder.reports == [(task.key, 0)]
        task.notify_checkpoint_complete(2)
        running.join()
    finally:
        running.stop()
    assert running.error is None and task.finished
    got = drain(out)
    assert got[-4:] == [
        el.Watermark(el.MAX_WATERMARK),
        el.END_OF_DATA,
        savepoint,
        el.END_OF_PARTITION,
    ]


def test_flip147_a_task_not_yet_running_declines_a_trigger_m_t2() -> None:
    plan, v = plan_of(SequenceSource(0, 3))
    task, _, responder = make_task(plan, v["src"])
    task.mailbox.close()  # never ran: the mailbox refuses mail
    task.trigger_checkpoint(barrier(1))
    assert [c for c, _ in responder.declines] == [1]


def test_m_c1_m_t2_a_task_reports_running_only_after_open_and_replay() -> None:
    """Flink's INITIALIZING: the coordinator hears RUNNING from a task once its operators
    are open and its restored in-flight data replayed, never before (it triggers no
    checkpoint until every unfinished task runs)."""
    plan, v = plan_of(SequenceSource(0, 10))
    source_side = LocalChannel(1 << 20, name="in")
    task, _, responder = make_task(plan, v["m"], inputs=[source_side])
    in_open, release = threading.Event(), threading.Event()
    seen_at_replay: list[list[Any]] = []
    open_chain, replay = task.chain.open, task._replay_channel_state

    def slow_open() -> None:
        in_open.set()
        assert release.wait(10), "the test never released open()"
        open_chain()

    def recording_replay() -> None:
        seen_at_replay.append(list(responder.running))
        replay()

    task.chain.open = slow_open
    task._replay_channel_state = recording_replay
    running = Running(task)
    try:
        assert in_open.wait(10), "the task never opened its chain"
        assert responder.running == [] and not task.running, "RUNNING before open() returned"
        release.set()
        wait_until(lambda: responder.running, "the task reports RUNNING after open")
        assert responder.running == [task.key], "reported once, with the task's key"
        assert seen_at_replay == [[]], "RUNNING must come after the replay, not before"
    finally:
        release.set()
        running.stop()

"""M-C6: a task that cannot take the synchronous part of its snapshot declines the checkpoint
(it does not fail), releasing what it took and cancelling the checkpoint downstream; the
failure counts towards ``tolerable_failures``. The job-level behaviour, on both executors,
is in ``tests/integration/test_sync_snapshot_decline.py``."""

from __future__ import annotations

import threading

import lockgate as lg
from lockgate.checkpoint.barriers.base import AlignmentInfo
from lockgate.checkpoint.coordinator.failure_manager import CheckpointFailureManager
from lockgate.checkpoint.storage import MemoryCheckpointStorage
from lockgate.checkpoint.types import CheckpointFailureReason
from lockgate.core import elements as el
from lockgate.core.partitioners import ForwardPartitioning
from lockgate.runtime.channels import LocalChannel
from lockgate.runtime.operators.base import StreamOperator
from lockgate.runtime.record_writer import RecordWriter
from lockgate.runtime.subtask_checkpointer import SubtaskCheckpointer

SYNC_FAILED = CheckpointFailureReason.SYNC_FAILED


class Responder:
    def __init__(self) -> None:
        self.acks: list = []
        self.declines: list = []
        self.answered = threading.Event()

    def acknowledge(self, ack) -> None:
        self.acks.append(ack)
        self.answered.set()

    def decline(self, task, checkpoint_id, reason) -> None:
        self.declines.append((task, checkpoint_id, reason))
        self.answered.set()

    def task_running(self, task) -> None:
        pass  # initialization done: nothing to record here


class View:
    def __init__(self) -> None:
        self.released = False

    def materialize(self) -> dict:
        return {"n": 1}

    def release(self) -> None:
        self.released = True


class Snapshotting(StreamOperator):
    """``fail_on``: the checkpoint ids whose ``snapshot_state`` raises."""

    def __init__(self, uid: str, fail_on: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.uid = uid
        self.name = uid
        self.fail_on = fail_on
        self.views: list[View] = []

    def snapshot_state(self, checkpoint_id: int):
        if checkpoint_id in self.fail_on:
            raise RuntimeError(f"cannot snapshot {checkpoint_id}")
        view = View()
        self.views.append(view)
        return view


def test_m_c6_a_failing_sync_snapshot_declines_releases_the_views_taken_and_cancels_downstream() -> (
    None
):
    first, second = Snapshotting("first"), Snapshotting("second", fail_on=(1,))
    channel = LocalChannel(1 << 20)
    writer = RecordWriter(
        [channel],
        ForwardPartitioning().create(1, 0),
        lg.SystemClock(),
        timeout_ms=100,
        max_rows=1000,
        max_bytes=1 << 16,
    )
    responder = Responder()
    cp = SubtaskCheckpointer(
        (7, 0),
        "task",
        [first, second],
        [writer],
        MemoryCheckpointStorage(),
        responder,
        lg.SystemClock(),
    )
    try:
        cp.trigger_snapshot(el.CheckpointBarrier(1, 0), AlignmentInfo(0.0, 0.0, False))  # no raise
        assert responder.declines == [((7, 0), 1, SYNC_FAILED)]
        assert responder.acks == [] and cp.in_progress == []
        assert first.views[0].released, "the view the first operator gave is released"
        elements = [channel.poll(), channel.poll(), channel.poll()]
        assert elements == [el.CheckpointBarrier(1, 0), el.CancellationMarker(1), None], (
            "the barrier had left; a cancellation marker follows it"
        )
        responder.answered.clear()
        cp.trigger_snapshot(el.CheckpointBarrier(2, 0), AlignmentInfo(0.0, 0.0, False))
        assert responder.answered.wait(10), "no answer to checkpoint 2"
        assert [a.checkpoint_id for a in responder.acks] == [2], "the next checkpoint succeeds"
    finally:
        cp.close()


def test_m_c6_sync_snapshot_failures_count_towards_tolerable_failures() -> None:
    manager = CheckpointFailureManager(tolerable_failures=1)
    assert manager.counts(SYNC_FAILED)
    assert manager.handle_failure(SYNC_FAILED, 3) is False
    assert manager.handle_failure(SYNC_FAILED, 4) is True

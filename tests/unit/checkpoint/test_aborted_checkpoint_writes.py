"""A subtask's state write for a checkpoint the coordinator aborted and discarded
meanwhile (M-C4, M-C6, M-C8; FLIP-147's ``TASK_NOT_RUNNING`` abort when a triggered
source ends before taking the checkpoint).

The race, as seen at the end of a bounded job (KafkaSource, parallelism 2): source 0
ends, so the coordinator aborts checkpoint ``c`` and deletes ``chk-<c>/``, while source
1 is still writing its state for ``c``. Its write then either creates the folder again
(a ``chk-<c>`` folder without ``_metadata`` was left behind), or loses the folder
between ``mkdir`` and ``chmod`` in ``fs_storage._makedirs`` (``FileNotFoundError`` from
``os.chmod``, logged as a failed asynchronous part). Either way the write must neither
fail the task nor the job nor leave a folder behind, whichever of the abort notice and
the write's end comes first; a real storage failure of a pending checkpoint is still
declined and counted (M-C6).

Real coordinator, real :class:`FileSystemCheckpointStorage` in ``tmp_path``, a real
:class:`SubtaskCheckpointer`; the interleavings are forced with events: a snapshot view
whose materialization waits, and an audit hook that holds the write between its
``mkdir`` and its ``chmod``. Nothing sleeps.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import pytest
from test_coordinator_harness import (
    SINKS,
    SOURCES,
    START_MS,
    TASKS,
    TOPOLOGY,
    RecordingGateway,
    RecordingHook,
    make_harness,
)
from test_subtask_checkpointer import LoggingChannel, StatefulOperator

import lockgate as lg
from conftest import wait_until
from lockgate.checkpoint.config import CheckpointConfig
from lockgate.checkpoint.coordinator import AckResult, CheckpointCoordinator, ManualScheduler
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.checkpoint.types import (
    CheckpointFailureReason,
    SubtaskCheckpointMetrics,
    TaskAcknowledgement,
    TaskKey,
)
from lockgate.core.clock import ManualClock
from lockgate.core.elements import CheckpointBarrier
from lockgate.core.partitioners import ForwardPartitioning
from lockgate.runtime.record_writer import RecordWriter
from lockgate.runtime.subtask_checkpointer import SubtaskCheckpointer

R = CheckpointFailureReason
WRITER = SOURCES[1]  # still writing its state when the other source ends


class HeldView:
    """A snapshot view whose materialization (the start of the asynchronous part)
    waits until ``go``."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()

    def materialize(self) -> dict[str, int]:
        self.entered.set()
        assert self.go.wait(10), "the test never released the held materialization"
        return {"offset": 42}


class ChmodGate:
    """Holds the first ``os.chmod`` of ``path`` (the step after ``mkdir`` in
    ``fs_storage._makedirs``) until ``go``: an audit hook, armed per test (audit hooks
    cannot be removed; disarmed, it does nothing)."""

    def __init__(self) -> None:
        self.path: str | None = None
        self.entered = threading.Event()
        self.go = threading.Event()

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if event != "os.chmod" or self.path is None or args[0] != self.path:
            return
        self.path = None  # once
        self.entered.set()
        self.go.wait(10)


_CHMOD_GATE = ChmodGate()
sys.addaudithook(_CHMOD_GATE)


class Responder:
    """The subtask's answers go to the coordinator (as the executors route them)."""

    def __init__(self, coordinator: CheckpointCoordinator) -> None:
        self.coordinator = coordinator
        self.acks: list[AckResult] = []
        self.declines: list[tuple[int, CheckpointFailureReason]] = []
        self.answered = threading.Event()

    def acknowledge(self, ack: TaskAcknowledgement) -> None:
        self.acks.append(self.coordinator.receive_acknowledge(ack))
        self.answered.set()

    def decline(self, task: TaskKey, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self.declines.append((checkpoint_id, reason))
        self.coordinator.receive_decline(task, checkpoint_id, reason)
        self.answered.set()

    def task_running(self, task: TaskKey) -> None:
        pass  # the coordinator is told directly


class DeliveringGateway(RecordingGateway):
    """Records, and with ``deliver`` hands abort notices to the writer's checkpointer at
    once, as the local executor does (``StreamTask.notify_checkpoint_aborted``); without
    it the notice is still on its way (a Spark slot) when the write ends."""

    def __init__(self) -> None:
        super().__init__()
        self.deliver = False
        self.checkpointer: SubtaskCheckpointer | None = None

    def notify_checkpoint_aborted(
        self, checkpoint_id: int, reason: CheckpointFailureReason
    ) -> None:
        super().notify_checkpoint_aborted(checkpoint_id, reason)
        if self.deliver and self.checkpointer is not None:
            self.checkpointer.cancel(checkpoint_id)


class Job:
    def __init__(self, root: str, view: Any) -> None:
        self.root = root
        self.storage = FileSystemCheckpointStorage(root)
        self.gateway = DeliveringGateway()
        clock = ManualClock(START_MS)
        self.coordinator = CheckpointCoordinator(
            CheckpointConfig(interval=100, timeout=1000),
            job_name="aborted writes",
            source_tasks=SOURCES,
            tasks=TASKS,
            gateway=self.gateway,
            storage=self.storage,
            clock=clock,
            scheduler=ManualScheduler(clock),
            topology=TOPOLOGY,
        )
        for task in TASKS:
            self.coordinator.task_running(task)
        self.responder = Responder(self.coordinator)
        writer = RecordWriter(
            [LoggingChannel([])],
            ForwardPartitioning().create(1, 0),
            lg.SystemClock(),
            timeout_ms=100,
            max_rows=1000,
            max_bytes=1 << 20,
        )
        self.checkpointer = SubtaskCheckpointer(
            WRITER,
            "source",
            [StatefulOperator([], view)],
            [writer],
            self.storage,
            self.responder,
            lg.SystemClock(),
        )
        self.gateway.checkpointer = self.checkpointer

    def trigger(self) -> int:
        checkpoint_id = self.coordinator.trigger_checkpoint()
        assert isinstance(checkpoint_id, int), f"trigger cancelled: {checkpoint_id}"
        self.checkpointer.trigger_source(self.barrier(checkpoint_id))
        return checkpoint_id

    def barrier(self, checkpoint_id: int) -> CheckpointBarrier:
        """The barrier the coordinator sent the writer for ``checkpoint_id``."""
        [barrier] = [
            b for t, b in self.gateway.triggers if t == WRITER and b.checkpoint_id == checkpoint_id
        ]
        return barrier

    def folder(self, checkpoint_id: int) -> str:
        return os.path.join(self.root, f"chk-{checkpoint_id}")

    def source_0_ends(self, checkpoint_id: int) -> None:
        """Source 0 ends before taking ``checkpoint_id``: aborted, its folder deleted."""
        self.coordinator.task_finished(SOURCES[0])
        assert self.gateway.aborted == [(checkpoint_id, R.TASK_NOT_RUNNING)]
        assert checkpoint_id not in self.coordinator.pending_ids()

    def wait_write_ended(self) -> None:
        wait_until(lambda: not self.checkpointer.in_progress, "the asynchronous part ended")

    def assert_quiet_end(self, checkpoint_id: int) -> None:
        assert self.gateway.failures == [], "the job was failed"
        assert self.coordinator.consecutive_failures == 0, "the abort was counted as a failure"
        assert not os.path.exists(self.folder(checkpoint_id)), (
            f"chk-{checkpoint_id} of the aborted checkpoint was left behind, holding "
            f"{os.listdir(self.folder(checkpoint_id))}"
        )
        # the job goes on: the next checkpoint completes, with the writer's state in it
        self.checkpointer.operators[0].view = None
        self.responder.answered.clear()
        nxt = self.trigger()
        assert self.responder.answered.wait(10), "the writer never answered the next checkpoint"
        assert self.responder.acks[-1] is AckResult.SUCCESS
        for sink in SINKS:
            ack = TaskAcknowledgement(sink, nxt, {}, SubtaskCheckpointMetrics())
            self.coordinator.receive_acknowledge(ack)
        assert self.gateway.completed == [nxt] and self.gateway.failures == []
        assert os.path.exists(os.path.join(self.folder(nxt), "_metadata"))

    def close(self) -> None:
        self.checkpointer.close()
        self.coordinator.shutdown()


@pytest.fixture
def job(tmp_path: Any) -> Any:
    made: list[Job] = []

    def make(view: Any) -> Job:
        j = Job(str(tmp_path / "checkpoints"), view)
        made.append(j)
        return j

    yield make
    _CHMOD_GATE.path = None
    _CHMOD_GATE.go.set()
    for j in made:
        j.close()


# --------------------------------------------- the write creates the folder again (M-C8)


@pytest.mark.parametrize("notice_first", [False, True], ids=["notice-late", "notice-first"])
def test_m_c4_m_c8_a_write_after_the_abort_leaves_no_chk_folder_behind(
    job: Any, notice_first: bool
) -> None:
    """Source 1 materializes its state while source 0 ends: the coordinator aborts the
    checkpoint (``TASK_NOT_RUNNING``) and deletes its folder; source 1's write then creates
    ``chk-<id>/`` again. Notice late (a Spark slot): the write acknowledges (DISCARDED);
    notice first (local executor): the write is cancelled after it wrote. Before the fix
    the empty (or one-file) folder stayed, without ``_metadata``."""
    view = HeldView()
    j = job(view)
    j.gateway.deliver = notice_first
    checkpoint = j.trigger()
    assert view.entered.wait(10), "the asynchronous part never started"
    j.source_0_ends(checkpoint)
    view.go.set()
    j.wait_write_ended()
    if not notice_first:  # it acknowledges after it left the in-progress list
        assert j.responder.answered.wait(10), "the late write never acknowledged"
    if notice_first:
        assert j.responder.acks == [] and j.responder.declines == []
    else:
        assert j.responder.acks == [AckResult.DISCARDED]
        j.checkpointer.cancel(checkpoint)  # the notice arrives after all
    j.assert_quiet_end(checkpoint)


# ------------------------------- the folder vanishes between mkdir and chmod (M-C4, M-C6)


@pytest.mark.parametrize("notice_first", [False, True], ids=["notice-late", "notice-first"])
def test_m_c6_a_write_losing_its_folder_to_the_abort_fails_neither_task_nor_job(
    job: Any, notice_first: bool, caplog: Any
) -> None:
    """The reported traceback: ``_makedirs`` made ``chk-<id>``, the abort deleted it, the
    ``os.chmod`` raised ``FileNotFoundError``. The subtask's decline (notice late) is of a
    checkpoint no longer pending: ignored, not counted, no job failure. With the notice
    first the write ends quietly: no decline, no error logged (before the fix: a decline
    and an ERROR traceback for a checkpoint that was merely aborted)."""
    j = job(None)
    j.gateway.deliver = notice_first
    checkpoint = j.coordinator.trigger_checkpoint()
    assert isinstance(checkpoint, int)
    _CHMOD_GATE.go.clear()
    _CHMOD_GATE.entered.clear()
    _CHMOD_GATE.path = j.folder(checkpoint)
    barrier = j.barrier(checkpoint)
    with caplog.at_level("INFO", logger="lockgate.runtime.subtask_checkpointer"):
        j.checkpointer.trigger_source(barrier)
        assert _CHMOD_GATE.entered.wait(10), "the write never reached its chmod"
        assert os.path.isdir(j.folder(checkpoint)), "mkdir came first"
        j.source_0_ends(checkpoint)
        assert not os.path.exists(j.folder(checkpoint)), "the abort deleted the folder"
        _CHMOD_GATE.go.set()
        j.wait_write_ended()
    assert j.responder.acks == []
    if notice_first:
        assert j.responder.declines == [], "a write of an aborted checkpoint declined it"
        assert not [r for r in caplog.records if r.levelname == "ERROR"], "logged as an error"
    else:
        assert j.responder.declines == [(checkpoint, R.ASYNC_FAILED)]
    j.assert_quiet_end(checkpoint)


# ------------------------------------- a real failure of a pending checkpoint (M-C6)


def test_m_c6_a_storage_failure_of_a_pending_checkpoint_is_still_declined_and_counted(
    job: Any,
) -> None:
    """The folder cannot be made (a file is in its place): the checkpoint is pending, so
    the subtask declines it (``ASYNC_FAILED``), the coordinator aborts it and, with
    ``tolerable_failures = 0``, fails the job, as before."""
    j = job(None)
    checkpoint = j.coordinator.trigger_checkpoint()
    assert isinstance(checkpoint, int)
    with open(j.folder(checkpoint), "w") as f:
        f.write("in the way")
    j.checkpointer.trigger_source(j.barrier(checkpoint))
    j.wait_write_ended()
    assert j.responder.declines == [(checkpoint, R.ASYNC_FAILED)]
    assert j.gateway.aborted == [(checkpoint, R.ASYNC_FAILED)]
    assert len(j.gateway.failures) == 1, "the counted failure failed the job (M-C6)"


# ------------------------------------------ a master hook's write after the abort (M-C8)


def test_m_c4_m_c8_a_master_state_written_after_a_timeout_leaves_no_chk_folder_behind(
    tmp_path: Any,
) -> None:
    """The checkpoint times out while its master hook runs (M-C4): the abort deletes
    ``chk-1/``, then the coordinator writes the hook's state there, creating it again. The
    state file was deleted before; the folder stayed (with a filesystem storage)."""
    hook = RecordingHook()
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"))
    h = make_harness(storage=storage, hooks=[hook], timeout=100, tolerable_failures=3)  # type: ignore[arg-type]
    hook.during_trigger = lambda: h.advance(100)
    assert h.coordinator.trigger_checkpoint() is R.TIMEOUT
    assert not os.path.exists(tmp_path / "checkpoints" / "chk-1"), (
        f"chk-1 left behind, holding {os.listdir(tmp_path / 'checkpoints' / 'chk-1')}"
    )
    h.coordinator.shutdown()

"""lockgate.testing: deterministic, seeded fault injection for recovery tests.

Faults fire in the attempt they name only (M-R1: a restarted attempt runs without the
fault of the previous one), at the record / snapshot / acknowledgement / notice they
name; they fail the synchronous or the asynchronous snapshot part (M-T1, M-T3, M-C6),
drop or delay acknowledgements (M-C4, M-C5), delay barriers so that alignment waits
(M-B4, M-B10), fail an operator during alignment, and fail a commit between pre-commit
and commit (M-X2, M-X3). Run on the local executor, with the plan's ``faults`` set.
"""

from __future__ import annotations

import pickle
import signal
import threading
import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import cloudpickle
import pytest

import lockgate as lg
from lockgate.checkpoint.barriers.aligner import BarrierAligner
from lockgate.checkpoint.barriers.base import AlignmentInfo
from lockgate.checkpoint.storage import MemoryCheckpointStorage
from lockgate.checkpoint.types import CheckpointFailureReason, TaskAcknowledgement
from lockgate.connectors import CollectSink, DiscardingSink, SequenceSource
from lockgate.core import elements as el
from lockgate.core.batch import RowBatch
from lockgate.runtime.context import RuntimeContext
from lockgate.runtime.operators.base import Output, StreamOperator
from lockgate.runtime.subtask_checkpointer import SubtaskCheckpointer
from lockgate.testing import (
    DelayAcknowledgement,
    DelayBarriers,
    DropAcknowledgement,
    FailAtRecord,
    FailCommit,
    FailDuringAlignment,
    FailSnapshot,
    FaultSchedule,
    InjectedFault,
    KillWorker,
    inject_faults,
    seeded_faults,
)
from lockgate.testing import schedule as schedule_module
from lockgate.testing.schedule import FailingView, FaultyResponder

SOURCE = "Source: sequence"

# ----------------------------------------------------------------------------- helpers


def plus_one(x):
    return x + 1


def identity(v, ctx):
    return [v]


def mod7(x):
    return x % 7


def sequence_job(
    faults, *, n: int = 1000, batch_size: int | None = None, map_fn=plus_one, sink=None
) -> lg.graph.execution_plan.ExecutionPlan:
    """source -> "plus one" -> "out", one chained task, parallelism 1, no checkpoints."""
    env = lg.StreamEnvironment(parallelism=1)
    (
        env.from_source(SequenceSource(0, n, batch_size=batch_size))
        .map(map_fn, name="plus one")
        .sink_to(sink or CollectSink(), name="out")
    )
    inject_faults(env, *faults)
    return env.get_execution_plan("faulty")


def checkpointed_job(
    faults,
    *,
    parallelism: int = 1,
    keyed: bool = False,
    mode: lg.CheckpointingMode = lg.CheckpointingMode.EXACTLY_ONCE,
    rows: int = 4000,
    restarts: lg.RestartStrategy | None = None,
    **settings: Any,
):
    """A rate-limited source (1 s of data) checkpointed every 50 ms; ``keyed``: a
    ``key_by`` puts "keyed" at the head of a second task with one input channel per
    source subtask. ``restarts``: the restart strategy (default: none, one attempt)."""
    env = lg.StreamEnvironment(parallelism=parallelism)
    env.set_restart_strategy(restarts or lg.RestartStrategy.none())
    env.enable_checkpointing(timedelta(milliseconds=50), mode)
    for name, value in settings.items():
        setattr(env.checkpoint_config, name, value)
    stream = env.from_source(SequenceSource(0, rows, rows_per_second=4000))
    if keyed:
        stream = stream.key_by(mod7).process(identity, name="keyed")
    else:
        stream = stream.map(plus_one, name="plus one")
    stream.sink_to(DiscardingSink(), name="sink")
    inject_faults(env, *faults)
    return env.get_execution_plan("checkpointed")


def run(plan, attempt_number: int = 0) -> lg.JobExecutionResult:
    return lg.LocalExecutor().execute(plan, attempt_number=attempt_number)


def run_failing(plan, attempt_number: int = 0) -> lg.JobFailedError:
    with pytest.raises(lg.JobFailedError) as err:
        run(plan, attempt_number)
    return err.value


def run_client(plan) -> lg.JobClient:
    """Run ``plan`` in the background, for its checkpoint statistics."""
    return lg.JobClient(
        plan.job_name, lambda handle: lg.LocalExecutor().execute(plan, handle=handle)
    )


class ListOutput(Output):
    """An operator output that collects batches, with the ``main`` target list an
    operator chain has."""

    def __init__(self) -> None:
        self.batches: list[Any] = []
        self.main = [self.batches.append]
        self.side: dict[str, list[Any]] = {}

    def emit(self, batch) -> None:
        for target in self.main:
            target(batch)


class Stub(StreamOperator):
    """An operator recording the calls it receives; its snapshot is a view object."""

    def __init__(self, name: str, subtask: int = 0) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []
        self.views: list[View] = []
        ctx = RuntimeContext(
            task_name="task",
            operator_name=name,
            operator_uid=f"uid-{name}",
            subtask_index=subtask,
            parallelism=2,
            max_parallelism=128,
        )
        self.setup(name, f"uid-{name}", ctx, ListOutput())

    def process_batch(self, batch, input_index: int = 0) -> None:
        self.calls.append(("batch", batch.rows))

    def prepare_snapshot_pre_barrier(self, checkpoint_id: int) -> None:
        self.calls.append(("prepare", checkpoint_id))

    def snapshot_state(self, checkpoint_id: int):
        view = View(checkpoint_id)
        self.views.append(view)
        return view

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.calls.append(("commit", checkpoint_id))


class View:
    def __init__(self, checkpoint_id: int) -> None:
        self.checkpoint_id = checkpoint_id
        self.released = False

    def materialize(self):
        return {"checkpoint": self.checkpoint_id}

    def release(self) -> None:
        self.released = True


def fake_task(
    *operators: StreamOperator,
    subtask: int = 0,
    name: str = "task",
    inputs: bool = False,
    handler: Any = None,
    checkpointer: Any = None,
) -> Any:
    """The parts of a StreamTask that ``FaultSchedule.install`` looks at."""
    return SimpleNamespace(
        name=name,
        subtask_index=subtask,
        chain=SimpleNamespace(operators=list(operators), head=operators[0]),
        input_gate=object() if inputs else None,
        barrier_handler=handler,
        checkpointer=checkpointer,
    )


def install(faults, task, attempt: int = 0, in_process: bool = True) -> None:
    FaultSchedule(*faults).install(task, attempt_number=attempt, in_process=in_process)


def rows(start: int, stop: int) -> RowBatch:
    return RowBatch(list(range(start, stop)))


class Responder:
    """Records what a subtask sends the coordinator; ``delivered`` is set per ack."""

    def __init__(self) -> None:
        self.acks: list[int] = []
        self.declines: list[tuple[Any, int, Any]] = []
        self.delivered = threading.Event()
        self._lock = threading.Lock()

    def acknowledge(self, ack: TaskAcknowledgement) -> None:
        with self._lock:
            self.acks.append(ack.checkpoint_id)
        self.delivered.set()

    def decline(self, task, checkpoint_id: int, reason) -> None:
        self.declines.append((task, checkpoint_id, reason))
        self.delivered.set()

    def task_running(self, task) -> None:
        pass  # initialization done: nothing to record here


def ack(checkpoint_id: int) -> TaskAcknowledgement:
    return TaskAcknowledgement((3, 0), checkpoint_id)


# ----------------------------------------------------------------- attempts (M-R1, M-R2)


def test_m_r1_a_fault_fires_in_its_own_attempt_only() -> None:
    plan = sequence_job([FailAtRecord("plus one", 500, attempt=1)])
    result = run(plan, attempt_number=0)  # attempt 0: no fault
    assert sorted(next(iter(result.sink_results.values()))[0]) == list(range(1, 1001))

    error = run_failing(plan, attempt_number=1)
    assert "InjectedFault" in str(error) and "FailAtRecord(operator='plus one'" in str(error)
    assert "record 500" in str(error) and "attempt 1" in str(error)
    assert error.operator == "plus one" and error.subtask == 0
    assert isinstance(error.__cause__, InjectedFault)

    run(plan, attempt_number=2)  # the restarted attempt after it runs clean again


def test_m_r1_fail_at_record_stops_a_chained_operator_before_the_batch_holding_the_record(
    probe,
) -> None:
    def seen(x):
        probe.add(x)
        return x

    plan = sequence_job([FailAtRecord("plus one", 505)], batch_size=10, map_fn=seen)
    error = run_failing(plan)
    assert "record 505" in str(error)
    # batches of 10: the one holding record 505 (values 500..509) never reached the function
    assert probe.items == list(range(500))


def test_m_r1_fail_at_record_in_a_source_counts_the_rows_it_emits(probe) -> None:
    def seen(x):
        probe.add(x)
        return x

    plan = sequence_job([FailAtRecord(SOURCE, 505)], batch_size=10, map_fn=seen)
    error = run_failing(plan)
    assert f"FailAtRecord(operator='{SOURCE}', record=505" in str(error)
    assert probe.items == list(range(500))


def test_m_r1_a_fault_fires_only_in_its_subtask() -> None:
    env = lg.StreamEnvironment(parallelism=2)
    env.from_source(SequenceSource(0, 1000)).sink_to(DiscardingSink(), name="sink")
    inject_faults(env, FailAtRecord(SOURCE, 10, subtask=1))
    plan = env.get_execution_plan("two subtasks")
    error = run_failing(plan)
    assert error.subtask == 1 and "subtask 1, attempt 0" in str(error)
    plan.faults = FaultSchedule(FailAtRecord(SOURCE, 10, subtask=5))  # no such subtask
    run(plan)


def test_m_r2_a_restarted_job_runs_each_attempts_fault_once_then_finishes() -> None:
    faults = [
        FailAtRecord("plus one", 300, attempt=0),
        FailSnapshot("plus one", 2, attempt=1),
        FailCommit("sink", 1, attempt=2),
    ]
    plan = checkpointed_job(faults, restarts=lg.RestartStrategy.fixed_delay(3, 0))
    result = run(plan)
    assert result.status is lg.JobStatus.FINISHED and result.attempts == 4


def test_m_r2_seeded_faults_restart_a_job_once_per_fault() -> None:
    faults = seeded_faults(
        11, 5, operators={"source": SOURCE, "operator": "keyed", "sink": "sink"}, records=200
    )
    # the alignment fault of attempt 2 gets barriers delayed on one channel, to align for long
    delayed = DelayBarriers(SOURCE, 100, checkpoint=1, attempt=2, subtask=1)
    plan = checkpointed_job(
        [*faults, delayed], parallelism=2, keyed=True, restarts=lg.RestartStrategy.fixed_delay(5, 0)
    )
    result = run(plan)
    assert result.status is lg.JobStatus.FINISHED
    assert result.attempts == 6, "every one of the 5 faults failed one attempt"


def test_m_r1_a_fault_fires_at_most_once_per_attempt_and_subtask() -> None:
    op = Stub("op")
    install([FailAtRecord("op", 15)], fake_task(Stub("head"), op))
    op.process_batch(rows(0, 10))
    with pytest.raises(InjectedFault, match="record 15"):
        op.process_batch(rows(10, 20))
    op.process_batch(rows(20, 30))
    op.process_batch(rows(10, 20))  # counts only go up: the record is never reached again
    assert op.calls == [
        ("batch", list(range(10))),
        ("batch", list(range(20, 30))),
        ("batch", list(range(10, 20))),
    ]


def test_m_r1_after_checkpoints_holds_the_fault_until_that_many_completions_then_fires_once() -> (
    None
):
    op = Stub("op")
    install([FailAtRecord("op", 15, after_checkpoints=2)], fake_task(Stub("head"), op))
    op.process_batch(rows(0, 20))  # holds record 15, but no checkpoint completed yet
    op.notify_checkpoint_complete(1)
    op.process_batch(rows(20, 30))  # one of two
    op.notify_checkpoint_complete(2)
    with pytest.raises(InjectedFault, match="record 15 reached after 2 completed checkpoints"):
        op.process_batch(rows(30, 40))  # the first batch once both completed
    op.notify_checkpoint_complete(3)
    op.process_batch(rows(40, 50))  # at most once
    # the operator's own notices still ran, and the failing batch was not processed
    assert [c for c in op.calls if c[0] == "commit"] == [
        ("commit", 1),
        ("commit", 2),
        ("commit", 3),
    ]
    assert [c[1][0] for c in op.calls if c[0] == "batch"] == [0, 20, 40]


def test_m_r1_after_checkpoints_fires_at_the_record_itself_when_checkpoints_came_first() -> None:
    op = Stub("op")
    install([FailAtRecord("op", 25, after_checkpoints=1)], fake_task(Stub("head"), op))
    op.notify_checkpoint_complete(7)
    op.process_batch(rows(0, 20))
    with pytest.raises(InjectedFault, match="record 25"):
        op.process_batch(rows(20, 30))


def test_m_r1_after_checkpoints_in_a_job_fails_after_a_completed_checkpoint_and_restores_it() -> (
    None
):
    """In a running job: the fault waits for a completed checkpoint, so the restarted
    attempt restores one instead of starting over."""
    plan = checkpointed_job(
        [FailAtRecord("plus one", 10, after_checkpoints=1)],
        restarts=lg.RestartStrategy.fixed_delay(1, 0),
    )
    result = run(plan)
    assert result.status is lg.JobStatus.FINISHED and result.attempts == 2
    assert result.records_in_last_attempt("plus one") < 4000, (
        "the last attempt restored a checkpoint"
    )


def test_m_r1_a_schedule_matches_operators_by_uid_and_every_subtask_with_none() -> None:
    for subtask in (0, 1, 3):
        op = Stub("op", subtask)
        install([FailAtRecord("uid-op", 0, subtask=None)], fake_task(op, subtask=subtask))
        with pytest.raises(InjectedFault, match=f"subtask {subtask}"):
            op.process_batch(rows(0, 1))


def test_m_r1_a_fault_on_a_chained_operator_is_reached_through_the_chain() -> None:
    head, tail = Stub("head"), Stub("tail")
    head.output.main = [tail.process_batch]  # how a chain wires head -> tail
    install([FailAtRecord("tail", 3)], fake_task(head, tail))
    head.output.emit(rows(0, 3))
    with pytest.raises(InjectedFault):
        head.output.emit(rows(3, 4))
    assert tail.calls == [("batch", [0, 1, 2])]


def test_m_r1_without_a_matching_fault_install_changes_nothing() -> None:
    head, tail = Stub("head"), Stub("tail")
    targets = [tail.process_batch]
    head.output.main = targets
    before = {op: dict(vars(op)) for op in (head, tail)}
    responder = Responder()
    schedule = FaultSchedule(
        FailAtRecord("tail", 3, attempt=1),
        FailSnapshot("tail", subtask=1),
        FailCommit("elsewhere"),
        DropAcknowledgement("tail", attempt=2),
        DelayAcknowledgement("tail", 10, subtask=1),
    )
    assert schedule.wrap_responder(responder, (4, 0), 0) is responder
    schedule.install(fake_task(head, tail), attempt_number=0, in_process=True)
    assert {op: dict(vars(op)) for op in (head, tail)} == before
    assert head.output.main is targets and targets == [tail.process_batch]


def test_m_r1_a_schedule_pickles_and_behaves_the_same_in_a_copy_of_the_plan() -> None:
    schedule = FaultSchedule(
        FailAtRecord("plus one", 500, attempt=1),
        KillWorker("x", 3),
        FailSnapshot("x", 2, "async"),
        DropAcknowledgement("x"),
        DelayAcknowledgement("x", 5.5),
        DelayBarriers("x", 1),
        FailDuringAlignment("x", subtask=None),
        FailCommit("x", 3),
    )
    assert cloudpickle.loads(cloudpickle.dumps(schedule)) == schedule
    assert pickle.loads(pickle.dumps(schedule)) == schedule
    plan = sequence_job([FailAtRecord("plus one", 500, attempt=1)])
    shipped = cloudpickle.loads(cloudpickle.dumps(plan))
    run(shipped, attempt_number=0)
    assert "record 500" in str(run_failing(shipped, attempt_number=1))
    error = pickle.loads(pickle.dumps(InjectedFault("boom", operator="op", subtask=1)))
    assert (str(error), error.operator, error.subtask) == ("boom", "op", 1)


def test_m_r1_kill_worker_is_refused_in_process_and_kills_the_worker_otherwise(monkeypatch) -> None:
    op = Stub("op")
    with pytest.raises(lg.ConfigurationError, match="SparkExecutor"):
        install([KillWorker("op", 5, attempt=3)], fake_task(op), in_process=True)
    plan = sequence_job([KillWorker("plus one", 5)])
    with pytest.raises(lg.ConfigurationError, match="needs the SparkExecutor"):
        run(plan)

    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(schedule_module.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    monkeypatch.setattr(schedule_module.os, "getpid", lambda: 4242)
    install([KillWorker("op", 5)], fake_task(op), in_process=False)
    op.process_batch(rows(0, 5))
    assert killed == []
    with pytest.raises(InjectedFault):  # only reached because kill was replaced
        op.process_batch(rows(5, 6))
    assert killed == [(4242, signal.SIGKILL)]


# --------------------------------------------------------------- snapshots (M-T1, M-T3)


def test_m_t1_fail_snapshot_sync_raises_from_the_nth_snapshot_of_the_attempt() -> None:
    op = Stub("op")
    install([FailSnapshot("op", checkpoint=2)], fake_task(op))
    assert op.snapshot_state(17).checkpoint_id == 17  # the 1st snapshot: not the id
    with pytest.raises(InjectedFault, match=r"snapshot 2 \(checkpoint 18\), sync part"):
        op.snapshot_state(18)
    assert op.snapshot_state(19).checkpoint_id == 19
    assert [v.checkpoint_id for v in op.views] == [17, 19]


def test_m_t3_fail_snapshot_async_fails_materialize_and_releases_the_real_view() -> None:
    op = Stub("op")
    install([FailSnapshot("op", checkpoint=1, phase="async")], fake_task(op))
    view = op.snapshot_state(5)
    assert isinstance(view, FailingView)
    with pytest.raises(InjectedFault, match="async part"):
        view.materialize()
    view.release()
    assert op.views[0].released
    assert op.snapshot_state(6).materialize() == {"checkpoint": 6}
    # an operator without state (view None) fails its asynchronous part too
    assert FailingView(None, InjectedFault("x")).release() is None


def test_m_t3_an_async_snapshot_fault_makes_the_subtask_decline_the_checkpoint() -> None:
    op = Stub("op")
    responder = Responder()
    checkpointer = SubtaskCheckpointer(
        (3, 0), "task", [op], [], MemoryCheckpointStorage(), responder, lg.SystemClock()
    )
    install([FailSnapshot("op", 1, "async")], fake_task(op, checkpointer=checkpointer))
    try:
        checkpointer.trigger_snapshot(el.CheckpointBarrier(9, 0), AlignmentInfo(0.0, 0.0, False))
        assert responder.delivered.wait(10), "no answer to checkpoint 9"
        assert responder.declines == [((3, 0), 9, CheckpointFailureReason.ASYNC_FAILED)]
        assert responder.acks == [] and op.views[0].released
    finally:
        checkpointer.close()


def test_m_c6_a_sync_snapshot_fault_declines_the_checkpoint_and_fails_the_job_without_tolerance() -> (
    None
):
    # the task declines (it does not fail); with tolerable_failures = 0 the coordinator
    # fails the job on that one failed checkpoint
    error = run_failing(checkpointed_job([FailSnapshot("plus one", checkpoint=2)]))
    assert error.reason is lg.FailureReason.CHECKPOINT
    assert "synchronous snapshot part failed" in str(error)


def test_m_c6_an_async_snapshot_fault_fails_the_checkpoint_and_the_job_without_tolerance() -> None:
    error = run_failing(checkpointed_job([FailSnapshot(SOURCE, checkpoint=2, phase="async")]))
    assert error.reason is lg.FailureReason.CHECKPOINT
    assert "asynchronous snapshot part failed" in str(error)


# ----------------------------------------------------------- acknowledgements (M-C4, M-C5)


def test_m_c5_drop_acknowledgement_swallows_the_nth_ack_of_the_attempt_only() -> None:
    inner = Responder()
    schedule = FaultSchedule(DropAcknowledgement("op", checkpoint=2))
    wrapped = schedule.wrap_responder(inner, (3, 0), 0)
    assert isinstance(wrapped, FaultyResponder)
    assert schedule.wrap_responder(inner, (3, 0), 1) is inner  # another attempt
    assert schedule.wrap_responder(inner, (3, 1), 0) is inner  # another subtask
    op = Stub("op")
    schedule.install(
        fake_task(op, checkpointer=SimpleNamespace(responder=wrapped)),
        attempt_number=0,
        in_process=True,
    )
    for checkpoint_id in (4, 5, 6):
        wrapped.acknowledge(ack(checkpoint_id))
    wrapped.decline((3, 0), 7, CheckpointFailureReason.DECLINED)
    assert inner.acks == [4, 6]
    assert inner.declines == [((3, 0), 7, CheckpointFailureReason.DECLINED)]


def test_m_c5_an_ack_fault_stays_dormant_in_a_task_without_its_operator() -> None:
    inner = Responder()
    schedule = FaultSchedule(DropAcknowledgement("elsewhere"))
    wrapped = schedule.wrap_responder(inner, (3, 0), 0)
    schedule.install(
        fake_task(Stub("op"), checkpointer=SimpleNamespace(responder=wrapped)),
        attempt_number=0,
        in_process=True,
    )
    wrapped.acknowledge(ack(1))
    assert inner.acks == [1]


def test_m_c5_delay_acknowledgement_delivers_the_nth_ack_late_without_holding_others() -> None:
    inner = Responder()
    schedule = FaultSchedule(DelayAcknowledgement("task", delay_ms=50, checkpoint=1))
    wrapped = schedule.wrap_responder(inner, (3, 0), 0)
    schedule.install(
        fake_task(Stub("op"), name="task", checkpointer=SimpleNamespace(responder=wrapped)),
        attempt_number=0,
        in_process=True,
    )
    assert isinstance(wrapped, FaultyResponder)
    sent = time.monotonic()
    wrapped.acknowledge(ack(1))
    wrapped.acknowledge(ack(2))
    assert inner.acks == [2]
    [timer] = wrapped.timers
    timer.join(10)
    assert not timer.is_alive(), "the delayed acknowledgement was not delivered in 10 s"
    assert time.monotonic() - sent >= 0.05
    assert inner.acks == [2, 1]


def test_m_c4_a_dropped_acknowledgement_lets_its_checkpoint_expire_and_later_ones_complete() -> (
    None
):
    plan = checkpointed_job(
        [DropAcknowledgement("plus one", checkpoint=1)], timeout=200, tolerable_failures=3
    )
    client = run_client(plan)
    client.wait(30)
    stats = client.checkpoints()
    assert stats[0].checkpoint_id == 1 and stats[0].status == "failed"
    assert stats[0].failure_reason == "expired before completing"
    assert any(s.status == "completed" for s in stats[1:])


def test_m_c4_a_delayed_acknowledgement_delays_its_checkpoint_only() -> None:
    plan = checkpointed_job([DelayAcknowledgement("plus one", delay_ms=300, checkpoint=1)])
    client = run_client(plan)
    client.wait(30)
    first, *rest = [s for s in client.checkpoints() if s.status == "completed"]
    assert first.checkpoint_id == 1 and first.duration_ms is not None
    assert first.duration_ms >= 300
    assert rest and min(s.duration_ms or 0 for s in rest) < 300


# ------------------------------------------------------------------- barriers (M-B4, M-B10)


def test_m_b4_delay_barriers_blocks_the_nth_barrier_before_it_is_forwarded() -> None:
    op = Stub("op")
    install([DelayBarriers("op", delay_ms=60, checkpoint=2)], fake_task(op))
    started = time.monotonic()
    op.prepare_snapshot_pre_barrier(1)
    assert time.monotonic() - started < 0.06
    op.prepare_snapshot_pre_barrier(2)
    assert time.monotonic() - started >= 0.06
    assert op.calls == [("prepare", 1), ("prepare", 2)]


def test_m_b10_barriers_delayed_on_one_channel_make_downstream_alignment_wait() -> None:
    plan = checkpointed_job(
        [DelayBarriers(SOURCE, delay_ms=300, checkpoint=2, subtask=1)], parallelism=2, keyed=True
    )
    keyed_vertex = next(v.id for v in plan.vertices if v.name.startswith("keyed"))
    client = run_client(plan)
    client.wait(30)
    slow = [
        s for s in client.checkpoints() if s.status == "completed" and (s.duration_ms or 0) >= 300
    ]
    assert slow, "no checkpoint waited for the delayed barrier"
    alignments = [m.alignment_ms for key, m in slow[0].subtasks.items() if key[0] == keyed_vertex]
    assert len(alignments) == 2 and min(alignments) >= 150, alignments


def test_m_b4_fail_during_alignment_fires_on_the_barrier_that_starts_an_alignment() -> None:
    head = Stub("head")
    aligner = BarrierAligner(2, SimpleNamespace(), lg.SystemClock())
    install([FailDuringAlignment("head")], fake_task(head, inputs=True, handler=aligner))
    head.process_batch(rows(0, 2))
    with pytest.raises(
        InjectedFault, match="barrier on channel 0 during the alignment of checkpoint 4"
    ):
        aligner.on_barrier(0, el.CheckpointBarrier(4, 0))  # channel 0 blocked, 1 flowing
    head.process_batch(rows(2, 4))  # at most once
    assert head.calls == [("batch", [0, 1]), ("batch", [2, 3])]


def test_m_b4_fail_during_alignment_fires_on_a_batch_while_a_checkpoint_is_aligned() -> None:
    head = Stub("head")
    aligner = BarrierAligner(2, SimpleNamespace(), lg.SystemClock())
    unwrapped = BarrierAligner.on_barrier.__get__(aligner)
    install([FailDuringAlignment("head")], fake_task(head, inputs=True, handler=aligner))
    unwrapped(0, el.CheckpointBarrier(4, 0))  # the alignment began unobserved
    with pytest.raises(InjectedFault, match="batch during the alignment of checkpoint 4"):
        head.process_batch(rows(2, 4))
    head.process_batch(rows(4, 6))  # at most once
    assert head.calls == [("batch", [4, 5])]


@pytest.mark.parametrize("mode", list(lg.CheckpointingMode), ids=lambda m: m.value)
def test_m_b4_fail_during_alignment_fails_a_running_job(mode) -> None:
    faults = [FailDuringAlignment("keyed"), DelayBarriers(SOURCE, 200, subtask=1)]
    error = run_failing(checkpointed_job(faults, parallelism=2, keyed=True, mode=mode))
    assert "FailDuringAlignment(operator='keyed'" in str(error) and "alignment of" in str(error)
    assert error.operator == "keyed" and error.subtask == 0


def test_m_b4_fail_during_alignment_needs_the_head_of_a_checkpointed_task_with_inputs() -> None:
    with pytest.raises(lg.ConfigurationError, match="must be the first operator"):
        install(
            [FailDuringAlignment("tail")],
            fake_task(Stub("head"), Stub("tail"), inputs=True, handler=object()),
        )
    with pytest.raises(lg.ConfigurationError, match="must be the first operator"):
        install([FailDuringAlignment("head")], fake_task(Stub("head")))
    with pytest.raises(lg.ConfigurationError, match="enable_checkpointing"):
        install([FailDuringAlignment("head")], fake_task(Stub("head"), inputs=True))
    # another attempt: nothing to check, nothing installed
    install([FailDuringAlignment("tail", attempt=1)], fake_task(Stub("head"), Stub("tail")))


# ------------------------------------------------------------------------ commits (M-X2, M-X3)


def test_m_x3_fail_commit_raises_on_the_nth_completion_notice_before_committing() -> None:
    sink = Stub("files")
    install([FailCommit("files", checkpoint=2)], fake_task(Stub("head"), sink))
    sink.notify_checkpoint_complete(11)
    with pytest.raises(InjectedFault, match=r"completion notice 2 \(checkpoint 12\)"):
        sink.notify_checkpoint_complete(12)
    sink.notify_checkpoint_complete(13)
    assert sink.calls == [("commit", 11), ("commit", 13)]  # 12 pre-committed, not committed


def test_m_x3_a_failed_commit_fails_the_running_job() -> None:
    error = run_failing(checkpointed_job([FailCommit("sink", checkpoint=1)]))
    assert "FailCommit(operator='sink', checkpoint=1" in str(error)
    assert error.operator == "sink"


# ------------------------------------------------------------------ seeded faults, public API


OPERATORS = {"source": SOURCE, "operator": "running sum", "sink": "files"}


def test_m_r1_seeded_faults_are_deterministic_one_per_attempt_and_cycle_the_kinds() -> None:
    faults = seeded_faults(7, 10, operators=OPERATORS, records=1000, attempts_from=2)
    assert faults == seeded_faults(7, 10, operators=OPERATORS, records=1000, attempts_from=2)
    assert faults != seeded_faults(8, 10, operators=OPERATORS, records=1000, attempts_from=2)
    assert seeded_faults(7, 4, operators=OPERATORS, records=1000, attempts_from=2) == faults[:4]
    assert [f.attempt for f in faults] == list(range(2, 12))
    kinds = [(type(f).__name__, f.operator) for f in faults[:5]]
    assert kinds == [
        ("FailAtRecord", SOURCE),
        ("FailAtRecord", "running sum"),
        ("FailDuringAlignment", "running sum"),
        ("FailSnapshot", "running sum"),
        ("FailCommit", "files"),
    ]
    assert [type(f) for f in faults[5:]] == [type(f) for f in faults[:5]]
    assert all(f.phase == "async" for f in faults if isinstance(f, FailSnapshot))
    assert all(100 <= f.record <= 900 for f in faults if isinstance(f, FailAtRecord))
    assert all(1 <= f.checkpoint <= 3 for f in faults if isinstance(f, (FailSnapshot, FailCommit)))
    assert {f.subtask for f in seeded_faults(1, 50, operators=OPERATORS, records=10)} == {0, 1}
    assert seeded_faults(3, 0, operators=OPERATORS, records=10) == []


def test_inject_faults_attaches_a_schedule_to_the_environment() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    schedule = inject_faults(env, FailAtRecord("x", 1), FailCommit("y"))
    assert env._faults == schedule == FaultSchedule([FailAtRecord("x", 1), FailCommit("y")])
    assert len(schedule) == 2 and schedule.for_attempt(0) == list(schedule.faults)
    with pytest.raises(lg.ConfigurationError, match="StreamEnvironment"):
        inject_faults(object(), FailAtRecord("x", 1))
    with pytest.raises(lg.ConfigurationError, match="FaultSchedule takes faults"):
        FaultSchedule(FailAtRecord("x", 1), "fail please")


def test_a_schedule_checks_its_operators_against_a_plan() -> None:
    plan = sequence_job([])
    uid = next(u for u, n in plan.operator_names.items() if n == "plus one")
    FaultSchedule(
        FailAtRecord("plus one", 1), FailCommit(uid), DropAcknowledgement(plan.vertices[0].name)
    ).check(plan)
    with pytest.raises(lg.ConfigurationError, match="'plus two'.*does not have"):
        FaultSchedule(FailAtRecord("plus two", 1)).check(plan)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FailAtRecord("", 1), "FailAtRecord: operator must be a non-empty"),
        (lambda: FailAtRecord(None, 1), "FailAtRecord: operator must be .*got None"),
        (lambda: FailAtRecord("op", -1), "FailAtRecord: record must be an int >= 0, got -1"),
        (lambda: FailAtRecord("op", 1.5), "FailAtRecord: record must be an int >= 0, got 1.5"),
        (lambda: KillWorker("op", True), "KillWorker: record must be an int >= 0, got True"),
        (lambda: FailAtRecord("op", 1, attempt=-1), "FailAtRecord: attempt must be .*got -1"),
        (lambda: FailAtRecord("op", 1, subtask=-2), "FailAtRecord: subtask must be .*got -2"),
        (
            lambda: FailAtRecord("op", 1, after_checkpoints=-1),
            "FailAtRecord: after_checkpoints must be an int >= 0, got -1",
        ),
        (lambda: FailSnapshot("op", 0), "FailSnapshot: checkpoint must be an int >= 1, got 0"),
        (
            lambda: FailSnapshot("op", phase="later"),
            "FailSnapshot: phase must be 'sync' or 'async', got 'later'",
        ),
        (lambda: DropAcknowledgement("op", 0), "DropAcknowledgement: checkpoint must be"),
        (
            lambda: DelayAcknowledgement("op", -5),
            "DelayAcknowledgement: delay_ms must be a number of milliseconds >= 0, got -5",
        ),
        (lambda: DelayBarriers("op", "1s"), "DelayBarriers: delay_ms must be .*got '1s'"),
        (lambda: DelayBarriers("op", 10, checkpoint=0), "DelayBarriers: checkpoint must be"),
        (lambda: FailDuringAlignment("op", attempt=None), "FailDuringAlignment: attempt must be"),
        (lambda: FailCommit("op", -1), "FailCommit: checkpoint must be an int >= 1, got -1"),
        (lambda: seeded_faults(1, -1, operators=OPERATORS, records=10), "count must be"),
        (lambda: seeded_faults(1, 1, operators={"source": "s"}, records=10), "operators must map"),
        (lambda: seeded_faults("1", 1, operators=OPERATORS, records=10), "seed must be an int"),
    ],
)
def test_fault_arguments_are_validated_naming_fault_argument_and_value(make, message) -> None:
    with pytest.raises(lg.ConfigurationError, match=message):
        make()

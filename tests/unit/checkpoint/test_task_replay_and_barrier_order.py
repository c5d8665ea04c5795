"""Two task-level rules, each on its own (driven with in-memory channels):

* M-B7 on restore: a task restoring an unaligned checkpoint hands every replayed
  in-flight batch to its operator before any live batch, even one that was already
  queued on the same input channel when the task started;
* M-T1 after an alignment: a running task forwards its output and the barrier, then
  snapshots, before it processes the records behind the barrier."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from test_final_checkpoint import Running, barrier, make_task, plan_of

from conftest import wait_until
from lockgate.connectors import SequenceSource
from lockgate.core.batch import is_batch, scalar_batch, to_rows
from lockgate.runtime.channels import LocalChannel


def test_m_b7_every_replayed_batch_reaches_the_operator_before_a_live_batch_queued_first() -> None:
    plan, v = plan_of(SequenceSource(0, 10))
    live = LocalChannel(1 << 20, name="in")
    live.put(scalar_batch([100, 101]))  # queued before the task runs
    task, _, _ = make_task(plan, v["m"], inputs=[live])
    op = next(o for o in task.chain.operators if o.uid == "m")
    seen: list[list[Any]] = []
    process = op.process_batch

    def recording(batch: Any, input_index: int = 0) -> Any:
        seen.append(list(to_rows(batch)))
        return process(batch, input_index)

    op.process_batch = recording
    edge = SimpleNamespace(consumer="m", input_index=0)
    replayed = [scalar_batch([1, 2]), scalar_batch([3])]
    open_chain = task.chain.open

    def open_then_restored() -> None:  # the operators open empty; then the channel state
        open_chain()
        task.chain.restore = SimpleNamespace(channels=["recorded"], finished_operators=None)

    task.chain.open = open_then_restored
    task.channel_state_replay = lambda restore, layout: [(edge, b) for b in replayed]
    running = Running(task)
    try:
        wait_until(lambda: len(seen) >= 3, "the replayed and the live batches are processed")
        assert seen[:3] == [[1, 2], [3], [100, 101]], (
            f"replayed batches must come before live input: got {seen}"
        )
    finally:
        running.stop()


def test_m_t1_a_running_task_snapshots_after_forwarding_its_barrier_and_before_later_records() -> (
    None
):
    """M-T1 in a running (non-source) task: a barrier queued between two batches on its
    input completes the alignment; the task processes the batch before it, forwards its
    output and the barrier, snapshots, and only then processes the batch after it."""
    plan, v = plan_of(SequenceSource(0, 10))
    live = LocalChannel(1 << 20, name="in")
    task, [out], responder = make_task(plan, v["m"], inputs=[live])
    op = next(o for o in task.chain.operators if o.uid == "m")
    log: list[Any] = []
    process, snapshot, put = op.process_batch, op.snapshot_state, out.put

    def logged_process(batch: Any, input_index: int = 0) -> Any:
        log.append(("process", list(to_rows(batch))))
        return process(batch, input_index)

    def logged_snapshot(checkpoint_id: int) -> Any:
        log.append(("snapshot", checkpoint_id))
        return snapshot(checkpoint_id)

    def logged_put(element: Any) -> None:
        log.append(("out", list(to_rows(element)) if is_batch(element) else type(element).__name__))
        put(element)

    op.process_batch, op.snapshot_state, out.put = logged_process, logged_snapshot, logged_put
    running = Running(task)
    try:
        wait_until(lambda: responder.running, "the task runs")
        live.put(scalar_batch([1, 2]))
        live.put(barrier(1))
        live.put(scalar_batch([3]))
        wait_until(lambda: ("process", [3]) in log, "the batch after the barrier is processed")
        wait_until(lambda: responder.acks == [1], "the checkpoint is acknowledged")
        steps = [
            ("process", [1, 2]),
            ("out", [1, 2]),
            ("out", "CheckpointBarrier"),
            ("snapshot", 1),
            ("process", [3]),
        ]
        assert all(s in log for s in steps), log
        order = [log.index(s) for s in steps]
        assert order == sorted(order), f"expected the order {steps}, got {log}"
    finally:
        running.stop()

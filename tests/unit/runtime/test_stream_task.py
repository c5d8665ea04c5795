"""StreamTask, driven directly with in-memory channels: records and control elements leave in
the order they came (M-E1), each output channel ends with exactly one end of partition, and a
cancelled task stops promptly."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import lockgate as lg
from conftest import wait_until
from lockgate.connectors import DiscardingSink, SequenceSource
from lockgate.core import elements as el
from lockgate.core.batch import is_batch, scalar_batch, to_rows
from lockgate.errors import TaskCancelledError
from lockgate.executor.task_builder import build_task
from lockgate.runtime.channels import LocalChannel
from lockgate.runtime.mailbox import Mailbox


def times_ten(x):
    return x * 10


def three_vertex_plan():
    """source --rebalance--> map --rebalance--> sink, all at parallelism 1."""
    env = lg.StreamEnvironment(parallelism=1)
    (
        env.from_source(SequenceSource(0, 10, batch_size=3), name="src")
        .rebalance()
        .map(times_ten, name="m")
        .rebalance()
        .sink_to(DiscardingSink(), name="sink")
    )
    plan = env.get_execution_plan("direct")
    by_name = {v.name: v for v in plan.vertices}
    assert set(by_name) == {"src", "m", "sink"}
    return plan, by_name


def drain(channel: LocalChannel) -> list[object]:
    out = []
    while (e := channel.poll()) is not None:
        out.append(e)
    return out


def make_task(plan, vertex, inputs=()):
    outputs = {eid: [LocalChannel(1 << 20, name=f"out {eid}")] for eid in vertex.out_edges}
    task = build_task(
        plan,
        vertex,
        0,
        output_channels=outputs,
        input_channels=[(c, 0) for c in inputs],
        signal=threading.Event(),
        clock=lg.SystemClock(),
    )
    return task, [c for chans in outputs.values() for c in chans]


def test_a_source_task_ends_its_output_with_exactly_one_end_of_partition_after_its_records() -> (
    None
):
    plan, v = three_vertex_plan()
    task, [out] = make_task(plan, v["src"])
    task.run()
    elements = drain(out)
    assert elements[-1] is el.END_OF_PARTITION
    assert sum(e is el.END_OF_PARTITION for e in elements) == 1
    # its end of data comes right before it (FLIP-147)
    assert elements[-2] is el.END_OF_DATA
    # a source that ends sends the maximum watermark, not IDLE (M-W2)
    assert elements[-3] == el.Watermark(el.MAX_WATERMARK)
    assert [r for e in elements[:-3] for r in to_rows(e)] == list(range(10))
    assert task.finished


def test_a_task_forwards_control_elements_in_order_behind_the_records_before_them_M_E1() -> None:
    plan, v = three_vertex_plan()
    inp = LocalChannel(1 << 20)
    for e in [
        scalar_batch(np.arange(3)),
        el.Watermark(5),
        el.CheckpointBarrier(1, 0),
        scalar_batch(np.arange(3, 5)),
        el.StreamStatus.IDLE,
        el.END_OF_PARTITION,
    ]:
        inp.put(e)
    task, [out] = make_task(plan, v["m"], [inp])
    task.run()
    got = [to_rows(e) if is_batch(e) else e for e in drain(out)]
    # watermarks and statuses pass the input's valve (M-W3, M-W4): the one channel going
    # idle makes the task idle; its end makes it active again with the maximum watermark
    assert got == [
        [0, 10, 20],
        el.Watermark(5),
        el.CheckpointBarrier(1, 0),
        [30, 40],
        el.StreamStatus.IDLE,
        el.StreamStatus.ACTIVE,
        el.Watermark(el.MAX_WATERMARK),
        el.END_OF_DATA,
        el.END_OF_PARTITION,
    ]


def test_a_task_waits_for_the_end_of_partition_of_every_input_channel() -> None:
    plan, v = three_vertex_plan()
    first, second = LocalChannel(1 << 20), LocalChannel(1 << 20)
    task, [out] = make_task(plan, v["m"], [first, second])
    first.put(scalar_batch([1]))
    first.put(el.END_OF_PARTITION)
    runner = threading.Thread(target=task.run, name="test task")
    runner.start()
    try:
        wait_until(lambda: len(out) >= 1, "the record of the first channel is processed")
        assert not task.finished, "one input is still open"
        second.put(scalar_batch([2]))
        second.put(el.END_OF_PARTITION)
        runner.join(5)
        assert not runner.is_alive() and task.finished
    finally:
        task.cancel()
        runner.join(5)
    rows = [r for e in drain(out) if is_batch(e) for r in to_rows(e)]
    assert sorted(rows) == [10, 20]


def test_cancelling_a_task_that_waits_for_input_stops_it_with_task_cancelled(probe) -> None:
    class Closing(lg.MapFunction):
        def __init__(self, probe):
            self.probe = probe

        def map(self, value):
            return value

        def close(self):
            self.probe.add("closed")

    env = lg.StreamEnvironment(parallelism=1)
    (
        env.from_source(SequenceSource(0, 1), name="src")
        .rebalance()
        .map(Closing(probe), name="m")
        .rebalance()
        .sink_to(DiscardingSink())
    )
    plan = env.get_execution_plan("cancel")
    vertex = next(x for x in plan.vertices if x.name == "m")
    inp = LocalChannel(1 << 20)
    task, _ = make_task(plan, vertex, [inp])
    errors: list[BaseException] = []

    def run() -> None:
        try:
            task.run()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    runner = threading.Thread(target=run, name="test task")
    runner.start()
    inp.put(scalar_batch([1]))
    wait_until(lambda: len(inp) == 0, "the task takes its input")
    task.cancel()
    runner.join(5)
    assert not runner.is_alive(), "cancel must wake a task waiting for input"
    assert len(errors) == 1 and isinstance(errors[0], TaskCancelledError)
    assert probe.items == ["closed"], "operators are closed after cancellation"


def test_the_mailbox_runs_actions_oldest_first_in_the_calling_thread_and_drops_after_close() -> (
    None
):
    signal = threading.Event()
    box = Mailbox(signal)
    ran: list[tuple[str, str]] = []
    box.put(lambda: ran.append(("a", threading.current_thread().name)), "first")
    box.put(lambda: ran.append(("b", threading.current_thread().name)), "second")
    assert signal.is_set() and len(box) == 2
    assert box.run_pending() == 2
    me = threading.current_thread().name
    assert ran == [("a", me), ("b", me)]
    box.close()
    box.put(lambda: ran.append(("late", me)))
    assert box.run_pending() == 0 and len(box) == 0


@pytest.mark.parametrize("failing", ["open", "map"])
def test_a_failing_task_still_closes_its_operators(probe, failing) -> None:
    class Fragile(lg.MapFunction):
        def __init__(self, probe, failing):
            self.probe = probe
            self.failing = failing

        def open(self, ctx):
            if self.failing == "open":
                raise ValueError("open failed")

        def map(self, value):
            raise ValueError("map failed")

        def close(self):
            self.probe.add("closed")

    env = lg.StreamEnvironment(parallelism=1)
    env.from_source(SequenceSource(0, 5), name="src").map(Fragile(probe, failing)).sink_to(
        DiscardingSink()
    )
    plan = env.get_execution_plan("fragile")
    [vertex] = plan.vertices
    task, _ = make_task(plan, vertex)
    with pytest.raises(lg.UserFunctionError, match=f"{failing} failed"):
        task.run()
    assert probe.items == ["closed"]

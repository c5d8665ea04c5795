"""How watermarks leave an operator and a task, driven directly (no executor).

* M-W6: a keyed process operator fires every event-time timer the watermark makes due,
  emits what the timers produced, and only then forwards the watermark.
* M-W2: a task whose announced status is IDLE forwards no watermark generated inside it
  (it would advance downstream valves on an input they hold to be idle); the status goes
  out once per change.
"""

from __future__ import annotations

from typing import Any

import cloudpickle
import pytest

import lockgate as lg
from lockgate.core.batch import RowBatch, to_rows
from lockgate.core.elements import StreamElement, StreamStatus, Watermark
from lockgate.graph.execution_plan import OperatorPlan, VertexPlan
from lockgate.graph.operator_factory import OperatorFactory
from lockgate.graph.transformations import Kind
from lockgate.runtime.chain import OperatorChain
from lockgate.runtime.operators.base import StreamOperator
from lockgate.testing import OperatorHarness, OutputBatch


def events(h: OperatorHarness) -> list[Any]:
    """What the operator emitted, in order: ("batch", rows, timestamps), ("side", tag,
    rows) or the element."""
    return [
        (("batch", e.records, e.timestamps) if e.tag is None else ("side", e.tag, e.records))
        if isinstance(e, OutputBatch)
        else e
        for e in h.elements
    ]


class TimerPerRecord(lg.KeyedProcessFunction):
    """Registers an event-time timer at the record's ``at``; the timer emits one row."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(value["at"])
        return []

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield {"key": ctx.current_key, "fired": timestamp}


def test_M_W6_a_keyed_operator_emits_the_output_of_due_timers_before_the_watermark() -> None:
    h = OperatorHarness.for_keyed_process(TimerPerRecord(), key="k", name="p", uid="p").open()
    h.process([{"k": "a", "at": 20}, {"k": "b", "at": 10}, {"k": "a", "at": 50}])
    h.process_watermark(30)
    assert events(h) == [
        ("batch", [{"key": "b", "fired": 10}, {"key": "a", "fired": 20}], [10, 20]),
        Watermark(30),
    ], "timers fire in timestamp order, their output leaves before the watermark"
    h.process_watermark(49)
    assert events(h)[-1] == Watermark(49), "a watermark that makes nothing due goes on alone"
    h.process_watermark(50)
    assert events(h)[-2:] == [("batch", [{"key": "a", "fired": 50}], [50]), Watermark(50)]


# -- M-W2: the task's announced status ---------------------------------------------------
class EmitAsTold(StreamOperator):
    """A head operator that emits whatever element it is handed as a 'batch' of one."""

    def process_batch(self, batch: Any, input_index: int = 0) -> None:
        for element in batch:
            if isinstance(element, (Watermark, StreamStatus)):
                self.output.emit_element(element)
            else:
                self.output.emit(RowBatch([element]))


class RecordingWriter:
    """Stands in for a RecordWriter: records what the chain hands it."""

    partitioner = None  # not a key_by edge: the chain hands it records as they are

    def __init__(self) -> None:
        self.events: list[Any] = []

    def write(self, batch: Any) -> None:
        self.events.extend(to_rows(batch))

    def broadcast_event(self, element: StreamElement) -> None:
        self.events.append(element)


def chain_with_writer() -> tuple[OperatorChain, RecordingWriter]:
    op_plan = OperatorPlan(
        id=1,
        uid="emit",
        name="emit",
        kind=Kind.OPERATOR,
        parallelism=1,
        max_parallelism=128,
        payload=cloudpickle.dumps(OperatorFactory(EmitAsTold)),
        edge_outputs=[(7, None)],
    )
    vertex = VertexPlan(
        id=1,
        name="emit",
        parallelism=1,
        max_parallelism=128,
        operators=[op_plan],
        in_edges=[],
        out_edges=[7],
        is_source=False,
    )
    writer = RecordingWriter()
    chain = OperatorChain(
        vertex,
        0,
        {7: writer},  # type: ignore[dict-item]
        clock=lg.ManualClock(start_ms=0),
    )
    chain.open()
    return chain, writer


@pytest.mark.parametrize(
    "elements, expected",
    [
        # generated while idle: dropped; ACTIVE again lets the next one through
        (
            [
                Watermark(1),
                StreamStatus.IDLE,
                Watermark(2),
                Watermark(3),
                StreamStatus.ACTIVE,
                Watermark(4),
            ],
            [Watermark(1), StreamStatus.IDLE, StreamStatus.ACTIVE, Watermark(4)],
        ),
        # a status goes out once per change
        (
            [StreamStatus.IDLE, StreamStatus.IDLE, StreamStatus.ACTIVE, StreamStatus.ACTIVE],
            [StreamStatus.IDLE, StreamStatus.ACTIVE],
        ),
        # data is not held back (an operator announces ACTIVE before data, M-W2)
        (
            [StreamStatus.IDLE, {"x": 1}, StreamStatus.ACTIVE, {"x": 2}, Watermark(9)],
            [StreamStatus.IDLE, {"x": 1}, StreamStatus.ACTIVE, {"x": 2}, Watermark(9)],
        ),
    ],
)
def test_M_W2_an_idle_task_does_not_forward_watermarks_generated_inside_it(
    elements: list[Any], expected: list[Any]
) -> None:
    chain, writer = chain_with_writer()
    try:
        chain.head.process_batch(elements)  # type: ignore[arg-type]
    finally:
        chain.close()
    assert writer.events == expected

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
from lockgate.core.batch import RowBatch, timestamps_of, to_rows
from lockgate.core.elements import StreamElement, StreamStatus, Watermark
from lockgate.core.partitioners import KeySelector
from lockgate.graph.execution_plan import OperatorPlan, VertexPlan
from lockgate.graph.operator_factory import OperatorFactory
from lockgate.graph.transformations import Kind
from lockgate.runtime.chain import OperatorChain
from lockgate.runtime.context import RuntimeContext
from lockgate.runtime.operators.base import Output, StreamOperator
from lockgate.runtime.operators.keyed import KeyedProcessOperator
from lockgate.runtime.processing_time import ProcessingTimeService


class Collect(Output):
    """What an operator emitted, in order: ("batch", rows, timestamps) or the element."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def emit(self, batch: Any) -> None:
        stamps = timestamps_of(batch)
        self.events.append(("batch", to_rows(batch), None if stamps is None else list(stamps)))

    def emit_side(self, tag: str, batch: Any) -> None:
        self.events.append(("side", tag, to_rows(batch)))

    def emit_element(self, element: Any) -> None:
        self.events.append(element)


class TimerPerRecord(lg.KeyedProcessFunction):
    """Registers an event-time timer at the record's ``at``; the timer emits one row."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(value["at"])
        return []

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield {"key": ctx.current_key, "fired": timestamp}


def keyed_operator() -> tuple[KeyedProcessOperator, Collect]:
    op = KeyedProcessOperator(TimerPerRecord(), KeySelector("k"))
    clock = lg.ManualClock(start_ms=0)
    ctx = RuntimeContext(
        task_name="t",
        operator_name="p",
        operator_uid="p",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
        clock=clock,
        processing_time_service=ProcessingTimeService(clock),
    )
    out = Collect()
    op.setup("p", "p", ctx, out)
    op.initialize_state(None)
    op.open()
    return op, out


def test_M_W6_a_keyed_operator_emits_the_output_of_due_timers_before_the_watermark() -> None:
    op, out = keyed_operator()
    op.process_batch(RowBatch([{"k": "a", "at": 20}, {"k": "b", "at": 10}, {"k": "a", "at": 50}]))
    op.process_watermark(Watermark(30))
    assert out.events == [
        ("batch", [{"key": "b", "fired": 10}, {"key": "a", "fired": 20}], [10, 20]),
        Watermark(30),
    ], "timers fire in timestamp order, their output leaves before the watermark"
    op.process_watermark(Watermark(49))
    assert out.events[-1] == Watermark(49), "a watermark that makes nothing due goes on alone"
    op.process_watermark(Watermark(50))
    assert out.events[-2:] == [("batch", [{"key": "a", "fired": 50}], [50]), Watermark(50)]


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

"""Sources generate watermarks per split and combine them (M-W1, M-W2): one lagging
split holds back the source's watermark only while it is active."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

import lockgate as lg
from lockgate.connectors.base import InputStatus, ReaderOutput, Source, SourceReader
from lockgate.core.batch import Batch, timestamps_of
from lockgate.core.elements import MAX_WATERMARK, StreamStatus, Watermark
from lockgate.runtime.context import RuntimeContext
from lockgate.runtime.operators.base import Output
from lockgate.runtime.operators.io import SourceOperator


class Collector(Output):
    def __init__(self) -> None:
        self.elements: list[Any] = []

    def emit(self, batch: Batch) -> None:
        self.elements.append(batch)

    def emit_side(self, tag: str, batch: Batch) -> None:
        raise AssertionError("no side output expected")

    def emit_element(self, element: Any) -> None:
        self.elements.append(element)

    def watermarks(self) -> list[int]:
        return [e.timestamp for e in self.elements if isinstance(e, Watermark)]


class ScriptedReader(SourceReader):
    """Emits the scripted (split, timestamps) batches, one per poll; ("end", split)
    finishes a split."""

    def __init__(self, script: list[tuple[str, Any]]) -> None:
        self.script = list(script)

    def add_splits(self, splits: list[Any]) -> None:
        pass

    def poll(self, output: ReaderOutput) -> InputStatus:
        if not self.script:
            return InputStatus.END_OF_INPUT
        split, what = self.script.pop(0)
        if what == "end":
            output.split_finished(split)
        else:
            output.emit_from_split(split, pa.RecordBatch.from_pydict({"ts": what}))
        return InputStatus.MORE_AVAILABLE

    def snapshot_positions(self) -> list[Any]:
        return []

    def close(self) -> None:
        pass


class ScriptedSource(Source):
    default_name = "scripted"

    def __init__(self, script: list[tuple[str, Any]]) -> None:
        self.script = script

    def create_splits(self, parallelism: int) -> list[Any]:
        return []

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        return ScriptedReader(self.script)


def run(script: list[tuple[str, Any]]) -> tuple[SourceOperator, Collector, lg.ManualClock]:
    clock = lg.ManualClock()
    strategy = (
        lg.WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner("ts")
        .with_periodic_emit_interval(10)
    )
    op = SourceOperator(ScriptedSource(script), watermark_strategy=strategy)
    out = Collector()
    ctx = RuntimeContext(
        task_name="t",
        operator_name="src",
        operator_uid="src",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
        clock=clock,
    )
    op.setup("src", "src", ctx, out)
    op.initialize_state(None)
    op.open()
    return op, out, clock


def step(op: SourceOperator, clock: lg.ManualClock) -> None:
    op.emit_next()
    clock.advance(10)  # the periodic emission is due at the next poll


def test_a_lagging_split_holds_back_the_sources_watermark_while_it_is_active_M_W1() -> None:
    op, out, clock = run(
        [("a", [100]), ("b", [5]), ("a", [200]), ("b", [7]), ("b", "end"), ("a", [300])]
    )
    for _ in range(4):
        step(op, clock)
    # split b (at 5..7) holds the source back although split a reached 200
    assert out.watermarks()[-1] == 6
    step(op, clock)  # b is exhausted: it no longer holds anything back
    step(op, clock)
    step(op, clock)
    assert out.watermarks()[-1] == 299
    assert out.watermarks() == sorted(set(out.watermarks())), "watermarks only advance"


def test_records_carry_their_event_timestamps_and_the_end_sends_the_maximum_M_W2() -> None:
    op, out, clock = run([("a", [1, 2])])
    step(op, clock)
    batch = next(e for e in out.elements if isinstance(e, pa.RecordBatch))
    assert timestamps_of(batch).tolist() == [1, 2]
    op.finish()
    assert out.elements[-1] == Watermark(MAX_WATERMARK)
    assert StreamStatus.IDLE not in out.elements[-2:]

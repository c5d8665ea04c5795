"""RateLimitedSource: any source at a bounded pace, positions untouched (M-X1)."""

from __future__ import annotations

from typing import Any

import pytest

import lockgate as lg
from lockgate.connectors import RateLimitedSource, SequenceSource
from lockgate.connectors.base import InputStatus, ReaderOutput
from lockgate.core.batch import num_rows
from lockgate.core.clock import ManualClock
from lockgate.runtime.context import RuntimeContext


class Counter(ReaderOutput):
    def __init__(self) -> None:
        self.rows = 0

    def emit(self, batch: Any) -> None:
        self.rows += num_rows(batch)

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        raise AssertionError(record)


def reader_at(clock: ManualClock, rate: float, parallelism: int = 1):
    source = RateLimitedSource(SequenceSource(0, 10_000, batch_size=10), rate)
    ctx = RuntimeContext(
        task_name="t",
        operator_name="src",
        operator_uid="src",
        subtask_index=0,
        parallelism=parallelism,
        max_parallelism=128,
        clock=clock,
    )
    reader = source.create_reader(ctx)
    reader.add_splits(source.create_splits(parallelism)[:1])
    return reader


def drain(reader, out: Counter) -> None:
    """Poll until the reader says nothing is available now (bounded)."""
    for _ in range(10_000):
        if reader.poll(out) is not InputStatus.MORE_AVAILABLE:
            return
    raise AssertionError("the rate limit never stopped the reader")


def test_the_reader_emits_at_most_the_rate_per_second_of_its_clock() -> None:
    clock = ManualClock()
    reader, out = reader_at(clock, rate=100), Counter()
    drain(reader, out)
    assert out.rows == 10, "one batch at the start"
    assert reader.wait_hint_ms() == pytest.approx(90.0)
    clock.advance(1000)
    drain(reader, out)
    assert 100 <= out.rows <= 110, out.rows
    clock.advance(1000)
    drain(reader, out)
    assert 200 <= out.rows <= 210, out.rows


def test_the_rate_is_shared_between_subtasks() -> None:
    clock = ManualClock()
    reader, out = reader_at(clock, rate=100, parallelism=2), Counter()
    drain(reader, out)  # the pace counts from the first poll
    clock.advance(1000)
    drain(reader, out)
    assert 50 <= out.rows <= 60, out.rows


def test_positions_are_the_wrapped_readers() -> None:
    clock = ManualClock()
    reader, out = reader_at(clock, rate=1000), Counter()
    drain(reader, out)
    clock.advance(100)
    drain(reader, out)
    [split] = reader.snapshot_positions()
    assert split.next == out.rows


def test_a_job_through_the_wrapper_gets_every_record(executor) -> None:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    source = RateLimitedSource(SequenceSource(0, 3_000, batch_size=100), 30_000)
    got = env.from_source(source).execute_and_collect("rate limited")
    assert sorted(got) == list(range(3_000))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((object(), 10), "wraps a lockgate source"),
        ((SequenceSource(0, 1), 0), "rows_per_second must be a positive number"),
        ((SequenceSource(0, 1), True), "rows_per_second must be a positive number"),
    ],
)
def test_bad_arguments_are_refused(args, needle) -> None:
    with pytest.raises(lg.ConfigurationError, match=needle):
        RateLimitedSource(*args)

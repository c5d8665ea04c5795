"""The second job of the compatibility suite: session windows, an interval join, a
window co-group and async I/O in flight (their buffers, merged sessions and queued
requests in the savepoint). Its expected output is that of the same job run from start
to end without a savepoint (``straight_run``), which ``make_savepoints.py`` checks the
restore against before it stores it. Uids, state and types never change (see
``compat_job``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import compat_job

import lockgate as lg
from lockgate.connectors import CollectSink, SequenceSource

N = 6_000
KEYS = 5
OUTPUTS = ("sessions-out", "interval-out", "cogroup-out", "async-out")


def shape(v: int) -> dict[str, int]:
    """Every 1,000 values a 5 s gap in event time: sessions (2 s gap) end there."""
    return {"v": v, "k": v % KEYS, "ts": v * 10 + (v // 1_000) * 5_000, "side": v % 2}


class CountBoth(lg.CoGroupFunction):
    def co_group(self, lefts: list[Any], rights: list[Any]) -> Any:
        key = (lefts or rights)[0]["k"]
        yield {"k": key, "lefts": len(lefts), "rights": len(rights)}


async def double(r: dict[str, int]) -> list[dict[str, int]]:
    return [{"v": r["v"], "double": 2 * r["v"]}]


def build(env: lg.StreamEnvironment, source: lg.connectors.Source) -> None:
    strategy = lg.WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts")
    numbers = env.from_source(source, name="numbers").uid("numbers")
    rows = numbers.map(shape).uid("shape").assign_timestamps_and_watermarks(strategy)
    rows = rows.uid("timestamps")
    (
        rows.key_by("k")
        .window(lg.EventTimeSessionWindows.with_gap(timedelta(seconds=2)))
        .aggregate(lg.agg.count(), lg.agg.sum("v"))
        .uid("sessions")
        .sink_to(CollectSink())
        .uid("sessions-out")
    )
    evens = rows.filter(lambda r: r["side"] == 0).uid("evens")
    odds = rows.filter(lambda r: r["side"] == 1).uid("odds")
    (
        evens.key_by("k")
        .interval_join(odds.key_by("k"))
        .between(timedelta(milliseconds=-50), timedelta(milliseconds=50))
        .process()
        .uid("interval")
        .sink_to(CollectSink())
        .uid("interval-out")
    )
    (
        evens.co_group(odds)
        .where("k")
        .equal_to("k")
        .window(lg.TumblingEventTimeWindows.of(timedelta(seconds=1)))
        .apply(CountBoth())
        .uid("cogroup")
        .sink_to(CollectSink())
        .uid("cogroup-out")
    )
    (
        lg.AsyncDataStream.ordered_wait(rows, double, timedelta(seconds=30), capacity=50)
        .uid("async")
        .sink_to(CollectSink())
        .uid("async-out")
    )


environment = compat_job.environment


def bounded_source() -> SequenceSource:
    return SequenceSource(0, N, batch_size=200)


def outputs(result: lg.JobExecutionResult) -> dict[str, list[Any]]:
    return compat_job.collected(result, OUTPUTS)


def straight_run(executor: Any = None) -> dict[str, list[Any]]:
    """The job's output from start to end, without a savepoint."""
    env = environment(executor or lg.LocalExecutor())
    build(env, bounded_source())
    return outputs(env.execute("compat joins"))

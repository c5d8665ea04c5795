"""The job of the compatibility suite (docs/savepoint_format.md, M-S1, M-S2): one job
whose savepoints hold a sequence source's splits, keyed typed and untyped state, event
-time timers, built-in window accumulators of open windows, and collecting sinks' output
so far. ``make_savepoints.py`` writes a savepoint of it mid-stream for each release;
``test_compat.py`` restores every checked-in one on today's code and checks the output.

The job must stay restorable from every checked-in savepoint: its uids, state names and
types never change (a new case is a new job beside it, with savepoints of its own)."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import timedelta
from typing import Any

import lockgate as lg
from lockgate.connectors import CollectSink, SequenceSource

#: the input: the integers 0 .. N-1; value v has key v % KEYS and event time v * STEP_MS
N = 20_000
KEYS = 7
STEP_MS = 10
#: the keyed process function's timers fire at the end of each key's TIMER_MS interval
TIMER_MS = 5_000
WINDOW_MS = 1_000


def shape(v: int) -> dict[str, int]:
    return {"v": v, "k": v % KEYS, "ts": v * STEP_MS}


class Intervals(lg.KeyedProcessFunction):
    """Per key: a typed map of record counts per TIMER_MS interval (by the interval's
    end), a typed total of the intervals reported, an untyped list of the last three
    interval ends reported, and an event-time timer at each interval's end that reports
    them: what it reports depends on the records and their event times only, not on when
    the watermark came."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.per_interval = ctx.get_map_state(
            lg.MapStateDescriptor("per_interval", key_type=int, type=int)
        )
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0, type=int))
        self.last = ctx.get_list_state(lg.ListStateDescriptor("last"))

    def process_element(self, r: dict[str, int], ctx: Any) -> Any:
        end = (r["ts"] // TIMER_MS + 1) * TIMER_MS
        self.per_interval[end] = self.per_interval.get(end, 0) + 1
        ctx.timer_service().register_event_time_timer(end)
        return ()

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        n = self.per_interval.get(timestamp, 0)
        self.per_interval.remove(timestamp)
        total = self.total.value() + n
        self.total.update(total)
        last = (list(self.last.get()) + [timestamp])[-3:]
        self.last.update(last)
        yield {"k": ctx.current_key, "t": timestamp, "n": n, "total": total, "last": last}


def build(env: lg.StreamEnvironment, source: lg.connectors.Source) -> None:
    """The job on ``env`` reading ``source`` (a SequenceSource of 0 .. N-1, or one
    wrapped to hold back)."""
    strategy = lg.WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts")
    numbers = env.from_source(source, name="numbers").uid("numbers")
    rows = (
        numbers.map(shape).uid("shape").assign_timestamps_and_watermarks(strategy).uid("timestamps")
    )
    rows.key_by("k").process(Intervals()).uid("counter").sink_to(CollectSink()).uid("timers-out")
    (
        rows.key_by("k")
        .window(lg.TumblingEventTimeWindows.of(timedelta(milliseconds=WINDOW_MS)))
        .aggregate(lg.agg.count(), lg.agg.sum("v"))
        .uid("per-window")
        .sink_to(CollectSink())
        .uid("windows-out")
    )


def environment(executor: Any = None) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.set_max_parallelism(16)
    return env


def bounded_source() -> SequenceSource:
    return SequenceSource(0, N, batch_size=500)


def outputs(result: lg.JobExecutionResult) -> dict[str, list[Any]]:
    """The job's two outputs, each sorted (subtasks merged)."""
    return collected(result, ("timers-out", "windows-out"))


def collected(result: lg.JobExecutionResult, uids: tuple[str, ...]) -> dict[str, list[Any]]:
    """What the CollectSinks ``uids`` collected, each sorted (subtasks merged), as plain
    JSON-able values."""
    out = {}
    for uid in uids:
        rows = [r for part in result.sink_results[uid] for r in part]
        out[uid] = sorted((_plain(r) for r in rows), key=repr)
    return out


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in row.items()}


def oracle() -> dict[str, list[Any]]:
    """What the whole input gives, computed without lockgate."""
    per: dict[int, Counter[int]] = defaultdict(Counter)
    for v in range(N):
        r = shape(v)
        per[r["k"]][(r["ts"] // TIMER_MS + 1) * TIMER_MS] += 1
    timers: list[dict[str, Any]] = []
    for k, counts in per.items():
        total, last = 0, []
        for t in sorted(counts):
            total += counts[t]
            last = (last + [t])[-3:]
            timers.append({"k": k, "t": t, "n": counts[t], "total": total, "last": last})
    windows: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])
    for v in range(N):
        r = shape(v)
        w = windows[(r["k"], r["ts"] // WINDOW_MS * WINDOW_MS)]
        w[0] += 1
        w[1] += v
    window_rows = [
        {"k": k, "window_start": s, "window_end": s + WINDOW_MS, "count": c, "sum_v": total}
        for (k, s), (c, total) in windows.items()
    ]
    return {
        "timers-out": sorted(timers, key=repr),
        "windows-out": sorted(window_rows, key=repr),
    }

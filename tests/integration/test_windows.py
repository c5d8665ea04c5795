"""Keyed windows end to end, on both executors: tumbling, sliding and session windows
against pandas, exactly-once with injected failures, rescaling through a savepoint,
allowed lateness and late data, idleness, and the result shapes of every window
function (M-W2, M-W4, M-W6, M-T4, M-R1).

Sizes (the same on both executors): the tumbling count runs on 2,000,000 events with
1,000 keys, once straight and once with two injected failures (the source then
rate-limited to 1,000,000 events/s so that checkpoints complete before each
failure); sliding windows 300,000 events, sessions 200,000 (about 190,000 after
the pauses), rescaling 200,000.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from conftest import FileProbe, is_spark, wait_until
from lockgate.api.functions import ProcessWindowFunction
from lockgate.runtime.operators.window.operator import LATE_RECORDS_DROPPED
from lockgate.testing import FailAtRecord, inject_faults

KEYS = 1000
DISORDER_MS = 500


# -- data --------------------------------------------------------------------------------
def event_columns(i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Event ``i``: key ``i * 7919 % 1000``, a value, and event time ``i // 10`` ms
    minus up to 499 ms of disorder (never late for 500 ms of out-of-orderness)."""
    k = (i * 7919) % KEYS
    v = (i * 31) % 97
    ts = i // 10 - (i * 104729) % DISORDER_MS + DISORDER_MS
    return k, v, ts


def events(batch: pa.RecordBatch) -> pa.RecordBatch:
    k, v, ts = event_columns(batch.column(0).to_numpy())
    return pa.RecordBatch.from_arrays(
        [pa.array(k), pa.array(v), pa.array(ts)], names=["k", "v", "ts"]
    )


def frame(n: int) -> pd.DataFrame:
    k, v, ts = event_columns(np.arange(n, dtype=np.int64))
    return pd.DataFrame({"k": k, "v": v, "ts": ts})


def bounded(ms: int = DISORDER_MS) -> lg.WatermarkStrategy:
    return lg.WatermarkStrategy.for_bounded_out_of_orderness(ms).with_timestamp_assigner("ts")


def event_stream(
    env: lg.StreamEnvironment,
    source: lg.connectors.Source,
    make: Any = events,
    name: str = "numbers",
) -> lg.DataStream:
    return (
        env.from_source(source, name=name)
        .uid(name)
        .map_batches(make, name=f"{name}-events")
        .uid(f"{name}-events")
        .assign_timestamps_and_watermarks(bounded())
        .uid(f"{name}-timestamps")
    )


def tumbling_count(stream: lg.DataStream) -> lg.DataStream:
    return (
        stream.key_by("k")
        .window(lg.TumblingEventTimeWindows.of(1000))
        .aggregate(lg.agg.count(), name="window-count")
        .uid("window-count")
    )


def expected_tumbling_counts(df: pd.DataFrame) -> pd.DataFrame:
    start = df.ts - df.ts % 1000
    out = df.assign(window_start=start).groupby(["k", "window_start"]).size()
    out = out.reset_index(name="count")
    out["window_end"] = out.window_start + 1000
    return by_window(out)


def by_window(df: pd.DataFrame, keys: tuple[str, ...] = ("k", "window_start")) -> pd.DataFrame:
    cols = sorted(df.columns)
    return df[cols].sort_values(list(keys)).reset_index(drop=True)


def read_sink(folder: Path) -> list[dict[str, Any]]:
    """The records an exactly-once FileSink published (``part-*`` files)."""
    return [
        json.loads(line)
        for p in sorted(folder.glob("part-*"))
        for line in p.read_text().splitlines()
        if line
    ]


def assert_frames_equal(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert len(got) == len(expected), f"{len(got)} results, expected {len(expected)}"
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)


# -- tumbling, the count of the issue -------------------------------------------------------
@pytest.mark.hang_guard(180)
def test_a_tumbling_window_count_of_2m_events_equals_pandas_M_W6(executor: Any) -> None:
    n = 2_000_000
    env = lg.StreamEnvironment(parallelism=2)
    out = tumbling_count(event_stream(env, lg.connectors.SequenceSource(0, n)))
    got = pd.DataFrame(out.execute_and_collect("tumbling count", executor=executor))
    assert_frames_equal(by_window(got), expected_tumbling_counts(frame(n)))


@pytest.mark.hang_guard(300)
def test_the_tumbling_count_is_exactly_once_with_failures_injected_M_R1_M_T4(
    executor: Any, tmp_path: Path
) -> None:
    """The window operator fails twice (subtask 0 in the first attempt, subtask 1 in the
    second), each time after checkpoints with window state completed: the FileSink's
    published results equal pandas, and the last attempt read only what followed its
    checkpoint."""
    n = 2_000_000
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    # paced by completed checkpoints (100,000 records each), not the clock: each fault
    # waits for a checkpoint of its attempt, so the next attempt restores progress, and
    # still finds most of the input ahead, however slowly a loaded machine completes them
    source = CheckpointPacedSource(
        lg.connectors.SequenceSource(0, n, batch_size=20_000), 100_000, end_after=2
    )
    folder = tmp_path / "out"
    tumbling_count(event_stream(env, source)).sink_to(
        lg.connectors.FileSink(str(folder), format="jsonl")
    ).uid("sink")
    inject_faults(
        env,
        FailAtRecord("window-count", record=400_000, subtask=0, after_checkpoints=1),
        FailAtRecord("window-count", record=200_000, attempt=1, subtask=1, after_checkpoints=1),
    )
    result = env.execute("tumbling count with failures", executor=executor)
    assert result.attempts == 3, "each injected failure restarted the job"
    assert result.records_in_last_attempt("window-count") < n, (
        "the last attempt restored a checkpoint"
    )
    got = pd.DataFrame(read_sink(folder))
    assert_frames_equal(by_window(got), expected_tumbling_counts(frame(n)))


# -- sliding and session windows against pandas -----------------------------------------------
@pytest.mark.hang_guard(180)
def test_sliding_windows_equal_pandas(executor: Any) -> None:
    n, size, slide = 300_000, 2000, 500
    env = lg.StreamEnvironment(parallelism=2)
    out = (
        event_stream(env, lg.connectors.SequenceSource(0, n))
        .key_by("k")
        .window(lg.SlidingEventTimeWindows.of(size, slide))
        .aggregate(
            lg.agg.count(),
            lg.agg.sum("v"),
            lg.agg.min("v"),
            lg.agg.max("v"),
            lg.agg.mean("v", name="avg"),
            name="sliding",
        )
        .uid("sliding")
    )
    got = by_window(pd.DataFrame(out.execute_and_collect("sliding", executor=executor)))
    df = frame(n)
    last = df.ts - df.ts % slide
    parts = [df.assign(window_start=last - j * slide) for j in range(size // slide)]
    exp = (
        pd.concat(parts)
        .groupby(["k", "window_start"])
        .v.agg(count="size", sum_v="sum", min_v="min", max_v="max", avg="mean")
        .reset_index()
    )
    exp["window_end"] = exp.window_start + size
    exp = by_window(exp)
    assert_frames_equal(got.drop(columns="avg"), exp.drop(columns="avg"))
    assert np.allclose(got.avg, exp.avg)


def session_events(batch: pa.RecordBatch) -> pa.RecordBatch:
    i = batch.column(0).to_numpy()
    k = i % 500
    base = i // 20
    ts = base + (base // 1000) * 500 - (i * 7) % 150
    keep = (ts // 100 + k) % 7 != 0  # each key pauses now and then: its sessions end
    return pa.RecordBatch.from_arrays(
        [pa.array(k[keep]), pa.array(i[keep] % 13), pa.array(ts[keep])], names=["k", "v", "ts"]
    )


@pytest.mark.hang_guard(180)
def test_session_windows_equal_pandas(executor: Any) -> None:
    n, gap = 200_000, 60
    env = lg.StreamEnvironment(parallelism=2)
    out = (
        event_stream(env, lg.connectors.SequenceSource(0, n), make=session_events)
        .key_by("k")
        .window(lg.EventTimeSessionWindows.with_gap(gap))
        .aggregate(
            lg.agg.count(), lg.agg.sum("v"), lg.agg.first("v"), lg.agg.last("v"), name="sessions"
        )
        .uid("sessions")
    )
    got = by_window(pd.DataFrame(out.execute_and_collect("sessions", executor=executor)))
    batch = session_events(pa.RecordBatch.from_arrays([pa.array(np.arange(n))], ["value"]))
    df = batch.to_pandas().sort_values(["k", "ts"], kind="stable")
    opens = (df.k != df.k.shift()) | (df.ts - df.ts.shift() > gap)
    df["session"] = opens.cumsum()
    exp = df.groupby("session").agg(
        k=("k", "first"),
        window_start=("ts", "min"),
        window_end=("ts", "max"),
        count=("v", "size"),
        sum_v=("v", "sum"),
    )
    exp["window_end"] += gap
    exp = by_window(exp.reset_index(drop=True))
    assert exp["count"].min() >= 1 and len(exp) > 4 * 500, "keys have many sessions"
    assert_frames_equal(got.drop(columns=["first_v", "last_v"]), exp)
    # first/last: the value at the session's earliest/latest timestamp (where that
    # timestamp is unique; ties go by arrival, which parallel sources do not fix)
    df["lo"] = df.groupby("session").ts.transform("min")
    df["hi"] = df.groupby("session").ts.transform("max")
    for field, bound in (("first_v", "lo"), ("last_v", "hi")):
        at = df[df.ts == df[bound]]
        unique = at.groupby("session").filter(lambda g: len(g) == 1)
        expected = dict(zip(zip(unique.k, unique.session), unique.v))
        starts = df.groupby("session").agg(k=("k", "first"), start=("ts", "min"))
        want = {(k, int(starts.start[sid])): v for (k, sid), v in expected.items()}
        have = dict(zip(zip(got.k, got.window_start), got[field]))
        assert len(want) > 0.9 * len(exp)
        assert {key: have[key] for key in want} == want


# -- rescaling through a savepoint -------------------------------------------------------------
def rescale_job(env: lg.StreamEnvironment, folder: Path, stage: int, n1: int, n: int) -> None:
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(folder.parent / f"chk-{stage}")
    first = event_stream(
        env, lg.connectors.SequenceSource(0, n1, bounded=stage == 2, batch_size=5000)
    )
    stream = first
    if stage == 2:
        stream = first.union(event_stream(env, lg.connectors.SequenceSource(n1, n), name="more"))
    (
        stream.key_by("k")
        .window(lg.TumblingEventTimeWindows.of(1000))
        .aggregate(lg.agg.count(), lg.agg.sum("v"), name="window-count")
        .uid("window-count")
        .sink_to(lg.connectors.FileSink(str(folder), format="jsonl"))
        .uid("sink")
    )


@pytest.mark.hang_guard(300)
def test_window_state_moves_by_key_group_when_restored_at_another_parallelism_M_T4(
    executor: Any, tmp_path: Path
) -> None:
    """Stage one (parallelism 2) stops with a savepoint holding open windows; stage two
    (3 locally, 1 on Spark's two slots) restores it and reads the rest: the results of
    both stages together equal pandas over all events, each window once."""
    n1, n = 100_000, 200_000
    env = lg.StreamEnvironment(parallelism=2)
    rescale_job(env, tmp_path / "out-1", 1, n1, n)
    client = env.execute_async("windows stage one", executor=executor)
    # the window operator's watermark reaches the last one the sources send once every
    # record of stage one went through it (channels keep order)
    final = (
        min(
            int(event_columns(np.arange(lo, hi)).__getitem__(2).max())
            for lo, hi in ((0, n1 // 2), (n1 // 2, n1))
        )
        - DISORDER_MS
        - 1
    )
    try:
        wait_until(
            lambda: (
                sorted(w.watermark or 0 for w in client.watermarks() if w.uid == "window-count")
                == [final, final]
            ),
            "stage one's records went through the windows",
            timeout_s=120,
        )
        location = client.stop_with_savepoint(str(tmp_path / "sp"), timeout=60)
    except BaseException:
        client.cancel()
        raise
    assert client.wait(60).status is lg.JobStatus.FINISHED
    env2 = lg.StreamEnvironment(parallelism=1 if is_spark(executor) else 3)
    rescale_job(env2, tmp_path / "out-2", 2, n1, n)
    env2.execute("windows stage two", executor=executor, restore_from=location)
    got = pd.DataFrame(read_sink(tmp_path / "out-1") + read_sink(tmp_path / "out-2"))
    df = frame(n)
    exp = (
        df.assign(window_start=df.ts - df.ts % 1000)
        .groupby(["k", "window_start"])
        .v.agg(count="size", sum_v="sum")
        .reset_index()
    )
    exp["window_end"] = exp.window_start + 1000
    assert len(read_sink(tmp_path / "out-1")) > 0, "stage one fired windows itself"
    assert_frames_equal(by_window(got), by_window(exp))


# -- allowed lateness and late data ------------------------------------------------------------
LATE_SCRIPT = [100, 900, 1500, 950, 2100, 300, 2500]


def punctuated() -> lg.WatermarkStrategy:
    """A watermark right after each record: its timestamp - 1 (when that advances)."""
    return lg.WatermarkStrategy.for_generator(
        lambda: lg.PunctuatedWatermarks(lambda ts: int(ts.max()) - 1)
    ).with_timestamp_assigner("ts")


def late_job(env: lg.StreamEnvironment, side_output: bool) -> tuple[lg.DataStream, Any]:
    records = [{"k": "a", "ts": t} for t in LATE_SCRIPT]
    source = lg.connectors.CollectionSource(records, batch_size=1)
    windows = (
        env.from_source(source, name="script", watermark_strategy=punctuated())
        .uid("script")
        .key_by("k")
        .window(lg.TumblingEventTimeWindows.of(1000))
        .allowed_lateness(1000)
    )
    if side_output:
        windows = windows.side_output_late_data(lg.OutputTag("late"))
    out = windows.aggregate(lg.agg.count(), name="late").uid("late")
    return out, out.get_side_output(lg.OutputTag("late")) if side_output else None


def test_allowed_lateness_fires_again_and_late_records_go_to_the_side_output_M_W6(
    executor: Any, tmp_path: Path
) -> None:
    """Watermark after each record (its time - 1), lateness 1 s: 950 arrives after
    [0, 1000) fired at 1499 and updates it (3); 300 arrives after the state of
    [0, 1000) was dropped at 2099 (999 + 1000 <= 2099) and goes to the side output."""
    env = lg.StreamEnvironment(parallelism=1)
    out, late = late_job(env, side_output=True)
    late.sink_to(lg.connectors.FileSink(str(tmp_path / "late"), format="jsonl")).uid("late-sink")
    out.sink_to(lg.connectors.FileSink(str(tmp_path / "out"), format="jsonl")).uid("sink")
    env.enable_checkpointing(1000)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    result = env.execute("lateness", executor=executor)
    got = [(r["window_start"], r["count"]) for r in read_sink(tmp_path / "out")]
    assert got == [(0, 2), (0, 3), (1000, 1), (2000, 2)]
    assert read_sink(tmp_path / "late") == [{"k": "a", "ts": 300}]
    assert result.operators["late"].side_out == {"late": 1}


def test_without_a_side_output_late_records_are_dropped_and_counted(executor: Any) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    out, _ = late_job(env, side_output=False)
    out.sink_to(lg.connectors.DiscardingSink()).uid("sink")
    result = env.execute("lateness, dropped", executor=executor)
    assert result.operators["late"].records_out == 4
    assert result.operators["late"].side_out == {LATE_RECORDS_DROPPED: 1}


# -- idleness (M-W2, M-W4) ---------------------------------------------------------------------
class Report(lg.MapFunction):
    def __init__(self, probe: FileProbe) -> None:
        self.probe = probe

    def map(self, value: dict[str, Any]) -> dict[str, Any]:
        self.probe.add((value["k"], value["window_start"], value["count"]))
        return value


def fast_events(batch: pa.RecordBatch) -> pa.RecordBatch:
    i = batch.column(0).to_numpy()
    return pa.RecordBatch.from_arrays([pa.array(i % 3), pa.array(i * 100)], names=["k", "ts"])


def two_sources(env: lg.StreamEnvironment, probe: FileProbe, idleness: bool) -> None:
    """An active source (event time 0..9,900, then no more data, still running) and a
    source that never has data; only the latter declares idleness (or not)."""
    fast = (
        env.from_source(lg.connectors.SequenceSource(0, 100, bounded=False), name="fast")
        .uid("fast")
        .map_batches(fast_events, name="fast-events")
        .uid("fast-events")
        .assign_timestamps_and_watermarks(
            lg.WatermarkStrategy.for_monotonous_timestamps()
            .with_timestamp_assigner("ts")
            .with_periodic_emit_interval(10)
        )
        .uid("fast-ts")
    )
    idle_strategy = (
        lg.WatermarkStrategy.for_bounded_out_of_orderness(0)
        .with_timestamp_assigner("ts")
        .with_periodic_emit_interval(10)
    )
    if idleness:
        idle_strategy = idle_strategy.with_idleness(100)
    idle = (
        env.from_source(lg.connectors.SequenceSource(0, 0, bounded=False), name="idle")
        .uid("idle")
        .map_batches(fast_events, name="idle-events")
        .uid("idle-events")
        .assign_timestamps_and_watermarks(idle_strategy)
        .uid("idle-ts")
    )
    (
        fast.union(idle)
        .key_by("k")
        .window(lg.TumblingEventTimeWindows.of(1000))
        .aggregate(lg.agg.count(), name="windows")
        .uid("windows")
        .map(Report(probe), name="report")
        .uid("report")
        .sink_to(lg.connectors.DiscardingSink())
        .uid("sink")
    )


@pytest.mark.hang_guard(180)
def test_with_idleness_windows_fire_while_the_other_source_is_idle_M_W2_M_W4(
    executor: Any, tmp_path: Path
) -> None:
    probe = FileProbe(tmp_path / "probe")
    env = lg.StreamEnvironment(parallelism=2)
    two_sources(env, probe, idleness=True)
    client = env.execute_async("idle source, idleness", executor=executor)
    try:
        # the active source's subtasks end at event time 4,900 and 9,900: the window
        # operator's watermark is 4899, windows up to [3000, 4000) fire
        expected = sorted(
            (k, w * 1000, sum(1 for i in range(10 * w, 10 * w + 10) if i % 3 == k))
            for w in range(4)
            for k in range(3)
        )
        wait_until(
            lambda: len(probe) >= len(expected), "the windows up to 4000 fired", timeout_s=60
        )
        wait_until(
            lambda: (
                [w.watermark for w in client.watermarks() if w.uid == "windows"] == [4899, 4899]
            ),
            "the window operator follows the active source",
            timeout_s=60,
        )
        assert sorted(probe.items) == expected
    finally:
        client.cancel()
        client.wait(60)


@pytest.mark.hang_guard(180)
def test_without_idleness_windows_wait_for_the_source_without_data_M_W2(
    executor: Any, tmp_path: Path
) -> None:
    probe = FileProbe(tmp_path / "probe")
    env = lg.StreamEnvironment(parallelism=2)
    two_sources(env, probe, idleness=False)
    client = env.execute_async("idle source, no idleness", executor=executor)
    try:
        wait_until(
            lambda: (
                sorted(w.watermark or 0 for w in client.watermarks() if w.uid == "fast-ts")
                == [4899, 9899]
            ),
            "the active source emitted all its data and watermarks",
            timeout_s=60,
        )

        def held() -> bool:
            entries = [w for w in client.watermarks() if w.uid == "windows"]
            return len(entries) == 2 and all(
                w.watermark is None and w.held_back_by is not None for w in entries
            )

        wait_until(held, "the window operator is held back by an input", timeout_s=60)
        assert probe.items == [], "no window fired while event time cannot advance"
    finally:
        client.cancel()
        client.wait(60)


# -- result shapes ----------------------------------------------------------------------------
class Spread(lg.AggregateFunction):
    """(min, max) of the values."""

    def create_accumulator(self) -> list[int]:
        return []

    def add(self, value: dict[str, Any], acc: list[int]) -> list[int]:
        acc.append(value["v"])
        return acc

    def get_result(self, acc: list[int]) -> list[int]:
        return [min(acc), max(acc)]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return a + b


class Listing(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: list[dict[str, Any]]) -> Any:
        yield {
            "user": key,
            "from": context.window.start,
            "to": context.window.end,
            "values": sorted(e["v"] for e in elements),
        }


SHAPE_RECORDS = [
    {"g": g, "h": h, "v": v, "ts": ts}
    for g, h, v, ts in [
        ("x", 1, 5, 10),
        ("x", 1, 7, 900),
        ("y", 1, 1, 20),
        ("x", 2, 3, 1200),
        ("x", 1, 2, 1500),
    ]
]


def shape_windows(env: lg.StreamEnvironment, key: Any) -> Any:
    return (
        env.from_collection(SHAPE_RECORDS, name="shapes", watermark_strategy=bounded(0))
        .uid("shapes")
        .key_by(key)
        .window(lg.TumblingEventTimeWindows.of(1000))
    )


def test_every_window_function_gives_records_that_carry_the_window(executor: Any) -> None:
    env = lg.StreamEnvironment(parallelism=2)
    built_in = (
        shape_windows(env, ["g", "h"])
        .aggregate(lg.agg.count(), lg.agg.max("v"), name="built-in")
        .uid("built-in")
    )
    assert sorted(
        built_in.execute_and_collect("built-in", executor=executor),
        key=lambda r: (r["window_start"], r["g"], r["h"]),
    ) == [
        {"g": "x", "h": 1, "window_start": 0, "window_end": 1000, "count": 2, "max_v": 7},
        {"g": "y", "h": 1, "window_start": 0, "window_end": 1000, "count": 1, "max_v": 1},
        {"g": "x", "h": 1, "window_start": 1000, "window_end": 2000, "count": 1, "max_v": 2},
        {"g": "x", "h": 2, "window_start": 1000, "window_end": 2000, "count": 1, "max_v": 3},
    ]

    env = lg.StreamEnvironment(parallelism=2)
    aggregated = shape_windows(env, lambda r: r["g"]).aggregate(Spread()).uid("spread")
    assert sorted(
        aggregated.execute_and_collect("aggregate", executor=executor),
        key=lambda r: (r["window_start"], r["key"]),
    ) == [
        {"key": "x", "window_start": 0, "window_end": 1000, "result": [5, 7]},
        {"key": "y", "window_start": 0, "window_end": 1000, "result": [1, 1]},
        {"key": "x", "window_start": 1000, "window_end": 2000, "result": [2, 3]},
    ]

    env = lg.StreamEnvironment(parallelism=2)
    reduced = (
        shape_windows(env, "g").reduce(lambda a, b: {**a, "v": a["v"] + b["v"]}).uid("reduced")
    )
    assert sorted(
        (r["g"], r["window_start"], r["window_end"], r["result"]["v"])
        for r in reduced.execute_and_collect("reduce", executor=executor)
    ) == [("x", 0, 1000, 12), ("x", 1000, 2000, 5), ("y", 0, 1000, 1)]

    env = lg.StreamEnvironment(parallelism=2)
    listed = shape_windows(env, "g").process(Listing()).uid("listed")
    assert sorted(
        listed.execute_and_collect("process", executor=executor),
        key=lambda r: (r["from"], r["user"]),
    ) == [
        {"user": "x", "from": 0, "to": 1000, "values": [5, 7]},
        {"user": "y", "from": 0, "to": 1000, "values": [1]},
        {"user": "x", "from": 1000, "to": 2000, "values": [2, 3]},
    ]


class EventTime(lg.ProcessFunction):
    def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
        yield {**value, "event_time": ctx.timestamp}


def test_window_results_carry_the_window_end_minus_one_as_event_time(executor: Any) -> None:
    env = lg.StreamEnvironment(parallelism=2)
    out = (
        shape_windows(env, "g")
        .aggregate(lg.agg.count(), name="counts")
        .uid("counts")
        .process(EventTime(), name="event time")
        .uid("event-time")
    )
    got = out.execute_and_collect("result timestamps", executor=executor)
    assert sorted((r["g"], r["window_end"], r["event_time"]) for r in got) == [
        ("x", 1000, 999),
        ("x", 2000, 1999),
        ("y", 1000, 999),
    ]


# -- processing time -----------------------------------------------------------------------------
def test_processing_time_windows_count_every_record_once(executor: Any) -> None:
    """Windows of 50 ms of processing time over a rate-limited source: every record is
    counted once, in windows whose bounds are 50 ms apart; the last ones fire at the
    end of the input."""
    env = lg.StreamEnvironment(parallelism=2)
    env.set_buffer_timeout(5)
    out = (
        env.from_source(
            lg.connectors.SequenceSource(0, 6000, rows_per_second=10_000, batch_size=100), name="n"
        )
        .uid("n")
        .key_by(lambda v: v % 4)
        .window(lg.TumblingProcessingTimeWindows.of(50))
        .aggregate(lg.agg.count(), lg.agg.sum("value"), name="pt")
        .uid("pt")
    )
    got = out.execute_and_collect("processing time", executor=executor)
    assert sum(r["count"] for r in got) == 6000
    assert sum(r["sum_value"] for r in got) == sum(range(6000))
    assert all(
        r["window_end"] - r["window_start"] == 50 and r["window_start"] % 50 == 0 for r in got
    )
    assert len({r["window_start"] for r in got}) > 3, "the records spread over many windows"
    per_window = pd.DataFrame(got).groupby(["key", "window_start"]).size()
    assert (per_window == 1).all(), "each (key, window) fired once"

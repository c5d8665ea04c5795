"""Event time end to end: watermark strategies on sources and mid-stream, watermarks
through valves and operators, event-time and processing-time timers (M-W1..M-W6)."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from conftest import FileProbe, wait_until
from lockgate.testing import FailAtRecord, inject_faults
from lockgate.time.watermark_strategy import WatermarkStrategy

KEYS = 5


def record(i: int) -> dict[str, int]:
    # event time runs ahead with a little disorder: (i // 10) * 10 with a shuffle in blocks
    return {"k": i % KEYS, "ts": (i // 10) * 10 + (7 * i) % 10}


class TimerPerRecord(lg.KeyedProcessFunction):
    """Registers an event-time timer at the record's time + 100 (deduplicated per key
    and time); on_timer emits it with the record count the key had then."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value: dict[str, int], ctx: Any) -> Any:
        assert ctx.timestamp == value["ts"], (ctx.timestamp, value)
        self.count.update(self.count.value() + 1)
        ctx.timer_service().register_event_time_timer(ctx.timestamp + 100)
        return None

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield {
            "k": ctx.current_key,
            "timer": timestamp,
            "watermark": ctx.timer_service().current_watermark(),
        }


def strategy() -> WatermarkStrategy:
    return (
        WatermarkStrategy.for_bounded_out_of_orderness(20)
        .with_timestamp_assigner("ts")
        .with_periodic_emit_interval(10)
    )


def expected_timers(n: int) -> dict[int, list[int]]:
    by_key: dict[int, set[int]] = defaultdict(set)
    for i in range(n):
        r = record(i)
        by_key[r["k"]].add(r["ts"] + 100)
    return {k: sorted(v) for k, v in by_key.items()}


def timers_job(env: lg.StreamEnvironment, n: int, *, mid_stream: bool = False) -> lg.DataStream:
    if mid_stream:
        stream = (
            env.from_sequence(0, n)
            .uid("numbers")
            .map(record, name="records")
            .assign_timestamps_and_watermarks(strategy())
            .uid("timestamps")
        )
    else:
        stream = env.from_collection(
            [record(i) for i in range(n)], name="records", watermark_strategy=strategy()
        ).uid("records")
    return stream.key_by("k").process(TimerPerRecord(), name="timers").uid("timers")


def check_timers(out: list[dict[str, Any]], n: int) -> None:
    fired: dict[int, list[int]] = defaultdict(list)
    for o in out:
        fired[o["k"]].append(o["timer"])
        assert o["watermark"] >= o["timer"], "a timer fires once the watermark reaches it"
    # each (key, time) fires exactly once (timers are deduplicated), in time order per key
    assert {k: v for k, v in fired.items()} == expected_timers(n)


@pytest.mark.parametrize("mid_stream", [False, True], ids=["source", "mid-stream"])
def test_event_time_timers_fire_once_in_time_order_with_their_key_M_W6(
    executor: Any, mid_stream: bool
) -> None:
    env = lg.StreamEnvironment(parallelism=2)
    out = timers_job(env, 2000, mid_stream=mid_stream).execute_and_collect(
        "timers", executor=executor
    )
    check_timers(out, 2000)


def test_timers_fire_before_the_watermark_that_made_them_due_moves_on_M_W6(executor: Any) -> None:
    """Downstream of the timers, every timer output arrives before a watermark past it:
    a second keyed function sees each output's time above its current watermark."""

    class Late(lg.KeyedProcessFunction):
        def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
            yield {"late": ctx.timer_service().current_watermark() >= value["timer"], **value}

    env = lg.StreamEnvironment(parallelism=2)
    out = (
        timers_job(env, 1000)
        .key_by("k")
        .process(Late(), name="late")
        .uid("late")
        .execute_and_collect("timers then watermark", executor=executor)
    )
    assert out and not any(o["late"] for o in out)


@pytest.mark.hang_guard(180)
def test_timers_are_checkpointed_and_fire_exactly_once_after_a_failure_M_T4_M_W6(
    executor: Any, tmp_path: Path
) -> None:
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(timedelta(milliseconds=50))
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    n = 20000
    stream = (
        env.from_source(lg.connectors.SequenceSource(0, n, rows_per_second=40000), name="numbers")
        .uid("numbers")
        .map(record, name="records")
        .uid("records")
        .assign_timestamps_and_watermarks(strategy())
        .uid("timestamps")
    )
    stream.key_by("k").process(TimerPerRecord(), name="timers").uid("timers").sink_to(
        lg.connectors.FileSink(str(tmp_path / "out"), format="jsonl")
    ).uid("sink")
    inject_faults(env, FailAtRecord("timers", record=n // 3, subtask=0))
    result = env.execute("timers with a failure", executor=executor)
    assert result.attempts == 2
    # part-<subtask>-<n>: in write order per subtask only when n sorts as a number
    # (part-0-10 sorts before part-0-9 as text)
    parts = sorted(
        (tmp_path / "out").glob("part-*"),
        key=lambda p: tuple(int(x) for x in p.name.split(".")[0].split("-")[1:]),
    )
    out = [json.loads(line) for p in parts for line in p.read_text().splitlines() if line]
    check_timers(out, n)


class ProcessingTimer(lg.KeyedProcessFunction):
    def __init__(self, probe: FileProbe) -> None:
        self.probe = probe

    def process_element(self, value: int, ctx: Any) -> Any:
        now = ctx.timer_service().current_processing_time()
        ctx.timer_service().register_processing_time_timer(now + 1000)
        self.probe.add(("registered", ctx.current_key, now + 1000))
        return None

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        self.probe.add(
            ("fired", ctx.current_key, timestamp, ctx.timer_service().current_processing_time())
        )
        return None


def test_processing_time_timers_follow_the_injectable_clock_M_W6(tmp_path: Path) -> None:
    clock = lg.ManualClock(start_ms=5000)
    probe = FileProbe(tmp_path / "probe")
    env = lg.StreamEnvironment(parallelism=1)
    env.set_buffer_timeout(0)  # the manual clock never reaches a buffer timeout: flush at once
    (
        env.from_source(lg.connectors.SequenceSource(0, 2, bounded=False), name="n")
        .uid("n")
        .key_by(lambda v: v % 2)
        .process(ProcessingTimer(probe), name="pt")
        .uid("pt")
        .sink_to(lg.connectors.DiscardingSink())
        .uid("sink")
    )
    client = env.execute_async("processing time", executor=lg.LocalExecutor(clock=clock))
    try:
        wait_until(lambda: len(probe.items) == 2, "both keys registered a timer", timeout_s=30)
        assert sorted(probe.items) == [("registered", 0, 6000), ("registered", 1, 6000)]
        clock.advance(999)
        clock.advance(1)
        wait_until(lambda: len(probe.items) == 4, "both keys' timers fired", timeout_s=30)
        fired = sorted(i for i in probe.items if i[0] == "fired")
        # each fired at its time, not before: the clock read 6000 when they ran
        assert fired == [("fired", 0, 6000, 6000), ("fired", 1, 6000, 6000)]
    finally:
        client.cancel()
        client.wait(30)


class Pass(lg.KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        return None


def _lagging_pair(env: lg.StreamEnvironment, idleness_ms: int | None = None) -> None:
    """Two unbounded sources into one keyed operator: event time 0..9,900 on one input,
    0..9 on the other (which holds the operator back, unless it goes idle)."""
    ahead = (
        WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner("ts")
        .with_periodic_emit_interval(10)
    )
    behind = ahead if idleness_ms is None else ahead.with_idleness(idleness_ms)
    fast = (
        env.from_source(lg.connectors.SequenceSource(0, 100, bounded=False), name="fast")
        .uid("fast")
        .map(lambda i: {"k": 0, "ts": i * 100}, name="fast-records")
        .uid("fast-records")
        .assign_timestamps_and_watermarks(ahead)
        .uid("fast-ts")
    )
    slow = (
        env.from_source(lg.connectors.SequenceSource(0, 10, bounded=False), name="slow")
        .uid("slow")
        .map(lambda i: {"k": 1, "ts": i}, name="slow-records")
        .uid("slow-records")
        .assign_timestamps_and_watermarks(behind)
        .uid("slow-ts")
    )
    (
        fast.union(slow)
        .key_by("k")
        .process(Pass(), name="joined")
        .uid("joined")
        .sink_to(lg.connectors.DiscardingSink())
        .uid("sink")
    )


@pytest.mark.hang_guard(120)
def test_the_watermark_diagnostic_shows_each_operators_watermark_and_what_holds_it_back(
    executor: Any,
) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    _lagging_pair(env)
    client = env.execute_async("diagnostic", executor=executor)
    try:

        def joined() -> Any:
            return next((w for w in client.watermarks() if w.operator == "joined"), None)

        # monotonous timestamps: the watermark is the highest timestamp seen minus 1
        wait_until(
            lambda: joined() is not None and joined().watermark == 8,
            "the joined operator's watermark is the slow input's (8)",
            timeout_s=60,
        )
        entry = joined()
        assert "channel" in entry.held_back_by
        fast = next(w for w in client.watermarks() if w.uid == "fast-ts")
        assert fast.watermark == 9899
    finally:
        client.cancel()
        client.wait(60)


def test_the_job_metrics_report_each_operators_final_watermark_M_W1(executor: Any) -> None:
    env = lg.StreamEnvironment(parallelism=2)
    timers_job(env, 100).sink_to(lg.connectors.DiscardingSink()).uid("sink")
    result = env.execute("metrics", executor=executor)
    from lockgate.core.elements import MAX_WATERMARK

    assert result.operators["timers"].watermark == MAX_WATERMARK


@pytest.mark.hang_guard(120)
def test_an_idle_input_stops_holding_the_watermark_back_M_W2_M_W4(executor: Any) -> None:
    """The slow source has no more data: with idleness (only it has idleness) it marks
    itself IDLE and the valve leaves its channel out, so the operator's watermark follows
    the other, active input; without idleness it stays held back (the diagnostic test)."""
    env = lg.StreamEnvironment(parallelism=1)
    _lagging_pair(env, idleness_ms=100)
    client = env.execute_async("idleness", executor=executor)
    try:
        wait_until(
            lambda: any(
                w.operator == "joined" and w.watermark == 9899 for w in client.watermarks()
            ),
            "the joined operator's watermark follows the active input",
            timeout_s=60,
        )
    finally:
        client.cancel()
        client.wait(60)


def test_a_strategy_without_an_assigner_uses_the_timestamps_records_carry_M_W1(
    executor: Any,
) -> None:
    """DESIGN §4's form: assign_timestamps_and_watermarks(for_bounded_out_of_orderness(d)
    .with_idleness(...)) after a source that assigned the timestamps."""
    from datetime import timedelta

    env = lg.StreamEnvironment(parallelism=2)
    stream = (
        env.from_collection(
            [record(i) for i in range(1000)], name="records", watermark_strategy=strategy()
        )
        .uid("records")
        .map(lambda r: r, name="same")
        .uid("same")
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(
                timedelta(milliseconds=20)
            ).with_idleness(timedelta(seconds=5))
        )
        .uid("again")
    )
    out = (
        stream.key_by("k")
        .process(TimerPerRecord(), name="timers")
        .uid("timers")
        .execute_and_collect("reused timestamps", executor=executor)
    )
    check_timers(out, 1000)


def test_a_strategy_without_an_assigner_on_records_without_time_says_how_to_fix_it() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    (
        env.from_collection([1, 2, 3])
        .uid("n")
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps())
        .uid("wm")
        .sink_to(lg.connectors.DiscardingSink())
        .uid("sink")
    )
    with pytest.raises(lg.JobFailedError, match="with_timestamp_assigner"):
        env.execute("no time", executor=lg.LocalExecutor())

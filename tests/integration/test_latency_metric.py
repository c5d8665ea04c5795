"""End-to-end latency per sink (issue 42, section 5) on both executors: with
``latency_tracking_interval_ms`` on, a job whose records are held up by a known delay
shows it in its sinks' latency quantiles, per sink subtask and merged per sink; with
it off (the default) no sink reports any."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import lockgate as lg
from conftest import is_spark, wait_until
from lockgate.connectors import SequenceSource
from lockgate.connectors.builtin.discarding_sink import DiscardingSink
from lockgate.core.latency.histogram import RELATIVE_ERROR

DELAY_MS = 40


class AdvanceClock(lg.MapFunction):
    """Each record takes ``DELAY_MS`` of the subtask's (manual) clock."""

    def open(self, ctx: Any) -> None:
        self.clock = ctx.clock

    def map(self, value: Any) -> Any:
        self.clock.advance(DELAY_MS)
        return value


def hold_batch(batch: Any) -> Any:
    """Hold each batch ``DELAY_MS`` of wall-clock time: the injected delay (the work a
    slow operator does; the event is never set)."""
    threading.Event().wait(DELAY_MS / 1000)
    return batch


def sink_latency(client: lg.JobClient, uid: str) -> dict[str, Any] | None:
    found = [s for s in client.metrics()["latency"] if s["uid"] == uid]
    return found[0] if found else None


def test_a_known_delay_on_a_manual_clock_is_the_sinks_latency_exactly() -> None:
    clock = lg.ManualClock(start_ms=1_000_000)
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor(clock=clock))
    env.config.latency_tracking_interval_ms = 1  # a marker behind every batch
    env.config.progress_interval_ms = 0
    (
        env.from_source(SequenceSource(0, 10**9, batch_size=1), name="numbers")
        .uid("numbers")
        .map(AdvanceClock(), name="slow")
        .uid("slow")
        .sink_to(DiscardingSink(), name="out")
        .uid("out")
    )
    client = env.execute_async("latency on a manual clock")
    try:
        wait_until(
            lambda: (sink_latency(client, "out") or {}).get("count", 0) >= 100,
            "the sink recorded 100 latency markers",
            60,
        )
        summary = sink_latency(client, "out")
        ops = [o for o in client.metrics()["operators"] if o["uid"] == "out"]
    finally:
        client.cancel()
        client.wait(60)
    assert summary is not None
    # every batch took exactly DELAY_MS from the source to the sink
    assert summary["sum_ms"] == DELAY_MS * summary["count"]
    for q in ("p50_ms", "p95_ms", "p99_ms", "max_ms"):
        assert summary[q] == DELAY_MS, (q, summary)
    assert summary["subtasks"] == 1
    assert len(ops) == 1 and ops[0]["latency"]["p99_ms"] == DELAY_MS


@pytest.mark.hang_guard(180)
def test_a_known_delay_shows_in_every_sink_subtasks_latency(executor) -> None:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.config.latency_tracking_interval_ms = 50
    env.config.progress_interval_ms = 0
    (
        env.from_source(
            SequenceSource(0, 10**9, batch_size=100, rows_per_second=2_000), name="numbers"
        )
        .uid("numbers")
        .map_batches(hold_batch, name="slow")
        .uid("slow")
        .rebalance()  # markers cross channels (between Spark slots: the network)
        .sink_to(DiscardingSink(), name="out")
        .uid("out")
    )
    client = env.execute_async("latency on " + ("spark" if is_spark(executor) else "local"))
    try:
        wait_until(lambda: client.status() == "RUNNING", "the job runs", 120)

        def both_subtasks_recorded() -> bool:
            summary = sink_latency(client, "out")
            return (
                summary is not None and summary["subtasks"] == 2 and summary["window_count"] >= 10
            )

        wait_until(both_subtasks_recorded, "both sink subtasks recorded 10 markers", 90)
        metrics = client.metrics()
    finally:
        client.cancel()
        client.wait(120)
    merged = [s for s in metrics["latency"] if s["uid"] == "out"][0]
    per_subtask = {o["subtask"]: o["latency"] for o in metrics["operators"] if o["uid"] == "out"}
    assert sorted(per_subtask) == [0, 1] and all(per_subtask.values()), per_subtask
    assert merged["count"] == sum(s["count"] for s in per_subtask.values())
    # no batch reaches a sink sooner than the delay it was held; a sane upper bound
    floor = DELAY_MS * (1 - RELATIVE_ERROR)
    for summary in [merged, *per_subtask.values()]:
        assert floor <= summary["p50_ms"] <= summary["p95_ms"] <= summary["p99_ms"], summary
        assert summary["p99_ms"] <= summary["max_ms"] < 30_000, summary
    # no other operator reports a latency
    assert {o["uid"] for o in metrics["operators"] if o["latency"]} == {"out"}


def test_without_latency_tracking_no_sink_reports_a_latency() -> None:
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.config.progress_interval_ms = 0
    (
        env.from_source(SequenceSource(0, 10**9, batch_size=100, rows_per_second=20_000))
        .uid("numbers")
        .sink_to(DiscardingSink(), name="out")
        .uid("out")
    )
    client = env.execute_async("no latency tracking")
    try:
        wait_until(
            lambda: any(
                o["uid"] == "out" and o["records_in"] >= 1_000
                for o in client.metrics()["operators"]
            ),
            "the sink took 1,000 records",
            60,
        )
        metrics = client.metrics()
    finally:
        client.cancel()
        client.wait(60)
    assert metrics["latency"] == []
    assert all(o["latency"] is None for o in metrics["operators"])

"""Live metrics of a running job (issue 21): ``JobClient.metrics()``, ``status()``,
``graph()``, ``exceptions()`` and ``progress()`` on both executors, read while the job
runs: records and bytes counted, a slow downstream task makes the upstream one
backpressured (> 500 ms per second), an idle source shows idle time, failures keep
their tracebacks, and the progress line says what a person needs."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import lockgate as lg
from conftest import wait_until
from lockgate.connectors import SequenceSource, Sink, SinkWriter
from lockgate.connectors.builtin.discarding_sink import DiscardingSink
from lockgate.core.batch import num_rows
from lockgate.job.progress import format_progress
from lockgate.testing import FailAtRecord, inject_faults


class ThrottledWriter(SinkWriter):
    """Writes at most ``rows_per_s`` rows a second: the slow sink under test."""

    def __init__(self, rows_per_s: float) -> None:
        self.rows_per_s = rows_per_s
        self.pause = threading.Event()  # never set: wait() is the throttle

    def write(self, batch) -> None:
        self.pause.wait(num_rows(batch) / self.rows_per_s)


class ThrottledSink(Sink):
    default_name = "throttled"

    def __init__(self, rows_per_s: float) -> None:
        self.rows_per_s = rows_per_s

    def create_writer(self, ctx):
        return ThrottledWriter(self.rows_per_s)


def small_channels(env: lg.StreamEnvironment) -> None:
    env.config.channel_capacity_bytes = 64 * 1024
    env.config.buffer_max_bytes = 16 * 1024
    env.config.buffer_max_rows = 500
    env.config.progress_interval_ms = 0


def vertex(metrics: dict, name: str) -> dict:
    found = [v for v in metrics["vertices"] if v["name"].startswith(name)]
    assert found, f"no vertex named {name!r} in {[v['name'] for v in metrics['vertices']]}"
    return found[0]


def operator(metrics: dict, uid: str) -> dict:
    found = [o for o in metrics["operators"] if o["uid"] == uid]
    assert found, f"no operator {uid!r} in {[o['uid'] for o in metrics['operators']]}"
    return found[0]


def test_a_slow_sink_shows_as_backpressure_upstream_and_records_and_bytes_are_counted(executor):
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    small_channels(env)
    (
        env.from_source(SequenceSource(0, 10**9, batch_size=500), name="numbers")
        .uid("numbers")
        .map(lambda v: v + 1, name="plus one")
        .uid("plus-one")
        .rebalance()
        .sink_to(ThrottledSink(20_000), name="slow")
    )
    client = env.execute_async("backpressured job")
    try:
        wait_until(lambda: client.status() == "RUNNING", "the job runs", 120)

        def backpressured() -> bool:
            v = vertex(client.metrics(), "numbers")
            return (v["backpressured_ms_per_s"] or 0) > 500

        wait_until(backpressured, "the source task is backpressured > 500 ms/s", 60)
        metrics = client.metrics()
        source = vertex(metrics, "numbers")
        sink = vertex(metrics, "slow")
        assert source["is_source"] and not source["is_sink"]
        assert sink["is_sink"] and not sink["is_source"]
        assert source["records_out"] > 0 and source["bytes_out"] > 0
        assert sink["records_in"] > 0 and sink["bytes_in"] > 0
        # the throttled sink is the busy one; it waits for nothing
        assert (sink["backpressured_ms_per_s"] or 0) < 100
        assert 0 <= source["busy_ms_per_s"] <= 1000
        sub = source["subtasks"][0]
        assert sub["host"] and sub["subtask"] == 0
        ops = {o["uid"]: o for o in metrics["operators"]}
        assert ops["numbers"]["records_out"] >= ops["plus-one"]["records_in"] > 0
        assert metrics["job"]["status"] == "RUNNING" and metrics["job"]["restarts"] == 0
        progress = client.progress()
        assert progress["most_backpressured"]["task"].startswith("numbers")
        assert "backpressure 'numbers" in format_progress(progress)
    finally:
        client.cancel()
        client.wait(120)
    assert client.status() == "CANCELED"


def test_a_source_with_little_to_read_is_mostly_idle_and_reports_rates():
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    small_channels(env)
    (
        env.from_source(SequenceSource(0, 10**9, rows_per_second=2_000), name="trickle")
        .uid("trickle")
        .sink_to(DiscardingSink(), name="out")
    )
    client = env.execute_async("idle job")
    try:
        wait_until(
            lambda: (vertex(client.metrics(), "trickle")["idle_ms_per_s"] or 0) > 500,
            "the trickling source is idle > 500 ms/s",
            60,
        )
        wait_until(
            lambda: 500 < operator(client.metrics(), "trickle")["records_out_per_s"] < 8_000,
            "the source's rate is about 2,000 records/s",
            30,
        )
    finally:
        client.cancel()
        client.wait(60)


def test_graph_and_status_describe_the_job_before_and_after():
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    small_channels(env)
    (
        env.from_source(SequenceSource(0, 1_000), name="numbers")
        .uid("numbers")
        .key_by(lambda v: v % 3)
        .process(_Count(), name="count")
        .uid("count")
        .sink_to(DiscardingSink(), name="out")
    )
    client = env.execute_async("graph job")
    result = client.wait(120)
    assert result.status is lg.JobStatus.FINISHED
    assert client.status() == "FINISHED"
    graph = client.graph()
    names = [v["name"] for v in graph["vertices"]]
    assert names[0] == "numbers" and names[1].startswith("count")
    assert all(v["parallelism"] == 2 for v in graph["vertices"])
    assert [(e["source"], e["target"]) for e in graph["edges"]] == [
        (graph["vertices"][0]["id"], graph["vertices"][1]["id"])
    ]
    assert "hash" in graph["edges"][0]["partitioning"].lower()
    # an ended job has no live readings
    assert client.metrics()["operators"] == []


class _Count(lg.KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(lg.ValueStateDescriptor("n"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield value


def test_m_r1_failures_keep_their_tracebacks_and_the_job_counts_restarts(tmp_path):
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    small_channels(env)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "cp")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    (
        env.from_source(SequenceSource(0, 3_000, rows_per_second=20_000), name="numbers")
        .uid("numbers")
        .map(lambda v: v, name="copy")
        .uid("copy")
        .sink_to(DiscardingSink(), name="out")
    )
    inject_faults(env, FailAtRecord("copy", record=500, attempt=0))
    client = env.execute_async("failing job")
    result = client.wait(120)
    assert result.status is lg.JobStatus.FINISHED
    failures = client.exceptions()
    assert len(failures) == 1
    failure = failures[0]
    assert failure["attempt"] == 0 and failure["operator"] == "copy"
    assert "InjectedFault" in failure["error"]
    assert "Traceback" in failure["traceback"] and "InjectedFault" in failure["traceback"]
    assert client.metrics()["job"]["restarts"] == 1


def test_the_progress_line_is_logged_while_the_job_runs(caplog):
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    small_channels(env)
    env.config.progress_interval_ms = 200
    (
        env.from_source(SequenceSource(0, 10**9, rows_per_second=5_000), name="numbers")
        .uid("numbers")
        .sink_to(DiscardingSink(), name="out")
    )
    with caplog.at_level(logging.INFO, logger="lockgate.progress"):
        client = env.execute_async("progress job")
        try:
            wait_until(
                lambda: any(
                    "job 'progress job' RUNNING" in r.getMessage()
                    and "records/s in" in r.getMessage()
                    for r in caplog.records
                ),
                "a progress line is logged",
                60,
            )
        finally:
            client.cancel()
            client.wait(60)
    line = next(r.getMessage() for r in caplog.records if "records/s in" in r.getMessage())
    assert "watermark" in line and "last checkpoint" in line and "backpressure" in line


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_a_bad_progress_interval_is_refused(bad):
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.config.progress_interval_ms = bad
    env.from_source(SequenceSource(0, 10), name="numbers").sink_to(DiscardingSink())
    with pytest.raises(lg.ConfigurationError, match="progress_interval_ms"):
        env.execute("bad interval")


@pytest.mark.parametrize(
    ("field", "bad"),
    [("rest_port", 70000), ("rest_port", -1), ("rest_bind", ""), ("rest_enabled", 1)],
)
def test_bad_rest_settings_are_refused(field, bad):
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    setattr(env.config, field, bad)
    env.from_source(SequenceSource(0, 10), name="numbers").sink_to(DiscardingSink())
    with pytest.raises(lg.ConfigurationError, match=field):
        env.execute("bad rest")


def test_metrics_time_is_wall_clock_and_uptime_grows():
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    small_channels(env)
    env.from_source(SequenceSource(0, 10**9, rows_per_second=1_000), name="n").sink_to(
        DiscardingSink()
    )
    client = env.execute_async("uptime job")
    try:
        first = client.metrics()
        assert abs(first["time"] - time.time()) < 5
        wait_until(
            lambda: client.metrics()["job"]["uptime_s"] > first["job"]["uptime_s"],
            "uptime grows",
            10,
        )
    finally:
        client.cancel()
        client.wait(60)


def test_with_metrics_off_bytes_and_waiting_time_are_not_counted():
    """``metrics_enabled=False`` (to measure what the metrics cost): records are still
    counted, bytes and idle / backpressured time are not."""
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    small_channels(env)
    env.config.metrics_enabled = False
    (
        env.from_source(SequenceSource(0, 10**9, rows_per_second=2_000), name="trickle")
        .uid("trickle")
        .rebalance()
        .sink_to(DiscardingSink(), name="out")
    )
    client = env.execute_async("no metrics job")
    try:
        wait_until(
            lambda: (
                vertex(client.metrics(), "trickle")["idle_ms_per_s"] is not None
                and operator(client.metrics(), "trickle")["records_out"] > 0
            ),
            "two readings a second apart",
            60,
        )
        source = vertex(client.metrics(), "trickle")
        assert source["idle_ms_per_s"] == 0 and source["backpressured_ms_per_s"] == 0
        assert source["bytes_out"] == 0 and vertex(client.metrics(), "out")["bytes_in"] == 0
    finally:
        client.cancel()
        client.wait(60)


def test_the_first_metrics_a_client_reads_already_have_rates():
    """The driver reads the subtasks every second in the background, so a client (a
    Prometheus scrape, ``lockgate status``) that reads once gets rates, not zeros."""
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    small_channels(env)
    env.from_source(SequenceSource(0, 10**9, rows_per_second=3_000), name="trickle").uid(
        "trickle"
    ).sink_to(DiscardingSink(), name="out")
    client = env.execute_async("first read job")
    try:
        wait_until(lambda: client.status() == "RUNNING", "the job runs", 60)
        running_since = time.monotonic()
        wait_until(lambda: time.monotonic() - running_since > 2.5, "2.5 s of running", 10)
        source = operator(client.metrics(), "trickle")  # the first read
        assert source["records_out_per_s"] > 500
        assert vertex(client.metrics(), "trickle")["idle_ms_per_s"] is not None
    finally:
        client.cancel()
        client.wait(60)

"""The job a new user writes from the README, run as they would run it (issue 37).

Page views in a Kafka topic with 3 partitions -> 10 s event-time windows per page with
the count of views and of distinct users (``lg.agg.count``, ``lg.agg.count_distinct``)
-> an exactly-once KafkaSink, on Spark. While it runs a Python worker is killed (the job
restores its last checkpoint, M-R1); then ``lockgate stop JOB --savepoint DIR`` from
another process (the real command line) stops it with a savepoint (M-S1); more views
arrive; the job is restarted from the savepoint with a bounded source to catch up
(M-R3), and must end by itself. A ``read_committed`` consumer must then read exactly
what pandas computes from every view produced (M-X1).

The first run reads at a fixed pace (``RateLimitedSource``), so the input is still
flowing when the fault fires and when the stop comes, however loaded the machine: the
fault waits for a completed checkpoint (``after_checkpoints``), never for wall time. The
catch-up run reads at full speed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import lockgate as lg
from conftest import wait_until
from kafka_fixtures import BOOTSTRAP, open_transactions, produce, read_committed
from lockgate.connectors import KafkaSink, KafkaSource, RateLimitedSource
from lockgate.executor import job_registry
from lockgate.testing import KillWorker, inject_faults

pytestmark = pytest.mark.spark

PAGES = 12
USERS = 400
#: event time of the first view (a multiple of the windows); views are 5 ms apart
T0 = 1_700_000_000_000
STEP_MS = 5
WINDOW = timedelta(seconds=10)
#: views before the stop (the first run reads part of them), and after it
BEFORE, AFTER = 40_000, 10_000
#: the first run's pace: 40,000 views last 40 s, far longer than a checkpoint, a killed
#: worker's restart and a stop take even on a loaded machine
RATE = 1_000
#: how long the catch-up run may take to end by itself
END_TIMEOUT_S = 120.0


def views(first: int, count: int) -> list[dict[str, Any]]:
    """Page views ``first .. first+count-1``: every partition's in event-time order."""
    return [
        {
            "page": f"/page/{(i * 7) % PAGES}",
            "user": f"user-{(i * 31 + i // 97) % USERS}",
            "ts": T0 + i * STEP_MS,
        }
        for i in range(first, first + count)
    ]


def partition_of(i: int, view: dict[str, Any]) -> int:
    return ((view["ts"] - T0) // STEP_MS) % 3


def page_stats_job(
    executor: Any, tmp_path: Path, source: lg.connectors.base.Source, out_topic: str
) -> lg.StreamEnvironment:
    """The README's way: a Kafka source with event time from a field, windows per key,
    built-in aggregates (columns page, window_start, window_end, count,
    count_distinct_user), an exactly-once Kafka sink, checkpoints in a folder."""
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(timedelta(milliseconds=500))
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    strategy = lg.WatermarkStrategy.for_bounded_out_of_orderness(
        timedelta(seconds=1)
    ).with_timestamp_assigner("ts")
    (
        env.from_source(source, name="views", watermark_strategy=strategy)
        .uid("views")
        .key_by("page")
        .window(lg.TumblingEventTimeWindows.of(WINDOW))
        .aggregate(lg.agg.count(), lg.agg.count_distinct("user"), name="page stats")
        .uid("page-stats")
        .sink_to(KafkaSink(BOOTSTRAP, out_topic, key="page"), name="stats out")
        .uid("stats-out")
    )
    return env


def oracle(produced: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Views and distinct users per page and 10 s window, by pandas."""
    frame = pd.DataFrame(produced)
    size = int(WINDOW.total_seconds() * 1000)
    frame["window_start"] = frame["ts"] // size * size
    stats = (
        frame.groupby(["page", "window_start"])
        .agg(views=("user", "size"), users=("user", "nunique"))
        .reset_index()
    )
    return sorted(
        (r.page, int(r.window_start), int(r.window_start) + size, int(r.views), int(r.users))
        for r in stats.itertuples()
    )


def lockgate_cli(home: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``lockgate ARGS`` in another process, as a user types it."""
    return subprocess.run(
        [sys.executable, "-m", "lockgate.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, job_registry.HOME_ENV: home},
    )


@pytest.mark.hang_guard(240)
def test_a_newcomers_kafka_window_job_survives_a_killed_worker_a_cli_stop_and_a_bounded_catch_up(
    spark_executor: Any, kafka_topic: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M-R1, M-S1, M-R3, M-X1: a killed worker, ``lockgate stop --savepoint``, more
    data, a bounded restore that ends by itself; the committed output equals pandas'."""
    home = str(tmp_path / "home")
    monkeypatch.setenv(job_registry.HOME_ENV, home)  # the job registers here, the CLI looks
    in_topic, out_topic = kafka_topic(3), kafka_topic(3)
    name = f"page-stats-{out_topic[-8:]}"
    produced = views(0, BEFORE)
    produce(in_topic, produced, partitioner=partition_of)

    # run 1: unbounded, paced; a worker of the window operator is killed once a
    # checkpoint has completed
    env = page_stats_job(
        spark_executor,
        tmp_path,
        RateLimitedSource(KafkaSource(BOOTSTRAP, in_topic), RATE),
        out_topic,
    )
    inject_faults(env, KillWorker("page stats", record=0, after_checkpoints=1))
    client = env.execute_async(name)
    try:
        wait_until(
            lambda: bool(client.restart_causes()) or client.done(),
            "the killed worker's attempt failed and the job restarted",
            timeout_s=90,
        )
        if client.done():
            pytest.fail(f"the job ended before the killed worker's restart: {client.wait(1)}")
        wait_until(
            lambda: name in lockgate_cli(home, "list").stdout,
            "'lockgate list' shows the job",
            timeout_s=30,
        )
        savepoint = tmp_path / "savepoints" / "sp-1"
        stop = lockgate_cli(home, "stop", name, "--savepoint", str(savepoint), "--timeout", "90")
        assert stop.returncode == 0, f"lockgate stop failed:\n{stop.stdout}\n{stop.stderr}"
        assert stop.stdout.strip().rstrip("/").endswith("sp-1"), stop.stdout
    except BaseException:
        client.cancel()
        raise
    result = client.wait(90)
    assert result.status is lg.JobStatus.FINISHED
    assert (savepoint / "_metadata").is_file()

    # more views arrive; run 2 catches up from the savepoint, bounded, and ends
    more = views(BEFORE, AFTER)
    produce(in_topic, more, partitioner=partition_of)
    produced += more
    env = page_stats_job(
        spark_executor, tmp_path, KafkaSource(BOOTSTRAP, in_topic, bounded=True), out_topic
    )
    client = env.execute_async(name, restore_from=str(savepoint))
    try:
        result = client.wait(END_TIMEOUT_S)
    except TimeoutError:
        client.cancel()
        client.wait(60)
        pytest.fail(
            f"the bounded catch-up run from the savepoint was still running after "
            f"{END_TIMEOUT_S:.0f} s"
        )
    assert result.status is lg.JobStatus.FINISHED

    got = sorted(
        (r["page"], r["window_start"], r["window_end"], r["count"], r["count_distinct_user"])
        for r in read_committed(out_topic)
    )
    expected = oracle(produced)
    assert len(got) == len(expected), f"{len(got)} windows committed, expected {len(expected)}"
    assert got == expected
    assert open_transactions(f"lockgate-{name}") == [], "no transaction is left open"

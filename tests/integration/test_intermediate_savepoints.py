"""A savepoint that stops nothing commits nothing (M-S1, M-X2; Flink >= 1.15's
intermediate savepoints): its completion is not a recovery point, so a job cancelled
or failing after it restarts from its newest checkpoint without repeating committed
output; a restore from the savepoint commits its transactions then.

The job: a sequence at a rate the test sets -> exactly-once files, no periodic
checkpoint before the test's end (interval of an hour). After records flowed, a
savepoint, then a cancel: nothing may be published (the savepoint's transaction was
only pre-committed, and the cancel aborts it). A run restored from the savepoint then
publishes every number exactly once."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

import lockgate as lg
from lockgate.connectors import FileSink, SequenceSource
from published_files import published
from rate_controlled import RateControlledSource, set_rate

N = 20_000


def numbers(folder: str) -> list[int]:
    """The numbers the sink published."""
    return [r["v"] for r in published(folder)]


def build(tmp_path: Any, control: str) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=1)
    env.enable_checkpointing(timedelta(hours=1))
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    (
        env.from_source(
            RateControlledSource(SequenceSource(0, N, batch_size=100), control), name="numbers"
        )
        .uid("numbers")
        .map(lambda v: {"v": int(v)}, name="rows")
        .uid("rows")
        .sink_to(FileSink(str(tmp_path / "out"), format="jsonl"), name="files")
        .uid("files")
    )
    return env


@pytest.mark.hang_guard(300)
def test_m_x2_a_savepoint_that_stops_nothing_commits_nothing(tmp_path, executor) -> None:
    control = str(tmp_path / "rate")
    set_rate(control, 2000)
    client = build(tmp_path, control).execute_async("intermediate", executor=executor)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not client.done():
            sink = [o for o in client.metrics()["operators"] if o["uid"] == "files"]
            if sink and sum(o["records_in"] for o in sink) >= 1000:
                break
            time.sleep(0.1)  # bounded poll of the metrics
        else:
            pytest.fail("the sink took no 1,000 records within 120 s")
        set_rate(control, 0)
        savepoint = client.trigger_savepoint(str(tmp_path / "sp"))
    finally:
        client.cancel()
    assert client.wait(120).status is lg.JobStatus.CANCELED
    assert numbers(str(tmp_path / "out")) == [], (
        "the savepoint committed output although the job went on and was cancelled: a "
        "restart from its newest checkpoint would repeat it"
    )
    set_rate(control, 1_000_000)
    build(tmp_path, control).execute(
        "intermediate restored", executor=executor, restore_from=savepoint
    )
    assert sorted(numbers(str(tmp_path / "out"))) == list(range(N)), "each number once"

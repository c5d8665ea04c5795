"""Cancelling a Spark job whose user function never returns ends it (issue 18 item 10):
the slot's thread cannot be stopped, but its Python worker can be killed; ``cancel()``
then ``wait()`` returns a CANCELED result in bounded time and no worker of the job is
left running (the local executor's counterpart: tests/integration/test_cancel_bounds.py)."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from conftest import process_alive, wait_until
from lockgate.connectors import DiscardingSink, SequenceSource
from lockgate.job.result import JobStatus

pytestmark = [pytest.mark.spark, pytest.mark.hang_guard(180)]

ENDLESS = 10**12


class BlockForever:
    """A map that marks a file on its first record, then never returns (a stand-in for a
    hung socket read); it runs in the slot's Python worker."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def map(self, value: int) -> int:
        with open(self.marker, "w") as f:
            f.write(str(os.getpid()))
        while True:
            time.sleep(3600)


def test_m_r1_cancel_of_a_spark_job_whose_map_never_returns_ends_it_and_its_worker(
    make_env: Any, spark_executor: Any, tmp_path: Any
) -> None:
    marker = str(tmp_path / "entered")
    env = make_env(parallelism=1)
    (
        env.from_source(SequenceSource(0, ENDLESS, batch_size=100), name="numbers")
        .map(BlockForever(marker), name="stuck map")
        .sink_to(DiscardingSink(), name="sink")
    )
    client = env.execute_async("stuck map on spark", executor=spark_executor)
    try:
        wait_until(
            lambda: os.path.exists(marker) or client.done(),
            "the map got its first record",
            timeout_s=60,
        )
        assert not client.done(), f"the job ended by itself: {client.wait(0)!r}"
        pids = dict(spark_executor.slot_pids)
        assert pids, "the slot registered its Python worker"
        started = time.monotonic()
        client.cancel()
        try:
            result = client.wait(60)
        except TimeoutError:
            pytest.fail("cancel() of a Spark job with a hung map did not end it within 60 s")
        elapsed = time.monotonic() - started
    finally:
        if not client.done():  # do not leave an endless job on the shared session
            spark_executor.spark.sparkContext.cancelAllJobs()
            client.wait(60)
    assert result.status is JobStatus.CANCELED
    assert elapsed < 30, f"the cancel took {elapsed:.1f} s"
    survivors = [p for p in pids.values() if process_alive(p)]
    assert not survivors, f"Python workers of the cancelled job still running: {survivors}"

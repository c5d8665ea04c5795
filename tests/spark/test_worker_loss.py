"""A slot whose Python worker dies fails the job (DESIGN §1 Failure): killing one slot's worker
with SIGKILL ends ``execute`` with ``JobFailedError`` within 10 s, leaves no Python worker of
the job running, and the shared session runs the next job."""

from __future__ import annotations

import glob
import os
import signal
import tempfile
import time

import pytest

import lockgate as lg
from conftest import BackgroundJob, process_alive, wait_until
from lockgate.connectors import DiscardingSink, SequenceSource

pytestmark = pytest.mark.spark

ENDLESS = 10**12


def _endless_keyed_job(make_env) -> lg.StreamEnvironment:
    env = make_env(parallelism=2)
    (
        env.from_source(SequenceSource(0, ENDLESS, rows_per_second=20_000), name="numbers")
        .key_by(lambda x: x % 10)
        .process(lambda v, ctx: [v], name="keyed")
        .sink_to(DiscardingSink(), name="sink")
    )
    return env


@pytest.mark.parametrize("victim", [0, 1])
def test_killing_one_slots_python_worker_fails_the_job_within_10s_leaving_no_worker(
    make_env, spark_executor, victim
) -> None:
    env = _endless_keyed_job(make_env)
    job = BackgroundJob(lambda: env.execute("victim", executor=spark_executor))
    try:
        wait_until(
            lambda: spark_executor.running.is_set() or job.done.is_set(),
            "every slot of the job registered",
            timeout_s=30,
        )
        assert not job.done.is_set(), f"the endless job ended by itself: {job.error!r}"
        pids = dict(spark_executor.slot_pids)
        assert sorted(pids) == [0, 1]
        assert len(set(pids.values())) == 2, f"one Python worker per slot: {pids}"
        assert os.getpid() not in pids.values()
        assert all(process_alive(p) for p in pids.values()), pids

        killed_at = time.monotonic()
        os.kill(pids[victim], signal.SIGKILL)
        assert job.wait(10), "execute did not end within 10 s of the worker's death"
    finally:
        if not job.done.is_set():  # do not leave an endless job on the shared session
            spark_executor.spark.sparkContext.cancelAllJobs()
            job.wait(30)
    assert job.ended_at is not None and job.ended_at - killed_at < 10
    error = job.error
    assert isinstance(error, lg.JobFailedError), f"expected JobFailedError, got {error!r}"
    assert error.reason is lg.FailureReason.TASK_LOST, error.reason
    survivors = [p for p in pids.values() if process_alive(p)]
    assert not survivors, f"Python workers of the failed job still running: {survivors}"
    left = [
        f
        for p in pids.values()
        for f in glob.glob(os.path.join(tempfile.gettempdir(), f"lockgate-slot-*-pid{p}.stacks"))
    ]
    assert not left, f"the killed slots' watchdog dump files were left behind: {left}"
    assert spark_executor.control is None and not spark_executor.running.is_set()

    again = make_env(parallelism=2)
    out = again.from_source(SequenceSource(0, 100)).execute_and_collect(executor=spark_executor)
    assert sorted(out) == list(range(100)), "the shared session runs the next job"

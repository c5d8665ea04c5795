"""Job-level figures span the whole run, not the last attempt (issue 37 item 12, M-R1):
the result's duration is the run's, its attempts are listed inside it, its record
counters are summed over the attempts (a source's output counts every record it emitted
in any attempt, replayed ones included: each attempt's ``numRecordsOut``, as Flink counts
it per attempt, added up), the checkpoint history keeps the checkpoints of earlier
attempts, and after a restore the busy / idle / backpressured times of a task are its
own, not a difference against the attempt before. "Most backpressured" names nothing
when no task is backpressured."""

from __future__ import annotations

import time

import pytest

import lockgate as lg
from conftest import wait_until
from lockgate.connectors import CollectSink, SequenceSource
from lockgate.job.observer import JobObserver
from lockgate.job.progress import format_progress, progress_of
from lockgate.testing import FailAtRecord, inject_faults

N = 20_000


def restarting_job(executor, tmp_path, *, n: int, rate: float) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.config.metrics_enabled = True
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    (
        env.from_source(SequenceSource(0, n, rows_per_second=rate, batch_size=100))
        .uid("numbers")
        .map(lambda x: x, name="identity")
        .uid("identity")
        .key_by(lambda x: x % 7)
        .map(lambda x: x, name="keyed")
        .uid("keyed")
        .sink_to(CollectSink(), name="collect")
        .uid("collect")
    )
    # attempt 0 fails once two of its checkpoints completed: attempt 1 restores one
    inject_faults(env, FailAtRecord("identity", record=500, attempt=0, after_checkpoints=2))
    return env


@pytest.mark.hang_guard(180)
def test_the_result_spans_every_attempt_of_the_run_M_R1(executor, tmp_path) -> None:
    env = restarting_job(executor, tmp_path, n=N, rate=10_000)
    started = time.monotonic()
    client = env.execute_async("whole run")
    result = client.wait(150)
    elapsed_ms = (time.monotonic() - started) * 1000
    assert result.status is lg.JobStatus.FINISHED
    assert result.attempts == 2
    # the attempts, listed inside the result
    first, last = result.attempt_history
    assert (first.attempt, first.status, last.attempt, last.status) == (
        0,
        lg.JobStatus.FAILED,
        1,
        lg.JobStatus.FINISHED,
    )
    assert first.error is not None and "record 500 reached" in first.error
    assert last.error is None
    # the run's duration: both attempts (and the restart between them), not the last one
    assert result.duration_ms >= first.duration_ms + last.duration_ms
    assert result.duration_ms <= elapsed_ms + 1
    # counters summed over the attempts: the source emitted its whole input in attempts
    # 0 and 1 together, replayed records included (attempt 1 restarted from a checkpoint)
    emitted = [a.operators["numbers"][1] for a in result.attempt_history]
    assert emitted[0] > 0 and emitted[1] > 0, emitted
    assert result.records_out("numbers") == sum(emitted) >= N
    assert emitted[1] < N, "attempt 1 resumed from a checkpoint, not from the start"
    assert result.records_in("collect") == sum(
        a.operators["collect"][0] for a in result.attempt_history
    )
    # exactly-once output nonetheless
    records = [r for part in result.sink_results["collect"] for r in part]
    assert sorted(records) == list(range(N))
    # the checkpoint history keeps attempt 0's checkpoints: the one attempt 1 restored
    completed = [c.checkpoint_id for c in client.checkpoints() if c.status == "completed"]
    assert completed == sorted(completed) and len(set(completed)) == len(completed)
    assert first.checkpoints_completed >= 2 and first.last_checkpoint is not None
    assert first.last_checkpoint in completed
    assert len(completed) >= first.checkpoints_completed + last.checkpoints_completed
    assert client.metrics()["job"]["attempts"] == [a.to_json() for a in result.attempt_history]


@pytest.mark.hang_guard(180)
def test_an_idle_task_is_not_busy_after_a_restore_M_R1(executor, tmp_path) -> None:
    # an endless trickle: every task idles almost all the time, before and after the
    # restore
    env = restarting_job(executor, tmp_path, n=10**12, rate=200)
    client = env.execute_async("idle after restore")
    try:
        wait_until(
            lambda: client.restart_causes() and client.running,
            "attempt 1 runs",
            timeout_s=120,
        )
        # (time, busy ms/s) of the restored sink subtasks: the first second after the
        # restore may hold its own work (reading state, opening); an idle task must not
        # stay busy, which is what counters mixed across runs made it (1,000 ms/s)
        samples: list[tuple[float, float]] = []

        def settled_idle() -> bool:
            metrics = client.metrics()
            now = time.monotonic()
            samples.extend(
                (now, s["busy_ms_per_s"])
                for v in metrics["vertices"]
                if v["is_sink"]
                for s in v["subtasks"]
                if s["busy_ms_per_s"] is not None
            )
            recent = [b for t, b in samples if t >= now - 2.0]
            return (
                bool(samples)
                and now - samples[0][0] >= 2.0
                and len(recent) >= 4
                and max(recent) < 500
            )

        wait_until(
            settled_idle,
            lambda: (
                f"the restored idle sink kept reporting busy time: {samples[-12:]} (time, ms/s)"
            ),
            timeout_s=30,
            every_s=0.2,
        )
        progress = client.progress()
        if progress["most_backpressured"] is not None:
            assert progress["most_backpressured"]["backpressured_ms_per_s"] > 0
        # job-level counters continue across the restore
        before = client.metrics()["job"]["attempts"][0]["operators"]["numbers"][1]
        assert before > 0 and progress["records_in"] >= before
    finally:
        client.cancel()
        client.wait(60)


def sample(run: str, time_ms: float, idle_ms: float, records: int) -> dict:
    return {
        "vertex": 1,
        "subtask": 0,
        "task": "window",
        "run": run,
        "time_ms": time_ms,
        "idle_ms": idle_ms,
        "backpressured_ms": 0.0,
        "bytes_in": 0,
        "bytes_out": 0,
        "operators": [{"uid": "w", "name": "window", "records_in": records, "records_out": 0}],
    }


def test_counters_that_went_back_start_a_new_run_not_a_busy_second_M_R1() -> None:
    """A sample whose counters are below the one before (a new attempt reusing a run id,
    e.g. the same object id) starts the subtask's history again: no busy 1,000 ms/s
    out of an idle task."""
    readings = [
        [sample("a", 100_000, 99_000, 5_000)],
        [sample("a", 101_100, 100_090, 5_000)],
        [sample("a", 500, 450, 0)],  # restored: same run id, counters from zero
        [sample("a", 1_700, 1_640, 0)],
    ]
    observer = JobObserver(None, lambda: readings.pop(0))
    observer.metrics()
    assert observer.metrics()["vertices"] == []  # no plan: subtasks only through operators
    third = observer._samples()
    assert third[0][1] is None, "counters went back: no base to compute rates against"
    fourth = observer._samples()
    base = fourth[0][1]
    assert base is not None and base["time_ms"] == 500


def test_most_backpressured_names_nothing_when_nothing_is() -> None:
    metrics = {
        "job": {"name": "j", "status": "RUNNING"},
        "vertices": [
            {
                "id": 1,
                "name": "source",
                "is_source": True,
                "head": "s",
                "backpressured_ms_per_s": 0.0,
            },
            {
                "id": 2,
                "name": "window",
                "is_sink": True,
                "tail": "w",
                "backpressured_ms_per_s": 0.0,
            },
        ],
        "operators": [],
    }
    progress = progress_of(metrics, [])
    assert progress["most_backpressured"] is None
    assert "backpressure none" in format_progress(progress)
    metrics["vertices"][1]["backpressured_ms_per_s"] = 250.0
    assert progress_of(metrics, [])["most_backpressured"] == {
        "task": "window",
        "backpressured_ms_per_s": 250.0,
    }

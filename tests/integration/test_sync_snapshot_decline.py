"""M-C6 on a running job, on both executors: a synchronous snapshot part that fails (an
injected ``FailSnapshot(phase="sync")``) fails that checkpoint, not the task; the
coordinator counts it towards ``tolerable_failures``, and the data stays exact."""

from __future__ import annotations

from datetime import timedelta

import lockgate as lg
from lockgate.checkpoint.types import CheckpointFailureReason
from lockgate.connectors import CollectSink, SequenceSource
from lockgate.testing import FailSnapshot, inject_faults

SYNC_FAILED = CheckpointFailureReason.SYNC_FAILED


def plus_one(x):
    return x + 1


def job(executor, tolerable: int) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(timedelta(milliseconds=50))
    env.checkpoint_config.tolerable_failures = tolerable
    env.set_restart_strategy(lg.RestartStrategy.none())
    (
        env.from_source(SequenceSource(0, 6_000, rows_per_second=6_000))
        .uid("numbers")
        .rebalance()
        .map(plus_one, name="plus one")
        .uid("plus-one")
        .sink_to(CollectSink(), name="collect")
        .uid("collect")
    )
    inject_faults(env, FailSnapshot("plus one", checkpoint=2, phase="sync", subtask=1))
    return env


def test_m_c6_a_tolerated_sync_snapshot_failure_fails_one_checkpoint_and_the_data_stays_exact(
    executor,
) -> None:
    client = job(executor, tolerable=1).execute_async("sync snapshot failure tolerated")
    result = client.wait(120)
    assert result.status is lg.JobStatus.FINISHED and result.attempts == 1, (
        "the task declined instead of failing"
    )
    # (checkpoints triggered while the job ends may fail as "not running": they never count)
    failed = [
        c
        for c in client.checkpoints()
        if c.status == "failed"
        and c.failure_reason != CheckpointFailureReason.TASK_NOT_RUNNING.value
    ]
    assert [c.failure_reason for c in failed] == [SYNC_FAILED.value], failed
    assert any(
        c.status == "completed" and c.checkpoint_id > failed[0].checkpoint_id
        for c in client.checkpoints()
    ), "checkpoints go on after the declined one"
    records = sorted(x for part in result.sink_results["collect"] for x in part)
    assert records == list(range(1, 6_001)), "every record exactly once"


def test_m_c6_without_tolerance_the_declined_checkpoint_fails_the_job(executor) -> None:
    try:
        job(executor, tolerable=0).execute("sync snapshot failure not tolerated")
    except lg.JobFailedError as error:
        assert error.reason is lg.FailureReason.CHECKPOINT
        assert "synchronous snapshot part failed" in str(error)
        assert "tolerable_failures" in str(error)
    else:
        raise AssertionError("the job should fail: tolerable_failures is 0")

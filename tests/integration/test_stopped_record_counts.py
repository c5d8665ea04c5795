"""A job stopped early reports its record counts up to the stop (issue 18 item 14), on
both executors: cancelled (``JobClient.cancel``) and stopped with a savepoint
(``stop_with_savepoint``, M-S1)."""

from __future__ import annotations

import pytest

import lockgate as lg
from conftest import wait_until
from lockgate.connectors import DiscardingSink, SequenceSource

TOTAL = 10**12


def endless_job(executor, tmp_path) -> lg.JobClient:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    (
        env.from_source(
            SequenceSource(0, TOTAL, rows_per_second=20_000, batch_size=500), name="numbers"
        )
        .uid("numbers")
        .map(lambda x: x + 1, name="plus one")
        .uid("plus-one")
        .sink_to(DiscardingSink(), name="discard")
        .uid("discard")
    )
    return env.execute_async("stopped early")


def a_checkpoint_completed(client: lg.JobClient) -> bool:
    return client.done() or any(s.status == "completed" for s in client.checkpoints())


def assert_counts_up_to_the_stop(result: lg.JobExecutionResult) -> None:
    counts = result.record_counts
    assert set(counts) == {"numbers", "plus one", "discard"}, counts
    emitted = counts["numbers"]["records_out"]
    assert 0 < emitted < TOTAL, counts
    # a record the source emitted before the stop may not have reached the map yet
    assert 0 < counts["plus one"]["records_in"] <= emitted, counts
    assert counts["discard"]["records_in"] <= counts["plus one"]["records_out"], counts
    assert result.records_in("plus one") == counts["plus one"]["records_in"]


@pytest.mark.hang_guard(120)
def test_m_s1_a_cancelled_job_reports_its_record_counts_up_to_the_cancel(
    executor, tmp_path
) -> None:
    client = endless_job(executor, tmp_path)
    try:
        wait_until(lambda: a_checkpoint_completed(client), "a checkpoint completed", timeout_s=60)
    finally:
        client.cancel()
    result = client.wait(60)
    assert result.status is lg.JobStatus.CANCELED
    assert_counts_up_to_the_stop(result)


@pytest.mark.hang_guard(120)
def test_m_s1_a_job_stopped_with_a_savepoint_reports_its_record_counts_up_to_the_stop(
    executor, tmp_path
) -> None:
    client = endless_job(executor, tmp_path)
    try:
        wait_until(lambda: a_checkpoint_completed(client), "a checkpoint completed", timeout_s=60)
        location = client.stop_with_savepoint(str(tmp_path / "savepoint"), timeout=60)
    finally:
        client.cancel()
    result = client.wait(60)
    assert result.status is lg.JobStatus.FINISHED and result.savepoint_path == location
    assert_counts_up_to_the_stop(result)

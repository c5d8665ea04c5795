"""Running a job again on its checkpoint storage, and the job's temporary storage
(issue 18 items 3 and 11, M-R3, M-S3).

* A job started without ``restore_from`` on a storage holding completed checkpoints of
  a job of the same name resumes from the newest (issue 22 part 4, M-C8; it used to
  start over with a warning); ``fresh=True`` starts over.
* Without ``checkpoint_config.storage`` checkpoints go to a temporary folder nobody can
  restore from once the job is over: the job deletes it when it ends, unless its
  checkpoints are retained (``RETAIN_ON_CANCELLATION``).
"""

from __future__ import annotations

import glob
import logging
import os
import tempfile
import warnings

import pytest
from test_checkpointing import cancel_after_checkpoints

import lockgate as lg
from lockgate.connectors import CollectSink, SequenceSource


def numbers_job(storage: str | None, n: int, rate: int | None = None) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = storage
    source = (
        SequenceSource(0, n, rows_per_second=rate, batch_size=100) if rate else SequenceSource(0, n)
    )
    env.from_source(source).uid("numbers").map(lambda x: x + 1).uid("plus one").sink_to(
        CollectSink()
    ).uid("collect")
    return env


def retained_checkpoints(storage: str, name: str) -> None:
    env = numbers_job(storage, 10**9, rate=20_000)
    env.checkpoint_config.externalized = lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
    cancel_after_checkpoints(env.execute_async(name), 1, "a checkpoint completed")
    assert glob.glob(os.path.join(storage, "chk-*", "_metadata")), "no checkpoint retained"


@pytest.mark.hang_guard(60)
def test_item3_a_rerun_on_a_storage_with_checkpoints_of_its_job_resumes_from_them(
    tmp_path,
) -> None:
    """Item 3 warned that such a run starts over; since issue 22 part 4 it resumes, as a
    restarted driver does (M-C8; the end-to-end cases are in test_driver_restart.py)."""
    storage = str(tmp_path / "checkpoints")
    retained_checkpoints(storage, "sums")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = numbers_job(storage, 100).get_execution_plan("sums")
    assert plan.restore is not None
    newest = max(int(d[4:]) for d in os.listdir(storage) if d.startswith("chk-"))
    assert plan.restore.checkpoint_id == newest


@pytest.mark.hang_guard(60)
def test_item3_no_resume_for_another_job_and_none_when_fresh(tmp_path) -> None:
    storage = str(tmp_path / "checkpoints")
    retained_checkpoints(storage, "sums")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert numbers_job(storage, 100).get_execution_plan("another job").restore is None
        assert numbers_job(storage, 100).get_execution_plan("sums", fresh=True).restore is None


@pytest.mark.hang_guard(60)
def test_item11_the_temporary_checkpoint_storage_is_removed_when_the_job_ends(
    tmp_path, monkeypatch
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    result = numbers_job(None, 2_000).execute("temporary")
    assert result.status is lg.JobStatus.FINISHED
    assert glob.glob(str(temp / "lockgate-checkpoints-*")) == []
    # a failed job's temporary storage goes too
    env = numbers_job(None, 10)
    env.set_restart_strategy(lg.RestartStrategy.none())
    env.from_collection([1]).map(_fail).uid("fails").sink_to(CollectSink()).uid("c2")
    with pytest.raises(lg.JobFailedError):
        env.execute("failing")
    assert glob.glob(str(temp / "lockgate-checkpoints-*")) == []


@pytest.mark.hang_guard(60)
def test_item11_retained_checkpoints_keep_the_temporary_storage(
    tmp_path, monkeypatch, caplog
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    env = numbers_job(None, 100)
    env.checkpoint_config.externalized = lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
    with caplog.at_level(logging.WARNING, logger="lockgate.api.environment"):
        env.execute("kept")
    kept = glob.glob(str(temp / "lockgate-checkpoints-*"))
    assert len(kept) == 1
    assert any(kept[0] in r.getMessage() for r in caplog.records)


def _fail(x):
    raise ValueError("boom")

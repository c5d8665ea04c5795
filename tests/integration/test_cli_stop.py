"""``lockgate stop JOB`` on a running job, on both executors (issue 37 items 13 and 14, M-S1,
M-S3, M-C8).

As Flink's ``stop``, a stop always takes a savepoint: into ``--savepoint PATH``, else
into a new folder of the job's default savepoint folder (``checkpoint_config.
savepoint_dir``, else ``LOCKGATE_SAVEPOINT_DIR`` where the job runs); a job with neither
refuses, pointing at ``lockgate cancel``, and keeps running. A job stopped with a
savepoint ends FINISHED: its retained checkpoints stay (``DELETE_ON_CANCELLATION`` is
about cancelling), and ``_stopped_with_savepoint`` in its storage names the savepoint, so
that a run resuming there starts from it rather than from an older checkpoint.

The jobs run in this process (``execute_async``, registered in the job registry of a
private ``LOCKGATE_HOME``) and are stopped through the command line, as from another
shell.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from test_recovery import SPLIT, by_value, expected_records, published, sum_job

import lockgate as lg
from conftest import wait_for_checkpoints
from lockgate import cli
from lockgate.api.resume import STOPPED_MARKER
from lockgate.checkpoint.config import SAVEPOINT_DIR_ENV
from lockgate.executor import job_registry

N = 2 * SPLIT
#: slow enough that the job is still reading when it is stopped, on a loaded machine too
SLOW = 5_000


@pytest.fixture
def home(tmp_path: Any, monkeypatch: Any) -> str:
    folder = str(tmp_path / "home")
    monkeypatch.setenv(job_registry.HOME_ENV, folder)
    monkeypatch.delenv(SAVEPOINT_DIR_ENV, raising=False)
    return folder


def run_cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def stoppable(executor: Any, tmp_path: Any, rate: float = SLOW) -> lg.StreamEnvironment:
    """The running-sums job into an exactly-once FileSink, two checkpoints retained and
    the default retention (``DELETE_ON_CANCELLATION``)."""
    env = sum_job(executor, tmp_path, n=N, rate=rate)
    env.checkpoint_config.retained = 2
    assert env.checkpoint_config.externalized is lg.ExternalizedRetention.DELETE_ON_CANCELLATION
    return env


def completed_checkpoints(storage: str) -> list[str]:
    return sorted(
        d
        for d in os.listdir(storage)
        if d.startswith("chk-") and os.path.exists(os.path.join(storage, d, "_metadata"))
    )


@pytest.mark.hang_guard(240)
def test_m_s1_m_s3_lockgate_stop_takes_a_savepoint_into_the_default_folder_and_keeps_the_checkpoints(
    executor: Any, tmp_path: Any, home: str, capsys: Any
) -> None:
    name = "stop into savepoint_dir"
    env = stoppable(executor, tmp_path)
    env.checkpoint_config.savepoint_dir = str(tmp_path / "savepoints")
    client = env.execute_async(name)
    try:
        wait_for_checkpoints(client, 3)
        assert not client.done(), "the job ended before it was stopped"
        rc, out, err = run_cli(capsys, "stop", name, "--timeout", "120")
    finally:
        if not client.done():
            client.cancel()
    assert rc == 0, err
    location = out.strip()
    assert os.path.dirname(location) == str(tmp_path / "savepoints"), location
    assert os.path.basename(location).startswith("savepoint-stop-into-savepoint_dir-")
    assert os.path.exists(os.path.join(location, "_metadata"))
    result = client.wait(60)
    assert result.status is lg.JobStatus.FINISHED, "a job stopped with a savepoint finished"
    assert result.savepoint_path == location
    assert len(published(str(tmp_path / "out"))) < N, "stopped before the end of its input"

    # item 14: a stop with a savepoint is a normal end: the retained checkpoints stay
    storage = str(tmp_path / "checkpoints")
    assert len(completed_checkpoints(storage)) == 2, (
        f"the retained checkpoints were deleted by the stop: {os.listdir(storage)}"
    )
    with open(os.path.join(storage, STOPPED_MARKER), encoding="utf-8") as f:
        note = json.load(f)
    assert note["job_name"] == name and note["savepoint"] == location
    newest = max(int(d[4:]) for d in completed_checkpoints(storage))
    assert note["savepoint_id"] > newest, "the savepoint is newer than every checkpoint"

    # the savepoint restores to exactly the failure-free output
    restored = stoppable(executor, tmp_path, rate=40_000).execute(name, restore_from=location)
    assert restored.status is lg.JobStatus.FINISHED
    assert by_value(published(str(tmp_path / "out"))) == expected_records(N)


@pytest.mark.hang_guard(240)
def test_lockgate_stop_without_a_savepoint_folder_refuses_and_the_job_goes_on(
    executor: Any, tmp_path: Any, home: str, capsys: Any, monkeypatch: Any
) -> None:
    name = "stop without savepoint_dir"
    client = stoppable(executor, tmp_path).execute_async(name)
    try:
        wait_for_checkpoints(client, 1)
        rc, out, err = run_cli(capsys, "stop", name, "--timeout", "120")
        assert (rc, out) == (1, ""), "a stop without a savepoint folder must not stop the job"
        for hint in ("no default savepoint folder", "savepoint_dir", SAVEPOINT_DIR_ENV):
            assert hint in err, err
        assert "lockgate cancel JOB" in err, "the refusal points at cancel"
        with pytest.raises(lg.ConfigurationError, match="client.cancel()"):
            client.stop_with_savepoint()  # the Python API alike
        done = len([c for c in client.checkpoints() if c.status == "completed"])
        wait_for_checkpoints(client, done + 1)  # periodic checkpoints go on
        assert not client.done(), "the refused stop ended the job"

        # LOCKGATE_SAVEPOINT_DIR of the job's process (this one) is the default folder;
        # --drain still ends the input first
        monkeypatch.setenv(SAVEPOINT_DIR_ENV, str(tmp_path / "from-env"))
        rc, out, err = run_cli(capsys, "stop", name, "--drain", "--timeout", "120")
    finally:
        if not client.done():
            client.cancel()
    assert rc == 0, err
    location = out.strip()
    assert os.path.dirname(location) == str(tmp_path / "from-env"), location
    result = client.wait(60)
    assert result.status is lg.JobStatus.FINISHED and result.savepoint_path == location
    storage = str(tmp_path / "checkpoints")
    assert completed_checkpoints(storage), "a drained stop keeps the retained checkpoints"

"""``lockgate checkpoint export CHK DEST`` with a real incremental RocksDB checkpoint
(M-S3, M-R4, M-R3): the retained checkpoint references ``shared/`` files of its
storage; the export copies them, the source storage is deleted, and the export restores
to exactly the failure-free output (``restore_from=DEST`` on both executors,
``lockgate run --restore DEST`` from the command line)."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest
from test_checkpointing import cancel_after_checkpoints
from test_cli_restore import job_file
from test_recovery import SPLIT, by_value, expected_records, published, sum_job

import lockgate as lg
from lockgate import cli
from lockgate.checkpoint.coordinator import CompletedCheckpoint
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.checkpoint.shared_registry import SHARED_FOLDER

N = 2 * SPLIT


def incremental_sums(
    executor: Any, tmp_path: Any, storage: str, *, bounded: bool = True
) -> lg.StreamEnvironment:
    """The recovery equivalence job (running sums into an exactly-once FileSink) on the
    incremental RocksDB backend, checkpointing into ``storage``."""
    env = sum_job(executor, tmp_path, n=N, bounded=bounded)
    env.set_state_backend(lg.RocksDBStateBackend(incremental=True))
    env.checkpoint_config.storage = storage
    env.checkpoint_config.retained = 2
    env.checkpoint_config.externalized = lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
    return env


def retained_incremental_checkpoint(tmp_path: Any) -> str:
    """Run the job until three checkpoints completed, cancel it (the retained ones stay)
    and return the newest one's folder, which references shared files. Its source waits
    after its last number instead of ending, so the job is still running when the third
    checkpoint completes however slowly a loaded machine takes them (it used to run out
    of input first); the restore then reads what is left, if anything."""
    storage = str(tmp_path / "checkpoints")
    client = incremental_sums(lg.LocalExecutor(), tmp_path, storage, bounded=False).execute_async(
        "to export"
    )
    result = cancel_after_checkpoints(client, 3, "three checkpoints completed", timeout_s=120)
    assert result.status is lg.JobStatus.CANCELED
    fs = FileSystemCheckpointStorage(storage)
    newest = max(fs.completed_ids())
    checkpoint = CompletedCheckpoint.from_metadata(fs.read_metadata(newest))
    shared = [s for h in checkpoint.handles() for s in h.shared]
    assert shared and all(s.path.startswith(f"{SHARED_FOLDER}/") for s in shared), (
        "an incremental RocksDB checkpoint references files outside its chk-<id> folder"
    )
    return os.path.join(storage, f"chk-{newest}")


@pytest.mark.hang_guard(180)
def test_m_s3_m_r4_an_exported_incremental_checkpoint_restores_after_its_storage_is_deleted(
    executor: Any, tmp_path: Any, capsys: Any
) -> None:
    chk = retained_incremental_checkpoint(tmp_path)
    dest = str(tmp_path / "exported")
    assert cli.main(["checkpoint", "export", chk, dest]) == 0
    assert "shared files" in capsys.readouterr().out
    shutil.rmtree(tmp_path / "checkpoints")  # nothing may refer back to it

    restored = incremental_sums(executor, tmp_path, str(tmp_path / "checkpoints-2")).execute(
        "restored from the export", restore_from=dest
    )
    assert restored.status is lg.JobStatus.FINISHED
    assert by_value(published(str(tmp_path / "out"))) == expected_records(N)
    assert not os.path.exists(tmp_path / "checkpoints"), "the source storage stays gone"


JOB = job_file(
    "env.set_state_backend(lg.RocksDBStateBackend(incremental=True))", "restore an export"
)


@pytest.mark.hang_guard(180)
def test_m_r3_lockgate_run_restore_takes_an_exported_checkpoint(tmp_path: Any) -> None:
    chk = retained_incremental_checkpoint(tmp_path)
    dest = str(tmp_path / "exported")
    assert cli.main(["checkpoint", "export", chk, dest]) == 0
    shutil.rmtree(tmp_path / "checkpoints")
    job = tmp_path / "job.py"
    job.write_text(JOB)
    rc = cli.main(
        [
            "run",
            "--executor",
            "local",
            "--restore",
            dest,
            str(job),
            str(tmp_path / "out"),
            str(tmp_path / "checkpoints-2"),
            str(N),
        ]
    )
    assert rc == 0
    assert by_value(published(str(tmp_path / "out"))) == expected_records(N)

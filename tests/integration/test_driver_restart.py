"""A job run again on its own checkpoint storage resumes from its newest completed
checkpoint, as a restarted driver does (issue 22 part 4, M-C8: the durable pointer to
the newest completed checkpoint is what a restarted coordinator starts from).

* In process, on both executors: a job cancelled with retained checkpoints, run again
  under the same name, ends with exactly the failure-free output; ``fresh=True`` starts
  over instead; a job whose state does not fit fails naming the uids.
* Across processes: ``lockgate run`` killed with SIGKILL (its whole process group: the
  driver and, on Spark, its JVM and Python workers) mid-job, then the same command run
  again, ends exact, with no prepared PostgreSQL transaction and no temporary file left.
"""

from __future__ import annotations

import glob
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
import warnings
from pathlib import Path

import pytest
from test_checkpointing import cancel_after_checkpoints, completed
from test_recovery import RATE, by_value, expected_records, published, unbounded_sums

import lockgate as lg
from conftest import wait_until
from lockgate import cli
from lockgate.checkpoint.storage_url import open_storage
from lockgate.connectors import CollectSink
from lockgate.recovery.restore import RestoreError
from pg_fixtures import DSN, prepared, query

pytestmark = pytest.mark.system  # a whole system end to end (slow): -m 'not system' leaves it out

SPLIT = 60_000


def _cancelled_with_checkpoints(executor, tmp_path: Path, name: str, n: int) -> str:
    """Run the sums of ``n // 2`` numbers, waiting for more after them (never finishing
    before the cancel), and cancel it after two checkpoints; a rerun of ``n`` resumes."""
    client = unbounded_sums(executor, tmp_path, n // 2).execute_async(name)
    result = cancel_after_checkpoints(client, 2, "two checkpoints completed")
    assert result.status is lg.JobStatus.CANCELED
    assert len(published(str(tmp_path / "out"))) < n, "cancelled before the end"
    return str(tmp_path / "checkpoints")


@pytest.mark.hang_guard(180)
def test_m_c8_a_job_run_again_on_its_storage_resumes_and_ends_exact(
    executor, tmp_path, caplog
) -> None:
    n = 2 * SPLIT
    storage = _cancelled_with_checkpoints(executor, tmp_path, "resumable", n)
    with caplog.at_level(logging.WARNING, logger="lockgate.api.resume"):
        again = unbounded_sums(executor, tmp_path, n, bounded=True).execute("resumable")
    assert again.status is lg.JobStatus.FINISHED
    said = [
        r.getMessage() for r in caplog.records if "resumes from its checkpoint" in r.getMessage()
    ]
    assert said and storage in said[0] and "fresh=True" in said[0], said
    assert by_value(published(str(tmp_path / "out"))) == expected_records(n)


@pytest.mark.hang_guard(120)
def test_m_c8_fresh_starts_over_from_empty_state(tmp_path, caplog) -> None:
    n = 2 * SPLIT
    storage = _cancelled_with_checkpoints(lg.LocalExecutor(), tmp_path, "starts over", n)
    before = len(published(str(tmp_path / "out")))
    with caplog.at_level(logging.WARNING, logger="lockgate.api.resume"):
        again = unbounded_sums(lg.LocalExecutor(), tmp_path, n, bounded=True).execute(
            "starts over", fresh=True
        )
    assert again.status is lg.JobStatus.FINISHED
    # from empty state: every record once more on top of what the first run published
    assert len(published(str(tmp_path / "out"))) == before + n
    assert any(
        "starts from empty state" in r.getMessage() and storage in r.getMessage()
        for r in caplog.records
    )


def test_m_c8_no_resume_for_another_job_or_with_restore_from(tmp_path) -> None:
    n = 2 * SPLIT
    storage = _cancelled_with_checkpoints(lg.LocalExecutor(), tmp_path, "sums", n)
    assert (
        unbounded_sums(lg.LocalExecutor(), tmp_path, n).get_execution_plan("other").restore is None
    )
    resumed = unbounded_sums(lg.LocalExecutor(), tmp_path, n).get_execution_plan("sums")
    assert resumed.restore is not None
    given = unbounded_sums(lg.LocalExecutor(), tmp_path, n).get_execution_plan(
        "sums", restore_from=storage
    )
    assert given.restore.checkpoint_id == resumed.restore.checkpoint_id
    with pytest.raises(lg.ConfigurationError, match="give one of them"):
        unbounded_sums(lg.LocalExecutor(), tmp_path, n).get_execution_plan(
            "sums", restore_from=storage, fresh=True
        )
    with pytest.raises(lg.ConfigurationError, match="fresh must be True or False"):
        unbounded_sums(lg.LocalExecutor(), tmp_path, n).get_execution_plan("sums", fresh="yes")


def test_m_c8_a_resume_whose_state_does_not_fit_names_the_uids_and_the_way_out(tmp_path) -> None:
    n = 2 * SPLIT
    _cancelled_with_checkpoints(lg.LocalExecutor(), tmp_path, "changed", n)
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.from_collection([1, 2]).uid("other numbers").sink_to(CollectSink()).uid("c")
    with pytest.raises(RestoreError) as caught:
        env.get_execution_plan("changed")
    text = str(caught.value)
    assert "cannot resume" in text and "'sums'" in text and "fresh=True" in text, text
    # starting over is the way out
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert env.get_execution_plan("changed", fresh=True).restore is None


@pytest.mark.hang_guard(180)
@pytest.mark.parametrize("drain", [False, True], ids=["stop", "drain"])
def test_m_c8_m_s1_a_job_stopped_with_a_savepoint_resumes_from_it_not_an_older_checkpoint(
    tmp_path, caplog, drain
) -> None:
    """The stop commits the savepoint's transactions; the storage still holds older
    checkpoints (retained on cancellation; a drained job finishes and keeps them). A rerun
    resumes from the savepoint: from an older checkpoint it would publish the records in
    between again."""
    n = 2 * SPLIT
    # half the input, waiting for more after it (the job never ends before the stop,
    # however slow the machine); the rerun reads all of it, the rest at full rate
    slow = unbounded_sums(lg.LocalExecutor(), tmp_path, n // 2, rate=RATE / 4)
    client = slow.execute_async("stopped")
    wait_until(lambda: len(completed(client)) >= 2 or client.done(), "two checkpoints", 30)
    savepoint = client.stop_with_savepoint(str(tmp_path / "savepoint"), drain=drain)
    before = published(str(tmp_path / "out"))
    assert len(before) < n
    assert glob.glob(str(tmp_path / "checkpoints" / "chk-*" / "_metadata")), "older ones kept"
    with caplog.at_level(logging.WARNING, logger="lockgate.api.resume"):
        again = unbounded_sums(lg.LocalExecutor(), tmp_path, n, bounded=True).execute("stopped")
    assert again.status is lg.JobStatus.FINISHED
    assert any("the savepoint it was stopped with" in r.getMessage() for r in caplog.records)
    # drained or not, the savepoint holds the sources' positions: the rerun goes on from
    # there, and nothing the stop committed is written again
    assert by_value(published(str(tmp_path / "out"))) == expected_records(n)
    assert savepoint.startswith(str(tmp_path / "savepoint"))


# ----------------------------------------------------------- a killed driver, run again

KILL_JOB = textwrap.dedent("""
    import sys
    import lockgate as lg
    from lockgate.connectors import FileSink, PostgresSink, SequenceSource

    CHUNK = 6_000

    class RunningSum(lg.KeyedProcessFunction):
        def open(self, ctx):
            self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

        def process_element(self, value, ctx):
            total = self.total.value() + value["v"]
            self.total.update(total)
            yield {"k": value["k"], "v": value["v"], "sum": total}

    out, storage, n, dsn, table, prefix = sys.argv[1:7]
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = storage
    sums = (
        env.from_source(SequenceSource(0, int(n), rows_per_second=20_000, batch_size=500))
        .uid("numbers")
        .map(lambda x: {"k": x // CHUNK, "v": x}, name="to record")
        .key_by(lambda r: r["k"]).process(RunningSum(), name="running sum").uid("sums")
    )
    sums.sink_to(FileSink(out, format="jsonl"), name="files").uid("files")
    sums.sink_to(PostgresSink(dsn, table, transaction_prefix=prefix), name="pg").uid("pg")
    env.execute("driver restart")
""")


def _newest_checkpoint(storage: str) -> int:
    """The id of the newest completed checkpoint (its storage's durable pointer), or 0."""
    try:
        return open_storage(storage).read_latest() or 0
    except OSError:
        return 0


def _lockgate_run(executor_args: list[str], args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "lockgate.cli", "run", *executor_args, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killed whole, as a host dies
        )


@pytest.mark.hang_guard(300)
@pytest.mark.parametrize(
    "executor_args",
    [["--executor", "local"], pytest.param(["--master", "local[2]"], marks=pytest.mark.spark)],
    ids=["local", "spark"],
)
def test_m_c8_a_driver_killed_mid_job_and_run_again_resumes_and_ends_exact(
    executor_args, tmp_path, pg_table
) -> None:
    # about 4 s at the sources' rate, killed once a checkpoint has committed output (a
    # loaded machine may complete only few checkpoints before the end); each source
    # subtask reads whole keys (n / 2 is a multiple of CHUNK), so the sums are determined
    n = 144_000
    job = tmp_path / "job.py"
    job.write_text(KILL_JOB)
    out, storage = str(tmp_path / "out"), str(tmp_path / "checkpoints")
    table = pg_table("k BIGINT, v BIGINT, sum BIGINT")
    prefix = f"lgtest-restart-{uuid.uuid4().hex[:8]}"
    args = [str(job), out, storage, str(n), DSN, table, prefix]
    log = tmp_path / "driver.log"

    first = _lockgate_run(executor_args, args, log)
    try:
        wait_until(
            lambda: (
                (_newest_checkpoint(storage) >= 1 and len(published(out)) > 0)
                or first.poll() is not None
            ),
            "the first driver completed a checkpoint that published output",
            timeout_s=120,
        )
        assert first.poll() is None, f"the first driver ended by itself:\n{log.read_text()}"
        committed = query(f"SELECT count(*) FROM {table}")[0][0]
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert 0 < len(published(out)) < n, "killed mid-job, after some output was committed"
    assert committed < n

    started = time.monotonic()
    second = _lockgate_run(executor_args, args, log)
    try:
        rc = second.wait(240)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    text = log.read_text()
    assert rc == 0, f"the second driver failed:\n{text}"
    assert "resumes from its checkpoint storage" in text, text
    print(f"driver restart: second run took {time.monotonic() - started:.1f} s")

    expected = expected_records(n)
    assert by_value(published(out)) == expected
    rows = query(f"SELECT k, v, sum FROM {table}")
    assert sorted(rows) == sorted((r["k"], r["v"], r["sum"]) for r in expected)
    assert prepared(prefix) == [], "the dead driver's prepared transactions are resolved"
    leftovers = [p for p in os.listdir(out) if not p.startswith("part-")]
    assert leftovers == [], f"temporary files left in the output folder: {leftovers}"


def test_lockgate_run_fresh_and_restore_exclude_each_other(tmp_path, capsys) -> None:
    job = tmp_path / "job.py"
    job.write_text("print('never runs')\n")
    rc = cli.main(["run", "--fresh", "--restore", str(tmp_path), str(job)])
    assert rc == 2
    assert "give one of them" in capsys.readouterr().err
    rc = cli.main(["run", "--fresh", "--allow-non-restored-state", str(job)])
    assert rc == 2
    assert "not to --fresh" in capsys.readouterr().err


def test_lockgate_run_fresh_reaches_the_job_as_fresh_true(tmp_path) -> None:
    job = tmp_path / "job.py"
    job.write_text(
        textwrap.dedent("""
        import os, sys
        import lockgate as lg
        env = lg.StreamEnvironment(parallelism=1)
        env.enable_checkpointing(200)
        env.checkpoint_config.storage = sys.argv[1]
        env.from_collection([1]).uid("n").sink_to(lg.connectors.CollectSink()).uid("c")
        plan = env.get_execution_plan("fresh job")
        assert os.environ.get("LOCKGATE_FRESH") == "1"
        """)
    )
    assert cli.main(["run", "--executor", "local", "--fresh", str(job), str(tmp_path / "c")]) == 0
    assert "LOCKGATE_FRESH" not in os.environ, "the variable is the job's only"

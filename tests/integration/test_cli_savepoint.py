"""``lockgate list``, ``lockgate savepoint JOB PATH`` and ``lockgate stop JOB [--savepoint
PATH]``: command-line control of running jobs (M-S1).

The first tests drive the commands against a fake in-process job registered in the
registry; the last one runs a real job with ``lockgate run`` in a subprocess and takes a
savepoint of it, then stops it with another, from the command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from conftest import wait_until
from lockgate import cli
from lockgate.executor import job_registry
from lockgate.executor.job_registry import register_job


class FakeControl:
    """A stand-in for a running job's ``JobClient``: records the calls; ``error`` makes
    the savepoint calls raise it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.error: BaseException | None = None

    def trigger_savepoint(self, path: str, timeout: float | None = None) -> str:
        self.calls.append(("savepoint", path, timeout))
        if self.error is not None:
            raise self.error
        return os.path.join(path, "savepoint-1")

    def stop_with_savepoint(
        self, path: str | None = None, drain: bool = False, timeout: float | None = None
    ) -> str:
        self.calls.append(("stop", path, drain, timeout))
        if self.error is not None:
            raise self.error
        return os.path.join(path or "/default-savepoints", "savepoint-2")

    def cancel(self) -> None:
        self.calls.append(("cancel",))


@pytest.fixture
def home(tmp_path, monkeypatch) -> str:
    folder = str(tmp_path / "home")
    monkeypatch.setenv(job_registry.HOME_ENV, folder)
    return folder


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


# ----------------------------------------------------------------------- against a fake job


def test_lockgate_list_shows_id_name_pid_and_start_of_each_running_job(home, capsys) -> None:
    rc, out, err = run_cli(capsys, "list")
    assert (rc, out) == (0, "")
    assert "no lockgate job is running" in err
    with register_job("running sums", FakeControl()) as a, register_job("other", FakeControl()):
        rc, out, _ = run_cli(capsys, "list")
        assert rc == 0
        header, *rows = out.splitlines()
        assert header.split() == ["ID", "NAME", "PID", "STARTED"]
        assert len(rows) == 2
        assert a.job_id is not None and rows[0].startswith(a.job_id)
        assert "running sums" in rows[0] and str(os.getpid()) in rows[0]
    rc, out, _ = run_cli(capsys, "list")
    assert (rc, out) == (0, "")


def test_m_s1_lockgate_savepoint_prints_the_folder_the_job_returns(
    home, capsys, tmp_path, monkeypatch
) -> None:
    control = FakeControl()
    monkeypatch.chdir(tmp_path)
    with register_job("sums", control) as registration:
        rc, out, _ = run_cli(capsys, "savepoint", "sums", "sp", "--timeout", "30")
        assert rc == 0
        assert out == os.path.join(str(tmp_path), "sp", "savepoint-1") + "\n"
        assert registration.job_id is not None
        rc, _, _ = run_cli(capsys, "savepoint", registration.job_id, "s3://bucket/sp")
        assert rc == 0
    assert control.calls == [
        ("savepoint", str(tmp_path / "sp"), 30.0),
        ("savepoint", "s3://bucket/sp", None),
    ], "a local path reaches the job absolute, a URL unchanged"


def test_lockgate_stop_always_takes_a_savepoint_and_cancel_takes_none(
    home, capsys, tmp_path
) -> None:
    """Issue 37 item 13: as Flink's ``stop``, ``lockgate stop JOB`` without ``--savepoint``
    asks the job for a savepoint into its default folder (``path`` None), never cancels;
    ``lockgate cancel JOB`` cancels."""
    control = FakeControl()
    with register_job("sums", control):
        rc, out, _ = run_cli(capsys, "stop", "sums", "--savepoint", str(tmp_path / "sp"), "--drain")
        assert (rc, out) == (0, os.path.join(str(tmp_path), "sp", "savepoint-2") + "\n")
        rc, out, _ = run_cli(capsys, "stop", "sums")
        assert (rc, out) == (0, "/default-savepoints/savepoint-2\n")
        rc, out, _ = run_cli(capsys, "stop", "sums", "--drain", "--timeout", "30")
        assert rc == 0
        rc, out, _ = run_cli(capsys, "cancel", "sums")
        assert rc == 0 and out.startswith("cancelling job ")
    assert control.calls == [
        ("stop", str(tmp_path / "sp"), True, None),
        ("stop", None, False, None),
        ("stop", None, True, 30.0),
        ("cancel",),
    ]


def test_a_failing_savepoint_exits_1_with_the_jobs_message(home, capsys, tmp_path) -> None:
    control = FakeControl()
    control.error = RuntimeError("checkpoint storage is full")
    with register_job("sums", control):
        rc, out, err = run_cli(capsys, "savepoint", "sums", str(tmp_path / "sp"))
        assert (rc, out) == (1, "")
        assert "savepoint failed: RuntimeError: checkpoint storage is full" in err
        rc, out, err = run_cli(capsys, "stop", "sums", "--savepoint", str(tmp_path / "sp"))
        assert (rc, out) == (1, "")
        assert "stop failed: RuntimeError: checkpoint storage is full" in err


def test_usage_errors_exit_2_and_say_what_is_wrong(home, capsys, tmp_path) -> None:
    rc, _, err = run_cli(capsys, "savepoint", "nosuch", str(tmp_path / "sp"))
    assert rc == 2 and "no running job has the id or name 'nosuch'" in err
    control = FakeControl()
    with register_job("twin", control), register_job("twin", control):
        rc, _, err = run_cli(capsys, "stop", "twin")
        assert rc == 2 and "2 running jobs are named 'twin'" in err
        rc, _, err = run_cli(capsys, "savepoint", "twin", str(tmp_path / "sp"), "--timeout", "0")
        assert rc == 2 and "expected seconds > 0, got '0'" in err
        rc, _, err = run_cli(capsys, "savepoint", "twin")
        assert rc == 2 and "PATH" in err
    assert control.calls == []


# ----------------------------------------------------------------------- a real job

JOB = textwrap.dedent("""
    import sys
    import lockgate as lg
    from lockgate.connectors import FileSink, SequenceSource

    class RunningSum(lg.KeyedProcessFunction):
        def open(self, ctx):
            self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

        def process_element(self, value, ctx):
            total = self.total.value() + value["v"]
            self.total.update(total)
            yield {"k": value["k"], "v": value["v"], "sum": total}

    out, storage, name = sys.argv[1], sys.argv[2], sys.argv[3]
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = storage
    # runs until stopped: a trillion numbers, throttled so the output stays small
    (env.from_source(SequenceSource(0, 10**12, rows_per_second=2_000)).uid("numbers")
        .map(lambda x: {"k": x % 10, "v": x}, name="to record").uid("records")
        .key_by(lambda r: r["k"]).process(RunningSum(), name="running sum").uid("sums")
        .sink_to(FileSink(out, format="jsonl"), name="files").uid("files"))
    env.execute(name)
""")

NAME = "cli savepoint job"


def _log(path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else "(no output)"


def _completed_checkpoint(storage: str) -> bool:
    return os.path.isdir(storage) and any(
        os.path.exists(os.path.join(storage, d, "_metadata"))
        for d in os.listdir(storage)
        if d.startswith("chk-")
    )


@pytest.mark.hang_guard(180)
def test_m_s1_savepoint_and_stop_with_savepoint_of_a_job_run_by_lockgate_run(
    home, capsys, tmp_path
) -> None:
    """A job started with ``lockgate run`` in another process is listed, gives a savepoint
    while it keeps running, and stops with a second one; the first savepoint stays (M-S1)."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    storage, sp1, sp2 = str(tmp_path / "checkpoints"), tmp_path / "sp1", tmp_path / "sp2"
    log = tmp_path / "job.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lockgate.cli",
                "run",
                "--executor",
                "local",
                str(job),
                str(tmp_path / "out"),
                storage,
                NAME,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(tmp_path),
            env={**os.environ, job_registry.HOME_ENV: home},
        )
    try:

        def listed() -> bool:
            return NAME in run_cli(capsys, "list")[1]

        wait_until(
            lambda: proc.poll() is not None or _completed_checkpoint(storage),
            f"the job completed a checkpoint (job log: {log})",
            timeout_s=60,
        )
        assert proc.poll() is None, f"the job ended early (exit {proc.returncode}):\n{_log(log)}"
        wait_until(
            listed,
            "'lockgate list' shows the running job (is env.execute wired to "
            "job_registry.register_job?)",
            timeout_s=10,
        )

        rc, out, err = run_cli(capsys, "savepoint", NAME, str(sp1), "--timeout", "60")
        assert rc == 0, f"lockgate savepoint failed: {err}\njob log:\n{_log(log)}"
        assert out.strip().rstrip("/").endswith("sp1")
        assert (sp1 / "_metadata").exists()
        assert proc.poll() is None, "a savepoint leaves the job running"

        rc, out, err = run_cli(capsys, "stop", NAME, "--savepoint", str(sp2), "--timeout", "60")
        assert rc == 0, f"lockgate stop failed: {err}\njob log:\n{_log(log)}"
        assert out.strip().rstrip("/").endswith("sp2")
        assert proc.wait(60) == 0, f"the job did not end cleanly:\n{_log(log)}"
        assert (sp2 / "_metadata").exists()
        assert (sp1 / "_metadata").exists(), "a savepoint is never deleted by the job (M-S1)"
        assert not listed()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)

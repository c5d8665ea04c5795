"""The command line's parts that need no REST server (issue 21, items 5-7): the warning
for a lockgate option given after the job's arguments, ``--log-level`` (validated, and
applied to a real job file run by ``lockgate run`` in a subprocess), the checks of
``--url``/``--token`` before any request, a refused connection, ``lockgate token`` and
``lockgate top`` of a job without REST, and ``lockgate top``'s frame rendered from the
metrics of a real running job."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

import lockgate as lg
from conftest import wait_until
from lockgate import cli
from lockgate.cli.top import render_frame, task_rows
from lockgate.connectors import SequenceSource
from lockgate.connectors.builtin.discarding_sink import DiscardingSink
from lockgate.executor import job_registry
from lockgate.executor.job_registry import register_job

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def home(tmp_path, monkeypatch) -> str:
    folder = str(tmp_path / "home")
    monkeypatch.setenv(job_registry.HOME_ENV, folder)
    monkeypatch.delenv("LOCKGATE_URL", raising=False)
    monkeypatch.delenv("LOCKGATE_TOKEN", raising=False)
    return folder


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def lockgate_process(*args: str, home: str, cwd: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, job_registry.HOME_ENV: home}
    env.pop("LOCKGATE_URL", None)
    env.pop("LOCKGATE_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "lockgate.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


class FakeControl:
    """A registered stand-in for a job without REST (the control channel only)."""

    def trigger_savepoint(self, path, timeout=None):
        return path

    def stop_with_savepoint(self, path, drain=False, timeout=None):
        return path

    def cancel(self):
        pass


# ----------------------------------------------------------------------- lockgate run options

ECHO_JOB = textwrap.dedent("""
    import json, logging, sys
    logging.getLogger("myjob").debug("a debug line")
    logging.getLogger("myjob").info("an info line")
    logging.getLogger("myjob").warning("a warning line")
    print(json.dumps(sys.argv[1:]))
""")


def test_a_lockgate_option_after_a_job_argument_goes_to_the_job_with_a_warning(
    home, tmp_path
) -> None:
    job = tmp_path / "echo.py"
    job.write_text(ECHO_JOB)
    done = lockgate_process(
        "run", str(job), "out", "--executor", "local", "--log-level=DEBUG",
        home=home, cwd=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == '["out", "--executor", "local", "--log-level=DEBUG"]'
    for name in ("--executor", "--log-level"):
        assert (
            f"lockgate: warning: {name} comes after the job's argument 'out', so it went to "
            "the job (in sys.argv), not to lockgate; to give it to lockgate put it before "
            f"the job file: lockgate run {name} ... {job} ..."
        ) in done.stderr
    assert "an info line" not in done.stderr, "--log-level after a job argument is the job's"

    # right after the job file, or after '--': no warning
    done = lockgate_process(
        "run", str(job), "--executor", "local", "out", "--", "--executor", "x",
        home=home, cwd=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == '["out", "--", "--executor", "x"]'
    assert "lockgate: warning" not in done.stderr


def test_log_level_sets_the_jobs_root_logging_level(home, tmp_path) -> None:
    job = tmp_path / "echo.py"
    job.write_text(ECHO_JOB)
    default = lockgate_process("run", "--executor", "local", str(job), home=home, cwd=str(tmp_path))
    assert default.returncode == 0, default.stderr
    assert "a warning line" in default.stderr and "an info line" not in default.stderr

    info = lockgate_process(
        "run", "--log-level", "info", "--executor", "local", str(job), home=home, cwd=str(tmp_path)
    )
    assert info.returncode == 0, info.stderr
    assert "INFO myjob: an info line" in info.stderr
    assert "a debug line" not in info.stderr
    assert "lockgate run" in info.stderr and "executor local" in info.stderr, (
        "the executor in use is logged at start"
    )

    debug = lockgate_process(
        "run", str(job), "--log-level", "DEBUG", "--executor", "local", home=home, cwd=str(tmp_path)
    )
    assert debug.returncode == 0, debug.stderr
    assert "DEBUG myjob: a debug line" in debug.stderr


def test_a_bad_log_level_is_refused_with_the_levels_to_use(home, capsys, tmp_path) -> None:
    job = tmp_path / "echo.py"
    job.write_text(ECHO_JOB)
    rc, out, err = run_cli(capsys, "run", "--log-level", "verbose", str(job))
    assert (rc, out) == (2, "")
    assert "'verbose' is not a log level; use one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in err
    rc, _, err = run_cli(capsys, "run", str(job), "--log-level", "LOUD")
    assert rc == 2 and "'LOUD' is not a log level" in err


def test_start_timeout_applies_to_detach(home, capsys, tmp_path) -> None:
    job = tmp_path / "echo.py"
    job.write_text(ECHO_JOB)
    rc, _, err = run_cli(capsys, "run", "--start-timeout", "5", str(job))
    assert rc == 2 and "--start-timeout applies to --detach" in err


def test_detach_of_a_job_file_that_never_registers_fails_with_its_log(home, tmp_path) -> None:
    job = tmp_path / "echo.py"
    job.write_text(ECHO_JOB)
    done = lockgate_process(
        "run", "-d", "--executor", "local", str(job), "x", home=home, cwd=str(tmp_path)
    )
    assert done.returncode == 1
    assert "the job ended (exit code 0) before it registered" in done.stderr
    assert '["x"]' in done.stderr, "the end of the job's log is shown"
    logs = os.path.join(home, "logs")
    (log,) = os.listdir(logs)
    assert oct(os.stat(os.path.join(logs, log)).st_mode & 0o777) == "0o600"
    assert oct(os.stat(logs).st_mode & 0o777) == "0o700"


# ----------------------------------------------------------------------- remote options


def test_remote_options_are_checked_before_any_request(home, capsys, monkeypatch) -> None:
    rc, _, err = run_cli(capsys, "list", "--token", "x" * 20)
    assert rc == 2 and "--token applies to --url" in err
    rc, _, err = run_cli(capsys, "list", "--url", "ftp://host:21", "--token", "x" * 20)
    assert rc == 2 and "is not an http:// or https:// address" in err
    rc, _, err = run_cli(capsys, "list", "--url", "http://127.0.0.1:notaport", "--token", "t" * 20)
    assert rc == 2 and "give http://HOST:PORT" in err
    rc, _, err = run_cli(capsys, "status", "job", "--url", "http://127.0.0.1:1")
    assert rc == 2
    assert "wrong or missing token: pass --token or set LOCKGATE_TOKEN" in err
    monkeypatch.setenv("LOCKGATE_URL", "http://127.0.0.1:1")
    rc, _, err = run_cli(capsys, "cancel", "job")
    assert rc == 2 and "wrong or missing token" in err, "LOCKGATE_URL makes the command remote"
    rc, _, err = run_cli(capsys, "savepoint", "job", "relative/sp", "--token", "t" * 20)
    assert rc == 2 and "the savepoint PATH 'relative/sp' is relative" in err


def test_a_refused_connection_says_so_and_never_shows_the_token(home, capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the port is closed now: nothing listens
    token = "secret-token-value-123456"
    for args in (
        ["list"],
        ["status", "j"],
        ["cancel", "j"],
        ["savepoint", "j", "/tmp/sp"],
        ["stop", "j", "--savepoint", "/tmp/sp"],
        ["top", "j", "--once"],
    ):
        rc, out, err = run_cli(capsys, *args, "--url", f"http://127.0.0.1:{port}", "--token", token)
        assert (rc, out) == (1, ""), args
        assert f"cannot reach the job at http://127.0.0.1:{port}: connection refused" in err
        assert token not in err


def test_token_and_top_of_a_job_without_rest_say_so(home, capsys) -> None:
    with register_job("plain job", FakeControl()) as registration:
        rc, out, err = run_cli(capsys, "token", "plain job")
        assert (rc, out) == (2, "")
        assert "serves no REST API, so it has no token" in err
        rc, out, err = run_cli(capsys, "top", "plain job", "--once")
        assert rc == 2 and "cannot read it" in err
        rc, out, err = run_cli(capsys, "status", "plain job")
        assert rc == 0, err
        assert registration.job_id in out and "RUNNING" in out and "serves no REST API" in out
        rc, out, _ = run_cli(capsys, "cancel", registration.job_id)
        assert rc == 0 and out.startswith(f"cancelling job {registration.job_id}")
    rc, _, err = run_cli(capsys, "token", "plain job", "--url", "http://x:1")
    assert rc == 2


# ----------------------------------------------------------------------- top's frame


def test_a_top_frame_shows_progress_and_a_row_per_task_of_a_running_job() -> None:
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    env.config.progress_interval_ms = 0
    (
        env.from_source(SequenceSource(0, 10**9, rows_per_second=50_000), name="numbers")
        .uid("numbers")
        .map(lambda v: v + 1, name="plus one")
        .uid("plus-one")
        .rebalance()
        .sink_to(DiscardingSink(), name="nowhere")
    )
    client = env.execute_async("top frame job")
    try:
        wait_until(
            lambda: any(
                (v.get("records_out_per_s") or 0) > 0 and v.get("busy_ms_per_s") is not None
                for v in client.metrics()["vertices"]
            ),
            "the job's metrics show rates",
            60,
        )
        metrics, progress = client.metrics(), client.progress()
    finally:
        client.cancel()
        client.wait(60)
    rows = task_rows(metrics)
    assert [r[0] for r in rows] == [v["name"] for v in metrics["vertices"]]
    assert all(r[1] == "2" for r in rows)
    source = rows[0]
    assert source[2] == "-" and source[3] != "-", "a source has no input rate"
    assert rows[-1][3] == "-", "a sink has no output rate"
    assert all(r[4].endswith("%") and r[5].endswith("%") for r in rows)
    frame = render_frame("http://127.0.0.1:9", progress, metrics)
    lines = frame.splitlines()
    assert lines[0].startswith("lockgate top - top frame job at http://127.0.0.1:9")
    assert lines[1].startswith("status RUNNING, up ")
    assert lines[2].startswith("records/s ") and " in, " in lines[2] and " read" in lines[2]
    assert lines[3].startswith("watermark ") and "backpressure" in lines[3]
    assert lines[4].startswith("checkpoints 0 completed, 0 failed; last none")
    assert lines[6].split() == [
        "TASK", "PAR", "IN/s", "OUT/s", "BUSY", "BACKPR", "WATERMARK", "WM", "LAG", "QUEUE"
    ]  # fmt: skip
    assert len(lines) == 7 + len(rows)
    narrow = render_frame("http://127.0.0.1:9", progress, metrics, width=30)
    assert max(len(line) for line in narrow.splitlines()) <= 30
    empty = render_frame("http://x:1", {"status": "RESTARTING"}, {"vertices": []})
    assert "no task runs now" in empty

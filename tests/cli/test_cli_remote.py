"""The remote command line against real jobs (issue 21, items 6 and 7).

Each job runs in a process of its own, started with ``lockgate run --detach`` under a
temporary ``$LOCKGATE_HOME``; the test reads the job's REST address and token from
its registration file (as a person would get them with ``lockgate token JOB`` on the
job's machine) and drives ``lockgate list|status|top|savepoint|stop|cancel`` with
``--url``/``--token`` (or ``LOCKGATE_URL``/``LOCKGATE_TOKEN``): the answers, the
401 of a wrong or missing token, 404 of an unknown job, 400 and 409 of requests the
job refuses, and the refused connection once the job ended. ``lockgate top`` runs live
in a tmux pane too and ends with Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from conftest import process_alive, wait_until
from lockgate import cli
from lockgate.executor import job_registry

JOB = textwrap.dedent("""
    import sys
    import lockgate as lg
    from lockgate.connectors import SequenceSource
    from lockgate.connectors.builtin.discarding_sink import DiscardingSink

    name, storage = sys.argv[1], sys.argv[2]
    env = lg.StreamEnvironment(parallelism=2)
    env.config.progress_interval_ms = 0  # nobody reads the metrics but the test
    if storage != "-":
        env.enable_checkpointing(300)
        env.checkpoint_config.storage = storage
    # runs until stopped; throttled so it stays light
    (env.from_source(SequenceSource(0, 10**12, rows_per_second=5_000), name="numbers")
        .uid("numbers")
        .map(lambda v: v * 2, name="double").uid("double")
        .key_by(lambda v: v % 7)
        .map(lambda v: v + 1, name="plus one").uid("plus-one")
        .sink_to(DiscardingSink(), name="nowhere").uid("nowhere"))
    env.execute(name)
""")


@dataclass
class Detached:
    """A job started by ``lockgate run --detach`` in another process."""

    job_id: str
    name: str
    pid: int
    url: str
    token: str
    log: str
    stdout: str


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


def _env(home: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, job_registry.HOME_ENV: home, **extra}
    for name in ("LOCKGATE_URL", "LOCKGATE_TOKEN"):
        if name not in extra:
            env.pop(name, None)
    return env


def detach(tmp_path, home: str, name: str, storage: str) -> Detached:
    """Start the job ``name`` with ``lockgate run -d`` and read its registration."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    done = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "run", "-d", "--executor", "local", str(job),
         name, storage],
        capture_output=True, text=True, cwd=str(tmp_path), env=_env(home), timeout=200,
    )  # fmt: skip
    assert done.returncode == 0, f"lockgate run -d failed:\n{done.stdout}\n{done.stderr}"
    first = re.match(r"job ([0-9a-f]+) \('(.*)'\) runs in the background, pid (\d+)\n", done.stdout)
    assert first, done.stdout
    job_id, pid = first.group(1), int(first.group(3))
    with open(os.path.join(home, "jobs", f"{job_id}.json")) as f:
        entry = json.load(f)
    url, token = entry["rest_url"], entry["rest_token"]
    assert url and token, f"the registration names no REST API: {entry.keys()}"
    log = re.search(r"^log: (.*)$", done.stdout, re.M)
    assert log, done.stdout
    return Detached(job_id, first.group(2), pid, url, token, log.group(1), done.stdout)


def stop_process(pid: int) -> None:
    if process_alive(pid):
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not process_alive(pid), f"the job process {pid} is gone", 30)


@pytest.fixture
def jobs() -> Iterator[list[Detached]]:
    """The detached jobs of a test; any still running at its end is killed."""
    started: list[Detached] = []
    yield started
    for job in started:
        stop_process(job.pid)


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-3000:]
    except OSError:
        return "(no log)"


#: seconds between two requests of a wait on the job's REST API: a tight loop of them
#: keeps the job's process busy answering instead of starting
POLL_S = 0.2


def wait_until_running(capsys, job: Detached, remote: list[str], timeout_s: float = 120) -> None:
    """Poll ``lockgate list`` until it shows ``job`` RUNNING (a registered job is CREATED
    until its tasks start); fail with the last answer and the job's log."""
    last: list[tuple[int, str, str]] = []

    def running() -> bool:
        last[:] = [run_cli(capsys, "list", *remote)]
        rc, out, _ = last[0]
        return rc == 0 and " RUNNING " in out

    wait_until(
        running,
        lambda: f"the job runs; 'lockgate list' last said {last}; log:\n{_tail(job.log)}",
        timeout_s,
        every_s=POLL_S,
    )


@pytest.mark.hang_guard(240)
def test_detach_then_list_status_top_savepoint_and_stop_through_the_rest_api(
    home, jobs, capsys, tmp_path
) -> None:
    job = detach(tmp_path, home, "remote sums", str(tmp_path / "checkpoints"))
    jobs.append(job)
    # --detach printed the id, the dashboard and the log, never the token
    assert f"dashboard: {job.url}/\n" in job.stdout
    assert f"lockgate token {job.job_id}" in job.stdout
    assert job.log.startswith(os.path.join(home, "logs") + os.sep)
    assert oct(os.stat(job.log).st_mode & 0o777) == "0o600"
    assert job.token not in job.stdout
    assert process_alive(job.pid)
    remote = ["--url", job.url, "--token", job.token]

    wait_until_running(capsys, job, remote)
    rc, out, err = run_cli(capsys, "list", *remote)
    assert rc == 0, err
    header, row = out.splitlines()
    assert header.split() == ["ID", "NAME", "STATUS", "STARTED"]
    assert row.split()[:4] == [job.job_id, "remote", "sums", "RUNNING"]

    # 401: a wrong or missing token gets nothing but the error, and is not shown
    rc, out, err = run_cli(capsys, "list", "--url", job.url, "--token", "w" * 43)
    assert (rc, out) == (2, "")
    assert "wrong or missing token: pass --token or set LOCKGATE_TOKEN" in err
    assert "w" * 43 not in err and job.token not in err
    rc, out, err = run_cli(capsys, "status", job.job_id, "--url", job.url)
    assert (rc, out) == (2, "") and "wrong or missing token" in err

    # 404: no such job there
    rc, out, err = run_cli(capsys, "status", "nosuch", *remote)
    assert (rc, out) == (2, "")
    assert f"no job at {job.url} has the id or name 'nosuch'; jobs there: {job.job_id}" in err

    def status_shows_a_checkpoint() -> bool:
        rc, out, _ = run_cli(capsys, "status", "remote sums", *remote)
        return rc == 0 and "last checkpoint none" not in out

    wait_until(
        status_shows_a_checkpoint,
        lambda: f"a checkpoint completed (log:\n{_tail(job.log)})",
        60,
        every_s=POLL_S,
    )
    rc, out, err = run_cli(capsys, "status", job.job_id, *remote)
    assert rc == 0, err
    assert f"job       {job.job_id} ('remote sums')" in out
    assert "status    RUNNING" in out and f"rest      {job.url}" in out
    assert "records/s in" in out
    # the same without --url: the registration names the REST API
    rc, out_local, err = run_cli(capsys, "status", "remote sums")
    assert rc == 0, err
    assert "status    RUNNING" in out_local and f"rest      {job.url}" in out_local

    rc, out, err = run_cli(capsys, "top", "remote sums", "--once", *remote)
    assert rc == 0, err
    assert out.startswith(f"lockgate top - remote sums at {job.url}")
    assert re.search(r"^numbers -> double +2 ", out, re.M), out
    assert re.search(r"^plus one -> nowhere +2 ", out, re.M), out

    # the token: printed by 'lockgate token' only, on the job's machine
    rc, out, err = run_cli(capsys, "token", job.job_id)
    assert (rc, out) == (0, job.token + "\n"), err
    assert job.token not in _tail(job.log)

    sp1, sp2 = tmp_path / "sp1", tmp_path / "sp2"
    rc, out, err = run_cli(capsys, "savepoint", "remote sums", str(sp1), "--timeout", "60", *remote)
    assert rc == 0, f"{err}\n{_tail(job.log)}"
    assert out.strip().rstrip("/").endswith("sp1") and (sp1 / "_metadata").exists()
    # 400: the job refuses a folder that holds a savepoint
    rc, out, err = run_cli(capsys, "savepoint", job.job_id, str(sp1), *remote)
    assert (rc, out) == (2, "")
    assert "the job refused the request (400)" in err and "already holds a savepoint" in err
    assert process_alive(job.pid), "a savepoint leaves the job running"

    rc, out, err = run_cli(
        capsys, "stop", "remote sums", "--savepoint", str(sp2), "--timeout", "60", *remote
    )
    assert rc == 0, f"{err}\n{_tail(job.log)}"
    assert out.strip().rstrip("/").endswith("sp2") and (sp2 / "_metadata").exists()
    wait_until(lambda: not process_alive(job.pid), "the stopped job's process ended", 60)
    rc, out, err = run_cli(capsys, "list", *remote)
    assert (rc, out) == (1, "")
    assert f"cannot reach the job at {job.url}: connection refused" in err
    assert "Traceback" not in _tail(job.log), _tail(job.log)


@pytest.mark.hang_guard(240)
def test_409_of_a_job_without_checkpointing_and_cancel_from_another_process(
    home, jobs, capsys, tmp_path
) -> None:
    job = detach(tmp_path, home, "no checkpoints", "-")
    jobs.append(job)
    remote = ["--url", job.url, "--token", job.token]

    wait_until_running(capsys, job, remote)
    # status shows the rates (it reads the metrics again a second later when they have none)
    rc, out, err = run_cli(capsys, "status", job.job_id, *remote)
    assert rc == 0, err
    assert re.search(r"RUNNING: [1-9][0-9,]* records/s in", out), out

    rc, out, err = run_cli(capsys, "savepoint", "no checkpoints", str(tmp_path / "sp"), *remote)
    assert (rc, out) == (1, "")
    assert "the job cannot do that now (409): " in err and "runs without checkpointing" in err

    # from yet another process, with the address and token in the environment
    done = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "cancel", job.job_id],
        capture_output=True,
        text=True,
        env=_env(home, LOCKGATE_URL=job.url, LOCKGATE_TOKEN=job.token),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"cancelling job {job.job_id} (no checkpoints)\n"
    wait_until(lambda: not process_alive(job.pid), "the cancelled job's process ended", 60)


@pytest.mark.hang_guard(240)
def test_top_runs_live_in_a_terminal_and_ends_with_ctrl_c(home, jobs, tmp_path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    job = detach(tmp_path, home, "watched job", "-")
    jobs.append(job)
    session = f"lockgate-top-{os.getpid()}"
    done_file = tmp_path / "top.exit"
    script = tmp_path / "top.sh"
    script.write_text(
        f"{sys.executable} -m lockgate.cli top '{job.name}' --interval 0.3; echo $? > {done_file}\n"
    )
    env = _env(home, LOCKGATE_URL=job.url, LOCKGATE_TOKEN=job.token)

    def tmux(*args: str) -> str:
        return subprocess.run(
            ["tmux", *args], capture_output=True, text=True, env=env, timeout=30, check=True
        ).stdout

    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "30", f"bash {script}")
    try:
        screens: list[str] = []

        def frame_with_clock() -> bool:
            screens.append(tmux("capture-pane", "-p", "-t", session))
            clock = re.search(r"lockgate top - watched job at \S+ - (\d\d:\d\d:\d\d)", screens[-1])
            return bool(clock) and "numbers -> double" in screens[-1]

        wait_until(frame_with_clock, "top shows a frame in the pane", 60, every_s=POLL_S)
        first = re.search(r" - (\d\d:\d\d:\d\d)", screens[-1])
        assert first is not None
        wait_until(
            lambda: frame_with_clock() and first.group(1) not in screens[-1].splitlines()[0],
            "top redraws the frame in place (a new time in the first line)",
            30,
            every_s=POLL_S,
        )
        assert screens[-1].count("lockgate top - ") == 1, "one frame on screen, redrawn"
        tmux("send-keys", "-t", session, "C-c")
        # the shell creates the file before echo writes the status into it
        wait_until(
            lambda: done_file.exists() and done_file.read_text().strip() != "",
            "top ended on Ctrl-C (its exit status written)",
            30,
        )
        assert done_file.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, timeout=30)

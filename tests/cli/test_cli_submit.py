"""``lockgate submit`` and ``lockgate run --rest-*`` (issue 22 part 5): the checks made before
anything is submitted, the spark-submit command line (cluster deploy mode through Spark's
PythonRunner, the run options carried to the driver), and a job run with ``--rest-bind``,
``--rest-port`` and ``--rest-token-file`` answering at that port to that token only. The
submission itself runs on the multi-host cluster (tests/spark/test_multi_host_cluster.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import wait_until
from lockgate import cli
from lockgate import errors as lg_errors
from lockgate.cli.submit import PYTHON_RUNNER, Submission, command, submitted_driver_path
from lockgate.core import rest_settings
from lockgate.executor import job_registry

TOKEN = "t0ken-of-the-test-abcdefghijklmnopqrstuvwxyz"


@pytest.fixture
def home(tmp_path, monkeypatch) -> str:
    folder = str(tmp_path / "home")
    monkeypatch.setenv(job_registry.HOME_ENV, folder)
    for name in ("LOCKGATE_URL", "LOCKGATE_TOKEN", "LOCKGATE_REST_BIND", "LOCKGATE_REST_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("LOCKGATE_REST_TOKEN_FILE", raising=False)
    return folder


@pytest.fixture
def job_file(tmp_path: Path) -> str:
    path = tmp_path / "job.py"
    path.write_text("print('hello')\n")
    return str(path)


@pytest.fixture
def token_file(tmp_path: Path) -> str:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return str(path)


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--master", "yarn"], "Spark standalone cluster (spark://HOST:PORT)"),
        (["--master", "local[2]"], "Spark standalone cluster (spark://HOST:PORT)"),
        (["--master", "spark://h:7077", "--conf", "novalue"], "expected KEY=VALUE"),
        (["--master", "spark://h:7077", "--conf", "spark.master=x"], "set by lockgate submit"),
        (["--master", "spark://h:7077", "--rest-port", "70000"], "--rest-port"),
        (["--master", "spark://h:7077", "--python", "/no/such/python"], "not an executable"),
        (["--master", "spark://h:7077", "--fresh", "--restore", "/tmp"], "give one"),
    ],
)
def test_submit_refuses_what_cannot_work_before_submitting(
    home, capsys, job_file, args, says
) -> None:
    rc, out, err = run_cli(capsys, "submit", *args, job_file)
    assert rc == 2, (out, err)
    assert says in err, err


def test_submit_refuses_a_missing_job_file_and_a_token_file_others_can_read(
    home, capsys, tmp_path, token_file
) -> None:
    rc, _, err = run_cli(capsys, "submit", "--master", "spark://h:7077", str(tmp_path / "no.py"))
    assert rc == 2 and "job file not found" in err, err
    os.chmod(token_file, 0o644)
    job = tmp_path / "job.py"
    job.write_text("")
    rc, _, err = run_cli(
        capsys, "submit", "--master", "spark://h:7077", "--rest-token-file", token_file, str(job)
    )
    assert rc == 2 and "chmod 600" in err, err
    assert TOKEN not in err


def test_the_spark_submit_command_runs_pythonrunner_in_cluster_mode_with_the_run_options(
    job_file, token_file
) -> None:
    sub = Submission(
        master="spark://10.0.0.1:7077",
        job=job_file,
        job_args=["--out", "x"],
        supervise=True,
        conf=["spark.executor.memory=2g"],
        rest_bind="0.0.0.0",
        rest_port="8081",
        rest_token_file=token_file,
        fresh=True,
        log_level="INFO",
    )
    cmd = command(sub)
    assert cmd[0].endswith(os.path.join("bin", "spark-submit")) and os.path.isfile(cmd[0])
    joined = " ".join(cmd)
    for part in (
        "--master spark://10.0.0.1:7077 --deploy-mode cluster",
        f"--class {PYTHON_RUNNER}",
        "--supervise",
        "--conf spark.executor.memory=2g",
        f"--conf spark.pyspark.python={sys.executable}",
    ):
        assert part in joined, joined
    jar = next(c for c in cmd if c.endswith(".jar"))
    assert os.path.basename(jar).startswith("spark-core_") and os.path.isfile(jar)
    at = cmd.index(jar)
    # PythonRunner's arguments: the script, its python files (none), then lockgate run's
    assert cmd[at + 1] == submitted_driver_path() and cmd[at + 2] == ""
    run = cmd[at + 3 :]
    assert run[:5] == ["run", "--executor", "spark", "--master", "spark://10.0.0.1:7077"]
    for flag, value in (
        ("--rest-bind", "0.0.0.0"),
        ("--rest-port", "8081"),
        ("--rest-token-file", token_file),
    ):
        assert run[run.index(flag) + 1] == value, run
    assert "--fresh" in run
    assert run[-4:] == [os.path.abspath(job_file), "--", "--out", "x"]


def test_the_submitted_driver_script_is_lockgate_itself(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, submitted_driver_path(), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and done.stdout.startswith("lockgate "), done


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_with_rest(job: Path, home: str, token_file: str) -> tuple[subprocess.Popen, int]:
    """``lockgate run --rest-bind 127.0.0.1 --rest-port P --rest-token-file F job``
    started in ``job``'s folder: (the process, P)."""
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lockgate.cli",
            "run",
            "--rest-bind",
            "127.0.0.1",
            "--rest-port",
            str(port),
            "--rest-token-file",
            token_file,
            str(job),
        ],
        env={**os.environ, job_registry.HOME_ENV: home},
        cwd=job.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return process, port


def _end(process: subprocess.Popen) -> None:
    """Kill ``process`` if it still runs; reap it and close its stderr pipe."""
    if process.poll() is None:
        process.kill()
    process.wait(30)
    assert process.stderr is not None
    process.stderr.close()


JOB = textwrap.dedent("""
    import lockgate as lg
    from lockgate.connectors import DiscardingSink, SequenceSource
    env = lg.StreamEnvironment(parallelism=1)
    env.from_source(SequenceSource(0, 10**12, rows_per_second=100)).sink_to(DiscardingSink())
    env.execute("rest-options", executor=lg.LocalExecutor())
""")


def test_run_with_rest_options_listens_there_and_takes_only_the_token_of_the_file(
    home, tmp_path, token_file
) -> None:
    """The job's REST API at --rest-bind/--rest-port, opened by the token in
    --rest-token-file, so a job on another host is reachable with a token known before it
    started; a wrong token is refused."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    process, port = _run_with_rest(job, home, token_file)
    url = f"http://127.0.0.1:{port}/api/v1/jobs"

    def answers(token: str) -> int:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                jobs = json.loads(reply.read())["jobs"]
                assert [j["name"] for j in jobs] == ["rest-options"], jobs
                return int(reply.status)
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    try:
        wait_until(lambda: answers(TOKEN) == 200, "the job answered at its --rest-port", 60)
        assert answers("another-token-of-enough-length-0123456789") == 401
        rc = cli.main(
            ["cancel", "rest-options", "--url", f"http://127.0.0.1:{port}", "--token", TOKEN]
        )
        assert rc == 0
        # the cancelled job ends (bounded: TimeoutExpired fails the test); execute returns
        assert process.wait(60) == 0
    finally:
        _end(process)


SLOW_ANSWER_JOB = textwrap.dedent("""
    import threading
    import lockgate as lg
    from lockgate.api.job_client import JobClient
    from lockgate.connectors import DiscardingSink, SequenceSource

    stop_with_savepoint = JobClient.stop_with_savepoint

    def slow_answer(self, *args, **kwargs):
        # the job has ended when this returns: the answer comes well after it
        done = stop_with_savepoint(self, *args, **kwargs)
        threading.Event().wait(1.5)
        return done

    JobClient.stop_with_savepoint = slow_answer
    env = lg.StreamEnvironment(parallelism=1)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = "checkpoints"
    env.from_source(SequenceSource(0, 10**12, rows_per_second=100)).sink_to(DiscardingSink())
    if BACKGROUND:
        env.execute_async("rest-options", executor=lg.LocalExecutor()).wait()
    else:
        env.execute("rest-options", executor=lg.LocalExecutor())
""")


@pytest.mark.parametrize("background", [False, True], ids=["execute", "execute_async"])
def test_a_stop_through_the_rest_api_is_answered_before_the_jobs_process_exits(
    home, tmp_path, token_file, background
) -> None:
    """``lockgate stop --savepoint --url``: execute() returns when the job ended and the
    script's process exits next; the stop request's answer, still on its way (here held
    back 1.5 s after the job ended), must reach the client first (a supervised driver
    on the multi-host cluster once answered with a closed connection). The same for a
    job started with execute_async() whose script exits after wait()."""
    job = tmp_path / "job.py"
    job.write_text(f"BACKGROUND = {background}\n" + SLOW_ANSWER_JOB)
    process, port = _run_with_rest(job, home, token_file)
    url = f"http://127.0.0.1:{port}"
    savepoint = tmp_path / "savepoint"

    def answers() -> bool:
        request = urllib.request.Request(
            f"{url}/api/v1/jobs", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    try:
        wait_until(answers, "the job answered at its --rest-port", 60)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            rc = cli.main(
                ["stop", "rest-options", "--savepoint", str(savepoint), "--url", url]
                + ["--token", TOKEN]
            )
        assert rc == 0, "the stop got no answer (see the captured stderr)"
        assert out.getvalue().strip() == str(savepoint)
        assert (savepoint / "_metadata").exists()
        assert process.wait(60) == 0
    finally:
        _end(process)


def test_rest_settings_come_from_the_environment_and_refuse_a_weak_or_shared_token(
    tmp_path, monkeypatch, token_file
) -> None:
    for name in (rest_settings.BIND_ENV, rest_settings.PORT_ENV, rest_settings.TOKEN_FILE_ENV):
        monkeypatch.delenv(name, raising=False)
    default = rest_settings.rest_settings("127.0.0.1", 0)
    assert (default.bind, default.port) == ("127.0.0.1", 0) and len(default.token) >= 32
    assert default.token not in repr(default)
    monkeypatch.setenv(rest_settings.BIND_ENV, "0.0.0.0")
    monkeypatch.setenv(rest_settings.PORT_ENV, "8123")
    monkeypatch.setenv(rest_settings.TOKEN_FILE_ENV, token_file)
    given = rest_settings.rest_settings("127.0.0.1", 0)
    assert (given.bind, given.port, given.token) == ("0.0.0.0", 8123, TOKEN)
    monkeypatch.setenv(rest_settings.PORT_ENV, "http")
    with pytest.raises(lg_errors.ConfigurationError, match="LOCKGATE_REST_PORT"):
        rest_settings.rest_settings("127.0.0.1", 0)
    monkeypatch.delenv(rest_settings.PORT_ENV)
    weak = tmp_path / "weak"
    weak.write_text("short\n")
    weak.chmod(0o600)
    monkeypatch.setenv(rest_settings.TOKEN_FILE_ENV, str(weak))
    with pytest.raises(lg_errors.ConfigurationError, match="at least 24 characters"):
        rest_settings.rest_settings("127.0.0.1", 0)
    os.chmod(token_file, 0o640)
    monkeypatch.setenv(rest_settings.TOKEN_FILE_ENV, token_file)
    with pytest.raises(lg_errors.ConfigurationError, match="chmod 600") as refused:
        rest_settings.rest_settings("127.0.0.1", 0)
    assert TOKEN not in str(refused.value)
    monkeypatch.setenv(rest_settings.TOKEN_FILE_ENV, str(tmp_path / "missing"))
    with pytest.raises(lg_errors.ConfigurationError, match="cannot read it"):
        rest_settings.rest_settings("127.0.0.1", 0)

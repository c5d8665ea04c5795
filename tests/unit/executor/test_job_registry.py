"""The per-machine registry of running jobs and its control channel
(``lockgate.executor.job_registry``), with a fake in-process ``JobControl``.

The command line uses this channel to take savepoints of running jobs (M-S1)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import stat
import subprocess
import sys
import threading
from typing import Any

import pytest

from conftest import BackgroundJob, wait_until
from lockgate.errors import ConfigurationError
from lockgate.executor import job_registry
from lockgate.executor.job_registry import (
    JobCommandError,
    JobInfo,
    JobNotFoundError,
    JobUnreachableError,
    find_job,
    list_jobs,
    register_job,
    send_command,
)


class FakeControl:
    """Records every call; ``error`` makes the calls raise; ``release`` (when set up)
    makes ``stop_with_savepoint`` wait for it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.error: BaseException | None = None
        self.release: threading.Event | None = None

    def trigger_savepoint(self, path: str, timeout: float | None = None) -> str:
        self.calls.append(("savepoint", path, timeout))
        if self.error is not None:
            raise self.error
        return os.path.join(path, "savepoint-1")

    def stop_with_savepoint(
        self, path: str, drain: bool = False, timeout: float | None = None
    ) -> str:
        self.calls.append(("stop", path, drain, timeout))
        if self.release is not None:
            assert self.release.wait(20), "the test never released the stop"
        if self.error is not None:
            raise self.error
        return os.path.join(path, "savepoint-2")

    def cancel(self) -> None:
        self.calls.append(("cancel",))


@pytest.fixture
def home(tmp_path, monkeypatch) -> str:
    folder = str(tmp_path / "home")
    monkeypatch.setenv(job_registry.HOME_ENV, folder)
    return folder


def dead_pid() -> int:
    """The pid of a process that has ended (and was reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    return child.pid


# ----------------------------------------------------------------------- registering


def test_register_writes_a_private_file_lists_the_job_and_close_removes_it(home) -> None:
    control = FakeControl()
    old_umask = os.umask(0)  # even a permissive umask gives mode 0600
    try:
        registration = register_job("running sums", control)
    finally:
        os.umask(old_umask)
    with registration:
        job = registration.job
        assert job is not None
        assert job.path == os.path.join(home, "jobs", f"{job.job_id}.json")
        assert stat.S_IMODE(os.stat(job.path).st_mode) == 0o600
        with open(job.path) as f:
            data = json.load(f)
        assert (data["job_id"], data["job_name"], data["pid"]) == (
            job.job_id,
            "running sums",
            os.getpid(),
        )
        assert job.endpoint.startswith("tcp://127.0.0.1:"), "never on another interface"
        assert [j.job_id for j in list_jobs()] == [job.job_id]
        assert list_jobs()[0] == job
    assert not os.path.exists(job.path)
    assert list_jobs() == []
    registration.close()  # idempotent
    assert control.calls == []


def test_an_unwritable_home_logs_a_warning_and_the_job_goes_on_unregistered(
    tmp_path, caplog
) -> None:
    home_file = tmp_path / "not-a-folder"
    home_file.write_text("")
    with caplog.at_level(logging.WARNING, logger=job_registry.__name__):
        registration = register_job("job", FakeControl(), home=str(home_file))
    assert registration.job is None and registration.job_id is None
    assert "could not register job 'job'" in caplog.text
    assert job_registry.HOME_ENV in caplog.text
    registration.close()


def test_register_rejects_a_bad_name_and_a_control_without_the_commands(home) -> None:
    with pytest.raises(ConfigurationError, match="job_name must be a non-empty string"):
        register_job("", FakeControl())

    class NoStop:
        def trigger_savepoint(self, path: str, timeout: float | None = None) -> str:
            return path

        def cancel(self) -> None:
            pass

    with pytest.raises(ConfigurationError, match="NoStop lacks stop_with_savepoint"):
        register_job("job", NoStop())  # type: ignore[arg-type]
    assert list_jobs() == []


# ----------------------------------------------------------------------- listing and finding


def test_find_by_id_or_unique_name_and_errors_name_the_candidates(home) -> None:
    with (
        register_job("alpha", FakeControl()) as a1,
        register_job("alpha", FakeControl()) as a2,
        register_job("beta", FakeControl()) as b,
    ):
        assert a1.job and a2.job and b.job
        assert find_job(a1.job.job_id) == a1.job
        assert find_job(a2.job.job_id) == a2.job
        assert find_job("beta") == b.job
        with pytest.raises(JobNotFoundError, match="2 running jobs are named 'alpha'") as e:
            find_job("alpha")
        assert a1.job.job_id in str(e.value) and a2.job.job_id in str(e.value)
        assert b.job.job_id not in str(e.value)
        with pytest.raises(
            JobNotFoundError, match="no running job has the id or name 'gamma'"
        ) as e:
            find_job("gamma")
        assert all(j.job_id in str(e.value) for j in (a1.job, a2.job, b.job))
    with pytest.raises(JobNotFoundError, match="no lockgate job is running"):
        find_job("beta")
    with pytest.raises(ConfigurationError, match="id or name"):
        find_job("")


def test_entries_of_ended_processes_and_reused_pids_are_removed(home) -> None:
    with register_job("live", FakeControl()) as live:
        assert live.job is not None
        folder = os.path.dirname(live.job.path)
        ended = dataclasses.replace(
            live.job, job_id="ended", pid=dead_pid(), path=os.path.join(folder, "ended.json")
        )
        # this process's pid, but another process's start time: the pid was reused
        reused = dataclasses.replace(
            live.job,
            job_id="reused",
            pid_start=(live.job.pid_start or 0) + 1,
            path=os.path.join(folder, "reused.json"),
        )
        for job in (ended, reused):
            with open(job.path, "w") as f:
                f.write(job.to_json())
        assert [j.job_id for j in list_jobs()] == [live.job.job_id]
        assert not os.path.exists(ended.path)
        assert not os.path.exists(reused.path)
        assert os.path.exists(live.job.path)


def test_a_malformed_registration_file_is_skipped_with_a_warning_and_kept(home, caplog) -> None:
    with register_job("good", FakeControl()) as good:
        assert good.job is not None
        bad = os.path.join(os.path.dirname(good.job.path), "bad.json")
        with open(bad, "w") as f:
            f.write('{"job_id": 3}')
        with caplog.at_level(logging.WARNING, logger=job_registry.__name__):
            assert [j.job_id for j in list_jobs()] == [good.job.job_id]
        assert "malformed registration file" in caplog.text and "job_id" in caplog.text
        assert os.path.exists(bad), "not ours to delete"


# ----------------------------------------------------------------------- commands


def test_m_s1_commands_reach_the_control_and_their_results_come_back(home) -> None:
    control = FakeControl()
    with register_job("job", control) as registration:
        job = find_job("job")
        assert send_command(job, "savepoint", path="/sp/1") == "/sp/1/savepoint-1"
        assert send_command(job, "savepoint", path="/sp/2", timeout=7) == "/sp/2/savepoint-1"
        assert send_command(job, "stop", path="/sp/3", drain=True) == "/sp/3/savepoint-2"
        assert send_command(job, "cancel") is None
    assert control.calls == [
        ("savepoint", "/sp/1", None),
        ("savepoint", "/sp/2", 7.0),
        ("stop", "/sp/3", True, None),
        ("cancel",),
    ]
    assert registration.rejected == {}


def test_a_failure_raised_by_the_job_comes_back_with_its_message(home) -> None:
    control = FakeControl()
    control.error = RuntimeError("checkpoint storage is full")
    with (
        register_job("job", control),
        pytest.raises(
            JobCommandError, match="savepoint failed: RuntimeError: checkpoint storage is full"
        ) as e,
    ):
        send_command(find_job("job"), "savepoint", path="/sp")
    assert e.value.error_type == "RuntimeError"


def test_the_job_checks_the_arguments_it_receives(home) -> None:
    control = FakeControl()
    with register_job("job", control):
        job = find_job("job")
        with pytest.raises(JobCommandError, match="savepoint path must be a non-empty string"):
            send_command(job, "savepoint", path="")
        with pytest.raises(JobCommandError, match="drain must be true or false"):
            send_command(job, "stop", path="/sp", drain="yes")
        with pytest.raises(JobCommandError, match="takes no colour"):
            send_command(job, "cancel", colour="red")
    assert control.calls == []


def test_send_command_rejects_bad_input_before_sending(home) -> None:
    with register_job("job", FakeControl()):
        job = find_job("job")
        with pytest.raises(ConfigurationError, match="unknown command 'pause'"):
            send_command(job, "pause")
        with pytest.raises(ConfigurationError, match="timeout must be seconds > 0"):
            send_command(job, "savepoint", path="/sp", timeout=-1)
        with pytest.raises(ConfigurationError, match="job must be a JobInfo"):
            send_command("job", "cancel")  # type: ignore[arg-type]


def test_a_request_under_a_wrong_secret_is_rejected_and_never_reaches_the_job(home) -> None:
    control = FakeControl()
    with register_job("job", control) as registration:
        forged = dataclasses.replace(find_job("job"), secret=b"\x07" * 32)
        with pytest.raises(
            JobUnreachableError, match="rejected the cancel request: message authentication failed"
        ):
            send_command(forged, "cancel")
        assert registration.rejected["unauthenticated"] == 1
        assert send_command(find_job("job"), "cancel") is None, "the server goes on"
    assert control.calls == [("cancel",)]


def test_close_lets_a_command_in_flight_answer_and_refuses_new_ones(home) -> None:
    control = FakeControl()
    control.release = threading.Event()
    registration = register_job("job", control)
    job = find_job("job")
    stop = BackgroundJob(lambda: send_command(job, "stop", path="/sp"), name="test stop")
    closing = None
    try:
        wait_until(lambda: len(control.calls) == 1, "the stop reached the control")
        closing = BackgroundJob(registration.close, name="test close")
        with pytest.raises(JobCommandError, match="takes no more commands"):
            wait_until(
                lambda: registration._server is not None and registration._server._closing.is_set(),
                "close started",
            )
            send_command(job, "savepoint", path="/sp2")
        assert not closing.done.is_set(), "close waits for the stop in flight"
    finally:
        control.release.set()
        assert stop.wait(10) and (closing is None or closing.wait(10))
    assert stop.error is None and stop.result == "/sp/savepoint-2"
    assert not os.path.exists(job.path)
    assert [c[0] for c in control.calls] == ["stop"]


def test_a_client_stops_waiting_when_the_job_ends_or_unregisters(home, monkeypatch) -> None:
    with register_job("job", FakeControl()):
        job = find_job("job")
    # closed: nothing listens on job.endpoint any more
    with pytest.raises(JobUnreachableError, match="ended before answering the cancel"):
        send_command(dataclasses.replace(job, pid=dead_pid()), "cancel")
    monkeypatch.setattr(job_registry.client, "GONE_GRACE_S", 0.1)
    with pytest.raises(JobUnreachableError, match="stopped taking commands before answering"):
        send_command(job, "cancel")


def test_a_client_stops_waiting_when_the_timeout_passes(home, monkeypatch) -> None:
    control = FakeControl()
    control.release = threading.Event()
    monkeypatch.setattr(job_registry.client, "REPLY_GRACE_S", 0.0)
    with register_job("job", control):
        try:
            with pytest.raises(
                JobUnreachableError, match=r"did not answer the stop request within 0.2s"
            ):
                send_command(find_job("job"), "stop", path="/sp", timeout=0.2)
        finally:
            control.release.set()
    assert control.calls == [("stop", "/sp", False, 0.2)], "the job got the timeout too"


def test_job_info_round_trips_through_json_and_rejects_malformed_files(tmp_path) -> None:
    job = JobInfo(
        job_id="abc",
        job_name="j",
        pid=1,
        pid_start=5,
        endpoint="tcp://127.0.0.1:1",
        started_at=1.5,
        path=str(tmp_path / "abc.json"),
        secret=b"s" * 32,
    )
    assert JobInfo.from_json(job.to_json(), job.path) == job
    assert "secret" not in repr(job)
    with pytest.raises(ValueError, match="'pid'"):
        JobInfo.from_json(json.dumps({**json.loads(job.to_json()), "pid": "1"}), job.path)
    with pytest.raises(ValueError, match="too short"):
        JobInfo.from_json(json.dumps({**json.loads(job.to_json()), "secret": "00"}), job.path)

"""``lockgate run --detach``: start a job file in the background and say where it is.

The job runs as ``python -m lockgate.cli run ... JOB ARGS`` in a process of its own,
in a new session (a Ctrl-C or a closed terminal does not reach it), with standard
input from ``/dev/null`` and standard output and error appended to a private log file
``$LOCKGATE_HOME/logs/<time>-<job file>-<pid>.log`` (mode 0600 in a 0700 folder). The
command waits until the job registers in this machine's registry (at most
``start_timeout`` seconds), then prints the job's id, name, pid, dashboard URL and log
file and returns 0. When the process ends before registering, or the wait runs out,
it raises :class:`DetachError` with the end of the log; a job still starting is left
running (its pid is in the message, to stop it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from datetime import datetime

from ..executor import job_registry
from ..executor.job_registry import JobInfo

LOGS_FOLDER = "logs"
#: default seconds ``--detach`` waits for the job to register (a Spark session's start
#: takes a while)
START_TIMEOUT_S = 180.0
#: characters of the log shown when the start fails
LOG_TAIL = 3000
#: how often the registry is read while waiting (seconds)
POLL_S = 0.1


class DetachError(Exception):
    """The detached job did not start; the message says why and where its log is."""


def logs_folder() -> str:
    """``$LOCKGATE_HOME/logs``, created private (0700) if missing; raises
    :class:`DetachError` when it is not private."""
    folder = os.path.join(job_registry.lockgate_home(), LOGS_FOLDER)
    os.makedirs(job_registry.lockgate_home(), mode=0o700, exist_ok=True)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    st = os.stat(folder)
    if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o077):
        raise DetachError(
            f"the log folder {folder} is not private (mode {oct(st.st_mode & 0o777)}, owner "
            f"{st.st_uid}); run 'chmod 700 {folder}' or point {job_registry.HOME_ENV} at a "
            "private folder"
        )
    return folder


def open_log(job_path: str) -> tuple[str, int]:
    """A new private log file (0600) for a detached run of ``job_path``: (path, fd)."""
    stem = os.path.splitext(os.path.basename(job_path))[0] or "job"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = os.path.join(logs_folder(), f"{stamp}-{stem}-{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return path, fd


def _tail(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return "(no log)"
    return text[-LOG_TAIL:].rstrip() or "(the log is empty)"


def _registered(pid: int) -> JobInfo | None:
    for job in job_registry.list_jobs():
        if job.pid == pid:
            return job
    return None


def start_detached(run_args: list[str], job_path: str, start_timeout: float) -> int:
    """Start ``lockgate run RUN_ARGS`` (the options without ``--detach``, then the job
    file and its arguments) in the background, wait for its job to register and print
    where it is; return the exit code (0). Raises :class:`DetachError`."""
    log_path, fd = open_log(job_path)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "lockgate.cli", "run", *run_args],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(fd)
    pause = threading.Event()
    deadline = time.monotonic() + start_timeout
    while (job := _registered(process.pid)) is None:
        code = process.poll()
        if code is not None:
            raise DetachError(
                f"the job ended (exit code {code}) before it registered; its log {log_path} "
                f"ends with:\n{_tail(log_path)}"
            )
        if time.monotonic() > deadline:
            raise DetachError(
                f"the job did not register within {start_timeout:g}s (is the job file "
                f"calling env.execute?); it is still starting as pid {process.pid} (stop it "
                f"with 'kill {process.pid}'); raise --start-timeout to wait longer; its log "
                f"{log_path} ends with:\n{_tail(log_path)}"
            )
        pause.wait(POLL_S)
    rest_url = job.rest_url
    print(f"job {job.job_id} ({job.job_name!r}) runs in the background, pid {job.pid}")
    if rest_url:
        print(f"dashboard: {rest_url}/")
        print(f"  log in with the token 'lockgate token {job.job_id}' prints")
    else:
        print("dashboard: none (the job serves no REST API: ExecutionConfig.rest_enabled)")
    print(f"log: {log_path}")
    return 0

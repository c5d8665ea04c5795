"""The job-control commands of the command line: ``list``, ``status``, ``savepoint``,
``stop``, ``cancel`` and ``token``.

With ``--url`` (or ``$LOCKGATE_URL``) a command talks to the job's REST API
(:mod:`lockgate.cli.remote`), from any machine that reaches it, with the job's token
(``--token`` or ``$LOCKGATE_TOKEN``). Without, it finds the job in this machine's
registry (:mod:`lockgate.executor.job_registry`): ``savepoint``, ``stop`` and ``cancel``
go through the job's control channel as before; ``status`` reads the job's REST API at
the address its registration records (or says what the registry knows when the job
serves none). The token is printed by ``lockgate token JOB`` only, never elsewhere.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..executor import job_registry
from ..executor.job_registry import JobInfo
from ..job.progress import format_progress
from .remote import URL_ENV, RemoteError, RestClient, savepoint_wait, settle_rates


class UsageError(Exception):
    """A problem with the command line; the message is printed, the exit code is 2."""


@dataclass(frozen=True)
class Remote:
    """``--url``/``--token`` as given (None: not given; the environment may have them)."""

    url: str | None = None
    token: str | None = None

    @property
    def wanted(self) -> bool:
        """Whether the command goes to a REST API rather than the local registry."""
        return bool(self.url or os.environ.get(URL_ENV))

    def client(self) -> RestClient:
        return RestClient.connect(self.url, self.token)


def rest_of(info: JobInfo) -> RestClient | None:
    """The REST API a locally registered job serves, from its registration (None when it
    serves none)."""
    url, token = info.rest_url, info.rest_token
    if not url or not token:
        return None
    return RestClient(url.rstrip("/"), token)


def _when(timestamp: Any) -> str:
    if not isinstance(timestamp, (int, float)):
        return "?"
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip())


def savepoint_target(path: str, remote: bool) -> str:
    """A savepoint PATH as the job should see it: local paths absolute (the job's working
    folder may differ from ours), URLs (``s3://...``) unchanged. For a job on another
    machine a relative path means nothing: it must be absolute or a URL."""
    if not path:
        raise UsageError("the savepoint PATH is empty; give a folder")
    if "://" in path:
        return path
    if remote:
        if not os.path.isabs(path):
            raise UsageError(
                f"the savepoint PATH {path!r} is relative; with --url the job resolves it on "
                "its own machine: give an absolute path there or a URL (s3://...)"
            )
        return path
    return os.path.abspath(os.path.expanduser(path))


# ----------------------------------------------------------------------------- list


def list_command(remote: Remote) -> int:
    """``lockgate list``: print the running jobs; return the exit code."""
    if remote.wanted:
        client = remote.client()
        jobs = client.jobs()
        if not jobs:
            print(f"no job runs at {client.url}", file=sys.stderr)
            return 0
        rows = [("ID", "NAME", "STATUS", "STARTED")] + [
            (
                str(j.get("id")),
                str(j.get("name")),
                str(j.get("status")),
                _when(j.get("started_at")),
            )
            for j in jobs
        ]
        _table(rows)
        return 0
    local = job_registry.list_jobs()
    if not local:
        print(
            f"no lockgate job is running (registry: {job_registry.jobs_folder()})", file=sys.stderr
        )
        return 0
    _table(
        [("ID", "NAME", "PID", "STARTED")]
        + [(j.job_id, j.job_name, str(j.pid), _when(j.started_at)) for j in local]
    )
    return 0


# ----------------------------------------------------------------------------- status


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return "?"
    s = int(seconds)
    return (
        f"{s // 3600}h {s // 60 % 60:02d}m {s % 60:02d}s"
        if s >= 3600
        else f"{s // 60}m {s % 60:02d}s"
    )


def print_status(client: RestClient, job_id: str) -> None:
    """Print a job's status and progress read from its REST API."""
    settle_rates(client, job_id)
    job = client.get(f"/jobs/{job_id}")
    progress = client.get(f"/jobs/{job_id}/progress")
    if not isinstance(job, dict) or not isinstance(progress, dict):
        raise RemoteError(f"{client.url}: unexpected reply for job {job_id}; is it lockgate?")
    graph = job.get("graph") if isinstance(job.get("graph"), dict) else {}
    vertices = graph.get("vertices", []) if isinstance(graph, dict) else []
    print(f"job       {job.get('id')} ({job.get('name')!r})")
    print(f"status    {job.get('status')}")
    print(f"started   {_when(job.get('started_at'))} (up {_duration(job.get('uptime_s'))})")
    print(f"restarts  {job.get('restarts', 0)}")
    print(f"tasks     {len(vertices)}")
    print(f"rest      {client.url}")
    print(f"progress  {format_progress(progress)}")


def status_command(job: str, remote: Remote) -> int:
    """``lockgate status JOB``: print the job's status and progress; return the exit
    code."""
    if remote.wanted:
        client = remote.client()
        print_status(client, str(client.find_job(job).get("id")))
        return 0
    info = job_registry.find_job(job)
    local = rest_of(info)
    if local is None:
        print(f"job       {info.job_id} ({info.job_name!r})")
        print("status    RUNNING (registered on this machine)")
        print(f"started   {_when(info.started_at)} (up {_duration(time.time() - info.started_at)})")
        print(f"pid       {info.pid}")
        print("rest      none: the job serves no REST API (ExecutionConfig.rest_enabled), so")
        print("          its progress is in its log only")
        return 0
    print_status(local, local.find_job(info.job_id).get("id") or info.job_id)
    return 0


# ----------------------------------------------------------------------------- savepoint, stop


def savepoint_command(job: str, path: str, timeout: float | None, remote: Remote) -> int:
    """``lockgate savepoint JOB PATH``: print the savepoint's folder; return the exit
    code."""
    target = savepoint_target(path, remote.wanted)
    if remote.wanted:
        client = remote.client()
        job_id = client.find_job(job).get("id")
        reply = client.post(
            f"/jobs/{job_id}/savepoints",
            {"path": target, "timeout": timeout},
            wait=savepoint_wait(timeout),
        )
        print(_location(reply, client))
        return 0
    info = job_registry.find_job(job)
    print(job_registry.send_command(info, job_registry.SAVEPOINT, path=target, timeout=timeout))
    return 0


def _location(reply: Any, client: RestClient) -> str:
    if not isinstance(reply, dict) or not isinstance(reply.get("location"), str):
        raise RemoteError(f"{client.url}: the reply names no savepoint location: {reply!r}")
    return str(reply["location"])


def stop_command(
    job: str,
    savepoint: str | None,
    drain: bool,
    timeout: float | None,
    remote: Remote,
) -> int:
    """``lockgate stop JOB``: take a savepoint, then stop the job, and print the
    savepoint's folder; return the exit code. The savepoint goes into ``savepoint``
    when given, else into the job's default savepoint folder
    (``checkpoint_config.savepoint_dir`` / ``LOCKGATE_SAVEPOINT_DIR`` where the job
    runs); a job without one refuses, saying so, and keeps running (``lockgate cancel
    JOB`` stops it without a savepoint). As Flink's ``stop``: a stop always takes a
    savepoint."""
    target = None if savepoint is None else savepoint_target(savepoint, remote.wanted)
    args: dict[str, Any] = {"drain": drain}
    if target is not None:
        args["path"] = target
    if remote.wanted:
        client = remote.client()
        job_id = client.find_job(job).get("id")
        reply = client.post(
            f"/jobs/{job_id}/stop", {**args, "timeout": timeout}, wait=savepoint_wait(timeout)
        )
        print(_location(reply, client))
        return 0
    info = job_registry.find_job(job)
    print(job_registry.send_command(info, job_registry.STOP, timeout=timeout, **args))
    return 0


def cancel_command(job: str, remote: Remote, timeout: float | None = None) -> int:
    """``lockgate cancel JOB``: cancel the job without a savepoint; return at once (the
    job ends shortly after). ``timeout`` bounds the wait for a local job's answer (a
    remote one answers within the request timeout)."""
    if remote.wanted:
        client = remote.client()
        found = client.find_job(job)
        client.post(f"/jobs/{found.get('id')}/cancel")
        print(f"cancelling job {found.get('id')} ({found.get('name')})")
        return 0
    info = job_registry.find_job(job)
    job_registry.send_command(info, job_registry.CANCEL, timeout=timeout)
    print(f"cancelling job {info.job_id} ({info.job_name})")
    return 0


# ----------------------------------------------------------------------------- token


def token_command(job: str, remote: Remote) -> int:
    """``lockgate token JOB``: print the REST token of a job of this machine (the only
    place lockgate prints it: for the dashboard's login, or for ``--token`` on another
    machine); return the exit code."""
    if remote.url:
        raise UsageError(
            "lockgate token reads the token from this machine's registry and takes no --url; "
            "run it on the job's machine"
        )
    info = job_registry.find_job(job)
    token = info.rest_token
    if not token:
        raise UsageError(
            f"job {info.job_id} ({info.job_name!r}) serves no REST API, so it has no token "
            "(ExecutionConfig.rest_enabled is off)"
        )
    print(token)
    return 0

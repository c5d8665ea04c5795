"""The registry's files: where they live (``<home>/jobs``, ``$LOCKGATE_HOME``), that
the folder is private, how a registration is written (mode 0600, atomically) and read,
whether its process still runs, and finding a job by id or name. Also the errors and
the constants both sides of the control channel share."""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigurationError, LockgateError

log = logging.getLogger(__name__)

HOME_ENV = "LOCKGATE_HOME"
DEFAULT_HOME = os.path.join("~", ".lockgate")
JOBS_FOLDER = "jobs"
#: the commands a job accepts
SAVEPOINT, STOP, CANCEL = "savepoint", "stop", "cancel"
COMMANDS = (SAVEPOINT, STOP, CANCEL)
POLL_MS = 200
PROTOCOL = 1
REJECTED = b"lockgate-rejected"
FILE_MODE = 0o600


class JobControlError(LockgateError, RuntimeError):
    """A running job could not be found, reached or controlled."""


class JobNotFoundError(JobControlError, LookupError):
    """No running job has the given id or name, or the name is ambiguous."""


class JobUnreachableError(JobControlError):
    """The job did not answer: it ended, timed out or rejected the request."""


class JobCommandError(JobControlError):
    """The job ran the command and it failed; the message is the job's error."""

    def __init__(self, message: str, *, error_type: str) -> None:
        super().__init__(message)
        self.error_type = error_type


@dataclass(frozen=True)
class JobInfo:
    """One registered job, as its registration file describes it."""

    job_id: str
    job_name: str
    pid: int
    #: the start time of process ``pid`` (clock ticks since boot; None without /proc), so a
    #: reused pid is not mistaken for the job
    pid_start: int | None
    endpoint: str
    started_at: float
    path: str
    secret: bytes = field(repr=False)
    #: the job's REST API (``http://HOST:PORT``), None when it serves none (or an older
    #: lockgate wrote the file)
    rest_url: str | None = None
    #: the REST API's bearer token (``JobClient.rest_token``), None with ``rest_url``
    rest_token: str | None = field(default=None, repr=False)

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": PROTOCOL,
                "job_id": self.job_id,
                "job_name": self.job_name,
                "pid": self.pid,
                "pid_start": self.pid_start,
                "endpoint": self.endpoint,
                "started_at": self.started_at,
                "secret": self.secret.hex(),
                "rest_url": self.rest_url,
                "rest_token": self.rest_token,
            }
        )

    @classmethod
    def from_json(cls, text: str, path: str) -> JobInfo:
        """Parse a registration file; raises ``ValueError`` naming what is malformed."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        expected: dict[str, type | tuple[type, ...]] = {
            "job_id": str,
            "job_name": str,
            "pid": int,
            "endpoint": str,
            "started_at": (int, float),
            "secret": str,
        }
        for key, kind in expected.items():
            if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
                raise ValueError(f"field {key!r} is missing or has the wrong type")
        pid_start = data.get("pid_start")
        if pid_start is not None and not isinstance(pid_start, int):
            raise ValueError("field 'pid_start' has the wrong type")
        for key in ("rest_url", "rest_token"):  # absent in files of older versions
            if data.get(key) is not None and not isinstance(data[key], str):
                raise ValueError(f"field {key!r} has the wrong type")
        secret = bytes.fromhex(data["secret"])
        if len(secret) < 16:
            raise ValueError("field 'secret' is too short")
        return cls(
            job_id=data["job_id"],
            job_name=data["job_name"],
            pid=data["pid"],
            pid_start=pid_start,
            endpoint=data["endpoint"],
            started_at=float(data["started_at"]),
            path=path,
            secret=secret,
            rest_url=data.get("rest_url"),
            rest_token=data.get("rest_token"),
        )


# --------------------------------------------------------------------------- the registry folder


def lockgate_home(home: str | os.PathLike[str] | None = None) -> str:
    """The lockgate home folder: ``home`` if given, else ``$LOCKGATE_HOME``, else
    ``~/.lockgate`` (absolute; not created here)."""
    chosen = os.fspath(home) if home is not None else (os.environ.get(HOME_ENV) or DEFAULT_HOME)
    return os.path.abspath(os.path.expanduser(chosen))


def jobs_folder(home: str | os.PathLike[str] | None = None) -> str:
    """The folder of the registration files (``<home>/jobs``)."""
    return os.path.join(lockgate_home(home), JOBS_FOLDER)


class UnsafeRegistryError(JobControlError):
    """The registry folder can be written by other users."""


def check_private_folder(home: str | os.PathLike[str] | None = None) -> None:
    """Raise :class:`UnsafeRegistryError` unless the registry folder is private:
    ``<home>/jobs`` (when it exists) owned by this user and not writable by group or
    others, ``<home>`` owned by this user or root and not writable by others unless
    sticky (like ``/tmp``). Anyone who can write there could plant or swap a
    registration file and receive the commands meant for a job."""
    if not hasattr(os, "getuid"):
        return  # no POSIX ownership to check
    uid = os.getuid()
    home_path, folder = lockgate_home(home), jobs_folder(home)
    for path, own_only in ((home_path, False), (folder, True)):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        owners = (uid,) if own_only else (uid, 0)
        if st.st_uid not in owners:
            raise UnsafeRegistryError(
                f"the job registry folder {path} belongs to user {st.st_uid}, not to you "
                f"({uid}); anyone who owns it can redirect commands: remove it or point "
                f"{HOME_ENV} at a folder of your own"
            )
        writable = st.st_mode & (0o022 if own_only else 0o002)
        if writable and not (not own_only and st.st_mode & 0o1000):
            raise UnsafeRegistryError(
                f"the job registry folder {path} is writable by "
                f"{'other users' if st.st_mode & 0o002 else 'its group'} (mode "
                f"{stat.filemode(st.st_mode)}); anyone who can write there can redirect "
                f"commands: run 'chmod go-w {path}' or point {HOME_ENV} at a private folder"
            )


def write_private(path: str, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600, atomically (a reader sees all or nothing)."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # exactly 0600, whatever the umask
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in ticks) of process ``pid`` from /proc, or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def process_start(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def is_alive(job: JobInfo) -> bool:
    """Whether the job's process still runs (not a zombie, not a reused pid)."""
    stat = _proc_stat(job.pid)
    if stat is not None:
        state, start = stat
        return state not in ("Z", "X") and (job.pid_start is None or start == job.pid_start)
    if os.path.isdir("/proc/self"):
        return False  # /proc exists and has no such process
    try:
        os.kill(job.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: str) -> JobInfo | None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None  # removed while we listed
    except OSError as e:
        log.debug("job registry: cannot read %s: %s", path, e)
        return None
    try:
        return JobInfo.from_json(text, path)
    except ValueError as e:
        log.warning(
            "job registry: ignoring the malformed registration file %s (%s); "
            "delete it if no job uses it",
            path,
            e,
        )
        return None


def list_jobs(home: str | os.PathLike[str] | None = None) -> list[JobInfo]:
    """The running registered jobs of this machine's ``home``, oldest first. Entries of
    processes that are gone are removed (a job that crashed leaves one behind)."""
    folder = jobs_folder(home)
    check_private_folder(home)
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise JobControlError(
            f"cannot read the job registry {folder}: {e}; check {HOME_ENV}"
        ) from e
    jobs = []
    for name in names:
        if name.startswith(".") or not name.endswith(".json"):
            continue
        job = _read(os.path.join(folder, name))
        if job is None:
            continue
        if is_alive(job):
            jobs.append(job)
            continue
        log.info("job registry: removing %s (process %d is gone)", job.path, job.pid)
        try:
            os.unlink(job.path)
        except OSError:
            pass
    return sorted(jobs, key=lambda j: (j.started_at, j.job_id))


def _describe(jobs: list[JobInfo]) -> str:
    return ", ".join(f"{j.job_id} ({j.job_name!r}, pid {j.pid})" for j in jobs)


def find_job(ref: str, home: str | os.PathLike[str] | None = None) -> JobInfo:
    """The running job whose id is ``ref``, else the one job named ``ref``.

    Raises ``JobNotFoundError`` when no running job matches (listing the running
    ones) or when several are named ``ref`` (listing their ids)."""
    if not isinstance(ref, str) or not ref:
        raise ConfigurationError(f"a job is named by its id or name, got {ref!r}")
    jobs = list_jobs(home)
    by_id = [j for j in jobs if j.job_id == ref]
    if by_id:
        return by_id[0]
    named = [j for j in jobs if j.job_name == ref]
    if len(named) == 1:
        return named[0]
    if named:
        raise JobNotFoundError(
            f"{len(named)} running jobs are named {ref!r}: {_describe(named)}; "
            "name the job by its id"
        )
    running = (
        f"running jobs: {_describe(jobs)}"
        if jobs
        else f"no lockgate job is running (registry: {jobs_folder(home)})"
    )
    raise JobNotFoundError(f"no running job has the id or name {ref!r}; {running}")


def check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigurationError(f"timeout must be seconds > 0 (or None), got {timeout!r}")
    return float(timeout)

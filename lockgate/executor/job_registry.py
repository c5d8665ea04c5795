"""A per-machine registry of running jobs, so another process can find and control them.

A running job registers itself (:func:`register_job`): a small control server
thread listens on ``127.0.0.1`` (never on another interface) and the file
``<home>/jobs/<job_id>.json`` records the job id, job name, pid, endpoint,
start time and a secret generated for this job. ``<home>`` is
``$LOCKGATE_HOME``, by default ``~/.lockgate``. The file is created with mode
0600 (readable by its user only) and appears atomically, complete or not at
all; :meth:`JobRegistration.close` stops the server and removes it.

Another process (the ``lockgate`` command line) lists the running jobs
(:func:`list_jobs`), picks one by id or name (:func:`find_job`) and sends it a
command (:func:`send_command`): ``savepoint``, ``stop`` (with a savepoint) or
``cancel``. Requests and replies are JSON sealed with an HMAC under the job's
secret (:mod:`lockgate.executor.spark.auth`): a request that fails
authentication never reaches the job; its sender gets an unauthenticated
"rejected" answer. Nothing received is ever unpickled. Each request carries a
random id and its send time under the MAC; the job runs a request only once
(it remembers the ids of the last ``REQUEST_WINDOW_S`` seconds) and only while it
is fresh, so a captured request cannot be replayed. The server disconnects a peer
sending a frame over ``REGISTRY_REQUEST_LIMIT`` bytes.

The registry folder must be private: ``<home>/jobs`` owned by the user and
writable by nobody else, ``<home>`` owned by the user (or root) and not writable by
others unless sticky. A job does not register in an unsafe folder (it logs a
warning saying how to fix it) and :func:`list_jobs` refuses to read one: anyone who
can write there could plant a registration that points the command line at them.

Registering never stops a job: when it fails (an unwritable home, no free
port) a warning is logged and the job runs without command-line control.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import queue
import secrets
import stat
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

import zmq

from ..errors import ConfigurationError, LockgateError
from .spark.auth import AuthenticationError, MalformedMessageError, MessageAuth, new_secret
from .spark.limits import (
    REGISTRY_REPLY_LIMIT,
    REGISTRY_REQUEST_LIMIT,
    DisconnectLog,
    bound,
)
from .spark.signals import PipeWaker

log = logging.getLogger(__name__)

HOME_ENV = "LOCKGATE_HOME"
DEFAULT_HOME = os.path.join("~", ".lockgate")
JOBS_FOLDER = "jobs"
#: the commands a job accepts
SAVEPOINT, STOP, CANCEL = "savepoint", "stop", "cancel"
COMMANDS = (SAVEPOINT, STOP, CANCEL)
#: how long ``JobRegistration.close`` waits for commands in flight to answer
CLOSE_DRAIN_S = 10.0
#: a client waits a command's own timeout plus this for the reply
REPLY_GRACE_S = 5.0
#: a client stops waiting this long after the job's registration file disappeared
GONE_GRACE_S = 2.0
_POLL_MS = 200
_PROTOCOL = 1
_REJECTED = b"lockgate-rejected"
_FILE_MODE = 0o600
#: a request older than this (or this far in the future) is refused; the job remembers
#: the ids of the requests it ran this long, so none runs twice
REQUEST_WINDOW_S = 60.0


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


class JobControl(Protocol):
    """What a registered job does on command (``JobClient`` implements it)."""

    def trigger_savepoint(self, path: str, timeout: float | None = None) -> str:
        """Take a savepoint into ``path``; return its folder; raise on failure."""
        ...

    def stop_with_savepoint(self, path: str, drain: bool = False,
                            timeout: float | None = None) -> str:
        """Take a savepoint into ``path``, then stop the job; return the savepoint folder."""
        ...

    def cancel(self) -> None:
        """Stop the job without a savepoint."""
        ...


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

    def to_json(self) -> str:
        return json.dumps({
            "version": _PROTOCOL, "job_id": self.job_id, "job_name": self.job_name,
            "pid": self.pid, "pid_start": self.pid_start, "endpoint": self.endpoint,
            "started_at": self.started_at, "secret": self.secret.hex()})

    @classmethod
    def from_json(cls, text: str, path: str) -> JobInfo:
        """Parse a registration file; raises ``ValueError`` naming what is malformed."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        expected: dict[str, type | tuple[type, ...]] = {
            "job_id": str, "job_name": str, "pid": int, "endpoint": str,
            "started_at": (int, float), "secret": str}
        for key, kind in expected.items():
            if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
                raise ValueError(f"field {key!r} is missing or has the wrong type")
        pid_start = data.get("pid_start")
        if pid_start is not None and not isinstance(pid_start, int):
            raise ValueError("field 'pid_start' has the wrong type")
        secret = bytes.fromhex(data["secret"])
        if len(secret) < 16:
            raise ValueError("field 'secret' is too short")
        return cls(job_id=data["job_id"], job_name=data["job_name"], pid=data["pid"],
                   pid_start=pid_start, endpoint=data["endpoint"],
                   started_at=float(data["started_at"]), path=path, secret=secret)


# --------------------------------------------------------------------------- the registry folder


def lockgate_home(home: str | os.PathLike[str] | None = None) -> str:
    """The lockgate home folder: ``home`` if given, else ``$LOCKGATE_HOME``, else
    ``~/.lockgate`` (absolute; not created here)."""
    chosen = os.fspath(home) if home is not None else (
        os.environ.get(HOME_ENV) or DEFAULT_HOME)
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
                f"{HOME_ENV} at a folder of your own")
        writable = st.st_mode & (0o022 if own_only else 0o002)
        if writable and not (not own_only and st.st_mode & 0o1000):
            raise UnsafeRegistryError(
                f"the job registry folder {path} is writable by "
                f"{'other users' if st.st_mode & 0o002 else 'its group'} (mode "
                f"{stat.filemode(st.st_mode)}); anyone who can write there can redirect "
                f"commands: run 'chmod go-w {path}' or point {HOME_ENV} at a private folder")


def _write_private(path: str, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600, atomically (a reader sees all or nothing)."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    try:
        os.fchmod(fd, _FILE_MODE)  # exactly 0600, whatever the umask
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


def _process_start(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def _alive(job: JobInfo) -> bool:
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
        log.warning("job registry: ignoring the malformed registration file %s (%s); "
                    "delete it if no job uses it", path, e)
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
            f"cannot read the job registry {folder}: {e}; check {HOME_ENV}") from e
    jobs = []
    for name in names:
        if name.startswith(".") or not name.endswith(".json"):
            continue
        job = _read(os.path.join(folder, name))
        if job is None:
            continue
        if _alive(job):
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
            "name the job by its id")
    running = (f"running jobs: {_describe(jobs)}" if jobs
               else f"no lockgate job is running (registry: {jobs_folder(home)})")
    raise JobNotFoundError(f"no running job has the id or name {ref!r}; {running}")


# --------------------------------------------------------------------------- the job's side


def _check_path(args: dict[str, Any]) -> str:
    path = args.get("path")
    if not isinstance(path, str) or not path:
        raise ConfigurationError(f"the savepoint path must be a non-empty string, got {path!r}")
    return path


def _check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout) or timeout <= 0):
        raise ConfigurationError(f"timeout must be seconds > 0 (or None), got {timeout!r}")
    return float(timeout)


def _run_command(control: JobControl, command: str, args: dict[str, Any]) -> Any:
    """Check ``args`` and run ``command`` on ``control``; returns its result."""
    allowed = {SAVEPOINT: {"path", "timeout"}, STOP: {"path", "drain", "timeout"},
               CANCEL: set()}
    if command not in allowed:
        raise ConfigurationError(f"unknown command {command!r}; use one of {', '.join(COMMANDS)}")
    unknown = set(args) - allowed[command]
    if unknown:
        raise ConfigurationError(f"command {command!r} takes no {', '.join(sorted(unknown))}")
    if command == CANCEL:
        control.cancel()
        return None
    path, timeout = _check_path(args), _check_timeout(args.get("timeout"))
    if command == SAVEPOINT:
        return control.trigger_savepoint(path, timeout=timeout)
    drain = args.get("drain", False)
    if not isinstance(drain, bool):
        raise ConfigurationError(f"drain must be true or false, got {drain!r}")
    return control.stop_with_savepoint(path, drain=drain, timeout=timeout)


class _ControlServer:
    """A ROUTER socket on 127.0.0.1 served by one thread; each command runs in a thread of
    its own (a savepoint takes a while), its reply goes back through the server thread."""

    def __init__(self, job_id: str, control: JobControl, auth: MessageAuth) -> None:
        self.job_id = job_id
        self.rejected: Counter[str] = Counter()
        self._control = control
        self._auth = auth
        self._replies: queue.Queue[list[bytes]] = queue.Queue()
        #: id -> expiry (monotonic) of the requests run lately: none runs twice
        self._seen: dict[str, float] = {}
        self._inflight: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._stop = threading.Event()
        self._waker = PipeWaker()
        # a context of its own: terminating it on close delivers the last replies before
        # the process may exit (a reply to "stop" is sent just before the job ends)
        self._context: Any = zmq.Context()
        try:
            self._socket: Any = self._context.socket(zmq.ROUTER)
            self._socket.setsockopt(zmq.LINGER, 0)
            bound(self._socket, REGISTRY_REQUEST_LIMIT)
            self._disconnects = DisconnectLog(self._socket, f"job control {job_id}",
                                              REGISTRY_REQUEST_LIMIT)
            port = self._socket.bind_to_random_port("tcp://127.0.0.1")
        except BaseException:
            self._context.destroy(linger=0)
            self._waker.close()
            raise
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self._thread = threading.Thread(target=self._serve, name=f"lockgate job control {job_id}",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._waker.fd, zmq.POLLIN)
        poller.register(self._disconnects.monitor, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(_POLL_MS))
                if self._disconnects.monitor in ready:
                    self._disconnects.drain()
                if self._socket in ready:
                    while True:
                        try:
                            frames = self._socket.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        try:
                            self._handle(frames)
                        except Exception:  # one bad request never stops the server
                            self.rejected["malformed"] += 1
                            log.exception("job control: failed to handle a request")
                if self._waker.fd in ready:
                    self._waker.drain()
                self._flush()
        finally:
            self._flush()
            self._disconnects.close()
            # the replies just sent leave before term() returns (or are dropped after 1s)
            self._socket.close(linger=1000)
            self._context.term()
            self._waker.close()

    def _flush(self) -> None:
        while True:
            try:
                frames = self._replies.get_nowait()
            except queue.Empty:
                return
            try:
                self._socket.send_multipart(frames, zmq.NOBLOCK)
            except zmq.ZMQError as e:
                log.warning("job control: could not send a reply: %s", e)

    def _reply(self, identity: bytes, body: dict[str, Any]) -> None:
        self._replies.put([identity, *self._auth.seal(json.dumps(body, default=str).encode())])
        self._waker.wake()

    def _handle(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            self.rejected["malformed"] += 1
            return
        identity, body = frames[0], frames[1:]
        try:
            (payload,) = self._auth.open(body, 1)
        except (AuthenticationError, MalformedMessageError) as e:
            self.rejected["unauthenticated"] += 1
            log.warning("job control: rejected a request that failed authentication")
            self._replies.put([identity, _REJECTED, str(e).encode()])
            return
        request = json.loads(bytes(payload))
        request_id = request.get("id") if isinstance(request, dict) else None
        if not isinstance(request_id, str):
            self.rejected["malformed"] += 1
            return
        if not self._fresh(identity, request_id, request.get("sent_at")):
            return
        command, args = request.get("command"), request.get("args")
        if request.get("job") != self.job_id:
            self._fail(identity, request_id, JobControlError(
                f"this is job {self.job_id}, not {request.get('job')!r}"))
        elif not isinstance(command, str) or not isinstance(args, dict):
            self._fail(identity, request_id, JobControlError("a request needs a command and args"))
        elif not self._start(identity, request_id, command, args):
            self._fail(identity, request_id, JobControlError(
                f"job {self.job_id} is ending and takes no more commands"))

    def _fresh(self, identity: bytes, request_id: str, sent_at: Any) -> bool:
        """Whether an authenticated request is new: sent within ``REQUEST_WINDOW_S`` and
        not run before. A replay is dropped; a stale request gets an error reply."""
        now = time.monotonic()
        for seen, expiry in list(self._seen.items()):
            if expiry < now:
                del self._seen[seen]
        if request_id in self._seen:
            self.rejected["replayed"] += 1
            log.warning("job control: dropped a replayed request")
            return False
        if (isinstance(sent_at, bool) or not isinstance(sent_at, (int, float))
                or not math.isfinite(sent_at) or abs(time.time() - sent_at) > REQUEST_WINDOW_S):
            self.rejected["stale"] += 1
            log.warning("job control: refused a request sent at %r, not within %.0fs of now",
                        sent_at, REQUEST_WINDOW_S)
            self._fail(identity, request_id, JobControlError(
                f"the request was not sent within {REQUEST_WINDOW_S:.0f}s of the job's clock "
                "(a replay, or a client of an older lockgate): send it again with this "
                "version's lockgate"))
            return False
        # remembered past the window in both directions, so no replay can be fresh again
        self._seen[request_id] = now + 2 * REQUEST_WINDOW_S
        return True

    def _fail(self, identity: bytes, request_id: str, error: BaseException) -> None:
        self._reply(identity, {"id": request_id, "ok": False,
                               "error_type": type(error).__name__, "error": str(error)})

    def _start(self, identity: bytes, request_id: str, command: str,
               args: dict[str, Any]) -> bool:
        """Run the command in a thread of its own; False (nothing runs) once closing."""
        worker = threading.Thread(target=self._execute, args=(identity, request_id, command, args),
                                  name=f"lockgate job control {self.job_id} {command}", daemon=True)
        with self._lock:  # close() sees every command started before it
            if self._closing.is_set():
                return False
            self._inflight.add(worker)
        worker.start()
        return True

    def _execute(self, identity: bytes, request_id: str, command: str,
                 args: dict[str, Any]) -> None:
        try:
            result = _run_command(self._control, command, args)
        except Exception as e:  # noqa: BLE001 - the failure is the reply
            log.info("job control: %s failed: %s", command, e)
            self._fail(identity, request_id, e)
        else:
            self._reply(identity, {"id": request_id, "ok": True, "result": result})
        finally:
            with self._lock:
                self._inflight.discard(threading.current_thread())

    def close(self, timeout: float) -> None:
        """Refuse new commands, let those in flight answer (up to ``timeout`` seconds),
        then stop the server thread."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._closing.set()
            waiting = [t for t in self._inflight if t is not threading.current_thread()]
        for t in waiting:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                log.warning("job control: %s still running after %.0fs; its caller gets no "
                            "answer", t.name, timeout)
        self._stop.set()
        self._waker.wake()
        self._thread.join()


class JobRegistration:
    """A job's entry in the registry; ``close()`` (idempotent, also on leaving a ``with``
    block and at interpreter exit) stops its control server and removes its file.

    ``job`` is None when registering failed (the job then runs without command-line
    control)."""

    def __init__(self, job: JobInfo | None, server: _ControlServer | None) -> None:
        self.job = job
        self._server = server
        self._closed = False
        self._lock = threading.Lock()
        if job is not None:
            atexit.register(self._remove_file)

    @property
    def job_id(self) -> str | None:
        return None if self.job is None else self.job.job_id

    @property
    def rejected(self) -> Counter[str]:
        """Requests the server dropped, by reason (``unauthenticated``, ``malformed``)."""
        return Counter() if self._server is None else Counter(self._server.rejected)

    def _remove_file(self) -> None:
        if self.job is None:
            return
        try:
            os.unlink(self.job.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("job registry: could not remove %s: %s", self.job.path, e)

    def close(self, timeout: float = CLOSE_DRAIN_S) -> None:
        """Answer the commands in flight (waiting up to ``timeout`` seconds), stop the
        control server, remove the registration file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._server is not None:
                self._server.close(timeout)
        finally:
            self._remove_file()
            atexit.unregister(self._remove_file)

    def __enter__(self) -> JobRegistration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"JobRegistration({self.job_id!r}, {state})"


def register_job(job_name: str, control: JobControl,
                 home: str | os.PathLike[str] | None = None) -> JobRegistration:
    """Make the running job ``job_name`` controllable from other processes of this machine
    (``lockgate list``, ``lockgate savepoint``, ``lockgate stop``) until the returned
    registration is closed: commands call ``control``.

    Raises ``ConfigurationError`` for a bad ``job_name`` or ``control``. Any other failure
    (an unwritable home, no free port) is logged as a warning and gives a registration
    whose ``job`` is None: the job still runs, without command-line control."""
    if not isinstance(job_name, str) or not job_name:
        raise ConfigurationError(f"job_name must be a non-empty string, got {job_name!r}")
    missing = [m for m in ("trigger_savepoint", "stop_with_savepoint", "cancel")
               if not callable(getattr(control, m, None))]
    if missing:
        raise ConfigurationError(
            f"control must implement JobControl; {type(control).__name__} lacks "
            f"{', '.join(missing)}")
    job_id = secrets.token_hex(6)
    server: _ControlServer | None = None
    try:
        folder = jobs_folder(home)
        os.makedirs(lockgate_home(home), mode=0o700, exist_ok=True)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        check_private_folder(home)
        secret = new_secret()
        server = _ControlServer(job_id, control, MessageAuth(secret))
        job = JobInfo(job_id=job_id, job_name=job_name, pid=os.getpid(),
                      pid_start=_process_start(os.getpid()), endpoint=server.endpoint,
                      started_at=time.time(), path=os.path.join(folder, f"{job_id}.json"),
                      secret=secret)
        _write_private(job.path, job.to_json())
    except (OSError, zmq.ZMQError, UnsafeRegistryError) as e:
        log.warning("could not register job %r for command-line control (%s: %s); it runs, "
                    "but 'lockgate list/savepoint/stop' cannot reach it; check %s (now %s)",
                    job_name, type(e).__name__, e, HOME_ENV, lockgate_home(home))
        if server is not None:
            server.close(0)
        return JobRegistration(None, None)
    log.info("job %r registered as %s (%s)", job_name, job_id, job.path)
    return JobRegistration(job, server)


# --------------------------------------------------------------------------- the client's side


def _reply(auth: MessageAuth, job: JobInfo, command: str, request_id: str,
           frames: list[bytes]) -> tuple[bool, Any]:
    """(done, result) for one reply; raises the job's failure or a rejection."""
    if frames and frames[0] == _REJECTED:
        raise JobUnreachableError(
            f"job {job.job_id} ({job.job_name!r}) rejected the {command} request: "
            f"{b' '.join(frames[1:]).decode(errors='replace')}; its registration file "
            f"{job.path} does not hold the job's secret (is it stale?)")
    try:
        (payload,) = auth.open(frames, 1)
        reply = json.loads(bytes(payload))
    except (AuthenticationError, MalformedMessageError, ValueError) as e:
        raise JobUnreachableError(
            f"job {job.job_id} ({job.job_name!r}) sent a reply that failed authentication "
            f"({e}); is another process using its port {job.endpoint}?") from e
    if not isinstance(reply, dict) or reply.get("id") != request_id:
        return False, None  # an answer to an earlier request
    if reply.get("ok"):
        return True, reply.get("result")
    raise JobCommandError(
        f"job {job.job_id} ({job.job_name!r}): {command} failed: "
        f"{reply.get('error_type')}: {reply.get('error')}",
        error_type=str(reply.get("error_type")))


def send_command(job: JobInfo, command: str, *, timeout: float | None = None,
                 **args: Any) -> Any:
    """Run ``command`` (``savepoint``: ``path``; ``stop``: ``path``, ``drain``;
    ``cancel``) on the running ``job`` and return its result (the savepoint folder for
    ``savepoint`` and ``stop``).

    ``timeout`` (seconds) bounds the job's work (a savepoint that takes longer fails) and
    the wait for the reply (``timeout`` + ``REPLY_GRACE_S``); without it the client waits
    as long as the job runs. Raises ``JobCommandError`` with the job's message when the
    command fails in the job, ``JobUnreachableError`` when the job ends before
    answering, does not answer in time or rejects the request."""
    if not isinstance(job, JobInfo):
        raise ConfigurationError(f"job must be a JobInfo (from find_job), got {job!r}")
    if command not in COMMANDS:
        raise ConfigurationError(f"unknown command {command!r}; use one of {', '.join(COMMANDS)}")
    timeout = _check_timeout(timeout)
    if command != CANCEL:
        args["timeout"] = timeout
    auth = MessageAuth(job.secret)
    request_id = secrets.token_hex(8)
    request = json.dumps({"id": request_id, "job": job.job_id, "command": command,
                          "args": args, "sent_at": time.time()}).encode()
    deadline = None if timeout is None else time.monotonic() + timeout + REPLY_GRACE_S
    socket: Any = zmq.Context.instance().socket(zmq.DEALER)
    try:
        socket.setsockopt(zmq.LINGER, 0)
        bound(socket, REGISTRY_REPLY_LIMIT)
        socket.connect(job.endpoint)
        socket.send_multipart(auth.seal(request))
        gone_since: float | None = None
        while True:
            if socket.poll(_POLL_MS, zmq.POLLIN):
                done, result = _reply(auth, job, command, request_id, socket.recv_multipart())
                if done:
                    return result
                continue
            now = time.monotonic()
            problem = None
            if not _alive(job):
                problem = f"ended before answering the {command} request"
            elif not os.path.exists(job.path):
                gone_since = gone_since or now
                if now - gone_since > GONE_GRACE_S:
                    problem = f"stopped taking commands before answering the {command} request"
            if problem is None and deadline is not None and now > deadline:
                problem = (f"did not answer the {command} request within {timeout}s "
                           f"(+{REPLY_GRACE_S}s)")
            if problem is not None and not socket.poll(0, zmq.POLLIN):  # no reply just now
                raise JobUnreachableError(
                    f"job {job.job_id} ({job.job_name!r}, pid {job.pid}) {problem}")
    finally:
        socket.close(linger=0)

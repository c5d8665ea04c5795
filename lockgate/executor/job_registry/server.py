"""The job's side: a control server thread on ``127.0.0.1`` that authenticates each
request (HMAC under the job's secret, fresh, never run twice), runs the command on the
job's :class:`JobControl` and seals the reply; :func:`register_job` starts it and
writes the registration file, :class:`JobRegistration` undoes both."""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import queue
import secrets
import threading
import time
from collections import Counter
from typing import Any, Protocol

import zmq

from ...errors import ConfigurationError
from ..spark.auth import AuthenticationError, MalformedMessageError, MessageAuth, new_secret
from ..spark.limits import (
    REGISTRY_REQUEST_LIMIT,
    DisconnectLog,
    bound,
)
from ..spark.signals import PipeWaker
from .files import (
    CANCEL,
    COMMANDS,
    HOME_ENV,
    POLL_MS,
    REJECTED,
    SAVEPOINT,
    STOP,
    JobControlError,
    JobInfo,
    UnsafeRegistryError,
    check_private_folder,
    check_timeout,
    jobs_folder,
    lockgate_home,
    process_start,
    write_private,
)

log = logging.getLogger(__name__)

#: how long ``JobRegistration.close`` waits for commands in flight to answer
CLOSE_DRAIN_S = 10.0
#: a request older than this (or this far in the future) is refused; the job remembers
#: the ids of the requests it ran this long, so none runs twice
REQUEST_WINDOW_S = 60.0


class JobControl(Protocol):
    """What a registered job does on command (``JobClient`` implements it)."""

    def trigger_savepoint(self, path: str, timeout: float | None = None) -> str:
        """Take a savepoint into ``path``; return its folder; raise on failure."""
        ...

    def stop_with_savepoint(
        self, path: str | None = None, drain: bool = False, timeout: float | None = None
    ) -> str:
        """Take a savepoint into ``path`` (None: the job's default savepoint folder), then
        stop the job; return the savepoint folder."""
        ...

    def cancel(self) -> None:
        """Stop the job without a savepoint."""
        ...


def _check_path(args: dict[str, Any]) -> str:
    path = args.get("path")
    if not isinstance(path, str) or not path:
        raise ConfigurationError(f"the savepoint path must be a non-empty string, got {path!r}")
    return path


def _run_command(control: JobControl, command: str, args: dict[str, Any]) -> Any:
    """Check ``args`` and run ``command`` on ``control``; returns its result."""
    allowed = {SAVEPOINT: {"path", "timeout"}, STOP: {"path", "drain", "timeout"}, CANCEL: set()}
    if command not in allowed:
        raise ConfigurationError(f"unknown command {command!r}; use one of {', '.join(COMMANDS)}")
    unknown = set(args) - allowed[command]
    if unknown:
        raise ConfigurationError(f"command {command!r} takes no {', '.join(sorted(unknown))}")
    if command == CANCEL:
        control.cancel()
        return None
    timeout = check_timeout(args.get("timeout"))
    if command == SAVEPOINT:
        return control.trigger_savepoint(_check_path(args), timeout=timeout)
    drain = args.get("drain", False)
    if not isinstance(drain, bool):
        raise ConfigurationError(f"drain must be true or false, got {drain!r}")
    # a stop without a path: the job's default savepoint folder (or its refusal)
    path = None if args.get("path") is None else _check_path(args)
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
            self._disconnects = DisconnectLog(
                self._socket, f"job control {job_id}", REGISTRY_REQUEST_LIMIT
            )
            port = self._socket.bind_to_random_port("tcp://127.0.0.1")
        except BaseException:
            self._context.destroy(linger=0)
            self._waker.close()
            raise
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self._thread = threading.Thread(
            target=self._serve, name=f"lockgate job control {job_id}", daemon=True
        )
        self._thread.start()

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._waker.fd, zmq.POLLIN)
        poller.register(self._disconnects.monitor, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(POLL_MS))
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
            self._replies.put([identity, REJECTED, str(e).encode()])
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
            self._fail(
                identity,
                request_id,
                JobControlError(f"this is job {self.job_id}, not {request.get('job')!r}"),
            )
        elif not isinstance(command, str) or not isinstance(args, dict):
            self._fail(identity, request_id, JobControlError("a request needs a command and args"))
        elif not self._start(identity, request_id, command, args):
            self._fail(
                identity,
                request_id,
                JobControlError(f"job {self.job_id} is ending and takes no more commands"),
            )

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
        if (
            isinstance(sent_at, bool)
            or not isinstance(sent_at, (int, float))
            or not math.isfinite(sent_at)
            or abs(time.time() - sent_at) > REQUEST_WINDOW_S
        ):
            self.rejected["stale"] += 1
            log.warning(
                "job control: refused a request sent at %r, not within %.0fs of now",
                sent_at,
                REQUEST_WINDOW_S,
            )
            self._fail(
                identity,
                request_id,
                JobControlError(
                    f"the request was not sent within {REQUEST_WINDOW_S:.0f}s of the job's clock "
                    "(a replay, or a client of an older lockgate): send it again with this "
                    "version's lockgate"
                ),
            )
            return False
        # remembered past the window in both directions, so no replay can be fresh again
        self._seen[request_id] = now + 2 * REQUEST_WINDOW_S
        return True

    def _fail(self, identity: bytes, request_id: str, error: BaseException) -> None:
        self._reply(
            identity,
            {
                "id": request_id,
                "ok": False,
                "error_type": type(error).__name__,
                "error": str(error),
            },
        )

    def _start(self, identity: bytes, request_id: str, command: str, args: dict[str, Any]) -> bool:
        """Run the command in a thread of its own; False (nothing runs) once closing."""
        worker = threading.Thread(
            target=self._execute,
            args=(identity, request_id, command, args),
            name=f"lockgate job control {self.job_id} {command}",
            daemon=True,
        )
        with self._lock:  # close() sees every command started before it
            if self._closing.is_set():
                return False
            self._inflight.add(worker)
        worker.start()
        return True

    def _execute(
        self, identity: bytes, request_id: str, command: str, args: dict[str, Any]
    ) -> None:
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
                log.warning(
                    "job control: %s still running after %.0fs; its caller gets no answer",
                    t.name,
                    timeout,
                )
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


def register_job(
    job_name: str,
    control: JobControl,
    home: str | os.PathLike[str] | None = None,
    *,
    rest_url: str | None = None,
    rest_token: str | None = None,
) -> JobRegistration:
    """Make the running job ``job_name`` controllable from other processes of this machine
    (``lockgate list``, ``lockgate savepoint``, ``lockgate stop``) until the returned
    registration is closed: commands call ``control``. ``rest_url`` and ``rest_token``
    (the job's REST API, if it serves one) are recorded in the registration file (mode
    0600) for the command line.

    Raises ``ConfigurationError`` for a bad ``job_name`` or ``control``. Any other failure
    (an unwritable home, no free port) is logged as a warning and gives a registration
    whose ``job`` is None: the job still runs, without command-line control."""
    if not isinstance(job_name, str) or not job_name:
        raise ConfigurationError(f"job_name must be a non-empty string, got {job_name!r}")
    missing = [
        m
        for m in ("trigger_savepoint", "stop_with_savepoint", "cancel")
        if not callable(getattr(control, m, None))
    ]
    if missing:
        raise ConfigurationError(
            f"control must implement JobControl; {type(control).__name__} lacks "
            f"{', '.join(missing)}"
        )
    job_id = secrets.token_hex(6)
    server: _ControlServer | None = None
    try:
        folder = jobs_folder(home)
        os.makedirs(lockgate_home(home), mode=0o700, exist_ok=True)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        check_private_folder(home)
        secret = new_secret()
        server = _ControlServer(job_id, control, MessageAuth(secret))
        job = JobInfo(
            job_id=job_id,
            job_name=job_name,
            pid=os.getpid(),
            pid_start=process_start(os.getpid()),
            endpoint=server.endpoint,
            started_at=time.time(),
            path=os.path.join(folder, f"{job_id}.json"),
            secret=secret,
            rest_url=rest_url,
            rest_token=rest_token,
        )
        write_private(job.path, job.to_json())
    except (OSError, zmq.ZMQError, UnsafeRegistryError) as e:
        log.warning(
            "could not register job %r for command-line control (%s: %s); it runs, "
            "but 'lockgate list/savepoint/stop' cannot reach it; check %s (now %s)",
            job_name,
            type(e).__name__,
            e,
            HOME_ENV,
            lockgate_home(home),
        )
        if server is not None:
            server.close(0)
        return JobRegistration(None, None)
    log.debug("job %r registered as %s (%s)", job_name, job_id, job.path)
    return JobRegistration(job, server)

"""The controlling process's side: :func:`send_command` seals a request to a registered
job, waits for its sealed reply (the command's own timeout plus a grace) and gives up
once the job's registration file is gone."""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from typing import Any

import zmq

from ...errors import ConfigurationError
from ..spark.auth import AuthenticationError, MalformedMessageError, MessageAuth
from ..spark.limits import (
    REGISTRY_REPLY_LIMIT,
    bound,
)
from .files import (
    CANCEL,
    COMMANDS,
    POLL_MS,
    REJECTED,
    JobCommandError,
    JobInfo,
    JobUnreachableError,
    check_timeout,
    is_alive,
)

log = logging.getLogger(__name__)

#: a client waits a command's own timeout plus this for the reply
REPLY_GRACE_S = 5.0
#: a client stops waiting this long after the job's registration file disappeared
GONE_GRACE_S = 2.0


def _reply(
    auth: MessageAuth, job: JobInfo, command: str, request_id: str, frames: list[bytes]
) -> tuple[bool, Any]:
    """(done, result) for one reply; raises the job's failure or a rejection."""
    if frames and frames[0] == REJECTED:
        raise JobUnreachableError(
            f"job {job.job_id} ({job.job_name!r}) rejected the {command} request: "
            f"{b' '.join(frames[1:]).decode(errors='replace')}; its registration file "
            f"{job.path} does not hold the job's secret (is it stale?)"
        )
    try:
        (payload,) = auth.open(frames, 1)
        reply = json.loads(bytes(payload))
    except (AuthenticationError, MalformedMessageError, ValueError) as e:
        raise JobUnreachableError(
            f"job {job.job_id} ({job.job_name!r}) sent a reply that failed authentication "
            f"({e}); is another process using its port {job.endpoint}?"
        ) from e
    if not isinstance(reply, dict) or reply.get("id") != request_id:
        return False, None  # an answer to an earlier request
    if reply.get("ok"):
        return True, reply.get("result")
    raise JobCommandError(
        f"job {job.job_id} ({job.job_name!r}): {command} failed: "
        f"{reply.get('error_type')}: {reply.get('error')}",
        error_type=str(reply.get("error_type")),
    )


def send_command(job: JobInfo, command: str, *, timeout: float | None = None, **args: Any) -> Any:
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
    timeout = check_timeout(timeout)
    if command != CANCEL:
        args["timeout"] = timeout
    auth = MessageAuth(job.secret)
    request_id = secrets.token_hex(8)
    request = json.dumps(
        {
            "id": request_id,
            "job": job.job_id,
            "command": command,
            "args": args,
            "sent_at": time.time(),
        }
    ).encode()
    deadline = None if timeout is None else time.monotonic() + timeout + REPLY_GRACE_S
    socket: Any = zmq.Context.instance().socket(zmq.DEALER)
    try:
        socket.setsockopt(zmq.LINGER, 0)
        bound(socket, REGISTRY_REPLY_LIMIT)
        socket.connect(job.endpoint)
        socket.send_multipart(auth.seal(request))
        gone_since: float | None = None
        while True:
            if socket.poll(POLL_MS, zmq.POLLIN):
                done, result = _reply(auth, job, command, request_id, socket.recv_multipart())
                if done:
                    return result
                continue
            now = time.monotonic()
            problem = None
            if not is_alive(job):
                problem = f"ended before answering the {command} request"
            elif not os.path.exists(job.path):
                gone_since = gone_since or now
                if now - gone_since > GONE_GRACE_S:
                    problem = f"stopped taking commands before answering the {command} request"
            if problem is None and deadline is not None and now > deadline:
                problem = (
                    f"did not answer the {command} request within {timeout}s (+{REPLY_GRACE_S}s)"
                )
            if problem is not None and not socket.poll(0, zmq.POLLIN):  # no reply just now
                raise JobUnreachableError(
                    f"job {job.job_id} ({job.job_name!r}, pid {job.pid}) {problem}"
                )
    finally:
        socket.close(linger=0)

"""The command line's client of a job's REST API (``lockgate ... --url URL --token T``).

:class:`RestClient` sends JSON requests to ``URL/api/v1/...`` with the job's token in
``Authorization: Bearer``, using only the standard library (``urllib.request``).

Guarantees:

* every request is bounded: connecting and each read wait at most ``timeout`` seconds
  (:data:`REQUEST_TIMEOUT_S` for reads of the job's state; a savepoint waits its own
  ``--timeout`` plus :data:`SAVEPOINT_GRACE_S`, or :data:`SAVEPOINT_WAIT_S` without one),
  and a reply is read up to :data:`REPLY_LIMIT` bytes;
* redirects are never followed (the token would go to wherever the server points);
* the token is never part of a message, an error or a ``repr``;
* every failure is a :class:`RemoteError` whose message says what went wrong and how
  to fix it, and whose ``usage`` flag tells the command line to exit 2 (a wrong token,
  URL, job or argument) or 1 (the job could not do it: ended, unreachable, failed).
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

URL_ENV = "LOCKGATE_URL"
TOKEN_ENV = "LOCKGATE_TOKEN"
#: seconds a request of the job's state may take (connect, and each read)
REQUEST_TIMEOUT_S = 10.0
#: a savepoint or stop with ``--timeout S`` waits S plus this for the reply
SAVEPOINT_GRACE_S = 10.0
#: a savepoint or stop without ``--timeout`` waits at most this long for the reply
SAVEPOINT_WAIT_S = 1800.0
#: seconds between the two reads of a job's metrics when the first had no rates yet (the
#: job computes rates between readings at least 1 s apart)
RATE_WINDOW_S = 1.1
#: the largest reply read (bytes)
REPLY_LIMIT = 32 * 1024 * 1024
API = "/api/v1"

UNAUTHORIZED = (
    f"wrong or missing token: pass --token or set {TOKEN_ENV} (on the job's machine, "
    "'lockgate token JOB' prints it)"
)


class RemoteError(Exception):
    """A request to a job's REST API failed; the message says why and what to do.
    ``usage`` is True for the caller's mistakes (exit code 2), False when the job
    could not do it (exit code 1); ``status`` is the HTTP status, if any."""

    def __init__(self, message: str, *, usage: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.usage = usage
        self.status = status


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: following one would send the token to another address."""

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        raise RemoteError(
            f"{req.full_url} redirects ({code}) to {newurl}; lockgate does not follow "
            "redirects (the token would go along): pass the job's REST address itself "
            "as --url",
        )


def check_url(url: str) -> str:
    """``url`` as ``http(s)://host:port[/prefix]`` without a trailing slash; raises
    :class:`RemoteError` (usage) saying what is wrong."""
    text = url.strip()
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(
            f"--url {url!r} is not an http:// or https:// address; give the job's REST "
            "address, e.g. --url http://10.0.0.5:8081 (JobClient.rest_url; 'lockgate run "
            "--detach' prints it)",
            usage=True,
        )
    if parts.query or parts.fragment:
        raise RemoteError(
            f"--url {url!r} has a query or fragment; give only http://HOST:PORT", usage=True
        )
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as e:
        raise RemoteError(f"--url {url!r}: {e}; give http://HOST:PORT", usage=True) from e
    return text.rstrip("/")


@dataclass(frozen=True)
class RestClient:
    """A job's REST API at ``url`` with ``token``. The token never appears in
    ``repr`` or in a message."""

    url: str
    token: str = field(repr=False)
    timeout: float = REQUEST_TIMEOUT_S

    @classmethod
    def connect(cls, url: str | None, token: str | None) -> RestClient:
        """A client for ``url`` (else ``$LOCKGATE_URL``) with ``token`` (else
        ``$LOCKGATE_TOKEN``); raises :class:`RemoteError` (usage) for a missing or bad
        one."""
        url = url or os.environ.get(URL_ENV) or None
        if url is None:
            raise RemoteError(f"no job address: pass --url or set {URL_ENV}", usage=True)
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        if not token or not token.strip():
            raise RemoteError(UNAUTHORIZED, usage=True)
        return cls(check_url(url), token.strip())

    # -- requests ---------------------------------------------------------------------
    def get(self, path: str) -> Any:
        """``GET URL/api/v1<path>``: the reply's JSON."""
        return self._request("GET", path, None, self.timeout)

    def post(
        self, path: str, body: dict[str, Any] | None = None, *, wait: float | None = None
    ) -> Any:
        """``POST URL/api/v1<path>`` with ``body`` as JSON: the reply's JSON. ``wait``:
        seconds to wait for the reply (default :attr:`timeout`)."""
        return self._request("POST", path, {} if body is None else body, wait or self.timeout)

    def _request(self, method: str, path: str, body: Any, timeout: float) -> Any:
        target = f"{self.url}{API}{path}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(target, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=timeout) as reply:
                raw = reply.read(REPLY_LIMIT + 1)
        except urllib.error.HTTPError as e:
            raise _http_error(e, method, target) from None
        except RemoteError:
            raise
        except urllib.error.URLError as e:
            raise _unreachable(e.reason, self.url, timeout) from None
        except OSError as e:  # TimeoutError, ConnectionRefusedError, ...: the socket
            raise _unreachable(e, self.url, timeout) from None
        except http.client.HTTPException as e:  # a reply that is not HTTP, cut short
            raise RemoteError(
                f"{method} {target}: the reply is not valid HTTP ({type(e).__name__}: "
                f"{str(e).strip()!r}); "
                f"is {self.url} a lockgate job's REST address (http, not https, or the "
                "other way)?"
            ) from None
        if len(raw) > REPLY_LIMIT:
            raise RemoteError(
                f"{method} {target}: the reply is larger than {REPLY_LIMIT} bytes; is "
                f"{self.url} a lockgate job's REST address?"
            )
        try:
            return json.loads(raw) if raw else None
        except ValueError as e:
            raise RemoteError(
                f"{method} {target}: the reply is not JSON ({e}); is {self.url} a lockgate "
                "job's REST address?"
            ) from None

    # -- the job API ------------------------------------------------------------------
    def jobs(self) -> list[dict[str, Any]]:
        """``GET /jobs``: the jobs the driver at :attr:`url` runs (id, name, status,
        started_at)."""
        reply = self.get("/jobs")
        jobs = reply.get("jobs") if isinstance(reply, dict) else None
        if not isinstance(jobs, list):
            raise RemoteError(f"GET {self.url}{API}/jobs: unexpected reply; is it a lockgate job?")
        return [j for j in jobs if isinstance(j, dict)]

    def find_job(self, ref: str) -> dict[str, Any]:
        """The job whose id is ``ref``, else the one job named ``ref``; raises
        :class:`RemoteError` (usage) listing the jobs there otherwise."""
        jobs = self.jobs()
        by_id = [j for j in jobs if j.get("id") == ref]
        if by_id:
            return by_id[0]
        named = [j for j in jobs if j.get("name") == ref]
        if len(named) == 1:
            return named[0]
        listed = ", ".join(f"{j.get('id')} ({j.get('name')!r})" for j in (named or jobs))
        if named:
            raise RemoteError(
                f"{len(named)} jobs at {self.url} are named {ref!r}: {listed}; name the job "
                "by its id",
                usage=True,
            )
        there = f"jobs there: {listed}" if jobs else "it runs no job"
        raise RemoteError(
            f"no job at {self.url} has the id or name {ref!r}; {there}", usage=True, status=404
        )


def settle_rates(client: RestClient, job_id: str) -> None:
    """Make the job's next metrics carry rates: the job computes rates (records per
    second, busy and backpressured time) between two readings at least a second apart,
    so when its metrics show a running task without them (nobody read them lately),
    read once more after :data:`RATE_WINDOW_S`. At most one pause; no effect on a job
    that is not running."""
    metrics = client.get(f"/jobs/{job_id}/metrics")
    if not isinstance(metrics, dict) or (metrics.get("job") or {}).get("status") != "RUNNING":
        return
    vertices = [v for v in metrics.get("vertices") or [] if isinstance(v, dict)]
    if vertices and any(v.get("busy_ms_per_s") is None for v in vertices):
        threading.Event().wait(RATE_WINDOW_S)


def savepoint_wait(timeout: float | None) -> float:
    """Seconds to wait for the reply to a savepoint or stop with ``--timeout``
    ``timeout``."""
    return SAVEPOINT_WAIT_S if timeout is None else timeout + SAVEPOINT_GRACE_S


def _server_message(e: urllib.error.HTTPError) -> str | None:
    try:
        body = json.loads(e.read(64 * 1024) or b"null")
    except (ValueError, OSError):
        return None
    message = body.get("error") if isinstance(body, dict) else None
    return message if isinstance(message, str) else None


def _http_error(e: urllib.error.HTTPError, method: str, target: str) -> RemoteError:
    code = e.code
    if code == 401:
        return RemoteError(
            f"{UNAUTHORIZED} (the job at {_origin(target)} refused it)", usage=True, status=401
        )
    message = _server_message(e)
    if code == 404:
        return RemoteError(
            message
            or f"{method} {target}: not found (404); is it a lockgate job's REST address, "
            "and is the job id right ('lockgate list --url ...' lists them)?",
            usage=True,
            status=404,
        )
    if code == 409:
        return RemoteError(
            f"the job cannot do that now (409): {message or 'it is not running or has ended'}",
            status=409,
        )
    if code == 504:
        return RemoteError(
            f"the job did not complete it in time (504): {message or 'raise --timeout'}",
            status=504,
        )
    if code == 400:
        return RemoteError(f"the job refused the request (400): {message}", usage=True, status=400)
    return RemoteError(
        f"{method} {target} failed ({code} {e.reason}){': ' + message if message else ''}",
        status=code,
    )


def _origin(target: str) -> str:
    parts = urllib.parse.urlsplit(target)
    return f"{parts.scheme}://{parts.netloc}"


def _unreachable(reason: Any, url: str, timeout: float) -> RemoteError:
    if isinstance(reason, TimeoutError):
        what = f"no answer within {timeout:g}s"
    elif isinstance(reason, ConnectionRefusedError):
        what = "connection refused"
    else:
        what = str(reason)
    return RemoteError(
        f"cannot reach the job at {url}: {what}; is the job running and is {url} its REST "
        "address (JobClient.rest_url; 'lockgate list' on its machine)? A REST API bound to "
        "127.0.0.1 (rest_bind's default) answers only on that machine"
    )

"""The routes of a job's REST API (a Starlette app; :mod:`.server` serves it).

One app serves one job: ``GET /api/v1/jobs`` lists it alone and any other job id gets
404. Every route is behind :class:`lockgate.rest.auth.TokenAuth`. Reads call the
``JobClient`` in a worker thread (its numbers are read live, see
:meth:`lockgate.api.JobClient.metrics`); savepoint and stop wait there for the job.

Errors are JSON ``{"error": "<what is wrong and how to fix it>"}``:

* 400: a malformed request (body not a JSON object, a field of the wrong type, an
  unknown field, a savepoint folder that cannot be written), checked before the job is
  asked;
* 401: no or a wrong token (see :mod:`.auth`);
* 404: an unknown job id or route; 405: a method the route does not take;
* 408: the body did not arrive within :data:`BODY_TIMEOUT_S`; 413: it is larger than
  :data:`MAX_BODY_BYTES`;
* 409: the job cannot do it now: it has ended, it is not running (yet), it runs
  without checkpointing, or the savepoint failed (the job goes on);
* 504: the savepoint or stop did not complete within the request's ``timeout``;
* 500: anything else (the error's type and message).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..checkpoint.savepoints import check_savepoint_target
from ..errors import CheckpointFailedError, ConfigurationError
from .auth import TOKEN_COOKIE, TokenAuth
from .limits import InFlightLimit
from .openapi import openapi_document
from .prometheus import PROMETHEUS_CONTENT_TYPE, prometheus_text

#: where the dashboard's files live (``/static/<file>``, ``/`` is its ``index.html``)
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
#: the largest request body accepted (bytes)
MAX_BODY_BYTES = 64 * 1024
#: seconds a request body may take to arrive
BODY_TIMEOUT_S = 10.0
#: the largest ``timeout`` a savepoint or stop request may give (seconds: a day)
MAX_TIMEOUT_S = 86_400.0
API = "/api/v1"


class JobView(Protocol):
    """What the API needs of a job (``lockgate.api.JobClient`` provides it)."""

    job_name: str
    started_at: float

    def status(self) -> str: ...
    def done(self) -> bool: ...
    def graph(self) -> dict[str, Any]: ...
    def metrics(self) -> dict[str, Any]: ...
    def checkpoints(self) -> list[Any]: ...
    def watermarks(self) -> list[Any]: ...
    def exceptions(self) -> list[dict[str, Any]]: ...
    def parallelism(self) -> dict[str, int]: ...
    def rescales(self) -> list[Any]: ...
    def autoscaling(self) -> dict[str, Any] | None: ...
    def progress(self) -> dict[str, Any]: ...
    def trigger_savepoint(self, path: str, timeout: float | None = None) -> str: ...
    def stop_with_savepoint(
        self, path: str | None = None, drain: bool = False, timeout: float | None = None
    ) -> str: ...
    def cancel(self) -> None: ...


class ApiError(Exception):
    """An error answer: ``status`` and the message of ``{"error": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _clean(value: Any) -> Any:
    """``value`` with non-finite floats as None (JSON has no NaN or infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class JSON(Response):
    """A JSON response; non-finite floats become null, unknown types their ``str``."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(_clean(content), allow_nan=False, default=str).encode("utf-8")


def error(status: int, message: str) -> Response:
    return JSON({"error": message}, status_code=status)


class _Static(StaticFiles):
    """The dashboard's files; a missing folder answers 404 instead of failing."""

    async def check_config(self) -> None:
        return None


async def read_body(request: Request) -> bytes:
    """The request body, at most :data:`MAX_BODY_BYTES`, within :data:`BODY_TIMEOUT_S`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(BODY_TIMEOUT_S):
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(408, f"the request body did not arrive within {BODY_TIMEOUT_S:g}s") from None
    return b"".join(chunks)


async def json_object(request: Request, example: str) -> dict[str, Any]:
    """The body as a JSON object (400 saying what is wrong otherwise)."""
    raw = await read_body(request)
    if not raw.strip():
        raise ApiError(400, f"the request needs a JSON object body, e.g. {example}")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the body is not valid JSON ({e}); send e.g. {example}") from None
    if not isinstance(data, dict):
        raise ApiError(
            400, f"the body must be a JSON object, got {type(data).__name__}; send e.g. {example}"
        )
    return data


def _fields(data: dict[str, Any], allowed: tuple[str, ...], example: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ApiError(
            400,
            f"unknown field(s) {', '.join(map(repr, unknown))}; the body takes "
            f"{', '.join(allowed)} (e.g. {example})",
        )


def savepoint_path(data: dict[str, Any]) -> str:
    path = data.get("path")
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise ApiError(
            400,
            f"'path' must be the savepoint folder (a non-empty string: a local path or a "
            f"URL the job can write), got {path!r}",
        )
    return path


def timeout_of(data: dict[str, Any]) -> float | None:
    timeout = data.get("timeout")
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or not 0 < timeout <= MAX_TIMEOUT_S
    ):
        raise ApiError(
            400,
            f"'timeout' must be seconds > 0 and <= {MAX_TIMEOUT_S:g}, or null (null: the "
            f"checkpoint timeout), got {timeout!r}",
        )
    return float(timeout)


class JobApi:
    """The endpoints of one job's API (see the module docstring)."""

    def __init__(
        self, client: JobView, token: str, job_id: Callable[[], str | None], static_dir: str
    ) -> None:
        self.client = client
        self.token = token
        self.job_id = job_id
        self.static_dir = static_dir
        self.blocking = BlockingCalls()

    # -- helpers ------------------------------------------------------------------------
    def check_job(self, request: Request) -> None:
        given = request.path_params.get("id")
        if given != self.job_id():
            raise ApiError(
                404,
                f"no job with id {given!r} here; this server serves job {self.job_id()!r} "
                f"(GET {API}/jobs lists it)",
            )

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.job_id(),
            "name": self.client.job_name,
            "status": self.client.status(),
            "started_at": self.client.started_at,
        }

    def detail(self) -> dict[str, Any]:
        out = self.summary()
        out["uptime_s"] = round(time.time() - self.client.started_at, 3)
        out["restarts"] = self.client.metrics()["job"]["restarts"]
        out["graph"] = self.client.graph()
        return out

    def checkpoints(self) -> dict[str, Any]:
        return {"checkpoints": [c.to_json() for c in self.client.checkpoints()]}

    def watermarks(self) -> dict[str, Any]:
        return {
            "watermarks": [
                {
                    "operator": w.operator,
                    "uid": w.uid,
                    "subtask": w.subtask,
                    "watermark": w.watermark,
                    "held_back_by": w.held_back_by,
                }
                for w in self.client.watermarks()
            ]
        }

    def exceptions(self) -> dict[str, Any]:
        return {"exceptions": self.client.exceptions()}

    def rescales(self) -> dict[str, Any]:
        return {
            "parallelism": self.client.parallelism(),
            "autoscaling": self.client.autoscaling(),
            "rescales": [d.as_dict() for d in self.client.rescales()],
        }

    def reader(self, read: Callable[[], Any]) -> Callable[[Request], Awaitable[Response]]:
        """A GET endpoint of the job answering ``read()`` (run in a worker thread)."""

        async def endpoint(request: Request) -> Response:
            self.check_job(request)
            return JSON(await run_in_threadpool(read))

        return endpoint

    def ended(self) -> None:
        if self.client.done():
            raise ApiError(
                409,
                f"job {self.job_id()!r} has ended ({self.client.status()}); it takes no commands",
            )

    async def call(self, fn: Callable[..., str], path: str | None, *args: Any) -> Response:
        """Run a savepoint or stop in a worker thread; map its errors (400 for a bad
        folder, checked first; 409, 504). ``path=None``: the job's default savepoint
        folder (a stop; a job without one refuses with 409)."""
        self.ended()
        try:
            if path is not None:
                await run_in_threadpool(check_savepoint_target, path)
        except ConfigurationError as e:
            raise ApiError(400, str(e)) from None
        try:
            with self.blocking:
                location = await run_in_threadpool(fn, path, *args)
        except (ConfigurationError, CheckpointFailedError) as e:
            raise ApiError(409, str(e)) from None
        except TimeoutError as e:
            raise ApiError(504, f"{e}; pass a larger 'timeout' (seconds) or null") from None
        return JSON({"location": location})

    # -- endpoints ----------------------------------------------------------------------
    async def jobs(self, request: Request) -> Response:
        return JSON({"jobs": [await run_in_threadpool(self.summary)]})

    async def savepoint(self, request: Request) -> Response:
        self.check_job(request)
        data = await json_object(request, SAVEPOINT_EXAMPLE)
        _fields(data, ("path", "timeout"), SAVEPOINT_EXAMPLE)
        path, timeout = savepoint_path(data), timeout_of(data)
        return await self.call(self.client.trigger_savepoint, path, timeout)

    async def stop(self, request: Request) -> Response:
        self.check_job(request)
        data = await json_object(request, STOP_EXAMPLE)
        _fields(data, ("path", "drain", "timeout"), STOP_EXAMPLE)
        drain = data.get("drain", False)
        if not isinstance(drain, bool):
            raise ApiError(400, f"'drain' must be true or false, got {drain!r}")
        # no path (or null): the job's default savepoint folder, as Flink's stop
        path = None if data.get("path") is None else savepoint_path(data)
        return await self.call(self.client.stop_with_savepoint, path, drain, timeout_of(data))

    async def cancel(self, request: Request) -> Response:
        self.check_job(request)
        await read_body(request)  # ignored, but bounded
        self.ended()
        await run_in_threadpool(self.client.cancel)
        return JSON({"status": "CANCELING"}, status_code=202)

    async def index(self, request: Request) -> Response:
        """The dashboard's page (served without the token: no job data in it). It expires
        the login cookie older versions set, which held the token and which a browser
        sends to every port of the host."""
        page = os.path.join(self.static_dir, "index.html")
        response: Response
        if os.path.isfile(page):
            response = FileResponse(page, media_type="text/html")
        else:
            response = HTMLResponse(
                "<!doctype html><html><head><meta charset='utf-8'><title>lockgate</title>"
                "</head><body><h1>lockgate</h1><p>The dashboard is not installed here; the "
                f"job's API is at <a href='{API}/jobs'>{API}/jobs</a>.</p></body></html>"
            )
        if TOKEN_COOKIE in request.cookies:
            response.delete_cookie(TOKEN_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    async def openapi(self, request: Request) -> Response:
        return JSON(openapi_document())

    async def metrics(self, request: Request) -> Response:
        text = await run_in_threadpool(prometheus_text, self.client, self.job_id)
        return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)

    def routes(self) -> list[BaseRoute]:
        job = f"{API}/jobs/{{id}}"
        return [
            Route("/", self.index, methods=["GET"]),
            Route("/openapi.json", self.openapi, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route(f"{API}/jobs", self.jobs, methods=["GET"]),
            Route(job, self.reader(self.detail), methods=["GET"]),
            Route(f"{job}/metrics", self.reader(self.client.metrics), methods=["GET"]),
            Route(f"{job}/checkpoints", self.reader(self.checkpoints), methods=["GET"]),
            Route(f"{job}/watermarks", self.reader(self.watermarks), methods=["GET"]),
            Route(f"{job}/exceptions", self.reader(self.exceptions), methods=["GET"]),
            Route(f"{job}/rescales", self.reader(self.rescales), methods=["GET"]),
            Route(f"{job}/progress", self.reader(self.client.progress), methods=["GET"]),
            Route(f"{job}/savepoints", self.savepoint, methods=["POST"]),
            Route(f"{job}/stop", self.stop, methods=["POST"]),
            Route(f"{job}/cancel", self.cancel, methods=["POST"]),
            Mount("/static", _Static(directory=self.static_dir, check_dir=False), name="static"),
        ]


SAVEPOINT_EXAMPLE = '{"path": "/savepoints/sp-1", "timeout": 60}'
STOP_EXAMPLE = '{"path": "/savepoints/final", "drain": false, "timeout": 60}'


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error(exc.status, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}; GET /openapi.json lists them"
    elif exc.status_code == 405:
        message = f"{request.url.path} does not take {request.method}; see GET /openapi.json"
    else:
        message = str(exc.detail)
    return error(exc.status_code, message)


async def _server_error(request: Request, exc: Exception) -> Response:
    return error(500, f"{type(exc).__name__}: {exc}")


def build_app(
    client: JobView,
    token: str,
    job_id: Callable[[], str | None],
    *,
    static_dir: str = STATIC_DIR,
) -> Starlette:
    """The ASGI app of ``client``'s REST API (without the token check: see
    :func:`secured_app`). ``job_id()`` is the job's id (its registry id), the only id
    the API knows."""
    api = JobApi(client, token, job_id, static_dir)
    app = Starlette(
        routes=api.routes(),
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            Exception: _server_error,
        },
    )
    app.state.blocking = api.blocking
    return app


class BlockingCalls:
    """Counts the requests waiting in a worker thread for a savepoint or stop (a stop
    waits for the end of the job, whose shutdown must then not wait for the server)."""

    def __init__(self) -> None:
        self.count = 0

    def __enter__(self) -> BlockingCalls:
        self.count += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.count -= 1


def secured_app(
    client: JobView,
    token: str,
    job_id: Callable[[], str | None],
    *,
    max_in_flight: int | None = None,
    **kwargs: Any,
) -> tuple[TokenAuth, Starlette]:
    """``build_app`` behind :class:`TokenAuth`: (the ASGI app to serve, the inner app).
    ``max_in_flight``: at most that many requests (all carrying the token) in progress,
    more get 503 (:class:`~lockgate.rest.limits.InFlightLimit`, behind the token check)."""
    inner = build_app(client, token, job_id, **kwargs)
    served: Any = inner if max_in_flight is None else InFlightLimit(inner, max_in_flight)
    return TokenAuth(served, token), inner

"""The limit of requests in progress, an ASGI middleware behind the token check.

:class:`InFlightLimit` sits behind :class:`lockgate.rest.auth.TokenAuth`, so only requests
that carry the job's token count towards it: clients without the token (answered 401 at
once) cannot use the places up. Beyond the limit a request gets 503 with a JSON error and
``Retry-After: 1``. One event loop serves the app, so the count needs no lock.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send


class InFlightLimit:
    """ASGI middleware: at most ``limit`` HTTP requests in progress in ``app``."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the limit of requests in progress must be >= 1, got {limit}")
        self.app = app
        self.limit = limit
        #: requests in progress now
        self.count = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.count >= self.limit:
            busy = JSONResponse(
                {
                    "error": f"the server is busy: {self.limit} requests are in progress "
                    "(savepoints and stops wait for the job); try again shortly"
                },
                status_code=503,
                headers={"retry-after": "1"},
            )
            await busy(scope, receive, send)
            return
        self.count += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.count -= 1

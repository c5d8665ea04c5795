"""The REST API's token check, an ASGI middleware in front of every route.

Every request must carry the job's token as ``Authorization: Bearer <token>``; tokens are
compared in constant time (:func:`hmac.compare_digest`). No cookie authenticates: cookies
are scoped to a host, not to a port, so a browser sends them to every server on the same
address (another local user's on another port of 127.0.0.1 included; SameSite does not
help, the same address is the same site), and a cookie holding a bearer secret would hand
it to them. The dashboard keeps the token in its origin's ``sessionStorage`` (scheme, host
and port) and sends the header; since no cookie is ever accepted, a page of another site
or port cannot make a browser send anything that authenticates (no CSRF).

Unauthenticated, only the dashboard's page and its files are served (``GET``/``HEAD`` of
``/`` and ``/static/...``): they are the same for every job and hold no job data; the page
asks for the token and shows nothing until the API answers. Any other request without the
right token gets 401 and nothing else: the body ``{"error": "unauthorized"}``, never job
data, and its connection is closed after the answer (so it holds no place of the server).
"""

from __future__ import annotations

import hmac

from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: the cookie earlier versions set at login, holding the raw token. Never accepted
#: now; the dashboard page expires it, so a browser stops sending it to every port.
TOKEN_COOKIE = "lockgate_token"
#: a header the API once asked of cookie-authenticated POSTs; no longer needed (no cookie
#: authenticates), still allowed
REQUEST_HEADER = "x-lockgate-request"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: what is served without the token: the dashboard's page and its files (no job data)
PUBLIC_PAGE = "/"
PUBLIC_PREFIX = "/static/"
#: headers every response carries: nothing is cached, sniffed or framed by another site
SECURITY_HEADERS = {
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # the dashboard loads only its own files and runs no inline script or style
    "content-security-policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "referrer-policy": "no-referrer",
}
UNAUTHORIZED = {"error": "unauthorized"}


def tokens_equal(given: str, expected: str) -> bool:
    """Whether ``given`` is ``expected``, in time independent of where they differ."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


def is_authenticated(conn: HTTPConnection, token: str, method: str = "GET") -> bool:
    """Whether the request carries ``token`` as ``Authorization: Bearer <token>`` (the only
    way; cookies are ignored, whatever ``method``)."""
    header = conn.headers.get("authorization")
    if header is None:
        return False
    scheme, _, value = header.strip().partition(" ")
    return scheme.lower() == "bearer" and tokens_equal(value.strip(), token)


def is_public(path: str, method: str) -> bool:
    """Whether the request is for the dashboard's page or files, served without the token."""
    return method in ("GET", "HEAD") and (path == PUBLIC_PAGE or path.startswith(PUBLIC_PREFIX))


def unauthorized(path: str = "", method: str = "", message: str = "") -> Response:
    """The 401 answer: ``{"error": "unauthorized"}``, and the connection closed after it
    (``path``, ``method`` and ``message`` are accepted for compatibility and unused)."""
    # the connection closes after the answer: a client without the token holds no place
    headers = {
        "www-authenticate": 'Bearer realm="lockgate"',
        "connection": "close",
        **SECURITY_HEADERS,
    }
    return JSONResponse(UNAUTHORIZED, status_code=401, headers=headers)


class TokenAuth:
    """ASGI middleware: lets a request through only with the job's token (see the
    module docstring) and adds :data:`SECURITY_HEADERS` to every response."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not isinstance(token, str) or len(token) < 16:
            raise ValueError("the REST token must be a string of at least 16 characters")
        self.app = app
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":  # none served; refuse before anything else
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        method = scope["method"].upper()
        path = scope["path"]
        conn = HTTPConnection(scope)
        if not is_public(path, method) and not is_authenticated(conn, self._token, method):
            await unauthorized(path, method)(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers.extend(
                    (k.encode("latin-1"), v.encode("latin-1"))
                    for k, v in SECURITY_HEADERS.items()
                    if k.encode("latin-1") not in present
                )
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_secured)

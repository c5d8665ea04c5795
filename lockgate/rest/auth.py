"""The REST API's token check, an ASGI middleware in front of every route.

Every request must carry the job's token, either as ``Authorization: Bearer <token>``
or as the cookie :data:`TOKEN_COOKIE` that ``POST /login`` sets (HttpOnly,
SameSite=Strict). A request authenticated by the cookie with an unsafe method (POST,
PUT, PATCH, DELETE) must also carry the header ``X-Lockgate-Request: 1``: a page of
another site can make a browser send the cookie, but not a custom header without a
CORS preflight this server never grants. Tokens are compared in constant time
(:func:`hmac.compare_digest`).

A request that fails gets 401 and nothing else: the body ``{"error": "unauthorized"}``
(for ``GET /`` a minimal login form posting to ``/login``), never job data. The only
path the middleware lets through unauthenticated is ``POST /login``, whose handler
checks the submitted token itself (and answers 401 the same way when it is wrong).
"""

from __future__ import annotations

import hmac
from html import escape

from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: the cookie ``POST /login`` sets
TOKEN_COOKIE = "lockgate_token"
#: the header a cookie-authenticated unsafe request must carry (value ``1``)
REQUEST_HEADER = "x-lockgate-request"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
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
LOGIN_PATH = "/login"


def tokens_equal(given: str, expected: str) -> bool:
    """Whether ``given`` is ``expected``, in time independent of where they differ."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


def is_authenticated(conn: HTTPConnection, token: str, method: str) -> bool:
    """Whether the request carries ``token`` as a Bearer header or as the login cookie
    (with ``X-Lockgate-Request: 1`` for an unsafe ``method``). A request with an
    ``Authorization`` header is judged by it alone."""
    header = conn.headers.get("authorization")
    if header is not None:
        scheme, _, value = header.strip().partition(" ")
        return scheme.lower() == "bearer" and tokens_equal(value.strip(), token)
    cookie = conn.cookies.get(TOKEN_COOKIE)
    if cookie is None or not tokens_equal(cookie, token):
        return False
    return method not in UNSAFE_METHODS or conn.headers.get(REQUEST_HEADER) == "1"


def login_form(message: str = "") -> str:
    """A minimal login page (no job data): one password field posting to /login."""
    note = f"<p>{escape(message)}</p>" if message else ""
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>lockgate: sign in</title>"
        "</head><body><h1>lockgate</h1>"
        f"{note}<form method='post' action='{LOGIN_PATH}'>"
        "<label>Job token <input type='password' name='token' autocomplete='off' "
        "autofocus required></label> <button type='submit'>Sign in</button></form>"
        "<p>The token is <code>client.rest_token</code> of the job (also kept in its "
        "registry entry).</p></body></html>"
    )


def unauthorized(path: str, method: str, message: str = "") -> Response:
    """The 401 answer: the login form for a page a browser opens, else the JSON error."""
    headers = {"www-authenticate": 'Bearer realm="lockgate"', **SECURITY_HEADERS}
    if (path == "/" and method in ("GET", "HEAD")) or path == LOGIN_PATH:
        return HTMLResponse(login_form(message), status_code=401, headers=headers)
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
        login = path == LOGIN_PATH and method == "POST"
        if not login and not is_authenticated(conn, self._token, method):
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

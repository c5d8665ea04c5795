"""Serving a job's REST API: uvicorn in a background thread with its own event loop.

:func:`start_rest_server` binds the socket in the calling thread (so a bad address or
a port in use fails there, and port 0 resolves to the port the system chose) and
serves the app in a daemon thread ``lockgate rest <job>``. :meth:`RestServer.stop`
sets uvicorn's ``should_exit`` and wakes its loop at once.

Bounds (none of them lets a client without the token keep one with it out):

* connections waiting for a request head (new ones, and idle ones between requests):
  at most :data:`MAX_WAITING` closable ones; a newcomer beyond it closes the one that
  has waited longest, so unfinished heads held open (and reopened as they are closed)
  cannot fill the server. A new connection is not closable for its first
  :data:`NEW_GRACE_S` seconds (the time its client has to send its head, however loaded
  the machine), and at most :data:`MAX_NEW_WAITING` new ones wait in their grace (beyond
  it the oldest new one is closed). So a client that sends its head within the grace is
  closed for room only if :data:`MAX_NEW_WAITING` newer connections arrived before its
  head did, and in all at most ``max(MAX_WAITING, MAX_NEW_WAITING)`` connections wait
  (plus at most :data:`ACCEPT_BACKLOG` accepted in one loop iteration). Each waits at most
  :data:`HEAD_TIMEOUT_S` for its head (from its opening, or from its last response),
  heads are at most :data:`MAX_HEAD_BYTES`, idle connections close after
  :data:`KEEP_ALIVE_S`;
* requests in progress: at most :data:`MAX_CONNECTIONS` of those that carry the token
  (:class:`~lockgate.rest.limits.InFlightLimit`, behind the token check; more get 503);
  a request without the token gets its 401 at once and its connection is closed, so it
  holds nothing; bodies are bounded by the app (:data:`lockgate.rest.app.MAX_BODY_BYTES`,
  :data:`lockgate.rest.app.BODY_TIMEOUT_S`) and read only after the token check.

There is no per-client-address limit: on loopback, where the threat is another local user,
every client has the same address, so such a limit would make the attacker and the user
share one quota. HTTP/1.1 only (h11), no WebSocket, no proxy headers trusted, no access log.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import socket
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .app import JobView, secured_app

log = logging.getLogger(__name__)

#: requests carrying the token in progress at once (more get 503)
MAX_CONNECTIONS = 32
#: closable connections waiting for a request head at once (a newcomer closes the oldest)
MAX_WAITING = 256
#: seconds a new connection has to send its head before it can be closed for room: a
#: client's ``connect()`` and its ``send()`` of the head are two steps, which a loaded
#: machine can hold apart for much longer than an event-loop iteration
NEW_GRACE_S = 2.0
#: new connections in their grace at once (beyond it the oldest new one is closed): the
#: bound on what the grace can let an attacker hold open
MAX_NEW_WAITING = 1024
MAX_HEAD_BYTES = 16 * 1024
#: the listening socket's backlog, also the most connections accepted in one loop
#: iteration (each takes its place in the line as its protocol starts, before the next)
ACCEPT_BACKLOG = 128
HEAD_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
#: seconds the server lets requests in flight finish when it stops
GRACEFUL_S = 10
#: seconds ``stop()`` waits for the server thread
STOP_WAIT_S = 15.0
#: uvicorn's housekeeping tick (its Date header has a one-second resolution; stopping
#: wakes the loop at once): rarer than uvicorn's 0.1 s, so an idle server does not take
#: the interpreter's lock from the job's threads ten times a second
TICK_S = 1.0


class _Waiting:
    """The connections of one server waiting for a request head, the longest waiting
    first. Beyond :data:`MAX_WAITING` the longest waiting is closed; a new connection
    is not closed for room during its first :data:`NEW_GRACE_S` seconds (see
    :meth:`_BoundedH11.connection_made`) unless :data:`MAX_NEW_WAITING` newer ones wait
    in their grace too."""

    def __init__(self) -> None:
        #: waiting and closable for room, the longest waiting first
        self._order: OrderedDict[_BoundedH11, None] = OrderedDict()
        #: new connections in their grace, the oldest first
        self._new: OrderedDict[_BoundedH11, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._order) + len(self._new)

    def add_new(self, conn: _BoundedH11) -> None:
        """``conn`` just opened: it waits, but is not closed for room in its grace."""
        self._new[conn] = None
        while len(self._new) > max(1, MAX_NEW_WAITING):
            oldest, _ = self._new.popitem(last=False)
            oldest.close_waiting()
        self._make_room()

    def grace_over(self, conn: _BoundedH11) -> None:
        """``conn``'s grace ended: if it still waits for its first head, it is closable
        from now on (last in line)."""
        if conn in self._new:
            self.add(conn)

    def add(self, conn: _BoundedH11) -> None:
        """``conn`` waits from now on (last in line) and may be closed for room."""
        self._new.pop(conn, None)
        self._order.pop(conn, None)
        self._order[conn] = None
        self._make_room()

    def discard(self, conn: _BoundedH11) -> None:
        self._new.pop(conn, None)
        self._order.pop(conn, None)

    def _make_room(self) -> None:
        while len(self) > max(1, MAX_WAITING) and self._order:
            oldest, _ = self._order.popitem(last=False)
            oldest.close_waiting()


class _BoundedH11(H11Protocol):
    """uvicorn's h11 protocol with bounds for connections without a request in progress
    (see the module docstring): each is among its server's :attr:`waiting`, closed
    :data:`HEAD_TIMEOUT_S` after it opened or after its last response, or earlier when
    :data:`MAX_WAITING` newer ones wait (uvicorn alone keeps a silent connection open
    forever, and counts it against its concurrency limit)."""

    #: the server's waiting connections (a subclass per server: :func:`_protocol_class`)
    waiting: _Waiting
    _head_deadline: asyncio.TimerHandle | None = None
    _grace: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()
        self.waiting.add_new(self)
        # a complete head makes it a request in progress (out of the line); a head still
        # missing when the grace ends makes it closable for room
        self._grace = self.loop.call_later(NEW_GRACE_S, self.waiting.grace_over, self)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._update_waiting(False)  # part of a head keeps its place in line

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_deadline()
        self._update_waiting(True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.waiting.discard(self)
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None
        super().connection_lost(exc)

    def _in_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _update_waiting(self, last_in_line: bool) -> None:
        """Out of the waiting line while a request is in progress or once closing;
        ``last_in_line``: back in it, last (a new wait for a head begins)."""
        if self._in_request() or self.transport.is_closing():
            self.waiting.discard(self)
        elif last_in_line:
            self.waiting.add(self)

    def close_waiting(self) -> None:
        """Close this connection, which waits for a request head, to make room."""
        if not self.transport.is_closing() and not self._in_request():
            self.transport.close()

    def _arm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
        if not self.transport.is_closing():
            self._head_deadline = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timeout)

    def _head_timeout(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing():
            return
        if not self._in_request():
            self.transport.close()


def _protocol_class() -> type[_BoundedH11]:
    """:class:`_BoundedH11` with a line of waiting connections of its own (one a server)."""
    return type("_BoundedH11", (_BoundedH11,), {"waiting": _Waiting()})


class _Server(uvicorn.Server):
    """uvicorn's server, woken at once by :meth:`wake` instead of its 0.1 s tick, and
    quiet: no start and stop lines of its own (lockgate logs one)."""

    _loop: asyncio.AbstractEventLoop | None = None
    _wake: asyncio.Event | None = None

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        #: set once the listening socket is closed (no new connection is accepted)
        self.listening_closed = threading.Event()

    async def serve_on(self, sockets: list[socket.socket]) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        if not self.config.loaded:
            self.config.load()
        self.lifespan = self.config.lifespan_class(self.config)
        await self.startup(sockets=sockets)
        if not self.should_exit:
            await self.main_loop()
        if self.started:
            await self.shutdown(sockets=sockets)

    async def main_loop(self) -> None:
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            assert self._wake is not None
            try:
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            except asyncio.TimeoutError:
                pass
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:  # accept nothing new, at once
            server.close()
        for sock in sockets or []:
            sock.close()
        self.listening_closed.set()
        if self.server_state.connections or self.server_state.tasks:
            await super().shutdown()
            return
        for server in self.servers:  # nothing in flight: done without uvicorn's pause
            await server.wait_closed()

    def wake(self) -> None:
        """Ask the server to exit (from any thread)."""
        self.should_exit = True
        loop, event = self._loop, self._wake
        if loop is not None and event is not None:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the loop has closed: the server is done
                pass


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (raises ``OSError``)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    if not infos:
        raise OSError(f"cannot resolve {host!r}")
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(ACCEPT_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def url_of(host: str, sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a socket bound to ``host``; a wildcard address (all
    interfaces) is named by this machine's host name."""
    port = sock.getsockname()[1]
    shown = host
    if host in ("0.0.0.0", "::", ""):
        shown = socket.gethostname()
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


class RestServer:
    """A running REST server (see the module docstring)."""

    def __init__(self, app: Any, inner: Any, sock: socket.socket, url: str, name: str) -> None:
        self.url = url
        self.host, self.port = sock.getsockname()[:2]
        self.app = inner
        self._protocol = _protocol_class()
        config = uvicorn.Config(
            app,
            http=self._protocol,
            ws="none",
            lifespan="off",
            interface="asgi3",
            loop="asyncio",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            limit_concurrency=None,  # InFlightLimit, behind the token check
            timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=GRACEFUL_S,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
            backlog=ACCEPT_BACKLOG,
        )
        self._server = _Server(config)
        self._sock = sock
        _SERVERS.add(self)
        self._thread = threading.Thread(
            target=self._serve, name=f"lockgate rest {name}", daemon=True
        )
        self._thread.start()

    def _serve(self) -> None:
        try:
            asyncio.run(self._server.serve_on([self._sock]))
        except BaseException:
            log.exception("the REST server at %s failed; the job runs without it", self.url)
        finally:
            self._sock.close()
            self._server.listening_closed.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, wait: bool = True, timeout: float = STOP_WAIT_S) -> None:
        """Stop serving (idempotent); returns once no new connection is accepted.
        ``wait``: also once the server thread ended (up to ``timeout`` seconds in all:
        requests in flight finish first); else the thread ends by itself when they
        have."""
        self._server.wake()
        if self._thread is threading.current_thread():
            return
        deadline = time.monotonic() + timeout
        closed = self._server.listening_closed
        while not closed.wait(0.05) and self._thread.is_alive():
            if time.monotonic() > deadline:
                break
        if wait:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive() and (wait or not closed.is_set()):
            log.warning("the REST server at %s still runs after %.0fs", self.url, timeout)

    @property
    def busy(self) -> bool:
        """Whether a request waits for a savepoint or stop (see ``BlockingCalls``)."""
        return bool(self.app.state.blocking.count)

    def __repr__(self) -> str:
        return f"RestServer({self.url!r}, {'running' if self.running else 'stopped'})"


#: the servers of this process, for :func:`_answer_before_exit`
_SERVERS: weakref.WeakSet[RestServer] = weakref.WeakSet()


@atexit.register
def _answer_before_exit() -> None:
    """At interpreter exit, let each server still answering a savepoint or stop request
    send its answer (bounded by ``STOP_WAIT_S``): its thread is a daemon, which the exit
    would stop mid-answer, leaving the client with a closed connection."""
    deadline = time.monotonic() + STOP_WAIT_S
    for server in list(_SERVERS):
        if server.running and server.busy:
            server.stop(wait=True, timeout=max(0.0, deadline - time.monotonic()))


def start_rest_server(
    client: JobView,
    token: str,
    job_id: Callable[[], str | None],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    name: str = "job",
    static_dir: str | None = None,
) -> RestServer:
    """Serve ``client``'s REST API on ``host``:``port`` (0: any free port) until
    ``stop()``. Raises ``OSError`` when the address cannot be bound."""
    kwargs = {} if static_dir is None else {"static_dir": static_dir}
    app, inner = secured_app(client, token, job_id, max_in_flight=MAX_CONNECTIONS, **kwargs)
    sock = _bind(host, port)
    try:
        return RestServer(app, inner, sock, url_of(host, sock), name)
    except BaseException:
        sock.close()
        raise

"""A slow network in front of a TCP server, for tests of what a client's close loses.

:class:`DelayProxy` listens on an ephemeral 127.0.0.1 port and forwards each accepted
connection to the target: what the server sends reaches the client at once, what the
client sends reaches the server ``delay_s`` later (a delay line, as a slow link would;
``delay_s`` may be changed while it runs: it applies to what is sent after).
When the client closes, the proxy resets the server connection at once (``SO_LINGER``
0), dropping what it still holds: bytes a client sent just before closing never arrive
unless the client waited for the server to answer them."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import deque


class DelayProxy:
    def __init__(self, target: tuple[str, int], delay_s: float) -> None:
        self.target = target
        self.delay_s = delay_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        #: bytes from clients that a reset dropped before the server got them
        self.dropped = 0
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def _spawn(self, target, *args) -> None:  # type: ignore[no-untyped-def]
        t = threading.Thread(target=target, args=args, daemon=True, name="delay-proxy")
        t.start()
        self._threads.append(t)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self.target, timeout=5)
            held: deque[tuple[float, bytes]] = deque()
            arrived = threading.Condition()
            closed = threading.Event()
            self._spawn(self._client_to_held, client, server, held, arrived, closed)
            self._spawn(self._held_to_server, server, held, arrived, closed)
            self._spawn(self._server_to_client, server, client, closed)

    def _client_to_held(self, client, server, held, arrived, closed) -> None:  # type: ignore[no-untyped-def]
        client.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data = client.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                data = b""
            if not data:
                break
            with arrived:
                held.append((time.monotonic() + self.delay_s, data))
                arrived.notify()
        with arrived:  # the client is gone: reset the server's side, dropping the rest
            closed.set()
            self.dropped += sum(len(d) for _, d in held)
            held.clear()
            arrived.notify()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        server.close()
        client.close()

    def _held_to_server(self, server, held, arrived, closed) -> None:  # type: ignore[no-untyped-def]
        while True:
            with arrived:
                while not held and not closed.is_set():
                    arrived.wait(0.2)
                if closed.is_set():
                    return
                due, data = held[0]
                wait = due - time.monotonic()
                if wait > 0:  # the link's delay (a timed condition wait: a reset cuts it)
                    arrived.wait(wait)
                    continue
                held.popleft()
            try:
                server.sendall(data)
            except OSError:
                return

    def _server_to_client(self, server, client, closed) -> None:  # type: ignore[no-untyped-def]
        try:
            server.settimeout(0.2)
        except OSError:  # the client's side already reset it
            return
        while not closed.is_set():
            try:
                data = server.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            try:
                client.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._listener.close()

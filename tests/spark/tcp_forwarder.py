"""A TCP forwarder for tests: lets the network-namespace cluster reach a service that listens
on the root namespace's loopback only (PostgreSQL on 127.0.0.1:5432), without opening the
service itself to any other address.

:class:`TcpForwarder` listens on one address the project made (the cluster bridge's, e.g.
10.213.38.1) on a free port and copies bytes both ways between each accepted connection and a
new connection to the target. The service sees the forwarder's loopback connections, so its
loopback rules (PostgreSQL's ``pg_hba`` trust for 127.0.0.1) apply unchanged.

Run as ``__main__`` (``python tcp_forwarder.py LISTEN_HOST LISTEN_PORT TARGET_HOST
TARGET_PORT``), it forwards until killed: inside a cluster namespace, a service's
advertised loopback address (Kafka's 127.0.0.1:9092) then leads to the service through a
forwarder on the bridge.

Guarantees: :meth:`TcpForwarder.close` stops accepting, closes every connection it made, and
joins its threads (bounded); a connection's two directions end together (either side
closing, or an error, closes both).
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class TcpForwarder:
    """Forwards ``listen_host:<listen_port>`` (0: a free port) to
    ``target_host:target_port``; ``address`` is ``(listen_host, port)``."""

    def __init__(
        self, listen_host: str, target_host: str, target_port: int, listen_port: int = 0
    ) -> None:
        self.target = (target_host, target_port)
        self._server = socket.create_server((listen_host, listen_port))
        self._server.settimeout(0.2)  # the accept loop looks at the stop flag this often
        self.address: tuple[str, int] = self._server.getsockname()[:2]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(
            target=self._accept, name=f"forwarder {self.address}", daemon=True
        )
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                if self._stop.is_set():
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
                for src, dst in ((client, upstream), (upstream, client)):
                    t = threading.Thread(
                        target=self._pump, args=(src, dst), name="forwarder pump", daemon=True
                    )
                    self._threads.append(t)
                    t.start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, close every forwarded connection, join the threads."""
        self._stop.set()
        self._server.close()
        self._acceptor.join(timeout_s)
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for s in sockets:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in threads:
            t.join(timeout_s)


if __name__ == "__main__":
    import sys

    host, port, target_host, target_port = sys.argv[1:5]
    forwarder = TcpForwarder(host, target_host, int(target_port), int(port))
    print(f"forwarding {forwarder.address} to {forwarder.target}", flush=True)
    threading.Event().wait()  # until killed (SIGTERM/SIGKILL end the process)

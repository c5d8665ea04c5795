"""A network observer for the replay tests: :class:`RouterTap` sits between one DEALER
client and a ROUTER server, forwards every message both ways unchanged and records a
copy (what someone capturing the traffic would hold). ``bench/hostile.py`` uses it too."""

from __future__ import annotations

import queue
import threading
from typing import Any

import zmq


class RouterTap:
    """Connect the client to :attr:`endpoint` instead of the server's endpoint."""

    def __init__(self, target: str) -> None:
        self.target = target
        #: bodies (frames after the routing id) the client sent, in order
        self.to_server: list[list[bytes]] = []
        #: bodies the server sent to the client, in order
        self.to_client: list[list[bytes]] = []
        self._inject: queue.Queue[list[bytes]] = queue.Queue()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.endpoint = ""
        self._thread = threading.Thread(target=self._run, name="zmq tap", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the tap did not start within 10s")

    def replay_to_client(self, body: list[bytes]) -> None:
        """Send ``body`` (a captured server message) to the client once more."""
        self._inject.put(body)

    def _run(self) -> None:
        context: Any = zmq.Context.instance()
        front = context.socket(zmq.ROUTER)
        back = context.socket(zmq.DEALER)
        client: bytes | None = None
        try:
            port = front.bind_to_random_port("tcp://127.0.0.1")
            back.connect(self.target)
            self.endpoint = f"tcp://127.0.0.1:{port}"
            self._ready.set()
            poller = zmq.Poller()
            poller.register(front, zmq.POLLIN)
            poller.register(back, zmq.POLLIN)
            while not self._stop.is_set():
                ready = dict(poller.poll(20))
                if front in ready:
                    client, *body = front.recv_multipart()
                    self.to_server.append(body)
                    back.send_multipart(body)
                if back in ready:
                    body = back.recv_multipart()
                    self.to_client.append(body)
                    if client is not None:
                        front.send_multipart([client, *body])
                while client is not None:
                    try:
                        front.send_multipart([client, *self._inject.get_nowait()])
                    except queue.Empty:
                        break
        finally:
            front.close(linger=0)
            back.close(linger=0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

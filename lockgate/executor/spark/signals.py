"""A task signal that also wakes on ZeroMQ sockets.

It behaves like ``threading.Event`` (``set``/``clear``/``is_set``/``wait``), so
the task loop and clocks use it unchanged; ``wait`` additionally returns when
one of the task's network input sockets has a message. ``set`` writes to a
pipe, so any thread may call it.
"""

from __future__ import annotations

import os
from typing import Any

import zmq


class SocketSignal:
    def __init__(self, sockets: list[Any]) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._flag = False
        self._poller = zmq.Poller()
        for s in sockets:
            self._poller.register(s, zmq.POLLIN)
        self._poller.register(self._r, zmq.POLLIN)
        self._closed = False

    def set(self) -> None:
        self._flag = True
        try:
            os.write(self._w, b"x")
        except (BlockingIOError, OSError):
            pass

    def clear(self) -> None:
        self._flag = False
        try:
            while os.read(self._r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        ms = None if timeout is None else max(0, int(timeout * 1000))
        events = self._poller.poll(ms)
        return self._flag or bool(events)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._r)
            os.close(self._w)

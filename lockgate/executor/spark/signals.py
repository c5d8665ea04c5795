"""A task signal that also wakes on ZeroMQ sockets.

It behaves like ``threading.Event`` (``set``/``clear``/``is_set``/``wait``), so
the task loop and clocks use it unchanged; ``wait`` additionally returns when
one of the task's network input sockets has a message. ``set`` writes to a
pipe, so any thread may call it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import zmq


class PipeWaker:
    """Wakes a thread blocked in a ZeroMQ poll: ``wake`` (any thread) makes ``fd`` readable.

    ``wake`` after ``close`` does nothing: a late waker (a task thread finishing after
    its slot closed) must never write into a file descriptor number the process has
    reused for something else."""

    def __init__(self) -> None:
        self.fd, self._w = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._w, False)
        self._lock = threading.Lock()
        self._closed = False

    def wake(self) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                os.write(self._w, b"x")
            except (BlockingIOError, OSError):
                pass  # a full pipe is already readable

    def drain(self) -> None:
        try:
            while os.read(self.fd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self.fd)
            os.close(self._w)


class SocketSignal:
    def __init__(self, sockets: list[Any]) -> None:
        self._waker = PipeWaker()
        self._flag = False
        self._poller = zmq.Poller()
        for s in sockets:
            self._poller.register(s, zmq.POLLIN)
        self._poller.register(self._waker.fd, zmq.POLLIN)
        self._closed = False

    def watch(self, socket: Any) -> None:
        """Wake on ``socket`` again (after ``unwatch``)."""
        self._poller.register(socket, zmq.POLLIN)

    def unwatch(self, socket: Any) -> None:
        """Stop waking on ``socket`` (its channel is blocked)."""
        try:
            self._poller.unregister(socket)
        except KeyError:
            pass

    def set(self) -> None:
        self._flag = True
        self._waker.wake()

    def clear(self) -> None:
        self._flag = False
        self._waker.drain()

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
            self._waker.close()

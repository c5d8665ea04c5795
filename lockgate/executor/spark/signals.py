"""Waking a thread blocked in a ZeroMQ poll from another thread (:class:`PipeWaker`):
the control plane's threads, the job registry's server and the data-plane receiver."""

from __future__ import annotations

import os
import threading


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

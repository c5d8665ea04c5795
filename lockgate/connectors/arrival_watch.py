"""Wake a task when data arrives on a socket, instead of polling on an interval.

A reader whose input comes over sockets it owns (the Kafka direct fetch: one fetch
request in flight per broker) arms a :class:`SocketArrivalWatch` with those sockets after
a poll found nothing; a thread of the watch's own waits in ``select`` and calls the
task's ``wake`` once one of them is readable. The task thread alone reads the sockets:
the watch only looks at their readiness, so a wake is at worst spurious (one empty
poll), never a lost or stolen byte.

Guarantees: after :meth:`SocketArrivalWatch.arm` returns True, ``wake`` is called at
most once for that arming, as soon as a socket is readable (or at once if one already
is), unless the watch is armed again or closed first. A socket closed while watched
counts as readable (its reader finds out at its next poll). The thread is a daemon,
started at the first arming, and ends at :meth:`close`.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable, Sequence

#: the longest one ``select`` waits before it looks at the armed sockets again (a
#: bound only: arming a different socket set interrupts it at once)
SELECT_BOUND_S = 1.0


class SocketArrivalWatch:
    """Calls an armed ``wake`` from its own thread when an armed socket is readable."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        #: the sockets and the wake of the current arming (None: not armed)
        self._armed: tuple[list[socket.socket], Callable[[], None]] | None = None
        self._generation = 0
        self._has_work = threading.Event()
        self._interrupt_r, self._interrupt_w = socket.socketpair()
        self._interrupt_r.setblocking(False)
        self._interrupt_w.setblocking(False)
        self._watching: frozenset[int] = frozenset()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: times ``wake`` was called (tests and diagnostics)
        self.wakes = 0

    def arm(self, sockets: Sequence[socket.socket], wake: Callable[[], None]) -> bool:
        """Call ``wake()`` once one of ``sockets`` is readable. False (nothing armed)
        when there is no socket to watch or the watch is closed."""
        if self._closed or not sockets:
            return False
        with self._lock:
            self._armed = (list(sockets), wake)
            self._generation += 1
            changed = frozenset(s.fileno() for s in sockets) != self._watching
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._has_work.set()
        if changed:
            self._interrupt()
        return True

    def disarm(self) -> None:
        """Forget the current arming (its ``wake`` is not called)."""
        with self._lock:
            self._armed = None
            self._generation += 1

    def close(self) -> None:
        """Stop the thread (bounded wait) and release the watch's sockets."""
        self._closed = True
        self.disarm()
        self._has_work.set()
        self._interrupt()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(5.0)
        for s in (self._interrupt_r, self._interrupt_w):
            s.close()

    def _interrupt(self) -> None:
        try:
            self._interrupt_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a byte is already waiting, or the watch is closing

    def _drain_interrupts(self) -> None:
        try:
            while self._interrupt_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _run(self) -> None:
        while not self._closed:
            self._has_work.wait()
            with self._lock:
                armed, generation = self._armed, self._generation
                if armed is None:
                    self._has_work.clear()
                    self._watching = frozenset()
                    continue
                sockets, wake = armed
                self._watching = frozenset(s.fileno() for s in sockets)
            try:
                readable, _, _ = select.select(
                    [*sockets, self._interrupt_r], [], [], SELECT_BOUND_S
                )
            except (OSError, ValueError):
                readable = list(sockets)  # a socket was closed meanwhile: let the reader see
            if self._interrupt_r in readable:
                self._drain_interrupts()
                readable = [s for s in readable if s is not self._interrupt_r]
            if not readable:
                continue
            with self._lock:
                if self._generation != generation:
                    continue  # armed again (or disarmed) meanwhile: look again
                self._armed = None
                self._has_work.clear()
            self.wakes += 1
            wake()

"""Injectable clocks.

Everything time-driven in lockgate (buffer timeouts, rate-limited sources, later
checkpoint triggers and processing-time timers) reads time and waits through a
:class:`Clock`, so tests drive it with :class:`ManualClock` instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic_ms(self) -> float:
        """Milliseconds on a clock that never goes back (for timeouts)."""

    def time_ms(self) -> int:
        """Wall-clock epoch milliseconds (for processing time)."""

    def wait(self, event: threading.Event, timeout_ms: float | None) -> bool:
        """Block until ``event`` is set or ``timeout_ms`` of this clock's time passed.

        Returns whether the event is set.
        """


class SystemClock:
    """The real clock."""

    def monotonic_ms(self) -> float:
        return time.monotonic() * 1000.0

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def wait(self, event: threading.Event, timeout_ms: float | None) -> bool:
        return event.wait(None if timeout_ms is None else max(timeout_ms, 0.0) / 1000.0)


class ManualClock:
    """A clock that moves only when :meth:`advance` is called.

    Waiters blocked in :meth:`wait` wake when their event is set or when an
    advance moves the clock past their deadline.
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now = float(start_ms)
        self._cond = threading.Condition()
        self._waiting: set[threading.Event] = set()

    def monotonic_ms(self) -> float:
        return self._now

    def time_ms(self) -> int:
        return int(self._now)

    def advance(self, ms: float) -> None:
        if ms < 0:
            raise ValueError(f"ManualClock.advance needs a non-negative step, got {ms}")
        with self._cond:
            self._now += ms
            waiting = list(self._waiting)
        for event in waiting:
            event.set()

    def wait(self, event: threading.Event, timeout_ms: float | None) -> bool:
        deadline = None if timeout_ms is None else self._now + timeout_ms
        with self._cond:
            self._waiting.add(event)
        try:
            while True:
                if event.is_set():
                    return True
                if deadline is not None and self._now >= deadline:
                    return False
                event.wait(0.05)
                if deadline is not None and self._now >= deadline:
                    return event.is_set()
        finally:
            with self._cond:
                self._waiting.discard(event)

"""Processing-time callbacks of one subtask, run by its task thread.

Operators schedule a callback at a processing time (``clock.time_ms()``: the
injectable clock, so tests drive it with a ``ManualClock``); the task fires due
callbacks between two elements, in time order, and never sleeps past the next one.
Periodic watermark emission, processing-time timers and processing-time windows
use it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from ..core.clock import Clock

Callback = Callable[[int], None]


class ScheduledCallback:
    __slots__ = ("cancelled", "time_ms")

    def __init__(self, time_ms: int) -> None:
        self.time_ms = time_ms
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ProcessingTimeService:
    """Task thread only (like every operator method)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._queue: list[tuple[int, int, ScheduledCallback, Callback]] = []
        self._seq = itertools.count()

    def current_time(self) -> int:
        return self.clock.time_ms()

    def schedule(self, time_ms: int, callback: Callback) -> ScheduledCallback:
        """Call ``callback(time_ms)`` once the clock reaches ``time_ms``."""
        handle = ScheduledCallback(int(time_ms))
        heapq.heappush(self._queue, (handle.time_ms, next(self._seq), handle, callback))
        return handle

    def next_time(self) -> int | None:
        """The processing time of the next pending callback, or None."""
        queue = self._queue
        while queue and queue[0][2].cancelled:
            heapq.heappop(queue)
        return queue[0][0] if queue else None

    def wait_ms(self) -> float | None:
        """How long the task may wait before the next callback is due (None: no limit)."""
        due = self.next_time()
        return None if due is None else max(0.0, float(due - self.clock.time_ms()))

    def fire_due(self) -> int:
        """Run every callback whose time has come, in time order; returns how many ran.
        Callbacks scheduled meanwhile for a time already reached run too."""
        fired = 0
        queue = self._queue
        while queue:
            time_ms, _, handle, callback = queue[0]
            if handle.cancelled:
                heapq.heappop(queue)
                continue
            if time_ms > self.clock.time_ms():
                break
            heapq.heappop(queue)
            callback(time_ms)
            fired += 1
        return fired

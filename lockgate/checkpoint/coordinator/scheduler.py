"""Delayed actions for the checkpoint coordinator: periodic triggers and timeouts.

The coordinator never sleeps and never starts threads of its own; it asks a
:class:`Scheduler` to run an action later (M-C1 periodic triggers, M-C4
timeouts, M-C7 rescheduling). Two implementations:

* :class:`ManualScheduler` for tests: nothing runs until the test calls
  :meth:`ManualScheduler.run_due` (after moving its :class:`ManualClock`) or
  :meth:`ManualScheduler.advance`, which moves the clock to each due time in turn.
* :class:`ThreadScheduler`: one daemon thread, ``"lockgate checkpoint scheduler"``,
  runs due actions one at a time.

Guarantees of both: actions run in due-time order, ties in scheduling order;
a cancelled action never starts; an action may schedule further actions; after
``shutdown()`` nothing runs and ``schedule`` returns an already cancelled task.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Protocol

from ...core.clock import Clock, ManualClock

log = logging.getLogger(__name__)

THREAD_NAME = "lockgate checkpoint scheduler"


class ScheduledTask(Protocol):
    """Handle of a scheduled action."""

    def cancel(self) -> None:
        """Make sure the action does not start (no effect once it started or ran)."""

    @property
    def cancelled(self) -> bool: ...


class Scheduler(Protocol):
    """Runs actions after a delay (ms on the scheduler's clock)."""

    def schedule(self, delay_ms: float, action: Callable[[], None]) -> ScheduledTask:
        """Run ``action`` once, ``delay_ms`` from now (negative counts as 0)."""

    def shutdown(self) -> None:
        """Cancel everything scheduled and stop; later ``schedule`` calls do nothing."""


class _Task:
    """An entry of a scheduler's queue; ordered by (due, sequence number)."""

    __slots__ = ("_cancelled", "_on_cancel", "action", "due_ms", "seq")

    def __init__(
        self,
        due_ms: float,
        seq: int,
        action: Callable[[], None],
        on_cancel: Callable[[], None] | None,
    ) -> None:
        self.due_ms = due_ms
        self.seq = seq
        self.action = action
        self._cancelled = False
        self._on_cancel = on_cancel

    def __lt__(self, other: _Task) -> bool:
        return (self.due_ms, self.seq) < (other.due_ms, other.seq)

    def cancel(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            if self._on_cancel is not None:
                self._on_cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def __repr__(self) -> str:
        state = " cancelled" if self._cancelled else ""
        return f"<scheduled at {self.due_ms}ms #{self.seq}{state}>"


class _Queue:
    """A heap of :class:`_Task` with lazy removal of cancelled entries. Not locked."""

    def __init__(self) -> None:
        self._heap: list[_Task] = []
        self._seq = itertools.count()
        self._cancelled = 0

    def push(
        self, due_ms: float, action: Callable[[], None], on_cancel: Callable[[], None]
    ) -> _Task:
        task = _Task(due_ms, next(self._seq), action, on_cancel)
        heapq.heappush(self._heap, task)
        return task

    def note_cancel(self) -> None:
        """A task still in the heap was cancelled: compact when most entries are."""
        self._cancelled += 1
        if self._cancelled > 64 and self._cancelled * 2 > len(self._heap):
            self._heap = [t for t in self._heap if not t.cancelled]
            heapq.heapify(self._heap)
            self._cancelled = 0

    def _drop_cancelled_head(self) -> None:
        while self._heap and self._heap[0].cancelled:
            heapq.heappop(self._heap)
            self._cancelled = max(0, self._cancelled - 1)

    def next_due(self) -> float | None:
        self._drop_cancelled_head()
        return self._heap[0].due_ms if self._heap else None

    def pop_due(self, now_ms: float) -> _Task | None:
        self._drop_cancelled_head()
        if self._heap and self._heap[0].due_ms <= now_ms:
            task = heapq.heappop(self._heap)
            task._on_cancel = None  # it left the heap: cancelling it now changes no count
            return task
        return None

    def clear(self) -> None:
        for task in self._heap:
            task._on_cancel = None
            task._cancelled = True
        self._heap.clear()
        self._cancelled = 0

    def __len__(self) -> int:
        return sum(1 for t in self._heap if not t.cancelled)


def _cancelled_task() -> _Task:
    task = _Task(0.0, -1, lambda: None, None)
    task.cancel()
    return task


class ManualScheduler:
    """A scheduler driven by the test: actions run only inside :meth:`run_due` or
    :meth:`advance`, in the calling thread. An exception raised by an action
    propagates to the caller (tests want to see it); the remaining due actions
    stay queued."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._queue = _Queue()
        self._lock = threading.Lock()
        self._shut_down = False

    def schedule(self, delay_ms: float, action: Callable[[], None]) -> ScheduledTask:
        with self._lock:
            if self._shut_down:
                return _cancelled_task()
            return self._queue.push(
                self.clock.monotonic_ms() + max(delay_ms, 0.0), action, self._note_cancel
            )

    def _note_cancel(self) -> None:
        with self._lock:
            self._queue.note_cancel()

    def run_due(self) -> int:
        """Run every action due at the clock's current time (including those that due
        actions schedule for now or earlier); return how many ran."""
        ran = 0
        while True:
            with self._lock:
                task = None if self._shut_down else self._queue.pop_due(self.clock.monotonic_ms())
            if task is None:
                return ran
            task.action()
            ran += 1

    def advance(self, ms: float) -> int:
        """Move the clock forward by ``ms``, stopping at each due time on the way to run
        what is due then (so an action sees the clock at its own due time); return how
        many actions ran."""
        target = self.clock.monotonic_ms() + ms
        ran = self.run_due()
        while True:
            with self._lock:
                due = None if self._shut_down else self._queue.next_due()
            if due is None or due > target:
                break
            now = self.clock.monotonic_ms()
            if due > now:
                self.clock.advance(due - now)
            ran += self.run_due()
        now = self.clock.monotonic_ms()
        if target > now:
            self.clock.advance(target - now)
        return ran + self.run_due()

    def next_due_ms(self) -> float | None:
        """Clock time of the earliest action still scheduled (tests)."""
        with self._lock:
            return self._queue.next_due()

    def __len__(self) -> int:
        """Number of actions scheduled and not cancelled."""
        with self._lock:
            return len(self._queue)

    def shutdown(self) -> None:
        with self._lock:
            self._shut_down = True
            self._queue.clear()

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down


class ThreadScheduler:
    """Runs due actions serially on one daemon thread, ``"lockgate checkpoint
    scheduler"``, started on construction. Waits through ``clock.wait`` (so a
    :class:`ManualClock` drives it too). An exception raised by an action is logged
    and never stops the thread. :meth:`shutdown` stops and joins the thread (when
    called from an action, i.e. on the thread itself, it stops without joining)."""

    def __init__(self, clock: Clock, *, name: str = THREAD_NAME) -> None:
        self.clock = clock
        self._queue = _Queue()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._shut_down = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(self, delay_ms: float, action: Callable[[], None]) -> ScheduledTask:
        with self._lock:
            if self._shut_down:
                return _cancelled_task()
            task = self._queue.push(
                self.clock.monotonic_ms() + max(delay_ms, 0.0), action, self._note_cancel
            )
            self._wake.set()
        return task

    def _note_cancel(self) -> None:
        with self._lock:
            self._queue.note_cancel()

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._shut_down:
                    return
                task = self._queue.pop_due(self.clock.monotonic_ms())
                if task is None:
                    due = self._queue.next_due()
                    timeout = None if due is None else max(due - self.clock.monotonic_ms(), 0.0)
                    self._wake.clear()
            if task is not None:
                try:
                    task.action()
                except Exception:  # logged; the scheduler keeps running
                    log.exception("a scheduled checkpoint action raised; the scheduler goes on")
                continue
            self.clock.wait(self._wake, timeout)

    def shutdown(self) -> None:
        with self._lock:
            self._shut_down = True
            self._queue.clear()
            self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down

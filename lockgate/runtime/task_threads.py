"""Runs subtasks as threads until all end, the first one fails, or they are cancelled.

Shared by the local executor (every subtask of a job) and a Spark slot (the
subtasks it hosts). The first error of any subtask stops the wait: the
``on_failure`` callback runs at once (to report it) and every subtask is
cancelled. :meth:`TaskThreads.cancel` (a client's cancel, a coordinator failing
the job) cancels every subtask too.

Bounded end (Flink's ``task.cancellation.timeout``): once the subtasks are
cancelled, each has ``cancel_timeout_s`` seconds to stop. A cancelled task stops at
its next loop turn, or, inside a function operator, before its next record; user
code that blocks (a lock, a socket, an event nobody sets) cannot be interrupted, as
Python threads cannot be killed. Such a thread is *abandoned*: it is a daemon
thread, a warning names it and shows its stack, and :meth:`TaskThreads.run`
returns anyway. An abandoned thread can do no harm later: its channels are
cancelled (its writes raise), its checkpointer drops every snapshot it would still
take or write, and a function operator raises before processing another record.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable

from ..errors import TaskCancelledError
from .task import StreamTask

log = logging.getLogger(__name__)

Failure = tuple[StreamTask, BaseException, str]

#: how long a cancelled subtask may take to stop before its thread is abandoned
DEFAULT_CANCEL_TIMEOUT_S = 5.0

_CANCEL = object()  # queued by cancel(): wakes the waiting thread
_Event = tuple[StreamTask, "BaseException | None", str]  # a task ended (error or None)


def task_label(task: StreamTask) -> str:
    """``'name (subtask)'``, as logs and errors name a subtask."""
    return f"'{task.name} ({task.subtask_index})'"


class TaskNotStoppedError(TaskCancelledError):
    """Subtasks did not stop within the cancellation timeout; their threads were abandoned
    (``abandoned`` lists them, as ``'name (subtask)'``)."""

    def __init__(self, message: str, abandoned: list[str]) -> None:
        super().__init__(message)
        self.abandoned = abandoned


class TaskThreads:
    """One daemon thread per subtask, and the wait for their end (see the module
    docstring). ``cancel_timeout_s``: how long cancelled subtasks may take to stop.
    ``on_started`` runs once every thread started; ``on_finished(task)`` in a task's
    thread when it finished normally; ``on_failure(task, error, traceback)`` once, for
    the first failure."""

    def __init__(
        self,
        tasks: list[StreamTask],
        *,
        cancel_timeout_s: float = DEFAULT_CANCEL_TIMEOUT_S,
        on_failure: Callable[[StreamTask, BaseException, str], None] | None = None,
        on_started: Callable[[], None] | None = None,
        on_finished: Callable[[StreamTask], None] | None = None,
    ) -> None:
        if (
            isinstance(cancel_timeout_s, bool)
            or not isinstance(cancel_timeout_s, (int, float))
            or not cancel_timeout_s > 0
        ):
            raise ValueError(
                f"cancel_timeout_s must be a number of seconds > 0, got {cancel_timeout_s!r}"
            )
        self.tasks = tasks
        self.cancel_timeout_s = float(cancel_timeout_s)
        self._on_failure = on_failure
        self._on_started = on_started
        self._on_finished = on_finished
        self._events: queue.Queue[_Event | object] = queue.Queue()
        self._cancelled = threading.Event()
        #: the subtasks whose threads were abandoned, as ``'name (subtask)'``
        self.abandoned: list[str] = []

    def cancel(self) -> None:
        """Cancel every subtask (thread-safe, idempotent); :meth:`run` then returns within
        ``cancel_timeout_s``, abandoning the threads that did not stop."""
        self._cancelled.set()
        for t in self.tasks:
            t.cancel()
        self._events.put(_CANCEL)

    def run(self) -> Failure | None:
        """Run the subtasks; return the first failure (task, error, traceback), or None
        when every task finished. A cancelled run returns the first task's
        ``TaskCancelledError``, or a :class:`TaskNotStoppedError` when no task ended
        within the timeout."""
        events = self._events
        threads: dict[int, threading.Thread] = {}

        def run(task: StreamTask) -> None:
            try:
                task.run()
                if self._on_finished is not None:
                    self._on_finished(task)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                events.put((task, e, traceback.format_exc()))
                return
            events.put((task, None, ""))

        for t in self.tasks:
            th = threading.Thread(
                target=run, args=(t,), daemon=True, name=f"lockgate {t.name} ({t.subtask_index})"
            )
            threads[id(t)] = th
        for th in threads.values():
            th.start()
        if self._on_started is not None:
            self._on_started()
        running = {id(t): t for t in self.tasks}
        failure: Failure | None = None
        deadline: float | None = None
        while running:
            if deadline is None and self._cancelled.is_set():
                deadline = time.monotonic() + self.cancel_timeout_s
            try:
                item = events.get(
                    timeout=None if deadline is None else max(0.0, deadline - time.monotonic())
                )
            except queue.Empty:
                stuck = [t for t in self.tasks if id(t) in running]
                return self._abandon(stuck, threads, failure)
            if not isinstance(item, tuple):
                continue  # _CANCEL: the deadline starts now
            task: StreamTask = item[0]
            error: BaseException | None = item[1]
            tb: str = item[2]
            running.pop(id(task), None)
            if error is None or failure is not None:
                continue
            failure = (task, error, tb)
            if self._on_failure is not None:
                self._on_failure(task, error, tb)
            self.cancel()
        return failure

    def _abandon(
        self, stuck: list[StreamTask], threads: dict[int, threading.Thread], failure: Failure | None
    ) -> Failure:
        """Give up on ``stuck`` (cancelled, not stopped in time): log each with its
        thread's stack and return the failure to report (the first one, or a
        :class:`TaskNotStoppedError` naming them)."""
        frames = sys._current_frames()
        for t in stuck:
            th = threads[id(t)]
            frame = frames.get(th.ident) if th.ident is not None else None
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "(ended)"
            log.warning(
                "task %s did not stop within %.3g s of cancellation; abandoned "
                "(its daemon thread %r may run on, cut off from the job), its "
                "thread stack:\n%s",
                task_label(t),
                self.cancel_timeout_s,
                th.name,
                stack,
            )
        self.abandoned = [task_label(t) for t in stuck]
        if failure is not None:
            return failure
        names = ", ".join(self.abandoned)
        error = TaskNotStoppedError(
            f"task {names} did not stop within {self.cancel_timeout_s:.3g} s of "
            "cancellation (user code blocked: a lock, a socket, an event nobody sets?); "
            "its thread was abandoned",
            self.abandoned,
        )
        return stuck[0], error, ""


def run_task_threads(
    tasks: list[StreamTask],
    *,
    join_timeout_s: float,
    on_failure: Callable[[StreamTask, BaseException, str], None] | None = None,
    on_started: Callable[[], None] | None = None,
    on_finished: Callable[[StreamTask], None] | None = None,
) -> Failure | None:
    """Run ``tasks`` to their end (:class:`TaskThreads`, ``join_timeout_s`` its
    ``cancel_timeout_s``); return the first failure (task, error, traceback), or None
    when every task finished."""
    return TaskThreads(
        tasks,
        cancel_timeout_s=join_timeout_s,
        on_failure=on_failure,
        on_started=on_started,
        on_finished=on_finished,
    ).run()

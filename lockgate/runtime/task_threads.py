"""Runs subtasks as threads until all end or the first one fails.

Shared by the local executor (every subtask of a job) and a Spark slot (the
subtasks it hosts). The first error of any subtask stops the wait: the
``on_failure`` callback runs at once (to report it), every subtask is
cancelled, and the threads are joined (bounded by ``join_timeout_s``: user
code that blocks cannot be interrupted; such threads are logged).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from typing import Callable

from .task import StreamTask

log = logging.getLogger(__name__)

Failure = tuple[StreamTask, BaseException, str]


def run_task_threads(
    tasks: list[StreamTask],
    *,
    join_timeout_s: float,
    on_failure: Callable[[StreamTask, BaseException, str], None] | None = None,
    on_started: Callable[[], None] | None = None,
    on_finished: Callable[[StreamTask], None] | None = None,
) -> Failure | None:
    """Run ``tasks`` to their end; return the first failure (task, error, traceback), or
    None when every task finished. ``on_started`` runs once every thread started;
    ``on_finished(task)`` in a task's thread when it finished normally."""
    events: queue.Queue[tuple[StreamTask, BaseException | None, str]] = queue.Queue()

    def run(task: StreamTask) -> None:
        try:
            task.run()
            if on_finished is not None:
                on_finished(task)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            events.put((task, e, traceback.format_exc()))
            return
        events.put((task, None, ""))

    threads = [
        threading.Thread(target=run, args=(t,), name=f"lockgate {t.name} ({t.subtask_index})",
                         daemon=True)
        for t in tasks
    ]
    for th in threads:
        th.start()
    if on_started is not None:
        on_started()
    for _ in tasks:
        task, error, tb = events.get()
        if error is None:
            continue
        if on_failure is not None:
            on_failure(task, error, tb)
        for t in tasks:
            t.cancel()
        deadline = time.monotonic() + join_timeout_s
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
        alive = [th.name for th in threads if th.is_alive()]
        if alive:
            log.warning("threads still running after a subtask failed: %s", alive)
        return task, error, tb
    for th in threads:
        th.join()
    return None

"""The checkpoint coordinator's link to an attempt's slots on Spark.

:class:`SparkGateway` sends the coordinator's triggers and notices to the slots over the
control server (slot ``i`` hosts subtask ``i`` of every vertex, so a source subtask's
trigger goes to the slot of its index; completion and abort notices go to every slot).
:func:`checkpoint_dispatch` hands the slots' checkpoint messages (acknowledgements,
declines, finished and end-of-data tasks, running tasks) to the coordinator on the
control server's dispatch thread, in the order they arrived, without passing through
the driver's watch loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...checkpoint.types import TaskAcknowledgement
from .control import (
    ACK,
    CHECKPOINT_ABORTED,
    CHECKPOINT_COMPLETE,
    DECLINE,
    TASK_END_OF_DATA,
    TASK_FINISHED,
    TASK_RUNNING,
    TRIGGER,
    ControlEvent,
    ControlServer,
)


class SparkGateway:
    """Sends the coordinator's triggers and notices to the slots (slot i hosts subtask i
    of every vertex). ``job_error``: the first error the coordinator failed the job
    with (the driver's watch loop fails the attempt with it); later ones are dropped."""

    def __init__(self, server: ControlServer) -> None:
        self.server = server
        self.job_error: BaseException | None = None

    def trigger_source(self, task: tuple[int, int], barrier: Any) -> None:
        self.server.send(task[1], TRIGGER, (task, barrier))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.server.send(None, CHECKPOINT_COMPLETE, checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int, reason: Any) -> None:
        self.server.send(None, CHECKPOINT_ABORTED, checkpoint_id)

    def fail_job(self, error: BaseException) -> None:
        if self.job_error is None:
            self.job_error = error


def checkpoint_dispatch(run: Any) -> Callable[[ControlEvent], bool]:
    """Hands checkpoint messages from slots straight to the coordinator (``run``, the
    attempt's :class:`~lockgate.executor.checkpointing.CheckpointRun`); the dispatcher
    returns whether it took the event (other events go to the watch loop)."""

    def dispatch(event: ControlEvent) -> bool:
        if event.type == ACK and isinstance(event.payload, TaskAcknowledgement):
            run.acknowledge(event.payload)
            return True
        if event.type == DECLINE:
            task, checkpoint_id, reason = event.payload
            run.decline(tuple(task), checkpoint_id, reason)
            return True
        if event.type == TASK_FINISHED:
            task, results = event.payload
            run.task_finished(tuple(task), results)
            return True
        if event.type == TASK_END_OF_DATA:
            task, last_snapshot_id = event.payload
            run.end_of_data(tuple(task), last_snapshot_id)
            return True
        if event.type == TASK_RUNNING:
            run.task_running(tuple(event.payload))
            return True
        return False

    return dispatch

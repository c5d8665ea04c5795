"""LocalExecutor: runs every subtask of a plan as a thread of this process.

For tests, debugging and notebooks. Channels are in-memory and bounded, so
backpressure behaves as on a cluster. The first failure of any subtask
cancels all of them (the attempt fails once every thread stopped or was
abandoned, see below); the restart strategy then decides whether a new attempt
restores the newest checkpoint, or ``execute`` raises ``JobFailedError`` (its
``__cause__`` is the user's exception).

Cancellation and failure end an attempt within ``cancel_timeout_s`` (default 5 s,
as Flink's ``task.cancellation.timeout``): a cancelled task stops at its next loop
turn, or before its next record in a function operator, so the latency of a cancel
is about one buffer timeout plus the time of one record. A thread blocked in user
code (Python threads cannot be killed) is abandoned after the timeout: a warning
names it with its stack, a cancelled job's result lists it in ``abandoned_tasks``,
and it is cut off from the job (its channels are cancelled, its snapshots dropped).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ..core.clock import Clock, SystemClock
from ..errors import ConfigurationError, FailureReason, JobFailedError, TaskCancelledError
from ..graph.execution_plan import ExecutionPlan
from ..job.handle import JobHandle
from ..job.result import JobExecutionResult
from ..runtime.channels import LocalChannel
from ..runtime.final_checkpoint import finished_task_results
from ..runtime.metrics import OperatorCounters
from ..runtime.task import StreamTask
from ..runtime.task_metrics import task_sample
from ..runtime.task_threads import DEFAULT_CANCEL_TIMEOUT_S, TaskThreads
from ..runtime.watermark_report import task_watermarks
from .base import (
    BaseExecutor,
    cancelled_result,
    checkpoint_failure,
    failure_error,
    finished_result,
    user_cause,
)
from .base import (
    checkpoint_run as _checkpoint_run,
)
from .task_builder import build_task
from .wiring import wire_subtask

log = logging.getLogger(__name__)


class LocalExecutor(BaseExecutor):
    """Runs a plan in this process, one thread per subtask.

    ``cancel_timeout_s`` (seconds > 0, default 5) bounds how long a cancelled or failed
    attempt waits for its threads to stop; user code that blocks cannot be
    interrupted: such a thread is abandoned and reported by name (see the module
    docstring). ``join_timeout_s`` is its former name.

    ``execute`` (inherited from :class:`~.base.BaseExecutor`) restarts failed attempts
    as the plan's restart strategy says; each attempt is one :meth:`run_attempt`.
    """

    def describe(self) -> str:
        """Where jobs run, for the start-up log line."""
        return "the local executor (one thread per subtask in this process)"

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        cancel_timeout_s: float = DEFAULT_CANCEL_TIMEOUT_S,
        join_timeout_s: float | None = None,
    ) -> None:
        if join_timeout_s is not None:
            cancel_timeout_s = join_timeout_s
        if (
            isinstance(cancel_timeout_s, bool)
            or not isinstance(cancel_timeout_s, (int, float))
            or not cancel_timeout_s > 0
            or cancel_timeout_s == float("inf")
        ):
            raise ConfigurationError(
                f"cancel_timeout_s must be a finite number of seconds > 0, got "
                f"{cancel_timeout_s!r}: it bounds how long a cancelled job waits for its "
                "threads (e.g. LocalExecutor(cancel_timeout_s=5))"
            )
        self.clock = clock or SystemClock()
        self.cancel_timeout_s = float(cancel_timeout_s)
        #: channels of the last run, for inspection in tests (edge, producer, consumer)
        self.last_channels: dict[tuple[int, int, int], LocalChannel] = {}

    def __repr__(self) -> str:
        return "LocalExecutor()"

    def restart_clock(self) -> Clock:
        """The executor's own clock (``clock``): restart delays run on it, as the
        subtasks' timers do."""
        return self.clock

    def run_attempt(
        self, plan: ExecutionPlan, attempt_number: int, handle: JobHandle
    ) -> JobExecutionResult:
        """One attempt: every subtask, until all finish or one fails."""
        started = time.monotonic()
        gateway = _LocalGateway()
        run = _checkpoint_run(plan, gateway, self.clock, handle.finished_results)
        channels: dict[tuple[int, int, int], LocalChannel] = {}
        for edge in plan.edges.values():
            for p, c in edge.channel_pairs():
                channels[(edge.id, p, c)] = LocalChannel(
                    plan.config.channel_capacity_bytes, name=f"edge {edge.id} {p}->{c}"
                )
        self.last_channels = channels

        tasks: list[StreamTask] = []
        for v in plan.vertices:
            for i in range(v.parallelism):
                outputs, inputs = wire_subtask(
                    plan, v, i, channels.__getitem__, channels.__getitem__
                )
                try:
                    tasks.append(
                        build_task(
                            plan,
                            v,
                            i,
                            output_channels=outputs,
                            input_channels=inputs,
                            signal=threading.Event(),
                            clock=self.clock,
                            attempt_number=attempt_number,
                            storage=run.storage if run else None,
                            responder=run,
                        )
                    )
                except ConfigurationError:
                    raise  # the job cannot run as configured: restarting would not help
                except Exception as e:  # noqa: BLE001 - re-raised with the subtask named
                    raise failure_error(plan.job_name, v.name, i, e) from user_cause(e)

        def started_all() -> None:
            handle.running.set()
            if run is not None:
                run.start()  # the tasks report RUNNING once initialized

        def finished(task: StreamTask) -> None:
            if run is not None:  # FLIP-147: its results, for a restore deploying it finished
                run.task_finished(task.key, finished_task_results(task))

        threads = TaskThreads(
            tasks,
            cancel_timeout_s=self.cancel_timeout_s,
            on_started=started_all,
            on_finished=finished,
        )
        gateway.tasks = {t.key: t for t in tasks}
        gateway.threads = threads
        handle.watermarks = lambda: [w for t in tasks for w in task_watermarks(t)]
        handle.metrics = lambda: [task_sample(t) for t in tasks]
        handle.attach(run.coordinator if run else None, gateway.cancel_all)
        try:
            failure = threads.run()
        finally:
            handle.detach()
            if run is not None:
                run.stop(cancelled=handle.cancelled)  # not a stop with a savepoint
        if failure is not None:
            task, error, _ = failure
            if gateway.job_error is not None:
                raise checkpoint_failure(plan.job_name, gateway.job_error) from gateway.job_error
            if isinstance(error, TaskCancelledError) and handle.stopping:
                result = cancelled_result(
                    plan, (time.monotonic() - started) * 1000, [t.chain.counters() for t in tasks]
                )
                result.abandoned_tasks = list(threads.abandoned)
                return result
            raise failure_error(plan.job_name, task.name, task.subtask_index, error) from (
                user_cause(error)
            )
        counters: list[dict[str, OperatorCounters]] = [t.chain.counters() for t in tasks]
        results: list[tuple[int, dict[str, Any]]] = [
            (t.subtask_index, t.chain.results()) for t in tasks
        ]
        return finished_result(plan, (time.monotonic() - started) * 1000, counters, results)


class _LocalGateway:
    """Delivers the coordinator's triggers and notices to the subtasks' mailboxes."""

    def __init__(self) -> None:
        self.tasks: dict[tuple[int, int], StreamTask] = {}
        self.threads: TaskThreads | None = None
        self.job_error: BaseException | None = None

    def trigger_source(self, task: tuple[int, int], barrier: Any) -> None:
        self.tasks[task].trigger_checkpoint(barrier)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        for t in self.tasks.values():
            t.notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int, reason: Any) -> None:
        for t in self.tasks.values():
            t.notify_checkpoint_aborted(checkpoint_id)

    def fail_job(self, error: BaseException) -> None:
        if self.job_error is None:
            self.job_error = error
        self.cancel_all()

    def cancel_all(self) -> None:
        """Cancel every subtask; the attempt ends within the cancellation timeout."""
        if self.threads is not None:
            self.threads.cancel()
        else:
            for t in self.tasks.values():
                t.cancel()


__all__ = ["LocalExecutor", "JobFailedError", "FailureReason"]

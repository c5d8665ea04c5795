"""The executor contract, and what every executor shares.

:class:`BaseExecutor` holds the one ``execute`` both executors run (the restart loop of
:mod:`lockgate.recovery.failover` around the executor's own attempts); the functions
below turn an attempt's counters, results and failures into the job's result or error,
the same way on every executor.
"""

from __future__ import annotations

import abc
import traceback
from typing import Any, Protocol

from ..core.clock import Clock, SystemClock
from ..core.partitioners import KeyExtractionError
from ..errors import (
    FailureReason,
    JobFailedError,
    MalformedRecordError,
    UserFunctionError,
)
from ..graph.execution_plan import ExecutionPlan
from ..job.handle import JobHandle
from ..job.result import JobExecutionResult, JobStatus
from ..runtime.metrics import OperatorCounters, OperatorMetrics


class Executor(Protocol):
    def execute(self, plan: ExecutionPlan) -> JobExecutionResult:
        """Run ``plan`` to completion; raise ``JobFailedError`` if it fails."""


class BaseExecutor(abc.ABC):
    """An executor as a template: :meth:`execute` runs the job attempt after attempt
    (the same algorithm on every executor), each attempt by the executor's own
    :meth:`run_attempt`.

    Guarantees of :meth:`execute`, the same on every executor (see
    :mod:`lockgate.recovery.failover`): an attempt that raises ``JobFailedError`` is
    followed by another, restoring the newest intact checkpoint this run completed, for
    as long as the plan's restart strategy allows (M-R1, M-R2); otherwise a
    ``JobFailedError`` naming the last cause propagates. A cancel wins over a failure
    racing it (the job ends CANCELED). However the run ends, its two-phase-commit sinks
    are settled before ``execute`` returns or raises: nothing is left pre-committed.
    An executor supplies :meth:`run_attempt` and :meth:`describe`, and may override
    :meth:`restart_clock`.
    """

    def execute(
        self, plan: ExecutionPlan, *, attempt_number: int = 0, handle: JobHandle | None = None
    ) -> JobExecutionResult:
        """Run ``plan`` to the end, restarting failed attempts as its restart strategy
        says (M-R1, M-R2); ``attempt_number`` is the number of the first attempt."""
        # imported here: a process that never runs a job does not load the failover loop
        from ..recovery.failover import run_with_restarts

        return run_with_restarts(
            plan,
            self.run_attempt,
            handle=handle or JobHandle(),
            clock=self.restart_clock(),
            first_attempt=attempt_number,
        )

    @abc.abstractmethod
    def run_attempt(
        self, plan: ExecutionPlan, attempt_number: int, handle: JobHandle
    ) -> JobExecutionResult:
        """One attempt of ``plan``: returns its FINISHED result, or its CANCELED one
        when ``handle`` was cancelled; raises ``JobFailedError`` when it failed (after
        every subtask of the attempt stopped or was abandoned)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Where jobs run, for the start-up log line."""

    def restart_clock(self) -> Clock:
        """The clock the restart strategy's delays run on (default: the system clock;
        called once per :meth:`execute`)."""
        return SystemClock()


def merge_metrics(
    plan: ExecutionPlan, counters: list[dict[str, OperatorCounters]]
) -> dict[str, OperatorMetrics]:
    """Sum per-subtask counters into one entry per operator, keyed by a unique name."""
    by_uid: dict[str, OperatorMetrics] = {}
    for v in plan.vertices:
        for op in v.operators:
            by_uid[op.uid] = OperatorMetrics(uid=op.uid, name=op.name, parallelism=op.parallelism)
    for per_task in counters:
        for uid, c in per_task.items():
            by_uid[uid].add(c)
    names = [m.name for m in by_uid.values()]
    out: dict[str, OperatorMetrics] = {}
    for m in by_uid.values():
        key = m.name if names.count(m.name) == 1 else f"{m.name} [{m.uid}]"
        out[key] = m
    return out


def merge_sink_results(
    plan: ExecutionPlan, results: list[tuple[int, dict[str, Any]]]
) -> dict[str, list[Any]]:
    """Per sink uid, the subtask results ordered by subtask index."""
    ordered = sorted(results, key=lambda r: r[0])
    out: dict[str, list[Any]] = {}
    for _, per_task in ordered:
        for uid, value in per_task.items():
            out.setdefault(uid, []).append(value)
    return out


def failure_error(
    job_name: str, task_name: str, subtask: int, error: BaseException, tb: str | None = None
) -> JobFailedError:
    """The ``JobFailedError`` for a subtask's failure, naming operator and subtask.

    Its ``__cause__`` should be set by the caller (``raise ... from``) to the
    user's own exception where there is one.
    """
    if isinstance(error, UserFunctionError):
        operator, sub, par = error.operator, error.subtask, error.parallelism
        inner = error.error
        reason = FailureReason.USER_CODE
        what = f"operator '{operator}' (subtask {sub + 1}/{par}) raised {type(inner).__name__}: {inner}"
    else:
        operator = getattr(error, "operator", None) or task_name
        reported = getattr(error, "subtask", None)
        sub = subtask if reported is None else int(reported)
        inner = error
        reason = (
            FailureReason.MALFORMED_INPUT
            if isinstance(error, MalformedRecordError)
            else FailureReason.INTERNAL
        )
        what = (
            f"operator '{operator}' in task '{task_name}' (subtask {sub + 1}) failed: "
            f"{type(error).__name__}: {error}"
        )
    if tb is None:
        tb = "".join(traceback.format_exception(type(inner), inner, inner.__traceback__))
    return JobFailedError(
        f"job '{job_name}' failed: {what}\n\nTraceback of the failure:\n{tb}",
        reason=reason,
        operator=operator,
        subtask=sub,
        remote_traceback=tb,
    )


def user_cause(error: BaseException) -> BaseException:
    """The exception to chain as ``__cause__``: the user's own where there is one (also
    the one a ``key_by`` key selector raised)."""
    inner = error.error if isinstance(error, UserFunctionError) else error
    if isinstance(inner, KeyExtractionError) and inner.error is not None:
        return inner.error
    return inner


def finished_result(
    plan: ExecutionPlan,
    duration_ms: float,
    counters: list[dict[str, OperatorCounters]],
    results: list[tuple[int, dict[str, Any]]],
    attempts: int = 1,
) -> JobExecutionResult:
    return JobExecutionResult(
        job_name=plan.job_name,
        status=JobStatus.FINISHED,
        duration_ms=duration_ms,
        operators=merge_metrics(plan, counters),
        sink_results=merge_sink_results(plan, results),
        attempts=attempts,
    )


def cancelled_result(
    plan: ExecutionPlan,
    duration_ms: float,
    counters: list[dict[str, OperatorCounters]] | None = None,
) -> JobExecutionResult:
    """The result of a job stopped by ``JobClient.cancel()`` (or by
    ``stop_with_savepoint``): ``counters`` are its subtasks' record counts up to the
    stop (each subtask's, as ``finished_result`` takes them)."""
    return JobExecutionResult(
        job_name=plan.job_name,
        status=JobStatus.CANCELED,
        duration_ms=duration_ms,
        operators=merge_metrics(plan, counters or []),
    )


def checkpoint_failure(job_name: str, error: BaseException) -> JobFailedError:
    """The ``JobFailedError`` of a job failed by its checkpoint coordinator (M-C6)."""
    return JobFailedError(f"job '{job_name}' failed: {error}", reason=FailureReason.CHECKPOINT)


def checkpoint_run(
    plan: ExecutionPlan, gateway: Any, clock: Any, finished_results: dict[Any, Any] | None = None
) -> Any:
    """The attempt's :class:`~lockgate.executor.checkpointing.CheckpointRun`, or None when
    the plan has no checkpoints (imported lazily: jobs without checkpoints never load
    the coordinator). ``finished_results``: where it keeps the results finished tasks
    report (``JobHandle.finished_results``)."""
    if not plan.checkpointing:
        return None
    from .checkpointing import CheckpointRun

    return CheckpointRun(plan, gateway, clock, finished_results=finished_results)

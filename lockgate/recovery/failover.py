"""Global failover (M-R1, M-R2): run attempts until one finishes or the strategy gives up.

Both executors run one *attempt* at a time (every subtask of the job; any
subtask's failure stops all of them). :func:`run_with_restarts` drives the
attempts:

1. attempt 0 restores what the user asked for (``restore_from``, M-R3) or
   starts empty;
2. when an attempt fails, the failure goes to the restart strategy's backoff;
   if it gives up, :class:`~lockgate.errors.JobFailedError` names the last
   cause and the number of attempts;
3. otherwise, after the backoff (cancellable), the next attempt restores the
   newest intact checkpoint this run completed (falling back to older retained
   ones, then to what attempt 0 restored): every operator gets its state,
   every source rewinds, unaligned channel state is replayed first;
4. with checkpoints, every task of a finishing attempt waited for its final
   checkpoint, whose completion notice committed the last transactions of the
   two-phase-commit sinks in the tasks (FLIP-147, M-X2); without checkpoints,
   the transactions those sinks pre-committed at the end of their input are
   committed here once the attempt finished, retried with the same backoff when
   a commit fails (M-X3);
5. however the run ends, two-phase-commit sinks are settled
   (:func:`~lockgate.recovery.settle.settle_two_phase_sinks`): nothing is left
   pre-committed. After a run that finished with checkpoints this commits
   nothing (the tasks did); it aborts what failed attempts left behind. From the
   run's start until then the driver marks the run alive for each sink that can
   (:func:`~lockgate.recovery.settle.hold_two_phase_runs`: file sinks' run locks), so
   a run restored from one of its checkpoints or savepoints meanwhile (a fork) never
   deletes what it may still commit, also between its attempts.

A checkpoint restored is checked first (:func:`~.finished.check_finished_chains`):
tasks whose operators all finished in it are deployed as finished (FLIP-147), and
a task mixing finished and unfinished operators (a job changed since) is refused.

Checkpoints that were in storage before this run started (an earlier run of
the job) are never restored automatically, only through ``restore_from``.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

from ..checkpoint.storage_url import open_storage
from ..core.clock import Clock
from ..errors import FailureReason, JobFailedError
from ..graph.execution_plan import ExecutionPlan
from ..job.handle import JobHandle
from ..job.result import JobExecutionResult, JobStatus
from .finished import check_finished_chains
from .non_restartable import non_restartable_cause, not_restartable_failure
from .restart_strategy import RestartBackoff, RestartStrategy
from .restore import CommittedOutputGuard, RestoreSpec, newest_restorable
from .settle import hold_two_phase_runs, release_two_phase_runs, settle_two_phase_sinks

log = logging.getLogger(__name__)

RunAttempt = Callable[[ExecutionPlan, int, JobHandle], JobExecutionResult]


def default_restart_strategy(plan: ExecutionPlan) -> RestartStrategy:
    """Flink's defaults: with checkpoints, exponential delay (unlimited attempts);
    without, no restarts (a failure would lose the state anyway)."""
    return RestartStrategy.exponential_delay() if plan.checkpointing else RestartStrategy.none()


def run_with_restarts(
    plan: ExecutionPlan,
    run_attempt: RunAttempt,
    *,
    handle: JobHandle,
    clock: Clock,
    first_attempt: int = 0,
) -> JobExecutionResult:
    """Run ``plan`` attempt after attempt (see the module docstring)."""
    floor = _newest_completed(plan)
    committed_in_tasks = False
    alive = hold_two_phase_runs(plan)  # until settled: a fork never takes it for ended
    try:
        result = _run_attempts(
            plan, run_attempt, handle=handle, clock=clock, first_attempt=first_attempt, floor=floor
        )
        # FLIP-147: every task of a finished checkpointed attempt ended after its final
        # checkpoint's completion notice, which committed its sinks' transactions
        committed_in_tasks = plan.checkpointing and result.status is JobStatus.FINISHED
        return result
    finally:
        try:
            settle_two_phase_sinks(
                plan,
                floor,
                getattr(handle, "final_savepoint", None) or _newest_rescale_savepoint(plan, handle),
                committed_in_tasks=committed_in_tasks,
            )
        finally:
            release_two_phase_runs(alive)


def _newest_rescale_savepoint(plan: ExecutionPlan, handle: JobHandle) -> str | None:
    """The savepoint of the run's last rescale when no checkpoint completed after it:
    the run's newest snapshot, whose transactions the settling commits."""
    taken = getattr(handle, "rescale_savepoint", None)
    if taken is None or not plan.checkpointing:
        return None
    checkpoint_id, location = taken
    # an unreadable storage reads as none newer: the savepoint is then the safe choice
    return None if _newest_completed(plan) > checkpoint_id else str(location)


def _run_attempts(
    plan: ExecutionPlan,
    run_attempt: RunAttempt,
    *,
    handle: JobHandle,
    clock: Clock,
    first_attempt: int,
    floor: int,
) -> JobExecutionResult:
    strategy = plan.restart_strategy or default_restart_strategy(plan)
    backoff = strategy.create_backoff(clock)
    initial: RestoreSpec | None = plan.restore
    restore = initial
    attempt = first_attempt
    started = time.monotonic()
    rescales = _Rescales()
    while True:
        attempt_plan = copy.copy(plan)
        attempt_plan.restore = restore
        handle.plan = attempt_plan
        # the executor publishes the attempt's readings once it runs: until then, none
        # (an attempt failing before would count the last one's twice)
        handle.metrics = handle.watermarks = None
        if restore is not None:
            log.info("job %r attempt %d restores %s", plan.job_name, attempt, restore.location)
            check_finished_chains(attempt_plan, restore)
        attempt_started = time.monotonic()
        try:
            result = run_attempt(attempt_plan, attempt, handle)
        except Exception as failure:
            if not isinstance(failure, JobFailedError) and not rescales.on_probation:
                raise  # the job cannot run as configured
            request = handle.take_rescale()
            if rescales.can_begin(plan, request, handle):
                # stopped for a rescale (the stop may look like a failure)
                plan, restore = rescales.begin(plan, request, handle, attempt, attempt_started)
                attempt += 1
                continue
            handle.end_attempt(
                attempt,
                JobStatus.FAILED,
                (time.monotonic() - attempt_started) * 1000,
                error=_first_line(failure),
            )
            plan, failure = rescales.after_failure(plan, failure)
            if handle.cancel_requested.is_set():
                # cancel wins, as in Flink: an attempt failing while it is cancelled (the
                # failure raced the cancel, or the cancel interrupted it) ends the job
                # CANCELED, not FAILED; the failure stays in the attempt's history
                log.info(
                    "job %r attempt %d failed while being cancelled (%s): the job is cancelled",
                    plan.job_name,
                    attempt,
                    _first_line(failure),
                )
                return _cancelled(plan, started, attempt - first_attempt + 1, handle)
            repeated = handle.restart_causes.record(failure, attempt)
            fatal = non_restartable_cause(failure)
            if fatal is not None:
                raise not_restartable_failure(
                    plan.job_name, failure, fatal, attempt - first_attempt + 1
                ) from failure.__cause__
            backoff.notify_failure()
            if not backoff.can_restart():
                raise _gave_up(
                    plan, failure, attempt - first_attempt + 1, strategy, backoff
                ) from failure.__cause__
            delay = backoff.backoff_ms()
            log.warning(
                "job %r attempt %d failed (%s); %s; restarting in %.0f ms (%s)",
                plan.job_name,
                attempt,
                _first_line(failure),
                repeated.describe(),
                delay,
                strategy,
            )
            if _cancelled_while_waiting(clock, handle, delay):
                return _cancelled(plan, started, attempt - first_attempt + 1, handle)
            restore = rescales.newest(_restore_point(plan, floor)) or initial
            attempt += 1
            backoff.notify_restarted()
            continue
        request = handle.take_rescale()
        if result.status is JobStatus.CANCELED and rescales.can_begin(plan, request, handle):
            plan, restore = rescales.begin(plan, request, handle, attempt, attempt_started)
            attempt += 1
            continue
        if request is not None:
            request.dropped(f"the job ended ({result.status.value}) first")
        if result.status is JobStatus.FINISHED:
            if restore is not None:
                _results_of_finished_tasks(attempt_plan, restore, result, handle)
            _commit_final_transactions(plan, result, backoff, clock)
        _span_the_run(result, handle, attempt, attempt_started, started)
        result.attempts = attempt - first_attempt + 1
        result.restart_causes = handle.restart_causes.snapshot()
        return result


class _Rescales:
    """The rescales of one run (requested by the autoscaler, :mod:`lockgate.autoscaling`).

    A rescale ends the running attempt (it stopped after its savepoint) and starts the
    next one at the new parallelism from that savepoint. The rescaled attempt is on
    probation until it completes a checkpoint: if it fails before, the run goes back
    to the previous parallelism (restoring the savepoint, or a newer checkpoint) and
    the decision is marked rolled back. Failures after a rescale never restore a
    checkpoint older than its savepoint: the savepoint's transactions were committed
    when the rescaled attempt restored it, so an older one would repeat output."""

    def __init__(self) -> None:
        self.savepoint: RestoreSpec | None = None
        self.previous: ExecutionPlan | None = None
        self.request: Any = None

    @property
    def on_probation(self) -> bool:
        return self.previous is not None

    def can_begin(self, plan: ExecutionPlan, request: Any, handle: JobHandle) -> bool:
        """Whether ``request`` (None: none) is to be carried out now; a request that is
        not is told why. Not when the job is being cancelled or stopped with a
        savepoint, nor when a checkpoint completed after its savepoint (the savepoint is
        no longer the newest snapshot: restoring it would repeat output)."""
        if request is None:
            return False
        why = None
        if handle.cancel_requested.is_set() or handle.final_savepoint is not None:
            why = "the job is being cancelled or stopped"
        elif _newest_completed(plan) > request.restore.checkpoint_id:
            why = "a checkpoint completed after its savepoint"
        if why is None:
            return True
        request.dropped(why)
        return False

    def begin(
        self,
        plan: ExecutionPlan,
        request: Any,
        handle: JobHandle,
        attempt: int,
        attempt_started: float,
    ) -> tuple[ExecutionPlan, RestoreSpec]:
        handle.end_attempt(
            attempt,
            JobStatus.CANCELED,
            (time.monotonic() - attempt_started) * 1000,
            error=f"stopped to rescale: {request.describe}",
        )
        log.warning(
            "job %r: attempt %d stopped to rescale (%s); attempt %d restores %s",
            plan.job_name,
            attempt,
            request.describe,
            attempt + 1,
            request.restore.location,
        )
        self.savepoint = request.restore
        handle.rescale_savepoint = (request.restore.checkpoint_id, request.restore.location)
        self.previous = plan
        self.request = request
        try:
            request.begun()  # e.g. a rerun of the job resumes from the savepoint now
        except Exception:  # bookkeeping only
            log.exception("recording the start of a rescale failed")
        new_plan: ExecutionPlan = request.plan
        return new_plan, request.restore

    def after_failure(
        self, plan: ExecutionPlan, failure: BaseException
    ) -> tuple[ExecutionPlan, JobFailedError]:
        """The plan the next attempt runs after ``failure`` (the previous one when a
        rescaled attempt failed before its first checkpoint), and the failure as a
        ``JobFailedError``."""
        previous = self.end_of_failed_attempt(plan, failure)
        plan = previous if previous is not None else plan
        if not isinstance(failure, JobFailedError):
            failure = _as_job_failure(plan, failure)
        return plan, failure

    def end_of_failed_attempt(
        self, plan: ExecutionPlan, failure: BaseException
    ) -> ExecutionPlan | None:
        """The plan to go back to when a rescaled attempt failed before its first
        checkpoint (None: keep ``plan``); probation ends either way."""
        previous, request = self.previous, self.request
        self.previous = self.request = None
        if previous is None or _newest_completed(plan) > request.restore.checkpoint_id:
            return None
        log.warning(
            "job %r: the rescaled attempt failed before its first checkpoint (%s): back to "
            "the previous parallelism",
            plan.job_name,
            _first_line(failure),
        )
        try:
            request.rolled_back(_first_line(failure))
        except Exception:  # bookkeeping only
            log.exception("recording a rolled back rescale failed")
        return previous

    def newest(self, point: RestoreSpec | None) -> RestoreSpec | None:
        """``point``, unless the last rescale's savepoint is newer."""
        if self.savepoint is None:
            return point
        if point is None or point.checkpoint_id < self.savepoint.checkpoint_id:
            return self.savepoint
        return point


def _newest_completed(plan: ExecutionPlan) -> int:
    """The newest completed checkpoint id in the plan's storage (0: none, or unreadable:
    that fails later, with context)."""
    if not plan.checkpointing:
        return 0
    assert plan.checkpoint is not None and plan.checkpoint.storage is not None
    storage = open_storage(plan.checkpoint.storage)
    try:
        return max(storage.completed_ids(), default=0)
    except Exception as e:  # noqa: BLE001 - then nothing is known to be newer
        log.warning("cannot list the checkpoints in %s: %s", storage.url, e)
        return 0


def _as_job_failure(plan: ExecutionPlan, error: BaseException) -> JobFailedError:
    """A rescaled attempt that could not start (e.g. too few slots), as a failure."""
    failure = JobFailedError(
        f"job '{plan.job_name}' failed: the rescaled attempt could not start: "
        f"{type(error).__name__}: {error}",
        reason=FailureReason.INTERNAL,
    )
    failure.__cause__ = error
    return failure


def _span_the_run(
    result: JobExecutionResult,
    handle: JobHandle,
    attempt: int,
    attempt_started: float,
    run_started: float,
) -> None:
    """Make the last attempt's ``result`` the run's: its duration from the start of the
    first attempt, its record counts plus those of the earlier attempts (replayed
    records included: each attempt's own counts, added up), every attempt listed."""
    earlier = handle.earlier_totals()
    handle.end_attempt(
        attempt,
        result.status,
        (time.monotonic() - attempt_started) * 1000,
        operators={m.uid: (m.records_in, m.records_out) for m in result.operators.values()},
    )
    for m in result.operators.values():
        records_in, records_out = earlier.get(m.uid, (0, 0))
        m.add_earlier_attempts(records_in, records_out)
    result.duration_ms = (time.monotonic() - run_started) * 1000
    result.attempt_history = list(handle.attempt_history)


def committed_output_guard(plan: ExecutionPlan, allow: bool) -> CommittedOutputGuard:
    """The guard against restoring past output the plan's two-phase-commit sinks may
    have committed (``allow``: ``checkpoint_config.allow_replaying_committed_output``)."""
    from .settle import two_phase_sinks

    return CommittedOutputGuard(
        {uid: plan.operator_names.get(uid, uid) for uid in two_phase_sinks(plan)}, allow
    )


def _restore_point(plan: ExecutionPlan, floor: int) -> RestoreSpec | None:
    """The newest intact checkpoint completed by this run, or None. Raises
    :class:`~.restore.RestoreError` when a damaged newer one completed and its
    two-phase-commit sinks may have committed output (unless allowed)."""
    if not plan.checkpointing:
        return None
    assert plan.checkpoint is not None and plan.checkpoint.storage is not None
    guard = committed_output_guard(plan, plan.checkpoint.allow_replaying_committed_output)
    return newest_restorable(open_storage(plan.checkpoint.storage), newer_than=floor, guard=guard)


def _cancelled_while_waiting(clock: Clock, handle: JobHandle, delay_ms: float) -> bool:
    if delay_ms <= 0:
        return handle.cancel_requested.is_set()
    return clock.wait(handle.cancel_requested, delay_ms)


def _cancelled(
    plan: ExecutionPlan, started: float, attempts: int, handle: JobHandle
) -> JobExecutionResult:
    return JobExecutionResult(
        job_name=plan.job_name,
        status=JobStatus.CANCELED,
        duration_ms=(time.monotonic() - started) * 1000,
        attempts=attempts,
        restart_causes=handle.restart_causes.snapshot(),
        attempt_history=list(handle.attempt_history),
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _gave_up(
    plan: ExecutionPlan,
    last: JobFailedError,
    attempts: int,
    strategy: RestartStrategy,
    backoff: RestartBackoff,
) -> JobFailedError:
    if attempts == 1 and strategy.kind == "none":
        last.attempts = 1
        return last  # no restarts configured: the failure as it is
    text = str(last)
    body = text.split(": ", 1)[1] if text.startswith(f"job '{plan.job_name}' failed: ") else text
    error = JobFailedError(
        f"job '{plan.job_name}' failed after {attempts} attempts ({backoff.give_up_reason()}); "
        f"the last failure: {body}",
        reason=last.reason,
        operator=last.operator,
        subtask=last.subtask,
        remote_traceback=last.remote_traceback,
        attempts=attempts,
    )
    return error


def _results_of_finished_tasks(
    plan: ExecutionPlan, restore: RestoreSpec, result: JobExecutionResult, handle: JobHandle
) -> None:
    """The sink results of the subtasks the restored checkpoint recorded as finished
    (FLIP-147): they left no state, so the last attempt either did not run them
    (restored as finished: no result) or ran them from empty state, with no input left
    (their upstream tasks finished before them). What they reported when they finished,
    in an earlier attempt of this run, stands in; the executor's checkpoint run already
    put what such a subtask collected again after it (``CheckpointRun.task_finished``).
    Only at the parallelism the checkpoint recorded; subtasks that finished in an
    earlier run (``restore_from``) returned theirs to that run."""
    for vertex in plan.vertices:
        for op in vertex.operators:
            values = result.sink_results.get(op.uid)
            entry = restore.finished_operators.get(op.uid)
            if values is None or entry is None or entry[0] != vertex.parallelism:
                continue
            for subtask in entry[1]:
                reported = handle.finished_results.get((vertex.id, subtask))
                if reported is not None and op.uid in reported and subtask < len(values):
                    values[subtask] = reported[op.uid]


def _commit_final_transactions(
    plan: ExecutionPlan, result: JobExecutionResult, backoff: RestartBackoff, clock: Clock
) -> None:
    """Commit what two-phase-commit sinks pre-committed at the end of their input; a
    failing commit is retried after the strategy's backoff (commits are idempotent)."""
    from ..connectors.two_phase_commit import FinalCommit, commit_final

    for uid, values in result.sink_results.items():
        finals = []
        for i, value in enumerate(values):
            if isinstance(value, FinalCommit):
                if value.transactions:
                    finals.append((i, value))
                else:  # the final checkpoint committed them in the task (FLIP-147)
                    values[i] = None
        if not finals:
            continue
        sink = _sink_of(plan, uid)
        for index, final in finals:
            while True:
                try:
                    commit_final(sink, final)
                    break
                except Exception as e:
                    backoff.notify_failure()
                    fatal = non_restartable_cause(e)
                    if fatal is not None or not backoff.can_restart():
                        why = (
                            f"{type(fatal).__name__} is not restartable"
                            if fatal
                            else f"the restart strategy gives up ({backoff.give_up_reason()})"
                        )
                        raise JobFailedError(
                            f"job '{plan.job_name}' failed: committing the last transactions "
                            f"of sink '{plan.operator_names.get(uid, uid)}' (subtask {index}) "
                            f"failed and {why}: {e}",
                            reason=FailureReason.USER_CODE,
                            operator=plan.operator_names.get(uid, uid),
                            subtask=index,
                            restartable=fatal is None,
                        ) from e
                    delay = backoff.backoff_ms()
                    log.warning(
                        "committing the last transactions of sink %r failed (%s); "
                        "retrying in %.0f ms",
                        uid,
                        e,
                        delay,
                    )
                    clock.wait(threading.Event(), delay)
            values[index] = None


def _sink_of(plan: ExecutionPlan, uid: str) -> Any:
    for v in plan.vertices:
        for op in v.operators:
            if op.uid == uid:
                factory = cloudpickle.loads(op.payload)
                return factory.kwargs["sink"]
    raise KeyError(f"no operator with uid {uid!r} in the plan")

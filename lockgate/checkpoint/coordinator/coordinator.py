"""The checkpoint coordinator: triggers checkpoints, collects acknowledgements, completes
or aborts them (M-C1 … M-C9). It runs on the driver, beside the job.

Like Flink's CheckpointCoordinator it delegates to small collaborators
(DESIGN.md §5): :func:`~.request_decider.decide_trigger` (may a checkpoint start
now, M-C1), :class:`~.id_counter.CheckpointIdCounter`,
:class:`~.pending.PendingCheckpoint` (M-C2, M-C5),
:class:`~.failure_manager.CheckpointFailureManager` (M-C6),
:class:`~.completed_store.CompletedCheckpointStore` (M-C8) and
:class:`~.stats.CheckpointStatsTracker`. Storage is the narrow
:class:`~lockgate.checkpoint.storage.CheckpointStorage`; time is the injected
clock; delayed work (periodic triggers, timeouts) goes through the injected
:class:`~.scheduler.Scheduler`. It never sleeps and starts no thread.

Guarantees:

* Checkpoint ids are strictly increasing and never reused on the storage, across
  attempts and runs (the id counter reserves them durably; :meth:`shutdown` gives
  back the unused ones); each barrier carries the id, the
  trigger timestamp (``clock.time_ms()``) and options: savepoints are aligned;
  checkpoints are unaligned when ``config.unaligned`` and ``aligned_timeout`` is
  0 (with a positive aligned timeout, barriers start aligned) (M-E2). Several
  checkpoints may be pending at once, up to ``max_concurrent`` (M-E3).
* A trigger is cancelled, before an id is obtained and again right before the
  triggers are sent, when a M-C1 precondition fails; the reason is returned.
  Forced triggers (savepoints) skip the concurrency and pause checks.
* Only source tasks are triggered; every task acknowledges; every task is
  told when a checkpoint completes or is aborted (M-C3).
* Checkpoints after tasks finished (Flink's FLIP-147, :mod:`.plan`): a finished
  task is neither triggered nor waited for, and the checkpoint records it as
  finished (``CompletedCheckpoint.finished_operators``); checkpoints go on while
  any task runs. Once every task feeding a running task has finished, that task
  is triggered itself. A task that finishes while a checkpoint waits for its
  acknowledgement counts as finished for it (it finished after its final
  checkpoint completed: it has no state left), unless that checkpoint was
  triggered on it: then no barrier of it left the task and tasks downstream may
  never see it, so it is aborted (``TASK_NOT_RUNNING``, not a counted failure)
  and the next one, triggered promptly, reaches them directly. A task reported
  RUNNING after it finished stays finished.
* A task that reached the end of its data waits for its final checkpoint
  (:meth:`task_reached_end_of_data`): unless a pending checkpoint is newer than
  the task's last snapshot before that point, the next periodic trigger is moved
  to as soon as the minimum pause allows, so a bounded job does not wait a whole
  interval to end.
* A checkpoint not complete ``timeout`` after its trigger is aborted
  (``TIMEOUT``); an error while triggering (a master hook, the gateway) aborts it
  (``TRIGGER_FAILED``) (M-C4).
* :meth:`receive_acknowledge` returns an :class:`AckResult`; the state an
  UNKNOWN or DISCARDED acknowledgement reported is deleted (M-C5).
* A decline aborts the checkpoint and the tasks are told; consecutive counted
  failures beyond ``tolerable_failures`` fail the job through
  ``gateway.fail_job(CheckpointFailedError)`` (M-C6). A decline of a checkpoint that is
  no longer pending changes nothing (not counted).
* An aborted checkpoint leaves no folder behind (M-C4, M-C8): the tasks are told first
  (so their writes in progress stop), then ``chk-<id>/`` is discarded; a task's write
  still in progress may create it again, so a late acknowledgement (DISCARDED) or
  decline of a recently aborted checkpoint discards the folder again (the task discards
  it itself when the abort notice cancelled its write).
* Completion writes ``_metadata`` (the checkpoint exists from then on), adds it
  to the store (which writes the durable pointer and discards beyond
  ``retained``; savepoints are not added, M-S1), aborts older pending checkpoints
  (``SUBSUMED``; never a pending savepoint: it completes or fails on its own),
  reschedules the periodic trigger, and notifies the tasks and the master hooks
  (M-C7, M-C8, M-C9). Tasks are told only after the checkpoint
  is durable. A failure while finalizing aborts it (``FINALIZE_FAILED``).

Threads: every public method may be called from any thread. One re-entrant
lock guards the state; gateway methods (non-blocking by contract) are called
under it, master hooks outside it. The scheduler passed in belongs to the
coordinator: :meth:`shutdown` shuts it down (call it outside gateway callbacks).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Protocol

from ...core.clock import Clock
from ...core.elements import CheckpointBarrier, CheckpointOptions, CheckpointType
from ...errors import CheckpointFailedError, ConfigurationError
from ..config import CheckpointConfig
from ..storage import CheckpointStorage
from ..types import (
    CheckpointFailureReason,
    CheckpointStats,
    StateHandle,
    TaskAcknowledgement,
    TaskKey,
)
from .completed_store import CompletedCheckpoint, CompletedCheckpointStore
from .failure_manager import CheckpointFailureManager
from .hooks import MasterHook, master_state_name
from .id_counter import CheckpointIdCounter
from .pending import AckResult, PendingCheckpoint
from .plan import CheckpointPlan, JobTopology, finished_operators, plan_checkpoint
from .request_decider import TriggerFacts, decide_trigger, pause_remaining_ms
from .scheduler import ScheduledTask, Scheduler
from .stats import CheckpointStatsTracker

log = logging.getLogger(__name__)

R = CheckpointFailureReason

#: how many aborted checkpoint ids are remembered to answer late acks with DISCARDED
RECENTLY_ABORTED = 256


class TaskGateway(Protocol):
    """How the coordinator reaches the tasks; implemented by executors. No method may
    block (they are called under the coordinator's lock) or call back into the
    coordinator synchronously."""

    def trigger_source(self, task: TaskKey, barrier: CheckpointBarrier) -> None:
        """Ask source task ``task`` to take checkpoint ``barrier`` (M-T1). Raising means
        the trigger failed (the checkpoint is aborted, M-C4)."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Tell every task that the checkpoint is complete and durable (M-C3, M-C7)."""

    def notify_checkpoint_aborted(
        self, checkpoint_id: int, reason: CheckpointFailureReason
    ) -> None:
        """Tell every task that the checkpoint was aborted (M-C6)."""

    def fail_job(self, error: BaseException) -> None:
        """Fail the job with ``error`` (too many checkpoint failures, M-C6)."""


class CheckpointCoordinator:
    """Coordinates the checkpoints of one job (see the module docstring)."""

    def __init__(
        self,
        config: CheckpointConfig,
        *,
        job_name: str,
        source_tasks: Sequence[TaskKey],
        tasks: Sequence[TaskKey],
        gateway: TaskGateway,
        storage: CheckpointStorage,
        clock: Clock,
        scheduler: Scheduler,
        hooks: Iterable[MasterHook] = (),
        id_counter: CheckpointIdCounter | None = None,
        stats_history: int = 100,
        topology: JobTopology | None = None,
    ) -> None:
        """``tasks``: every task of the job (all acknowledge, M-C3); ``source_tasks``:
        those that are triggered (they acknowledge too, listed in ``tasks`` or not).
        ``topology``: the job's upstream tasks and operators (:class:`~.plan.JobTopology`):
        with it, tasks whose upstream tasks all finished are triggered, and completed
        checkpoints name their finished operators; without it only ``source_tasks`` are
        ever triggered and finished tasks are recorded under no operator.
        ``id_counter``: default, one continuing after the newest id in ``storage``;
        pass the previous coordinator's counter to a new one to never reuse an id.
        Reads the completed checkpoints already in ``storage`` (M-C8)."""
        config.validate()
        self._config = config
        self._min_pause_ms = float(config.min_pause_ms)
        self._timeout_ms = float(config.timeout_ms)
        self.job_name = job_name
        self._sources: list[TaskKey] = list(dict.fromkeys(source_tasks))
        self._ack_tasks: frozenset[TaskKey] = frozenset(tasks) | frozenset(self._sources)
        #: every task, sources first: the order triggers are sent in
        self._all_tasks: list[TaskKey] = list(dict.fromkeys([*self._sources, *tasks]))
        self._topology = topology if topology is not None else JobTopology()
        self._gateway = gateway
        self._storage = storage
        self._clock = clock
        self._scheduler = scheduler
        self._hooks: list[MasterHook] = list(hooks)
        identifiers = [h.identifier for h in self._hooks]
        if len(set(identifiers)) != len(identifiers):
            raise ConfigurationError(f"master hook identifiers must be unique, got {identifiers}")
        self._id_counter = id_counter if id_counter is not None else CheckpointIdCounter(storage)
        self._failures = CheckpointFailureManager(config.tolerable_failures)
        self._store = CompletedCheckpointStore(storage, config.retained)
        self._store.recover()
        self._stats = CheckpointStatsTracker(clock, stats_history)

        self._lock = threading.RLock()
        self._running: set[TaskKey] = set()
        self._finished: set[TaskKey] = set()
        self._pending: dict[int, PendingCheckpoint] = {}
        #: savepoints that stop nothing (Flink >= 1.15's intermediate savepoints): their
        #: completion is not a recovery point, so it commits nothing in the tasks
        self._intermediate: set[int] = set()
        self._timeouts: dict[int, ScheduledTask] = {}
        self._recently_aborted: OrderedDict[int, None] = OrderedDict()
        self._savepoints: dict[int, str] = {}
        # savepoint id -> its CompletedCheckpoint, or the reason it failed (M-S1)
        self._savepoint_outcomes: dict[int, CompletedCheckpoint | CheckpointFailureReason] = {}
        self._outcome = threading.Condition(self._lock)
        self._last_completion_ms: float | None = None
        self._shut_down = False
        # the job was failed (too many checkpoint failures): nothing is triggered any more
        self._failing = False
        # periodic triggering (M-C1, M-C7)
        self._periodic_stopped = False
        self._periodic_active = False
        self._periodic_task: ScheduledTask | None = None
        self._periodic_due_ms: float | None = None
        self._periodic_token = 0
        self._periodic_missed = False
        # FLIP-147: task -> the newest checkpoint it snapshotted before the end of its
        # data (as it reported it); any newer checkpoint is its final one
        self._awaiting_final: dict[TaskKey, int] = {}
        self._last_triggered_id = 0
        # ids whose master hooks run (triggers not sent yet): not completed meanwhile
        self._triggering: set[int] = set()
        # pending checkpoint id -> the tasks it was sent to
        self._triggered: dict[int, frozenset[TaskKey]] = {}

    # ------------------------------------------------------------------ task states

    def task_running(self, task: TaskKey) -> None:
        """The executor reports ``task`` RUNNING (tasks start not running). A task that
        already finished in this attempt stays finished (its finish may be reported
        before the executor reports every task running)."""
        with self._lock:
            if task not in self._finished:
                self._running.add(task)

    def task_finished(self, task: TaskKey) -> None:
        """The executor reports ``task`` finished: it ended after its final checkpoint
        completed (FLIP-147). Later checkpoints neither trigger nor wait for it and
        record it as finished; pending checkpoints still waiting for its
        acknowledgement record it as finished too, and complete if it was the last."""
        completed: list[CompletedCheckpoint] = []
        with self._lock:
            self._running.discard(task)
            self._finished.add(task)
            self._awaiting_final.pop(task, None)
            for checkpoint_id in sorted(self._pending):
                pending = self._pending.get(checkpoint_id)
                if pending is None:
                    continue
                if (
                    task in self._triggered.get(checkpoint_id, ())
                    and task in pending.tasks_to_acknowledge
                ):
                    # triggered, it ended without taking the checkpoint: no barrier left
                    # it, so tasks downstream of it may never see this checkpoint; the
                    # next one triggers them directly
                    log.debug(
                        "checkpoint %d aborted: task %s ended before it took it",
                        checkpoint_id,
                        task,
                    )
                    self._abort(pending, R.TASK_NOT_RUNNING)
                    continue
                if not pending.acknowledge_finished(task):
                    continue
                if pending.is_fully_acknowledged and checkpoint_id not in self._triggering:
                    done = self._complete(pending)
                    if done is not None:
                        completed.append(done)
            self._expedite()
            hooks = list(self._hooks)
        self._notify_hooks(hooks, completed)

    def task_reached_end_of_data(self, task: TaskKey, last_snapshot_id: int | None = None) -> None:
        """``task`` finished its operators and waits for a checkpoint to complete that it
        takes from now on, its final checkpoint (FLIP-147): any checkpoint newer than
        ``last_snapshot_id``, the newest it had snapshotted (None: unknown, then any
        checkpoint triggered after this report). Unless such a checkpoint is pending, the
        next periodic trigger comes as soon as the minimum pause allows."""
        with self._lock:
            if task in self._finished or self._shut_down:
                return
            mark = self._last_triggered_id if last_snapshot_id is None else last_snapshot_id
            self._awaiting_final.setdefault(task, mark)
            self._expedite()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start periodic checkpoints: the first trigger ``interval`` from now. Raises
        ``ConfigurationError`` when checkpointing is not enabled. Also resumes after
        :meth:`stop_periodic`. No effect once shut down or once it failed the job."""
        interval = float(self._config.interval_ms)
        with self._lock:
            if self._shut_down or self._failing:
                return
            self._periodic_stopped = False
            self._periodic_active = True
            self._periodic_missed = False
            self._schedule_periodic(interval)
            self._expedite()  # tasks may have reached their end of data already

    def stop_periodic(self) -> None:
        """Stop periodic triggers: pending checkpoints go on; non-forced triggers are
        cancelled with ``PERIODIC_STOPPED``; forced ones (savepoints) still go."""
        with self._lock:
            self._periodic_stopped = True
            self._periodic_active = False
            self._cancel_periodic()

    def shutdown(self, retain_completed: bool = True) -> None:
        """Stop: abort every pending checkpoint (``COORDINATOR_SHUTDOWN``), stop
        scheduling and shut the scheduler down. ``retain_completed=False`` discards the
        retained completed checkpoints from storage (e.g. cancellation with
        ``ExternalizedRetention.DELETE_ON_CANCELLATION``, or a finished job).
        Idempotent."""
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
            self._periodic_active = False
            self._cancel_periodic()
            for checkpoint_id in sorted(self._pending):
                pending = self._pending.get(checkpoint_id)
                if pending is not None:
                    self._abort(pending, R.COORDINATOR_SHUTDOWN)
            self._store.shutdown(retain=retain_completed)
            self._id_counter.release()  # the next attempt or run continues right after
        self._scheduler.shutdown()

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down

    # ------------------------------------------------------------------ triggering

    def trigger_checkpoint(  # noqa: C901 (the triggering checks of M-C1/M-C4 in their documented order)
        self,
        *,
        forced: bool = False,
        savepoint: bool = False,
        drain: bool = False,
        stop: bool = False,
    ) -> int | CheckpointFailureReason:
        """Trigger a checkpoint (a savepoint is always forced). Returns its id, or the
        reason it was cancelled or aborted during triggering (M-C1, M-C4).

        ``drain`` (savepoints only, ``stop_with_savepoint(drain=True)``): the barrier
        asks every triggered task to end its input first, so the maximum watermark
        fires every event-time timer and window before the task's snapshot.

        ``stop`` (savepoints only): the job stops after it (``stop_with_savepoint``), so
        its completion is told to the tasks (their sinks commit) as a checkpoint's is.
        A savepoint that stops nothing (``trigger_savepoint``, an autoscaler's rescale
        before its restore) is, as in Flink since 1.15, no recovery point: its
        completion commits nothing and subsumes no pending checkpoint, so a failure
        after it restores the newest checkpoint without repeating committed output
        (M-S1, M-X2); a restore *from* it commits its pending transactions then."""
        if (drain or stop) and not savepoint:
            raise ConfigurationError("drain and stop apply to savepoints only")
        forced = forced or savepoint
        with self._lock:
            reason = decide_trigger(self._facts(forced))
            if reason is not None:
                return self._cancelled_before_trigger(reason, None)
            try:
                checkpoint_id = self._id_counter.next_id()
            except Exception as e:  # noqa: BLE001 - any failure means: no id (M-C1)
                return self._cancelled_before_trigger(R.ID_UNAVAILABLE, e)
            timestamp = self._clock.time_ms()
            if savepoint:
                options = CheckpointOptions(CheckpointType.SAVEPOINT, drain=drain)
                if not (stop or drain):
                    self._intermediate.add(checkpoint_id)
            else:
                options = CheckpointOptions(
                    CheckpointType.CHECKPOINT,
                    unaligned=self._config.unaligned and self._config.aligned_timeout_ms == 0,
                )
            plan = self._plan()
            pending = PendingCheckpoint(
                checkpoint_id,
                timestamp,
                self._clock.monotonic_ms(),
                options,
                set(plan.to_acknowledge),
                finished_tasks=set(plan.finished),
            )
            self._pending[checkpoint_id] = pending  # M-C2
            self._last_triggered_id = max(self._last_triggered_id, checkpoint_id)
            self._triggering.add(checkpoint_id)
            self._stats.report_pending(checkpoint_id, timestamp, is_savepoint=savepoint)
            self._timeouts[checkpoint_id] = self._scheduler.schedule(
                self._timeout_ms, lambda: self._on_timeout(pending)
            )  # M-C4
            hooks = list(self._hooks)

        # master hooks (M-C9), outside the lock: user code that may take time
        written: list[tuple[str, StateHandle]] = []
        hook_error: BaseException | None = None
        for hook in hooks:
            try:
                state = hook.trigger_checkpoint(checkpoint_id, timestamp)
                if state is not None:
                    written.append(
                        (
                            hook.identifier,
                            self._storage.write_state(
                                checkpoint_id, master_state_name(hook.identifier), state
                            ),
                        )
                    )
            except Exception as e:  # aborts the checkpoint (M-C4)
                log.warning(
                    "master hook %r failed for checkpoint %d: %s",
                    hook.identifier,
                    checkpoint_id,
                    e,
                    exc_info=True,
                )
                hook_error = e
                break

        with self._lock:
            self._triggering.discard(checkpoint_id)
            if pending.discarded:  # aborted meanwhile (timeout, shutdown)
                self._discard_handles(h for _, h in written)
                if written:  # their write made the discarded folder again (M-C8)
                    self._discard_aborted_folder(checkpoint_id)
                assert pending.failure_reason is not None
                return pending.failure_reason
            if hook_error is not None:
                self._abort(pending, R.TRIGGER_FAILED)
                return R.TRIGGER_FAILED
            for identifier, handle in written:
                pending.add_master_state(identifier, handle)
            reason = decide_trigger(self._facts(forced, excluding=pending))  # M-C1 re-check
            if reason is not None:
                log.info(
                    "checkpoint %d cancelled right before its trigger: %s",
                    checkpoint_id,
                    reason.value,
                )
                self._abort(pending, reason)
                return reason
            barrier = CheckpointBarrier(checkpoint_id, timestamp, options)
            # M-C3, FLIP-147: the sources, and the running tasks whose upstream tasks all
            # finished (recomputed: tasks may have finished while the hooks ran)
            to_trigger = self._plan().to_trigger
            self._triggered[checkpoint_id] = frozenset(to_trigger)
            for task in to_trigger:
                if pending.discarded:
                    break
                try:
                    self._gateway.trigger_source(task, barrier)
                except Exception as e:  # aborts the checkpoint (M-C4)
                    log.warning(
                        "triggering checkpoint %d on task %s failed: %s",
                        checkpoint_id,
                        task,
                        e,
                        exc_info=True,
                    )
                    self._abort(pending, R.TRIGGER_FAILED)
                    return R.TRIGGER_FAILED
            if pending.discarded:
                assert pending.failure_reason is not None
                return pending.failure_reason
            # not complete yet: the re-check found a running task, which it waits for
            return checkpoint_id

    def _plan(self) -> CheckpointPlan:
        """Which tasks a checkpoint triggered now involves (FLIP-147, :mod:`.plan`)."""
        return plan_checkpoint(
            self._all_tasks, self._sources, self._topology.upstream, self._running, self._finished
        )

    def _facts(self, forced: bool, excluding: PendingCheckpoint | None = None) -> TriggerFacts:
        pending = len(self._pending) - (
            1 if excluding is not None and excluding.checkpoint_id in self._pending else 0
        )
        plan = self._plan()
        # a job whose tasks all finished has nothing left to checkpoint
        not_running = plan.not_running if plan.to_acknowledge else max(1, plan.not_running)
        return TriggerFacts(
            shut_down=self._shut_down or self._failing,
            periodic_stopped=self._periodic_stopped,
            forced=forced,
            pending=pending,
            max_concurrent=self._config.max_concurrent,
            last_completion_ms=self._last_completion_ms,
            min_pause_ms=self._min_pause_ms,
            now_ms=self._clock.monotonic_ms(),
            tasks_not_running=not_running,
        )

    def _cancelled_before_trigger(
        self, reason: CheckpointFailureReason, error: BaseException | None
    ) -> CheckpointFailureReason:
        if error is not None:
            log.warning("checkpoint not triggered: %s: %s", reason.value, error)
        else:
            log.debug("checkpoint not triggered: %s", reason.value)
        if self._failures.handle_failure(reason, None):
            self._fail_job(reason, None)
        return reason

    def _on_timeout(self, pending: PendingCheckpoint) -> None:
        with self._lock:
            if self._pending.get(pending.checkpoint_id) is pending and not pending.discarded:
                log.info(
                    "checkpoint %d expired after %.0f ms", pending.checkpoint_id, self._timeout_ms
                )
                self._abort(pending, R.TIMEOUT)

    # ------------------------------------------------------------------ acknowledgements

    def receive_acknowledge(self, ack: TaskAcknowledgement) -> AckResult:
        """A task acknowledged a checkpoint (M-C5): SUCCESS (recorded; the last one
        completes the checkpoint), DUPLICATE (ignored), UNKNOWN or DISCARDED (the
        state it reported is deleted)."""
        completed: CompletedCheckpoint | None = None
        with self._lock:
            pending = self._pending.get(ack.checkpoint_id)
            if pending is None:
                result = (
                    AckResult.DISCARDED
                    if ack.checkpoint_id in self._recently_aborted
                    else AckResult.UNKNOWN
                )
            else:
                result = pending.acknowledge(ack)
            if result in (AckResult.UNKNOWN, AckResult.DISCARDED):
                log.debug(
                    "acknowledgement of checkpoint %d by %s: %s; its state is deleted",
                    ack.checkpoint_id,
                    ack.task,
                    result.name,
                )
                self._discard_handles(self._unreferenced(ack))
                if result is AckResult.DISCARDED:
                    self._discard_aborted_folder(ack.checkpoint_id)
            elif result is AckResult.SUCCESS:
                assert pending is not None
                self._stats.report_acknowledged(ack.checkpoint_id, ack.task, ack.metrics)
                if pending.is_fully_acknowledged:
                    completed = self._complete(pending)
            hooks = list(self._hooks)
        self._notify_hooks(hooks, [completed] if completed is not None else [])
        return result

    def _notify_hooks(self, hooks: list[MasterHook], completed: list[CompletedCheckpoint]) -> None:
        """Tell the master hooks about ``completed`` checkpoints (M-C9); called outside
        the lock (user code). A failing hook is logged: the checkpoint stays complete."""
        for checkpoint in completed:
            for hook in hooks:
                try:
                    hook.notify_checkpoint_complete(checkpoint.checkpoint_id)
                except Exception as e:  # the checkpoint stays complete
                    log.warning(
                        "master hook %r failed on completion of checkpoint %d: %s",
                        hook.identifier,
                        checkpoint.checkpoint_id,
                        e,
                        exc_info=True,
                    )

    def _unreferenced(self, ack: TaskAcknowledgement) -> list[StateHandle]:
        """The handles of ``ack`` that no completed checkpoint references (a stray
        repeat of an acknowledgement must not delete a completed checkpoint's state)."""
        referenced = {
            h.path
            for c in self._store.all()
            if c.checkpoint_id == ack.checkpoint_id
            for h in c.handles()
        }
        return [h for h in ack.handles.values() if h.path not in referenced]

    def receive_decline(
        self, task: TaskKey, checkpoint_id: int, reason: CheckpointFailureReason
    ) -> None:
        """``task`` cannot take checkpoint ``checkpoint_id`` (M-C6): abort it with
        ``reason`` and tell the tasks. A decline of a checkpoint that is not pending is
        ignored."""
        with self._lock:
            pending = self._pending.get(checkpoint_id)
            if pending is None or pending.discarded:
                log.debug(
                    "decline of checkpoint %d by %s ignored: not pending", checkpoint_id, task
                )
                if checkpoint_id in self._recently_aborted:
                    # its failed write may have created the folder again before failing
                    self._discard_aborted_folder(checkpoint_id)
                return
            log.info("checkpoint %d declined by task %s: %s", checkpoint_id, task, reason.value)
            self._abort(pending, reason)

    # ------------------------------------------------------------------ completion (M-C7)

    def _complete(self, pending: PendingCheckpoint) -> CompletedCheckpoint | None:
        checkpoint_id = pending.checkpoint_id
        try:
            stats = self._stats.completion_stats(checkpoint_id, state_size=pending.state_size())
            completed = CompletedCheckpoint(
                checkpoint_id=checkpoint_id,
                trigger_timestamp=pending.trigger_timestamp,
                completion_timestamp=self._clock.time_ms(),
                operator_states={uid: dict(by) for uid, by in pending.operator_states.items()},
                master_states=dict(pending.master_states),
                is_savepoint=pending.is_savepoint,
                job_name=self.job_name,
                stats=stats,
                finished_operators=finished_operators(pending.finished_tasks, self._topology),
            )
            path = self._storage.write_metadata(checkpoint_id, completed.to_metadata())
            completed.external_path = path
            stats.external_path = path
            subsumed: list[CompletedCheckpoint] = []
            if pending.is_savepoint:
                self._savepoints[checkpoint_id] = path  # never deleted by the job (M-S1)
                with self._outcome:
                    self._savepoint_outcomes[checkpoint_id] = completed
                    self._outcome.notify_all()
            else:
                # durable pointer, retention (M-C8); the subsumed ones are discarded
                # after the tasks were notified, off the path of the sinks' commits
                subsumed = self._store.add(completed, discard=False)
        except Exception as e:  # the checkpoint fails, the job goes on
            log.warning("finalizing checkpoint %d failed: %s", checkpoint_id, e, exc_info=True)
            self._abort(pending, R.FINALIZE_FAILED)
            return None
        del self._pending[checkpoint_id]
        self._triggered.pop(checkpoint_id, None)
        self._cancel_timeout(checkpoint_id)
        self._last_completion_ms = self._clock.monotonic_ms()
        self._stats.report_completed(stats)
        self._failures.handle_success(checkpoint_id)
        intermediate = checkpoint_id in self._intermediate
        self._intermediate.discard(checkpoint_id)
        if not intermediate:
            for older in sorted(i for i in self._pending if i < checkpoint_id):
                older_pending = self._pending.get(older)
                if older_pending is not None and older_pending.can_be_subsumed:  # not savepoints
                    self._abort(older_pending, R.SUBSUMED)
            # FLIP-147: tasks whose newest snapshot before their end of data is older took
            # this one after it: it is their final checkpoint
            for task, mark in list(self._awaiting_final.items()):
                if mark < checkpoint_id:
                    del self._awaiting_final[task]
        self._reschedule_after_completion()
        self._expedite()
        log.debug("checkpoint %d of job %r complete (%s)", checkpoint_id, self.job_name, path)
        if intermediate:  # no recovery point: commits nothing (see trigger_checkpoint)
            self._store.discard(subsumed)
            return completed
        try:
            self._gateway.notify_checkpoint_complete(checkpoint_id)
        except Exception as e:  # noqa: BLE001 - the checkpoint stays complete
            log.warning("notifying completion of checkpoint %d failed: %s", checkpoint_id, e)
        self._store.discard(subsumed)
        return completed

    # ------------------------------------------------------------------ abort (M-C4, M-C6)

    def _abort(self, pending: PendingCheckpoint, reason: CheckpointFailureReason) -> None:
        checkpoint_id = pending.checkpoint_id
        if not pending.discard(reason):
            return
        self._pending.pop(checkpoint_id, None)
        self._triggered.pop(checkpoint_id, None)
        self._cancel_timeout(checkpoint_id)
        self._recently_aborted[checkpoint_id] = None
        while len(self._recently_aborted) > RECENTLY_ABORTED:
            self._recently_aborted.popitem(last=False)
        # the tasks first: their writes in progress stop (and, told, end quietly) rather
        # than lose the folder under them, then the folder goes (M-C4, M-C8)
        try:
            self._gateway.notify_checkpoint_aborted(checkpoint_id, reason)
        except Exception as e:  # noqa: BLE001 - tasks also learn it from later barriers
            log.warning("notifying abort of checkpoint %d failed: %s", checkpoint_id, e)
        self._discard_aborted_folder(checkpoint_id)
        # the shared files it uploaded (incremental checkpoints, M-R4) that no retained
        # checkpoint references; it logs its own failures
        self._store.shared.discard_unreferenced(pending.handles())
        self._stats.report_failed(checkpoint_id, reason)
        log.debug("checkpoint %d aborted: %s", checkpoint_id, reason.value)
        if pending.is_savepoint:
            with self._outcome:
                self._savepoint_outcomes[checkpoint_id] = reason
                self._outcome.notify_all()
        if self._failures.handle_failure(reason, checkpoint_id):
            self._fail_job(reason, checkpoint_id)

    def _discard_aborted_folder(self, checkpoint_id: int) -> None:
        """Delete the folder of aborted checkpoint ``checkpoint_id`` (again: a task's late
        write may have created it since). Never called for a completed checkpoint."""
        try:
            self._storage.discard(checkpoint_id)
        except Exception as e:  # noqa: BLE001 - leftover files only cost space
            log.warning("discarding aborted checkpoint %d failed: %s", checkpoint_id, e)

    def _fail_job(self, reason: CheckpointFailureReason, checkpoint_id: int | None) -> None:
        """Fail the job, once: triggering stops for good (periodic triggers and
        savepoints), so a job whose tasks take time to stop does not keep triggering,
        failing and logging it again."""
        if self._failing:
            return
        self._failing = True
        self._periodic_active = False
        self._cancel_periodic()
        tolerable = self._failures.tolerable_failures
        which = "a checkpoint trigger" if checkpoint_id is None else f"checkpoint {checkpoint_id}"
        error = CheckpointFailedError(
            f"{self._failures.exceeded_count} consecutive checkpoint failures, more than "
            f"checkpoint_config.tolerable_failures = {tolerable} allows; the last one: "
            f"{which} failed because {reason.value}. Raise "
            f"checkpoint_config.tolerable_failures to tolerate more"
        )
        log.error("failing job %r: %s", self.job_name, error)
        try:
            self._gateway.fail_job(error)
        except Exception as e:  # noqa: BLE001 - logged; nothing else can be done here
            log.error("failing job %r failed: %s", self.job_name, e)

    def _discard_handles(self, handles: Iterable[StateHandle]) -> None:
        """Delete the state files ``handles`` name and the shared files they reference
        that no retained checkpoint references (M-C5, M-R4)."""
        handles = list(handles)
        for handle in handles:
            try:
                self._storage.discard_handle(handle)
            except Exception as e:  # noqa: BLE001 - leftover files only cost space
                log.warning("deleting state file %s failed: %s", handle.path, e)
        self._store.shared.discard_unreferenced(handles)

    def _cancel_timeout(self, checkpoint_id: int) -> None:
        task = self._timeouts.pop(checkpoint_id, None)
        if task is not None:
            task.cancel()

    # ------------------------------------------------------------------ periodic trigger

    def _schedule_periodic(self, delay_ms: float) -> None:
        self._cancel_periodic()
        token = self._periodic_token
        delay_ms = max(delay_ms, 0.0)
        self._periodic_due_ms = self._clock.monotonic_ms() + delay_ms
        self._periodic_task = self._scheduler.schedule(delay_ms, lambda: self._periodic_tick(token))

    def _cancel_periodic(self) -> None:
        self._periodic_token += 1  # an action already started sees a stale token
        if self._periodic_task is not None:
            self._periodic_task.cancel()
        self._periodic_task = None
        self._periodic_due_ms = None

    def _periodic_tick(self, token: int) -> None:
        with self._lock:
            if token != self._periodic_token or not self._periodic_active:
                return
            self._periodic_task = None
            self._periodic_due_ms = None
        result: int | CheckpointFailureReason | None = None
        try:
            result = self.trigger_checkpoint()
        except Exception:  # a bug must not end periodic checkpoints: logged, next one scheduled
            log.exception("periodic checkpoint trigger of job %r raised", self.job_name)
        with self._lock:
            if (
                not self._periodic_active
                or self._shut_down
                or token != self._periodic_token
                or self._periodic_task is not None
            ):
                return
            self._periodic_missed = result is R.TOO_MANY_CONCURRENT
            delay = float(self._config.interval_ms)
            if result is R.MIN_PAUSE:  # try again as soon as the pause allows
                delay = pause_remaining_ms(self._facts(False))
            self._schedule_periodic(delay)
            if isinstance(result, int):
                # a checkpoint completed within the trigger (every task it waited for
                # had finished) does not serve tasks that reported after it
                self._expedite()

    def _expedite(self) -> None:
        """FLIP-147: a task waits for its final checkpoint (it reported its end of data)
        and no pending checkpoint can be that one: move the next periodic
        trigger to as soon as the minimum pause allows. Aborted checkpoints do not call
        this: after a failure the next trigger comes at the interval (no busy retries)."""
        if not self._awaiting_final or not self._periodic_active or self._shut_down:
            return
        newest_pending = max(self._pending, default=0)
        if all(mark < newest_pending for mark in self._awaiting_final.values()):
            return  # a pending checkpoint will be the final one of every waiting task
        if self._periodic_task is None:
            return  # a periodic tick runs right now; it calls this again when done
        delay = pause_remaining_ms(self._facts(False))
        due = self._clock.monotonic_ms() + delay
        if self._periodic_due_ms is None or due < self._periodic_due_ms:
            self._schedule_periodic(delay)

    def _reschedule_after_completion(self) -> None:
        """M-C7: the next periodic trigger comes no sooner than ``min_pause`` after this
        completion; if a periodic trigger was skipped because too many checkpoints were
        in progress, it comes as soon as the pause allows."""
        if not self._periodic_active or self._shut_down or self._periodic_task is None:
            return  # not periodic, or a tick is running right now (it schedules the next)
        now = self._clock.monotonic_ms()
        earliest = now + self._min_pause_ms
        if self._periodic_missed:
            self._periodic_missed = False
            due = earliest
        else:
            assert self._periodic_due_ms is not None
            due = max(self._periodic_due_ms, earliest)
        if due != self._periodic_due_ms:
            self._schedule_periodic(due - now)

    # ------------------------------------------------------------------ accessors

    def pending_ids(self) -> list[int]:
        """Ids of the pending checkpoints, ascending."""
        with self._lock:
            return sorted(self._pending)

    def pending_checkpoint(self, checkpoint_id: int) -> PendingCheckpoint | None:
        """A copy of one pending checkpoint (tests, diagnostics)."""
        with self._lock:
            pending = self._pending.get(checkpoint_id)
            return None if pending is None else copy.deepcopy(pending)

    def completed(self) -> list[CompletedCheckpoint]:
        """The retained completed checkpoints, oldest first (savepoints excluded)."""
        with self._lock:
            return self._store.all()

    def latest_completed(self) -> CompletedCheckpoint | None:
        with self._lock:
            return self._store.latest()

    @property
    def storage(self) -> CheckpointStorage:
        """The job's checkpoint storage."""
        return self._storage

    def wait_for_savepoint(
        self, checkpoint_id: int, timeout_s: float | None = None
    ) -> CompletedCheckpoint:
        """Block until savepoint ``checkpoint_id`` completes and return it; raise
        ``CheckpointFailedError`` when it is aborted, ``TimeoutError`` after
        ``timeout_s`` seconds (None: the checkpoint timeout)."""
        limit = self._timeout_ms / 1000.0 if timeout_s is None else timeout_s
        with self._outcome:
            if not self._outcome.wait_for(
                lambda: checkpoint_id in self._savepoint_outcomes, timeout=limit
            ):
                raise TimeoutError(
                    f"savepoint {checkpoint_id} of job {self.job_name!r} did not complete "
                    f"within {limit:g}s"
                )
            outcome = self._savepoint_outcomes.pop(checkpoint_id)
        if isinstance(outcome, CheckpointFailureReason):
            raise CheckpointFailedError(
                f"savepoint {checkpoint_id} of job {self.job_name!r} failed: {outcome.value}"
            )
        return outcome

    def savepoint_path(self, checkpoint_id: int) -> str | None:
        """Where completed savepoint ``checkpoint_id`` was written, or None."""
        with self._lock:
            return self._savepoints.get(checkpoint_id)

    def stats(self) -> list[CheckpointStats]:
        """Stats of the recent checkpoints (copies), ascending by id."""
        return self._stats.snapshot()

    @property
    def consecutive_failures(self) -> int:
        with self._lock:
            return self._failures.consecutive_failures

    def next_periodic_trigger_ms(self) -> float | None:
        """Clock time (monotonic ms) of the next periodic trigger, or None."""
        with self._lock:
            return self._periodic_due_ms

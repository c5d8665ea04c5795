"""The link between a running job and its client (``env.execute_async``).

The executor publishes what a client may look at (the checkpoint coordinator
of the running attempt) and installs how to cancel it; the client reads and
cancels from another thread.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from .restart_causes import RestartCauses
from .result import AttemptSummary, JobStatus


@dataclasses.dataclass
class RescaleRequest:
    """A rescale the failover loop carries out after the running attempt stopped:
    ``plan`` (the job at its new parallelism) restores ``restore`` (the savepoint taken
    for it). If the rescaled attempt fails before it completes a checkpoint, the loop
    goes back to ``previous_plan`` and calls ``rolled_back`` with the failure."""

    plan: Any
    restore: Any
    describe: str
    rolled_back: Callable[[str], None] = lambda error: None
    #: the request was not carried out (the attempt ended or restarted first)
    dropped: Callable[[str], None] = lambda why: None
    #: the loop begins it: the old attempt stopped, the rescaled one restores next
    begun: Callable[[], None] = lambda: None


class JobHandle:
    def __init__(self) -> None:
        self.cancel_requested = threading.Event()
        #: set once every subtask of the running attempt is deployed
        self.running = threading.Event()
        self._lock = threading.Lock()
        self._canceller: Callable[[], None] | None = None
        self._coordinator: Any = None
        #: the running attempt's watermark diagnostic (a callable returning
        #: ``OperatorWatermark`` entries), set by the executor
        self.watermarks: Callable[[], list[Any]] | None = None
        #: the running attempt's subtask metrics (a callable returning
        #: ``lockgate.runtime.task_metrics.task_sample`` dicts), set by the executor
        self.metrics: Callable[[], list[dict[str, Any]]] | None = None
        #: the job's REST address (``JobClient.rest_url``), named in the Spark UI
        self.rest_url: str | None = None
        #: the savepoint the job is being stopped with (``stop_with_savepoint``): the
        #: newest snapshot when it ends, whose transactions the driver commits
        self.final_savepoint: str | None = None
        #: (vertex id, subtask) -> the sink results of that task, reported when it
        #: finished (checkpointed jobs): a later attempt that restores it as finished
        #: does not run it again, and returns these (FLIP-147)
        self.finished_results: dict[tuple[int, int], dict[str, Any]] = {}
        #: every failure of the run so far, per operator and error, with how often it
        #: repeated (the failover loop records; ``JobClient.restart_causes()`` reads)
        self.restart_causes = RestartCauses()
        #: the run's ended attempts, oldest first (the failover loop records them)
        self.attempt_history: list[AttemptSummary] = []
        #: (vertex id, subtask, operator uid) -> (records in, records out) of the run's
        #: ended attempts: live metrics add them, so job-level counts span the run
        self.earlier_counts: dict[tuple[int, int, str], tuple[int, int]] = {}
        #: the checkpoints of the run's earlier attempts' coordinators
        self._earlier_checkpoints: list[Any] = []
        #: the plan of the running (or last) attempt: after a rescale, not the first
        self.plan: Any = None
        #: (checkpoint id, location) of the savepoint the run's last rescale restored
        self.rescale_savepoint: tuple[int, str] | None = None
        #: a rescale waiting for the running attempt to stop (see :meth:`request_rescale`)
        self._rescale: RescaleRequest | None = None

    @property
    def cancelled(self) -> bool:
        """Whether the job ends because it was cancelled: a cancel that is not the end of
        a stop with a savepoint. A job stopped with a savepoint ends ``FINISHED``, so
        its retained checkpoints are kept as after any normal end (M-S3): only a cancel
        applies ``ExternalizedRetention.DELETE_ON_CANCELLATION``."""
        return self.cancel_requested.is_set() and self.final_savepoint is None

    @property
    def coordinator(self) -> Any:
        """The checkpoint coordinator of the current (or last) attempt, or None."""
        with self._lock:
            return self._coordinator

    def attach(self, coordinator: Any, canceller: Callable[[], None]) -> None:
        """Called by the executor when an attempt starts; cancels at once if a cancel
        was requested before."""
        with self._lock:
            old = self._coordinator
            if old is not None and old is not coordinator:
                self._earlier_checkpoints.extend(_ended(old))
            self._coordinator = coordinator
            self._canceller = canceller
            # a rescale asked of an attempt that ended before it stopped for it: this
            # attempt is a restart, not the rescaled one
            stale, self._rescale = self._rescale, None
        if stale is not None:
            stale.dropped("the attempt it was asked of ended before it stopped for it")
        if self.cancel_requested.is_set():
            canceller()

    def detach(self) -> None:
        with self._lock:
            self._canceller = None
        self.running.clear()

    @property
    def stopping(self) -> bool:
        """Whether the running attempt is to stop: a cancel, or a rescale."""
        return self.cancel_requested.is_set() or self._rescale is not None

    def request_rescale(self, request: RescaleRequest) -> bool:
        """Stop the running attempt (as a cancel does, but the job goes on): the failover
        loop then runs ``request.plan`` from ``request.restore``. False (nothing done)
        when no attempt runs, the job is being cancelled or stopped with a savepoint."""
        with self._lock:
            canceller = self._canceller
            if (
                canceller is None
                or self.cancel_requested.is_set()
                or self.final_savepoint is not None
            ):
                return False
            self._rescale = request
        canceller()
        return True

    def take_rescale(self) -> RescaleRequest | None:
        """The pending rescale, once (None: none)."""
        with self._lock:
            request, self._rescale = self._rescale, None
        return request

    def cancel(self) -> None:
        self.cancel_requested.set()
        with self._lock:
            canceller = self._canceller
        if canceller is not None:
            canceller()

    def checkpoint_history(self) -> list[Any]:
        """Every checkpoint of the run (``CheckpointStats``), the earlier attempts' first
        (one still in progress when its attempt ended is reported failed)."""
        with self._lock:
            earlier = list(self._earlier_checkpoints)
            coordinator = self._coordinator
        return earlier + (list(coordinator.stats()) if coordinator is not None else [])

    def end_attempt(
        self,
        attempt: int,
        status: JobStatus,
        duration_ms: float,
        error: str | None = None,
        operators: dict[str, tuple[int, int]] | None = None,
    ) -> AttemptSummary:
        """Record the end of attempt ``attempt``. ``operators``: its exact counts per
        operator uid (a finished attempt's result); without them, those of its subtasks'
        last samples (``metrics``), which also carry on in the live metrics of the
        attempts after it."""
        samples: list[dict[str, Any]] = []
        if self.metrics is not None:
            try:
                samples = list(self.metrics())
            except Exception:  # noqa: BLE001 - an attempt torn down may read nothing
                samples = []
        per_uid: dict[str, tuple[int, int]] = {}
        for s in samples:
            for op in s.get("operators", []):
                key = (int(s["vertex"]), int(s["subtask"]), str(op["uid"]))
                counts = (int(op["records_in"]), int(op["records_out"]))
                if operators is None:
                    before = self.earlier_counts.get(key, (0, 0))
                    self.earlier_counts[key] = (before[0] + counts[0], before[1] + counts[1])
                total = per_uid.get(key[2], (0, 0))
                per_uid[key[2]] = (total[0] + counts[0], total[1] + counts[1])
        coordinator = self.coordinator
        stats = list(coordinator.stats()) if coordinator is not None else []
        completed = [c.checkpoint_id for c in stats if getattr(c, "status", None) == "completed"]
        summary = AttemptSummary(
            attempt=attempt,
            status=status,
            duration_ms=duration_ms,
            error=error,
            operators=dict(operators if operators is not None else per_uid),
            checkpoints_completed=len(completed),
            last_checkpoint=max(completed) if completed else None,
        )
        self.attempt_history.append(summary)
        return summary

    def earlier_totals(self) -> dict[str, tuple[int, int]]:
        """Per operator uid, the records in and out of the run's ended attempts."""
        totals: dict[str, tuple[int, int]] = {}
        for summary in self.attempt_history:
            for uid, (i, o) in summary.operators.items():
                before = totals.get(uid, (0, 0))
                totals[uid] = (before[0] + i, before[1] + o)
        return totals


def _ended(coordinator: Any) -> list[Any]:
    """The checkpoints of an ended attempt's coordinator: one still in progress never
    completes (its attempt is gone), so it is reported failed."""
    try:
        stats = list(coordinator.stats())
    except Exception:  # noqa: BLE001 - history only
        return []
    return [
        dataclasses.replace(s, status="failed", failure_reason=s.failure_reason or "attempt ended")
        if getattr(s, "status", None) == "in_progress"
        else s
        for s in stats
    ]

"""Checkpoint statistics as ``JobClient.checkpoints()`` reports them.

:class:`CheckpointStatsTracker` keeps one :class:`CheckpointStats` per checkpoint
id: ``in_progress`` from the trigger, ``completed`` or ``failed`` at the end; the
newest ``history`` (default 100) are kept. Durations come from the injected
clock's monotonic time (trigger → completion or abort). Completed stats carry
the state size (sum of all handle sizes, master states included), the
persisted in-flight bytes (sum over subtasks, M-B7) and each subtask's metrics
(M-B10); failed ones the failure reason. :meth:`snapshot` returns copies,
ascending by id. Thread-safe.
"""

from __future__ import annotations

import copy
import threading

from ...core.clock import Clock
from ..types import CheckpointFailureReason, CheckpointStats, SubtaskCheckpointMetrics, TaskKey

IN_PROGRESS = "in_progress"
COMPLETED = "completed"
FAILED = "failed"


class CheckpointStatsTracker:
    def __init__(self, clock: Clock, history: int = 100) -> None:
        if history < 1:
            raise ValueError(f"history must be >= 1, got {history}")
        self._clock = clock
        self._history = history
        self._stats: dict[int, CheckpointStats] = {}
        self._started: dict[int, float] = {}
        self._lock = threading.Lock()

    def report_pending(
        self, checkpoint_id: int, trigger_timestamp: int, *, is_savepoint: bool = False
    ) -> None:
        """A checkpoint was triggered (its clock time now is its start)."""
        with self._lock:
            self._stats[checkpoint_id] = CheckpointStats(
                checkpoint_id, trigger_timestamp, IN_PROGRESS, is_savepoint=is_savepoint
            )
            self._started[checkpoint_id] = self._clock.monotonic_ms()
            self._trim()

    def _trim(self) -> None:
        while len(self._stats) > self._history:
            oldest = min(self._stats)
            del self._stats[oldest]
            self._started.pop(oldest, None)

    def report_acknowledged(
        self, checkpoint_id: int, task: TaskKey, metrics: SubtaskCheckpointMetrics
    ) -> None:
        """A subtask acknowledged (its metrics show while the checkpoint is in progress)."""
        with self._lock:
            stats = self._stats.get(checkpoint_id)
            if stats is not None and stats.status == IN_PROGRESS:
                stats.subtasks[task] = copy.copy(metrics)
                stats.persisted_inflight_bytes = sum(
                    m.persisted_inflight_bytes for m in stats.subtasks.values()
                )

    def completion_stats(
        self, checkpoint_id: int, *, state_size: int, external_path: str | None = None
    ) -> CheckpointStats:
        """What the stats of ``checkpoint_id`` are if it completes now (a new object;
        nothing is recorded until :meth:`report_completed`)."""
        with self._lock:
            current = self._stats.get(checkpoint_id)
            started = self._started.get(checkpoint_id)
            base = (
                copy.deepcopy(current)
                if current is not None
                else CheckpointStats(checkpoint_id, 0, IN_PROGRESS)
            )
            now = self._clock.monotonic_ms()
        base.status = COMPLETED
        base.duration_ms = None if started is None else now - started
        base.state_size = state_size
        base.persisted_inflight_bytes = sum(
            m.persisted_inflight_bytes for m in base.subtasks.values()
        )
        base.external_path = external_path
        base.failure_reason = None
        return base

    def report_completed(self, stats: CheckpointStats) -> None:
        """Record ``stats`` (from :meth:`completion_stats`) as the checkpoint's final stats."""
        with self._lock:
            self._stats[stats.checkpoint_id] = copy.deepcopy(stats)
            self._started.pop(stats.checkpoint_id, None)
            self._trim()

    def report_failed(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        """The checkpoint was aborted with ``reason``."""
        with self._lock:
            stats = self._stats.get(checkpoint_id)
            if stats is None:
                return
            started = self._started.pop(checkpoint_id, None)
            stats.status = FAILED
            stats.failure_reason = reason.value
            if started is not None:
                stats.duration_ms = self._clock.monotonic_ms() - started

    def get(self, checkpoint_id: int) -> CheckpointStats | None:
        """A copy of one checkpoint's stats, or None."""
        with self._lock:
            stats = self._stats.get(checkpoint_id)
            return None if stats is None else copy.deepcopy(stats)

    def snapshot(self) -> list[CheckpointStats]:
        """Copies of the kept stats, ascending by checkpoint id."""
        with self._lock:
            return [copy.deepcopy(self._stats[i]) for i in sorted(self._stats)]

"""Counts consecutive checkpoint failures and says when the job must fail (M-C6).

Failures that count (they mean checkpoints are not being taken):
``DECLINED``, ``TIMEOUT``, ``SYNC_FAILED``, ``ASYNC_FAILED``, ``FINALIZE_FAILED``,
``TRIGGER_FAILED`` and ``ID_UNAVAILABLE`` (the storage cannot be read: a lasting storage outage
must end the job rather than silently stop checkpoints).

Failures that never count: ``SUBSUMED`` (a newer checkpoint completed),
``MIN_PAUSE``, ``TOO_MANY_CONCURRENT``, ``PERIODIC_STOPPED``,
``COORDINATOR_SHUTDOWN``, ``TASK_NOT_RUNNING`` (the job is starting, finishing
or failing over) and ``CANCELLED_UPSTREAM``: a cancellation marker is the
downstream echo of a decline upstream, which counts on its own; counting the
echo would count one failed checkpoint twice (Flink ignores
CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER for the same reason).

Like Flink's CheckpointFailureManager, a checkpoint counts at most once, and
the failure of a checkpoint older than the newest completed one does not
count (it would have been subsumed anyway). A success resets the count. When
the count exceeds ``tolerable_failures``, :meth:`handle_failure` returns True
once and the count starts over (the caller fails the job once per such run).
"""

from __future__ import annotations

from ..types import CheckpointFailureReason

R = CheckpointFailureReason

COUNTED_REASONS: frozenset[CheckpointFailureReason] = frozenset(
    {
        R.DECLINED,
        R.TIMEOUT,
        R.SYNC_FAILED,
        R.ASYNC_FAILED,
        R.FINALIZE_FAILED,
        R.TRIGGER_FAILED,
        R.ID_UNAVAILABLE,
    }
)


class CheckpointFailureManager:
    """Decides when checkpoint failures fail the job. Not locked: the coordinator
    calls it under its lock."""

    def __init__(self, tolerable_failures: int) -> None:
        if tolerable_failures < 0:
            raise ValueError(f"tolerable_failures must be >= 0, got {tolerable_failures}")
        self.tolerable_failures = tolerable_failures
        self._consecutive = 0
        self._counted_ids: set[int] = set()
        self._last_success_id = 0
        #: the reason of the last counted failure
        self.last_reason: CheckpointFailureReason | None = None
        #: the count that made :meth:`handle_failure` return True the last time
        self.exceeded_count = 0

    @staticmethod
    def counts(reason: CheckpointFailureReason) -> bool:
        """Whether a failure with ``reason`` counts towards the limit."""
        return reason in COUNTED_REASONS

    @property
    def consecutive_failures(self) -> int:
        return self._consecutive

    def handle_failure(self, reason: CheckpointFailureReason, checkpoint_id: int | None) -> bool:
        """Note a failure (``checkpoint_id`` None: failed before it had an id); return
        True when the job must fail now (count > tolerable_failures)."""
        if not self.counts(reason):
            return False
        if checkpoint_id is not None:
            if checkpoint_id <= self._last_success_id or checkpoint_id in self._counted_ids:
                return False
            self._counted_ids.add(checkpoint_id)
        self._consecutive += 1
        self.last_reason = reason
        if self._consecutive > self.tolerable_failures:
            self.exceeded_count = self._consecutive
            self._consecutive = 0
            self._counted_ids.clear()
            return True
        return False

    def handle_success(self, checkpoint_id: int) -> None:
        """A checkpoint completed: the run of failures is over."""
        self._consecutive = 0
        self._counted_ids = {i for i in self._counted_ids if i > checkpoint_id}
        self._last_success_id = max(self._last_success_id, checkpoint_id)

"""Whether a checkpoint may be triggered now: a pure function over observed facts (M-C1).

The coordinator gathers :class:`TriggerFacts` under its lock and asks
:func:`decide_trigger`; it asks twice, before obtaining a new id and again right
before sending the triggers (Flink's preconditions, M-C1). No I/O, no clock,
no state: the same facts always give the same answer.

Order of the checks (the first that fails names the reason):

1. the coordinator is shut down → ``COORDINATOR_SHUTDOWN`` (also for forced ones);
2. not forced and periodic scheduling was stopped → ``PERIODIC_STOPPED``
   (savepoints, which are forced, still go: stop-with-savepoint stops the periodic
   trigger first);
3. not forced and ``pending >= max_concurrent`` → ``TOO_MANY_CONCURRENT``;
4. not forced and the minimum pause since the last completed checkpoint has not
   elapsed → ``MIN_PAUSE``;
5. a task that must be triggered or must acknowledge is not running (not yet
   reported running, or finished) → ``TASK_NOT_RUNNING`` (also for forced ones).

Obtaining the id (``ID_UNAVAILABLE``) is the coordinator's own step after these.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..types import CheckpointFailureReason


@dataclass(frozen=True)
class TriggerFacts:
    """What the coordinator observed when a trigger was requested. Times are ms on the
    coordinator's monotonic clock; ``last_completion_ms`` is None before the first
    completed checkpoint."""

    shut_down: bool
    periodic_stopped: bool
    forced: bool
    pending: int
    max_concurrent: int
    last_completion_ms: float | None
    min_pause_ms: float
    now_ms: float
    tasks_not_running: int


def decide_trigger(facts: TriggerFacts) -> CheckpointFailureReason | None:
    """None: trigger. Otherwise the reason to cancel the attempt with (M-C1)."""
    if facts.shut_down:
        return CheckpointFailureReason.COORDINATOR_SHUTDOWN
    if not facts.forced:
        if facts.periodic_stopped:
            return CheckpointFailureReason.PERIODIC_STOPPED
        if facts.pending >= facts.max_concurrent:
            return CheckpointFailureReason.TOO_MANY_CONCURRENT
        if pause_remaining_ms(facts) > 0:
            return CheckpointFailureReason.MIN_PAUSE
    if facts.tasks_not_running > 0:
        return CheckpointFailureReason.TASK_NOT_RUNNING
    return None


def pause_remaining_ms(facts: TriggerFacts) -> float:
    """How long the minimum pause still forbids a non-forced trigger (0: it does not)."""
    if facts.last_completion_ms is None or facts.min_pause_ms <= 0:
        return 0.0
    return max(0.0, facts.last_completion_ms + facts.min_pause_ms - facts.now_ms)

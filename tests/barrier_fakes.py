"""Fakes shared by the barrier-handler tests: a recording BarrierActions and a clock that
moves at every read."""

from __future__ import annotations

from typing import Any

from lockgate.checkpoint.barriers.base import AlignmentInfo
from lockgate.checkpoint.types import CheckpointFailureReason as Reason
from lockgate.core.clock import ManualClock
from lockgate.core.elements import CheckpointBarrier


class RecordingActions:
    """A fake BarrierActions that records every call in order (and, when ``handler`` is
    set, the handler's blocked channels at each trigger)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.barriers: list[CheckpointBarrier] = []
        self.handler: Any = None
        self.blocked_at_trigger: list[list[bool]] = []

    def trigger_snapshot(self, barrier: CheckpointBarrier, info: AlignmentInfo) -> None:
        self.calls.append(("trigger", barrier.checkpoint_id, info))
        self.barriers.append(barrier)
        if self.handler is not None:
            h = self.handler
            self.blocked_at_trigger.append([h.is_blocked(c) for c in range(h.num_channels)])

    def abort_checkpoint(self, checkpoint_id: int, reason: Reason) -> None:
        self.calls.append(("abort", checkpoint_id, reason))

    def record_inflight(self, checkpoint_id: int, channel: int, batch: Any) -> None:
        self.calls.append(("inflight", checkpoint_id, channel, batch))

    def channel_state_complete(self, checkpoint_id: int) -> None:
        self.calls.append(("complete", checkpoint_id))

    @property
    def triggered(self) -> list[int]:
        return [c[1] for c in self.calls if c[0] == "trigger"]

    @property
    def aborted(self) -> list[tuple[int, Reason]]:
        return [(c[1], c[2]) for c in self.calls if c[0] == "abort"]

    def kinds(self) -> list[tuple[str, int]]:
        return [(c[0], c[1]) for c in self.calls]


class TickingClock(ManualClock):
    """A clock that moves 1 ms at every read, like a real one moves between two reads."""

    def monotonic_ms(self) -> float:
        self.advance(1)
        return super().monotonic_ms()

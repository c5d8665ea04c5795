"""The contract between a subtask's input and its barrier handler.

A handler sees every barrier, cancellation marker and end of partition that
arrives on the subtask's input channels (in channel order, M-E1), decides
which channels are blocked, and tells the task, through
:class:`BarrierActions`, when to snapshot, when a checkpoint is aborted, and
(for unaligned checkpoints) which records are in-flight channel state.

Handlers are pure: no threads, no I/O; time comes from the injected clock.
They follow Flink's model: each handler is a small object whose events change
its state; aligned, unaligned and alternating handling differ only in how a
barrier is treated (DESIGN.md §5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...core.batch import Batch
from ...core.elements import CancellationMarker, CheckpointBarrier
from ..types import CheckpointFailureReason


@dataclass(frozen=True)
class AlignmentInfo:
    """How the barriers of a checkpoint arrived at this subtask (M-B10).

    ``alignment_ms``: first barrier to snapshot trigger (0 when unaligned or one
    channel). ``start_delay_ms``: first barrier's arrival (wall clock) minus the
    barrier's trigger timestamp. ``unaligned``: the snapshot must include the
    in-flight records the handler reports through ``record_inflight`` until
    ``channel_state_complete``.
    """

    alignment_ms: float
    start_delay_ms: float
    unaligned: bool


class BarrierActions(Protocol):
    """What a handler asks of its task. Called in the task thread."""

    def trigger_snapshot(self, barrier: CheckpointBarrier, info: AlignmentInfo) -> None:
        """Snapshot checkpoint ``barrier.checkpoint_id`` now and forward the barrier."""

    def abort_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        """Decline the checkpoint to the coordinator and send a cancellation marker
        downstream (at most once per checkpoint id)."""

    def record_inflight(self, checkpoint_id: int, channel: int, batch: Batch) -> None:
        """Unaligned: ``batch`` arrived on ``channel`` in front of barrier
        ``checkpoint_id``; it belongs to that checkpoint's channel state (it is still
        processed normally)."""

    def channel_state_complete(self, checkpoint_id: int) -> None:
        """Unaligned: every channel delivered barrier ``checkpoint_id`` (or ended);
        the channel state of that checkpoint is complete."""


class BarrierHandler(Protocol):
    """One per subtask with inputs; ``num_channels`` input channels, numbered from 0."""

    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None: ...

    def on_cancellation_marker(self, channel: int, marker: CancellationMarker) -> None: ...

    def on_priority_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        """``channel`` announced the unaligned ``barrier`` ahead of the data in front of
        it; the barrier itself follows in order (M-B7)."""

    def on_end_of_partition(self, channel: int) -> None:
        """``channel`` ended: it counts as closed from now on (M-B6)."""

    def is_blocked(self, channel: int) -> bool:
        """Whether records of ``channel`` must wait (aligned checkpoints, M-B4)."""

    def captures(self, channel: int) -> int | None:
        """The id of the unaligned checkpoint whose channel state the next batch of
        ``channel`` belongs to, or None."""

    def next_deadline_ms(self) -> float | None:
        """Monotonic time (ms) at which ``on_time`` must be called (alignment timeout),
        or None."""

    def on_time(self) -> None:
        """The clock reached ``next_deadline_ms``: switch a timed-out alignment to
        unaligned (M-B8)."""

"""Exactly-once barrier alignment (M-B4, M-B5, M-B6).

Guarantees of :class:`BarrierAligner`:

* A channel that delivered the barrier of the checkpoint being aligned is
  blocked: nothing behind the barrier is processed until the barrier has
  arrived on every channel that is not closed (M-B4). The snapshot therefore
  holds exactly the records in front of the barrier on every channel
  (exactly-once state, M-B9).
* When the last barrier arrives (or the last channel still missing it
  closes, M-B6), every channel is released *before* the snapshot is
  triggered. Records behind the barrier wait in their channel (the channel is
  the buffer), so they come out in order, after the snapshot.
* A second barrier of the aligned checkpoint on a blocked channel raises
  :class:`~lockgate.errors.CorruptStreamError` (M-B4).
* A barrier of a newer checkpoint while aligning aborts the current one
  (``SUBSUMED``), releases every block and starts aligning the new one; an
  older barrier is ignored and its channel keeps flowing (M-B4).
* Cancellation markers follow M-B5 (reason ``CANCELLED_UPSTREAM``): the
  aligned checkpoint's marker releases and aborts it; a newer marker releases,
  aborts the aligned checkpoint (``SUBSUMED``: this subtask can no longer
  acknowledge it) and aborts the marker's checkpoint, which becomes the
  current, cancelled one: no later barrier of it starts an alignment. Older
  markers, and markers of a checkpoint already triggered, are ignored.
* One channel: never blocks (the barrier completes its alignment at once),
  triggers every checkpoint newer than the last one seen.
* Every abort is reported once per checkpoint id; every trigger carries
  :class:`AlignmentInfo` (M-B10): ``alignment_ms`` = monotonic time from the
  first barrier to the trigger, ``start_delay_ms`` = wall clock at the first
  barrier minus the barrier's timestamp, at least 0.

The in-progress checkpoint is one small object (:class:`CheckpointInProgress`);
:class:`~lockgate.checkpoint.barriers.alternating.AlternatingBarrierHandler`
extends this class through the ``_started`` / ``_progressed`` hooks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.clock import Clock
from ...core.elements import CancellationMarker, CheckpointBarrier
from ...errors import CorruptStreamError
from ..types import CheckpointFailureReason
from .base import AlignmentInfo, BarrierActions

#: the id before any barrier or cancellation marker was seen
NO_CHECKPOINT = -1


def start_delay_ms(clock: Clock, barrier: CheckpointBarrier) -> float:
    """Wall clock now minus the barrier's trigger timestamp, at least 0 (M-B10)."""
    return max(0.0, float(clock.time_ms() - barrier.timestamp))


@dataclass
class CheckpointInProgress:
    """The checkpoint whose barriers a subtask is collecting.

    ``arrived[ch]``: channel ``ch`` delivered its barrier. ``remaining``: channels
    that neither delivered it nor are closed. ``unaligned``: the snapshot was
    taken; channels still missing the barrier capture in-flight data instead of
    being waited for. ``deadline_ms``: monotonic time at which an aligned
    checkpoint switches to unaligned, or None.
    """

    barrier: CheckpointBarrier
    arrived: list[bool]
    remaining: int
    start_ms: float
    start_delay_ms: float
    unaligned: bool = False
    deadline_ms: float | None = None

    @property
    def checkpoint_id(self) -> int:
        return self.barrier.checkpoint_id


class BarrierAligner:
    """The exactly-once handler with aligned barriers (M-B1: EXACTLY_ONCE, aligned)."""

    def __init__(self, num_channels: int, actions: BarrierActions, clock: Clock) -> None:
        if num_channels < 1:
            raise ValueError(f"a barrier handler needs at least one channel, got {num_channels}")
        self.num_channels = num_channels
        self._actions = actions
        self._clock = clock
        self._closed = [False] * num_channels
        self._num_closed = 0
        #: newest checkpoint id seen in a barrier or a cancellation marker
        self._current_id = NO_CHECKPOINT
        self._pending: CheckpointInProgress | None = None

    # queries -------------------------------------------------------------------
    @property
    def pending(self) -> CheckpointInProgress | None:
        """The checkpoint being aligned (or, unaligned, captured), if any."""
        return self._pending

    def is_blocked(self, channel: int) -> bool:
        p = self._pending
        return p is not None and not p.unaligned and p.arrived[channel]

    def captures(self, channel: int) -> int | None:
        p = self._pending
        if p is None or not p.unaligned or p.arrived[channel] or self._closed[channel]:
            return None
        return p.checkpoint_id

    def next_deadline_ms(self) -> float | None:
        return None

    def on_time(self) -> None:
        """Aligned checkpoints have no timeout."""

    # events --------------------------------------------------------------------
    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        cid = barrier.checkpoint_id
        p = self._pending
        if p is not None and cid == p.checkpoint_id:
            if p.arrived[channel]:
                raise CorruptStreamError(
                    f"input channel {channel} delivered the barrier of checkpoint {cid} twice "
                    "(M-B4)"
                )
            p.arrived[channel] = True
            p.remaining -= 1
            self._progressed(p, barrier)
        elif cid > self._current_id:
            if p is not None:
                self._abort_pending(CheckpointFailureReason.SUBSUMED)
            self._begin(channel, barrier)
        # else: an older barrier, or one of a checkpoint already triggered or cancelled:
        # ignored, its channel keeps flowing

    def on_priority_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        """Aligned checkpoints wait for the barrier in order: an announcement is ignored."""

    def on_cancellation_marker(self, channel: int, marker: CancellationMarker) -> None:
        cid = marker.checkpoint_id
        p = self._pending
        if cid < self._current_id or (cid == self._current_id and p is None):
            return  # an older checkpoint, or the current one was already triggered/cancelled
        if p is not None:
            self._pending = None  # releases every block, stops capturing
            if cid > p.checkpoint_id:
                self._actions.abort_checkpoint(p.checkpoint_id, CheckpointFailureReason.SUBSUMED)
        self._current_id = cid
        self._actions.abort_checkpoint(cid, CheckpointFailureReason.CANCELLED_UPSTREAM)

    def on_end_of_partition(self, channel: int) -> None:
        if self._closed[channel]:
            return
        self._closed[channel] = True
        self._num_closed += 1
        p = self._pending
        if p is not None and not p.arrived[channel]:
            p.remaining -= 1
            self._progressed(p, None)

    # steps ---------------------------------------------------------------------
    def _begin(self, channel: int, barrier: CheckpointBarrier) -> None:
        self._current_id = barrier.checkpoint_id
        arrived = [False] * self.num_channels
        arrived[channel] = True
        p = CheckpointInProgress(
            barrier=barrier,
            arrived=arrived,
            remaining=self.num_channels - self._num_closed - 1,
            start_ms=self._clock.monotonic_ms(),
            start_delay_ms=start_delay_ms(self._clock, barrier),
        )
        self._pending = p
        self._started(p)

    def _started(self, p: CheckpointInProgress) -> None:
        """Hook: the first barrier of ``p`` arrived."""
        self._complete_if_aligned(p, at_start=True)

    def _progressed(self, p: CheckpointInProgress, barrier: CheckpointBarrier | None) -> None:
        """Hook: a channel delivered ``barrier`` of ``p``, or (``None``) closed."""
        self._complete_if_aligned(p)

    def _complete_if_aligned(self, p: CheckpointInProgress, at_start: bool = False) -> None:
        """Trigger ``p`` if no open channel misses its barrier (``at_start``: the first
        barrier completed it, nothing was aligned)."""
        if p.remaining == 0:
            self._pending = None  # release every channel first (M-B4)
            aligned_ms = 0.0 if at_start else self._clock.monotonic_ms() - p.start_ms
            self._actions.trigger_snapshot(
                p.barrier, AlignmentInfo(aligned_ms, p.start_delay_ms, False)
            )

    def _abort_pending(self, reason: CheckpointFailureReason) -> None:
        p = self._pending
        assert p is not None
        self._pending = None
        self._actions.abort_checkpoint(p.checkpoint_id, reason)

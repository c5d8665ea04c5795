"""Exactly-once with unaligned checkpoints: the alternating handler (M-B7, M-B8).

:class:`AlternatingBarrierHandler` is the aligner (M-B4 to M-B6, same
blocking, corrupt-stream, subsumption and cancellation rules) plus an
unaligned phase. Guarantees:

* A savepoint barrier is always aligned (M-B8, M-E2).
* A checkpoint barrier with ``options.unaligned`` (M-B7): its *first* barrier
  triggers the snapshot at once (``AlignmentInfo.unaligned=True``,
  ``alignment_ms=0``); no channel is blocked. Every channel that has not yet
  delivered that barrier and is not closed *captures*: ``captures(ch)`` is the
  checkpoint id, so each batch it delivers is reported through
  ``actions.record_inflight`` (and still processed) until its barrier arrives
  or it ends. When no channel captures any more, ``channel_state_complete``
  is called (at once when no other channel was missing the barrier). So the
  snapshot plus the recorded batches hold exactly the records in front of
  the barrier on every channel.
* A checkpoint barrier without ``options.unaligned`` is aligned, but with
  ``aligned_timeout_ms > 0`` an alignment that lasted that long switches to
  unaligned (M-B8): ``next_deadline_ms()`` is alignment start + timeout and
  ``on_time()`` at or after it triggers the snapshot (``unaligned=True``,
  ``alignment_ms`` = time aligned so far), releases every channel, and the
  channels that had not delivered the barrier capture as above. The same
  switch happens when, during the alignment, a barrier of that checkpoint
  arrives with ``options.unaligned`` (an upstream task switched) while other
  channels still miss the barrier (if it is the last one, the alignment is
  simply complete).
* The barrier passed to ``trigger_snapshot`` after a switch is marked
  unaligned, so that the task forwards it as unaligned and downstream tasks
  switch too (as Flink does).
* A newer barrier while a checkpoint still captures aborts it (``SUBSUMED``;
  it stops capturing and gets no ``channel_state_complete``) and starts the
  new one. A cancellation marker stops capturing the same way (M-B5).
  Older barriers are ignored.
"""

from __future__ import annotations

import dataclasses

from ...core.clock import Clock
from ...core.elements import CheckpointBarrier, CheckpointOptions, CheckpointType
from ..types import CheckpointFailureReason
from .aligner import BarrierAligner, CheckpointInProgress, start_delay_ms
from .base import AlignmentInfo, BarrierActions

_UNALIGNED = CheckpointOptions(CheckpointType.CHECKPOINT, unaligned=True)


class AlternatingBarrierHandler(BarrierAligner):
    """The handler of EXACTLY_ONCE with unaligned checkpoints (M-B1)."""

    def __init__(
        self,
        num_channels: int,
        actions: BarrierActions,
        clock: Clock,
        *,
        aligned_timeout_ms: float = 0,
    ) -> None:
        if aligned_timeout_ms < 0:
            raise ValueError(f"aligned_timeout_ms must not be negative, got {aligned_timeout_ms}")
        super().__init__(num_channels, actions, clock)
        self.aligned_timeout_ms = aligned_timeout_ms

    def next_deadline_ms(self) -> float | None:
        p = self._pending
        return None if p is None or p.unaligned else p.deadline_ms

    def on_time(self) -> None:
        p = self._pending
        if (
            p is not None
            and not p.unaligned
            and p.deadline_ms is not None
            and self._clock.monotonic_ms() >= p.deadline_ms
        ):
            self._switch_to_unaligned(p, self._clock.monotonic_ms() - p.start_ms)

    def on_priority_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        """A network channel announced an unaligned barrier still behind its in-flight
        data: start the unaligned checkpoint now (M-B7). No channel has delivered the
        barrier yet, so every open channel, ``channel`` included, captures until its
        barrier arrives in order."""
        cid = barrier.checkpoint_id
        p = self._pending
        if not barrier.options.unaligned:
            return
        if p is not None and cid == p.checkpoint_id:
            if not p.unaligned:
                self._switch_to_unaligned(p, self._clock.monotonic_ms() - p.start_ms)
            return
        if cid <= self._current_id:
            return
        if p is not None:
            self._abort_pending(CheckpointFailureReason.SUBSUMED)
        self._current_id = cid
        p = CheckpointInProgress(
            barrier=barrier,
            arrived=[False] * self.num_channels,
            remaining=self.num_channels - self._num_closed,
            start_ms=self._clock.monotonic_ms(),
            start_delay_ms=start_delay_ms(self._clock, barrier),
        )
        self._pending = p
        self._switch_to_unaligned(p, aligned_ms=0.0)

    # hooks of the aligner ----------------------------------------------------------
    def _started(self, p: CheckpointInProgress) -> None:
        options = p.barrier.options
        if options.unaligned:
            self._switch_to_unaligned(p, aligned_ms=0.0)
            return
        if options.type is CheckpointType.CHECKPOINT and self.aligned_timeout_ms > 0:
            p.deadline_ms = p.start_ms + self.aligned_timeout_ms
        self._complete_if_aligned(p, at_start=True)

    def _progressed(self, p: CheckpointInProgress, barrier: CheckpointBarrier | None) -> None:
        if p.unaligned:
            if p.remaining == 0:
                self._pending = None
                self._actions.channel_state_complete(p.checkpoint_id)
        elif barrier is not None and barrier.options.unaligned and p.remaining > 0:
            # an upstream task switched
            self._switch_to_unaligned(p, self._clock.monotonic_ms() - p.start_ms)
        else:
            self._complete_if_aligned(p)

    def _switch_to_unaligned(self, p: CheckpointInProgress, aligned_ms: float) -> None:
        """Trigger now (``aligned_ms``: time spent aligning); channels still missing the
        barrier capture instead of being awaited."""
        p.unaligned = True  # releases every block
        p.deadline_ms = None
        barrier = p.barrier
        if not barrier.options.unaligned:
            barrier = dataclasses.replace(barrier, options=_UNALIGNED)
        self._actions.trigger_snapshot(barrier, AlignmentInfo(aligned_ms, p.start_delay_ms, True))
        if p.remaining == 0 and self._pending is p:
            self._pending = None
            self._actions.channel_state_complete(p.checkpoint_id)

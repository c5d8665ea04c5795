"""At-least-once barrier tracking (M-B2, M-B3).

Guarantees of :class:`BarrierTracker`:

* It never blocks a channel: records behind a barrier on a fast channel are
  processed before the snapshot and are therefore in it (and replayed again
  after a restore): at-least-once (M-B9).
* It counts the barriers of each checkpoint in an ascending queue of
  ``(id, count, aborted)`` entries. When a count reaches the number of
  channels, that entry and every older one are dropped and the snapshot is
  triggered unless the entry is aborted (M-B2). The first barrier of an id
  not newer than the newest id seen is ignored. The queue holds at most
  ``max_tracked`` entries (default 50): beyond it the oldest is dropped.
* One channel: every barrier of a new checkpoint triggers at once.
* Cancellation markers (M-B3, reason ``CANCELLED_UPSTREAM``): every queued
  entry older than the marker is dropped and aborted (``SUBSUMED``, once per
  id); the matching entry is marked aborted (abort reported once) and keeps
  counting (the marker counts as that channel's barrier) until all its
  barriers arrived; a marker newer than anything seen is aborted at once and
  becomes the only entry; an older one is ignored.

Closed channels (M-B6 applied to the tracker): a channel that ended counts as
having delivered every barrier it had not delivered yet. At its end of
partition, every queued entry newer than the newest id (barrier or marker)
the channel delivered gains one count, and an entry created after the end
starts with one count per closed channel. So a checkpoint still completes
when its barrier arrived on every channel that is open, and a closed channel
is never counted twice. Completed entries found at an end of partition
trigger in ascending order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ...core.clock import Clock
from ...core.elements import CancellationMarker, CheckpointBarrier
from ..types import CheckpointFailureReason
from .aligner import NO_CHECKPOINT, start_delay_ms
from .base import AlignmentInfo, BarrierActions

DEFAULT_MAX_TRACKED = 50


@dataclass
class BarrierCount:
    """One queued checkpoint: barriers counted so far, and whether it was aborted.

    ``barrier`` is the first barrier of the checkpoint (None when a cancellation
    marker created the entry).
    """

    checkpoint_id: int
    count: int
    aborted: bool
    barrier: CheckpointBarrier | None = None
    start_ms: float = 0.0
    start_delay_ms: float = 0.0


class BarrierTracker:
    """The at-least-once handler (M-B1: AT_LEAST_ONCE)."""

    def __init__(
        self,
        num_channels: int,
        actions: BarrierActions,
        clock: Clock,
        *,
        max_tracked: int = DEFAULT_MAX_TRACKED,
    ) -> None:
        if num_channels < 1:
            raise ValueError(f"a barrier handler needs at least one channel, got {num_channels}")
        if max_tracked < 1:
            raise ValueError(f"max_tracked must be at least 1, got {max_tracked}")
        self.num_channels = num_channels
        self.max_tracked = max_tracked
        self._actions = actions
        self._clock = clock
        self._queue: deque[BarrierCount] = deque()
        self._latest_id = NO_CHECKPOINT
        self._closed = [False] * num_channels
        self._num_closed = 0
        #: per channel, the newest id it delivered (barrier or marker)
        self._last_seen = [NO_CHECKPOINT] * num_channels

    # queries -------------------------------------------------------------------
    @property
    def pending(self) -> list[tuple[int, int, bool]]:
        """The queue as ``(id, count, aborted)``, oldest first."""
        return [(e.checkpoint_id, e.count, e.aborted) for e in self._queue]

    def is_blocked(self, channel: int) -> bool:
        return False

    def captures(self, channel: int) -> int | None:
        return None

    def next_deadline_ms(self) -> float | None:
        return None

    def on_time(self) -> None:
        """The tracker has no timeout."""

    # events --------------------------------------------------------------------
    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        cid = barrier.checkpoint_id
        self._saw(channel, cid)
        for pos, entry in enumerate(self._queue):
            if entry.checkpoint_id == cid:
                entry.count += 1
                if entry.count >= self.num_channels:
                    self._complete(pos)
                return
        if cid <= self._latest_id:
            return  # not newer than the newest seen: it cannot complete any more
        self._latest_id = cid
        self._queue.append(
            BarrierCount(
                cid,
                1 + self._num_closed,
                False,
                barrier,
                self._clock.monotonic_ms(),
                start_delay_ms(self._clock, barrier),
            )
        )
        if len(self._queue) > self.max_tracked:
            self._queue.popleft()
        if self._queue[-1].count >= self.num_channels:
            self._complete(len(self._queue) - 1, at_start=True)

    def on_priority_barrier(self, channel: int, barrier: CheckpointBarrier) -> None:
        """Tracking counts barriers in order: an announcement is ignored."""

    def on_cancellation_marker(self, channel: int, marker: CancellationMarker) -> None:
        cid = marker.checkpoint_id
        self._saw(channel, cid)
        queue = self._queue
        while queue and queue[0].checkpoint_id < cid:
            older = queue.popleft()
            if not older.aborted:
                older.aborted = True
                self._actions.abort_checkpoint(
                    older.checkpoint_id, CheckpointFailureReason.SUBSUMED
                )
        if queue and queue[0].checkpoint_id == cid:
            entry = queue[0]
            if not entry.aborted:
                entry.aborted = True
                self._actions.abort_checkpoint(cid, CheckpointFailureReason.CANCELLED_UPSTREAM)
            entry.count += 1
            if entry.count >= self.num_channels:
                queue.popleft()
        elif cid > self._latest_id:
            self._latest_id = cid
            self._actions.abort_checkpoint(cid, CheckpointFailureReason.CANCELLED_UPSTREAM)
            # every older entry was dropped above: this one is alone in the queue
            entry = BarrierCount(cid, 1 + self._num_closed, True)
            if entry.count < self.num_channels:
                queue.append(entry)
        # else: a trailing marker of a checkpoint already dropped: ignored

    def on_end_of_partition(self, channel: int) -> None:
        if self._closed[channel]:
            return
        self._closed[channel] = True
        self._num_closed += 1
        last = self._last_seen[channel]
        for entry in self._queue:
            if entry.checkpoint_id > last:
                entry.count += 1
        while True:
            ready = next(
                (pos for pos, e in enumerate(self._queue) if e.count >= self.num_channels), None
            )
            if ready is None:
                return
            self._complete(ready)

    # steps ---------------------------------------------------------------------
    def _saw(self, channel: int, checkpoint_id: int) -> None:
        self._last_seen[channel] = max(self._last_seen[channel], checkpoint_id)

    def _complete(self, pos: int, at_start: bool = False) -> None:
        """All barriers of the entry at ``pos`` arrived: drop it and every older one,
        then trigger it unless it was aborted (M-B2). ``at_start``: its first barrier
        completed it (one channel open): no time passed between first and last."""
        entry = self._queue[pos]
        for _ in range(pos + 1):
            self._queue.popleft()
        if not entry.aborted and entry.barrier is not None:
            waited_ms = 0.0 if at_start else self._clock.monotonic_ms() - entry.start_ms
            self._actions.trigger_snapshot(
                entry.barrier, AlignmentInfo(waited_ms, entry.start_delay_ms, False)
            )

"""The at-least-once barrier tracker (M-B2, M-B3; closed channels per M-B6; metrics M-B10)."""

from __future__ import annotations

from typing import Any

from barrier_fakes import RecordingActions, TickingClock
from lockgate.checkpoint.barriers.base import AlignmentInfo
from lockgate.checkpoint.barriers.tracker import DEFAULT_MAX_TRACKED, BarrierTracker
from lockgate.checkpoint.types import CheckpointFailureReason as Reason
from lockgate.core.clock import ManualClock
from lockgate.core.elements import CancellationMarker, CheckpointBarrier


def barrier(cid: int, ts: int = 0) -> CheckpointBarrier:
    return CheckpointBarrier(cid, ts)


def tracker(n: int, **kw: Any) -> tuple[BarrierTracker, RecordingActions, ManualClock]:
    actions = RecordingActions()
    clock = ManualClock(1_000)
    return BarrierTracker(n, actions, clock, **kw), actions, clock


# M-B2 ----------------------------------------------------------------------------------


def test_m_b2_the_tracker_never_blocks_a_channel_that_delivered_a_barrier() -> None:
    t, _, _ = tracker(3)
    t.on_barrier(0, barrier(1))
    t.on_barrier(1, barrier(1))
    assert not any(t.is_blocked(ch) for ch in range(3))
    assert all(t.captures(ch) is None for ch in range(3))
    assert t.next_deadline_ms() is None


def test_m_b2_the_snapshot_triggers_when_the_count_reaches_the_number_of_channels() -> None:
    t, actions, _ = tracker(3)
    t.on_barrier(0, barrier(1))
    t.on_barrier(2, barrier(1))
    assert actions.triggered == []
    assert t.pending == [(1, 2, False)]
    t.on_barrier(1, barrier(1))
    assert actions.triggered == [1]
    assert t.pending == []


def test_m_b2_a_completed_entry_drops_every_older_entry_without_triggering_it() -> None:
    t, actions, _ = tracker(2)
    t.on_barrier(0, barrier(1))
    t.on_barrier(0, barrier(2))
    t.on_barrier(1, barrier(2))  # channel 1 never delivered 1 (e.g. its upstream dropped it)
    assert actions.triggered == [2]
    assert t.pending == []
    assert actions.aborted == []


def test_m_b2_a_first_barrier_not_newer_than_the_latest_seen_is_ignored() -> None:
    t, actions, _ = tracker(2)
    t.on_barrier(0, barrier(5))
    t.on_barrier(1, barrier(3))
    t.on_barrier(0, barrier(3))
    assert t.pending == [(5, 1, False)]
    assert actions.calls == []


def test_m_b2_the_queue_is_bounded_and_drops_its_oldest_entry_beyond_the_bound() -> None:
    t, actions, _ = tracker(2, max_tracked=3)
    for cid in (1, 2, 3, 4):
        t.on_barrier(0, barrier(cid))
    assert [e[0] for e in t.pending] == [2, 3, 4]
    t.on_barrier(1, barrier(1))  # its entry was dropped: it can no longer complete
    assert actions.triggered == []
    t.on_barrier(1, barrier(2))
    assert actions.triggered == [2]


def test_m_b2_the_default_bound_is_50_entries() -> None:
    t, _, _ = tracker(2)
    for cid in range(1, 61):
        t.on_barrier(0, barrier(cid))
    assert DEFAULT_MAX_TRACKED == 50
    assert [e[0] for e in t.pending] == list(range(11, 61))


def test_m_b2_with_one_channel_every_new_barrier_triggers_at_once() -> None:
    t, actions, _ = tracker(1)
    t.on_barrier(0, barrier(1))
    t.on_barrier(0, barrier(2))
    assert actions.triggered == [1, 2]
    assert t.pending == []


def test_m_b2_records_behind_a_barrier_on_a_fast_channel_flow_while_the_slow_one_catches_up() -> (
    None
):
    # The tracker is consulted only for control elements; nothing it says stops a channel.
    t, actions, _ = tracker(2)
    t.on_barrier(0, barrier(1))
    t.on_barrier(0, barrier(2))
    assert not t.is_blocked(0)
    t.on_barrier(1, barrier(1))
    t.on_barrier(1, barrier(2))
    assert actions.triggered == [1, 2]


# M-B3 ----------------------------------------------------------------------------------


def test_m_b3_a_marker_drops_and_aborts_every_older_entry_once() -> None:
    t, actions, _ = tracker(3)
    t.on_barrier(0, barrier(1))
    t.on_barrier(0, barrier(2))
    t.on_barrier(0, barrier(3))
    t.on_cancellation_marker(1, CancellationMarker(3))
    assert actions.aborted == [
        (1, Reason.SUBSUMED),
        (2, Reason.SUBSUMED),
        (3, Reason.CANCELLED_UPSTREAM),
    ]
    assert t.pending == [(3, 2, True)]


def test_m_b3_the_matching_entry_is_aborted_once_and_counted_until_all_barriers_arrived() -> None:
    t, actions, _ = tracker(4)
    t.on_barrier(0, barrier(1))
    t.on_cancellation_marker(1, CancellationMarker(1))
    t.on_cancellation_marker(2, CancellationMarker(1))  # a second marker aborts nothing more
    assert actions.aborted == [(1, Reason.CANCELLED_UPSTREAM)]
    assert t.pending == [(1, 3, True)]
    t.on_barrier(3, barrier(1))
    assert actions.triggered == []  # all barriers arrived, but aborted: no snapshot
    assert t.pending == []
    assert actions.aborted == [(1, Reason.CANCELLED_UPSTREAM)]


def test_m_b3_a_marker_newer_than_anything_seen_aborts_at_once_and_is_the_only_entry() -> None:
    t, actions, _ = tracker(3)
    t.on_cancellation_marker(2, CancellationMarker(4))
    assert actions.aborted == [(4, Reason.CANCELLED_UPSTREAM)]
    assert t.pending == [(4, 1, True)]
    t.on_barrier(0, barrier(4))
    t.on_barrier(1, barrier(4))
    assert actions.triggered == []
    assert t.pending == []


def test_m_b3_an_older_marker_is_ignored() -> None:
    t, actions, _ = tracker(2)
    t.on_barrier(0, barrier(5))
    t.on_cancellation_marker(1, CancellationMarker(3))
    assert actions.calls == []
    assert t.pending == [(5, 1, False)]


def test_m_b3_with_one_channel_a_marker_aborts_at_once() -> None:
    t, actions, _ = tracker(1)
    t.on_cancellation_marker(0, CancellationMarker(1))
    t.on_barrier(0, barrier(2))
    assert actions.aborted == [(1, Reason.CANCELLED_UPSTREAM)]
    assert actions.triggered == [2]


# closed channels (M-B6 applied to the tracker) --------------------------------------------


def test_m_b6_tracker_a_channel_closed_before_the_barrier_counts_as_delivered() -> None:
    t, actions, _ = tracker(3)
    t.on_end_of_partition(2)
    t.on_barrier(0, barrier(1))
    t.on_barrier(1, barrier(1))
    assert actions.triggered == [1]


def test_m_b6_tracker_an_end_of_partition_completes_the_checkpoints_waiting_for_it() -> None:
    t, actions, _ = tracker(2)
    t.on_barrier(0, barrier(1))
    t.on_barrier(0, barrier(2))
    t.on_end_of_partition(1)
    assert actions.triggered == [1, 2]
    assert t.pending == []


def test_m_b6_tracker_a_channel_that_delivered_the_barrier_and_then_ended_counts_once() -> None:
    t, actions, _ = tracker(3)
    t.on_barrier(0, barrier(1))
    t.on_end_of_partition(0)
    t.on_barrier(1, barrier(1))
    assert actions.triggered == []
    t.on_barrier(2, barrier(1))
    assert actions.triggered == [1]


# M-B10 ---------------------------------------------------------------------------------


def test_m_b10_tracker_reports_start_delay_and_the_time_from_first_to_last_barrier() -> None:
    t, actions, clock = tracker(2)
    t.on_barrier(0, barrier(1, ts=900))  # clock at 1000: started 100 ms after the trigger
    clock.advance(40)
    t.on_barrier(1, barrier(1, ts=900))
    [(_, _, info)] = actions.calls
    assert info == AlignmentInfo(alignment_ms=40.0, start_delay_ms=100.0, unaligned=False)


def test_m_b10_tracker_with_one_channel_reports_no_alignment_time_even_on_a_moving_clock() -> None:
    actions = RecordingActions()
    t = BarrierTracker(1, actions, TickingClock(0))
    t.on_barrier(0, barrier(1))
    [(_, _, info)] = actions.calls
    assert info.alignment_ms == 0.0

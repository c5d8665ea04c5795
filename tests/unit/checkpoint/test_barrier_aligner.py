"""The exactly-once barrier aligner (M-B4, M-B5, M-B6, metrics M-B10)."""

from __future__ import annotations

import pytest

from barrier_fakes import RecordingActions, TickingClock
from lockgate.checkpoint.barriers.aligner import BarrierAligner
from lockgate.checkpoint.barriers.base import AlignmentInfo
from lockgate.checkpoint.types import CheckpointFailureReason as Reason
from lockgate.core.clock import ManualClock
from lockgate.core.elements import CancellationMarker, CheckpointBarrier
from lockgate.errors import CorruptStreamError


def barrier(cid: int, ts: int = 0) -> CheckpointBarrier:
    return CheckpointBarrier(cid, ts)


def aligner(n: int) -> tuple[BarrierAligner, RecordingActions, ManualClock]:
    actions = RecordingActions()
    clock = ManualClock(10_000)
    handler = BarrierAligner(n, actions, clock)
    actions.handler = handler
    return handler, actions, clock


def blocked(h: BarrierAligner) -> list[bool]:
    return [h.is_blocked(c) for c in range(h.num_channels)]


# M-B4 ----------------------------------------------------------------------------------


def test_m_b4_a_barrier_blocks_its_channel_until_all_channels_delivered() -> None:
    h, actions, _ = aligner(3)
    h.on_barrier(1, barrier(1))
    assert blocked(h) == [False, True, False]
    h.on_barrier(0, barrier(1))
    assert blocked(h) == [True, True, False]
    assert actions.triggered == []
    h.on_barrier(2, barrier(1))
    assert actions.triggered == [1]
    assert blocked(h) == [False, False, False]


def test_m_b4_every_channel_is_released_before_the_snapshot_is_triggered() -> None:
    h, actions, _ = aligner(2)
    h.on_barrier(0, barrier(1))
    h.on_barrier(1, barrier(1))
    assert actions.blocked_at_trigger == [[False, False]]


def test_m_b4_the_aligner_never_captures_channel_state() -> None:
    h, actions, _ = aligner(2)
    h.on_barrier(0, barrier(1))
    assert h.captures(0) is None and h.captures(1) is None
    assert h.next_deadline_ms() is None
    h.on_time()
    assert actions.calls == []


def test_m_b4_a_second_barrier_of_the_same_checkpoint_on_a_blocked_channel_is_a_corrupt_stream() -> (
    None
):
    h, _, _ = aligner(2)
    h.on_barrier(1, barrier(7))
    with pytest.raises(CorruptStreamError, match=r"channel 1 .*checkpoint 7"):
        h.on_barrier(1, barrier(7))


def test_m_b4_a_newer_barrier_while_aligning_aborts_the_current_one_as_subsumed_and_aligns_the_new_one() -> (
    None
):
    h, actions, _ = aligner(3)
    h.on_barrier(0, barrier(1))
    h.on_barrier(1, barrier(1))
    h.on_barrier(2, barrier(2))
    assert actions.aborted == [(1, Reason.SUBSUMED)]
    assert blocked(h) == [False, False, True]
    h.on_barrier(0, barrier(2))
    h.on_barrier(1, barrier(2))
    assert actions.triggered == [2]


def test_m_b4_an_older_barrier_is_ignored_and_its_channel_keeps_flowing() -> None:
    h, actions, _ = aligner(2)
    h.on_barrier(0, barrier(5))
    h.on_barrier(1, barrier(4))
    assert blocked(h) == [True, False]
    assert actions.calls == []
    h.on_barrier(1, barrier(5))
    assert actions.triggered == [5]
    h.on_barrier(0, barrier(3))  # also after the alignment
    assert blocked(h) == [False, False] and actions.triggered == [5]


def test_m_b4_with_one_channel_the_aligner_never_blocks_and_triggers_only_newer_checkpoints() -> (
    None
):
    h, actions, _ = aligner(1)
    h.on_barrier(0, barrier(1))
    assert blocked(h) == [False]
    h.on_barrier(0, barrier(1))  # not newer: ignored, no corrupt-stream error (nothing blocked)
    h.on_barrier(0, barrier(3))
    assert actions.triggered == [1, 3]
    assert [c[2].alignment_ms for c in actions.calls] == [0.0, 0.0]


# M-B5 ----------------------------------------------------------------------------------


def test_m_b5_a_marker_of_the_aligned_checkpoint_releases_the_blocks_and_aborts_it() -> None:
    h, actions, _ = aligner(3)
    h.on_barrier(0, barrier(1))
    h.on_cancellation_marker(1, CancellationMarker(1))
    assert blocked(h) == [False, False, False]
    assert actions.aborted == [(1, Reason.CANCELLED_UPSTREAM)]
    h.on_barrier(2, barrier(1))  # a trailing barrier of the cancelled checkpoint
    assert blocked(h) == [False, False, False]
    assert actions.triggered == []


def test_m_b5_a_newer_marker_while_aligning_releases_and_cancels_the_newer_checkpoint() -> None:
    h, actions, _ = aligner(2)
    h.on_barrier(0, barrier(1))
    h.on_cancellation_marker(1, CancellationMarker(2))
    assert blocked(h) == [False, False]
    # the aligned checkpoint can no longer be acknowledged here: declined as subsumed
    assert actions.aborted == [(1, Reason.SUBSUMED), (2, Reason.CANCELLED_UPSTREAM)]
    h.on_barrier(0, barrier(2))  # current-and-cancelled: starts no alignment
    assert blocked(h) == [False, False]
    assert actions.triggered == []


def test_m_b5_a_newer_marker_with_no_alignment_is_remembered_as_cancelled() -> None:
    h, actions, _ = aligner(2)
    h.on_cancellation_marker(1, CancellationMarker(4))
    assert actions.aborted == [(4, Reason.CANCELLED_UPSTREAM)]
    h.on_barrier(0, barrier(4))
    h.on_barrier(1, barrier(4))
    assert blocked(h) == [False, False] and actions.triggered == []
    h.on_barrier(0, barrier(5))
    assert blocked(h) == [True, False]


def test_m_b5_older_markers_and_markers_of_triggered_checkpoints_are_ignored() -> None:
    h, actions, _ = aligner(2)
    h.on_barrier(0, barrier(3))
    h.on_cancellation_marker(1, CancellationMarker(2))
    assert blocked(h) == [True, False] and actions.calls == []
    h.on_barrier(1, barrier(3))
    h.on_cancellation_marker(0, CancellationMarker(3))
    assert actions.aborted == []
    assert actions.triggered == [3]


def test_m_b5_every_abort_is_reported_once_per_checkpoint() -> None:
    h, actions, _ = aligner(3)
    h.on_barrier(0, barrier(1))
    h.on_cancellation_marker(1, CancellationMarker(1))
    h.on_cancellation_marker(2, CancellationMarker(1))
    assert actions.aborted == [(1, Reason.CANCELLED_UPSTREAM)]


def test_m_b5_with_one_channel_a_newer_marker_aborts_and_an_older_one_is_ignored() -> None:
    h, actions, _ = aligner(1)
    h.on_cancellation_marker(0, CancellationMarker(2))
    h.on_cancellation_marker(0, CancellationMarker(1))
    h.on_barrier(0, barrier(2))
    assert actions.aborted == [(2, Reason.CANCELLED_UPSTREAM)]
    assert actions.triggered == []


# M-B6 ----------------------------------------------------------------------------------


def test_m_b6_alignment_completes_when_barriers_plus_closed_channels_equal_the_channels() -> None:
    h, actions, _ = aligner(3)
    h.on_barrier(0, barrier(1))
    h.on_end_of_partition(2)
    assert actions.triggered == []
    h.on_barrier(1, barrier(1))
    assert actions.triggered == [1]


def test_m_b6_a_channel_closing_last_completes_the_alignment() -> None:
    h, actions, _ = aligner(2)
    h.on_barrier(0, barrier(1))
    h.on_end_of_partition(1)
    assert actions.triggered == [1]
    assert blocked(h) == [False, False]


def test_m_b6_closed_channels_count_for_every_later_checkpoint() -> None:
    h, actions, _ = aligner(3)
    h.on_end_of_partition(1)
    h.on_end_of_partition(2)
    h.on_end_of_partition(2)  # a repeated end does not count twice
    h.on_barrier(0, barrier(1))  # the only open channel: no blocking at all
    assert actions.triggered == [1]
    assert blocked(h) == [False, False, False]


# M-B10 ---------------------------------------------------------------------------------


def test_m_b10_alignment_duration_is_first_barrier_to_trigger_and_start_delay_is_arrival_minus_trigger_time() -> (
    None
):
    h, actions, clock = aligner(2)
    h.on_barrier(0, barrier(1, ts=9_750))  # arrives at 10_000: 250 ms after the trigger
    clock.advance(30)
    h.on_barrier(1, barrier(1, ts=9_750))
    [(_, _, info)] = actions.calls
    assert info == AlignmentInfo(alignment_ms=30.0, start_delay_ms=250.0, unaligned=False)


def test_m_b10_start_delay_is_never_negative_when_clocks_disagree() -> None:
    h, actions, _ = aligner(1)
    h.on_barrier(0, barrier(1, ts=99_999))  # the trigger's clock is ahead of this one
    [(_, _, info)] = actions.calls
    assert info.start_delay_ms == 0.0


def test_m_b10_one_channel_reports_no_alignment_time_even_on_a_moving_clock() -> None:
    actions = RecordingActions()
    h = BarrierAligner(1, actions, TickingClock(0))
    h.on_barrier(0, barrier(1))
    [(_, _, info)] = actions.calls
    assert info.alignment_ms == 0.0

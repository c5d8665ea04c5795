"""The alternating handler: aligned savepoints, unaligned checkpoints, aligned checkpoints that
switch to unaligned after a timeout (M-B7, M-B8; M-B4/M-B5 rules it shares with the aligner)."""

from __future__ import annotations

import pytest

from barrier_fakes import RecordingActions, TickingClock
from lockgate.checkpoint.barriers.alternating import AlternatingBarrierHandler
from lockgate.checkpoint.barriers.base import AlignmentInfo
from lockgate.checkpoint.types import CheckpointFailureReason as Reason
from lockgate.core.clock import ManualClock
from lockgate.core.elements import (
    CancellationMarker,
    CheckpointBarrier,
    CheckpointOptions,
    CheckpointType,
)
from lockgate.errors import CorruptStreamError

UNALIGNED = CheckpointOptions(CheckpointType.CHECKPOINT, unaligned=True)
ALIGNED = CheckpointOptions(CheckpointType.CHECKPOINT, unaligned=False)
SAVEPOINT = CheckpointOptions(CheckpointType.SAVEPOINT)


def barrier(cid: int, options: CheckpointOptions = UNALIGNED, ts: int = 5_000) -> CheckpointBarrier:
    return CheckpointBarrier(cid, ts, options)


def handler(
    n: int, timeout_ms: int = 0
) -> tuple[AlternatingBarrierHandler, RecordingActions, ManualClock]:
    actions = RecordingActions()
    clock = ManualClock(5_000)
    return (
        AlternatingBarrierHandler(n, actions, clock, aligned_timeout_ms=timeout_ms),
        actions,
        clock,
    )


def blocked(h: AlternatingBarrierHandler) -> list[bool]:
    return [h.is_blocked(c) for c in range(h.num_channels)]


def captures(h: AlternatingBarrierHandler) -> list[int | None]:
    return [h.captures(c) for c in range(h.num_channels)]


# M-B7: unaligned checkpoints ---------------------------------------------------------------


def test_m_b7_the_first_unaligned_barrier_triggers_the_snapshot_at_once_and_blocks_nothing() -> (
    None
):
    h, actions, _ = handler(3)
    h.on_barrier(1, barrier(1, ts=4_900))
    assert actions.calls == [("trigger", 1, AlignmentInfo(0.0, 100.0, True))]
    assert blocked(h) == [False, False, False]


def test_m_b7_channels_missing_the_barrier_capture_until_their_barrier_arrives() -> None:
    h, actions, _ = handler(3)
    h.on_barrier(1, barrier(1))
    assert captures(h) == [1, None, 1]
    h.on_barrier(0, barrier(1))
    assert captures(h) == [None, None, 1]
    assert ("complete", 1) not in actions.kinds()
    h.on_barrier(2, barrier(1))
    assert captures(h) == [None, None, None]
    assert actions.kinds() == [("trigger", 1), ("complete", 1)]


def test_m_b7_channel_state_is_complete_at_once_with_one_channel() -> None:
    h, actions, _ = handler(1)
    h.on_barrier(0, barrier(1))
    assert actions.kinds() == [("trigger", 1), ("complete", 1)]
    assert captures(h) == [None]


def test_m_b7_closed_channels_do_not_capture_and_a_channel_that_ends_stops_capturing() -> None:
    h, actions, _ = handler(3)
    h.on_end_of_partition(2)
    h.on_barrier(0, barrier(1))
    assert captures(h) == [None, 1, None]
    h.on_end_of_partition(1)
    assert captures(h) == [None, None, None]
    assert actions.kinds() == [("trigger", 1), ("complete", 1)]


def test_m_b7_channel_state_is_complete_at_once_when_every_other_channel_is_closed() -> None:
    h, actions, _ = handler(2)
    h.on_end_of_partition(0)
    h.on_barrier(1, barrier(1))
    assert actions.kinds() == [("trigger", 1), ("complete", 1)]


def test_m_b7_a_second_barrier_on_a_channel_that_already_delivered_it_is_a_corrupt_stream() -> None:
    h, _, _ = handler(2)
    h.on_barrier(0, barrier(3))
    with pytest.raises(CorruptStreamError, match=r"channel 0 .*checkpoint 3"):
        h.on_barrier(0, barrier(3))


def test_m_b7_a_newer_barrier_while_capturing_aborts_the_previous_as_subsumed_without_completing_it() -> (
    None
):
    h, actions, _ = handler(2)
    h.on_barrier(0, barrier(1))
    h.on_barrier(0, barrier(2))
    assert actions.calls[1] == ("abort", 1, Reason.SUBSUMED)
    assert actions.kinds() == [("trigger", 1), ("abort", 1), ("trigger", 2)]
    assert captures(h) == [None, 2]
    h.on_barrier(1, barrier(1))  # older: ignored
    h.on_barrier(1, barrier(2))
    assert actions.kinds()[-1] == ("complete", 2)
    assert ("complete", 1) not in actions.kinds()


def test_m_b7_a_marker_stops_capturing_and_aborts_the_checkpoint() -> None:
    h, actions, _ = handler(2)
    h.on_barrier(0, barrier(1))
    h.on_cancellation_marker(1, CancellationMarker(1))
    assert captures(h) == [None, None]
    assert actions.calls[1:] == [("abort", 1, Reason.CANCELLED_UPSTREAM)]
    h.on_barrier(1, barrier(1))
    assert ("complete", 1) not in actions.kinds()


# M-B8: alternating ----------------------------------------------------------------------


def test_m_b8_savepoint_barriers_are_aligned() -> None:
    h, actions, _ = handler(2, timeout_ms=10)
    h.on_barrier(0, barrier(1, SAVEPOINT))
    assert blocked(h) == [True, False]
    assert captures(h) == [None, None]
    assert h.next_deadline_ms() is None  # savepoints never switch to unaligned
    h.on_barrier(1, barrier(1, SAVEPOINT))
    [(_, _, info)] = actions.calls
    assert not info.unaligned
    assert actions.barriers[0].options == SAVEPOINT


def test_m_b8_an_aligned_checkpoint_without_timeout_stays_aligned() -> None:
    h, actions, clock = handler(2, timeout_ms=0)
    h.on_barrier(0, barrier(1, ALIGNED))
    assert blocked(h) == [True, False] and h.next_deadline_ms() is None
    clock.advance(1_000_000)
    h.on_time()
    assert actions.calls == []


def test_m_b8_an_alignment_that_times_out_switches_to_unaligned() -> None:
    h, actions, clock = handler(3, timeout_ms=50)
    h.on_barrier(0, barrier(1, ALIGNED, ts=4_990))
    clock.advance(20)
    h.on_barrier(1, barrier(1, ALIGNED, ts=4_990))
    assert h.next_deadline_ms() == 5_050
    clock.advance(29)
    h.on_time()  # before the deadline: nothing happens
    assert actions.calls == [] and blocked(h) == [True, True, False]
    clock.advance(1)
    h.on_time()
    assert actions.calls == [("trigger", 1, AlignmentInfo(50.0, 10.0, True))]
    assert actions.barriers[0].options.unaligned  # forwarded as unaligned: downstream switches
    assert blocked(h) == [False, False, False]
    assert captures(h) == [None, None, 1]
    assert h.next_deadline_ms() is None
    h.on_barrier(2, barrier(1, ALIGNED))
    assert actions.kinds() == [("trigger", 1), ("complete", 1)]


def test_m_b8_an_unaligned_barrier_during_an_alignment_switches_it_to_unaligned() -> None:
    h, actions, clock = handler(3, timeout_ms=1_000)
    h.on_barrier(0, barrier(1, ALIGNED))
    clock.advance(7)
    h.on_barrier(1, barrier(1, UNALIGNED))  # its upstream task timed out and switched
    assert actions.calls == [("trigger", 1, AlignmentInfo(7.0, 0.0, True))]
    assert blocked(h) == [False, False, False]
    assert captures(h) == [None, None, 1]


def test_m_b8_an_aligned_checkpoint_completing_in_time_is_aligned() -> None:
    h, actions, clock = handler(2, timeout_ms=100)
    h.on_barrier(1, barrier(1, ALIGNED))
    clock.advance(99)
    h.on_barrier(0, barrier(1, ALIGNED))
    assert actions.calls == [("trigger", 1, AlignmentInfo(99.0, 0.0, False))]
    assert h.next_deadline_ms() is None


def test_m_b8_a_timed_out_alignment_whose_missing_channels_closed_completes_its_channel_state() -> (
    None
):
    h, actions, clock = handler(2, timeout_ms=10)
    h.on_barrier(0, barrier(1, ALIGNED))
    clock.advance(10)
    h.on_time()
    h.on_end_of_partition(1)
    assert actions.kinds() == [("trigger", 1), ("complete", 1)]


# rules shared with the aligner -----------------------------------------------------------


def test_m_b4_alternating_a_newer_barrier_while_aligning_aborts_the_alignment_as_subsumed() -> None:
    h, actions, _ = handler(2)
    h.on_barrier(0, barrier(1, SAVEPOINT))
    h.on_barrier(1, barrier(2))
    assert actions.calls[0] == ("abort", 1, Reason.SUBSUMED)
    assert actions.kinds()[1] == ("trigger", 2)
    assert blocked(h) == [False, False]


def test_m_b4_alternating_older_barriers_are_ignored() -> None:
    h, actions, _ = handler(2)
    h.on_barrier(0, barrier(5))
    h.on_barrier(1, barrier(4))
    assert captures(h) == [None, 5]
    assert actions.kinds() == [("trigger", 5)]


def test_m_b5_alternating_a_marker_cancels_an_alignment() -> None:
    h, actions, clock = handler(2, timeout_ms=10)
    h.on_barrier(0, barrier(1, ALIGNED))
    h.on_cancellation_marker(1, CancellationMarker(1))
    assert blocked(h) == [False, False] and h.next_deadline_ms() is None
    clock.advance(100)
    h.on_time()
    assert actions.calls == [("abort", 1, Reason.CANCELLED_UPSTREAM)]


def test_m_b5_alternating_a_newer_marker_while_capturing_aborts_both_and_cancels_the_newer() -> (
    None
):
    h, actions, _ = handler(2)
    h.on_barrier(0, barrier(1))
    h.on_cancellation_marker(0, CancellationMarker(2))
    assert captures(h) == [None, None]
    assert actions.calls[1:] == [
        ("abort", 1, Reason.SUBSUMED),
        ("abort", 2, Reason.CANCELLED_UPSTREAM),
    ]
    h.on_barrier(1, barrier(2))
    assert actions.kinds()[-1] == ("abort", 2)  # cancelled: no snapshot


def test_an_alternating_handler_rejects_a_negative_timeout() -> None:
    with pytest.raises(ValueError, match="aligned_timeout_ms"):
        AlternatingBarrierHandler(2, RecordingActions(), ManualClock(), aligned_timeout_ms=-1)


def test_m_b7_an_unaligned_trigger_reports_no_alignment_time_even_on_a_moving_clock() -> None:
    actions = RecordingActions()
    h = AlternatingBarrierHandler(2, actions, TickingClock(5_000))
    h.on_barrier(0, barrier(1))
    (kind, cid, info) = actions.calls[0]
    assert (kind, cid, info.alignment_ms, info.unaligned) == ("trigger", 1, 0.0, True)

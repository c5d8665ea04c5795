"""CheckpointedInputGate: the input gate with a barrier handler (M-B4, M-B6, M-B7, M-E1), the
gate's blocked channels, and choosing the handler from the checkpointing mode (M-B1)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lockgate.checkpoint.barriers.aligner import BarrierAligner
from lockgate.checkpoint.barriers.alternating import AlternatingBarrierHandler
from lockgate.checkpoint.barriers.base import AlignmentInfo
from lockgate.checkpoint.barriers.factory import create_barrier_handler
from lockgate.checkpoint.barriers.tracker import BarrierTracker
from lockgate.checkpoint.config import CheckpointingMode
from lockgate.checkpoint.types import CheckpointFailureReason as Reason
from lockgate.core import elements as el
from lockgate.core.batch import RowBatch
from lockgate.core.clock import ManualClock
from lockgate.errors import ConfigurationError
from lockgate.runtime.channels import LocalChannel
from lockgate.runtime.checkpointed_input import CheckpointedInputGate
from lockgate.runtime.input_gate import InputGate

ALIGNED = el.CheckpointOptions(el.CheckpointType.CHECKPOINT, unaligned=False)
UNALIGNED = el.CheckpointOptions(el.CheckpointType.CHECKPOINT, unaligned=True)


class RecordingActions:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def trigger_snapshot(self, barrier: el.CheckpointBarrier, info: AlignmentInfo) -> None:
        self.calls.append(("trigger", barrier.checkpoint_id, info.unaligned))

    def abort_checkpoint(self, checkpoint_id: int, reason: Reason) -> None:
        self.calls.append(("abort", checkpoint_id, reason))

    def record_inflight(self, checkpoint_id: int, channel: int, batch: Any) -> None:
        self.calls.append(("inflight", checkpoint_id, channel, batch.rows))

    def channel_state_complete(self, checkpoint_id: int) -> None:
        self.calls.append(("complete", checkpoint_id))


class PausableChannel(LocalChannel):
    def __init__(self) -> None:
        super().__init__(1 << 20)
        self.events: list[str] = []

    def pause(self) -> None:
        self.events.append("pause")

    def resume(self) -> None:
        self.events.append("resume")


def setup(
    n: int,
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE,
    *,
    unaligned: bool = False,
    timeout: int = 0,
    channels: list[LocalChannel] | None = None,
):
    chans = channels or [LocalChannel(1 << 20, name=f"in{i}") for i in range(n)]
    gate = InputGate(list(chans), [0] * n, threading.Event())
    actions = RecordingActions()
    clock = ManualClock(0)
    handler = create_barrier_handler(
        mode,
        unaligned=unaligned,
        aligned_timeout_ms=timeout,
        num_channels=n,
        actions=actions,
        clock=clock,
    )
    return CheckpointedInputGate(gate, handler, actions), chans, actions, clock


def drain(cgate: CheckpointedInputGate) -> list[tuple[int, Any]]:
    out = []
    while (item := cgate.poll()) is not None:
        ch, e = item
        out.append((ch, e.rows if isinstance(e, RowBatch) else e))
    return out


def batch(*rows: int) -> RowBatch:
    return RowBatch(list(rows))


# what poll returns ------------------------------------------------------------------------


def test_barriers_and_markers_go_to_the_handler_and_everything_else_is_returned_in_order_m_e1() -> (
    None
):
    cgate, (c0,), actions, _ = setup(1)
    for e in (
        batch(1),
        el.Watermark(5),
        el.StreamStatus.IDLE,
        el.CheckpointBarrier(1, 0),
        el.CancellationMarker(2),
        batch(2),
        el.END_OF_PARTITION,
    ):
        c0.put(e)
    assert drain(cgate) == [
        (0, [1]),
        (0, el.Watermark(5)),
        (0, el.StreamStatus.IDLE),
        (0, [2]),
        (0, el.END_OF_PARTITION),
    ]
    assert actions.calls == [("trigger", 1, False), ("abort", 2, Reason.CANCELLED_UPSTREAM)]
    assert cgate.finished


# M-B4 / M-B6 through the gate -----------------------------------------------------------------


def test_m_b4_records_behind_a_barrier_wait_in_their_channel_until_the_alignment_completes() -> (
    None
):
    cgate, (c0, c1), actions, _ = setup(2)
    c0.put(el.CheckpointBarrier(1, 0))
    c0.put(batch(10))
    c0.put(batch(11))
    c1.put(batch(20))
    assert drain(cgate) == [(1, [20])]  # channel 0 is blocked: 10 and 11 wait
    assert cgate.gate.blocked == [True, False]
    assert actions.calls == []
    c1.put(el.CheckpointBarrier(1, 0))
    c1.put(batch(21))
    assert drain(cgate) == [(0, [10]), (1, [21]), (0, [11])]
    assert actions.calls == [("trigger", 1, False)]
    assert cgate.gate.blocked == [False, False]


def test_m_b6_an_end_of_partition_goes_to_the_handler_and_is_returned() -> None:
    cgate, (c0, c1), actions, _ = setup(2)
    c0.put(el.CheckpointBarrier(1, 0))
    c0.put(batch(1))
    c1.put(el.END_OF_PARTITION)
    assert drain(cgate) == [(1, el.END_OF_PARTITION), (0, [1])]
    assert actions.calls == [("trigger", 1, False)]


def test_blocking_a_channel_pauses_it_and_releasing_resumes_it_when_the_channel_can() -> None:
    chans = [PausableChannel(), PausableChannel()]
    cgate, _, _, _ = setup(2, channels=list(chans))
    chans[0].put(el.CheckpointBarrier(1, 0))
    drain(cgate)
    assert chans[0].events == ["pause"] and chans[1].events == []
    chans[1].put(el.CheckpointBarrier(1, 0))
    drain(cgate)
    assert chans[0].events == ["pause", "resume"] and chans[1].events == []


def test_the_input_gate_skips_a_blocked_channel_and_keeps_its_elements_in_order() -> None:
    gate = InputGate([LocalChannel(100), LocalChannel(100)], [0, 0], threading.Event())
    gate.channels[0].put(el.Watermark(1))  # type: ignore[attr-defined]
    gate.channels[1].put(el.Watermark(2))  # type: ignore[attr-defined]
    gate.set_blocked(0, True)
    assert gate.poll() == (1, el.Watermark(2))
    assert gate.poll() is None
    gate.set_blocked(0, False)
    assert gate.poll() == (0, el.Watermark(1))


# M-B7 through the gate ----------------------------------------------------------------------


def test_m_b7_batches_of_capturing_channels_are_recorded_as_inflight_before_they_are_returned() -> (
    None
):
    cgate, (c0, c1), actions, _ = setup(2, unaligned=True)
    c0.put(el.CheckpointBarrier(1, 0, UNALIGNED))
    c1.put(batch(20))
    assert cgate.poll() == (1, batch(20))  # the barrier of channel 0 was consumed first
    assert actions.calls == [("trigger", 1, True), ("inflight", 1, 1, [20])]
    c0.put(batch(10))
    c1.put(el.Watermark(3))
    c1.put(el.CheckpointBarrier(1, 0, UNALIGNED))
    c1.put(batch(21))
    assert drain(cgate) == [(0, [10]), (1, el.Watermark(3)), (1, [21])]
    assert actions.calls == [("trigger", 1, True), ("inflight", 1, 1, [20]), ("complete", 1)]
    assert not cgate.capturing


def test_m_b8_on_time_through_the_gate_switches_a_timed_out_alignment_and_releases_the_channel() -> (
    None
):
    cgate, (c0, c1), actions, clock = setup(2, unaligned=True, timeout=100)
    c0.put(el.CheckpointBarrier(1, 0, ALIGNED))
    c0.put(batch(10))
    assert drain(cgate) == []
    assert cgate.next_deadline_ms() == 100
    clock.advance(100)
    cgate.on_time()
    c1.put(batch(20))
    c1.put(el.CheckpointBarrier(1, 0, ALIGNED))
    assert sorted(drain(cgate)) == [(0, [10]), (1, [20])]
    assert actions.calls == [("trigger", 1, True), ("inflight", 1, 1, [20]), ("complete", 1)]


def test_m_b8_a_timeout_handled_by_calling_the_handler_directly_is_seen_at_the_next_poll() -> None:
    cgate, (c0, c1), actions, clock = setup(2, unaligned=True, timeout=100)
    c0.put(el.CheckpointBarrier(1, 0, ALIGNED))
    c0.put(batch(10))
    c1.put(batch(20))
    assert drain(cgate) == [(1, [20])]
    clock.advance(100)
    cgate.handler.on_time()  # the task loop calls the handler itself
    c1.put(batch(21))
    assert sorted(drain(cgate)) == [(0, [10]), (1, [21])]
    assert cgate.gate.blocked == [False, False]
    assert actions.calls == [("trigger", 1, True), ("inflight", 1, 1, [21])]
    assert cgate.capturing


# the hot path ---------------------------------------------------------------------------------


class CountingHandler(BarrierAligner):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.queries = 0

    def is_blocked(self, channel: int) -> bool:
        self.queries += 1
        return super().is_blocked(channel)

    def captures(self, channel: int) -> int | None:
        self.queries += 1
        return super().captures(channel)


def test_with_no_checkpoint_in_progress_batches_do_not_consult_the_handler() -> None:
    chans = [LocalChannel(1 << 20), LocalChannel(1 << 20)]
    gate = InputGate(list(chans), [0, 0], threading.Event())
    actions = RecordingActions()
    handler = CountingHandler(2, actions, ManualClock())
    cgate = CheckpointedInputGate(gate, handler, actions)
    for i in range(100):
        chans[i % 2].put(batch(i))
    assert len(drain(cgate)) == 100
    assert handler.queries == 0
    chans[0].put(el.CheckpointBarrier(1, 0))
    chans[1].put(el.CheckpointBarrier(1, 0))
    drain(cgate)
    queries = handler.queries
    for i in range(100):
        chans[i % 2].put(batch(i))
    assert len(drain(cgate)) == 100
    assert handler.queries == queries  # after the checkpoint: the fast path again
    assert not cgate.capturing and gate.blocked == [False, False]


# M-B1 ------------------------------------------------------------------------------------------


def make(mode: CheckpointingMode, unaligned: bool, timeout: int = 0) -> object:
    return create_barrier_handler(
        mode,
        unaligned=unaligned,
        aligned_timeout_ms=timeout,
        num_channels=2,
        actions=RecordingActions(),
        clock=ManualClock(),
    )


def test_m_b1_at_least_once_uses_the_tracker() -> None:
    assert type(make(CheckpointingMode.AT_LEAST_ONCE, False)) is BarrierTracker


def test_m_b1_exactly_once_uses_the_aligner() -> None:
    assert type(make(CheckpointingMode.EXACTLY_ONCE, False)) is BarrierAligner


def test_m_b1_exactly_once_with_unaligned_checkpoints_uses_the_alternating_handler() -> None:
    h = make(CheckpointingMode.EXACTLY_ONCE, True, timeout=30)
    assert type(h) is AlternatingBarrierHandler
    assert h.aligned_timeout_ms == 30


def test_m_b1_unaligned_with_at_least_once_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="EXACTLY_ONCE"):
        make(CheckpointingMode.AT_LEAST_ONCE, True)


def test_m_b1_an_aligned_timeout_needs_unaligned_checkpoints() -> None:
    with pytest.raises(ConfigurationError, match="unaligned"):
        make(CheckpointingMode.EXACTLY_ONCE, False, timeout=10)
    with pytest.raises(ConfigurationError, match="negative"):
        make(CheckpointingMode.EXACTLY_ONCE, True, timeout=-1)

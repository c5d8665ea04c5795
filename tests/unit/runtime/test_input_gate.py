"""InputGate: round-robin over a subtask's input channels and end-of-partition bookkeeping."""

from __future__ import annotations

import threading

import pytest

from lockgate.core import elements as el
from lockgate.runtime.channels import LocalChannel
from lockgate.runtime.input_gate import InputGate


def gate_of(n: int, input_indexes: list[int] | None = None):
    channels = [LocalChannel(1 << 20, name=f"in{i}") for i in range(n)]
    signal = threading.Event()
    gate = InputGate(channels, input_indexes or [0] * n, signal)
    return gate, channels, signal


def test_the_gate_visits_channels_round_robin_so_no_input_starves_another() -> None:
    gate, channels, _ = gate_of(3)
    for i, ch in enumerate(channels):
        for j in range(3):
            ch.put(el.Watermark(10 * i + j))
    order = [gate.poll() for _ in range(9)]
    assert order == [(i, el.Watermark(10 * i + j)) for j in range(3) for i in range(3)]
    assert gate.poll() is None


def test_a_busy_channel_does_not_starve_a_channel_that_has_one_element() -> None:
    gate, (busy, quiet), _ = gate_of(2)
    for j in range(10):
        busy.put(el.Watermark(j))
    first = gate.poll()
    quiet.put(el.Watermark(100))
    second = gate.poll()
    assert first == (0, el.Watermark(0))
    assert second == (1, el.Watermark(100))


def test_empty_channels_are_skipped_and_an_empty_gate_returns_none() -> None:
    gate, channels, _ = gate_of(3)
    assert gate.poll() is None
    channels[2].put(el.Watermark(1))
    assert gate.poll() == (2, el.Watermark(1))
    assert gate.poll() is None


def test_elements_of_one_channel_come_out_in_order_M_E1() -> None:
    gate, channels, _ = gate_of(2)
    seq = [el.Watermark(1), el.CheckpointBarrier(1, 0), el.Watermark(2), el.END_OF_PARTITION]
    for e in seq:
        channels[1].put(e)
    got = []
    while (item := gate.poll()) is not None:
        got.append(item)
    assert got == [(1, e) for e in seq]


def test_end_of_partition_is_delivered_once_and_closes_only_its_channel() -> None:
    gate, channels, _ = gate_of(2)
    channels[0].put(el.END_OF_PARTITION)
    assert gate.poll() == (0, el.END_OF_PARTITION)
    assert gate.ended == [True, False]
    assert not gate.finished
    channels[1].put(el.Watermark(7))
    assert gate.poll() == (1, el.Watermark(7))
    channels[1].put(el.END_OF_PARTITION)
    assert gate.poll() == (1, el.END_OF_PARTITION)
    assert gate.finished
    assert gate.poll() is None


def test_an_ended_channel_is_not_polled_again() -> None:
    gate, channels, _ = gate_of(2)
    channels[0].put(el.END_OF_PARTITION)
    channels[0].put(el.Watermark(99))  # a protocol violation; the gate must not read past the end
    assert gate.poll() == (0, el.END_OF_PARTITION)
    assert gate.poll() is None
    assert len(channels[0]) == 1


def test_a_gate_without_channels_is_finished_at_once() -> None:
    gate = InputGate([], [], threading.Event())
    assert gate.finished and gate.num_channels == 0 and gate.poll() is None


def test_the_gate_signal_is_set_when_any_channel_receives_an_element() -> None:
    _, channels, signal = gate_of(3)
    assert not signal.is_set()
    channels[1].put(el.Watermark(1))
    assert signal.is_set()


def test_input_indexes_say_which_logical_input_each_channel_feeds() -> None:
    gate, _, _ = gate_of(3, [0, 1, 1])
    assert gate.input_indexes == [0, 1, 1]
    assert gate.num_channels == 3


def test_every_channel_needs_an_input_index() -> None:
    with pytest.raises(ValueError, match="input index"):
        InputGate([LocalChannel(10)], [0, 1], threading.Event())


def test_cancelling_the_gate_cancels_every_channel() -> None:
    gate, channels, _ = gate_of(2)
    gate.cancel()
    for ch in channels:
        with pytest.raises(Exception, match="cancelled"):
            ch.put(el.Watermark(1))

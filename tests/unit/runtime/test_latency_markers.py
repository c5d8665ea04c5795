"""Latency markers (issue 42, section 5): the setting is checked, a source subtask
sends at most one marker per interval behind a batch with the time that batch
started, a task forwards each marker once, and the input gate hands markers to the
task's head operator in channel order without returning them (M-E1: nothing
overtakes anything in a channel)."""

from __future__ import annotations

import pickle
import threading

import pytest

import lockgate as lg
from lockgate.core import elements as el
from lockgate.core.latency import LatencyMarker
from lockgate.errors import ConfigurationError
from lockgate.runtime.channels import LocalChannel
from lockgate.runtime.input_gate import InputGate
from lockgate.runtime.latency import ForwardOnce, MarkerEmitter


@pytest.mark.parametrize("bad", [-1, 1.5, "1000", True, None])
def test_a_bad_latency_tracking_interval_is_refused_naming_the_setting(bad: object) -> None:
    config = lg.ExecutionConfig(latency_tracking_interval_ms=bad)  # type: ignore[arg-type]
    with pytest.raises(
        ConfigurationError, match=r"latency_tracking_interval_ms must be an int >= 0"
    ):
        config.validate()
    with pytest.raises(ConfigurationError, match="needs a positive interval"):
        MarkerEmitter(lg.ManualClock(), 0, "src", 0, lambda m: None)


def test_tracking_is_off_by_default_and_zero_is_valid() -> None:
    config = lg.ExecutionConfig()
    assert config.latency_tracking_interval_ms == 0
    config.validate()


def test_a_source_sends_at_most_one_marker_per_interval_stamped_before_its_batch() -> None:
    clock = lg.ManualClock(start_ms=5_000)
    sent: list[LatencyMarker] = []
    emitter = MarkerEmitter(clock, 100, "numbers", 3, sent.append)
    stamps = []
    for _ in range(25):  # a batch every 10 ms for 250 ms
        stamp = emitter.due_stamp()
        clock.advance(10)  # the batch goes through the chain meanwhile
        if stamp is not None:
            emitter.emit_after(stamp)
            stamps.append(stamp)
    assert stamps == [5_000, 5_100, 5_200]
    assert sent == [
        LatencyMarker(5_000, "numbers", 3, 1),
        LatencyMarker(5_100, "numbers", 3, 2),
        LatencyMarker(5_200, "numbers", 3, 3),
    ]
    assert pickle.loads(pickle.dumps(sent[0])) == sent[0]  # crosses the network as is


def test_a_task_forwards_each_marker_once_and_every_other_element_as_is() -> None:
    out: list[object] = []
    forward = ForwardOnce(out.append)
    a1, a2 = LatencyMarker(1, "src", 0, 1), LatencyMarker(2, "src", 0, 2)
    b1 = LatencyMarker(1, "src", 1, 1)
    for element in (a1, a1, b1, el.Watermark(7), a2, a1, el.Watermark(7), b1):
        forward(element)
    assert out == [a1, b1, el.Watermark(7), a2, el.Watermark(7)]


def test_the_input_gate_hands_markers_to_the_head_in_channel_order_M_E1() -> None:
    channels = [LocalChannel(1 << 20, name=f"in{i}") for i in range(2)]
    gate = InputGate(channels, [0, 0], threading.Event())
    seen: list[object] = []
    gate.on_latency_marker = lambda m: seen.append(("marker", m.seq))
    m1, m2 = LatencyMarker(0, "s", 0, 1), LatencyMarker(0, "s", 0, 2)
    for element in (el.Watermark(1), m1, m2, el.Watermark(2)):
        channels[0].put(element)
    channels[1].put(m1)  # a channel holding only a marker
    while (item := gate.poll()) is not None:
        seen.append(item)
    # the markers behind watermark 1 were handed over only after it was returned, and
    # polling went on past them: they were never returned themselves
    assert seen == [
        (0, el.Watermark(1)),
        ("marker", 1),
        ("marker", 1),
        ("marker", 2),
        (0, el.Watermark(2)),
    ]


def test_without_a_receiver_the_gate_drops_markers() -> None:
    channel = LocalChannel(1 << 20)
    gate = InputGate([channel], [0], threading.Event())
    channel.put(LatencyMarker(0, "s", 0, 1))
    channel.put(el.Watermark(3))
    assert gate.poll() == (0, el.Watermark(3))
    assert gate.poll() is None

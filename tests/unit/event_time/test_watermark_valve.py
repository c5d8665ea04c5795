"""The status/watermark valve (M-W3, M-W4) and the multi-input watermark combiner (M-W5).

Each unit test checks one clause of a rule; the property tests compare the valve and the
combiner with reference models written from the rule text (the model keeps sets and
recomputes everything from scratch after each event).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.core.elements import MAX_WATERMARK, MIN_WATERMARK, StreamStatus, Watermark
from lockgate.errors import ConfigurationError, CorruptStreamError
from lockgate.time.valve import MultiInputWatermark, StatusWatermarkValve

IDLE = StreamStatus.IDLE
ACTIVE = StreamStatus.ACTIVE


def wm(ts: int) -> Watermark:
    return Watermark(ts)


def valve_at(*watermarks: int) -> StatusWatermarkValve:
    """A valve whose channels received ``watermarks`` in order (channel i gets the i-th)."""
    valve = StatusWatermarkValve(len(watermarks))
    for i, ts in enumerate(watermarks):
        valve.input_watermark(ts, i)
    return valve


# -- M-W3: watermarks ---------------------------------------------------------------------


def test_a_new_valve_has_every_channel_active_aligned_at_min_watermark() -> None:
    """M-W3: per channel a watermark, a status and an aligned flag."""
    valve = StatusWatermarkValve(3)
    assert valve.last_output_watermark == MIN_WATERMARK and not valve.is_idle
    for i in range(3):
        assert valve.channel_watermark(i) == MIN_WATERMARK
        assert valve.channel_status(i) is ACTIVE
        assert valve.is_channel_aligned(i)


def test_the_output_watermark_is_the_minimum_over_aligned_channels() -> None:
    """M-W3."""
    valve = StatusWatermarkValve(3)
    assert valve.input_watermark(10, 0) == []
    assert valve.input_watermark(7, 1) == []
    assert valve.input_watermark(12, 2) == [wm(7)]
    assert valve.input_watermark(9, 1) == [wm(9)]
    assert valve.input_watermark(20, 1) == [wm(10)]
    assert valve.last_output_watermark == 10


def test_the_output_watermark_is_emitted_only_when_it_advances() -> None:
    """M-W3: a channel above the minimum moving further emits nothing."""
    valve = valve_at(5, 8)
    assert valve.last_output_watermark == 5
    assert valve.input_watermark(9, 1) == []
    assert valve.input_watermark(30, 1) == []
    assert valve.last_output_watermark == 5


def test_a_single_channel_valve_forwards_each_advancing_watermark() -> None:
    """M-W3 with one channel: the minimum is that channel's watermark."""
    valve = StatusWatermarkValve(1)
    assert valve.input_watermark(3, 0) == [wm(3)]
    assert valve.input_watermark(4, 0) == [wm(4)]


def test_a_watermark_that_does_not_advance_its_channel_is_ignored() -> None:
    """M-W3: equal or lower watermarks change neither the channel nor the output."""
    valve = valve_at(10, 20)
    assert valve.input_watermark(10, 0) == []
    assert valve.input_watermark(4, 0) == []
    assert valve.channel_watermark(0) == 10
    assert valve.input_watermark(15, 1) == []
    assert valve.channel_watermark(1) == 20


def test_a_watermark_on_an_idle_channel_is_ignored() -> None:
    """M-W3: while channel 1 is idle its watermarks change nothing."""
    valve = valve_at(10, 5)
    assert valve.input_status(IDLE, 1) == [wm(10)]
    assert valve.input_watermark(30, 1) == []
    assert valve.channel_watermark(1) == 5
    assert valve.input_status(ACTIVE, 1) == []
    assert not valve.is_channel_aligned(1)


def test_a_watermark_is_ignored_while_the_valve_is_idle() -> None:
    """M-W3: once every channel is idle the valve takes no watermark."""
    valve = valve_at(4, 6)
    valve.input_status(IDLE, 0)
    valve.input_status(IDLE, 1)
    assert valve.is_idle
    assert valve.input_watermark(50, 0) == []
    assert valve.input_watermark(50, 1) == []
    assert valve.last_output_watermark == 6
    assert [valve.channel_watermark(i) for i in range(2)] == [4, 6]


def test_a_resumed_channel_behind_the_output_does_not_hold_it_back() -> None:
    """M-W3/M-W4: an unaligned active channel is left out of the minimum."""
    valve = valve_at(10, 5)
    valve.input_status(IDLE, 1)  # output 10
    valve.input_status(ACTIVE, 1)  # 5 < 10: unaligned
    assert valve.input_watermark(7, 1) == []  # still behind: unaligned, no output
    assert not valve.is_channel_aligned(1)
    assert valve.input_watermark(15, 0) == [wm(15)]


def test_a_channel_whose_watermark_catches_up_with_the_last_output_is_aligned_again() -> None:
    """M-W3: reaching the last output (equal is enough) realigns the channel, which then
    holds the output back again."""
    valve = valve_at(10, 5)
    valve.input_status(IDLE, 1)
    valve.input_status(ACTIVE, 1)
    assert valve.input_watermark(10, 1) == []  # == last output: aligned, no advance
    assert valve.is_channel_aligned(1)
    assert valve.input_watermark(30, 0) == []  # channel 1 at 10 holds the output
    assert valve.holding_back() == 1
    assert valve.input_watermark(12, 1) == [wm(12)]


# -- M-W4: statuses -----------------------------------------------------------------------


def test_a_channel_going_idle_becomes_unaligned() -> None:
    """M-W4."""
    valve = valve_at(3, 3)
    valve.input_status(IDLE, 0)
    assert valve.channel_status(0) is IDLE and not valve.is_channel_aligned(0)
    assert not valve.is_idle


def test_when_all_channels_go_idle_the_valve_emits_the_maximum_watermark_then_idle() -> None:
    """M-W4: the last channel going idle held the minimum: flush the maximum, then IDLE."""
    valve = valve_at(5, 9, 2)
    assert valve.input_status(IDLE, 1) == []  # 9 did not hold the minimum 2
    assert valve.input_status(IDLE, 0) == []  # neither did 5
    assert valve.input_status(IDLE, 2) == [wm(9), IDLE]
    assert valve.is_idle and valve.last_output_watermark == 9


def test_when_all_channels_go_idle_no_watermark_is_emitted_unless_the_maximum_advances() -> None:
    """M-W4: the flush is emitted only if it advances."""
    valve = valve_at(5, 9)
    assert valve.input_status(IDLE, 0) == [wm(9)]
    assert valve.input_status(IDLE, 1) == [IDLE]


def test_when_all_channels_go_idle_the_maximum_is_flushed_even_if_the_last_did_not_hold_it() -> (
    None
):
    """M-W4, decided: the flush is checked whenever the valve goes idle. Here channel 2
    resumed ahead of the output (aligned, but a resume emits no watermark) and goes idle
    again: Flink's "held the minimum" shortcut would leave the output at 20."""
    valve = valve_at(10, 10, 50)  # output 10
    valve.input_status(IDLE, 2)
    valve.input_status(IDLE, 1)
    assert valve.input_watermark(20, 0) == [wm(20)]
    valve.input_status(ACTIVE, 1)  # 10 < 20: unaligned
    assert valve.input_status(IDLE, 0) == []  # no aligned channel left
    assert valve.input_status(ACTIVE, 2) == []  # 50 >= 20: aligned, no watermark
    assert valve.input_status(IDLE, 1) == []
    assert valve.input_status(IDLE, 2) == [wm(50), IDLE]


def test_an_idle_channel_holding_the_minimum_lets_the_output_advance_to_the_aligned_rest() -> None:
    """M-W4: other channels active, the idle channel held the minimum: recompute."""
    valve = valve_at(4, 8, 6)
    assert valve.last_output_watermark == 4
    assert valve.input_status(IDLE, 0) == [wm(6)]
    assert valve.holding_back() == 2


def test_an_idle_channel_not_holding_the_minimum_changes_no_output() -> None:
    """M-W4: other channels active and the idle channel was above the minimum."""
    valve = valve_at(4, 8, 6)
    assert valve.input_status(IDLE, 1) == []
    assert valve.last_output_watermark == 4


def test_an_idle_channel_holding_the_minimum_with_no_aligned_rest_emits_nothing() -> None:
    """M-W4: the recompute runs over aligned channels only; none are left."""
    valve = valve_at(10, 5)
    valve.input_status(IDLE, 1)
    valve.input_status(ACTIVE, 1)  # unaligned (5 < 10)
    assert valve.input_status(IDLE, 0) == []
    assert valve.holding_back() is None and not valve.is_idle


def test_a_channel_going_active_is_aligned_again_if_its_watermark_reaches_the_last_output() -> None:
    """M-W4: watermark >= last output (here equal) realigns on resume."""
    valve = valve_at(10, 10)
    valve.input_status(IDLE, 1)
    assert valve.input_status(ACTIVE, 1) == []
    assert valve.is_channel_aligned(1)
    assert valve.input_watermark(11, 0) == []  # channel 1 at 10 holds it back


def test_a_channel_going_active_behind_the_last_output_stays_unaligned() -> None:
    """M-W4."""
    valve = valve_at(10, 3)
    valve.input_status(IDLE, 1)
    valve.input_status(ACTIVE, 1)
    assert not valve.is_channel_aligned(1)


def test_a_channel_going_active_in_an_idle_valve_emits_active_once() -> None:
    """M-W4: only the first resume of an idle valve emits ACTIVE; no watermark is emitted."""
    valve = valve_at(1, 2)
    valve.input_status(IDLE, 0)
    valve.input_status(IDLE, 1)
    assert valve.input_status(ACTIVE, 1) == [ACTIVE]
    assert valve.input_status(ACTIVE, 0) == []
    assert not valve.is_idle


def test_a_status_the_channel_already_has_is_ignored() -> None:
    """M-W4 applies to status changes only."""
    valve = StatusWatermarkValve(1)
    assert valve.input_status(ACTIVE, 0) == []
    assert valve.input_status(IDLE, 0) == [IDLE]
    assert valve.input_status(IDLE, 0) == []


# -- finished channels (decided: a finished channel sent MAX_WATERMARK) -----------------------


def test_a_finished_channel_counts_as_having_sent_max_watermark() -> None:
    """M-W2: a finished input is one that sent MAX; it no longer holds the output back."""
    valve = valve_at(4, 9)
    assert valve.channel_finished(0) == [wm(9)]
    assert valve.channel_watermark(0) == MAX_WATERMARK and valve.is_channel_finished(0)
    assert valve.channel_finished(1) == [wm(MAX_WATERMARK)]


def test_finishing_a_channel_that_already_sent_max_watermark_emits_nothing() -> None:
    valve = valve_at(MAX_WATERMARK, 3)
    assert valve.channel_finished(0) == []
    assert valve.last_output_watermark == 3


def test_a_finished_channel_of_an_idle_valve_emits_active_then_max_watermark() -> None:
    """Decided: an idle channel that ends resumes first (a source that ends sends MAX, not
    IDLE); idle channels do not hold the output back, so it reaches MAX."""
    valve = valve_at(4, 9)
    valve.input_status(IDLE, 0)
    valve.input_status(IDLE, 1)
    assert valve.channel_finished(0) == [ACTIVE, wm(MAX_WATERMARK)]
    assert valve.holding_back() is None


def test_a_finished_channel_rejects_further_elements() -> None:
    valve = StatusWatermarkValve(2)
    valve.channel_finished(1)
    for feed in (
        lambda: valve.input_watermark(5, 1),
        lambda: valve.input_status(IDLE, 1),
        lambda: valve.channel_finished(1),
    ):
        with pytest.raises(CorruptStreamError, match="channel 1"):
            feed()


# -- holding_back (the watermark diagnostic) --------------------------------------------------


def test_holding_back_names_the_aligned_channel_with_the_lowest_watermark() -> None:
    valve = valve_at(7, 3, 3)
    assert valve.holding_back() == 1  # lowest index among equals
    valve.input_status(IDLE, 1)
    assert valve.holding_back() == 2


def test_holding_back_is_none_when_every_channel_is_idle() -> None:
    valve = valve_at(1)
    valve.input_status(IDLE, 0)
    assert valve.holding_back() is None


# -- bad arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -1, True, "2", 2.0, None])
def test_a_valve_rejects_a_channel_count_that_is_not_a_positive_int(n: Any) -> None:
    with pytest.raises(ConfigurationError, match="num_channels"):
        StatusWatermarkValve(n)
    with pytest.raises(ConfigurationError, match="num_inputs"):
        MultiInputWatermark(n)


@pytest.mark.parametrize("index", [-1, 2, True, "0", 0.0])
def test_a_valve_rejects_a_channel_index_out_of_range(index: Any) -> None:
    valve = StatusWatermarkValve(2)
    for feed in (
        lambda: valve.input_watermark(1, index),
        lambda: valve.input_status(IDLE, index),
        lambda: valve.channel_finished(index),
        lambda: valve.channel_watermark(index),
    ):
        with pytest.raises(ConfigurationError, match="channel index"):
            feed()
    combiner = MultiInputWatermark(2)
    with pytest.raises(ConfigurationError, match="input index"):
        combiner.input_watermark(1, index)


@pytest.mark.parametrize(
    "ts", [1.5, "3", True, None, MAX_WATERMARK + 1, MIN_WATERMARK - 1, Watermark(3)]
)
def test_a_watermark_timestamp_must_be_an_int_of_milliseconds_in_range(ts: Any) -> None:
    with pytest.raises(ConfigurationError, match="watermark timestamp"):
        StatusWatermarkValve(1).input_watermark(ts, 0)
    with pytest.raises(ConfigurationError, match="watermark timestamp"):
        MultiInputWatermark(1).input_watermark(ts, 0)


@pytest.mark.parametrize("status", ["idle", None, 0])
def test_a_status_must_be_a_stream_status(status: Any) -> None:
    with pytest.raises(ConfigurationError, match="stream status"):
        StatusWatermarkValve(1).input_status(status, 0)
    with pytest.raises(ConfigurationError, match="stream status"):
        MultiInputWatermark(1).input_status(status, 0)


# -- M-W5: operators with several inputs -----------------------------------------------------


def test_a_multi_input_operator_processes_the_minimum_of_its_inputs_watermarks() -> None:
    """M-W5."""
    combiner = MultiInputWatermark(3)
    assert combiner.input_watermark(10, 0) is None
    assert combiner.input_watermark(4, 1) is None
    assert combiner.input_watermark(6, 2) == 4
    assert combiner.input_watermark(8, 1) == 6
    assert combiner.combined_watermark == 6


def test_a_multi_input_operator_processes_a_watermark_only_when_the_minimum_advances() -> None:
    """M-W5: a higher watermark on an input above the minimum, or a repeated one, does not
    reach the operator."""
    combiner = MultiInputWatermark(2)
    combiner.input_watermark(5, 0)
    assert combiner.input_watermark(9, 1) == 5
    assert combiner.input_watermark(12, 1) is None
    assert combiner.input_watermark(5, 0) is None
    assert combiner.input_watermark(3, 0) is None  # a regression is ignored
    assert combiner.input_watermark_of(0) == 5
    assert combiner.input_watermark(20, 0) == 12


def test_an_idle_input_is_excluded_from_the_minimum() -> None:
    """M-W5 with idleness: the input that held the minimum going idle releases it."""
    combiner = MultiInputWatermark(2)
    combiner.input_watermark(3, 0)
    combiner.input_watermark(9, 1)
    assert combiner.input_status(IDLE, 0) == [wm(9)]
    assert combiner.input_watermark(11, 1) == 11
    assert combiner.holding_back() == 1


def test_when_all_inputs_are_idle_the_combined_watermark_holds_and_idle_is_reported() -> None:
    """M-W5, decided: no flush to the maximum when every input is idle."""
    combiner = MultiInputWatermark(2)
    combiner.input_watermark(30, 0)
    combiner.input_watermark(10, 1)
    assert combiner.input_status(IDLE, 0) == []  # input 0 did not hold the minimum
    assert combiner.input_status(IDLE, 1) == [IDLE]
    assert combiner.is_idle and combiner.combined_watermark == 10
    assert combiner.holding_back() is None


def test_a_resuming_input_reports_active_and_holds_the_minimum_again() -> None:
    """M-W5: an active input takes part in the minimum again."""
    combiner = MultiInputWatermark(2)
    combiner.input_watermark(2, 0)
    combiner.input_watermark(8, 1)
    combiner.input_status(IDLE, 0)  # combined 8
    assert combiner.input_status(ACTIVE, 0) == []
    assert combiner.input_watermark(12, 1) is None  # input 0 at 2 holds it back
    assert combiner.input_watermark(10, 0) == 10


def test_a_watermark_on_an_idle_input_counts_once_the_input_is_active() -> None:
    """M-W5, decided: recorded while idle, processed after the resume."""
    combiner = MultiInputWatermark(2)
    combiner.input_status(IDLE, 0)
    combiner.input_status(IDLE, 1)
    assert combiner.input_watermark(7, 0) is None
    assert combiner.input_status(ACTIVE, 0) == [ACTIVE, wm(7)]
    assert combiner.input_status(ACTIVE, 0) == []


# -- property: the valve against a reference model --------------------------------------------


@dataclass
class ReferenceValve:
    """M-W3/M-W4 (and the finish decision) read literally, with sets; every minimum,
    maximum and idleness is recomputed from scratch."""

    n: int
    wms: list[int] = field(default_factory=list)
    idle: set[int] = field(default_factory=set)
    aligned: set[int] = field(default_factory=set)
    finished: set[int] = field(default_factory=set)
    last: int = MIN_WATERMARK

    def __post_init__(self) -> None:
        self.wms = [MIN_WATERMARK] * self.n
        self.aligned = set(range(self.n))

    def valve_idle(self) -> bool:
        return self.idle == set(range(self.n))

    def emit_if_advances(self, ts: int | None) -> list[Any]:
        if ts is None or ts <= self.last:
            return []
        self.last = ts
        return [Watermark(ts)]

    def min_aligned(self) -> int | None:
        return min((self.wms[i] for i in self.aligned), default=None)

    def watermark(self, ch: int, ts: int) -> list[Any]:
        if self.valve_idle() or ch in self.idle or ts <= self.wms[ch]:
            return []
        self.wms[ch] = ts
        if ts >= self.last:
            self.aligned.add(ch)
        return self.emit_if_advances(self.min_aligned())

    def status(self, ch: int, status: StreamStatus) -> list[Any]:
        if status is IDLE and ch not in self.idle:
            held_minimum = self.wms[ch] == self.last
            self.idle.add(ch)
            self.aligned.discard(ch)
            if self.valve_idle():
                return self.emit_if_advances(max(self.wms)) + [IDLE]
            return self.emit_if_advances(self.min_aligned()) if held_minimum else []
        if status is ACTIVE and ch in self.idle:
            was_idle = self.valve_idle()
            self.idle.discard(ch)
            if self.wms[ch] >= self.last:
                self.aligned.add(ch)
            return [ACTIVE] if was_idle else []
        return []

    def finish(self, ch: int) -> list[Any]:
        out = self.status(ch, ACTIVE)
        self.wms[ch] = MAX_WATERMARK
        self.aligned.add(ch)
        self.finished.add(ch)
        return out + self.emit_if_advances(self.min_aligned())


TIMESTAMPS = st.one_of(st.integers(-3, 25), st.sampled_from([MIN_WATERMARK, MAX_WATERMARK]))


def valve_events(n: int) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    channel = st.integers(0, n - 1)
    event = st.one_of(
        st.tuples(st.just("wm"), channel, TIMESTAMPS),
        st.tuples(st.just("wm"), channel, TIMESTAMPS),
        st.tuples(st.just("status"), channel, st.sampled_from([IDLE, ACTIVE])),
        st.tuples(st.just("finish"), channel),
    )
    return st.lists(event, max_size=60)


@st.composite
def valve_scenarios(draw: Any) -> tuple[int, list[tuple[Any, ...]]]:
    n = draw(st.integers(1, 4))
    return n, draw(valve_events(n))


@settings(max_examples=400, deadline=None)
@given(valve_scenarios())
def test_the_valve_matches_the_reference_model_on_random_event_sequences(
    scenario: tuple[int, list[tuple[Any, ...]]],
) -> None:
    """M-W3, M-W4: same outputs and same per-channel state after every event; plus the
    guarantees: output watermarks strictly increase and never exceed a channel's watermark,
    statuses alternate starting with IDLE, and no watermark leaves an idle valve."""
    n, events = scenario
    valve, model = StatusWatermarkValve(n), ReferenceValve(n)
    emitted: list[Any] = []
    for kind, ch, *args in events:
        if ch in model.finished:
            with pytest.raises(CorruptStreamError):
                getattr(
                    valve,
                    {
                        "wm": "input_watermark",
                        "status": "input_status",
                        "finish": "channel_finished",
                    }[kind],
                )(*args, ch)
            continue
        if kind == "wm":
            got, expected = valve.input_watermark(args[0], ch), model.watermark(ch, args[0])
        elif kind == "status":
            got, expected = valve.input_status(args[0], ch), model.status(ch, args[0])
        else:
            got, expected = valve.channel_finished(ch), model.finish(ch)
        assert got == expected, (kind, ch, args)
        for element in got:
            if isinstance(element, Watermark):
                assert element.timestamp <= max(model.wms)
        emitted.extend(got)
        assert valve.last_output_watermark == model.last
        assert valve.is_idle == model.valve_idle()
        for i in range(n):
            assert valve.channel_watermark(i) == model.wms[i]
            assert valve.is_channel_aligned(i) == (i in model.aligned)
            assert (valve.channel_status(i) is IDLE) == (i in model.idle)
        low = model.min_aligned()
        expected_holder = (
            None
            if low is None or low == MAX_WATERMARK
            else min(i for i in model.aligned if model.wms[i] == low)
        )
        assert valve.holding_back() == expected_holder
    timestamps = [e.timestamp for e in emitted if isinstance(e, Watermark)]
    assert timestamps == sorted(set(timestamps))
    statuses = [e for e in emitted if isinstance(e, StreamStatus)]
    assert statuses == [IDLE, ACTIVE] * (len(statuses) // 2) + [IDLE] * (len(statuses) % 2)
    idle = False
    for element in emitted:
        if isinstance(element, StreamStatus):
            idle = element is IDLE
        else:
            assert not idle, "a watermark left an idle valve"
    if len(model.finished) == n:
        assert valve.last_output_watermark == MAX_WATERMARK


# -- property: the combiner against its definition --------------------------------------------


@st.composite
def combiner_scenarios(draw: Any) -> tuple[int, list[tuple[Any, ...]]]:
    n = draw(st.integers(1, 4))
    inp = st.integers(0, n - 1)
    event = st.one_of(
        st.tuples(st.just("wm"), inp, TIMESTAMPS),
        st.tuples(st.just("status"), inp, st.sampled_from([IDLE, ACTIVE])),
    )
    return n, draw(st.lists(event, max_size=60))


@settings(max_examples=300, deadline=None)
@given(combiner_scenarios())
def test_the_combiner_processes_the_running_maximum_of_the_minimum_over_active_inputs(
    scenario: tuple[int, list[tuple[Any, ...]]],
) -> None:
    """M-W5 from scratch: after each event, the combined watermark is the largest minimum
    over the active inputs seen at any point so far (each input at the highest watermark it
    sent), and a watermark is handed out exactly when that value grew."""
    n, events = scenario
    combiner = MultiInputWatermark(n)
    sent: list[list[int]] = [[MIN_WATERMARK] for _ in range(n)]
    idle = [False] * n
    minima = [MIN_WATERMARK]
    for kind, i, arg in events:
        before = max(minima)
        was_idle = all(idle)
        if kind == "wm":
            got: Any = combiner.input_watermark(arg, i)
            sent[i].append(arg)
        else:
            got = combiner.input_status(arg, i)
            idle[i] = arg is IDLE
        active = [max(sent[j]) for j in range(n) if not idle[j]]
        if active:
            minima.append(min(active))
        after = max(minima)
        processed = after if after > before else None
        assert combiner.combined_watermark == after
        assert combiner.is_idle == all(idle)
        if kind == "wm":
            assert got == processed
        else:
            expected: list[Any] = [ACTIVE] if was_idle and not all(idle) else []
            expected += [wm(processed)] if processed is not None else []
            expected += [IDLE] if all(idle) and not was_idle else []
            assert got == expected

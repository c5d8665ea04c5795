"""M-W1 / M-W2: per-split watermarks combined by the multiplexer, and the source-side rules."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.core.batch import RowBatch
from lockgate.core.clock import ManualClock
from lockgate.core.elements import MAX_WATERMARK, MIN_WATERMARK
from lockgate.errors import ConfigurationError
from lockgate.time.watermark_generators import PunctuatedWatermarks
from lockgate.time.watermark_output import PerSplitWatermarks, WatermarkOutputMultiplexer
from lockgate.time.watermark_strategy import WatermarkStrategy


class Recorder:
    def __init__(self) -> None:
        self.log: list[object] = []

    def emit_watermark(self, timestamp: int) -> None:
        self.log.append(("wm", timestamp))

    def mark_idle(self) -> None:
        self.log.append("idle")

    def mark_active(self) -> None:
        self.log.append("active")

    @property
    def watermarks(self) -> list[int]:
        return [e[1] for e in self.log if isinstance(e, tuple)]


def mux_with(*splits: str) -> tuple[WatermarkOutputMultiplexer, Recorder]:
    out = Recorder()
    mux = WatermarkOutputMultiplexer(out)
    for s in splits:
        mux.register(s)
    return mux, out


# -- the combined watermark ------------------------------------------------------------------


def test_one_lagging_split_holds_back_only_the_combined_watermark_M_W1() -> None:
    mux, out = mux_with("fast", "slow")
    mux.immediate_output("fast").emit_watermark(100)
    assert out.log == []  # "slow" is still at MIN
    mux.immediate_output("slow").emit_watermark(10)
    mux.immediate_output("fast").emit_watermark(200)
    assert out.watermarks == [10]
    assert mux.split_watermark("fast") == 200  # the fast split itself is not held back
    mux.immediate_output("slow").emit_watermark(150)
    assert out.watermarks == [10, 150]
    assert mux.current_watermark == 150


def test_the_combined_watermark_is_emitted_only_when_it_advances_M_W1() -> None:
    mux, out = mux_with("a")
    for wm in (5, 5, 3, 7, 7):
        mux.immediate_output("a").emit_watermark(wm)
    assert out.watermarks == [5, 7]
    assert mux.split_watermark("a") == 7


def test_a_new_split_holds_back_further_progress_but_the_combined_never_goes_back() -> None:
    mux, out = mux_with("a")
    mux.immediate_output("a").emit_watermark(50)
    mux.register("b")
    mux.immediate_output("a").emit_watermark(90)
    mux.immediate_output("b").emit_watermark(20)
    assert out.watermarks == [50]
    mux.immediate_output("b").emit_watermark(70)
    assert out.watermarks == [50, 70]


def test_an_idle_split_is_left_out_of_the_minimum_M_W2() -> None:
    mux, out = mux_with("a", "b")
    mux.immediate_output("a").emit_watermark(100)
    mux.immediate_output("b").emit_watermark(10)
    mux.immediate_output("b").mark_idle()
    assert out.log == [("wm", 10), ("wm", 100)]
    assert not mux.is_idle and mux.split_is_idle("b")


def test_a_split_back_from_idleness_behind_the_combined_does_not_pull_it_back_M_W2() -> None:
    mux, out = mux_with("a", "b")
    mux.immediate_output("b").mark_idle()
    mux.immediate_output("a").emit_watermark(100)
    mux.immediate_output("b").emit_watermark(40)  # active again, behind
    mux.immediate_output("a").emit_watermark(300)  # now held back by b
    assert out.watermarks == [100]
    mux.immediate_output("b").emit_watermark(250)
    assert out.watermarks == [100, 250]


def test_when_every_split_is_idle_the_combined_output_is_idle_once_M_W2() -> None:
    mux, out = mux_with("a", "b")
    mux.immediate_output("a").emit_watermark(5)
    mux.immediate_output("a").mark_idle()
    mux.immediate_output("b").mark_idle()
    mux.immediate_output("b").mark_idle()
    mux.on_periodic_emit()
    assert out.log == ["idle"]
    assert mux.is_idle


def test_a_split_turning_active_makes_the_combined_output_active_before_its_watermark_M_W2() -> (
    None
):
    mux, out = mux_with("a")
    mux.immediate_output("a").mark_idle()
    mux.immediate_output("a").emit_watermark(8)
    assert out.log == ["idle", "active", ("wm", 8)]
    mux.immediate_output("a").mark_idle()
    mux.immediate_output("a").mark_active()
    assert out.log[-2:] == ["idle", "active"]
    assert not mux.is_idle


def test_unregistering_the_lagging_split_advances_the_combined_watermark_at_once() -> None:
    mux, out = mux_with("a", "b")
    mux.deferred_output("a").emit_watermark(100)
    mux.deferred_output("b").emit_watermark(10)
    mux.on_periodic_emit()
    assert mux.unregister("b") is True
    assert out.watermarks == [10, 100]
    assert mux.split_ids == ["a"]


def test_with_every_split_finished_and_none_left_the_combined_output_is_idle_not_max_M_W2() -> None:
    mux, out = mux_with("a")
    mux.immediate_output("a").emit_watermark(3)
    mux.unregister("a")
    assert out.log == [("wm", 3), "idle"]
    mux.register("b")  # a split assigned later makes it active again
    assert out.log[-1] == "active"


def test_unregistering_an_unknown_split_returns_false_and_changes_nothing() -> None:
    mux, out = mux_with("a")
    assert mux.unregister("zzz") is False
    assert out.log == [] and mux.split_ids == ["a"]


def test_outputs_of_an_unregistered_split_are_ignored() -> None:
    mux, out = mux_with("a", "b")
    stale = mux.immediate_output("b")
    mux.unregister("b")
    stale.emit_watermark(5)
    stale.mark_idle()
    stale.mark_active()
    mux.immediate_output("a").emit_watermark(7)
    assert out.log == [("wm", 7)]
    mux.immediate_output("a").mark_idle()
    stale_deferred = mux.deferred_output("a")
    mux.unregister("a")
    stale_deferred.emit_watermark(9)  # must not wake the idle output
    stale_deferred.mark_active()
    assert out.log == [("wm", 7), "idle"]


def test_registering_a_split_twice_or_using_an_unknown_one_is_a_configuration_error() -> None:
    mux, _ = mux_with("a")
    with pytest.raises(ConfigurationError, match="already registered"):
        mux.register("a")
    with pytest.raises(ConfigurationError, match="'nope' is not registered"):
        mux.immediate_output("nope")
    with pytest.raises(ConfigurationError, match="not registered"):
        mux.deferred_output("nope")


# -- deferred vs immediate -------------------------------------------------------------------


def test_deferred_watermarks_take_effect_at_the_next_periodic_emit() -> None:
    mux, out = mux_with("a", "b")
    mux.deferred_output("a").emit_watermark(30)
    mux.deferred_output("b").emit_watermark(20)
    assert out.log == []
    mux.on_periodic_emit()
    assert out.watermarks == [20]


def test_deferred_idleness_takes_effect_at_the_next_periodic_emit_M_W2() -> None:
    mux, out = mux_with("a", "b")
    mux.deferred_output("a").emit_watermark(30)
    mux.deferred_output("b").emit_watermark(20)
    mux.on_periodic_emit()
    mux.deferred_output("b").mark_idle()
    assert out.watermarks == [20]
    mux.on_periodic_emit()
    assert out.watermarks == [20, 30]


def test_deferred_activation_of_an_idle_combined_output_is_immediate_M_W2() -> None:
    mux, out = mux_with("a")
    mux.immediate_output("a").mark_idle()
    mux.deferred_output("a").mark_active()
    assert out.log == ["idle", "active"]  # before the records that follow
    mux.deferred_output("a").mark_idle()
    mux.deferred_output("a").emit_watermark(9)  # idle -> active via a watermark
    assert out.log == ["idle", "active"]
    mux.on_periodic_emit()
    assert out.log == ["idle", "active", ("wm", 9)]


# -- end of the source (M-W2) ----------------------------------------------------------------


def test_a_finished_source_sends_max_watermark_not_idle_M_W2() -> None:
    mux, out = mux_with("a")
    mux.immediate_output("a").emit_watermark(4)
    mux.finish()
    assert out.log == [("wm", 4), ("wm", MAX_WATERMARK)]
    assert mux.current_watermark == MAX_WATERMARK and mux.is_finished


def test_an_idle_source_that_finishes_marks_active_then_sends_max_M_W2() -> None:
    mux, out = mux_with("a")
    mux.immediate_output("a").mark_idle()
    mux.finish()
    assert out.log == ["idle", "active", ("wm", MAX_WATERMARK)]
    assert not mux.is_idle


def test_after_finishing_nothing_more_is_emitted_and_no_split_can_be_added() -> None:
    mux, out = mux_with("a")
    mux.finish()
    mux.finish()
    mux.immediate_output("a").mark_idle()
    mux.on_periodic_emit()
    mux.unregister("a")
    assert out.log == [("wm", MAX_WATERMARK)]
    with pytest.raises(ConfigurationError, match="finished"):
        mux.register("b")


def test_max_watermark_is_not_sent_twice_when_the_splits_already_reached_it() -> None:
    mux, out = mux_with("a")
    mux.immediate_output("a").emit_watermark(MAX_WATERMARK)
    mux.finish()
    assert out.log == [("wm", MAX_WATERMARK)]


# -- against a reference model ---------------------------------------------------------------

SPLITS = ["a", "b", "c"]

operations = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.sampled_from(SPLITS)),
        st.tuples(st.just("unregister"), st.sampled_from(SPLITS)),
        st.tuples(st.just("emit"), st.sampled_from(SPLITS), st.booleans(), st.integers(-5, 60)),
        st.tuples(st.just("idle"), st.sampled_from(SPLITS), st.booleans()),
        st.tuples(st.just("active"), st.sampled_from(SPLITS), st.booleans()),
        st.tuples(st.just("periodic")),
        st.tuples(st.just("finish")),
    ),
    max_size=60,
)


class ReferenceModel:
    """The rules written out plainly: per split its largest watermark and idle flag;
    the combined output is recomputed on immediate calls, (un)registration and periodic
    emission; activation of an idle combined output is immediate; finish sends MAX."""

    def __init__(self) -> None:
        self.splits: dict[Hashable, list] = {}
        self.log: list[object] = []
        self.combined = MIN_WATERMARK
        self.idle = False
        self.finished = False

    def set_idle(self, idle: bool) -> None:
        if idle != self.idle:
            self.idle = idle
            self.log.append("idle" if idle else "active")

    def recompute(self) -> None:
        if self.finished:
            return
        active = [wm for wm, idle in self.splits.values() if not idle]
        self.set_idle(not active)
        if active and min(active) > self.combined:
            self.combined = min(active)
            self.log.append(("wm", self.combined))

    def split_changed(self, immediate: bool, became_active: bool) -> None:
        if immediate:
            self.recompute()
        elif became_active and not self.finished:
            self.set_idle(False)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_the_multiplexer_behaves_like_the_reference_model_M_W1_M_W2(ops: list[tuple]) -> None:  # noqa: C901 (one branch per operation of the reference model)
    out = Recorder()
    mux = WatermarkOutputMultiplexer(out)
    model = ReferenceModel()
    outputs: dict[Hashable, tuple] = {}  # kept after unregistering: stale outputs must be ignored
    for op in ops:
        kind, split = op[0], (op[1] if len(op) > 1 else None)
        state = model.splits.get(split)
        if kind == "register":
            if model.finished or split in model.splits:
                with pytest.raises(ConfigurationError):
                    mux.register(split)
                continue
            mux.register(split)
            outputs[split] = (mux.immediate_output(split), mux.deferred_output(split))
            model.splits[split] = [MIN_WATERMARK, False]
            model.recompute()
        elif kind == "unregister":
            assert mux.unregister(split) is (state is not None)
            if state is not None:
                del model.splits[split]
                model.recompute()
        elif kind == "periodic":
            mux.on_periodic_emit()
            model.recompute()
        elif kind == "finish":
            mux.finish()
            if not model.finished:
                model.set_idle(False)
                if model.combined < MAX_WATERMARK:
                    model.combined = MAX_WATERMARK
                    model.log.append(("wm", MAX_WATERMARK))
                model.finished = True
        elif split in outputs:
            immediate = op[2]
            target = outputs[split][0 if immediate else 1]
            if kind == "emit":
                target.emit_watermark(op[3])
            elif kind == "idle":
                target.mark_idle()
            else:
                target.mark_active()
            if state is None:
                continue  # stale output of an unregistered split
            was_idle = state[1]
            if kind == "idle":
                if not was_idle:
                    state[1] = True
                    if immediate:
                        model.recompute()
                continue
            if kind == "emit":
                state[0] = max(state[0], op[3])
            state[1] = False
            model.split_changed(immediate, became_active=was_idle)
        assert out.log == model.log, f"after {op}"
        assert mux.is_idle == model.idle and mux.current_watermark == model.combined


@settings(max_examples=200, deadline=None)
@given(operations)
def test_the_combined_output_advances_strictly_and_never_emits_while_idle_M_W1_M_W2(
    ops: list[tuple],
) -> None:
    out = Recorder()
    mux = WatermarkOutputMultiplexer(out)
    for op in ops:
        kind = op[0]
        try:
            if kind == "register":
                mux.register(op[1])
            elif kind == "unregister":
                mux.unregister(op[1])
            elif kind == "periodic":
                mux.on_periodic_emit()
            elif kind == "finish":
                mux.finish()
            else:
                output = mux.immediate_output(op[1]) if op[2] else mux.deferred_output(op[1])
                if kind == "emit":
                    output.emit_watermark(op[3])
                elif kind == "idle":
                    output.mark_idle()
                else:
                    output.mark_active()
        except ConfigurationError:
            pass
    watermarks = out.watermarks
    assert watermarks == sorted(set(watermarks))
    idle = False
    for entry in out.log:
        if entry in ("idle", "active"):
            assert idle is (entry == "active"), "idle and active must alternate"
            idle = entry == "idle"
        else:
            assert not idle, "a watermark was emitted while idle"
    if mux.is_finished:
        assert watermarks[-1] == MAX_WATERMARK and not idle


# -- PerSplitWatermarks: a source's watermarks end to end ------------------------------------


def batch_of(*times: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"t": t} for t in times])


def test_a_source_with_a_lagging_split_emits_the_minimum_of_its_splits_periodically() -> None:
    clock, out = ManualClock(), Recorder()
    strategy = (
        WatermarkStrategy.for_bounded_out_of_orderness(10)
        .with_timestamp_assigner("t")
        .with_periodic_emit_interval(100)
    )
    source = PerSplitWatermarks(strategy, out, clock)
    source.add_split("s1")
    source.add_split("s2")
    assert source.on_batch("s1", batch_of(500, 400)).tolist() == [500, 400]  # type: ignore
    source.on_batch("s2", batch_of(111))
    assert source.emit_periodic_if_due() is False and out.log == []
    assert source.ms_until_periodic_emit() == 100
    clock.advance(100)
    assert source.emit_periodic_if_due() is True
    assert out.watermarks == [100]
    source.finish_split("s2")
    assert out.watermarks == [100, 489]
    source.finish()
    assert out.watermarks == [100, 489, MAX_WATERMARK]


def test_an_idle_split_of_a_source_stops_holding_back_its_watermark_M_W2() -> None:
    clock, out = ManualClock(), Recorder()
    strategy = (
        WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner("t")
        .with_idleness(1_000)
    )
    source = PerSplitWatermarks(strategy, out, clock)
    source.add_split("busy")
    source.add_split("quiet")
    source.on_batch("quiet", batch_of(5))
    for step in range(5):
        clock.advance(250)
        source.on_batch("busy", batch_of(1_000 * (step + 1)))
        source.on_periodic_emit()
    assert out.watermarks == [4, 3_999, 4_999]  # "quiet" went idle after 1 s without events
    assert source.multiplexer.split_is_idle("quiet")
    source.on_batch("quiet", batch_of(6))  # back, behind: active again, no regression
    assert not source.multiplexer.split_is_idle("quiet")
    source.on_periodic_emit()
    assert out.watermarks == [4, 3_999, 4_999]


def test_a_source_whose_splits_all_go_idle_is_idle_and_becomes_active_before_new_records_M_W2() -> (
    None
):
    clock, out = ManualClock(), Recorder()
    strategy = (
        WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner(lambda r: r["t"])
        .with_idleness(300)
    )
    source = PerSplitWatermarks(strategy, out, clock)
    source.add_split(0)
    source.on_batch(0, RowBatch([{"t": 10}]))
    source.on_periodic_emit()
    clock.advance(300)
    source.on_periodic_emit()
    assert out.log == [("wm", 9), "idle"]
    source.on_batch(0, RowBatch([{"t": 20}]))
    assert out.log[-1] == "active"  # before the reader emits the batch
    source.on_periodic_emit()
    assert out.log == [("wm", 9), "idle", "active", ("wm", 19)]


def test_punctuated_watermarks_of_a_source_reach_the_output_while_the_batch_is_seen() -> None:
    out = Recorder()
    strategy = WatermarkStrategy.for_generator(
        lambda: PunctuatedWatermarks(lambda t: int(t.max()))
    ).with_timestamp_assigner("t")
    source = PerSplitWatermarks(strategy, out, ManualClock())
    source.add_split("only")
    source.on_batch("only", batch_of(3, 42))
    assert out.watermarks == [42]


def test_a_source_without_watermarks_still_reports_idleness_and_ends_with_max() -> None:
    clock, out = ManualClock(), Recorder()
    source = PerSplitWatermarks(WatermarkStrategy.no_watermarks().with_idleness(50), out, clock)
    source.add_split("x")
    assert source.on_batch("x", RowBatch(["anything"])) is None
    clock.advance(50)
    source.on_periodic_emit()
    assert out.log == ["idle"]
    source.on_batch("x", RowBatch(["more"]))
    source.finish()
    assert out.log == ["idle", "active", ("wm", MAX_WATERMARK)]


def test_without_an_assigner_the_records_own_timestamps_drive_the_watermarks_M_W1() -> None:
    clock, out = ManualClock(), Recorder()
    source = PerSplitWatermarks(WatermarkStrategy.for_monotonous_timestamps(), out, clock)
    source.add_split("x")
    stamped = RowBatch(["a", "b"], np.array([10, 30], dtype=np.int64))
    assert source.on_batch("x", stamped).tolist() == [10, 30]
    source.on_periodic_emit()
    assert out.log[-1] == ("wm", 29)


def test_without_an_assigner_records_without_timestamps_fail_saying_how_to_assign_them() -> None:
    source = PerSplitWatermarks(WatermarkStrategy.for_monotonous_timestamps(), Recorder())
    source.add_split("x")
    with pytest.raises(ConfigurationError, match="with_timestamp_assigner"):
        source.on_batch("x", RowBatch(["no time"]))


def test_a_batch_of_an_unknown_split_is_a_configuration_error() -> None:
    source = PerSplitWatermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("t"), Recorder()
    )
    with pytest.raises(ConfigurationError, match="not registered"):
        source.on_timestamps("ghost", np.array([1], dtype=np.int64))


def test_numpy_integer_watermarks_reach_the_output_as_python_ints() -> None:
    mux, out = mux_with("a")
    mux.immediate_output("a").emit_watermark(np.int64(12))
    assert out.log == [("wm", 12)] and type(out.watermarks[0]) is int

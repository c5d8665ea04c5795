"""M-W1 / M-W2: watermark strategies, timestamp assigners and watermark generators."""

from __future__ import annotations

import dataclasses
import datetime as dt
import pickle

import cloudpickle
import numpy as np
import pyarrow as pa
import pytest

from lockgate.core.batch import Batch, RowBatch, scalar_batch
from lockgate.core.clock import ManualClock
from lockgate.core.elements import MAX_WATERMARK, MIN_WATERMARK
from lockgate.errors import ConfigurationError, MalformedRecordError
from lockgate.time.watermark_generators import (
    AscendingTimestampsWatermarks,
    BoundedOutOfOrdernessWatermarks,
    NoWatermarks,
    PunctuatedWatermarks,
    WatermarksWithIdleness,
)
from lockgate.time.watermark_strategy import (
    DEFAULT_PERIODIC_EMIT_INTERVAL_MS,
    InvalidTimestampError,
    TimestampAssigner,
    WatermarkStrategy,
    timestamps_of,
)


class Recorder:
    """A WatermarkOutput that logs what it is told."""

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


def ts(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def event_time_of(record: dict) -> int:
    return record["t"]


# -- strategies and their validation ---------------------------------------------------------


def test_bounded_out_of_orderness_accepts_a_timedelta_or_int_milliseconds_alike() -> None:
    a = WatermarkStrategy.for_bounded_out_of_orderness(dt.timedelta(seconds=2))
    b = WatermarkStrategy.for_bounded_out_of_orderness(2000)
    assert a == b
    assert a.max_out_of_orderness_ms == 2000


@pytest.mark.parametrize("bad", [-1, dt.timedelta(seconds=-1), 1.5, "5s", True, None])
def test_bounded_out_of_orderness_rejects_negative_and_non_duration_values_naming_the_setting(
    bad: object,
) -> None:
    with pytest.raises(ConfigurationError, match="max_out_of_orderness"):
        WatermarkStrategy.for_bounded_out_of_orderness(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -5, dt.timedelta(0), 2.0])
def test_idleness_needs_a_positive_timeout(bad: object) -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    with pytest.raises(ConfigurationError, match="idleness"):
        strategy.with_idleness(bad)  # type: ignore[arg-type]


def test_the_periodic_emit_interval_defaults_to_200_ms_and_can_be_set_but_not_to_zero() -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    assert strategy.periodic_emit_interval_ms == DEFAULT_PERIODIC_EMIT_INTERVAL_MS == 200
    assert (
        strategy.with_periodic_emit_interval(dt.timedelta(seconds=1)).periodic_emit_interval_ms
        == 1000
    )
    with pytest.raises(ConfigurationError, match="periodic emit interval"):
        strategy.with_periodic_emit_interval(0)


@pytest.mark.parametrize("bad", [42, None, b"ts", ""])
def test_a_timestamp_assigner_must_be_a_column_name_or_a_function(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="column name"):
        WatermarkStrategy.no_watermarks().with_timestamp_assigner(bad)  # type: ignore[arg-type]


def test_a_custom_generator_needs_a_callable_factory() -> None:
    with pytest.raises(ConfigurationError, match="factory"):
        WatermarkStrategy.for_generator(AscendingTimestampsWatermarks())  # type: ignore[arg-type]


def test_a_factory_returning_something_else_than_a_generator_is_rejected_when_creating_it() -> None:
    strategy = WatermarkStrategy.for_generator(lambda: "not a generator")  # type: ignore
    with pytest.raises(ConfigurationError, match="on_events"):
        strategy.create_generator()


def test_strategies_are_immutable_and_with_methods_leave_the_original_unchanged() -> None:
    base = WatermarkStrategy.for_bounded_out_of_orderness(10)
    derived = base.with_timestamp_assigner("t").with_idleness(500)
    assert base.timestamp_assigner is None and base.idle_timeout_ms is None
    assert (derived.timestamp_assigner, derived.idle_timeout_ms) == ("t", 500)
    assert derived.max_out_of_orderness_ms == 10
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.idle_timeout_ms = 3  # type: ignore[misc]


def test_a_strategy_survives_pickling_and_its_copy_behaves_the_same() -> None:
    batch = pa.RecordBatch.from_pylist([{"t": 7}, {"t": 3}])
    for strategy, dumps in [
        (
            WatermarkStrategy.for_bounded_out_of_orderness(5).with_timestamp_assigner("t"),
            pickle.dumps,
        ),
        (
            WatermarkStrategy.for_monotonous_timestamps()
            .with_timestamp_assigner(event_time_of)
            .with_idleness(100),
            pickle.dumps,
        ),
        (
            WatermarkStrategy.for_generator(
                lambda: PunctuatedWatermarks(lambda t: int(t.max()))
            ).with_timestamp_assigner(lambda r: r["t"] * 2),
            cloudpickle.dumps,
        ),
    ]:
        copy = pickle.loads(dumps(strategy))
        assert copy.kind == strategy.kind
        assert copy.idle_timeout_ms == strategy.idle_timeout_ms
        assert copy.timestamps_of(batch).tolist() == strategy.timestamps_of(batch).tolist()
        out_a, out_b = Recorder(), Recorder()
        for s, out in ((strategy, out_a), (copy, out_b)):
            g = s.create_generator(ManualClock())
            g.on_events(s.timestamps_of(batch), out)
            g.on_periodic_emit(out)
        assert out_a.log == out_b.log and out_a.log


def test_each_factory_creates_the_generator_it_names_and_idleness_wraps_it() -> None:
    assert isinstance(
        WatermarkStrategy.for_bounded_out_of_orderness(3).create_generator(),
        BoundedOutOfOrdernessWatermarks,
    )
    assert isinstance(
        WatermarkStrategy.for_monotonous_timestamps().create_generator(),
        AscendingTimestampsWatermarks,
    )
    assert isinstance(WatermarkStrategy.no_watermarks().create_generator(), NoWatermarks)
    wrapped = WatermarkStrategy.for_bounded_out_of_orderness(3).with_idleness(50).create_generator()
    assert isinstance(wrapped, WatermarksWithIdleness)
    assert isinstance(wrapped.generator, BoundedOutOfOrdernessWatermarks)
    assert wrapped.timeout_ms == 50
    assert not WatermarkStrategy.no_watermarks().generates_watermarks


def test_every_split_gets_a_generator_of_its_own_so_their_maxima_do_not_mix() -> None:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(0)
    g1, g2 = strategy.create_generator(), strategy.create_generator()
    g1.on_events(ts(1000), Recorder())
    out = Recorder()
    g2.on_events(ts(5), out)
    g2.on_periodic_emit(out)
    assert out.watermarks == [4]


def test_timestamps_of_a_strategy_without_assigner_asks_for_one() -> None:
    with pytest.raises(ConfigurationError, match="with_timestamp_assigner"):
        WatermarkStrategy.for_monotonous_timestamps().timestamps_of(
            pa.RecordBatch.from_pylist([{"t": 1}])
        )


# -- timestamp extraction --------------------------------------------------------------------


@pytest.mark.parametrize(
    "arrow_type", [pa.int64(), pa.int32(), pa.uint32(), pa.int16(), pa.uint64()]
)
def test_an_integer_column_is_read_as_epoch_milliseconds(arrow_type: pa.DataType) -> None:
    batch = pa.RecordBatch.from_arrays([pa.array([30, 10, 20], arrow_type)], names=["t"])
    out = timestamps_of(batch, "t")
    assert out.dtype == np.int64
    assert out.tolist() == [30, 10, 20]


@pytest.mark.parametrize(
    "unit,raw,expected",
    [
        ("s", [2, -1], [2000, -1000]),
        ("ms", [1_700_000_000_123, -5], [1_700_000_000_123, -5]),
        ("us", [1_500_999, -1], [1_500, -1]),
        ("ns", [2_999_999, -1], [2, -1]),
    ],
)
def test_arrow_timestamp_columns_of_every_unit_become_int_ms_rounded_down(
    unit: str, raw: list[int], expected: list[int]
) -> None:
    for tz in (None, "Europe/Paris"):
        array = pa.array(raw, pa.int64()).cast(pa.timestamp(unit, tz=tz))
        batch = pa.RecordBatch.from_arrays([array], names=["when"])
        assert timestamps_of(batch, "when").tolist() == expected


def test_a_timestamp_column_built_from_datetimes_gives_their_epoch_milliseconds() -> None:
    when = dt.datetime(2024, 3, 1, 12, 0, 0, 250_000)
    batch = pa.RecordBatch.from_pylist([{"t": when}])
    assert timestamps_of(batch, "t").tolist() == [1_709_294_400_250]


def test_date_columns_become_midnight_utc_in_ms() -> None:
    day = dt.date(1970, 1, 3)
    for arrow_type in (pa.date32(), pa.date64()):
        batch = pa.RecordBatch.from_arrays([pa.array([day], arrow_type)], names=["d"])
        assert timestamps_of(batch, "d").tolist() == [2 * 86_400_000]


def test_seconds_that_overflow_int64_milliseconds_are_rejected_naming_the_record() -> None:
    array = pa.array([1, 2**62], pa.int64()).cast(pa.timestamp("s"))
    batch = pa.RecordBatch.from_arrays([array], names=["t"])
    with pytest.raises(InvalidTimestampError, match="record 1 ") as info:
        timestamps_of(batch, "t")
    assert info.value.position == 1


def test_a_uint64_event_time_beyond_int64_is_rejected_naming_the_record() -> None:
    batch = pa.RecordBatch.from_arrays([pa.array([1, 2, 2**64 - 1], pa.uint64())], names=["t"])
    with pytest.raises(InvalidTimestampError, match="record 2 ") as info:
        timestamps_of(batch, "t")
    assert info.value.position == 2


def test_a_null_event_time_in_a_column_is_rejected_naming_its_position() -> None:
    batch = pa.RecordBatch.from_pylist([{"t": 1}, {"t": 2}, {"t": None}, {"t": None}])
    with pytest.raises(InvalidTimestampError, match="record 2 of the batch") as info:
        timestamps_of(batch, "t")
    assert isinstance(info.value, MalformedRecordError)
    assert info.value.position == 2 and info.value.location == "record 2 of the batch"


def test_a_missing_column_is_a_configuration_error_listing_the_columns() -> None:
    batch = pa.RecordBatch.from_pylist([{"time": 1, "v": 2}])
    with pytest.raises(ConfigurationError, match=r"'ts'.*\['time', 'v'\]"):
        timestamps_of(batch, "ts")


def test_a_column_assigner_on_a_scalar_batch_suggests_a_function() -> None:
    with pytest.raises(ConfigurationError, match="lambda v: v"):
        timestamps_of(scalar_batch([1, 2]), "t")


@pytest.mark.parametrize("arrow_type", [pa.float64(), pa.string(), pa.bool_()])
def test_a_column_of_a_type_without_event_time_is_rejected_naming_the_type(
    arrow_type: pa.DataType,
) -> None:
    batch = pa.RecordBatch.from_arrays([pa.array([], arrow_type)], names=["t"])
    with pytest.raises(ConfigurationError, match=str(arrow_type)):
        timestamps_of(batch, "t")


def test_a_function_assigner_sees_dicts_of_arrow_batches_and_bare_values_of_scalar_batches() -> (
    None
):
    rows = pa.RecordBatch.from_pylist([{"t": 5, "k": "a"}, {"t": 9, "k": "b"}])
    assert timestamps_of(rows, lambda r: r["t"] + len(r["k"])).tolist() == [6, 10]
    assert timestamps_of(scalar_batch([4, 8]), lambda v: v * 10).tolist() == [40, 80]
    assert timestamps_of(RowBatch([(1, "x"), (3, "y")]), lambda r: r[0]).tolist() == [1, 3]


def test_a_function_assigner_may_return_numpy_integers() -> None:
    out = timestamps_of(RowBatch([1, 2]), lambda v: np.int32(v * 3))
    assert out.tolist() == [3, 6] and out.dtype == np.int64


@pytest.mark.parametrize("bad", [None, "12", 1.0, True, 2**63])
def test_a_function_returning_no_int_is_rejected_naming_the_record_position(bad: object) -> None:
    records = [{"t": 1}, {"t": 2}, {"t": bad}, {"t": 4}]
    with pytest.raises(InvalidTimestampError, match="record 2 of the batch") as info:
        timestamps_of(RowBatch(records), lambda r: r["t"])
    assert info.value.position == 2
    assert info.value.raw == {"t": bad}


def test_a_column_assigner_on_row_batches_reads_ints_and_datetimes_per_record() -> None:
    utc_plus_1 = dt.timezone(dt.timedelta(hours=1))
    rows = RowBatch(
        [
            {"t": 1_000},
            {"t": dt.datetime(1970, 1, 1, 0, 0, 2)},
            {"t": dt.datetime(1970, 1, 1, 1, 0, 3, tzinfo=utc_plus_1)},
        ]
    )
    assert timestamps_of(rows, "t").tolist() == [1_000, 2_000, 3_000]


def test_a_column_assigner_agrees_on_an_arrow_batch_and_its_rows() -> None:
    array = pa.array([1_700_000_000_123_456, -1_500], pa.int64()).cast(pa.timestamp("us"))
    batch = pa.RecordBatch.from_arrays([array], names=["t"])
    assert (
        timestamps_of(batch, "t").tolist()
        == timestamps_of(RowBatch(batch.to_pylist()), "t").tolist()
    )


@pytest.mark.parametrize(
    "rows,match",
    [
        ([{"t": 1}, (2,)], "record 1 .*tuple"),
        ([{"t": 1}, {"t": 2}, {"u": 3}], "record 2 .*no event-time field 't'"),
        ([{"t": "1"}], "record 0 .*str"),
    ],
)
def test_a_column_assigner_on_row_batches_names_the_first_unusable_record(
    rows: list, match: str
) -> None:
    with pytest.raises(InvalidTimestampError, match=match):
        timestamps_of(RowBatch(rows), "t")


def test_an_empty_batch_has_an_empty_int64_array_of_event_times() -> None:
    cases: list[tuple[Batch, TimestampAssigner]] = [
        (RowBatch([]), "t"),
        (RowBatch([]), event_time_of),
        (pa.RecordBatch.from_pylist([{"t": 1}]).slice(0, 0), "t"),
    ]
    for batch, assigner in cases:
        out = timestamps_of(batch, assigner)
        assert out.dtype == np.int64 and len(out) == 0


def test_an_invalid_timestamp_error_survives_pickling_with_its_position() -> None:
    error = InvalidTimestampError(
        "bad", location="record 3 of the batch", raw={"t": None}, position=3
    )
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.position, copy.location, copy.raw) == (
        InvalidTimestampError,
        "bad",
        3,
        "record 3 of the batch",
        {"t": None},
    )


# -- generators ------------------------------------------------------------------------------


def test_bounded_out_of_orderness_emits_max_seen_minus_bound_minus_one_periodically_M_W1() -> None:
    gen, out = BoundedOutOfOrdernessWatermarks(dt.timedelta(milliseconds=10)), Recorder()
    gen.on_events(ts(50, 100, 70), out)
    assert out.log == []  # periodic: nothing while seeing events
    gen.on_periodic_emit(out)
    assert out.watermarks == [89]


def test_bounded_out_of_orderness_emits_nothing_before_its_first_events() -> None:
    gen, out = BoundedOutOfOrdernessWatermarks(10), Recorder()
    gen.on_periodic_emit(out)
    gen.on_events(ts(), out)
    gen.on_periodic_emit(out)
    assert out.log == [] and gen.current_watermark == MIN_WATERMARK


def test_bounded_out_of_orderness_never_goes_back_when_older_records_follow() -> None:
    gen, out = BoundedOutOfOrdernessWatermarks(0), Recorder()
    for batch in (ts(10, 30), ts(5), ts(31, 20)):
        gen.on_events(batch, out)
        gen.on_periodic_emit(out)
    assert out.watermarks == [29, 29, 30]


def test_bounded_out_of_orderness_clamps_to_the_int64_range() -> None:
    gen, out = BoundedOutOfOrdernessWatermarks(1000), Recorder()
    gen.on_events(ts(MIN_WATERMARK + 5), out)
    gen.on_periodic_emit(out)
    assert out.watermarks == [MIN_WATERMARK]


def test_ascending_timestamps_emit_max_seen_minus_one() -> None:
    gen, out = AscendingTimestampsWatermarks(), Recorder()
    gen.on_events(ts(1, 2, 3), out)
    gen.on_periodic_emit(out)
    assert out.watermarks == [2]


def test_a_punctuated_generator_emits_what_its_function_decides_while_seeing_events() -> None:
    seen: list[list[int]] = []

    def decide(t: np.ndarray) -> int | None:
        seen.append(t.tolist())
        return int(t.max()) if t.max() >= 100 else None

    gen, out = PunctuatedWatermarks(decide), Recorder()
    gen.on_events(ts(5, 6), out)
    gen.on_events(ts(), out)
    gen.on_events(ts(99, 150), out)
    gen.on_periodic_emit(out)
    assert seen == [[5, 6], [99, 150]]  # never called for an empty batch
    assert out.watermarks == [150]


def test_a_punctuated_function_returning_a_non_int_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="returned '7'"):
        PunctuatedWatermarks(lambda t: "7").on_events(ts(1), Recorder())  # type: ignore
    with pytest.raises(ConfigurationError, match="function of the batch"):
        PunctuatedWatermarks(5)  # type: ignore[arg-type]


def test_a_custom_generator_from_a_factory_runs_through_the_strategy() -> None:
    strategy = WatermarkStrategy.for_generator(
        lambda: PunctuatedWatermarks(lambda t: int(t.min()))
    ).with_timestamp_assigner("t")
    gen, out = strategy.create_generator(), Recorder()
    gen.on_events(strategy.timestamps_of(pa.RecordBatch.from_pylist([{"t": 8}, {"t": 4}])), out)
    assert out.watermarks == [4]


# -- idleness (M-W2) -------------------------------------------------------------------------


def idle_generator(timeout: int = 100) -> tuple[WatermarksWithIdleness, ManualClock, Recorder]:
    clock = ManualClock(1_000)
    return (
        WatermarksWithIdleness(BoundedOutOfOrdernessWatermarks(0), timeout, clock),
        clock,
        Recorder(),
    )


def test_a_generator_becomes_idle_once_timeout_passes_without_events_M_W2() -> None:
    gen, clock, out = idle_generator(100)
    gen.on_events(ts(10), out)
    clock.advance(99)
    gen.on_periodic_emit(out)
    assert out.log == [("wm", 9)] and not gen.is_idle
    clock.advance(1)
    gen.on_periodic_emit(out)
    assert out.log == [("wm", 9), "idle"] and gen.is_idle


def test_idleness_is_counted_from_the_last_events_not_the_first_M_W2() -> None:
    gen, clock, out = idle_generator(100)
    gen.on_events(ts(1), out)
    clock.advance(80)
    gen.on_events(ts(2), out)
    clock.advance(80)
    gen.on_periodic_emit(out)
    assert "idle" not in out.log


def test_a_split_without_any_events_goes_idle_timeout_after_its_generator_was_created_M_W2() -> (
    None
):
    gen, clock, out = idle_generator(100)
    clock.advance(100)
    gen.on_periodic_emit(out)
    assert out.log == ["idle"]


def test_an_idle_generator_marks_idle_once_and_emits_no_watermarks_while_idle_M_W2() -> None:
    gen, clock, out = idle_generator(100)
    gen.on_events(ts(10), out)
    for _ in range(5):
        clock.advance(100)
        gen.on_periodic_emit(out)
    assert out.log == ["idle"]


def test_empty_batches_do_not_count_as_activity_M_W2() -> None:
    gen, clock, out = idle_generator(100)
    clock.advance(60)
    gen.on_events(ts(), out)
    clock.advance(60)
    gen.on_periodic_emit(out)
    assert out.log == ["idle"]


def test_the_next_events_mark_active_before_the_wrapped_generator_sees_them_M_W2() -> None:
    clock = ManualClock()
    gen = WatermarksWithIdleness(PunctuatedWatermarks(lambda t: int(t.max())), 100, clock)
    out = Recorder()
    clock.advance(100)
    gen.on_periodic_emit(out)
    gen.on_events(ts(42), out)
    assert out.log == ["idle", "active", ("wm", 42)]
    assert not gen.is_idle


def test_periodic_emission_resumes_after_activity_and_idleness_can_return_M_W2() -> None:
    gen, clock, out = idle_generator(100)
    clock.advance(100)
    gen.on_periodic_emit(out)
    gen.on_events(ts(500), out)
    gen.on_periodic_emit(out)
    clock.advance(100)
    gen.on_periodic_emit(out)
    assert out.log == ["idle", "active", ("wm", 499), "idle"]


def test_a_punctuated_watermark_beyond_int64_is_clamped_to_max_watermark() -> None:
    out = Recorder()
    PunctuatedWatermarks(lambda t: 2**70).on_events(ts(1), out)
    assert out.watermarks == [MAX_WATERMARK]

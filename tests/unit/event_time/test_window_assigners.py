"""Window assigners put each record into the windows a naive per-record definition
says it belongs to; TimeWindow behaves as a half-open interval; bad settings and
bad timestamps are rejected with a ConfigurationError that says what to pass."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.errors import ConfigurationError
from lockgate.windowing.assigners import (
    EventTimeSessionWindows,
    ProcessingTimeSessionWindows,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssignment,
    window_start,
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def naive_windows(t: int, size: int, slide: int, offset: int) -> list[tuple[int, int]]:
    """Every window [s, s + size) with s = k * slide + offset that holds t, by brute force."""
    return [
        (s, s + size)
        for s in range(t - size - slide, t + 1)
        if (s - offset) % slide == 0 and s <= t < s + size
    ]


def pairs(assignment: WindowAssignment) -> list[tuple[int, int, int]]:
    rows, starts, ends = assignment
    return list(zip(rows.tolist(), starts.tolist(), ends.tolist()))


def expected_pairs(
    timestamps: list[int], size: int, slide: int, offset: int
) -> list[tuple[int, int, int]]:
    return [
        (i, s, e)
        for i, t in enumerate(timestamps)
        for s, e in naive_windows(t, size, slide, offset)
    ]


timestamps_st = st.lists(st.integers(-10_000, 10_000), max_size=40)


@settings(max_examples=200, deadline=None)
@given(ts=timestamps_st, size=st.integers(1, 60), data=st.data())
def test_tumbling_windows_match_the_naive_definition(ts, size, data) -> None:
    offset = data.draw(st.integers(-size + 1, size - 1))
    for cls in (TumblingEventTimeWindows, TumblingProcessingTimeWindows):
        got = cls.of(size, offset).assign(np.array(ts, dtype=np.int64))
        assert pairs(got) == expected_pairs(ts, size, size, offset)


@settings(max_examples=300, deadline=None)
@given(ts=timestamps_st, size=st.integers(1, 60), slide=st.integers(1, 60), data=st.data())
def test_sliding_windows_match_the_naive_definition(ts, size, slide, data) -> None:
    offset = data.draw(st.integers(-slide + 1, slide - 1))
    for cls in (SlidingEventTimeWindows, SlidingProcessingTimeWindows):
        got = cls.of(size, slide, offset).assign(np.array(ts, dtype=np.int64))
        assert pairs(got) == expected_pairs(ts, size, slide, offset)


@settings(max_examples=100, deadline=None)
@given(ts=timestamps_st, gap=st.integers(1, 1000))
def test_session_assigners_give_each_record_the_window_from_its_timestamp_to_timestamp_plus_gap(
    ts, gap
) -> None:
    for cls in (EventTimeSessionWindows, ProcessingTimeSessionWindows):
        got = cls.with_gap(gap).assign(np.array(ts, dtype=np.int64))
        assert pairs(got) == [(i, t, t + gap) for i, t in enumerate(ts)]


def test_a_sliding_window_gives_a_record_every_window_holding_it_oldest_first() -> None:
    rows, starts, ends = SlidingEventTimeWindows.of(
        timedelta(seconds=10), timedelta(seconds=5)
    ).assign(np.array([7_000, 12_500]))
    assert rows.tolist() == [0, 0, 1, 1]
    assert starts.tolist() == [0, 5_000, 5_000, 10_000]
    assert ends.tolist() == [10_000, 15_000, 15_000, 20_000]


def test_a_sliding_window_with_a_slide_larger_than_its_size_leaves_gaps_without_windows() -> None:
    rows, starts, ends = SlidingEventTimeWindows.of(5, 10).assign(np.array([3, 7, 12, -3]))
    assert rows.tolist() == [0, 2]
    assert list(zip(starts.tolist(), ends.tolist())) == [(0, 5), (10, 15)]


def test_a_size_that_is_not_a_multiple_of_the_slide_gives_records_different_window_counts() -> None:
    rows, _, _ = SlidingEventTimeWindows.of(10, 4).assign(np.array([0, 1, 2]))
    per_record = np.bincount(rows, minlength=3).tolist()
    assert per_record == [3, 3, 2]
    assert SlidingEventTimeWindows.of(10, 4).windows_per_record == 3


def test_tumbling_windows_floor_negative_timestamps_to_the_window_before_the_epoch() -> None:
    _, starts, ends = TumblingEventTimeWindows.of(timedelta(seconds=1)).assign(
        np.array([-1, -1000, -1001, 0, 999])
    )
    assert starts.tolist() == [-1000, -1000, -2000, 0, 0]
    assert ends.tolist() == [0, 0, -1000, 1000, 1000]


def test_an_offset_shifts_window_starts_for_example_to_a_time_zone() -> None:
    day = TumblingEventTimeWindows.of(timedelta(days=1), offset=timedelta(hours=-8))
    hour = 3_600_000
    _, starts, ends = day.assign(np.array([0, 16 * hour - 1, 16 * hour]))
    assert starts.tolist() == [-8 * hour, -8 * hour, 16 * hour]
    assert ends.tolist() == [16 * hour, 16 * hour, 40 * hour]
    assert day.offset == -8 * hour and day.size == 24 * hour


def test_window_start_is_the_largest_aligned_start_not_after_each_timestamp() -> None:
    ts = np.array([-7, -5, 0, 4, 5, 6])
    assert window_start(ts, 5, 1).tolist() == [-9, -9, -4, 1, 1, 6]


def test_assignments_are_int64_and_accept_datetime64_timestamps() -> None:
    ts = np.array(["1970-01-01T00:00:01.500", "1970-01-01T00:00:02"], dtype="datetime64[ms]")
    rows, starts, ends = TumblingEventTimeWindows.of(1000).assign(ts)
    assert starts.tolist() == [1000, 2000] and ends.tolist() == [2000, 3000]
    assert rows.dtype == starts.dtype == ends.dtype == np.int64
    seconds = np.array([1, 2], dtype="datetime64[s]")
    assert TumblingEventTimeWindows.of(1000).assign(seconds).window_start.tolist() == [1000, 2000]


def test_an_empty_batch_gets_no_windows() -> None:
    for assigner in (
        TumblingEventTimeWindows.of(10),
        SlidingEventTimeWindows.of(10, 3),
        EventTimeSessionWindows.with_gap(5),
    ):
        rows, starts, ends = assigner.assign(np.empty(0, dtype=np.int64))
        assert len(rows) == len(starts) == len(ends) == 0


@pytest.mark.parametrize(
    "assigner,event_time,merging",
    [
        (TumblingEventTimeWindows.of(10), True, False),
        (TumblingProcessingTimeWindows.of(10), False, False),
        (SlidingEventTimeWindows.of(10, 5), True, False),
        (SlidingProcessingTimeWindows.of(10, 5), False, False),
        (EventTimeSessionWindows.with_gap(10), True, True),
        (ProcessingTimeSessionWindows.with_gap(10), False, True),
    ],
)
def test_each_assigner_says_which_clock_it_uses_and_whether_its_windows_merge(
    assigner, event_time, merging
) -> None:
    assert assigner.is_event_time is event_time
    assert assigner.is_merging is merging


def test_event_and_processing_time_assigners_are_different_types_that_pickle_to_equal_copies() -> (
    None
):
    event, processing = TumblingEventTimeWindows.of(10), TumblingProcessingTimeWindows.of(10)
    assert not isinstance(processing, TumblingEventTimeWindows)
    assert event != processing
    for assigner in (
        event,
        processing,
        SlidingEventTimeWindows.of(10, 5, 2),
        EventTimeSessionWindows.with_gap(timedelta(minutes=1)),
    ):
        assert pickle.loads(pickle.dumps(assigner)) == assigner


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda: TumblingEventTimeWindows.of(0), "size must be positive"),
        (lambda: TumblingEventTimeWindows.of(-5), "size must be positive"),
        (lambda: TumblingEventTimeWindows.of(1.5), "timedelta or an int of milliseconds"),
        (lambda: TumblingEventTimeWindows.of(True), "timedelta or an int of milliseconds"),
        (lambda: TumblingEventTimeWindows.of("1s"), "timedelta or an int of milliseconds"),
        (lambda: TumblingEventTimeWindows.of(timedelta(microseconds=10)), "size must be positive"),
        (lambda: TumblingEventTimeWindows.of(10, 10), "offset must lie strictly between -size"),
        (lambda: TumblingProcessingTimeWindows.of(10, -10), "offset must lie strictly between"),
        (lambda: TumblingEventTimeWindows.of(10, 2.0), "offset must be a datetime.timedelta"),
        (lambda: SlidingEventTimeWindows.of(10, 0), "slide must be positive"),
        (lambda: SlidingEventTimeWindows.of(0, 5), "size must be positive"),
        (lambda: SlidingEventTimeWindows.of(10, 5, 5), "offset must lie strictly between -slide"),
        (lambda: EventTimeSessionWindows.with_gap(0), "gap must be positive"),
        (lambda: ProcessingTimeSessionWindows.with_gap(timedelta(0)), "gap must be positive"),
        (lambda: TumblingEventTimeWindows(size=0), "size must be positive"),
    ],
)
def test_bad_assigner_settings_are_rejected_with_the_setting_named(make, needle) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        make()


@pytest.mark.parametrize(
    "timestamps,needle",
    [
        (np.array([1.5, 2.0]), "must be integers"),
        (np.array(["a"]), "must be integers"),
        (np.array([[1, 2]]), "1-D array"),
    ],
)
def test_timestamps_that_are_not_integer_milliseconds_are_rejected(timestamps, needle) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        TumblingEventTimeWindows.of(10).assign(timestamps)


def test_the_no_timestamp_marker_is_rejected_with_a_hint_to_assign_timestamps() -> None:
    with pytest.raises(ConfigurationError, match="assign timestamps and watermarks"):
        TumblingEventTimeWindows.of(10).assign(np.array([5, INT64_MIN]))


def test_timestamps_whose_window_would_overflow_int64_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="leave the int64 range"):
        EventTimeSessionWindows.with_gap(10).assign(np.array([INT64_MAX - 5]))
    with pytest.raises(ConfigurationError, match="leave the int64 range"):
        SlidingEventTimeWindows.of(10, 5).assign(np.array([INT64_MIN + 3]))


def test_a_time_window_is_a_half_open_interval_with_its_last_timestamp_at_end_minus_one() -> None:
    w = TimeWindow(1000, 2000)
    assert w.max_timestamp() == 1999
    assert 1000 in w and 1999 in w and 2000 not in w and 999 not in w


def test_time_windows_intersect_when_they_overlap_or_touch_and_cover_spans_both() -> None:
    a = TimeWindow(0, 10)
    assert a.intersects(TimeWindow(10, 20)) and TimeWindow(10, 20).intersects(a)
    assert a.intersects(TimeWindow(5, 6))
    assert not a.intersects(TimeWindow(11, 20)) and not TimeWindow(11, 20).intersects(a)
    assert a.cover(TimeWindow(30, 40)) == TimeWindow(0, 40)
    assert TimeWindow(30, 40).cover(a) == TimeWindow(0, 40)


def test_time_windows_are_immutable_hashable_and_ordered_by_start_then_end() -> None:
    w = TimeWindow(0, 10)
    assert {w: 1}[TimeWindow(0, 10)] == 1
    assert sorted([TimeWindow(5, 6), TimeWindow(0, 10), TimeWindow(0, 5)]) == [
        TimeWindow(0, 5),
        TimeWindow(0, 10),
        TimeWindow(5, 6),
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.start = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(w)) == w
    assert TimeWindow(np.int64(3), np.int64(4)) == TimeWindow(3, 4)


@pytest.mark.parametrize(
    "start,end,needle",
    [
        (10, 10, "end must be greater than start"),
        (10, 5, "end must be greater than start"),
        (1.0, 5, "start must be an int"),
        (0, True, "end must be an int"),
    ],
)
def test_a_time_window_rejects_bounds_that_are_not_an_increasing_int_pair(
    start, end, needle
) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        TimeWindow(start, end)

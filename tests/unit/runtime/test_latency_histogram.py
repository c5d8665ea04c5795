"""The end-to-end latency histogram (issue 42, section 5): bounded, mergeable, its
quantiles within the stated error of numpy's on known data, its recent window."""

from __future__ import annotations

import numpy as np
import pytest

from lockgate.core.latency import LatencyHistogram, LatencyWindow
from lockgate.core.latency.histogram import (
    BUCKETS,
    RELATIVE_ERROR,
    bucket_bounds,
    bucket_of,
    latency_summary,
)


def histogram_of(values: np.ndarray) -> LatencyHistogram:
    h = LatencyHistogram()
    h.record_all(values.tolist())
    return h


@pytest.mark.parametrize(
    "values",
    [
        np.random.default_rng(1).lognormal(mean=3.0, sigma=1.2, size=20_000),  # ~20 ms
        np.random.default_rng(2).uniform(1.0, 5_000.0, size=5_000),
        np.random.default_rng(3).exponential(250.0, size=3_001) + 1.0,
    ],
    ids=["lognormal", "uniform", "exponential"],
)
def test_quantiles_are_within_the_stated_error_of_numpy(values: np.ndarray) -> None:
    h = histogram_of(values)
    assert h.count == len(values)
    assert h.sum_ms == pytest.approx(float(values.sum()))
    for q in (0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0):
        expected = float(np.quantile(values, q))
        got = h.quantile(q)
        assert got is not None
        # the order statistic next to numpy's position: at most one sample's gap more;
        # below 1 ms within 0.5 ms
        error = abs(got - expected)
        assert error <= 0.5 or error / expected <= RELATIVE_ERROR + 0.002, (q, got, expected)
    assert h.quantile(0.0) == pytest.approx(values.min())
    assert h.quantile(1.0) == pytest.approx(values.max())


def test_a_constant_latency_reads_back_exactly_and_sub_millisecond_ones_as_such() -> None:
    h = histogram_of(np.full(100, 40.0))
    assert [h.quantile(q) for q in (0.5, 0.99)] == [40.0, 40.0]  # clamped to min and max
    zeros = histogram_of(np.zeros(10))
    assert zeros.quantile(0.5) == 0.0
    skewed = LatencyHistogram()
    skewed.record(-7.0)  # a wall clock behind the source's: counted as 0
    assert (skewed.count, skewed.min_ms, skewed.quantile(0.5)) == (1, 0.0, 0.0)


def test_memory_is_bounded_whatever_the_values() -> None:
    h = LatencyHistogram()
    h.record_all([0.0, 0.3, 1.0, 1e3, 1e6, 1e9, 1e15, float("inf")])
    assert len(h.counts) == BUCKETS
    assert h.count == 8
    assert h.counts[BUCKETS - 1] == 3  # 1e9 ms, 1e15 ms and inf overflow
    assert h.quantile(1.0) == float("inf")  # the exact maximum


def test_buckets_tile_the_line_and_values_fall_in_their_bucket() -> None:
    for i in range(BUCKETS - 1):
        assert bucket_bounds(i)[1] == pytest.approx(bucket_bounds(i + 1)[0])
    for v in (0.0, 0.99, 1.0, 1.5, 2.0, 40.0, 1234.5, 2.0**27):
        low, high = bucket_bounds(bucket_of(v))
        assert low <= v < high, (v, low, high)
    with pytest.raises(ValueError, match="bucket index"):
        bucket_bounds(BUCKETS)
    with pytest.raises(ValueError, match="quantile"):
        LatencyHistogram().quantile(1.5)
    assert LatencyHistogram().quantile(0.5) is None


def test_merged_subtasks_equal_one_histogram_of_all_samples() -> None:
    rng = np.random.default_rng(7)
    a, b = rng.lognormal(2, 1, 1000), rng.lognormal(5, 0.5, 3000)
    merged = histogram_of(a).merge(histogram_of(b))
    whole = histogram_of(np.concatenate([a, b]))
    assert merged.counts == whole.counts
    assert (merged.min_ms, merged.max_ms) == (whole.min_ms, whole.max_ms)
    assert merged.sum_ms == pytest.approx(whole.sum_ms)
    assert merged.quantile(0.99) == whole.quantile(0.99)


def test_a_snapshot_round_trips_and_a_malformed_one_is_refused_with_context() -> None:
    h = histogram_of(np.array([1.0, 5.0, 5.0, 900.0]))
    snap = h.snapshot()
    assert snap["count"] == 4 and len(snap["buckets"]) == 3  # only non-empty buckets
    back = LatencyHistogram.from_snapshot(snap)
    assert back.counts == h.counts and back.max_ms == 900.0
    with pytest.raises(ValueError, match="not a latency histogram snapshot"):
        LatencyHistogram.from_snapshot({"buckets": [[BUCKETS, 1]]})
    with pytest.raises(ValueError, match="not a latency histogram snapshot"):
        LatencyHistogram.from_snapshot({"count": 3})


def test_the_window_reports_the_recent_samples_only() -> None:
    window = LatencyWindow(window_ms=60_000, step_ms=5_000)
    total = LatencyHistogram()
    # the first minute: slow (500 ms); every reading keeps growing the run's histogram
    for t in range(0, 60_000, 1_000):
        total.record(500.0)
        recent = window.observe(t, LatencyHistogram().merge(total))
    assert recent.count == 60  # the run is younger than the window: all of it
    # then fast (10 ms) for two minutes: the slow samples leave the window
    for t in range(60_000, 180_000, 1_000):
        total.record(10.0)
        recent = window.observe(t, LatencyHistogram().merge(total))
    assert 60 <= recent.count <= 65
    summary = latency_summary(total, recent)
    assert summary["count"] == 180 and summary["window_count"] == recent.count
    assert summary["p99_ms"] == pytest.approx(10.0)  # no trace of the old 500 ms
    assert summary["max_ms"] == pytest.approx(10.0, rel=RELATIVE_ERROR)
    with pytest.raises(ValueError, match="step_ms"):
        LatencyWindow(window_ms=1_000, step_ms=5_000)

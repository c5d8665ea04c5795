"""Built-in window aggregates: partial aggregation of a batch grouped by (key, window)
equals pandas; merging partials is associative and equals aggregating everything at
once; accumulators pickle, keep column types and follow the documented null, NaN and
first/last rules; bad declarations are rejected."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.core.batch import RowBatch, scalar_batch
from lockgate.errors import ConfigurationError
from lockgate.windowing.aggregate_specs import WindowAggregate, agg
from lockgate.windowing.aggregates import Accumulators, WindowAggregation, window_result_batch
from lockgate.windowing.assigners import SlidingEventTimeWindows, TumblingEventTimeWindows
from lockgate.windowing.window_groups import group_keys_and_windows

ALL = WindowAggregation.of(
    agg.count(),
    agg.count("v"),
    agg.sum("v"),
    agg.min("v"),
    agg.max("v"),
    agg.mean("v"),
    agg.first("v"),
    agg.last("v"),
)


def random_batch(
    seed: int, n: int, *, keys: int = 5, floats: bool = True, null_rate: float = 0.2
) -> tuple[pa.RecordBatch, np.ndarray]:
    rng = np.random.default_rng(seed)
    values = rng.normal(size=n) if floats else rng.integers(-1000, 1000, n)
    nulls = rng.random(n) < null_rate
    v = pa.array(values, mask=nulls)
    batch = pa.record_batch({"k": rng.integers(0, keys, n), "v": v})
    timestamps = rng.integers(0, 50, n)  # few distinct values: many timestamp ties
    return batch, timestamps


def pandas_expected(batch: pa.RecordBatch, ts: np.ndarray, size: int) -> pd.DataFrame:
    """What the aggregates mean, computed with pandas on the whole data."""
    df = batch.to_pandas()
    df["w"] = ts - ts % size
    df["ts"] = ts
    df["arrival"] = np.arange(len(df))
    # first/last by timestamp, ties by arrival: a stable sort puts rows in that order
    ordered = df.sort_values(["ts", "arrival"], kind="stable")
    g = ordered.groupby(["k", "w"], sort=True)["v"]
    return pd.DataFrame(
        {
            "count": g.size(),
            "count_v": g.count(),
            "sum_v": g.sum(min_count=1),
            "min_v": g.min(),
            "max_v": g.max(),
            "mean_v": g.mean(),
            "first_v": g.first(),
            "last_v": g.last(),
        }
    ).reset_index()


def ours(
    aggregation: WindowAggregation, batch: pa.RecordBatch, ts: np.ndarray, size: int
) -> pd.DataFrame:
    p = aggregation.aggregate_batch(
        batch, batch.column("k").to_numpy(), TumblingEventTimeWindows.of(size).assign(ts), ts
    )
    out = pd.DataFrame({"k": p.key_code, "w": p.window_start})
    for name, col in p.accumulators.results().items():
        out[name] = col.to_pandas()
    return out


def assert_frames_match(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    got = got.sort_values(["k", "w"]).reset_index(drop=True)
    expected = expected.sort_values(["k", "w"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(
        got, expected, check_dtype=False, check_exact=False, rtol=1e-9, atol=1e-9
    )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("floats", [True, False])
def test_every_aggregate_of_one_batch_equals_pandas(seed, floats) -> None:
    batch, ts = random_batch(seed, 500, floats=floats)
    assert_frames_match(ours(ALL, batch, ts, 10), pandas_expected(batch, ts, 10))


@pytest.mark.parametrize("seed", range(4))
def test_merging_the_partials_of_many_batches_equals_aggregating_all_at_once(seed) -> None:
    batch, ts = random_batch(seed, 900, floats=False)
    wins = TumblingEventTimeWindows.of(10)
    running: dict[tuple[int, int], int] = {}
    acc = ALL.empty(0)
    for lo in range(0, 900, 128):
        part, part_ts = batch.slice(lo, 128), ts[lo : lo + 128]
        p = ALL.aggregate_batch(part, part.column("k").to_numpy(), wins.assign(part_ts), part_ts)
        slots = [
            running.setdefault(g, len(running))
            for g in zip(p.key_code.tolist(), p.window_start.tolist())
        ]
        acc = Accumulators.concat([acc, ALL.empty(len(running) - len(acc))])
        acc.merge_into(slots, p.accumulators)
    got = pd.DataFrame({"k": [k for k, _ in running], "w": [w for _, w in running]})
    for name, col in acc.results().items():
        got[name] = col.to_pandas()
    assert_frames_match(got, pandas_expected(batch, ts, 10))


def test_sliding_windows_count_a_record_in_each_of_its_windows() -> None:
    batch, ts = random_batch(7, 300, null_rate=0.0)
    assigner = SlidingEventTimeWindows.of(10, 5)
    p = ALL.aggregate_batch(batch, batch.column("k").to_numpy(), assigner.assign(ts), ts)
    keys, values = batch.column("k").to_pylist(), batch.column("v").to_pylist()
    for g in range(len(p.key_code)):
        k, s, e = int(p.key_code[g]), int(p.window_start[g]), int(p.window_end[g])
        inside = [v for kk, v, t in zip(keys, values, ts) if kk == k and s <= t < e]
        res = {name: col[g].as_py() for name, col in p.accumulators.results().items()}
        assert res["count"] == len(inside)
        assert res["sum_v"] == pytest.approx(sum(inside))
        assert res["max_v"] == max(inside)


def some_accumulators(seed: int, groups: int) -> Accumulators:
    batch, ts = random_batch(seed, 60, floats=False, null_rate=0.3)
    rng = np.random.default_rng(seed + 100)
    return ALL.partial(batch, rng.integers(0, groups, 60), groups, timestamps=ts)


@settings(max_examples=60, deadline=None)
@given(seeds=st.tuples(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000)))
def test_merge_is_associative(seeds) -> None:
    a, b, c = (some_accumulators(s, 8) for s in seeds)
    left = a.merge(b).merge(c).results()
    right = a.merge(b.merge(c)).results()
    assert {k: v.to_pylist() for k, v in left.items()} == {
        k: v.to_pylist() for k, v in right.items()
    }


def test_reducing_rows_equals_merging_them_in_row_order() -> None:
    acc = some_accumulators(3, 4)
    reduced = acc.reduce(np.zeros(len(acc), dtype=np.int64), 1)
    folded = acc.take([0])
    for i in range(1, len(acc)):
        folded = folded.merge(acc.take([i]))
    assert {k: v.to_pylist() for k, v in reduced.results().items()} == {
        k: v.to_pylist() for k, v in folded.results().items()
    }


def test_merge_into_with_repeated_targets_folds_all_of_them_into_the_target() -> None:
    acc = some_accumulators(5, 3)
    target = ALL.empty(2)
    target.merge_into([1, 1, 1], acc)
    expected = acc.reduce(np.zeros(3, dtype=np.int64), 1).results()
    assert target.results()["count"].to_pylist() == [0] + expected["count"].to_pylist()
    assert target.results()["first_v"][1] == expected["first_v"][0]
    assert target.results()["sum_v"][0].as_py() is None


def test_accumulators_pickle_to_equal_results() -> None:
    acc = some_accumulators(9, 5)
    copy = pickle.loads(pickle.dumps(acc))
    assert copy.aggregation == acc.aggregation
    assert {k: v.to_pylist() for k, v in copy.results().items()} == {
        k: v.to_pylist() for k, v in acc.results().items()
    }


def test_empty_windows_count_zero_and_have_null_values() -> None:
    res = ALL.empty(2).results()
    assert res["count"].to_pylist() == [0, 0] and res["count_v"].to_pylist() == [0, 0]
    for name in ("sum_v", "min_v", "max_v", "mean_v", "first_v", "last_v"):
        assert res[name].to_pylist() == [None, None]


def test_first_and_last_follow_timestamps_and_break_ties_by_arrival() -> None:
    batch = pa.record_batch({"v": pa.array(["a", "b", "c", "d", "e"])})
    ts = np.array([5, 3, 3, 9, 9])
    aggr = WindowAggregation.of(agg.first("v"), agg.last("v"))
    acc = aggr.partial(batch, np.zeros(5, dtype=np.int64), 1, timestamps=ts)
    assert acc.results()["first_v"].to_pylist() == ["b"]
    assert acc.results()["last_v"].to_pylist() == ["e"]
    # across merges the running side counts as the earlier arrival
    later = aggr.partial(
        pa.record_batch({"v": pa.array(["x"])}), np.zeros(1, np.int64), 1, timestamps=np.array([3])
    )
    merged = acc.merge(later).results()
    assert merged["first_v"].to_pylist() == ["b"] and merged["last_v"].to_pylist() == ["e"]
    latest = aggr.partial(
        pa.record_batch({"v": pa.array(["y"])}), np.zeros(1, np.int64), 1, timestamps=np.array([9])
    )
    assert acc.merge(latest).results()["last_v"].to_pylist() == ["y"]


def test_columns_keep_their_types_and_sums_of_ints_stay_exact_int64() -> None:
    big = 2**60
    batch = pa.record_batch(
        {
            "i32": pa.array([3, -7, 5], pa.int32()),
            "i64": pa.array([big, big, 1], pa.int64()),
            "u8": pa.array([200, 100, 250], pa.uint8()),
            "b": pa.array([True, False, True]),
            "t": pa.array([1000, 3000, 2000], pa.timestamp("ms")),
            "s": pa.array(["p", "q", None]),
        }
    )
    aggr = WindowAggregation.of(
        agg.min("i32"),
        agg.sum("i64"),
        agg.sum("u8"),
        agg.sum("b"),
        agg.max("b"),
        agg.max("t"),
        agg.first("t"),
        agg.last("s"),
        agg.count("s"),
    )
    res = aggr.partial(batch, np.zeros(3, np.int64), 1, timestamps=np.array([1, 2, 3])).results()
    assert res["min_i32"].type == pa.int32() and res["min_i32"].to_pylist() == [-7]
    assert res["sum_i64"].type == pa.int64() and res["sum_i64"].to_pylist() == [2 * big + 1]
    assert res["sum_u8"].type == pa.uint64() and res["sum_u8"].to_pylist() == [550]
    assert res["sum_b"].to_pylist() == [2] and res["max_b"].to_pylist() == [True]
    assert res["max_t"].type == pa.timestamp("ms")
    assert res["max_t"].cast(pa.int64()).to_pylist() == [3000]
    assert res["first_t"].cast(pa.int64()).to_pylist() == [1000]
    assert res["last_s"].to_pylist() == ["q"] and res["count_s"].to_pylist() == [2]


def test_a_column_that_widens_between_batches_gives_results_of_the_wider_type() -> None:
    aggr = WindowAggregation.of(agg.sum("v"), agg.max("v"), agg.first("v"))
    one = np.zeros(1, np.int64)
    ints = aggr.partial(
        pa.record_batch({"v": pa.array([2], pa.int64())}), one, 1, timestamps=np.array([1])
    )
    floats = aggr.partial(pa.record_batch({"v": pa.array([2.5])}), one, 1, timestamps=np.array([2]))
    nulls = aggr.partial(pa.record_batch({"v": pa.nulls(1)}), one, 1, timestamps=np.array([0]))
    res = nulls.merge(ints).merge(floats).results()
    assert res["sum_v"].to_pylist() == [4.5] and res["max_v"].to_pylist() == [2.5]
    assert res["first_v"].to_pylist() == [2.0]
    only_ints = nulls.merge(ints).results()
    assert only_ints["sum_v"].type == pa.int64() and only_ints["max_v"].type == pa.int64()


def test_a_column_that_changes_to_an_incompatible_type_is_rejected() -> None:
    aggr = WindowAggregation.of(agg.first("v"))
    one = np.zeros(1, np.int64)
    a = aggr.partial(pa.record_batch({"v": pa.array(["x"])}), one, 1, timestamps=[1])
    b = aggr.partial(pa.record_batch({"v": pa.array([1])}), one, 1, timestamps=[1])
    with pytest.raises(ConfigurationError, match="changed type from string to int64"):
        a.merge(b)


def test_nan_is_a_value_that_propagates_while_nulls_are_skipped() -> None:
    batch = pa.record_batch({"v": pa.array([1.0, float("nan"), None, 3.0])})
    aggr = WindowAggregation.of(agg.sum("v"), agg.min("v"), agg.count("v"), agg.mean("v"))
    res = aggr.partial(batch, np.zeros(4, np.int64), 1).results()
    assert np.isnan(res["sum_v"][0].as_py()) and np.isnan(res["min_v"][0].as_py())
    assert res["count_v"].to_pylist() == [3]
    clean = aggr.partial(batch.slice(2, 2), np.zeros(2, np.int64), 1).results()
    assert clean["sum_v"].to_pylist() == [3.0] and clean["mean_v"].to_pylist() == [3.0]


def test_row_batches_and_scalar_batches_are_aggregated_too() -> None:
    aggr = WindowAggregation.of(agg.sum("v"), agg.max("w"))
    rows = RowBatch([{"v": 1, "w": "a"}, {"v": 2, "w": "c"}, {"v": 4, "w": "b"}])
    with pytest.raises(ConfigurationError, match="needs a numeric, bool or temporal column"):
        aggr.partial(rows, np.array([0, 1, 0]), 2)
    res = WindowAggregation.of(agg.sum("v")).partial(rows, np.array([0, 1, 0]), 2).results()
    assert res["sum_v"].to_pylist() == [5, 2]
    scalars = scalar_batch([1.5, 2.5])
    assert WindowAggregation.of(agg.sum("value")).partial(
        scalars, np.zeros(2, np.int64), 1
    ).results()["sum_value"].to_pylist() == [4.0]


@pytest.mark.parametrize("span", ["dense", "hashed", "sorted"])
def test_grouping_puts_rows_in_one_group_exactly_when_key_and_window_agree(span) -> None:
    rng = np.random.default_rng(11)
    n = 2000
    keys = rng.integers(0, 50, n)
    starts = rng.integers(0, 20, n) * 1000 + 7
    if span == "hashed":
        starts = starts * 7919 + rng.integers(0, 3, n)  # no common step, wide range
    if span == "sorted":
        keys = keys * (2**40)
        starts = starts * (2**30) + rng.integers(0, 3, n)
    groups = group_keys_and_windows(keys, starts)
    pairs = list(zip(keys.tolist(), starts.tolist()))
    assert groups.num_groups == len(set(pairs))
    seen: dict[int, tuple[int, int]] = {}
    for g, p in zip(groups.group_ids.tolist(), pairs):
        assert seen.setdefault(g, p) == p
    window_major = sorted(set(pairs), key=lambda p: (p[1], p[0]))  # by window, then key
    assert [pairs[i] for i in groups.first_row.tolist()] == window_major
    first_seen = {}
    for i, p in enumerate(pairs):
        first_seen.setdefault(p, i)
    assert groups.first_row.tolist() == [first_seen[p] for p in window_major]


def test_result_batches_carry_keys_window_bounds_and_aggregates() -> None:
    acc = some_accumulators(1, 2)
    out = window_result_batch(
        {"k": pa.array(["a", "b"])}, np.array([0, 10]), np.array([10, 20]), acc
    )
    assert out.schema.names == ["k", "window_start", "window_end", *ALL.names]
    assert out.column("window_end").to_pylist() == [10, 20]
    with pytest.raises(ConfigurationError, match="collide"):
        window_result_batch({"count": pa.array([1, 2])}, np.array([0, 1]), np.array([1, 2]), acc)


def test_default_output_names_follow_kind_and_column_and_can_be_overridden() -> None:
    assert agg.count().name == "count" and agg.count("v").name == "count_v"
    assert agg.sum("v").name == "sum_v" and agg.last("price").name == "last_price"
    assert agg.mean("v", name="avg") == WindowAggregate("mean", "v", "avg")


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda: WindowAggregation.of(), "at least one aggregate"),
        (lambda: WindowAggregation.of(agg.sum("v"), agg.sum("v")), "two aggregates write"),
        (lambda: WindowAggregation.of(agg.max("v", name="window_end")), "window bound column"),
        (lambda: WindowAggregation.of("sum"), "takes lg.agg"),
        (lambda: agg.sum(""), "non-empty string"),
        (lambda: agg.sum("v", name=""), "name must be a non-empty string"),
        (lambda: WindowAggregate("median", "v", "m"), "unknown window aggregate"),
        (lambda: WindowAggregate("sum", None, "s"), "needs a column name"),
    ],
)
def test_bad_aggregate_declarations_are_rejected(make, needle) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        make()


def test_aggregating_a_missing_or_unsuitable_column_names_it_and_the_fix() -> None:
    batch = pa.record_batch({"k": [1, 2], "name": ["a", "b"]})
    groups = np.array([0, 0])
    with pytest.raises(ConfigurationError, match=r"no column 'v'.*\['k', 'name'\]"):
        WindowAggregation.of(agg.sum("v")).partial(batch, groups, 1)
    with pytest.raises(ConfigurationError, match="numeric or bool column.*'name' is string"):
        WindowAggregation.of(agg.mean("name")).partial(batch, groups, 1)
    with pytest.raises(ConfigurationError, match="need the records' timestamps"):
        WindowAggregation.of(agg.first("name")).partial(batch, groups, 1)
    with pytest.raises(ConfigurationError, match="group ids"):
        WindowAggregation.of(agg.count()).partial(batch, np.array([0]), 1)
    with pytest.raises(ConfigurationError, match=r"group ids must lie in \[0, 1\)"):
        WindowAggregation.of(agg.count()).partial(batch, np.array([0, 1]), 1)


def test_dictionary_encoded_columns_aggregate_as_their_values() -> None:
    batch = pa.record_batch({"v": pa.array(["b", "a", "b"]).dictionary_encode()})
    res = (
        WindowAggregation.of(agg.first("v"), agg.last("v"))
        .partial(batch, np.zeros(3, np.int64), 1, timestamps=np.array([2, 1, 3]))
        .results()
    )
    assert res["first_v"].to_pylist() == ["a"] and res["last_v"].to_pylist() == ["b"]
    assert res["first_v"].type == pa.string()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), floats=st.booleans(), null_rate=st.sampled_from([0, 0.3, 1]))
def test_a_partial_merged_into_empty_rows_is_the_partial_itself(seed, floats, null_rate) -> None:
    """A new window's rows are a batch's partials as they are (``AlignedStore.add``
    skips merging them into empty rows): that merge must be the identity, field by
    field, dtype and Arrow type included."""
    batch, ts = random_batch(seed, 80, floats=floats, null_rate=null_rate)
    rng = np.random.default_rng(seed + 7)
    part = ALL.partial(batch, rng.integers(0, 9, 80), 9, timestamps=ts)
    merged = ALL.empty(9).merge(part)
    assert merged.types == part.types
    for mine, theirs in zip(merged.fields, part.fields):
        for m, t in zip(mine, theirs):
            assert m.dtype == t.dtype
            np.testing.assert_array_equal(m, t)
            if m.dtype.kind == "f":  # -0.0 stays -0.0
                assert np.array_equal(np.signbit(m), np.signbit(t))


def test_slices_and_concat_of_one_form_give_the_rows_in_order() -> None:
    acc = some_accumulators(3, 12)
    parts = [acc.slice(0, 5), acc.slice(5, 5), acc.slice(5, 12)]
    whole = Accumulators.concat(parts)
    assert {k: v.to_pylist() for k, v in whole.results().items()} == {
        k: v.to_pylist() for k, v in acc.results().items()
    }
    other = some_accumulators(4, 3).take([2, 0])  # same form: concatenated as is
    both = Accumulators.concat([acc.slice(0, 2), other])
    assert both.results()["count"].to_pylist() == (
        acc.results()["count"].to_pylist()[:2] + other.results()["count"].to_pylist()
    )

"""The interval join operator driven directly, and the API's argument checks.

Bound semantics (inclusive, exclusive, negative lower bounds) on both paths; late
records dropped and counted, or sent to side outputs; state cleaned up as the
combined watermark passes each record's bound (M-W5) so that it stays bounded on a
long stream; 200,000 records per side with disorder and late records against a
pandas oracle; snapshots restored at the same and at another parallelism by key
group (M-T4).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import lockgate as lg
from lockgate.core.batch import with_timestamps
from lockgate.core.elements import MAX_WATERMARK, Watermark
from lockgate.core.key_groups import key_group_range, key_groups_of_keys
from lockgate.errors import ConfigurationError
from lockgate.runtime.operators.join.interval_join import LATE_RECORDS_DROPPED
from lockgate.testing import OperatorHarness, OperatorSnapshot

MAXP = 128


class Pairs(lg.ProcessJoinFunction):
    """The row path's output: the same fields the vectorized join gives."""

    def process_element(self, left: Any, right: Any, ctx: Any) -> Any:
        assert ctx.timestamp == max(ctx.left_timestamp, ctx.right_timestamp)
        yield {"k": left["k"], "ts_left": left["ts"], "ts_right": right["ts"], "t": ctx.timestamp}


def make(
    lower: int,
    upper: int,
    *,
    vectorized: bool = True,
    late_tags: tuple[str | None, str | None] = (None, None),
    subtask: int = 0,
    parallelism: int = 1,
    restored: Any = None,
) -> OperatorHarness:
    """The join of ``k`` with ``k``, opened: input 1 is the left side, input 2 the right."""
    h = OperatorHarness.for_interval_join(
        lower,
        upper,
        key1="k",
        key2="k",
        fn=None if vectorized else Pairs(),
        late_tags=late_tags,
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=MAXP,
        name="join",
        uid="join",
    )
    return h.open(restored=restored)


def side(keys: Any, ts: Any) -> pa.RecordBatch:
    keys = np.asarray(keys, dtype=np.int64)
    ts = np.asarray(ts, dtype=np.int64)
    b = pa.RecordBatch.from_arrays([pa.array(keys), pa.array(ts)], names=["k", "ts"])
    return with_timestamps(b, ts)


def wm(h: OperatorHarness, t: int, inputs: tuple[int, ...] = (1, 2)) -> None:
    for i in inputs:
        h.process_watermark(t, input=i)


def pairs(h: OperatorHarness) -> set[tuple[int, int, int]]:
    return {(r["k"], r["ts_left"], r["ts_right"]) for r in h.output}


PATHS = [pytest.param(True, id="vectorized"), pytest.param(False, id="rows")]


# -- bounds ------------------------------------------------------------------------------
@pytest.mark.parametrize("vectorized", PATHS)
@pytest.mark.parametrize("right_first", [False, True])
@pytest.mark.parametrize(
    ("lower", "upper", "lower_excl", "upper_excl"),
    [(-10, 20, False, False), (-10, 20, True, True), (5, 5, False, False), (-20, -5, False, True)],
)
def test_bounds_are_inclusive_unless_exclusive_and_may_be_negative(
    vectorized: bool, right_first: bool, lower: int, upper: int, lower_excl: bool, upper_excl: bool
) -> None:
    """tl + lower <= tr <= tl + upper (strict where exclusive); the output time is max."""
    lo, hi = lower + lower_excl, upper - upper_excl
    h = make(lo, hi, vectorized=vectorized)
    offsets = np.arange(-30, 31)
    left = side([1], [100])
    right = side(np.r_[np.ones(len(offsets)), [2]], np.r_[100 + offsets, [100]])
    for b, i in ((right, 2), (left, 1)) if right_first else ((left, 1), (right, 2)):
        h.process(b, input=i)
    expected = {
        (1, 100, 100 + int(d))
        for d in offsets
        if (lower < d if lower_excl else lower <= d) and (d < upper if upper_excl else d <= upper)
    }
    assert pairs(h) == expected
    assert sorted(h.timestamps) == sorted(max(100, tr) for _, _, tr in expected)


def test_the_vectorized_output_merges_columns_with_suffixes() -> None:
    h = OperatorHarness.for_interval_join(0, 0, key1="k", key2="k", suffixes=("_a", "_b"))
    h.open()
    left = pa.RecordBatch.from_pylist([{"k": 1, "v": 10, "only_left": "x"}])
    right = pa.RecordBatch.from_pylist([{"k": 1, "v": 20, "only_right": 2.5}])
    h.process(with_timestamps(left, np.array([7])), input=1)
    h.process(with_timestamps(right, np.array([7])), input=2)
    assert h.output == [{"k": 1, "v_a": 10, "only_left": "x", "v_b": 20, "only_right": 2.5}]


# -- late records and cleanup -------------------------------------------------------------
@pytest.mark.parametrize("vectorized", PATHS)
def test_late_records_are_dropped_and_counted_or_go_to_side_outputs(vectorized: bool) -> None:
    """The combined watermark (the minimum of both inputs', M-W5) decides lateness:
    a record below it is late."""
    h = make(-10, 10, vectorized=vectorized)
    h.process(side([1], [100]), input=2)
    wm(h, 200, (1,))  # the right input still holds the operator's watermark back
    h.process(side([1], [95]), input=1)  # not late: the right input is at MIN
    assert pairs(h) == {(1, 95, 100)}
    wm(h, 150, (2,))  # combined: 150
    h.process(side([1, 1], [149, 150]), input=1)  # 149 is late, 150 is not
    assert h.operator.counters.side_out[LATE_RECORDS_DROPPED] == 1
    assert h.operator.late_records_dropped == 1

    h = make(-10, 10, vectorized=vectorized, late_tags=("late-l", "late-r"))
    wm(h, 50)
    h.process(side([1, 2], [40, 60]), input=1)
    h.process(side([3], [10]), input=2)
    assert [r["ts"] for r in h.side_output("late-l")] == [40]
    assert [r["ts"] for r in h.side_output("late-r")] == [10]
    assert LATE_RECORDS_DROPPED not in h.operator.counters.side_out


@pytest.mark.parametrize("vectorized", PATHS)
def test_a_record_is_kept_until_the_watermark_passes_its_bound(vectorized: bool) -> None:
    """Left at tl is kept while wm <= tl + upper, right at tr while wm <= tr - lower:
    exactly until no record that is not late can join it."""
    h = make(-5, 20, vectorized=vectorized)
    h.process(side([1], [100]), input=1)
    h.process(side([1], [100]), input=2)
    wm(h, 105)  # right kept until 105, left until 120
    assert h.operator.buffered_rows() == 2
    wm(h, 106)
    assert h.operator.buffered_rows() == 1
    h.process(side([1], [120]), input=2)  # not late (120 >= 106) and joins the left
    assert (1, 100, 120) in pairs(h)
    wm(h, 121)
    assert h.operator.buffered_rows() == 1, "the left at 100 expired (kept while wm <= 120)"
    wm(h, 125)
    assert h.operator.buffered_rows() == 1, "the right at 120 is kept while wm <= 125"
    wm(h, 126)
    assert h.operator.buffered_rows() == 0
    wm(h, MAX_WATERMARK)
    assert h.elements[-1] == Watermark(MAX_WATERMARK)


def oracle(left: pd.DataFrame, right: pd.DataFrame, lower: int, upper: int) -> Counter[Any]:
    """Every (key, left time, right time) pair, as often as pandas produces it."""
    m = left.merge(right, on="k", suffixes=("_left", "_right"))
    m = m[(m.ts_right >= m.ts_left + lower) & (m.ts_right <= m.ts_left + upper)]
    return Counter(zip(m.k.tolist(), m.ts_left.tolist(), m.ts_right.tolist()))


@pytest.mark.parametrize("vectorized", PATHS)
def test_200k_records_per_side_with_disorder_and_late_records_equal_pandas(
    vectorized: bool,
) -> None:
    """Both inputs arrive in batches of 2,000 with up to 300 ms of disorder and a
    bounded-out-of-orderness watermark after each batch; every 50th record is 2 s
    behind (late, given the watermarks). The output is the pandas merge + time filter
    over the records that were not late, and the buffers never exceed rate x (lag +
    width)."""
    n, keys, lower, upper, disorder = 200_000, 5000, -40, 60, 300
    rng = np.random.default_rng(7)
    frames = []
    h = make(lower, upper, vectorized=vectorized)
    watermarks = [0, 0]
    accepted: list[list[pd.DataFrame]] = [[], []]
    late_total = 0
    for _side in (0, 1):
        i = np.arange(n)
        ts = i // 2 + rng.integers(0, disorder, n)
        ts[i % 50 == 7] -= 2000
        frames.append(pd.DataFrame({"k": rng.integers(0, keys, n), "ts": ts}))
    per_batch = 2000
    max_buffered = 0
    for start in range(0, n, per_batch):
        for s in (0, 1):
            chunk = frames[s].iloc[start : start + per_batch]
            combined = min(watermarks)
            late = chunk.ts < combined if combined > 0 else chunk.ts < -(2**62)
            late_total += int(late.sum())
            accepted[s].append(chunk[~late])
            h.process(side(chunk.k, chunk.ts), input=s + 1)
            watermarks[s] = max(watermarks[s], int(chunk.ts.max()) - disorder)
            h.process_watermark(watermarks[s], input=s + 1)
            max_buffered = max(max_buffered, h.operator.buffered_rows())
    wm(h, MAX_WATERMARK)
    assert h.operator.counters.side_out[LATE_RECORDS_DROPPED] == late_total > 0
    expected = oracle(pd.concat(accepted[0]), pd.concat(accepted[1]), lower, upper)
    got = Counter((r["k"], r["ts_left"], r["ts_right"]) for r in h.output)
    assert sum(got.values()) == sum(expected.values())
    assert got == expected, "each pair exactly as often as pandas has it"
    # 2 records/ms per side; kept for the watermark lag (disorder + a batch's 1000 ms)
    # plus the interval width: far below the input size, whatever its length
    bound = 2 * 2 * (disorder + per_batch // 2 + (upper - lower) + disorder)
    assert max_buffered <= h.operator.max_buffered_rows <= bound
    assert h.operator.buffered_rows() == 0


@pytest.mark.parametrize("vectorized", PATHS)
def test_state_stays_bounded_over_a_long_unbounded_run(vectorized: bool) -> None:
    """A million records per side in order with watermarks: the buffered records
    never exceed rate x (watermark lag + interval width), however long it runs."""
    h = make(-100, 100, vectorized=vectorized)
    per_batch, rate = 10_000 if vectorized else 2_000, 10  # records per ms
    total = 1_000_000 if vectorized else 100_000
    keys = np.arange(per_batch) % 997
    for start in range(0, total, per_batch):
        ts = (np.arange(start, start + per_batch) // rate).astype(np.int64)
        for s in (0, 1):
            h.process(side(keys, ts), input=s + 1)
            h.process_watermark(int(ts.max()) - 50, input=s + 1)
        assert h.operator.buffered_rows() <= 2 * rate * (per_batch // rate + 50 + 100 + 1)
    assert h.operator.max_buffered_rows > 0


# -- snapshots and restores (M-T3, M-T4) ---------------------------------------------------
@pytest.mark.parametrize("vectorized", PATHS)
def test_state_moves_by_key_group_when_restored_at_another_parallelism(vectorized: bool) -> None:
    """Two subtasks buffer their keys' records and snapshot; three new subtasks take
    the records of their key groups: every later pair is produced exactly once, by the
    subtask that owns the key."""
    keys = np.arange(200)
    groups = key_groups_of_keys(keys.tolist(), MAXP)
    snapshots: list[OperatorSnapshot] = []
    for sub in range(2):
        h = make(-10, 10, vectorized=vectorized, subtask=sub, parallelism=2)
        r = key_group_range(sub, 2, MAXP)
        mine = keys[(groups >= r.start) & (groups < r.stop)]
        h.process(side(mine, np.full(len(mine), 100)), input=1)
        wm(h, 95)
        snap = h.begin_snapshot()
        h.process(side(mine, np.full(len(mine), 101)), input=1)  # after: not in it
        snapshots.append(snap.complete())
    got: list[tuple[int, int, int]] = []
    for sub in range(3):
        h = make(
            -10, 10, vectorized=vectorized, subtask=sub, parallelism=3,
            restored=snapshots,
        )  # fmt: skip
        r = key_group_range(sub, 3, MAXP)
        mine = keys[(groups >= r.start) & (groups < r.stop)]
        assert h.operator.buffered_rows() == len(mine)
        h.process(side(mine, np.full(len(mine), 105)), input=2)
        h.process(side(mine, np.full(len(mine), 90)), input=2)  # late: restored wm 95
        assert h.operator.counters.side_out[LATE_RECORDS_DROPPED] == len(mine)
        got.extend(pairs(h))
    assert sorted(got) == sorted((int(k), 100, 105) for k in keys)


def test_a_snapshot_is_not_changed_by_later_records() -> None:
    h = make(-10, 10, vectorized=False)
    h.process(side([1], [100]), input=1)
    snap = h.begin_snapshot()
    h.process(side([1, 2], [100, 100]), input=1)
    state = snap.complete().state()["function"]
    assert len(state["sides"][0]["key_groups"]) == 1


# -- API ----------------------------------------------------------------------------------
def streams() -> tuple[Any, Any]:
    env = lg.StreamEnvironment()
    ws = lg.WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts")
    a = env.from_collection([{"k": 1, "ts": 1}], watermark_strategy=ws)
    b = env.from_collection([{"k": 1, "ts": 1}], watermark_strategy=ws)
    return a, b


class NoMethod(lg.ProcessJoinFunction):
    pass


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda a, b: a.key_by("k").interval_join(b), "key the other side"),
        (lambda a, b: a.key_by("k").interval_join(b.key_by("k")).between(10, 5), "swap them"),
        (lambda a, b: a.key_by("k").interval_join(b.key_by("k")).between(1.5, 5), "timedelta"),
        (
            lambda a, b: (
                a.key_by("k")
                .interval_join(b.key_by("k"))
                .between(5, 5)
                .lower_bound_exclusive()
                .process()
            ),
            "bounds are empty",
        ),
        (
            lambda a, b: a.key_by("k").interval_join(b.key_by("k")).between(0, 5).process(Pairs),
            "pass Pairs(...)",
        ),
        (
            lambda a, b: (
                a.key_by("k").interval_join(b.key_by("k")).between(0, 5).process(NoMethod())
            ),
            "process_element",
        ),
        (
            lambda a, b: (
                a.key_by(lambda r: r["k"]).interval_join(b.key_by("k")).between(0, 5).process()
            ),
            "ProcessJoinFunction",
        ),
        (
            lambda a, b: (
                a.key_by("k")
                .interval_join(b.key_by("k"))
                .between(0, 5)
                .side_output_late_data(lg.OutputTag("x"), lg.OutputTag("x"))
            ),
            "own OutputTag",
        ),
    ],
)
def test_bad_input_is_refused_with_a_way_to_fix_it(build: Any, message: str) -> None:
    a, b = streams()
    with pytest.raises(ConfigurationError, match=message):
        build(a, b)


def test_timedelta_bounds_are_milliseconds() -> None:
    from datetime import timedelta

    a, b = streams()
    joined = (
        a.key_by("k")
        .interval_join(b.key_by("k"))
        .between(timedelta(seconds=-1), timedelta(milliseconds=500))
    )
    assert joined.upper_bound_exclusive().bounds() == (-1000, 499)

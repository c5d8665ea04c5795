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
from lockgate.core.batch import timestamps_of, to_rows, user_view, with_timestamps
from lockgate.core.elements import MAX_WATERMARK, Watermark
from lockgate.core.key_groups import key_group_range, key_groups_of_keys
from lockgate.core.partitioners import KeySelector
from lockgate.errors import ConfigurationError
from lockgate.runtime.context import RuntimeContext
from lockgate.runtime.operators.base import Output
from lockgate.runtime.operators.join.interval_join import LATE_RECORDS_DROPPED, IntervalJoinOperator

MAXP = 128


class Collect(Output):
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.stamps: list[int] = []
        self.side: dict[str, list[Any]] = {}
        self.elements: list[Any] = []

    def emit(self, batch: Any) -> None:
        self.rows.extend(to_rows(batch))
        self.stamps.extend(timestamps_of(batch).tolist())

    def emit_side(self, tag: str, batch: Any) -> None:
        self.side.setdefault(tag, []).extend(to_rows(user_view(batch)))

    def emit_element(self, element: Any) -> None:
        self.elements.append(element)


class Restored:
    def __init__(self, payloads: list[Any], subtask: int, parallelism: int) -> None:
        self.payloads = payloads
        self.subtask = subtask
        self.parallelism = parallelism

    @property
    def same_parallelism(self) -> bool:
        return len(self.payloads) == self.parallelism

    def own(self) -> Any:
        return self.payloads[self.subtask]

    def all(self) -> list[Any]:
        return list(self.payloads)


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
) -> tuple[IntervalJoinOperator, Collect]:
    op = IntervalJoinOperator(
        KeySelector("k"),
        KeySelector("k"),
        lower,
        upper,
        None if vectorized else Pairs(),
        late_tags=late_tags,
    )
    ctx = RuntimeContext(
        task_name="t",
        operator_name="join",
        operator_uid="join",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=MAXP,
        clock=lg.ManualClock(start_ms=0),
    )
    out = Collect()
    op.setup("join", "join", ctx, out)
    op.initialize_state(restored)
    op.open()
    return op, out


def side(keys: Any, ts: Any) -> pa.RecordBatch:
    keys = np.asarray(keys, dtype=np.int64)
    ts = np.asarray(ts, dtype=np.int64)
    b = pa.RecordBatch.from_arrays([pa.array(keys), pa.array(ts)], names=["k", "ts"])
    return with_timestamps(b, ts)


def wm(op: IntervalJoinOperator, t: int, inputs: tuple[int, ...] = (0, 1)) -> None:
    for i in inputs:
        op.process_watermark(Watermark(t), i)


def pairs(out: Collect) -> set[tuple[int, int, int]]:
    return {(r["k"], r["ts_left"], r["ts_right"]) for r in out.rows}


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
    op, out = make(lo, hi, vectorized=vectorized)
    offsets = np.arange(-30, 31)
    left = side([1], [100])
    right = side(np.r_[np.ones(len(offsets)), [2]], np.r_[100 + offsets, [100]])
    for b, i in ((right, 1), (left, 0)) if right_first else ((left, 0), (right, 1)):
        op.process_batch(b, i)
    expected = {
        (1, 100, 100 + int(d))
        for d in offsets
        if (lower < d if lower_excl else lower <= d) and (d < upper if upper_excl else d <= upper)
    }
    assert pairs(out) == expected
    assert sorted(out.stamps) == sorted(max(100, tr) for _, _, tr in expected)


def test_the_vectorized_output_merges_columns_with_suffixes() -> None:
    op = IntervalJoinOperator(KeySelector("k"), KeySelector("k"), 0, 0, suffixes=("_a", "_b"))
    ctx = RuntimeContext(
        task_name="t", operator_name="j", operator_uid="j", subtask_index=0,
        parallelism=1, max_parallelism=MAXP, clock=lg.ManualClock(start_ms=0),
    )  # fmt: skip
    out = Collect()
    op.setup("j", "j", ctx, out)
    op.initialize_state(None)
    op.open()
    left = pa.RecordBatch.from_pylist([{"k": 1, "v": 10, "only_left": "x"}])
    right = pa.RecordBatch.from_pylist([{"k": 1, "v": 20, "only_right": 2.5}])
    op.process_batch(with_timestamps(left, np.array([7])), 0)
    op.process_batch(with_timestamps(right, np.array([7])), 1)
    assert out.rows == [{"k": 1, "v_a": 10, "only_left": "x", "v_b": 20, "only_right": 2.5}]


# -- late records and cleanup -------------------------------------------------------------
@pytest.mark.parametrize("vectorized", PATHS)
def test_late_records_are_dropped_and_counted_or_go_to_side_outputs(vectorized: bool) -> None:
    """The combined watermark (the minimum of both inputs', M-W5) decides lateness:
    a record below it is late."""
    op, out = make(-10, 10, vectorized=vectorized)
    op.process_batch(side([1], [100]), 1)
    wm(op, 200, (0,))  # the right input still holds the operator's watermark back
    op.process_batch(side([1], [95]), 0)  # not late: the right input is at MIN
    assert pairs(out) == {(1, 95, 100)}
    wm(op, 150, (1,))  # combined: 150
    op.process_batch(side([1, 1], [149, 150]), 0)  # 149 is late, 150 is not
    assert op.counters.side_out[LATE_RECORDS_DROPPED] == 1
    assert op.late_records_dropped == 1

    op, out = make(-10, 10, vectorized=vectorized, late_tags=("late-l", "late-r"))
    wm(op, 50)
    op.process_batch(side([1, 2], [40, 60]), 0)
    op.process_batch(side([3], [10]), 1)
    assert [r["ts"] for r in out.side["late-l"]] == [40]
    assert [r["ts"] for r in out.side["late-r"]] == [10]
    assert LATE_RECORDS_DROPPED not in op.counters.side_out


@pytest.mark.parametrize("vectorized", PATHS)
def test_a_record_is_kept_until_the_watermark_passes_its_bound(vectorized: bool) -> None:
    """Left at tl is kept while wm <= tl + upper, right at tr while wm <= tr - lower:
    exactly until no record that is not late can join it."""
    op, out = make(-5, 20, vectorized=vectorized)
    op.process_batch(side([1], [100]), 0)
    op.process_batch(side([1], [100]), 1)
    wm(op, 105)  # right kept until 105, left until 120
    assert op.buffered_rows() == 2
    wm(op, 106)
    assert op.buffered_rows() == 1
    op.process_batch(side([1], [120]), 1)  # not late (120 >= 106) and joins the left
    assert (1, 100, 120) in pairs(out)
    wm(op, 121)
    assert op.buffered_rows() == 1, "the left at 100 expired (kept while wm <= 120)"
    wm(op, 125)
    assert op.buffered_rows() == 1, "the right at 120 is kept while wm <= 125"
    wm(op, 126)
    assert op.buffered_rows() == 0
    wm(op, MAX_WATERMARK)
    assert out.elements[-1] == Watermark(MAX_WATERMARK)


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
    op, out = make(lower, upper, vectorized=vectorized)
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
            op.process_batch(side(chunk.k, chunk.ts), s)
            watermarks[s] = max(watermarks[s], int(chunk.ts.max()) - disorder)
            op.process_watermark(Watermark(watermarks[s]), s)
            max_buffered = max(max_buffered, op.buffered_rows())
    wm(op, MAX_WATERMARK)
    assert op.counters.side_out[LATE_RECORDS_DROPPED] == late_total > 0
    expected = oracle(pd.concat(accepted[0]), pd.concat(accepted[1]), lower, upper)
    got = Counter((r["k"], r["ts_left"], r["ts_right"]) for r in out.rows)
    assert sum(got.values()) == sum(expected.values())
    assert got == expected, "each pair exactly as often as pandas has it"
    # 2 records/ms per side; kept for the watermark lag (disorder + a batch's 1000 ms)
    # plus the interval width: far below the input size, whatever its length
    bound = 2 * 2 * (disorder + per_batch // 2 + (upper - lower) + disorder)
    assert max_buffered <= op.max_buffered_rows <= bound
    assert op.buffered_rows() == 0


@pytest.mark.parametrize("vectorized", PATHS)
def test_state_stays_bounded_over_a_long_unbounded_run(vectorized: bool) -> None:
    """A million records per side in order with watermarks: the buffered records
    never exceed rate x (watermark lag + interval width), however long it runs."""
    op, _ = make(-100, 100, vectorized=vectorized)
    per_batch, rate = 10_000 if vectorized else 2_000, 10  # records per ms
    total = 1_000_000 if vectorized else 100_000
    keys = np.arange(per_batch) % 997
    for start in range(0, total, per_batch):
        ts = (np.arange(start, start + per_batch) // rate).astype(np.int64)
        for s in (0, 1):
            op.process_batch(side(keys, ts), s)
            op.process_watermark(Watermark(int(ts.max()) - 50), s)
        assert op.buffered_rows() <= 2 * rate * (per_batch // rate + 50 + 100 + 1)
    assert op.max_buffered_rows > 0


# -- snapshots and restores (M-T3, M-T4) ---------------------------------------------------
@pytest.mark.parametrize("vectorized", PATHS)
def test_state_moves_by_key_group_when_restored_at_another_parallelism(vectorized: bool) -> None:
    """Two subtasks buffer their keys' records and snapshot; three new subtasks take
    the records of their key groups: every later pair is produced exactly once, by the
    subtask that owns the key."""
    keys = np.arange(200)
    groups = key_groups_of_keys(keys.tolist(), MAXP)
    payloads = []
    for sub in range(2):
        op, _ = make(-10, 10, vectorized=vectorized, subtask=sub, parallelism=2)
        r = key_group_range(sub, 2, MAXP)
        mine = keys[(groups >= r.start) & (groups < r.stop)]
        op.process_batch(side(mine, np.full(len(mine), 100)), 0)
        wm(op, 95)
        snap = op.snapshot_state(1)
        op.process_batch(side(mine, np.full(len(mine), 101)), 0)  # after: not in it
        payloads.append(snap.materialize())
    got: list[tuple[int, int, int]] = []
    for sub in range(3):
        op, out = make(
            -10, 10, vectorized=vectorized, subtask=sub, parallelism=3,
            restored=Restored(payloads, sub, 3),
        )  # fmt: skip
        r = key_group_range(sub, 3, MAXP)
        mine = keys[(groups >= r.start) & (groups < r.stop)]
        assert op.buffered_rows() == len(mine)
        op.process_batch(side(mine, np.full(len(mine), 105)), 1)
        op.process_batch(side(mine, np.full(len(mine), 90)), 1)  # late: restored wm 95
        assert op.counters.side_out[LATE_RECORDS_DROPPED] == len(mine)
        got.extend(pairs(out))
    assert sorted(got) == sorted((int(k), 100, 105) for k in keys)


def test_a_snapshot_is_not_changed_by_later_records() -> None:
    op, _ = make(-10, 10, vectorized=False)
    op.process_batch(side([1], [100]), 0)
    snap = op.snapshot_state(1)
    op.process_batch(side([1, 2], [100, 100]), 0)
    state = snap.materialize()["function"]
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

"""The window operator driven directly: batches and watermarks in, results out.

Firing at ``end - 1`` in end order before the watermark goes on (M-W6), allowed
lateness and late records, processing-time firing on a manual clock, session
merging, snapshots that later processing cannot change (M-T3) and restores at the
same or another parallelism by key group (M-T4), and the API's argument checks.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import lockgate as lg
from lockgate.api.functions import ProcessWindowFunction
from lockgate.core.batch import RowBatch, to_rows, with_timestamps
from lockgate.core.elements import MAX_WATERMARK, StreamStatus, Watermark
from lockgate.core.key_groups import key_group_for, subtask_for_key
from lockgate.errors import ConfigurationError, UserFunctionError
from lockgate.runtime.operators.window.operator import LATE_RECORDS_DROPPED
from lockgate.testing import OperatorHarness, OperatorSnapshot, OutputBatch

MAXP = 128


def make(
    assigner: Any,
    *,
    aggregate: Any = None,
    reduce: Any = None,
    process: Any = None,
    key: Any = "k",
    lateness: int = 0,
    late_tag: str | None = None,
    clock: Any = None,
    subtask: int = 0,
    parallelism: int = 1,
    restored: Any = None,
) -> OperatorHarness:
    """The window operator, opened (``lg.agg.count()`` unless a function is given)."""
    if aggregate is None and reduce is None and process is None:
        aggregate = lg.agg.count()
    h = OperatorHarness.for_window(
        assigner,
        key=key,
        aggregate=aggregate,
        reduce=reduce,
        process=process,
        allowed_lateness=lateness,
        late_tag=late_tag,
        clock=clock or lg.ManualClock(start_ms=0),
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=MAXP,
        name="win",
        uid="win",
    )
    return h.open(restored=restored)


def sides(h: OperatorHarness) -> list[tuple[Any, ...]]:
    """Each side-output batch, in order: ("side", tag, records, timestamps)."""
    return [
        ("side", e.tag, e.records, e.timestamps)
        for e in h.elements
        if isinstance(e, OutputBatch) and e.tag is not None
    ]


def main_batches(h: OperatorHarness) -> list[tuple[list[Any], list[int] | None]]:
    """Each main-output batch, in order: (records, timestamps)."""
    return [
        (e.records, e.timestamps)
        for e in h.elements
        if isinstance(e, OutputBatch) and e.tag is None
    ]


def batch(rows: list[dict[str, Any]], ts: list[int] | None = None) -> pa.RecordBatch:
    b = pa.RecordBatch.from_pylist(rows)
    stamps = ts if ts is not None else [r["ts"] for r in rows]
    return with_timestamps(b, np.asarray(stamps, dtype=np.int64))


def recs(*pairs: tuple[Any, int], **extra: Any) -> pa.RecordBatch:
    return batch([{"k": k, "ts": t, **extra} for k, t in pairs])


def tumbling(size: int = 1000) -> Any:
    return lg.TumblingEventTimeWindows.of(size)


def wm(h: OperatorHarness, t: int) -> None:
    h.process_watermark(t)


# -- event-time firing (M-W6) ------------------------------------------------------------
def test_a_window_fires_when_the_watermark_reaches_its_end_minus_one_M_W6() -> None:
    h = make(tumbling())
    h.process(recs(("a", 10), ("b", 500), ("a", 999), ("a", 1000)))
    wm(h, 998)
    assert h.output == []
    wm(h, 999)
    got = h.output
    assert sorted((r["k"], r["window_start"], r["window_end"], r["count"]) for r in got) == [
        ("a", 0, 1000, 2),
        ("b", 0, 1000, 1),
    ]
    batches = main_batches(h)
    assert all(ts == [999] * len(rows) for rows, ts in batches), "results carry end - 1"
    # the results come before the watermark that fired them (M-W6)
    kinds = [e if isinstance(e, (Watermark, StreamStatus)) else "batch" for e in h.elements]
    assert kinds == [Watermark(998), "batch", Watermark(999)]


def test_windows_fire_in_end_order_and_each_fires_once_M_W6() -> None:
    h = make(tumbling())
    h.process(recs(("a", 2500), ("a", 100), ("a", 1200), ("b", 2999)))
    wm(h, 5000)
    starts = [r["window_start"] for r in h.take_output()]
    assert starts == [0, 1000, 2000, 2000]
    wm(h, 6000)
    assert h.output == []


def test_sliding_windows_give_each_record_every_window_holding_it() -> None:
    h = make(
        lg.SlidingEventTimeWindows.of(3000, 1000),
        aggregate=[lg.agg.count(), lg.agg.sum("v")],
    )
    h.process(batch([{"k": "a", "ts": 2500, "v": 1}, {"k": "a", "ts": 3100, "v": 10}]))
    wm(h, MAX_WATERMARK)
    got = [(r["window_start"], r["count"], r["sum_v"]) for r in h.output]
    assert got == [(0, 1, 1), (1000, 2, 11), (2000, 2, 11), (3000, 1, 10)]


def test_session_windows_merge_when_a_record_bridges_the_gap() -> None:
    h = make(
        lg.EventTimeSessionWindows.with_gap(100),
        aggregate=[lg.agg.count(), lg.agg.min("ts")],
    )
    h.process(recs(("a", 0), ("a", 150), ("b", 0)))
    h.process(recs(("a", 90)))  # [90, 190) touches [0, 100) and [150, 250)
    wm(h, MAX_WATERMARK)
    got = sorted(
        (r["k"], r["window_start"], r["window_end"], r["count"], r["min_ts"]) for r in h.output
    )
    assert got == [("a", 0, 250, 3, 0), ("b", 0, 100, 1, 0)]


def test_a_record_without_an_event_timestamp_fails_instead_of_being_dropped() -> None:
    h = make(tumbling())
    with pytest.raises(ConfigurationError, match="watermark_strategy"):
        h.process(pa.RecordBatch.from_pylist([{"k": "a", "ts": 1}]))
    with pytest.raises(ConfigurationError, match="without a timestamp|int64 range"):
        h.process(batch([{"k": "a"}], ts=[-(2**63)]))


# -- lateness ----------------------------------------------------------------------------
def test_late_records_within_allowed_lateness_fire_the_window_again_with_the_update() -> None:
    h = make(tumbling(), lateness=500, late_tag="late")
    h.process(recs(("a", 100), ("a", 200)))
    wm(h, 1200)
    assert [r["count"] for r in h.take_output()] == [2]
    h.process(recs(("a", 300), ("b", 400)))  # late, but within the lateness
    assert sorted((r["k"], r["count"]) for r in h.take_output()) == [("a", 3), ("b", 1)]
    wm(h, 1498)
    h.process(recs(("a", 500)))
    assert [r["count"] for r in h.take_output()] == [4]
    wm(h, 1499)  # end - 1 + lateness: the state is dropped
    h.process(recs(("a", 600), ("a", 1600)))
    side = sides(h)
    assert side == [("side", "late", [{"k": "a", "ts": 600}], [600])]
    assert h.operator.counters.side_out == {"late": 1}
    wm(h, MAX_WATERMARK)
    assert [(r["window_start"], r["count"]) for r in h.take_output()] == [(1000, 1)]


def test_without_a_late_data_side_output_late_records_are_dropped_and_counted() -> None:
    h = make(tumbling())
    h.process(recs(("a", 100)))
    wm(h, 999)
    h.process(recs(("a", 5), ("a", 999), ("a", 1000)))
    wm(h, MAX_WATERMARK)
    assert [(r["window_start"], r["count"]) for r in h.output] == [(0, 1), (1000, 1)]
    assert h.operator.late_records_dropped == 2
    assert h.operator.counters.side_out == {LATE_RECORDS_DROPPED: 2}


def test_a_record_is_late_only_when_all_its_sliding_windows_are_gone() -> None:
    h = make(lg.SlidingEventTimeWindows.of(2000, 1000), late_tag="late")
    wm(h, 1999)  # [0, 2000) is gone, [1000, 3000) is not
    h.process(recs(("a", 1500), ("a", 900)))
    wm(h, MAX_WATERMARK)
    assert [(r["window_start"], r["count"]) for r in h.output] == [(1000, 1)]
    assert [e[2] for e in sides(h)] == [[{"k": "a", "ts": 900}]]


def test_late_session_records_go_to_the_side_output_and_lateness_merges_sessions() -> None:
    h = make(lg.EventTimeSessionWindows.with_gap(100), lateness=200, late_tag="late")
    h.process(recs(("a", 0), ("a", 150)))
    wm(h, 150)
    assert [(r["window_start"], r["count"]) for r in h.take_output()] == [(0, 1)]
    # within the lateness: [90, 190) bridges [0, 100) and [150, 250): one session
    h.process(recs(("a", 90)))
    assert h.take_output() == []  # the merged session ends at 250: not due yet
    wm(h, 249)
    assert [(r["window_start"], r["window_end"], r["count"]) for r in h.take_output()] == [
        (0, 250, 3)
    ]
    h.process(recs(("a", 10)))  # [10, 110) merges into [0, 250): fires again at once
    assert [(r["window_start"], r["window_end"], r["count"]) for r in h.take_output()] == [
        (0, 250, 4)
    ]
    wm(h, 449)  # 249 + 200: gone
    h.process(recs(("a", 20)))
    assert [e[2] for e in sides(h)] == [[{"k": "a", "ts": 20}]]
    assert h.take_output() == []


# -- processing time ---------------------------------------------------------------------
def test_processing_time_windows_fire_on_the_clock_and_the_rest_at_the_end() -> None:
    clock = lg.ManualClock(start_ms=10_500)
    h = make(lg.TumblingProcessingTimeWindows.of(1000), clock=clock)
    h.process(pa.RecordBatch.from_pylist([{"k": "a"}, {"k": "b"}, {"k": "a"}]))
    assert h.next_processing_time == 11_000
    h.advance_processing_time(499)
    assert h.output == []
    h.advance_processing_time(1)
    got = h.take_output()
    assert sorted((r["k"], r["window_start"], r["count"]) for r in got) == [
        ("a", 10_000, 2),
        ("b", 10_000, 1),
    ]
    clock.advance(1)  # no callback runs: the window ends at the end of input
    h.process(pa.RecordBatch.from_pylist([{"k": "a"}]))
    h.finish()
    assert [(r["window_start"], r["count"]) for r in h.output] == [(11_000, 1)]


def test_processing_time_sessions_merge_records_closer_than_the_gap() -> None:
    clock = lg.ManualClock(start_ms=0)
    h = make(lg.ProcessingTimeSessionWindows.with_gap(100), clock=clock)
    for _ in range(3):
        h.process(pa.RecordBatch.from_pylist([{"k": "a"}]))
        h.advance_processing_time(60)
    assert h.output == []
    h.advance_processing_time(200)
    assert [(r["window_start"], r["window_end"], r["count"]) for r in h.output] == [(0, 220, 3)]


# -- result shapes -----------------------------------------------------------------------
class Mean(lg.AggregateFunction):
    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: dict[str, Any], acc: list[int]) -> list[int]:
        acc[0] += value["v"]
        acc[1] += 1
        return acc

    def get_result(self, acc: list[int]) -> float:
        return acc[0] / acc[1]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], a[1] + b[1]]


class Describe(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: list[Any]) -> Any:
        yield {
            "key": key,
            "start": context.window.start,
            "end": context.window().end,
            "vs": sorted(e["v"] for e in elements),
        }
        context.output(lg.OutputTag("seen"), len(elements))


@pytest.mark.parametrize("kind", ["aggregate", "reduce", "process"])
def test_user_window_functions_see_every_record_and_carry_the_window(kind: str) -> None:
    function = {
        "aggregate": Mean(),
        "reduce": lambda a, b: {**a, "v": a["v"] + b["v"]},
        "process": Describe(),
    }[kind]
    h = make(tumbling(), **{kind: function})
    h.process(batch([{"k": "a", "ts": 1, "v": 1}, {"k": "a", "ts": 2, "v": 4}]))
    h.process(
        RowBatch(
            [{"k": "a", "ts": 3, "v": 7}, {"k": "b", "ts": 1500, "v": 2}],
            np.asarray([3, 1500], dtype=np.int64),
        )
    )
    wm(h, MAX_WATERMARK)
    got = h.output
    stamps = [t for _, ts in main_batches(h) for t in ts or []]
    assert stamps == [999, 1999]
    if kind == "aggregate":
        assert got == [
            {"k": "a", "window_start": 0, "window_end": 1000, "result": 4.0},
            {"k": "b", "window_start": 1000, "window_end": 2000, "result": 2.0},
        ]
    elif kind == "reduce":
        assert [(r["k"], r["window_start"], r["window_end"], r["result"]["v"]) for r in got] == [
            ("a", 0, 1000, 12),
            ("b", 1000, 2000, 2),
        ]
    else:
        assert got == [
            {"key": "a", "start": 0, "end": 1000, "vs": [1, 4, 7]},
            {"key": "b", "start": 1000, "end": 2000, "vs": [2]},
        ]
        side = [e[2:] for e in sides(h)]
        assert side == [([3], [999]), ([1], [1999])], "side outputs carry end - 1 too"


@pytest.mark.parametrize("kind", ["aggregate", "reduce", "process"])
def test_merging_sessions_merge_the_state_of_user_functions(kind: str) -> None:
    function = {
        "aggregate": Mean(),
        "reduce": lambda a, b: {**a, "v": a["v"] + b["v"]},
        "process": Describe(),
    }[kind]
    h = make(lg.EventTimeSessionWindows.with_gap(100), **{kind: function})
    h.process(batch([{"k": "a", "ts": 0, "v": 1}, {"k": "a", "ts": 150, "v": 2}]))
    h.process(batch([{"k": "a", "ts": 90, "v": 6}]))  # bridges the two sessions
    wm(h, MAX_WATERMARK)
    got = h.output
    assert len(got) == 1
    value = {
        "aggregate": lambda r: r["result"],
        "reduce": lambda r: r["result"]["v"],
        "process": lambda r: r["vs"],
    }[kind](got[0])
    assert value == {"aggregate": 3.0, "reduce": 9, "process": [1, 2, 6]}[kind]


def test_sliding_processing_time_windows_fire_each_window_on_the_clock() -> None:
    clock = lg.ManualClock(start_ms=1_250)
    h = make(lg.SlidingProcessingTimeWindows.of(1000, 500), clock=clock)
    h.process(pa.RecordBatch.from_pylist([{"k": "a"}]))  # in [500, 1500), [1000, 2000)
    h.advance_processing_time(250)
    assert [(r["window_start"], r["count"]) for r in h.take_output()] == [(500, 1)]
    h.process(pa.RecordBatch.from_pylist([{"k": "a"}]))  # in [1000, 2000), [1500, 2500)
    h.advance_processing_time(500)
    assert [(r["window_start"], r["count"]) for r in h.take_output()] == [(1000, 2)]


def test_results_name_the_key_by_its_columns_or_key_for_a_function() -> None:
    h = make(tumbling(), key=["a", "b"])
    h.process(
        batch(
            [{"a": 1, "b": "x", "ts": 0}, {"a": 1, "b": "y", "ts": 0}, {"a": 1, "b": "x", "ts": 5}]
        )
    )
    wm(h, MAX_WATERMARK)
    assert sorted((r["a"], r["b"], r["count"]) for r in h.output) == [(1, "x", 2), (1, "y", 1)]
    h = make(tumbling(), key=lambda r: r["a"] % 2)
    h.process(batch([{"a": 1, "ts": 0}, {"a": 3, "ts": 0}, {"a": 4, "ts": 0}]))
    wm(h, MAX_WATERMARK)
    assert sorted((r["key"], r["count"]) for r in h.output) == [(0, 1), (1, 2)]


def test_null_keys_are_a_key_of_their_own() -> None:
    h = make(tumbling())
    h.process(recs((None, 0), ("a", 0), (None, 1)))
    wm(h, MAX_WATERMARK)
    assert sorted(((r["k"] or ""), r["count"]) for r in h.output) == [("", 2), ("a", 1)]


@pytest.mark.parametrize("key", ["k", lambda r: r["k"]], ids=["column", "function"])
def test_every_nan_key_is_one_key_as_the_partitioner_routes_it(key: Any) -> None:
    h = make(tumbling(), key=key)
    h.process(recs((float("nan"), 0), (1.5, 0)))
    h.process(recs((float("nan"), 1)))
    wm(h, MAX_WATERMARK)
    field = "k" if isinstance(key, str) else "key"
    got = sorted((("nan" if r[field] != r[field] else str(r[field])), r["count"]) for r in h.output)
    assert got == [("1.5", 1), ("nan", 2)]


def test_restored_keys_keep_their_column_type() -> None:
    h = make(tumbling())
    b = pa.RecordBatch.from_arrays([pa.array([7], pa.int32()), pa.array([1])], ["k", "ts"])
    h.process(with_timestamps(b, np.asarray([1], dtype=np.int64)))
    h2 = make(tumbling(), restored=h.snapshot())
    wm(h2, MAX_WATERMARK)  # fires before any new record showed the key's type
    assert [b.schema.field("k").type for b in h2.batches] == [pa.int32()]


def test_a_user_function_error_names_the_operator() -> None:
    h = make(tumbling(), reduce=lambda a, b: a["missing"])
    with pytest.raises(UserFunctionError, match="operator 'win'"):
        h.process(recs(("a", 0), ("a", 1)))


# -- snapshots and restores (M-T3, M-T4) --------------------------------------------------
def numbered(start: int, stop: int) -> pa.RecordBatch:
    """Records ``start..stop-1`` over 40 keys, event time ``i * 7 % 2500`` (disordered)."""
    return batch([{"k": f"key{i % 40}", "ts": i * 7 % 2500, "v": i} for i in range(start, stop)])


def feed(h: OperatorHarness, start: int, stop: int) -> None:
    h.process(numbered(start, stop))


def contents_of(kind: str) -> Any:
    """The ``aggregate`` of ``make``."""
    if kind == "builtin":
        return [lg.agg.count(), lg.agg.sum("v"), lg.agg.last("v")]
    return Mean()


def canonical(results: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(tuple(sorted((k, repr(v)) for k, v in r.items())) for r in results)


@pytest.mark.parametrize("kind", ["builtin", "aggregate"])
def test_a_snapshot_does_not_change_when_processing_goes_on_M_T3(kind: str) -> None:
    h = make(tumbling(), aggregate=contents_of(kind))
    feed(h, 0, 300)
    pending = h.begin_snapshot()
    before = h.snapshot().state()
    feed(h, 300, 900)  # same windows and keys: written in place without copy-on-write
    wm(h, 999)
    after = pending.complete().state()
    assert after["function"]["blocks"] and canonical_state(after) == canonical_state(before)


def canonical_state(payload: Any) -> Any:
    rows = []
    for b in payload["function"]["blocks"]:
        payload_rows = b["payload"]
        if isinstance(payload_rows, bytes):
            payload_rows = pickle.loads(payload_rows)
        else:
            payload_rows = [
                tuple(map(repr, r))
                for r in zip(*[a.to_pylist() for a in payload_rows.results().values()])
            ]
        rows.extend(zip(b["keys"], b["start"].tolist(), [repr(p) for p in payload_rows]))
    return sorted(rows)


@pytest.mark.parametrize("kind", ["builtin", "aggregate"])
@pytest.mark.parametrize("new_parallelism", [1, 2, 3])
def test_restored_state_gives_the_results_of_an_uninterrupted_run_at_any_parallelism_M_T4(
    kind: str, new_parallelism: int
) -> None:
    whole = make(tumbling(), aggregate=contents_of(kind))
    feed(whole, 0, 1000)
    wm(whole, 1499)
    feed(whole, 1000, 2000)
    wm(whole, MAX_WATERMARK)
    expected = canonical(whole.output)

    # two subtasks, each with the keys of its key groups, snapshot mid-way
    old_p = 2
    snapshots: list[OperatorSnapshot] = []
    outputs: list[dict[str, Any]] = []
    for s in range(old_p):
        h = make(tumbling(), aggregate=contents_of(kind), subtask=s, parallelism=old_p)
        rows = [r for r in to_rows(numbered(0, 1000)) if subtask_for_key(r["k"], old_p, MAXP) == s]
        h.process(batch(rows))
        wm(h, 1499)
        snapshots.append(h.snapshot())
        outputs.extend(h.output)
    for s in range(new_parallelism):
        h = make(
            tumbling(),
            aggregate=contents_of(kind),
            subtask=s,
            parallelism=new_parallelism,
            restored=snapshots,
        )
        rows = [
            r
            for r in to_rows(numbered(1000, 2000))
            if subtask_for_key(r["k"], new_parallelism, MAXP) == s
        ]
        h.process(batch(rows))
        wm(h, MAX_WATERMARK)
        outputs.extend(h.output)
    assert canonical(outputs) == expected


def test_fired_windows_kept_for_lateness_do_not_fire_again_after_a_restore() -> None:
    h = make(tumbling(), lateness=10_000)
    h.process(recs(("a", 1), ("a", 1200)))
    wm(h, 999)
    assert [r["count"] for r in h.take_output()] == [1]
    snapshot = h.snapshot()
    h2 = make(tumbling(), lateness=10_000, restored=snapshot)
    wm(h2, 5000)
    assert [(r["window_start"], r["count"]) for r in h2.output] == [(1000, 1)]


def test_after_a_restore_the_restored_watermark_still_decides_lateness() -> None:
    h = make(tumbling(), late_tag="late")
    h.process(recs(("a", 1)))
    wm(h, 2999)
    snapshot = h.snapshot()
    h2 = make(tumbling(), late_tag="late", restored=snapshot)
    h2.process(recs(("a", 500), ("a", 3500)))  # the new attempt has no watermark yet
    assert [e[2] for e in sides(h2)] == [[{"k": "a", "ts": 500}]]
    wm(h2, MAX_WATERMARK)
    assert [(r["window_start"], r["count"]) for r in h2.output] == [(3000, 1)]


def test_processing_time_windows_are_rescheduled_after_a_restore() -> None:
    clock = lg.ManualClock(start_ms=0)
    h = make(lg.TumblingProcessingTimeWindows.of(1000), clock=clock)
    h.process(pa.RecordBatch.from_pylist([{"k": "a"}]))
    snapshot = h.snapshot()
    h2 = make(lg.TumblingProcessingTimeWindows.of(1000), clock=clock, restored=snapshot)
    assert h2.next_processing_time == 1000
    h2.advance_processing_time(999)
    assert h2.output == []
    h2.advance_processing_time(1)
    assert [r["count"] for r in h2.output] == [1]


def test_restoring_state_of_another_window_function_is_refused() -> None:
    h = make(tumbling())
    h.process(recs(("a", 1)))
    snapshot = h.snapshot()
    with pytest.raises(ConfigurationError, match="new uid"):
        make(
            tumbling(),
            aggregate=lg.agg.sum("ts"),
            restored=snapshot,
        )


def test_keys_no_window_holds_are_forgotten_and_results_stay_right() -> None:
    h = make(tumbling())
    for w in range(4):  # 5000 new keys per window: the key dictionary gets compacted
        h.process(
            batch(
                [{"k": f"w{w}-{i}", "ts": w * 1000 + i % 1000} for i in range(5000)]
                + [{"k": "steady", "ts": w * 1000}]
            )
        )
        wm(h, w * 1000 + 999)
    assert len(h.operator.keys) < 10_000
    got = h.output
    assert len(got) == 4 * 5001
    assert sorted(r["window_start"] for r in got if r["k"] == "steady") == [0, 1000, 2000, 3000]
    assert {r["count"] for r in got} == {1}


def test_idle_and_active_statuses_pass_through() -> None:
    h = make(tumbling())
    h.set_idle(True)
    assert h.elements == [StreamStatus.IDLE]


def test_key_groups_of_restored_rows_follow_the_partitioner() -> None:
    h = make(tumbling())
    h.process(recs(("a", 1), ("b", 2)))
    blocks = h.snapshot().state()["function"]["blocks"]
    groups = dict(zip(blocks[0]["keys"], blocks[0]["key_groups"].tolist()))
    assert groups == {"a": key_group_for("a", MAXP), "b": key_group_for("b", MAXP)}


# -- the API -----------------------------------------------------------------------------
def keyed(env: lg.StreamEnvironment, key: Any = "k") -> lg.KeyedStream:
    return env.from_collection([{"k": 1, "ts": 0}]).key_by(key)


def test_window_arguments_are_checked() -> None:
    env = lg.StreamEnvironment()
    with pytest.raises(ConfigurationError, match="instance"):
        keyed(env).window(lg.TumblingEventTimeWindows)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="window assigner"):
        keyed(env).window(1000)  # type: ignore[arg-type]
    pt = keyed(env).window(lg.TumblingProcessingTimeWindows.of(1000))
    with pytest.raises(ConfigurationError, match="event-time windows"):
        pt.allowed_lateness(10)
    with pytest.raises(ConfigurationError, match="event-time windows"):
        pt.side_output_late_data(lg.OutputTag("late"))
    w = keyed(env).window(tumbling())
    with pytest.raises(ConfigurationError, match="zero or more"):
        w.allowed_lateness(-1)
    with pytest.raises(ConfigurationError, match="needs built-in aggregates"):
        w.aggregate()
    with pytest.raises(ConfigurationError, match="not a mix"):
        w.aggregate(lg.agg.count(), Mean())
    with pytest.raises(ConfigurationError, match="instance"):
        w.aggregate(Mean)
    with pytest.raises(ConfigurationError, match="create_accumulator"):
        w.aggregate(object())
    with pytest.raises(ConfigurationError, match="ReduceFunction"):
        w.reduce(42)
    with pytest.raises(ConfigurationError, match="ProcessWindowFunction"):
        w.process(42)
    with pytest.raises(ConfigurationError, match="two fields named"):
        keyed(env, "count").window(tumbling()).aggregate(lg.agg.count())
    with pytest.raises(ConfigurationError, match="two fields named"):
        keyed(env, "window_start").window(tumbling()).reduce(lambda a, b: a)


def test_session_windows_need_an_aggregate_function_that_merges() -> None:
    class NoMerge(lg.AggregateFunction):
        def create_accumulator(self) -> int:
            return 0

        def add(self, value: Any, acc: int) -> int:
            return acc + 1

        def get_result(self, acc: int) -> int:
            return acc

    env = lg.StreamEnvironment()
    with pytest.raises(ConfigurationError, match="merge"):
        keyed(env).window(lg.EventTimeSessionWindows.with_gap(10)).aggregate(NoMerge())
    keyed(env).window(tumbling()).aggregate(NoMerge())  # aligned windows never merge


def test_late_data_that_nobody_reads_is_a_graph_error() -> None:
    env = lg.StreamEnvironment()
    (
        keyed(env)
        .window(tumbling())
        .side_output_late_data(lg.OutputTag("late"))
        .aggregate(lg.agg.count())
        .sink_to(lg.connectors.DiscardingSink())
    )
    with pytest.raises(lg.InvalidGraphError, match="side output 'late'"):
        env.get_job_graph()

"""Window join and co-group: the builder's checks, the vectorized pairing, the payload
rows the window operator moves around, and lateness on a scripted watermark (issue 23
parts 3-4; M-W6)."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from test_window_operator import MAXP, batch, tumbling, wm

import lockgate as lg
from lockgate.core.batch import RowBatch, timestamps_of
from lockgate.core.key_groups import subtask_for_key
from lockgate.core.partitioners import KeySelector
from lockgate.errors import ConfigurationError
from lockgate.runtime.operators.join.window_join import (
    ARROW_JOIN,
    FUNCTION_JOIN,
    KEY_FIELD,
    LEFT,
    MAX_CHUNKS,
    RIGHT,
    JoinContents,
    JoinState,
    TagBatch,
    TagRecord,
    key_fields,
    pair_indices,
)
from lockgate.runtime.operators.window.operator import LATE_RECORDS_DROPPED, WindowOperator
from lockgate.runtime.operators.window.store import SessionStore
from lockgate.testing import OperatorHarness
from lockgate.windowing.assigners import WindowAssignment


def streams() -> tuple[lg.StreamEnvironment, lg.DataStream, lg.DataStream]:
    env = lg.StreamEnvironment(parallelism=1)
    a = env.from_source(lg.connectors.CollectionSource([{"k": 1, "ts": 0}]), name="a")
    b = env.from_source(lg.connectors.CollectionSource([{"k": 1, "ts": 0}]), name="b")
    return env, a, b


TUMBLING = lg.TumblingEventTimeWindows.of(1000)


# -- the builder rejects bad input, saying how to fix it --------------------------------------
@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda a, b: a.join(b).apply(), "where(left_key).equal_to(right_key)"),
        (lambda a, b: a.join(b).equal_to("k"), "comes after where"),
        (lambda a, b: a.join(b).where("k").window(TUMBLING), "comes after the keys"),
        (lambda a, b: a.join(b).where("k").equal_to("k").apply(), "before apply()"),
        (lambda a, b: a.join(b).where(3), "column name"),
        (lambda a, b: a.join(b).where(["a", "b"]).equal_to("k"), "same number of key columns"),
        (
            lambda a, b: a.join(b).where("k").equal_to("k").window(lg.TumblingEventTimeWindows),
            "instance",
        ),
        (lambda a, b: a.join(b).where("k").equal_to("k").window(1000), "window assigner"),
        (
            lambda a, b: a.join(b).where(lambda r: r["k"]).equal_to("k").window(TUMBLING).apply(),
            "needs column keys",
        ),
        (
            lambda a, b: a.join(b).where("k").equal_to("k").window(TUMBLING).apply(lg.JoinFunction),
            "instance",
        ),
        (
            lambda a, b: a.join(b).where("k").equal_to("k").window(TUMBLING).apply(42),
            "JoinFunction",
        ),
        (
            lambda a, b: (
                a.join(b).where("k").equal_to("k").window(TUMBLING).apply(suffixes=("_x", "_x"))
            ),
            "two different strings",
        ),
        (
            lambda a, b: a.co_group(b).where("k").equal_to("k").window(TUMBLING).apply(),
            "CoGroupFunction",
        ),
        (
            lambda a, b: (
                a.co_group(b).where("k").equal_to("k").window(TUMBLING).apply(lg.JoinFunction())
            ),
            "use a.join(b)",
        ),
        (
            lambda a, b: (
                a.join(b).where("k").equal_to("k").window(TUMBLING).apply(lg.CoGroupFunction())
            ),
            "a.co_group(b)",
        ),
        (
            lambda a, b: (
                a.join(b)
                .where("k")
                .equal_to("k")
                .window(lg.TumblingProcessingTimeWindows.of(1000))
                .allowed_lateness(10)
            ),
            "event-time",
        ),
        (lambda a, b: a.join(b).where("k").equal_to("k").allowed_lateness(10), "after window"),
        (lambda a, b: a.join([1, 2]), "other DataStream"),
    ],
)
def test_bad_joins_are_refused_with_a_fix(build: Any, says: str) -> None:
    _, a, b = streams()
    with pytest.raises(ConfigurationError, match=says.replace("(", r"\(").replace(")", r"\)")):
        build(a, b)


def test_streams_of_two_environments_do_not_join() -> None:
    _, a, _ = streams()
    _, _, b = streams()
    with pytest.raises(ConfigurationError, match="same StreamEnvironment"):
        a.join(b)


# -- the vectorized pairing ------------------------------------------------------------------
def test_pair_indices_give_every_pair_of_each_row_once() -> None:
    rng = np.random.default_rng(7)
    left = rng.integers(0, 50, 3000)
    right = rng.integers(0, 50, 2000)
    li, ri = pair_indices(left, right, 50)
    assert (left[li] == right[ri]).all()
    got = sorted(zip(li.tolist(), ri.tolist()))
    want = sorted(
        (i, j) for i in range(len(left)) for j in np.flatnonzero(right == left[i]).tolist()
    )
    assert got == want
    assert (np.diff(left[li]) >= 0).all(), "pairs come in row order"


def test_pair_indices_of_an_empty_side_are_empty() -> None:
    li, ri = pair_indices(np.array([0, 1]), np.zeros(0, dtype=np.int64), 2)
    assert len(li) == len(ri) == 0


# -- the payload rows ------------------------------------------------------------------------
class FakeOperator:
    name = "join"

    def user_error(self, e: Exception) -> Exception:
        return e


def contents() -> JoinContents:
    c = JoinContents(ARROW_JOIN, None, ("k",), ("k",))
    c.open(FakeOperator())
    return c


def records(state: JoinState, c: JoinContents) -> dict[int, tuple[list[int], list[int]]]:
    """Row -> (left ids, right ids)."""
    out: dict[int, tuple[list[int], list[int]]] = {r: ([], []) for r in range(state.n)}
    for side, chunks in ((0, state.left), (1, state.right)):
        for ids, part in chunks:
            for r, v in zip(ids.tolist(), part.column("id").to_pylist()):
                if r >= 0:  # -1: a dead record (its row was taken away)
                    out[r][side].append(v)
    return out


def filled() -> tuple[JoinContents, JoinState]:
    c = contents()
    state = c.empty(3)
    batch = pa.table({"k": [1, 1, 2, 3], "id": [10, 11, 12, 13]})
    data = (np.array([0, 1, 0, 1], dtype=np.int8), batch)
    c.fold(
        state,
        np.array([0, 0, 1, 2]),
        type("P", (), {"side": data[0], "part": data[1]}),
        np.arange(4),
    )
    return c, state


def test_take_concat_and_combine_keep_each_rows_records() -> None:
    c, state = filled()
    assert records(state, c) == {0: ([10], [11]), 1: ([12], []), 2: ([], [13])}
    taken = c.take(state, np.array([2, 0]))
    assert records(taken, c) == {0: ([], [13]), 1: ([10], [11])}
    both = c.concat([state, taken])
    assert records(both, c)[4] == ([10], [11]) and both.n == 5
    merged = c.combine(state, np.array([0, 0, 1]), 2)
    assert records(merged, c) == {0: ([10, 12], [11]), 1: ([], [13])}


def test_a_frozen_payload_does_not_see_later_records() -> None:
    c, state = filled()
    frozen = c.freeze(state)
    own = c.take(state, np.arange(3))  # what the store does before writing in place
    part = type(
        "P", (), {"side": np.array([0], dtype=np.int8), "part": pa.table({"k": [1], "id": [99]})}
    )
    c.fold(own, np.array([0]), part, np.array([0]))
    assert records(c.thaw(frozen), c)[0] == ([10], [11])
    assert records(own, c)[0] == ([10, 99], [11])


def test_python_records_frozen_before_the_join_package_thaw() -> None:
    """lockgate 0.1.0 froze a buffer of Python records as a pickle naming the module
    JoinState had then, lockgate.runtime.operators.window_join (issue 41 moved it to
    join/): such a savepoint still restores."""
    c = JoinContents(FUNCTION_JOIN, lambda left, right: (left, right))
    state = JoinState(1, [(np.array([0]), [{"id": 10}])], [(np.array([0]), [{"id": 11}])])
    frozen = c.freeze(state)
    assert isinstance(frozen, bytes)
    # protocol 2 names classes as text lines: rename the module as 0.1.0 wrote it
    old = pickle.dumps(pickle.loads(frozen), protocol=2).replace(
        b"lockgate.runtime.operators.join.window_join\n",
        b"lockgate.runtime.operators.window_join\n",
    )
    assert b"lockgate.runtime.operators.window_join\n" in old
    thawed = c.thaw(old)
    assert thawed.n == 1
    assert [part for _, part in thawed.left + thawed.right] == [[{"id": 10}], [{"id": 11}]]


def test_taking_most_rows_moves_no_records_and_a_snapshot_holds_live_records_only() -> None:
    c, state = filled()
    parts = [part for _, part in state.left + state.right]
    kept = c.take(state, np.array([2, 0]))  # row 1 leaves: one of four records dies
    assert records(kept, c) == {0: ([], [13]), 1: ([10], [11])}
    assert [part for _, part in kept.left + kept.right] == parts
    assert all(a is b for a, b in zip([p for _, p in kept.left + kept.right], parts))
    frozen = c.thaw(c.freeze(kept))
    assert all((ids >= 0).all() for ids, _ in frozen.left + frozen.right)
    assert records(frozen, c) == records(kept, c)
    half = c.take(state, np.array([2]))  # as many dead as live: still no copy
    assert half.left == [] and half.right[0][1] is state.right[0][1]
    assert records(half, c) == {0: ([], [13])}
    four = c.empty(4)
    side = type("P", (), {"side": np.zeros(4, np.int8), "part": pa.table({"id": [0, 1, 2, 3]})})
    c.fold(four, np.arange(4), side, np.arange(4))
    few = c.take(four, np.array([3]))  # three of four die: the live one is copied out
    assert [len(ids) for ids, _ in few.left] == [1] and len(few.left[0][1]) == 1
    assert records(few, c) == {0: ([3], [])}


def test_a_session_store_keeps_a_bounded_number_of_chunks_however_many_batches_come() -> None:
    """Each batch's records are a new chunk and merging sessions takes rows out of
    every chunk; the chunks used to pile up (one Arrow ``take`` each, per batch: a
    session join slowed down as it ran). The store now holds at most MAX_CHUNKS
    chunks a side, and each record once."""
    c = contents()
    store = SessionStore(c)
    keys, per_batch, seen = 500, 200, 0
    for _ in range(300):
        ids = np.arange(seen, seen + per_batch, dtype=np.int64)
        seen += per_batch
        codes = (ids * 7919) % keys
        ts = ids // 4
        side = (ids % 2).astype(np.int8)
        part = pa.table({"k": codes, "id": ids})
        data = type("P", (), {"side": side, "part": part})
        rows = np.arange(per_batch, dtype=np.int64)
        store.add(data, codes, ts, WindowAssignment(rows, ts, ts + 50))
        assert len(store.payload.left) <= MAX_CHUNKS and len(store.payload.right) <= MAX_CHUNKS
    got = records(store.payload, c)
    every = sorted(i for lefts, rights in got.values() for i in lefts + rights)
    assert every == list(range(seen)), "each record held once"
    for r, (lefts, rights) in got.items():  # a row's records are of its key
        assert {int(i * 7919 % keys) for i in lefts + rights} == {int(store.key[r])}


# -- results on a scripted watermark ---------------------------------------------------------
def punctuated() -> lg.WatermarkStrategy:
    return lg.WatermarkStrategy.for_generator(
        lambda: lg.PunctuatedWatermarks(lambda ts: int(ts.max()) - 1)
    ).with_timestamp_assigner("ts")


class Stamp(lg.ProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield (value, ctx.timestamp)


def scripted(
    env: lg.StreamEnvironment, left: list[dict[str, Any]], right: list[dict[str, Any]]
) -> tuple[lg.DataStream, lg.DataStream]:
    a = env.from_source(
        lg.connectors.CollectionSource(left, batch_size=1),
        name="a",
        watermark_strategy=punctuated(),
    )
    b = env.from_source(
        lg.connectors.CollectionSource(right, batch_size=1),
        name="b",
        watermark_strategy=punctuated(),
    )
    return a, b


def test_the_vectorized_join_merges_columns_and_stamps_window_end_minus_one() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    a, b = scripted(
        env,
        [
            {"k": "x", "ts": 10, "v": 1},
            {"k": "y", "ts": 20, "v": 2},
            {"k": "x", "ts": 1500, "v": 3},
        ],
        [{"k": "x", "ts": 30, "v": 7, "u": "a"}, {"k": "x", "ts": 1600, "v": 8, "u": "b"}],
    )
    out = (
        a.join(b)
        .where("k")
        .equal_to("k")
        .window(TUMBLING)
        .apply(name="join")
        .process(Stamp(), name="stamp")
    )
    got = sorted(
        out.execute_and_collect("join columns", executor=lg.LocalExecutor()), key=lambda r: r[1]
    )
    assert got == [
        ({"k": "x", "ts_left": 10, "v_left": 1, "ts_right": 30, "v_right": 7, "u": "a"}, 999),
        ({"k": "x", "ts_left": 1500, "v_left": 3, "ts_right": 1600, "v_right": 8, "u": "b"}, 1999),
    ]


def test_different_key_names_both_stay_and_a_flat_join_function_runs_per_pair() -> None:
    class Twice(lg.FlatJoinFunction):
        def join(self, left: Any, right: Any) -> Any:
            yield (left["id"], right["id"])
            yield (right["id"], left["id"])

    env = lg.StreamEnvironment(parallelism=1)
    a, b = scripted(env, [{"a": 1, "ts": 1, "id": "l"}], [{"b": 1, "ts": 2, "id": "r"}])
    joined = a.join(b).where("a").equal_to("b").window(TUMBLING)
    out = joined.apply(name="cols")
    assert out.execute_and_collect("names", executor=lg.LocalExecutor()) == [
        {"a": 1, "ts_left": 1, "id_left": "l", "b": 1, "ts_right": 2, "id_right": "r"}
    ]
    env = lg.StreamEnvironment(parallelism=1)
    a, b = scripted(env, [{"a": 1, "ts": 1, "id": "l"}], [{"b": 1, "ts": 2, "id": "r"}])
    out = a.join(b).where(lambda r: r["a"]).equal_to("b").window(TUMBLING).apply(Twice())
    assert sorted(out.execute_and_collect("flat", executor=lg.LocalExecutor())) == [
        ("l", "r"),
        ("r", "l"),
    ]


def test_co_group_is_called_per_key_and_window_even_with_one_side_empty() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    a, b = scripted(
        env,
        [{"k": 1, "ts": 1}, {"k": 2, "ts": 5}, {"k": 1, "ts": 7}],
        [{"k": 1, "ts": 3}, {"k": 3, "ts": 1200}],
    )
    out = (
        a.co_group(b)
        .where("k")
        .equal_to("k")
        .window(TUMBLING)
        .apply(lambda ls, rs: [((ls or rs)[0]["k"], len(ls), len(rs))])
    )
    assert sorted(out.execute_and_collect("co-group", executor=lg.LocalExecutor())) == [
        (1, 2, 1),
        (2, 1, 0),
        (3, 0, 1),
    ]


def join_window(
    assigner: Any,
    contents: JoinContents,
    *,
    key: Any,
    lateness: int = 0,
    clock: Any = None,
    subtask: int = 0,
    parallelism: int = 1,
    restored: Any = None,
) -> OperatorHarness:
    """The window operator of a join (its tagged input, its join contents), opened."""
    op = WindowOperator(assigner, KeySelector(key), contents, lateness, None)
    h = OperatorHarness(
        op,
        clock=clock or lg.ManualClock(start_ms=0),
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=MAXP,
        name="win",
        uid="win",
    )
    return h.open(restored=restored)


def tagged(side: int, *rows: tuple[int, int]) -> pa.RecordBatch:
    """Records ``(k, ts)`` of one side as the join's tag step makes them."""
    return TagBatch(side, ("k",))(batch([{"k": k, "ts": t, "id": t} for k, t in rows]))


def test_within_the_lateness_a_window_joins_again_and_later_records_are_dropped_M_W6() -> None:
    """[0, 1000) fires at 1499 with its pair; a left record at 950 arriving then
    re-fires it with all its pairs (as Flink); at 2499 its state is dropped (999 + 1000
    <= 2499), so a record at 300 is dropped and counted."""
    c = JoinContents(ARROW_JOIN, None, ("k",), ("k",))
    h = join_window(tumbling(), c, key=list(key_fields(1)), lateness=1000)
    h.process(tagged(LEFT, (1, 100)))
    h.process(tagged(RIGHT, (1, 200), (2, 300)))
    wm(h, 1499)
    assert [(r["id_left"], r["id_right"]) for r in h.take_output()] == [(100, 200)]
    h.process(tagged(LEFT, (1, 950)))
    firing = h.batches[-1]
    assert sorted((r["id_left"], r["id_right"]) for r in h.take_output()) == [
        (100, 200),
        (950, 200),
    ]
    assert list(timestamps_of(firing)) == [999, 999]
    assert firing.schema.field("k").type == pa.int64()
    wm(h, 2499)
    h.process(tagged(LEFT, (1, 300)))
    h.process(tagged(RIGHT, (1, 310)))
    wm(h, 5000)
    assert h.take_output() == []
    assert h.operator.counters.side_out == {LATE_RECORDS_DROPPED: 2}


def test_join_state_restores_at_another_parallelism_by_key_group_M_T4() -> None:
    c = JoinContents(ARROW_JOIN, None, ("k",), ("k",))
    h = join_window(tumbling(), c, key=list(key_fields(1)))
    h.process(tagged(LEFT, *[(k, 10 + k) for k in range(40)]))
    h.process(tagged(RIGHT, *[(k, 500 + k) for k in range(40)]))
    snapshot = h.snapshot()
    pairs = []
    for subtask in range(3):
        c2 = JoinContents(ARROW_JOIN, None, ("k",), ("k",))
        h2 = join_window(
            tumbling(),
            c2,
            key=list(key_fields(1)),
            subtask=subtask,
            parallelism=3,
            restored=snapshot,
        )
        wm(h2, 999)
        got = h2.take_output()
        assert all(subtask_for_key(r["k"], 3, MAXP) == subtask for r in got)
        pairs += [(r["id_left"], r["id_right"]) for r in got]
    assert sorted(pairs) == [(10 + k, 500 + k) for k in range(40)]


def test_a_processing_time_window_joins_what_arrived_before_the_clock_passed_its_end() -> None:
    """Processing-time assigners work as for ``window(...)``: records join by the
    window of their arrival time, and the window fires when the clock reads its end."""
    clock = lg.ManualClock(start_ms=10_500)
    c = JoinContents(FUNCTION_JOIN, lambda left, right: (left["id"], right["id"]))
    h = join_window(lg.TumblingProcessingTimeWindows.of(1000), c, key=KEY_FIELD, clock=clock)
    left = TagRecord(LEFT, "k")
    right = TagRecord(RIGHT, "k")
    h.process(RowBatch([left({"k": 1, "id": "a"}), right({"k": 1, "id": "b"})]))
    clock.advance(500)  # 11_000: the window [10_000, 11_000) is over
    h.process(RowBatch([right({"k": 1, "id": "c"})]))
    h.advance_processing_time(0)  # the callbacks due now run
    assert h.take_output() == [("a", "b")]
    h.finish()  # end of input: the open window fires with what it holds
    assert h.take_output() == []


class NoneForOdd(lg.JoinFunction):
    def join(self, left: Any, right: Any) -> Any:
        return None if left["v"] % 2 else (left["v"], right["v"])


@pytest.mark.parametrize("fn", [NoneForOdd(), lambda x, y: None if x["v"] % 2 else x])
def test_a_join_function_returning_none_fails_as_map_does_naming_the_pair(fn: Any) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    a, b = scripted(
        env, [{"k": 1, "ts": 1, "v": 2}, {"k": 1, "ts": 2, "v": 3}], [{"k": 1, "ts": 5, "v": 9}]
    )
    out = a.join(b).where("k").equal_to("k").window(TUMBLING).apply(fn, name="nullable join")
    with pytest.raises(lg.JobFailedError) as e:
        out.execute_and_collect("none join", executor=lg.LocalExecutor())
    text = str(e.value)
    assert e.value.operator == "nullable join", text
    assert "join() returned None for the pair of the left record" in text, text
    assert "'v': 3" in text and "'v': 9" in text, "the error quotes the pair"
    assert "FlatJoinFunction" in text, "the error says how to emit no record"
    assert e.value.reason is lg.FailureReason.USER_CODE
    assert isinstance(e.value.__cause__, TypeError)


@pytest.mark.parametrize("fn", [None, lambda left, right: {**left, **right}])
def test_a_join_with_a_uid_gives_its_tagging_steps_uids_of_its_own_so_none_is_generated_M_S2(
    fn: Any,
) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    left = env.from_collection([{"k": 1, "a": 1}]).uid("left")
    right = env.from_collection([{"k": 1, "b": 2}]).uid("right")
    joined = (
        left.join(right)
        .where("k")
        .equal_to("k")
        .window(lg.TumblingEventTimeWindows.of(10))
        .apply(fn)
        .uid("the-join")
    )
    joined.sink_to(lg.connectors.DiscardingSink()).uid("sink")
    env.get_job_graph()
    uids = {t.name: t.uid for t in env._transformations if not t.kind.virtual}
    assert uids["WindowJoin(tag left)"] == "the-join.tag-left"
    assert uids["WindowJoin(tag right)"] == "the-join.tag-right"
    assert not [t.uid for t in env._transformations if getattr(t, "_auto_uid", False)]


def test_a_join_without_a_uid_leaves_its_tagging_steps_generated_uids_M_S2() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    left = env.from_collection([{"k": 1, "a": 1}])
    right = env.from_collection([{"k": 1, "b": 2}])
    left.join(right).where("k").equal_to("k").window(
        lg.TumblingEventTimeWindows.of(10)
    ).apply().sink_to(lg.connectors.DiscardingSink())
    env.get_job_graph()
    tags = [t for t in env._transformations if t.name.startswith("WindowJoin(tag")]
    assert len(tags) == 2
    assert all(t.uid and t.uid.startswith("auto-") for t in tags)

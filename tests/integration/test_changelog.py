"""Changelog streams end to end (issue 39 part 1): row kinds (+INS, -U, +U, -D) carried
through map, filter, flat_map, process and key_by, as a column of Arrow batches and in
row batches, over the network on both executors; ``ctx.kind`` and ``lg.Change`` outputs;
``kinds_from_field`` / ``kinds_to_field``; ``to_table`` / ``to_changelog`` /
``to_upserts``; a keyed aggregate that retracts (count per status while statuses
change) equal to pandas over the final table, through a failure restored from a
checkpoint (M-T4, M-R1); and operators and sinks that take only inserts refusing a
changelog instead of taking an update or a delete for a new row."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import lockgate as lg
from changelog_helpers import apply, by_key
from checkpoint_paced import CheckpointPacedSource
from lockgate.testing import FailAtRecord, inject_faults

LOCAL = lg.LocalExecutor()
INS, UB, UA, D = (
    lg.RowKind.INSERT,
    lg.RowKind.UPDATE_BEFORE,
    lg.RowKind.UPDATE_AFTER,
    lg.RowKind.DELETE,
)


def changes(result: Any, uid: str = "out") -> list[lg.Change]:
    return [c for part in result.sink_results[uid] for c in part]


OPS = [
    {"op": "+I", "id": 1, "v": 10},
    {"op": "+I", "id": 2, "v": 20},
    {"op": "-U", "id": 1, "v": 10},
    {"op": "+U", "id": 1, "v": 11},
    {"op": "-D", "id": 2, "v": 20},
    {"op": "+I", "id": 3, "v": 30},
]


@pytest.mark.hang_guard(180)
def test_kinds_travel_through_map_filter_flat_map_and_key_by_on_both_executors(
    executor: Any,
) -> None:
    """Each record keeps its kind through a map, a filter, a flat_map and a key_by
    (the network between two parallel operators): the collected changes of each key
    equal the input's, in order, with the mapped values."""
    env = lg.StreamEnvironment(parallelism=2)
    (
        env.from_collection(OPS)
        .set_parallelism(1)  # one ordered changelog (two slices would race each other)
        .key_by("id")  # from here each key's changes stay in order
        .kinds_from_field("op")
        .map(lambda r: {**r, "v": r["v"] * 2})
        .filter(lambda r: r["id"] != 3)
        .flat_map(lambda r: [r])
        .key_by("id")
        .map(lambda r: r)
        .sink_to(lg.connectors.CollectSink(changelog=True))
        .uid("out")
    )
    got = by_key(changes(env.execute("kinds travel", executor=executor)))
    assert got == {
        1: [
            lg.Change(INS, {"id": 1, "v": 20}),
            lg.Change(UB, {"id": 1, "v": 20}),
            lg.Change(UA, {"id": 1, "v": 22}),
        ],
        2: [lg.Change(INS, {"id": 2, "v": 40}), lg.Change(D, {"id": 2, "v": 40})],
    }


class Flip(lg.ProcessFunction):
    """Reads ``ctx.kind``; re-emits a delete as an insert of a tombstone record and
    marks every insert of an even id as an update."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        if ctx.kind is D:
            yield lg.Change(INS, {"id": value["id"], "gone": True})
        elif ctx.kind is INS and value["id"] % 2 == 0:
            yield lg.Change("+U", value)
        else:
            yield value  # keeps its kind


def test_a_process_function_reads_ctx_kind_and_emits_changes() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    (
        env.from_collection(OPS)
        .kinds_from_field("op")
        .process(Flip())
        .sink_to(lg.connectors.CollectSink(changelog=True))
        .uid("out")
    )
    got = changes(env.execute("ctx.kind", executor=LOCAL))
    assert got == [
        lg.Change(INS, {"id": 1, "v": 10}),
        lg.Change(UA, {"id": 2, "v": 20}),
        lg.Change(UB, {"id": 1, "v": 10}),
        lg.Change(UA, {"id": 1, "v": 11}),
        lg.Change(INS, {"id": 2, "gone": True}),
        lg.Change(INS, {"id": 3, "v": 30}),
    ]


def test_an_append_only_stream_whose_map_emits_changes_becomes_a_changelog() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    (
        env.from_collection([1, 2, 3])
        .map(lambda x: lg.Change(D, {"id": x}) if x == 2 else {"id": x})
        .sink_to(lg.connectors.CollectSink(changelog=True))
        .uid("out")
    )
    assert changes(env.execute("map emits", executor=LOCAL)) == [
        lg.Change(INS, {"id": 1}),
        lg.Change(D, {"id": 2}),
        lg.Change(INS, {"id": 3}),
    ]


def test_kinds_to_field_and_back_round_trip_and_an_append_only_sink_takes_the_field() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    changelog = env.from_collection(OPS).kinds_from_field("op")
    changelog.kinds_to_field("kind").sink_to(lg.connectors.CollectSink()).uid("plain")
    changelog.kinds_to_field("kind").kinds_from_field("kind").sink_to(
        lg.connectors.CollectSink(changelog=True)
    ).uid("out")
    result = env.execute("round trip", executor=LOCAL)
    plain = [r for part in result.sink_results["plain"] for r in part]
    assert plain == [{"id": r["id"], "v": r["v"], "kind": r["op"]} for r in OPS]
    assert changes(result) == [lg.Change(r["op"], {"id": r["id"], "v": r["v"]}) for r in OPS]


def arrow_ops(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Numbers as Arrow rows with a kind column: every third a delete, the next an
    update pair's halves alternately."""
    v = batch.column(0).to_numpy()
    ops = np.array(["+I", "-D", "-U", "+U"], dtype=object)[v % 4]
    return pa.RecordBatch.from_arrays(
        [pa.array(v % 50), pa.array(v), pa.array(ops)], names=["id", "v", "op"]
    )


@pytest.mark.hang_guard(180)
def test_arrow_batches_carry_kinds_as_a_column_through_map_batches_and_key_by(
    executor: Any,
) -> None:
    """Arrow batches: kinds_from_field on a string column, a map_batches returning one
    row per input row (kinds kept), a key_by, and kinds_to_field back: every record's
    kind is its op's."""
    n = 20_000
    env = lg.StreamEnvironment(parallelism=2)
    (
        env.from_source(lg.connectors.SequenceSource(0, n, batch_size=1_000))
        .map_batches(arrow_ops)
        .kinds_from_field("op")
        .map_batches(lambda b: b.set_column(1, "v", pa.compute.multiply(b.column(1), 10)))
        .key_by("id")
        .kinds_to_field("op")
        .sink_to(lg.connectors.CollectSink())
        .uid("out")
    )
    result = env.execute("arrow kinds", executor=executor)
    got = sorted((r["v"], r["op"]) for part in result.sink_results["out"] for r in part)
    shorts = ["+I", "-D", "-U", "+U"]
    assert got == [(v * 10, shorts[v % 4]) for v in range(n)]


def test_a_map_batches_that_changes_the_row_count_of_a_changelog_fails_clearly() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    (
        env.from_collection(OPS)
        .kinds_from_field("op")
        .map_batches(lambda b: b.slice(0, 1))
        .sink_to(lg.connectors.CollectSink(changelog=True))
    )
    with pytest.raises(
        lg.JobFailedError, match=r"map_batches .* changelog .* one row per input row"
    ):
        env.execute("reshape", executor=LOCAL)


def test_an_append_only_sink_refuses_a_changelog_naming_itself(tmp_path: Path) -> None:
    """A FileSink would write the delete as a new line: the job fails at the sink,
    naming it, the kind, and the sinks that apply changes."""
    env = lg.StreamEnvironment(parallelism=1)
    env.from_collection(OPS).kinds_from_field("op").sink_to(
        lg.connectors.FileSink(str(tmp_path / "out"), format="jsonl"), name="files"
    )
    with pytest.raises(lg.JobFailedError) as info:
        env.execute("append-only sink", executor=LOCAL)
    message = str(info.value)
    assert "sink 'files'" in message and "-U (UPDATE_BEFORE)" in message
    assert "mode='upsert'" in message and "kinds_to_field" in message


def test_a_window_refuses_a_changelog_instead_of_counting_deletes_as_rows() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    (
        env.from_collection(OPS)
        .kinds_from_field("op")
        .assign_timestamps_and_watermarks(
            lg.WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
                lambda r: r["v"]
            )
        )
        .key_by("id")
        .window(lg.TumblingEventTimeWindows.of(100))
        .aggregate(lg.agg.count())
        .sink_to(lg.connectors.CollectSink())
    )
    with pytest.raises(lg.JobFailedError, match=r"takes append-only input, but a -U"):
        env.execute("window over a changelog", executor=LOCAL)


def test_a_change_field_with_an_unknown_code_fails_naming_the_record() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    env.from_collection([{"op": "x", "id": 1}]).kinds_from_field("op").sink_to(
        lg.connectors.CollectSink(changelog=True)
    )
    with pytest.raises(lg.JobFailedError, match=r"op='x', not a row kind; accepted: .*\+I"):
        env.execute("bad code", executor=LOCAL)


def test_debezium_like_codes_map_through_kinds_from_field() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    codes = {"c": "+I", "r": "+I", "u": "+U", "d": "-D"}
    rows = [{"op": o, "id": i} for i, o in enumerate("rcud")]
    env.from_collection(rows).kinds_from_field("op", codes=codes).sink_to(
        lg.connectors.CollectSink(changelog=True)
    ).uid("out")
    assert [c.kind for c in changes(env.execute("codes", executor=LOCAL))] == [INS, INS, UA, D]
    with pytest.raises(lg.ConfigurationError, match="kinds_from_field codes: 'z'"):
        env.from_collection(rows).kinds_from_field("op", codes={"z": "?"})


UPSERTS = [
    {"op": "+U", "id": 1, "v": 1},
    {"op": "+U", "id": 1, "v": 1},  # the same row again: nothing
    {"op": "+U", "id": 1, "v": 2},
    {"op": "-D", "id": 9},  # a key never seen: nothing
    {"op": "+U", "id": 2, "v": 5},
    {"op": "-D", "id": 1},  # only the key: the whole old row comes out
]


@pytest.mark.hang_guard(180)
def test_to_changelog_normalizes_an_upsert_stream_and_to_upserts_goes_back(executor: Any) -> None:
    env = lg.StreamEnvironment(parallelism=2)
    # one ordered upsert stream: to_changelog partitions it by key from there
    upserts = env.from_collection(UPSERTS).set_parallelism(1).kinds_from_field("op")
    full = upserts.set_parallelism(1).to_changelog("id")
    full.sink_to(lg.connectors.CollectSink(changelog=True)).uid("out")
    full.to_upserts("id").sink_to(lg.connectors.CollectSink(changelog=True)).uid("upserts")
    result = env.execute("normalize", executor=executor)
    assert by_key(changes(result)) == {
        1: [
            lg.Change(INS, {"id": 1, "v": 1}),
            lg.Change(UB, {"id": 1, "v": 1}),
            lg.Change(UA, {"id": 1, "v": 2}),
            lg.Change(D, {"id": 1, "v": 2}),
        ],
        2: [lg.Change(INS, {"id": 2, "v": 5})],
    }
    assert by_key(changes(result, "upserts")) == {
        1: [
            lg.Change(INS, {"id": 1, "v": 1}),
            lg.Change(UA, {"id": 1, "v": 2}),
            lg.Change(D, {"id": 1, "v": 2}),
        ],
        2: [lg.Change(INS, {"id": 2, "v": 5})],
    }


def test_to_upserts_turns_a_key_changing_update_into_a_delete() -> None:
    """-U of key 1 followed by +U of key 7 (a primary key changed): dropping the -U would
    leave row 1 behind in a key-value store; it becomes a -D of key 1."""
    env = lg.StreamEnvironment(parallelism=1)
    rows = [
        {"op": "+I", "id": 1, "v": 1},
        {"op": "-U", "id": 1, "v": 1},
        {"op": "+U", "id": 7, "v": 1},
    ]
    env.from_collection(rows).kinds_from_field("op").to_upserts("id").sink_to(
        lg.connectors.CollectSink(changelog=True)
    ).uid("out")
    got = changes(env.execute("key change", executor=LOCAL))
    assert got == [
        lg.Change(INS, {"id": 1, "v": 1}),
        lg.Change(D, {"id": 1, "v": 1}),
        lg.Change(UA, {"id": 7, "v": 1}),
    ]
    assert apply(got) == {7: {"id": 7, "v": 1}}


ORDERS = 400
STATUSES = ["new", "paid", "shipped", "returned"]


def order_changes(steps: int) -> list[dict[str, Any]]:
    """A changelog of orders whose status changes: creations, status updates as -U/+U
    pairs, deletes; deterministic."""
    rng = np.random.default_rng(7)
    table: dict[int, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for _ in range(steps):
        oid = int(rng.integers(ORDERS))
        row = table.get(oid)
        roll = rng.random()
        if row is None:
            new = {"id": oid, "status": "new", "amount": int(rng.integers(1, 100))}
            table[oid] = new
            out.append({"op": "+I", **new})
        elif roll < 0.15:
            del table[oid]
            out.append({"op": "-D", **row})
        else:
            new = {**row, "status": STATUSES[int(rng.integers(len(STATUSES)))]}
            table[oid] = new
            out.extend([{"op": "-U", **row}, {"op": "+U", **new}])
    return out


@pytest.mark.hang_guard(300)
@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_count_and_sum_per_status_retract_as_statuses_change_and_equal_pandas_M_T4_M_R1(
    executor: Any, unaligned: bool, tmp_path: Path
) -> None:
    """Orders change status (-U old, +U new) and are deleted; a keyed aggregate per
    status (count, sum, min, max, count_distinct of amount) retracts what each update
    and delete takes back. The changelog of its results, applied, equals pandas' group-by
    over the final orders table, through a failure restored from a checkpoint (unaligned:
    the changes in flight are recorded and replayed with their kinds, M-R1)."""
    rows = order_changes(30_000)
    final: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r["op"] in ("+I", "+U"):
            final[r["id"]] = r
        else:
            final.pop(r["id"], None)
    frame = pd.DataFrame(list(final.values()))
    expected = {
        status: {
            "status": status,
            "count": len(g),
            "sum_amount": int(g["amount"].sum()),
            "min_amount": int(g["amount"].min()),
            "max_amount": int(g["amount"].max()),
            "count_distinct_amount": int(g["amount"].nunique()),
        }
        for status, g in frame.groupby("status")
    }
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(timedelta(milliseconds=50))
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.checkpoint_config.unaligned = unaligned
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=2, delay=0))
    # about 5,000 changes per checkpoint: every attempt lives through checkpoints with
    # aggregates in state, however slow the machine
    paced = CheckpointPacedSource(
        lg.connectors.CollectionSource(rows, batch_size=500), 5_000, end_after=3
    )
    (
        env.from_source(paced)
        .set_parallelism(1)
        .uid("orders")
        # partitioned by order id first: each order's changes stay in order (a
        # round-robin hop would let an order's -U overtake the +U it takes back)
        .key_by("id")
        .kinds_from_field("op")
        .uid("changes")
        .key_by("status")
        .aggregate(
            lg.agg.count(),
            lg.agg.sum("amount"),
            lg.agg.min("amount"),
            lg.agg.max("amount"),
            lg.agg.count_distinct("amount"),
            name="per status",
        )
        .uid("per status")
        .sink_to(lg.connectors.CollectSink(changelog=True))
        .uid("out")
    )
    inject_faults(env, FailAtRecord("per status", record=8_000, subtask=0, after_checkpoints=2))
    result = env.execute("count per status", executor=executor)
    assert result.attempts == 2, "the injected failure restarted the job"
    got = apply(changes(result), key="status")
    assert got == expected


def test_a_collection_of_changes_is_a_changelog() -> None:
    """``from_collection`` of ``lg.Change`` items: each emitted as its record with its
    kind, the plain items as inserts."""
    env = lg.StreamEnvironment(parallelism=1)
    items = [lg.Change("+I", {"id": 1}), {"id": 2}, lg.Change("-D", {"id": 1})]
    env.from_collection(items).map(lambda r: r).sink_to(
        lg.connectors.CollectSink(changelog=True)
    ).uid("out")
    assert changes(env.execute("collection of changes", executor=LOCAL)) == [
        lg.Change(INS, {"id": 1}),
        lg.Change(INS, {"id": 2}),
        lg.Change(D, {"id": 1}),
    ]


def test_a_collection_of_changes_stays_in_order_at_parallelism_two() -> None:
    """A changelog collection is one ordered split (two slices read by two subtasks
    would let a key's -U overtake the +U it takes back)."""
    items = [lg.Change("+I", {"id": 1, "v": 0})]
    for v in range(1, 2_000):
        items += [lg.Change("-U", {"id": 1, "v": v - 1}), lg.Change("+U", {"id": 1, "v": v})]
    env = lg.StreamEnvironment(parallelism=2)
    env.from_collection(items).key_by("id").map(lambda r: r).sink_to(
        lg.connectors.CollectSink(changelog=True)
    ).uid("out")
    assert changes(env.execute("ordered changes", executor=LOCAL)) == items

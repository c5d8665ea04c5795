"""Redistributing the in-flight records of an unaligned checkpoint on restore (M-B7, M-R3).

Channel state is written, per subtask, with each channel named by the uids at its edge's two
ends and its subtask indexes (``lockgate.checkpoint.channel_state``); a restore at another
parallelism hands every recorded record to exactly one new consumer subtask: by key group on
a keyed edge, whole old channels otherwise (``lockgate.recovery.channel_state``). What cannot
be redistributed fails before the job runs, naming the edge. Driven with plans built by the
API, channel-state files written to a real storage, and no job running.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

import lockgate as lg
from lockgate.checkpoint.channel_state import (
    INPUT,
    OUTPUT,
    decode,
    encode,
    freeze,
    state_key,
    summarize,
    thaw,
)
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.connectors import DiscardingSink, SequenceSource
from lockgate.core.batch import RowBatch, to_rows
from lockgate.core.key_groups import subtask_for_key
from lockgate.core.partitioners import (
    BroadcastPartitioning,
    ForwardPartitioning,
    RebalancePartitioning,
)
from lockgate.graph.channel_identity import (
    ChannelInfo,
    ConsumedEdge,
    EdgeKey,
    SubtaskChannels,
    subtask_channels,
)
from lockgate.graph.execution_plan import ExecutionPlan
from lockgate.recovery.channel_state import batches_to_replay, check_restorable, plan_edge
from lockgate.recovery.restore import RestoreSpec

MAX_P = 128


def to_record(x):
    return {"k": x, "v": x}


def identity(x):
    return x


def emit(value, ctx):
    return [value]


def build(
    parallelism: int, route: str = "key_by", *, added: str | None = None, consumer: str = "consumer"
) -> ExecutionPlan:
    """numbers -> "to-record" -> (route) -> ``consumer`` -> sink. ``added="upstream"``: a
    map between the source and "to-record"; ``added="on edge"``: one between "to-record"
    and the route."""
    env = lg.StreamEnvironment(parallelism=parallelism, max_parallelism=MAX_P)
    stream = env.from_source(SequenceSource(0, 10)).uid("numbers")
    if added == "upstream":
        stream = stream.map(identity, name="added").uid("added")
    stream = stream.map(to_record, name="to record").uid("to-record")
    if added == "on edge":
        stream = stream.map(identity, name="added").uid("added")
    if route == "key_by":
        out = stream.key_by("k").process(emit, name="consumer").uid(consumer)
    elif route == "rebalance":
        out = stream.rebalance().map(identity, name="consumer").uid(consumer)
    else:
        out = stream.broadcast().map(identity, name="consumer").uid(consumer)
    out.sink_to(DiscardingSink(), name="sink").uid("sink")
    return env.get_execution_plan("redistribution")


EDGE = EdgeKey("to-record", "consumer", None, 0)


def keys_for(consumer: int, parallelism: int, count: int, start: int = 0) -> list[int]:
    """``count`` keys the old key-group partitioning sends to ``consumer``."""
    out, k = [], start
    while len(out) < count:
        if subtask_for_key(k, parallelism, MAX_P) == consumer:
            out.append(k)
        k += 1
    return out


class Checkpoint:
    """Channel-state files of an old plan, written to a real storage, with the records of
    each channel: input side then output side, values increasing in channel order."""

    def __init__(self, tmp_path: Any, old: ExecutionPlan, per_side: int = 3) -> None:
        self.storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"))
        self.records: dict[tuple[int, int], list[dict]] = {}
        inputs: dict[tuple[int, int], dict[int, list[Any]]] = {}
        outputs: dict[tuple[int, int], list[tuple[int, int, Any]]] = {}
        layouts: dict[tuple[int, int], SubtaskChannels] = {}
        value = 0
        for vertex in old.vertices:
            for i in range(vertex.parallelism):
                layouts[(vertex.id, i)] = subtask_channels(old, vertex, i)
        for (vid, i), layout in layouts.items():
            for index, info in enumerate(layout.inputs):
                if info.edge != EDGE:
                    continue
                p, c = info.producer_subtask, info.consumer_subtask
                keys = self._keys(info, per_side * 2, value)
                rows_in = [
                    {"k": k, "v": value + n, "side": INPUT, "ch": (p, c)}
                    for n, k in enumerate(keys[:per_side])
                ]
                value += per_side
                inputs.setdefault((vid, i), {})[index] = [freeze(RowBatch(rows_in))]
                producer = next(
                    (pv, j)
                    for (pv, j), lay in layouts.items()
                    if j == p and any(o.edge == EDGE for out in lay.outputs for o in out)
                )
                w, t = next(
                    (w, t)
                    for w, out in enumerate(layouts[producer].outputs)
                    for t, o in enumerate(out)
                    if o.edge == EDGE and o.consumer_subtask == c
                )
                rows_out = [
                    {"k": k, "v": value + n, "side": OUTPUT, "ch": (p, c)}
                    for n, k in enumerate(keys[per_side:])
                ]
                value += per_side
                outputs.setdefault(producer, []).append((w, t, freeze(RowBatch(rows_out))))
                self.records[(p, c)] = rows_in + rows_out
        operators: dict[str, dict[int, Any]] = {}
        summaries = []
        for where, layout in layouts.items():
            if where not in inputs and where not in outputs:
                continue
            payload = encode(where[1], layout, inputs.get(where, {}), outputs.get(where, []))
            key = state_key(layout.owner)
            handle = self.storage.write_state(1, f"channels-{layout.owner}-{where[1]}", payload)
            operators.setdefault(key, {})[where[1]] = handle
            summaries.extend(summarize(key, where[1], payload))
        self.spec = RestoreSpec(self.storage.url, 1, operators, channels=tuple(summaries))

    @staticmethod
    def _keys(info: ChannelInfo, count: int, start: int) -> list[int]:
        if info.partitioning == "hash":
            return keys_for(info.consumer_subtask, info.consumer_parallelism, count, start)
        return list(range(start, start + count))

    def all_records(self) -> list[dict]:
        return sorted((r for rs in self.records.values() for r in rs), key=lambda r: r["v"])


def replayed(spec: RestoreSpec, new: ExecutionPlan) -> dict[int, list[dict]]:
    """New consumer subtask -> the records it replays (in order); checks each came by
    EDGE."""
    vertex = next(v for v in new.vertices if any(op.uid == "consumer" for op in v.operators))
    out: dict[int, list[dict]] = {}
    for i in range(vertex.parallelism):
        rows = []
        for edge, batch in batches_to_replay(spec, subtask_channels(new, vertex, i)):
            assert edge == EDGE
            rows.extend(to_rows(batch))
        out[i] = rows
    return out


def assert_each_once_in_channel_order(checkpoint: Checkpoint, got: dict[int, list[dict]]) -> None:
    flat = [r for rows in got.values() for r in rows]
    counts = Counter(r["v"] for r in flat)
    assert sorted(counts) == [r["v"] for r in checkpoint.all_records()], "a record lost"
    assert max(counts.values()) == 1, "a record replayed twice"
    for rows in got.values():
        for channel in checkpoint.records:
            of_channel = [r["v"] for r in rows if r["ch"] == channel]
            assert of_channel == sorted(of_channel), (
                f"channel {channel}: input side first, then output side, in channel order"
            )


# ------------------------------------------------------------------------- the file format


def test_m_b7_channel_state_names_each_channel_by_the_uids_at_its_edge_ends_and_its_subtasks() -> (
    None
):
    plan = build(2)
    consumer = next(v for v in plan.vertices if v.operators[0].uid == "consumer")
    layout = subtask_channels(plan, consumer, 1)
    assert layout.owner == "consumer" and layout.subtask == 1
    assert [(c.edge, c.producer_subtask, c.consumer_subtask) for c in layout.inputs] == [
        (EDGE, 0, 1),
        (EDGE, 1, 1),
    ]
    info = layout.inputs[0]
    assert (
        info.producer_parallelism,
        info.consumer_parallelism,
        info.partitioning,
        info.max_parallelism,
    ) == (2, 2, "hash", MAX_P)
    payload = encode(1, layout, {1: [freeze(RowBatch([{"k": 1}]))]}, [])
    [recorded] = decode(payload)
    assert recorded.side == INPUT and recorded.channel == layout.inputs[1]
    assert to_rows(thaw(recorded.batches[0])) == [{"k": 1}]
    # ids from counters and construction order are never part of the name
    again = build(2)
    again_consumer = next(v for v in again.vertices if v.operators[0].uid == "consumer")
    assert again_consumer.id != consumer.id
    named = subtask_channels(again, again_consumer, 1)
    assert (named.owner, named.inputs, named.outputs) == (
        layout.owner,
        layout.inputs,
        layout.outputs,
    )


def test_m_b7_a_file_of_the_earlier_format_decodes_with_unnamed_channels() -> None:
    legacy = {"vertex": 4, "subtask": 0, "inputs": {1: [b"x"]}, "outputs": [(0, 1, b"y")]}
    recorded = decode(legacy)
    assert [(r.side, r.channel, r.batches) for r in recorded] == [
        (INPUT, None, (b"x",)),
        (OUTPUT, None, (b"y",)),
    ]


# ----------------------------------------------------------------------- where records go


def edge(partitioning, consumers: int) -> ConsumedEdge:
    return ConsumedEdge(EDGE, partitioning, 2, consumers, MAX_P)


def old_channels(kind: str, producers: int, consumers: int) -> list[ChannelInfo]:
    pairs = (
        [(i, i) for i in range(producers)]
        if kind == "forward"
        else [(p, c) for p in range(producers) for c in range(consumers)]
    )
    return [ChannelInfo(EDGE, p, c, producers, consumers, kind, MAX_P) for p, c in pairs]


def test_m_r3_at_the_same_parallelism_every_old_channel_keeps_its_consumer_subtask() -> None:
    for kind, spec in (
        ("forward", ForwardPartitioning()),
        ("rebalance", RebalancePartitioning()),
        ("broadcast", BroadcastPartitioning()),
    ):
        replay = plan_edge(edge(spec, 2), old_channels(kind, 2, 2))
        assert not replay.by_key
        assert all(new == c for (p, c), new in replay.targets.items()), kind


def test_m_r3_at_another_parallelism_each_old_channel_goes_whole_to_exactly_one_new_subtask() -> (
    None
):
    replay = plan_edge(edge(RebalancePartitioning(), 2), old_channels("rebalance", 2, 3))
    assert not replay.by_key
    assert sorted(replay.targets) == [(p, c) for p in range(2) for c in range(3)]
    assert Counter(replay.targets.values()) == {0: 3, 1: 3}, "dealt out evenly"
    for p, c in replay.targets:
        assert sum(replay.takes((p, c), s) for s in range(2)) == 1


def test_m_r3_a_keyed_edge_at_another_parallelism_splits_records_by_key_group() -> None:
    from lockgate.core.partitioners import KeyGroupPartitioning, KeySelector

    keyed = KeyGroupPartitioning(KeySelector("k"), MAX_P)
    assert plan_edge(edge(keyed, 3), old_channels("hash", 2, 2)).by_key
    same = plan_edge(edge(keyed, 2), old_channels("hash", 2, 2))
    assert not same.by_key and all(new == c for (p, c), new in same.targets.items())


@pytest.mark.parametrize(("old_p", "new_p"), [(2, 1), (2, 2), (2, 3), (3, 2)])
def test_m_b7_m_r3_keyed_in_flight_records_reach_the_owner_of_their_key_group_once_each(
    tmp_path, old_p, new_p
) -> None:
    checkpoint = Checkpoint(tmp_path, build(old_p))
    got = replayed(checkpoint.spec, build(new_p))
    assert_each_once_in_channel_order(checkpoint, got)
    for subtask, rows in got.items():
        for r in rows:
            assert subtask_for_key(r["k"], new_p, MAX_P) == subtask, r


@pytest.mark.parametrize(("old_p", "new_p"), [(3, 1), (3, 2), (2, 3)])
def test_m_b7_m_r3_rebalanced_in_flight_records_are_dealt_out_by_whole_channels_once_each(
    tmp_path, old_p, new_p
) -> None:
    checkpoint = Checkpoint(tmp_path, build(old_p, "rebalance"))
    got = replayed(checkpoint.spec, build(new_p, "rebalance"))
    assert_each_once_in_channel_order(checkpoint, got)
    for channel in checkpoint.records:
        holders = [s for s, rows in got.items() if any(r["ch"] == channel for r in rows)]
        assert len(holders) == 1, f"old channel {channel} split over {holders}"


def test_m_b7_a_stateless_operator_added_upstream_keeps_the_edge_and_its_records(tmp_path) -> None:
    checkpoint = Checkpoint(tmp_path, build(2))
    new = build(3, added="upstream")
    check_restorable(new, checkpoint.spec)
    assert_each_once_in_channel_order(checkpoint, replayed(checkpoint.spec, new))


def test_m_b7_a_rebalance_edge_now_chained_takes_its_records_inside_the_task(tmp_path) -> None:
    # at equal parallelism without rebalance() the edge "to-record" -> "consumer" is a
    # forward edge chained into one task: the records go to the chained operator
    checkpoint = Checkpoint(tmp_path, build(2, "rebalance"))
    env = lg.StreamEnvironment(parallelism=2, max_parallelism=MAX_P)
    (
        env.from_source(SequenceSource(0, 10))
        .uid("numbers")
        .map(to_record, name="to record")
        .uid("to-record")
        .map(identity, name="consumer")
        .uid("consumer")
        .sink_to(DiscardingSink(), name="sink")
        .uid("sink")
    )
    new = env.get_execution_plan("chained")
    check_restorable(new, checkpoint.spec)
    [vertex] = [v for v in new.vertices if v.is_source]
    got = {}
    for i in range(2):
        pairs = list(batches_to_replay(checkpoint.spec, subtask_channels(new, vertex, i)))
        assert all(e == EDGE for e, _ in pairs)
        got[i] = [r for _, b in pairs for r in to_rows(b)]
    assert_each_once_in_channel_order(checkpoint, got)


# --------------------------------------------------------------- what fails, and how loudly


def test_m_b7_an_operator_inserted_between_the_edge_ends_fails_before_running_naming_both_uids(
    tmp_path,
) -> None:
    checkpoint = Checkpoint(tmp_path, build(2))
    with pytest.raises(lg.RestoreError) as error:
        check_restorable(build(2, added="on edge"), checkpoint.spec)
    message = str(error.value)
    for part in (
        "uid 'to-record'",
        "uid 'consumer'",
        "no longer connected",
        "from uid 'added'",
        "stop_with_savepoint",
        "aligned",
    ):
        assert part in message, f"{part!r} missing from: {message}"


def test_m_b7_a_broadcast_edge_at_another_consumer_parallelism_fails_naming_the_edge(
    tmp_path,
) -> None:
    checkpoint = Checkpoint(tmp_path, build(2, "broadcast"))
    check_restorable(build(2, "broadcast"), checkpoint.spec)
    assert_each_once_in_channel_order(checkpoint, replayed(checkpoint.spec, build(2, "broadcast")))
    with pytest.raises(lg.RestoreError, match=r"uid 'to-record'.*uid 'consumer'.*broadcast"):
        check_restorable(build(3, "broadcast"), checkpoint.spec)
    with pytest.raises(lg.RestoreError, match="was a broadcast edge"):
        check_restorable(build(2, "rebalance"), checkpoint.spec)


def test_m_b7_records_for_a_removed_consumer_fail_unless_non_restored_state_is_allowed(
    tmp_path, caplog
) -> None:
    checkpoint = Checkpoint(tmp_path, build(2))
    other = build(2, consumer="other")
    with pytest.raises(lg.RestoreError, match="no operator with uid 'consumer'"):
        check_restorable(other, checkpoint.spec)
    with caplog.at_level(logging.WARNING, logger="lockgate.recovery.channel_state"):
        check_restorable(other, checkpoint.spec, allow_non_restored_state=True)
    assert any(
        "dropping" in r.getMessage() and "uid 'consumer'" in r.getMessage() for r in caplog.records
    ), "the drop is logged with the edge"


def test_m_b7_channel_state_without_channel_names_is_refused(tmp_path) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"))
    legacy = {"vertex": 4, "subtask": 0, "inputs": {0: [freeze(RowBatch([1]))]}, "outputs": []}
    handle = storage.write_state(1, "channels-4-0", legacy)
    spec = RestoreSpec(
        storage.url,
        1,
        {"channels:4": {0: handle}},
        channels=tuple(summarize("channels:4", 0, legacy)),
    )
    with pytest.raises(lg.RestoreError, match="does not name their channels"):
        check_restorable(build(2), spec)

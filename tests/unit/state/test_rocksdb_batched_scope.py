"""Batch scopes of the RocksDB keyed state backend (lockgate.state.rocksdb.batch): the
state of one input batch is read with one multi-get and written with one write batch.
Each test would fail if a buffered write were lost (never reaching the database, a
snapshot or a timer) or a read were stale (not seeing an earlier write of the batch):
direct on the backend, through the keyed process operator, and as a random
differential run against the heap backend's per-call path."""

from __future__ import annotations

import copy
import pickle
import random
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

import lockgate as lg
from lockgate.core.batch import RowBatch
from lockgate.core.clock import ManualClock
from lockgate.core.key_groups import key_group_for
from lockgate.state.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from lockgate.state.keyed import HeapKeyedStateBackend
from lockgate.state.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.state.rocksdb.batch import BatchScope, cache_key
from lockgate.state.rocksdb.cache import ABSENT, DEFAULT_CACHE_ENTRIES
from lockgate.state.rocksdb.codec import decode_key, encode_key, key_group_of, split_row
from lockgate.state.rocksdb.files import rows
from lockgate.state.ttl import StateTtlConfig
from lockgate.testing import OperatorHarness, OperatorSnapshot


@pytest.fixture(params=[0, DEFAULT_CACHE_ENTRIES], ids=["scope_only", "write_back_cache"])
def rocks(tmp_path: Any, request: Any) -> Any:
    """Each test runs with the per-batch scope cache alone (``cache_entries=0``) and with
    the write-back cache across batches (lockgate.state.rocksdb.cache)."""
    backend = RocksDBKeyedStateBackend(
        "op", 128, local_dir=str(tmp_path), cache_entries=request.param
    )
    yield backend
    backend.close()


@pytest.fixture
def scope_only(tmp_path: Any) -> Any:
    """Without the cache across batches: a batch's writes reach the database at its end."""
    backend = RocksDBKeyedStateBackend("op", 128, local_dir=str(tmp_path), cache_entries=0)
    yield backend
    backend.close()


def db_row_list(backend: RocksDBKeyedStateBackend) -> list[tuple[Any, bytes]]:
    return [(decode_key(row[4:]), raw) for row, raw in rows(backend._db)]


def db_rows(backend: RocksDBKeyedStateBackend) -> dict[Any, bytes]:
    """What the database itself holds (no cache): key -> raw value."""
    return {decode_key(row[4:]): raw for row, raw in rows(backend._db)}


# -- the backend's scope API -----------------------------------------------------------------


def test_a_write_is_read_back_in_the_same_batch_and_reaches_the_database_at_its_end(
    scope_only: Any,
) -> None:
    rocks = scope_only
    count = rocks.get_state(ValueStateDescriptor("count", default=0))
    rocks.begin_batch([7, 7, 7])
    for _ in range(3):
        rocks.current_key = 7
        count.update(count.value() + 1)
    assert count.value() == 3, "each read saw the write before it"
    assert db_rows(rocks) == {}, "inside the scope the writes are buffered"
    rocks.end_batch()
    assert set(db_rows(rocks)) == {7}
    rocks.current_key = 7
    assert count.value() == 3, "outside a scope the database holds the value"


def test_two_keys_in_one_batch_keep_their_own_values(rocks: Any) -> None:
    count = rocks.get_state(ValueStateDescriptor("count", default=0))
    for batch in ([1, 2, 1, 2, 2], [2, 1]):
        rocks.begin_batch(batch)
        for k in batch:
            rocks.current_key = k
            count.update(count.value() + 1)
        rocks.end_batch()
    assert {k: count_of(rocks, count, k) for k in (1, 2)} == {1: 3, 2: 4}


def count_of(backend: Any, state: Any, key: Any) -> Any:
    backend.current_key = key
    return state.value()


def test_a_snapshot_inside_a_batch_holds_every_write_made_before_it(rocks: Any) -> None:
    count = rocks.get_state(ValueStateDescriptor("count", default=0))
    rocks.begin_batch([1, 2])
    rocks.current_key = 1
    count.update(10)
    view = rocks.snapshot()
    rocks.current_key = 2
    count.update(20)  # after the snapshot: not in it
    rocks.current_key = 1
    assert count.value() == 10, "the scope's cache stays valid after the flush"
    rocks.end_batch()
    try:
        payload = view.materialize()
    finally:
        view.release()
    restored = RocksDBKeyedStateBackend("op", 128, local_dir=rocks.working_dir + "-r")
    try:
        restored.restore([payload], range(128))
        assert restored.entries() == {"count": {1: 10}}
    finally:
        restored.close()


def test_clear_then_read_in_one_batch_sees_no_value_and_deletes_the_row(rocks: Any) -> None:
    count = rocks.get_state(ValueStateDescriptor("count", default=-1))
    rocks.current_key = 5
    count.update(1)
    rocks.begin_batch([5])
    rocks.current_key = 5
    count.clear()
    assert count.value() == -1
    count.update(2)
    count.update(None)
    assert count.value() == -1
    rocks.end_batch()
    assert db_rows(rocks) == {}
    assert count.value() == -1


def test_iteration_inside_a_batch_sees_the_buffered_writes(rocks: Any) -> None:
    count = rocks.get_state(ValueStateDescriptor("count", default=0))
    rocks.current_key = "gone"
    count.update(1)
    rocks.begin_batch(["a", "gone"])
    rocks.current_key = "a"
    count.update(1)
    rocks.current_key = "gone"
    count.clear()
    assert rocks.entries() == {"count": {"a": 1}}
    rocks.current_key = "a"
    count.update(2)  # the scope goes on after the iteration
    assert rocks.keys("count") == ["a"]
    rocks.current_key = "b"
    count.update(3)
    assert sorted(rocks.keys("count")) == ["a", "b"]
    rocks.current_key = "a"
    assert count.value() == 2
    rocks.end_batch()
    assert rocks.entries() == {"count": {"a": 2, "b": 3}}


def test_list_and_map_state_change_step_by_step_within_one_batch(rocks: Any) -> None:
    items = rocks.get_state(ListStateDescriptor("items"))
    index = rocks.get_state(MapStateDescriptor("index"))
    rocks.begin_batch(["k"])
    rocks.current_key = "k"
    items.add(1)
    items.add_all([2, 3])
    assert items.get() == [1, 2, 3]
    index.put("a", 1)
    index["b"] = 2
    del index["a"]
    assert index.items() == [("b", 2)] and "a" not in index and len(index) == 1
    index.remove("b")
    assert index.is_empty()
    items.update([])
    assert items.get() == []
    items.add(4)
    index.put("c", 3)
    rocks.end_batch()
    assert rocks.entries() == {"items": {"k": [4]}, "index": {"k": {"c": 3}}}


def test_a_value_read_in_a_batch_is_a_copy(rocks: Any) -> None:
    items = rocks.get_state(ValueStateDescriptor("items", default=None))
    rocks.begin_batch(["k"])
    rocks.current_key = "k"
    items.update([1])
    got = items.value()
    got.append(2)  # not written back: not state
    assert items.value() == [1]
    rocks.end_batch()
    assert items.value() == [1]


def test_keys_of_different_types_never_share_a_row_in_a_batch(rocks: Any) -> None:
    count = rocks.get_state(ValueStateDescriptor("count", default=0))
    keys = [1, 1.0, True, np.int64(1), "1", b"1", (1,), (1.0,), None]
    rocks.begin_batch(keys)
    for k in keys:
        rocks.current_key = k
        count.update(count.value() + 1)
    rocks.end_batch()
    rocks.flush()  # with the write-back cache, the rows are written here
    # from the rows, keys by their encoding: a dict of decoded keys would merge 1 and 1.0
    stored = {encode_key(k): pickle.loads(raw) for k, raw in db_row_list(rocks)}
    assert len(stored) == 8, "nine keys, np.int64(1) sharing the row of 1"
    assert stored[encode_key(1)] == 2
    for k in (1.0, True, "1", b"1", (1,), (1.0,), None):
        assert stored[encode_key(k)] == 1, k


def test_the_scope_computes_the_same_rows_as_the_per_call_path(tmp_path: Any) -> None:
    rnd = random.Random(3)
    keys: list[Any] = [rnd.randrange(-(2**70), 2**70) for _ in range(50)]
    keys += [rnd.randrange(10**6) for _ in range(300)] + ["x", "ß", (1, "a"), 2.5, None]
    for batch in (keys[:350], keys):  # all ints (vectorized key groups), then mixed
        scope = BatchScope(128)
        scope.add_keys(batch)
        for k in batch:
            kg, enc = scope.parts[cache_key(k)]
            assert enc == encode_key(k)
            assert (
                kg
                == key_group_of(k, 128).to_bytes(2, "big")
                == key_group_for(k, 128).to_bytes(2, "big")
            )


def test_a_key_that_cannot_be_encoded_fails_only_when_state_is_used(rocks: Any) -> None:
    class Unpicklable:
        def __reduce__(self) -> Any:
            raise TypeError("no")

    count = rocks.get_state(ValueStateDescriptor("count", default=0))
    bad = Unpicklable()
    rocks.begin_batch([bad, 1])  # a batch whose function never touches state is fine
    rocks.current_key = 1
    count.update(1)
    rocks.current_key = bad
    with pytest.raises(lg.errors.UnsupportedKeyError):
        count.value()
    rocks.end_batch()
    assert rocks.entries() == {"count": {1: 1}}


def test_a_state_first_used_inside_a_batch_is_cached_and_prefetched_afterwards(
    rocks: Any,
) -> None:
    rocks.begin_batch([1, 2])
    late = rocks.get_state(ReducingStateDescriptor("sum", lambda a, b: a + b))
    rocks.current_key = 1
    late.add(5)
    late.add(6)
    assert late.get() == 11
    rocks.end_batch()
    table = rocks._tables["sum"]
    assert table.used
    rocks.begin_batch([1, 2])
    assert table._cache == {1: table._cache[1], 2: ABSENT}, "prefetched: both keys"
    rocks.current_key = 1
    assert late.get() == 11
    rocks.end_batch()


def test_processing_time_ttl_applies_inside_a_batch(tmp_path: Any) -> None:
    clock = ManualClock(1_000)
    backend = RocksDBKeyedStateBackend("op", 128, local_dir=str(tmp_path), clock=clock)
    try:
        d = ValueStateDescriptor("v", default="none")
        d.enable_time_to_live(StateTtlConfig(timedelta(milliseconds=100)))
        v = backend.get_state(d)
        backend.begin_batch(["k"])
        backend.current_key = "k"
        v.update("x")
        assert v.value() == "x"
        backend.end_batch()
        clock.advance(150)
        backend.begin_batch(["k"])
        backend.current_key = "k"
        assert v.value() == "none", "expired"
        backend.end_batch()
        assert db_rows(backend) == {}, "the expired value was deleted on read"
    finally:
        backend.close()


def test_an_exception_in_a_batch_still_writes_what_came_before(rocks: Any) -> None:
    count = rocks.get_state(ValueStateDescriptor("count", default=0))
    rocks.begin_batch([1])
    try:
        rocks.current_key = 1
        count.update(9)
        raise RuntimeError("user code failed")
    except RuntimeError:
        pass
    finally:
        rocks.end_batch()
    assert rocks.entries() == {"count": {1: 9}}, "as the per-call path would have"


def test_a_restore_ends_an_open_scope_and_starts_from_the_snapshot(rocks: Any) -> None:
    count = rocks.get_state(ValueStateDescriptor("count", default=0))
    rocks.current_key = 1
    count.update(1)
    view = rocks.snapshot()
    payload = view.materialize()
    view.release()
    other = RocksDBKeyedStateBackend("op", 128, local_dir=rocks.working_dir + "-o")
    try:
        state = other.get_state(ValueStateDescriptor("count", default=0))
        other.begin_batch([1])
        other.current_key = 1
        state.update(50)
        other.restore([payload], range(128))
        other.current_key = 1
        assert state.value() == 1
        assert other._scope is None
    finally:
        other.close()


# -- random differential: batched RocksDB == per-call heap -------------------------------------


def apply(op: tuple[Any, ...], handles: dict[str, Any]) -> Any:
    kind, *args = op
    if kind == "incr":
        v = handles["value"]
        v.update(v.value() + args[0])
        return v.value()
    if kind == "clear":
        handles[args[0]].clear()
        return None
    if kind == "add":
        handles["list"].add(args[0])
        return handles["list"].get()
    if kind == "put":
        handles["map"].put(args[0], args[1])
        return handles["map"].items()
    if kind == "remove":
        handles["map"].remove(args[0])
        return sorted(handles["map"].keys())
    if kind == "reduce":
        handles["reducing"].add(args[0])
        return handles["reducing"].get()
    raise AssertionError(kind)


def random_op(rnd: random.Random) -> tuple[Any, ...]:
    kind = rnd.choice(["incr", "incr", "clear", "add", "put", "remove", "reduce"])
    if kind == "clear":
        return (kind, rnd.choice(["value", "list", "map", "reducing"]))
    if kind in ("put", "remove"):
        return (kind, rnd.randrange(4), rnd.randrange(100))[: 3 if kind == "put" else 2]
    return (kind, rnd.randrange(1, 10))


def make_handles(backend: Any) -> dict[str, Any]:
    return {
        "value": backend.get_state(ValueStateDescriptor("value", default=0)),
        "list": backend.get_state(ListStateDescriptor("list")),
        "map": backend.get_state(MapStateDescriptor("map")),
        "reducing": backend.get_state(ReducingStateDescriptor("reducing", lambda a, b: a + b)),
    }


@pytest.mark.parametrize("cache_entries", [0, 3, 10, DEFAULT_CACHE_ENTRIES])
@pytest.mark.parametrize("seed", range(4))
def test_random_batches_snapshots_and_restores_match_the_heap_backend(
    tmp_path: Any, seed: int, cache_entries: int
) -> None:
    """Also M-T3 with the write-back cache: snapshots inside and between batches hold
    every write before them; small bounds evict (and write back) all the time; a fifth
    of the batches run outside scopes (the per-call path timers use)."""
    rnd = random.Random(seed)
    keys: list[Any] = list(range(12)) + ["a", "b", (1, "x"), 1.5]
    heap = HeapKeyedStateBackend("op", 128)

    def fresh(where: str) -> RocksDBKeyedStateBackend:
        return RocksDBKeyedStateBackend("op", 128, local_dir=where, cache_entries=cache_entries)

    rocks = fresh(str(tmp_path))
    try:
        h, r = make_handles(heap), make_handles(rocks)
        for step in range(60):
            batch = [rnd.choice(keys) for _ in range(rnd.randrange(1, 30))]
            scoped = rnd.random() < 0.8
            if scoped:
                rocks.begin_batch(batch)
            for k in batch:
                op = random_op(rnd)
                heap.current_key = rocks.current_key = k
                assert apply(op, r) == apply(op, h), f"step {step} key {k!r} {op}"
                if rnd.random() < 0.02:  # a barrier inside the batch
                    check_snapshot(rocks, heap, str(tmp_path / f"s{step}"))
            if scoped:
                rocks.end_batch()
            if cache_entries:
                assert rocks.cached_entries() <= cache_entries, "the bound holds between batches"
            if rnd.random() < 0.1:  # a barrier between batches, then go on from it
                rocks = restore_copy(rocks, str(tmp_path / f"r{step}"), fresh)
                r = make_handles(rocks)
        assert rocks.entries() == heap.entries()
    finally:
        rocks.close()


def check_snapshot(rocks: Any, heap: Any, where: str) -> None:
    view = rocks.snapshot()
    try:
        payload = view.materialize()
    finally:
        view.release()
    copy_ = RocksDBKeyedStateBackend("op", 128, local_dir=where)
    try:
        copy_.restore([copy.deepcopy(payload)], range(128))
        assert copy_.entries() == heap.entries(), "the snapshot holds every write so far"
    finally:
        copy_.close()


def restore_copy(rocks: Any, where: str, make: Any) -> Any:
    view = rocks.snapshot()
    try:
        payload = view.materialize()
    finally:
        view.release()
    rocks.close()
    fresh = make(where)
    fresh.restore([payload], range(128))
    return fresh


# -- through the keyed process operator -------------------------------------------------------


class CountThenTimer(lg.KeyedProcessFunction):
    """Counts records per key; registers an event-time timer at the record's ``t`` that
    reports the count it reads (and doubles it) when it fires."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, r: dict[str, Any], ctx: Any) -> Any:
        c = self.count.value() + 1
        self.count.update(c)
        ctx.timer_service().register_event_time_timer(r["t"])
        yield {"k": ctx.current_key, "count": c}

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        c = self.count.value()
        self.count.update(c * 2)
        yield {"k": ctx.current_key, "timer": timestamp, "count": c}


def open_operator(
    restored: OperatorSnapshot | None = None, cache_entries: int = DEFAULT_CACHE_ENTRIES
) -> OperatorHarness:
    h = OperatorHarness.for_keyed_process(
        CountThenTimer(),
        key="k",
        state_backend=lg.RocksDBStateBackend(cache_entries=cache_entries),
        name="counts",
        uid="counts",
    )
    return h.open(restored=restored)


def records(pairs: list[tuple[str, int]]) -> RowBatch:
    return RowBatch([{"k": k, "t": t} for k, t in pairs])


def test_the_operator_timer_sees_the_batch_writes_and_the_next_batch_the_timer_writes() -> None:
    h = open_operator()
    try:
        h.process(records([("a", 5), ("b", 5), ("a", 5), ("a", 9)]))
        assert h.operator.backend._scope is None, "the scope closed with the batch"
        h.process_watermark(5)
        assert [r for r in h.output if "timer" in r] == [
            {"k": "a", "timer": 5, "count": 3},
            {"k": "b", "timer": 5, "count": 1},
        ]
        h.process(records([("a", 20), ("b", 20)]))
        assert h.output[-2:] == [{"k": "a", "count": 7}, {"k": "b", "count": 3}]
    finally:
        h.close()


def test_the_operator_restored_from_a_mid_stream_checkpoint_goes_on_as_uninterrupted() -> None:
    batches = [records([(k, 100) for k in "abcab"[i % 3 :]]) for i in range(6)]
    h = open_operator()
    try:
        for b in batches:
            h.process(b)
        expected = h.output
    finally:
        h.close()
    h = open_operator()
    try:
        for b in batches[:3]:
            h.process(b)
        snapshot = h.snapshot()
        before = h.output
        h.process(batches[3])  # processed after the barrier: replayed below
    finally:
        h.close()
    h = open_operator(snapshot)
    try:
        for b in batches[3:]:
            h.process(b)
        assert before + h.output == expected
    finally:
        h.close()


def test_a_failing_function_leaves_no_scope_open() -> None:
    class FailsOnSecond(lg.KeyedProcessFunction):
        def open(self, ctx: lg.RuntimeContext) -> None:
            self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

        def process_element(self, r: dict[str, Any], ctx: Any) -> Any:
            self.count.update(self.count.value() + 1)
            if r["t"] == 2:
                raise ValueError("boom")
            return None

    h = OperatorHarness.for_keyed_process(
        FailsOnSecond(), key="k", state_backend=lg.RocksDBStateBackend(), name="f", uid="f"
    ).open()
    try:
        with pytest.raises(lg.errors.UserFunctionError):
            h.process(records([("a", 1), ("a", 2)]))
        assert h.operator.backend._scope is None
        assert h.operator.backend.entries() == {"count": {"a": 2}}
    finally:
        h.close()


def test_heap_backend_has_no_scopes_and_keeps_working_through_the_operator() -> None:
    assert not hasattr(HeapKeyedStateBackend("x", 128), "begin_batch")


def test_split_row_of_a_flushed_write_names_the_state(rocks: Any) -> None:
    a = rocks.get_state(ValueStateDescriptor("a", default=0))
    b = rocks.get_state(ValueStateDescriptor("b", default=0))
    rocks.begin_batch([1])
    rocks.current_key = 1
    a.update(1)
    b.update(2)
    rocks.end_batch()
    rocks.flush()
    ids = sorted(split_row(row)[1] for row, _ in rows(rocks._db))
    assert ids == [1, 2]
    assert rocks.entries() == {"a": {1: 1}, "b": {1: 2}}


def test_the_key_estimate_metric_counts_the_written_batches() -> None:
    h = open_operator(cache_entries=0)  # with the cache: counted once written back
    try:
        h.process(records([(k, 1) for k in "abcdef"]))
        estimate = h.operator.metric_keys()
        assert isinstance(estimate, int) and 1 <= estimate <= 12
    finally:
        h.close()
    assert h.operator.metric_keys() is None, "a closed database has no estimate"

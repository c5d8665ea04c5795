"""The write-back state cache of the RocksDB keyed state backend
(lockgate.state.rocksdb.cache): entries live across input batches and reach the
database lazily. Each test would fail if a cached write were lost or seen late (a
snapshot, M-T3, or an iteration missing it), an eviction dropped a value, a delete
were forgotten, a mutable value were shared with the cache, or a restore kept stale
entries."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

import lockgate as lg
from lockgate.core.clock import ManualClock
from lockgate.errors import ConfigurationError
from lockgate.state.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from lockgate.state.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.state.rocksdb.cache import DEFAULT_CACHE_ENTRIES, is_immutable
from lockgate.state.rocksdb.codec import decode_key
from lockgate.state.rocksdb.files import rows


def make(where: Any, cache_entries: int = DEFAULT_CACHE_ENTRIES) -> RocksDBKeyedStateBackend:
    return RocksDBKeyedStateBackend("op", 128, local_dir=str(where), cache_entries=cache_entries)


@pytest.fixture
def cached(tmp_path: Any) -> Any:
    backend = make(tmp_path / "cached")
    yield backend
    backend.close()


def db_rows(backend: RocksDBKeyedStateBackend) -> dict[Any, Any]:
    """What the database itself holds (not the cache): key -> value."""
    return {decode_key(row[4:]): pickle.loads(raw) for row, raw in rows(backend._db)}


def batch_of_updates(backend: Any, state: Any, values: dict[Any, Any]) -> None:
    backend.begin_batch(list(values))
    for k, v in values.items():
        backend.current_key = k
        state.update(v)
    backend.end_batch()


def materialized(backend: Any) -> Any:
    view = backend.snapshot()
    try:
        return copy.deepcopy(view.materialize())
    finally:
        view.release()


def restored_entries(payload: Any, where: Any) -> dict[str, dict[Any, Any]]:
    fresh = make(where)
    try:
        fresh.restore([payload], range(128))
        return fresh.entries()
    finally:
        fresh.close()


def test_m_t3_a_snapshot_holds_the_writes_the_cache_had_not_written_back(
    cached: Any, tmp_path: Any
) -> None:
    count = cached.get_state(ValueStateDescriptor("count", default=0))
    batch_of_updates(cached, count, {1: 10, 2: 20})
    cached.current_key = 3
    count.update(30)  # outside a scope (the timers' path): cached too
    assert db_rows(cached) == {}, "the writes wait in the cache across batches"
    assert cached.cached_entries() == 3
    payload = materialized(cached)
    assert db_rows(cached) == {1: 10, 2: 20, 3: 30}, "the snapshot wrote them back first"
    assert restored_entries(payload, tmp_path / "r") == {"count": {1: 10, 2: 20, 3: 30}}


def test_m_t3_a_snapshot_does_not_see_cached_writes_made_after_it(
    cached: Any, tmp_path: Any
) -> None:
    count = cached.get_state(ValueStateDescriptor("count", default=0))
    batch_of_updates(cached, count, {1: 1})
    view = cached.snapshot()
    batch_of_updates(cached, count, {1: 2, 2: 2})
    cached.flush()  # written to the live database, never to the snapshot's files
    try:
        payload = copy.deepcopy(view.materialize())
    finally:
        view.release()
    assert restored_entries(payload, tmp_path / "r") == {"count": {1: 1}}


def test_m_t3_a_delete_in_the_cache_reaches_the_snapshot(cached: Any, tmp_path: Any) -> None:
    count = cached.get_state(ValueStateDescriptor("count", default=0))
    batch_of_updates(cached, count, {1: 1, 2: 2})
    cached.flush()
    assert db_rows(cached) == {1: 1, 2: 2}
    cached.begin_batch([1])
    cached.current_key = 1
    count.clear()
    cached.end_batch()
    assert db_rows(cached) == {1: 1, 2: 2}, "the delete waits in the cache"
    cached.current_key = 1
    assert count.value() == 0, "the cached delete hides the database's row"
    payload = materialized(cached)
    assert restored_entries(payload, tmp_path / "r") == {"count": {2: 2}}
    assert db_rows(cached) == {2: 2}


def test_keys_and_entries_see_cached_writes_and_deletes(cached: Any) -> None:
    count = cached.get_state(ValueStateDescriptor("count", default=0))
    items = cached.get_state(ListStateDescriptor("items"))
    batch_of_updates(cached, count, {"a": 1, "b": 2})
    cached.flush()
    cached.begin_batch(["b", "c"])
    cached.current_key = "b"
    count.clear()
    cached.current_key = "c"
    count.update(3)
    items.add("x")
    cached.end_batch()
    assert sorted(cached.keys("count")) == ["a", "c"]
    assert cached.entries() == {"count": {"a": 1, "c": 3}, "items": {"c": ["x"]}}


@pytest.mark.parametrize("bound", [1, 2, 5])
def test_eviction_under_a_small_bound_keeps_every_value(tmp_path: Any, bound: int) -> None:
    backend = make(tmp_path, cache_entries=bound)
    try:
        count = backend.get_state(ValueStateDescriptor("count", default=0))
        names = backend.get_state(MapStateDescriptor("names"))
        expected: dict[Any, int] = {}
        for step in range(30):
            keys = [(step * 7 + i) % 40 for i in range(6)] + [("t", step % 3), "s"]
            backend.begin_batch(keys)
            for k in keys:
                backend.current_key = k
                count.update(count.value() + 1)
                names.put(str(k), step)
                expected[k] = expected.get(k, 0) + 1
            backend.end_batch()
            assert backend.cached_entries() <= bound, "the bound holds between batches"
            backend.current_key = step  # the per-call path evicts before it adds
            count.update(count.value() + 1)
            expected[step] = expected.get(step, 0) + 1
            assert backend.cached_entries() <= bound
        for k, n in expected.items():
            backend.current_key = k
            assert count.value() == n, f"key {k!r}"
        assert backend.entries()["count"] == expected
    finally:
        backend.close()


def test_mutable_values_read_from_the_cache_are_copies(cached: Any) -> None:
    value = cached.get_state(ValueStateDescriptor("value", default=None))
    index = cached.get_state(MapStateDescriptor("index"))
    for scoped in (True, False):
        if scoped:
            cached.begin_batch(["k"])
        cached.current_key = "k"
        value.update([1])
        index.put("a", [1])
        got = value.value()
        got.append(2)  # not written back with update(): not state
        index.get("a").append(2)
        assert value.value() == [1] and index.get("a") == [1]
        mixed = (1, [2])  # a tuple holding a list is mutable: cached serialized
        value.update(mixed)
        mixed[1].append(3)
        assert value.value() == (1, [2])
        if scoped:
            cached.end_batch()
    assert cached.entries() == {"value": {"k": (1, [2])}, "index": {"k": {"a": [1]}}}


def test_immutable_values_are_cached_as_the_objects_themselves(cached: Any) -> None:
    class Tagged(int):  # a subclass may carry mutable attributes: always a copy
        pass

    value = cached.get_state(ValueStateDescriptor("value", default=None))
    cached.current_key = 1
    big = 10**30
    value.update(big)
    assert value.value() is big, "a hit costs a dict lookup, no unpickling"
    t = Tagged(5)
    t.note = ["x"]  # type: ignore[attr-defined]
    value.update(t)
    got = value.value()
    assert got == 5 and got is not t and type(got) is Tagged
    assert is_immutable((1, "a", None, 2.5, b"x", (True,)))
    assert not is_immutable((1, [2])) and not is_immutable(Tagged(1))


def test_a_restore_writes_back_then_starts_with_an_empty_cache(tmp_path: Any) -> None:
    source = make(tmp_path / "src")
    try:
        count = source.get_state(ValueStateDescriptor("count", default=0))
        batch_of_updates(source, count, {2: 7})
        payload = materialized(source)
    finally:
        source.close()
    results = []
    for bound in (0, DEFAULT_CACHE_ENTRIES):
        backend = make(tmp_path / f"b{bound}", cache_entries=bound)
        try:
            count = backend.get_state(ValueStateDescriptor("count", default=0))
            batch_of_updates(backend, count, {1: 5, 2: 100})
            backend.restore([payload], range(128))
            assert backend.cached_entries() == 0
            backend.current_key = 2
            results.append((count.value(), backend.entries()))
        finally:
            backend.close()
    assert results[0] == results[1] == (7, {"count": {1: 5, 2: 7}}), (
        "the cached writes were written back before the restore, as the per-call path holds"
    )


def test_cache_entries_0_writes_every_batch_and_keeps_nothing(tmp_path: Any) -> None:
    backend = make(tmp_path, cache_entries=0)
    try:
        count = backend.get_state(ValueStateDescriptor("count", default=0))
        batch_of_updates(backend, count, {1: 1, 2: 2})
        assert db_rows(backend) == {1: 1, 2: 2}, "written at the end of the batch"
        assert backend.cached_entries() == 0
        backend.current_key = 3
        count.update(3)
        assert db_rows(backend)[3] == 3, "outside scopes each call goes to the database"
    finally:
        backend.close()


def test_ttl_expiry_applies_to_cached_values(tmp_path: Any) -> None:
    from datetime import timedelta

    clock = ManualClock(1_000)
    backend = RocksDBKeyedStateBackend("op", 128, local_dir=str(tmp_path), clock=clock)
    try:
        d = ValueStateDescriptor("v", default="none")
        d.enable_time_to_live(lg.StateTtlConfig(timedelta(milliseconds=100)))
        v = backend.get_state(d)
        batch_of_updates(backend, v, {"k": "x"})
        clock.advance(150)
        backend.current_key = "k"
        assert v.value() == "none"
        assert backend.entries() == {"v": {}}
    finally:
        backend.close()


@pytest.mark.parametrize("bad", [-1, True, 1.5, "100", None])
def test_a_bad_cache_bound_is_refused_with_how_to_fix_it(tmp_path: Any, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"cache_entries=\.\.\.\) must be an int >= 0"):
        lg.RocksDBStateBackend(cache_entries=bad)
    with pytest.raises(ConfigurationError, match="0 turns the cache off"):
        RocksDBKeyedStateBackend("op", 128, local_dir=str(tmp_path), cache_entries=bad)


def test_the_configured_bound_reaches_each_subtask_backend(tmp_path: Any) -> None:
    config = pickle.loads(
        pickle.dumps(lg.RocksDBStateBackend(local_dir=str(tmp_path), cache_entries=7))
    )
    assert lg.RocksDBStateBackend(local_dir=str(tmp_path)).cache_entries == DEFAULT_CACHE_ENTRIES
    backend = config.create_keyed_backend("op", 128, clock=ManualClock(0))
    try:
        assert backend.cache_entries == 7
    finally:
        backend.close()


def test_m_t3_the_dirty_list_is_compacted_and_still_writes_back_every_key(
    cached: Any, tmp_path: Any
) -> None:
    count = cached.get_state(ValueStateDescriptor("count", default=0))
    table = cached._tables["count"]
    table._limit = 8  # compaction past 8 entries (the default is 2 x bound + 65,536)
    for i in range(60):
        cached.current_key = i % 3
        count.update(count.value() + 1)
        assert len(table._dirty) <= 8, "repeats are dropped, not accumulated"
    assert db_rows(cached) == {}
    payload = materialized(cached)
    assert restored_entries(payload, tmp_path / "r") == {"count": {0: 20, 1: 20, 2: 20}}
    assert table._dirty == [], "written back: clean"

"""Many keys at once: ``ValueState.values_of`` / ``update_all`` on both keyed state backends,
the RocksDB backend's column mode (lockgate.state.rocksdb.columns), its int64 index
(lockgate.state.int64_positions) and its vectorized rows (lockgate.state.rocksdb.rows).

Each test would fail if a many-keys call disagreed with the same calls made one key at a
time (the heap backend is the oracle), if a value written in column mode were lost or
seen late by a snapshot (M-T3) or a per-key call, if a type changed on the way (an int
read back as a float), if a mutable value were shared with the cache, or if a row key or
value bytes differed from what the per-key path writes."""

from __future__ import annotations

import pickle
import random
from typing import Any

import numpy as np
import pytest
from test_rocksdb_cache import db_rows, make, materialized, restored_entries

from lockgate.state.descriptors import ValueStateDescriptor
from lockgate.state.int64_positions import Int64Positions
from lockgate.state.keyed import HeapKeyedStateBackend
from lockgate.state.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.state.rocksdb.codec import U16, encode_key, key_group_of
from lockgate.state.rocksdb.rows import int_key_rows, number_values


def restored(backend: RocksDBKeyedStateBackend, where: Any) -> dict[str, dict[Any, Any]]:
    """The entries a fresh backend restores from a snapshot of ``backend``."""
    return restored_entries(materialized(backend), where)


# -- the index and the rows ------------------------------------------------------------------


def test_int64_positions_agree_with_a_dict_through_collisions_and_growth() -> None:
    rng = np.random.default_rng(7)
    index, oracle = Int64Positions(), {}
    for round_ in range(60):
        if round_ % 3 == 0:  # a narrow range: the same keys again and again
            batch = rng.integers(-3000, 3000, 500)
        else:
            batch = rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64)
        found = index.find(batch)
        assert found.tolist() == [oracle.get(int(k), -1) for k in batch]
        new = np.unique(batch[found < 0])
        for k, p in zip(new.tolist(), index.add(new).tolist()):
            oracle[k] = p
    assert len(index) == len(oracle)
    assert index.keys.tolist() == list(oracle)
    assert index.find(np.array([], dtype=np.int64)).tolist() == []


@pytest.mark.parametrize("max_parallelism", [1, 128, 32768])
def test_vectorized_rows_are_the_per_key_rows_in_rocksdb_order(max_parallelism: int) -> None:
    rng = random.Random(3)
    keys = [rng.randrange(-300, 300) for _ in range(3000)]
    keys += [rng.randrange(-(2**63) + 1, 2**63) for _ in range(3000)]
    keys += [0, -1, 127, 128, -128, -129, 255, 256, 65535, 65536, 2**63 - 1, -(2**63) + 1]
    keys = list(dict.fromkeys(keys))
    sid = U16.pack(9)
    built = int_key_rows(np.array(keys), sid, max_parallelism)
    assert built is not None
    made, order = built
    expected = [U16.pack(key_group_of(k, max_parallelism)) + sid + encode_key(k) for k in keys]
    assert made == [expected[i] for i in order.tolist()]
    short = [row for row, i in zip(made, order.tolist()) if abs(keys[i]) < 2**39]
    assert short == sorted(short), "rows of keys up to 5 bytes come in RocksDB's order"
    assert int_key_rows(np.array([-(2**63)]), sid, 128) is None, "9 bytes: one at a time"


def test_vectorized_values_read_back_as_the_same_values_of_the_same_type() -> None:
    ints = [0, 1, 255, 256, 65535, 65536, -1, -128, 2**31 - 1, -(2**31), 2**31, -(2**31) - 1]
    ints += [2**63 - 1, -(2**63)] + [random.randrange(-(2**63), 2**63) for _ in range(2000)]
    got = [pickle.loads(raw) for raw in number_values(ints) or []]
    assert got == ints and all(type(v) is int for v in got)
    floats = [0.0, -0.0, 1.5, float("inf"), float("-inf"), 1e308, 5e-324]
    got = [pickle.loads(raw) for raw in number_values(floats) or []]
    assert [repr(v) for v in got] == [repr(v) for v in floats]
    nan = pickle.loads((number_values([float("nan")]) or [b""])[0])
    assert nan != nan
    for mixed in ([1, 2.0], [True, 1], [2**64], ["a"], [None]):
        assert number_values(mixed) is None, f"{mixed!r} is pickled one value at a time"


# -- many keys against one key at a time ------------------------------------------------------


def _random_ops(rng: random.Random, n: int) -> list[tuple[str, Any, Any]]:
    """A mix of many-keys calls (ints, floats, strs, lists, Nones, repeated keys) and
    per-key calls on keys 0..399."""
    ops: list[tuple[str, Any, Any]] = []
    for _ in range(n):
        kind = rng.random()
        keys: list[Any] = [rng.randrange(400) for _ in range(rng.choice([1, 5, 70, 300]))]
        if rng.random() < 0.1:  # keys the columns cannot hold: the per-key path
            keys[0] = rng.choice([2**63 + rng.randrange(3), f"s{rng.randrange(3)}"])
        if kind < 0.35:
            ops.append(("values_of", keys, None))
        elif kind < 0.8:
            shape = rng.random()
            if shape < 0.5:
                values: list[Any] = [rng.randrange(-(2**40), 2**40) for _ in keys]
            elif shape < 0.7:
                values = [rng.random() for _ in keys]
            elif shape < 0.8:
                values = [str(rng.randrange(10)) for _ in keys]
            elif shape < 0.9:
                values = [[rng.randrange(5)] for _ in keys]  # mutable: pickled
            else:
                values = [None if rng.random() < 0.5 else rng.randrange(9) for _ in keys]
            ops.append(("update_all", keys, values))
        elif kind < 0.9:
            ops.append(("update", rng.randrange(400), rng.randrange(100)))
        elif kind < 0.95:
            ops.append(("clear", rng.randrange(400), None))
        else:
            ops.append(("flush", None, None))
    return ops


def _apply(backend: Any, state: Any, op: tuple[str, Any, Any]) -> Any:
    name, keys, values = op
    if name == "values_of":
        return state.values_of(keys)
    if name == "update_all":
        state.update_all(keys, values)
    elif name in ("update", "clear"):
        backend.current_key = keys
        state.update(values) if name == "update" else state.clear()
        return state.value()
    elif name == "flush" and hasattr(backend, "flush"):
        backend.flush()
    return None


@pytest.mark.parametrize("cache_entries", [0, 50, 1000, 1_000_000])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_many_keys_calls_agree_with_the_heap_backend(
    tmp_path: Any, cache_entries: int, seed: int
) -> None:
    rng = random.Random(seed)
    heap = HeapKeyedStateBackend("op", 128)
    rocks = make(tmp_path / "db", cache_entries)
    try:
        descriptor = ValueStateDescriptor("v", default=-7)
        h, r = heap.get_state(descriptor), rocks.get_state(descriptor)
        for step, op in enumerate(_random_ops(rng, 300)):
            if step % 40 == 0:
                keys = op[1] if isinstance(op[1], list) else [op[1]]
                rocks.begin_batch(keys)
            expected, got = _apply(heap, h, op), _apply(rocks, r, op)
            assert got == expected, f"step {step}: {op[0]}"
            as_list = lambda x: x if isinstance(x, list) else [x]  # noqa: E731
            assert [type(v) for v in as_list(got)] == [type(v) for v in as_list(expected)]
            if step % 40 == 39:
                rocks.end_batch()
        rocks.end_batch()
        assert rocks.entries() == heap.entries()
        assert restored(rocks, tmp_path / "restored") == heap.entries()
    finally:
        rocks.close()


def test_m_t3_a_snapshot_holds_the_column_writes_not_yet_written_back(tmp_path: Any) -> None:
    rocks = make(tmp_path / "db")
    try:
        count = rocks.get_state(ValueStateDescriptor("count", default=0))
        keys = list(range(1000))
        count.update_all(keys, [k * 3 for k in keys])
        assert rocks.get_state  # the table is in column mode now
        assert db_rows(rocks) == {}, "column writes wait in the cache"
        assert restored(rocks, tmp_path / "r")["count"] == {k: k * 3 for k in keys}
        assert db_rows(rocks) == {k: k * 3 for k in keys}, "the snapshot wrote them back"
    finally:
        rocks.close()


def test_a_per_key_call_sees_the_column_writes_and_the_columns_see_its_writes(
    tmp_path: Any,
) -> None:
    rocks = make(tmp_path / "db")
    try:
        count = rocks.get_state(ValueStateDescriptor("count", default=0))
        keys = list(range(500))
        count.update_all(keys, [1] * 500)
        rocks.current_key = 7
        assert count.value() == 1  # leaves column mode: written back first
        count.update(99)
        assert count.values_of([7, 8, 600] + keys[:100])[:3] == [99, 1, 0]
    finally:
        rocks.close()


def test_types_survive_the_columns_an_int_stays_an_int(tmp_path: Any) -> None:
    rocks = make(tmp_path / "db")
    try:
        state = rocks.get_state(ValueStateDescriptor("v"))
        keys = list(range(200))
        state.update_all(keys, keys)  # an int64 column
        state.update_all(keys[:100], [k + 0.5 for k in keys[:100]])  # floats: objects now
        got = state.values_of(keys)
        assert got == [k + 0.5 for k in keys[:100]] + keys[100:]
        assert [type(v) for v in got] == [float] * 100 + [int] * 100
        state.update_all(keys[:100], [2**70] * 100)  # beyond int64
        assert state.values_of(keys[:100]) == [2**70] * 100
        assert restored(rocks, tmp_path / "r")["v"][0] == 2**70
    finally:
        rocks.close()


def test_a_mutable_value_read_from_the_columns_is_a_copy(tmp_path: Any) -> None:
    rocks = make(tmp_path / "db")
    try:
        state = rocks.get_state(ValueStateDescriptor("v"))
        keys = list(range(100))
        state.update_all(keys, [[k] for k in keys])  # lists: the per-key path
        rocks.flush()
        rocks._drop_cache()
        first = state.values_of(keys)  # read through the columns
        first[0].append("changed")
        assert state.values_of(keys)[0] == [0], "state changes only through update_all"
    finally:
        rocks.close()


def test_columns_over_the_bound_are_written_back_and_emptied(tmp_path: Any) -> None:
    rocks = make(tmp_path / "db", cache_entries=300)
    try:
        state = rocks.get_state(ValueStateDescriptor("v", default=0))
        for start in range(0, 3000, 250):
            keys = list(range(start, start + 250))
            values = state.values_of(keys)
            state.update_all(keys, [v + k for v, k in zip(values, keys)])
            assert rocks.cached_entries() <= 600
        assert state.values_of(list(range(3000))) == list(range(3000))
        # reading 3000 keys outgrew the bound: everything written back, nothing dirty
        assert db_rows(rocks) == {k: k for k in range(3000)}
    finally:
        rocks.close()


def test_update_all_needs_one_value_per_key(tmp_path: Any) -> None:
    heap = HeapKeyedStateBackend("op", 128)
    state = heap.get_state(ValueStateDescriptor("v"))
    with pytest.raises(Exception, match="one value per key, got 2 keys and 1 values"):
        state.update_all([1, 2], [1])


# -- regressions found in review ---------------------------------------------------------------


@pytest.mark.parametrize("odd_key", ["a", 2**64 - 1], ids=["str", "beyond-int64"])
def test_update_all_with_a_key_columns_cannot_hold_leaves_column_mode_first(
    tmp_path: Any, odd_key: Any
) -> None:
    """A many-keys write that falls back to the per-key cache while the state is in
    column mode must not leave the older column value to win the write-back."""
    rocks = make(tmp_path / "db")
    try:
        state = rocks.get_state(ValueStateDescriptor("v", default=0))
        state.update_all(list(range(100)), [100] * 100)  # column mode, not written back
        state.update_all([5, odd_key], [200, 1])
        assert state.values_of(list(range(100)))[5] == 200
        assert rocks.entries()["v"][5] == 200
        assert restored(rocks, tmp_path / "r")["v"][5] == 200
    finally:
        rocks.close()


def test_a_caller_reusing_its_key_array_writes_the_new_keys(tmp_path: Any) -> None:
    rocks = make(tmp_path / "db")
    try:
        state = rocks.get_state(ValueStateDescriptor("v", default=0))
        keys = np.arange(100, dtype=np.int64)
        state.values_of(keys)
        keys += 1000  # the same buffer, other keys
        state.update_all(keys, np.ones(100, dtype=np.int64))
        assert state.values_of(np.arange(100)) == [0] * 100
        assert state.values_of(np.arange(1000, 1100)) == [1] * 100
    finally:
        rocks.close()


class _FailingWrites:
    """The database, whose next ``write`` raises."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.fail = True

    def write(self, batch: Any) -> None:
        if self.fail:
            self.fail = False
            raise OSError("disk full (injected)")
        self.db.write(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_a_failed_write_back_keeps_the_columns_dirty(tmp_path: Any) -> None:
    rocks = make(tmp_path / "db")
    real = rocks._db
    try:
        state = rocks.get_state(ValueStateDescriptor("v", default=0))
        state.update_all(list(range(200)), [7] * 200)
        rocks._db = _FailingWrites(real)  # type: ignore[assignment]
        with pytest.raises(OSError, match="injected"):
            rocks.flush()
        rocks.flush()  # the retry writes what the failed one did not
        rocks._db = real
        assert db_rows(rocks) == {k: 7 for k in range(200)}
    finally:
        rocks._db = real
        rocks.close()

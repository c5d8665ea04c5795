"""Copy-on-write snapshots of the heap keyed state backend (M-T3) and keyed state
partitioned by key group in snapshots and on restore (M-T4)."""

from __future__ import annotations

import copy
import pickle
import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

import lockgate as lg
from lockgate.core.key_groups import key_group_for, key_group_range
from lockgate.state import keyed as keyed_module
from lockgate.state.keyed import (
    HeapKeyedStateBackend,
    KeyedStateSnapshot,
    SnapshotReleasedError,
    UnsupportedSnapshotFormatError,
)


def backend(max_parallelism: int = 128) -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend("sums", max_parallelism=max_parallelism)


def put(b: HeapKeyedStateBackend, state: Any, key: Any, value: Any) -> None:
    b.current_key = key
    state.update(value)


def get(b: HeapKeyedStateBackend, state: Any, key: Any) -> Any:
    b.current_key = key
    return state.value()


def flat(materialized: dict[str, Any], name: str) -> dict[Any, Any]:
    """The entries of one state of a materialized snapshot, key groups merged."""
    out: dict[Any, Any] = {}
    for entries in materialized["states"][name]["key_groups"].values():
        out.update(entries)
    return out


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


@pytest.fixture
def paused_materialize(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Makes materialize stop inside its work (when it computes key groups) until the
    test says so: returns (inside, go_on)."""
    inside, go_on = threading.Event(), threading.Event()
    real = keyed_module.key_groups_of_keys

    def pausing(keys: Any, max_parallelism: int) -> Any:
        inside.set()
        assert go_on.wait(10), "the test never let materialize go on"
        return real(keys, max_parallelism)

    monkeypatch.setattr(keyed_module, "key_groups_of_keys", pausing)
    return inside, go_on


# -- the constructor ----------------------------------------------------------------------


def test_the_old_constructor_call_still_works_and_defaults_to_128_key_groups() -> None:
    b = HeapKeyedStateBackend("op")
    assert b.max_parallelism == 128
    assert b.snapshot().materialize()["max_parallelism"] == 128


def test_an_invalid_max_parallelism_is_a_configuration_error() -> None:
    with pytest.raises(lg.ConfigurationError, match="max_parallelism"):
        HeapKeyedStateBackend("op", max_parallelism=0)


# -- M-T3: the synchronous part is a copy-on-write view ---------------------------------------


def test_m_t3_the_snapshot_is_unchanged_by_updates_clears_and_new_keys_after_it() -> None:
    b = backend()
    s = b.get_state(lg.ValueStateDescriptor("count", default=0))
    for k in range(5):
        put(b, s, k, k * 10)
    snap = b.snapshot()
    put(b, s, 0, 999)  # overwrite
    b.current_key = 1
    s.clear()  # clear
    put(b, s, 2, None)  # update(None) clears
    put(b, s, 7, 70)  # a new key
    assert flat(snap.materialize(), "count") == {0: 0, 1: 10, 2: 20, 3: 30, 4: 40}
    assert {k: get(b, s, k) for k in b.keys("count")} == {0: 999, 3: 30, 4: 40, 7: 70}
    assert get(b, s, 1) == 0 and get(b, s, 2) == 0, "cleared keys read the default"
    snap.release()


def test_m_t3_mutating_in_place_a_value_read_after_the_snapshot_does_not_change_the_snapshot() -> (
    None
):
    b = backend()
    s = b.get_state(lg.ValueStateDescriptor("seen", default=[]))
    put(b, s, "a", ["x"])
    put(b, s, "b", {"n": [1]})
    snap = b.snapshot()
    b.current_key = "a"
    s.value().append("y")  # mutated without update()
    assert s.value() == ["x", "y"], "the live state keeps the in-place mutation"
    b.current_key = "b"
    d = s.value()
    d["n"].append(2)
    s.update(d)
    assert flat(snap.materialize(), "seen") == {"a": ["x"], "b": {"n": [1]}}
    snap.release()
    assert get(b, s, "a") == ["x", "y"] and get(b, s, "b") == {"n": [1, 2]}


def test_m_t3_immutable_values_are_not_copied_when_read_after_a_snapshot() -> None:
    b = backend()
    s = b.get_state(lg.ValueStateDescriptor("v"))
    value = ("k", 1, (2.5, None, b"z"))
    put(b, s, 1, value)
    snap = b.snapshot()
    assert get(b, s, 1) is value
    snap.release()


def test_m_t3_the_synchronous_part_copies_no_value(monkeypatch: pytest.MonkeyPatch) -> None:
    b = backend()
    s = b.get_state(lg.ValueStateDescriptor("lists"))
    for k in range(1000):
        put(b, s, k, [k])

    def no_copy(*_: Any) -> Any:
        raise AssertionError("snapshot() must not copy values")

    monkeypatch.setattr(copy, "deepcopy", no_copy)
    snap = b.snapshot()
    put(b, s, 5, [50])  # a write needs no copy either
    monkeypatch.undo()
    assert snap.size_hint() == 1000
    assert flat(snap.materialize(), "lists")[5] == [5]
    snap.release()


def test_m_t3_processing_continues_while_the_snapshot_materializes_in_another_thread(
    paused_materialize: tuple[threading.Event, threading.Event],
) -> None:
    inside, go_on = paused_materialize
    b = backend()
    s = b.get_state(lg.ValueStateDescriptor("total", default=0))
    for k in range(100):
        put(b, s, k, [k])
    snap = b.snapshot()
    worker, box = in_thread(snap.materialize)
    assert inside.wait(10), "materialize did not start"
    # The task thread keeps reading and writing state while materialize is inside its work.
    for k in range(100):
        b.current_key = k
        v = s.value()
        v.append("after")
        s.update(v)
    for k in range(0, 100, 2):
        b.current_key = k
        s.clear()
    for k in range(100, 150):
        put(b, s, k, [k])
    go_on.set()
    worker.join(10)
    assert not worker.is_alive() and "error" not in box
    assert flat(box["result"], "total") == {k: [k] for k in range(100)}
    snap.release()
    assert {k: get(b, s, k) for k in b.keys("total")} == {
        **{k: [k, "after"] for k in range(1, 100, 2)},
        **{k: [k] for k in range(100, 150)},
    }


def test_m_t3_two_outstanding_snapshots_each_see_their_own_view() -> None:
    b = backend()
    s = b.get_state(lg.ValueStateDescriptor("n", default=0))
    put(b, s, "a", 1)
    put(b, s, "b", [1])
    first = b.snapshot()
    put(b, s, "a", 2)
    b.current_key = "b"
    s.value().append(2)
    put(b, s, "c", 2)
    second = b.snapshot()
    put(b, s, "a", 3)
    put(b, s, "c", None)
    b.current_key = "b"
    s.value().append(3)
    third = b.snapshot()
    assert flat(second.materialize(), "n") == {"a": 2, "b": [1, 2], "c": 2}
    assert flat(first.materialize(), "n") == {"a": 1, "b": [1]}
    assert flat(third.materialize(), "n") == {"a": 3, "b": [1, 2, 3]}
    assert (first.size_hint(), second.size_hint(), third.size_hint()) == (2, 3, 2)
    assert b.outstanding_snapshots() == 3
    for snap in (second, first, third):
        snap.release()
    assert b.outstanding_snapshots() == 0
    assert {k: get(b, s, k) for k in b.keys("n")} == {"a": 3, "b": [1, 2, 3]}


@pytest.mark.parametrize("order", ["oldest first", "newest first"])
def test_m_t3_releasing_outstanding_snapshots_in_either_order_keeps_the_other_views_and_the_live_state(
    order: str,
) -> None:
    b = backend()
    s = b.get_state(lg.ValueStateDescriptor("n"))
    put(b, s, 1, "one")
    older = b.snapshot()
    put(b, s, 1, "uno")
    put(b, s, 2, "two")
    newer = b.snapshot()
    put(b, s, 2, None)
    put(b, s, 3, "three")
    first, then = (older, newer) if order == "oldest first" else (newer, older)
    first.release()
    put(b, s, 4, "four")
    expected = {older: {1: "one"}, newer: {1: "uno", 2: "two"}}
    assert flat(then.materialize(), "n") == expected[then]
    then.release()
    assert {k: get(b, s, k) for k in b.keys("n")} == {1: "uno", 3: "three", 4: "four"}


def test_m_t3_release_merges_the_overlay_so_state_is_a_plain_dict_again() -> None:
    b = backend()
    s = b.get_state(lg.ValueStateDescriptor("n", default=0))
    put(b, s, "a", 1)
    put(b, s, "gone", 1)
    snap = b.snapshot()
    assert type(s._table) is not dict, "writes go to an overlay while the snapshot is out"
    put(b, s, "a", 2)
    put(b, s, "b", 3)
    put(b, s, "gone", None)
    snap.release()
    assert type(s._table) is dict, "the hot path is a plain dict again"
    assert s._table == {"a": 2, "b": 3}
    assert b.entries() == {"n": {"a": 2, "b": 3}}
    assert b.outstanding_snapshots() == 0


def test_m_t3_a_release_from_the_asynchronous_thread_is_merged_by_the_task_thread() -> None:
    b = backend()
    s = b.get_state(lg.ValueStateDescriptor("n", default=0))
    put(b, s, "a", 1)
    snap = b.snapshot()
    put(b, s, "a", 2)
    worker, box = in_thread(lambda: (snap.materialize(), snap.release()))
    worker.join(10)
    assert not worker.is_alive() and "error" not in box
    assert flat(box["result"][0], "n") == {"a": 1}
    assert b.outstanding_snapshots() == 0
    assert type(s._table) is not dict, "another thread never rewrites the task's tables"
    assert get(b, s, "a") == 2, "the task thread merges on its next state access"
    assert type(s._table) is dict and s._table == {"a": 2}


def test_m_t3_release_is_idempotent_and_a_released_snapshot_cannot_be_materialized() -> None:
    b = backend()
    b.get_state(lg.ValueStateDescriptor("n"))
    snap = b.snapshot()
    snap.release()
    snap.release()
    assert snap.released and b.outstanding_snapshots() == 0
    with pytest.raises(SnapshotReleasedError, match="released"):
        snap.materialize()


def test_m_t3_releasing_a_snapshot_while_it_materializes_cancels_it_and_frees_its_layers(
    paused_materialize: tuple[threading.Event, threading.Event],
) -> None:
    inside, go_on = paused_materialize
    b = backend()
    s = b.get_state(lg.ValueStateDescriptor("n", default=0))
    put(b, s, "a", 1)
    snap = b.snapshot()
    worker, box = in_thread(snap.materialize)
    assert inside.wait(10)
    put(b, s, "a", 2)
    snap.release()  # the cancellation
    assert b.outstanding_snapshots() == 1, "its layers stay frozen while materialize runs"
    go_on.set()
    worker.join(10)
    assert isinstance(box.get("error"), SnapshotReleasedError)
    assert b.outstanding_snapshots() == 0
    assert get(b, s, "a") == 2
    assert type(s._table) is dict


def test_m_t3_state_registered_while_a_snapshot_is_outstanding_is_not_in_that_snapshot() -> None:
    b = backend()
    old = b.get_state(lg.ValueStateDescriptor("old", default=0))
    put(b, old, 1, 1)
    snap = b.snapshot()
    new = b.get_state(lg.ValueStateDescriptor("new", default=0))
    put(b, new, 1, 5)
    newer = b.snapshot()
    put(b, new, 1, 6)
    assert set(snap.materialize()["states"]) == {"old"}
    assert flat(newer.materialize(), "new") == {1: 5}
    newer.release()
    snap.release()
    assert get(b, new, 1) == 6 and get(b, old, 1) == 1


@pytest.mark.parametrize("seed", range(8))
def test_m_t3_random_interleavings_of_updates_snapshots_and_releases_match_a_copying_model(
    seed: int,
) -> None:
    rng = random.Random(seed)
    b = backend(max_parallelism=16)
    names = ["x", "y"]
    states = {n: b.get_state(lg.ValueStateDescriptor(n)) for n in names}
    model: dict[str, dict[int, Any]] = {n: {} for n in names}
    outstanding: list[tuple[KeyedStateSnapshot, dict[str, dict[int, Any]]]] = []
    for _ in range(600):
        op = rng.random()
        name = rng.choice(names)
        st = states[name]
        b.current_key = key = rng.randrange(12)
        if op < 0.3:
            value = [rng.randrange(100)] if rng.random() < 0.5 else rng.randrange(100)
            st.update(value)
            model[name][key] = copy.deepcopy(value)
        elif op < 0.45:
            st.clear()
            model[name].pop(key, None)
        elif op < 0.7:
            v = st.value()
            assert v == model[name].get(key)
            if isinstance(v, list):
                v.append(rng.randrange(100))  # in place, no update()
                model[name][key] = copy.deepcopy(v)
        elif op < 0.8 and len(outstanding) < 4:
            outstanding.append((b.snapshot(), copy.deepcopy(model)))
        elif op < 0.9 and outstanding:
            snap, seen = outstanding.pop(rng.randrange(len(outstanding)))
            got = snap.materialize()
            assert {n: flat(got, n) for n in names} == seen
            assert snap.size_hint() == sum(len(m) for m in seen.values())
            if rng.random() < 0.5:
                snap.release()
            else:
                t, box = in_thread(snap.release)
                t.join(10)
                assert "error" not in box
    for snap, seen in outstanding:
        assert {n: flat(snap.materialize(), n) for n in names} == seen
        snap.release()
    assert {n: dict(b.entries()[n]) for n in names} == model
    for n in names:
        b.current_key = -1
        states[n].value()  # the task thread's next access merges
        assert type(states[n]._table) is dict and states[n]._table == model[n]


# -- M-T4: keyed state partitioned by key group ----------------------------------------------


def test_m_t4_materialize_groups_keys_by_their_key_group() -> None:
    b = backend(max_parallelism=8)
    s = b.get_state(lg.ValueStateDescriptor("v"))
    keys: list[Any] = [*range(40), *(f"user-{i}" for i in range(40)), ("t", 1), ("t", 2)]
    for k in keys:
        put(b, s, k, repr(k))
    snap = b.snapshot()
    got = snap.materialize()
    snap.release()
    assert got["format"] == 1 and got["max_parallelism"] == 8
    assert got["states"]["v"]["kind"] == "value"
    groups = got["states"]["v"]["key_groups"]
    assert all(type(kg) is int and 0 <= kg < 8 for kg in groups)
    for kg, entries in groups.items():
        for k, v in entries.items():
            assert key_group_for(k, 8) == kg
            assert v == repr(k)
    assert sum(len(e) for e in groups.values()) == len(keys)


def test_m_t4_a_state_without_entries_is_kept_in_the_snapshot() -> None:
    b = backend()
    b.get_state(lg.ValueStateDescriptor("empty"))
    got = b.snapshot().materialize()
    assert got["states"] == {"empty": {"kind": "value", "key_groups": {}}}


def snapshot_of(values: dict[Any, Any], max_parallelism: int = 128) -> dict[str, Any]:
    b = backend(max_parallelism)
    s = b.get_state(lg.ValueStateDescriptor("v"))
    for k, v in values.items():
        put(b, s, k, v)
    snap = b.snapshot()
    try:
        return pickle.loads(pickle.dumps(snap.materialize()))
    finally:
        snap.release()


def test_m_t4_restore_loads_only_the_given_key_group_range() -> None:
    values = {k: [k] for k in range(300)}
    got = snapshot_of(values)
    restored: dict[Any, Any] = {}
    for subtask in range(2):
        kgs = key_group_range(subtask, 2, 128)
        b = backend()
        b.restore([got], kgs)
        s = b.get_state(lg.ValueStateDescriptor("v"))
        mine = {k: get(b, s, k) for k in b.keys("v")}
        assert mine and all(key_group_for(k, 128) in kgs for k in mine)
        restored.update(mine)
    assert restored == values


def test_m_t4_restore_merges_several_snapshots_when_rescaling_down() -> None:
    values = {f"k{i}": i for i in range(200)}
    parts = []
    for subtask in range(3):
        kgs = key_group_range(subtask, 3, 128)
        parts.append(snapshot_of({k: v for k, v in values.items() if key_group_for(k) in kgs}))
    b = backend()
    b.restore(parts, range(128))
    s = b.get_state(lg.ValueStateDescriptor("v"))
    assert {k: get(b, s, k) for k in b.keys("v")} == values


def test_m_t4_a_snapshot_survives_a_pickle_round_trip_into_a_new_backend() -> None:
    b = backend()
    s = b.get_state(lg.ValueStateDescriptor("v", default=0))
    values: dict[Any, Any] = {
        1: {"n": [1, 2]},
        "two": 2.5,
        (3, "x"): ("tuple", None),
        b"4": b"bytes",
    }
    for k, v in values.items():
        put(b, s, k, v)
    snap = b.snapshot()
    data = pickle.dumps(snap.materialize())
    snap.release()
    restored = backend()
    restored.restore([pickle.loads(data)], range(128))
    r = restored.get_state(lg.ValueStateDescriptor("v", default=0))
    assert {k: get(restored, r, k) for k in restored.keys("v")} == values
    again = restored.snapshot()
    assert pickle.loads(pickle.dumps(again.materialize())) == pickle.loads(data)
    again.release()


@pytest.mark.parametrize(
    "found, shown",
    [
        ({"format": 2, "max_parallelism": 128, "states": {}}, "format 2"),
        ({"max_parallelism": 128, "states": {}}, "no 'format' entry"),
        ({"format": "1", "max_parallelism": 128, "states": {}}, "format '1'"),
        ([("format", 1)], "list"),
    ],
)
def test_m_t4_restoring_an_unknown_snapshot_format_is_an_error_saying_what_was_found(
    found: Any,
    shown: str,
) -> None:
    b = backend()
    with pytest.raises(UnsupportedSnapshotFormatError) as err:
        b.restore([found], range(128))
    assert isinstance(err.value, lg.ConfigurationError)
    assert shown in str(err.value) and "format 1" in str(err.value)


def test_m_t4_restoring_an_unknown_state_kind_is_an_error() -> None:
    bad = {"format": 1, "max_parallelism": 128, "states": {"s": {"kind": "bag", "key_groups": {}}}}
    with pytest.raises(UnsupportedSnapshotFormatError, match="state 's' has kind 'bag'") as err:
        backend().restore([bad], range(128))
    assert "value, list, map, reducing, aggregating" in str(err.value)


def test_m_t4_restoring_with_another_max_parallelism_is_a_configuration_error() -> None:
    got = snapshot_of({1: 1}, max_parallelism=64)
    with pytest.raises(lg.ConfigurationError, match="max_parallelism 64.*max_parallelism 128"):
        backend(128).restore([got], range(128))


def test_m_t4_restoring_while_a_snapshot_is_outstanding_is_refused() -> None:
    b = backend()
    b.get_state(lg.ValueStateDescriptor("v"))
    snap = b.snapshot()
    with pytest.raises(lg.ConfigurationError, match="outstanding"):
        b.restore([snapshot_of({1: 1})], range(128))
    snap.release()
    b.restore([snapshot_of({1: 1})], range(128))
    assert b.keys("v") == [1]

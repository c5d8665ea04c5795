"""Every keyed state type of the heap backend: ListState, MapState, ReducingState,
AggregatingState (and ValueState), their copy-on-write snapshots (M-T3) and their
snapshot/restore by key group (M-T4).

The handles are written against a small table protocol so that every backend can
reuse them; ``CopyingTable`` (whose ``get`` returns a deserialized copy, like the
RocksDB backend's) checks that they never rely on in-place mutation."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lockgate as lg
from lockgate.api.functions import AggregateFunction, ReduceFunction
from lockgate.core.clock import ManualClock
from lockgate.core.key_groups import key_group_for, key_group_range
from lockgate.state.backends import HashMapStateBackend
from lockgate.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from lockgate.state.handles import (
    AggregatingState,
    KeyedStateHandle,
    ListState,
    MapState,
    ReducingState,
    ValueState,
    create_handle,
)
from lockgate.state.keyed import HeapKeyedStateBackend, UnsupportedSnapshotFormatError
from lockgate.state.ttl import MIN_WATERMARK
from state_fakes import CopyingTable, Host, flat


class Average(AggregateFunction):
    """An accumulator ``[sum, count]`` changed in place by ``add`` (the hard case for
    copy-on-write snapshots)."""

    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: int, accumulator: list[int]) -> list[int]:
        accumulator[0] += value
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator: list[int]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], a[1] + b[1]]


class Concat(ReduceFunction):
    def reduce(self, a: Any, b: Any) -> Any:
        return a + b


def backend(max_parallelism: int = 128) -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend("keyed op", max_parallelism=max_parallelism, clock=ManualClock())


def descriptor(kind: str, name: str = "s") -> StateDescriptor[Any]:
    if kind == "value":
        return ValueStateDescriptor(name)
    if kind == "list":
        return ListStateDescriptor(name)
    if kind == "map":
        return MapStateDescriptor(name)
    if kind == "reducing":
        return ReducingStateDescriptor(name, lambda a, b: a + b)
    return AggregatingStateDescriptor(name, Average())


KINDS = ["value", "list", "map", "reducing", "aggregating"]


# -- get_state -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, handle_type",
    [
        ("value", ValueState),
        ("list", ListState),
        ("map", MapState),
        ("reducing", ReducingState),
        ("aggregating", AggregatingState),
    ],
)
def test_get_state_returns_the_handle_of_the_descriptors_kind(kind: str, handle_type: type) -> None:
    assert type(backend().get_state(descriptor(kind))) is handle_type


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_get_state_of_one_name_and_kind_shares_the_values(kind: str) -> None:
    b = backend()
    first = b.get_state(descriptor(kind))
    b.current_key = "k"
    write(kind, first, 4)
    second = b.get_state(descriptor(kind))
    assert second is not first
    assert read(kind, second) == read(kind, first) != read_empty(kind)
    write(kind, second, 5)
    assert read(kind, first) == read(kind, second)
    snap = b.snapshot()
    write(kind, first, 6)  # both handles follow the overlay
    assert read(kind, second) == read(kind, first)
    snap.release()
    write(kind, second, 7)
    assert read(kind, first) == read(kind, second)


@pytest.mark.parametrize(
    "first, then",
    [("list", "map"), ("map", "reducing"), ("reducing", "aggregating"), ("aggregating", "value")],
)
def test_another_kind_under_a_registered_name_is_an_error_naming_both(
    first: str, then: str
) -> None:
    b = backend()
    b.get_state(descriptor(first))
    with pytest.raises(lg.ConfigurationError) as err:
        b.get_state(descriptor(then))
    assert f"registered as {first} state" in str(err.value) and f"the {then} state" in str(
        err.value
    )
    assert "keyed op" in str(err.value)


def test_another_kind_under_a_restored_name_is_an_error_saying_it_was_restored() -> None:
    b = backend()
    b.get_state(descriptor("list"))
    b.current_key = 1
    b.get_state(descriptor("list")).add(1)
    snap = b.snapshot()
    data = snap.materialize()
    snap.release()
    fresh = backend()
    fresh.restore([data], range(128))
    with pytest.raises(lg.ConfigurationError, match="restored from a snapshot as list state"):
        fresh.get_state(descriptor("map"))


def test_a_descriptor_of_an_unknown_kind_is_an_error_listing_the_kinds() -> None:
    class Bag(StateDescriptor):
        kind = "bag"

    with pytest.raises(
        lg.ConfigurationError, match="'bag'.*value, list, map, reducing, aggregating"
    ):
        backend().get_state(Bag("b"))


def test_a_descriptor_claiming_a_kind_without_its_class_is_an_error() -> None:
    class FakeReducing(StateDescriptor):
        kind = "reducing"

    with pytest.raises(lg.ConfigurationError, match="not a ReducingStateDescriptor"):
        backend().get_state(FakeReducing("r"))


def test_value_state_is_still_importable_from_the_keyed_module() -> None:
    from lockgate.state.keyed import ValueState as FromKeyed

    assert FromKeyed is ValueState


def test_close_is_harmless_and_the_clock_keyword_is_used() -> None:
    clock = ManualClock(1234)
    b = HashMapStateBackend().create_keyed_backend("op", 64, clock=clock)
    assert isinstance(b, HeapKeyedStateBackend)
    assert b.clock is clock and b.max_parallelism == 64
    assert b.current_watermark == MIN_WATERMARK and b.current_timestamp is None
    b.close()
    assert type(HeapKeyedStateBackend("op").clock).__name__ == "SystemClock"


# -- ListState ---------------------------------------------------------------------------------


def test_list_state_add_add_all_update_and_get_per_key() -> None:
    b = backend()
    s = b.get_state(ListStateDescriptor("l"))
    b.current_key = "a"
    assert s.get() == [] and list(s) == []
    s.add(1)
    s.add_all([2, 3])
    s.add_all(x for x in (4,))
    s.add(None)  # None is an element like any other
    b.current_key = "b"
    s.add("other")
    b.current_key = "a"
    assert s.get() == [1, 2, 3, 4, None]
    assert list(s) == [1, 2, 3, 4, None]
    s.update([9, 8])
    assert s.get() == [9, 8]
    b.current_key = "b"
    assert s.get() == ["other"]


def test_list_state_empty_is_absent() -> None:
    b = backend()
    s = b.get_state(ListStateDescriptor("l"))
    b.current_key = "a"
    s.add_all([])
    assert b.keys("l") == [], "add_all([]) on an empty list stores nothing"
    s.add(1)
    s.update([])
    assert b.keys("l") == [] and s.get() == []
    s.add(1)
    s.clear()
    assert b.keys("l") == []


def test_list_state_get_returns_a_copy() -> None:
    b = backend()
    s = b.get_state(ListStateDescriptor("l"))
    b.current_key = "a"
    s.add(1)
    got = s.get()
    got.append(2)
    assert s.get() == [1]
    mine = [5, 6]
    s.update(mine)
    mine.append(7)
    assert s.get() == [5, 6], "update stores its own list"


@pytest.mark.parametrize("method", ["add_all", "update"])
@pytest.mark.parametrize("bad", ["abc", b"ab", None, 5, {"a": 1}])
def test_list_state_add_all_and_update_need_an_iterable_of_elements(method: str, bad: Any) -> None:
    b = backend()
    s = b.get_state(ListStateDescriptor("events"))
    b.current_key = "a"
    with pytest.raises(lg.ConfigurationError, match=f"'events'.{method} needs an iterable"):
        getattr(s, method)(bad)
    assert b.keys("events") == []


# -- MapState ----------------------------------------------------------------------------------


def test_map_state_flink_style_methods() -> None:
    b = backend()
    s = b.get_state(MapStateDescriptor("m"))
    b.current_key = "a"
    assert s.is_empty() and s.get("x") is None and s.get("x", 0) == 0
    s.put("x", 1)
    s.put_all({"y": 2, "z": None})
    assert s.get("x") == 1 and s.get("z", "dflt") is None, "None is a stored value"
    assert s.contains("z") and not s.contains("w")
    assert s.keys() == ["x", "y", "z"]
    assert s.values() == [1, 2, None]
    assert s.items() == [("x", 1), ("y", 2), ("z", None)]
    s.remove("y")
    s.remove("never there")
    assert s.keys() == ["x", "z"] and not s.is_empty()
    b.current_key = "b"
    assert s.is_empty() and s.keys() == []
    b.current_key = "a"
    s.clear()
    assert s.is_empty() and b.keys("m") == []


def test_map_state_pythonic_protocol() -> None:
    b = backend()
    s = b.get_state(MapStateDescriptor("m"))
    b.current_key = 1
    s["a"] = 1
    s[("t", 2)] = [2]
    assert "a" in s and ("t", 2) in s and "b" not in s
    assert s["a"] == 1 and s[("t", 2)] == [2]
    assert len(s) == 2 and sorted(map(str, s)) == ["('t', 2)", "a"]
    with pytest.raises(KeyError):
        s["b"]
    with pytest.raises(KeyError):
        del s["b"]
    del s["a"]
    assert "a" not in s and len(s) == 1
    for k in s:  # changing the state while iterating is fine
        del s[k]
    assert len(s) == 0 and b.keys("m") == [], "an empty map is absent"


def test_map_state_results_are_copies_of_the_map() -> None:
    b = backend()
    s = b.get_state(MapStateDescriptor("m"))
    b.current_key = 1
    s.put("a", 1)
    s.keys().append("zzz")
    s.items().clear()
    assert s.items() == [("a", 1)]


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.put([1], 1),
        lambda s: s.get({}),
        lambda s: s.contains([]),
        lambda s: s.remove([]),
        lambda s: s.put_all({1: 1, 2: 2}) or s.put_all([(1, 2)]),
        lambda s: s.__getitem__([]),
        lambda s: s.__setitem__([], 1),
        lambda s: s.__delitem__([]),
    ],
)
def test_map_state_rejects_unhashable_keys_and_non_mappings(call: Callable[[Any], Any]) -> None:
    b = backend()
    s = b.get_state(MapStateDescriptor("lookup"))
    b.current_key = 1
    with pytest.raises(lg.ConfigurationError, match="'lookup'.*(hashable|needs a mapping)"):
        call(s)


class UnhashableKeys(dict):
    """A mapping whose items() yields an unhashable key (a dict cannot hold one)."""

    def items(self) -> Any:
        return [("ok", 1), (["bad"], 2)]


def test_map_state_put_all_with_an_unhashable_key_changes_nothing() -> None:
    host, table = Host(), CopyingTable()
    b = backend()
    handles: list[Any] = [
        b.get_state(MapStateDescriptor("m")),
        create_handle(host, table, MapStateDescriptor("m"), "t"),
    ]
    for s in handles:
        b.current_key = host.current_key = 1
        s.put("a", 0)
        with pytest.raises(lg.ConfigurationError, match="hashable"):
            s.put_all(UnhashableKeys(x=1))
        assert s.items() == [("a", 0)]


# -- ReducingState and AggregatingState ----------------------------------------------------------


@pytest.mark.parametrize("fn", [lambda a, b: a + b, Concat()])
def test_reducing_state_reduces_added_values_with_a_callable_or_a_reduce_function(fn: Any) -> None:
    b = backend()
    s = b.get_state(ReducingStateDescriptor("r", fn))
    b.current_key = "a"
    assert s.get() is None
    s.add("x")
    assert s.get() == "x", "the first value is kept as is"
    s.add("y")
    s.add("z")
    b.current_key = "b"
    s.add("q")
    b.current_key = "a"
    assert s.get() == "xyz"
    s.clear()
    assert s.get() is None and b.keys("r") == ["b"]


def test_reducing_state_refuses_none() -> None:
    b = backend()
    s = b.get_state(ReducingStateDescriptor("total", max))
    b.current_key = "a"
    with pytest.raises(lg.ConfigurationError, match="'total'.add got None"):
        s.add(None)
    assert b.keys("total") == []


def test_aggregating_state_folds_into_an_accumulator_and_returns_the_result() -> None:
    b = backend()
    s = b.get_state(AggregatingStateDescriptor("avg", Average()))
    b.current_key = "a"
    assert s.get() is None
    for v in (1, 2, 6):
        s.add(v)
    b.current_key = "b"
    s.add(10)
    b.current_key = "a"
    assert s.get() == 3
    assert b.entries()["avg"] == {"a": [9, 3], "b": [10, 1]}, "the accumulator is stored"
    s.clear()
    assert s.get() is None
    s.add(4)
    assert s.get() == 4, "a cleared state starts from a new accumulator"


def test_reduce_and_aggregate_function_errors_reach_the_caller_and_leave_state_unchanged() -> None:
    def boom(a: int, b: int) -> int:
        raise ArithmeticError("no")

    b = backend()
    s = b.get_state(ReducingStateDescriptor("r", boom))
    b.current_key = 1
    s.add(1)
    with pytest.raises(ArithmeticError):
        s.add(2)
    assert s.get() == 1


# -- the table protocol (what the RocksDB backend relies on) ------------------------------------


def write(kind: str, s: Any, v: int) -> None:
    if kind == "value":
        s.update(v)
    elif kind == "list":
        s.add(v)
    elif kind == "map":
        s.put(f"k{v % 3}", v)
    else:
        s.add(v)


def read(kind: str, s: Any) -> Any:
    if kind == "value":
        return s.value()
    if kind == "map":
        return s.items()
    return s.get()


def read_empty(kind: str) -> Any:
    return {"list": [], "map": []}.get(kind)


@pytest.mark.parametrize("kind", KINDS)
def test_handles_work_over_a_table_whose_get_returns_copies(kind: str) -> None:
    host, table = Host(), CopyingTable()
    s = create_handle(host, table, descriptor(kind), "test")
    reference = backend()
    r = reference.get_state(descriptor(kind))
    for i in range(12):
        host.current_key = reference.current_key = i % 3
        write(kind, s, i)
        write(kind, r, i)
        assert read(kind, s) == read(kind, r)
    assert table.contents() == reference.entries()["s"]
    for key in range(3):
        host.current_key = reference.current_key = key
        s.clear()
    assert table.contents() == {}


def test_map_and_list_removals_over_a_copying_table_are_written_back() -> None:
    host, table = Host(), CopyingTable()
    m = create_handle(host, table, MapStateDescriptor("m"), "test")
    host.current_key = 1
    assert isinstance(m, MapState)
    m.put_all({"a": 1, "b": 2})
    m.remove("a")
    del m["b"]
    assert table.contents() == {}
    lst = create_handle(host, CopyingTable(), ListStateDescriptor("l"), "test")
    assert isinstance(lst, ListState)
    lst.add_all([1, 2])
    lst.update([3])
    assert lst.get() == [3]


# -- M-T3: copy-on-write snapshots isolate every kind ---------------------------------------------


def test_m_t3_list_appends_after_a_snapshot_do_not_change_it() -> None:
    b = backend()
    s = b.get_state(ListStateDescriptor("l"))
    b.current_key = "a"
    s.add_all([1, 2])
    b.current_key = "b"
    s.add({"nested": [1]})
    snap = b.snapshot()
    b.current_key = "a"
    s.add(3)
    s.add_all([4])
    b.current_key = "b"
    s.update([{"nested": [1, 2]}])
    b.current_key = "c"
    s.add(0)
    assert flat(snap.materialize(), "l") == {"a": [1, 2], "b": [{"nested": [1]}]}
    snap.release()
    assert b.entries()["l"] == {"a": [1, 2, 3, 4], "b": [{"nested": [1, 2]}], "c": [0]}
    assert type(s._table) is dict


def test_m_t3_map_changes_after_a_snapshot_do_not_change_it() -> None:
    b = backend()
    s = b.get_state(MapStateDescriptor("m"))
    b.current_key = "a"
    s.put_all({"x": 1, "y": [1]})
    snap = b.snapshot()
    s["x"] = 2
    del s["y"]
    s["z"] = 3
    b.current_key = "b"
    s["new"] = 1
    older = flat(snap.materialize(), "m")
    second = b.snapshot()
    b.current_key = "a"
    s.clear()
    assert older == {"a": {"x": 1, "y": [1]}}
    assert flat(second.materialize(), "m") == {"a": {"x": 2, "z": 3}, "b": {"new": 1}}
    second.release()
    snap.release()
    assert b.entries()["m"] == {"b": {"new": 1}}


def test_m_t3_in_place_accumulators_and_reduced_values_after_a_snapshot_do_not_change_it() -> None:
    b = backend()
    avg = b.get_state(AggregatingStateDescriptor("avg", Average()))
    red = b.get_state(ReducingStateDescriptor("red", lambda a, c: [*a, *c]))
    b.current_key = "a"
    avg.add(2)
    red.add([1])
    snap = b.snapshot()
    avg.add(4)  # Average.add changes the accumulator list in place
    red.add([2])
    got = snap.materialize()
    assert flat(got, "avg") == {"a": [2, 1]} and flat(got, "red") == {"a": [1]}
    snap.release()
    assert avg.get() == 3 and red.get() == [1, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_m_t3_the_synchronous_part_copies_nothing_for_any_kind(
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = backend()
    s = b.get_state(descriptor(kind))
    for k in range(200):
        b.current_key = k
        write(kind, s, k)

    def no_copy(*_: Any) -> Any:
        raise AssertionError("snapshot() must not copy values")

    monkeypatch.setattr(copy, "deepcopy", no_copy)
    snap = b.snapshot()
    monkeypatch.undo()
    assert snap.size_hint() == 200
    snap.release()


# -- M-T4: restore of every kind ---------------------------------------------------------------


def filled(kind: str, keys: range, max_parallelism: int = 128) -> HeapKeyedStateBackend:
    b = backend(max_parallelism)
    s = b.get_state(descriptor(kind))
    for k in keys:
        b.current_key = k
        for i in range(k % 3 + 1):
            write(kind, s, k + i)
    return b


def materialized(b: HeapKeyedStateBackend) -> dict[str, Any]:
    snap = b.snapshot()
    try:
        return pickle.loads(pickle.dumps(snap.materialize()))
    finally:
        snap.release()


@pytest.mark.parametrize("kind", KINDS)
def test_m_t4_every_kind_round_trips_through_a_pickled_snapshot(kind: str) -> None:
    original = filled(kind, range(50))
    data = materialized(original)
    assert data["states"]["s"]["kind"] == kind
    restored = backend()
    restored.restore([data], range(128))
    s = restored.get_state(descriptor(kind))
    o = original.get_state(descriptor(kind))
    for k in range(50):
        restored.current_key = original.current_key = k
        assert read(kind, s) == read(kind, o)
    assert restored.entries() == original.entries()
    assert materialized(restored) == data


@pytest.mark.parametrize("kind", KINDS)
def test_m_t4_restore_of_every_kind_keeps_only_the_given_key_groups(kind: str) -> None:
    data = materialized(filled(kind, range(120)))
    seen: dict[Any, Any] = {}
    for subtask in range(3):
        kgs = key_group_range(subtask, 3, 128)
        b = backend()
        b.restore([data], kgs)
        mine = b.entries()["s"]
        assert mine and all(key_group_for(k, 128) in kgs for k in mine)
        seen.update(mine)
    assert seen == filled(kind, range(120)).entries()["s"]


def test_m_t4_restore_into_a_registered_state_of_another_kind_is_an_error() -> None:
    data = materialized(filled("list", range(3)))
    b = backend()
    b.get_state(descriptor("map"))
    with pytest.raises(
        lg.ConfigurationError,
        match="'s' is list state in the snapshot but is registered as map state",
    ):
        b.restore([data], range(128))


@pytest.mark.parametrize(
    "kind, stored, found", [("list", 5, "int"), ("map", [1], "list"), ("list", {"a": 1}, "dict")]
)
def test_m_t4_restoring_list_or_map_entries_of_the_wrong_shape_is_an_error(
    kind: str,
    stored: Any,
    found: str,
) -> None:
    bad = {
        "format": 1,
        "max_parallelism": 128,
        "states": {"s": {"kind": kind, "key_groups": {key_group_for("k"): {"k": stored}}}},
    }
    with pytest.raises(UnsupportedSnapshotFormatError, match=f"{kind} state 's' holds a {found}"):
        backend().restore([bad], range(128))


def test_m_t4_restored_empty_lists_and_maps_are_no_entries() -> None:
    kg = key_group_for("k")
    data = {
        "format": 1,
        "max_parallelism": 128,
        "states": {
            "l": {"kind": "list", "key_groups": {kg: {"k": [], "j": [1]}}},
            "m": {"kind": "map", "key_groups": {kg: {"k": {}}}},
        },
    }
    b = backend()
    b.restore([data], range(128))
    assert b.keys("l") == ["j"] and b.keys("m") == []


# -- a model: every kind against plain dicts, with snapshots and restores ---------------------

OPS = [
    "write",
    "write",
    "write2",
    "replace",
    "remove",
    "clear",
    "read",
    "read",
    "snapshot",
    "check",
    "restore",
]


def apply_op(kind: str, s: Any, model: dict[Any, Any], key: Any, op: str, arg: int) -> None:  # noqa: C901 (one branch per state operation of the model)
    """Apply ``op`` to the handle and the model (key -> expected stored form); check reads."""
    if op == "read":
        assert read_model(kind, s) == expected_read(kind, model.get(key))
    elif op == "clear":
        s.clear()
        model.pop(key, None)
    elif kind == "value":
        if op in ("write", "write2", "replace"):
            s.update([arg] if op == "write2" else arg)
            model[key] = [arg] if op == "write2" else arg
        elif op == "remove":
            s.update(None)
            model.pop(key, None)
    elif kind == "list":
        if op == "write":
            s.add(arg)
            model.setdefault(key, []).append(arg)
        elif op == "write2":
            s.add_all([arg, arg + 1])
            model.setdefault(key, []).extend([arg, arg + 1])
        elif op in ("replace", "remove"):
            items = [arg] * (arg % 3) if op == "replace" else []
            s.update(items)
            if items:
                model[key] = items
            else:
                model.pop(key, None)
    elif kind == "map":
        m = model.setdefault(key, {})
        if op == "write":
            s[arg % 4] = [arg]
            m[arg % 4] = [arg]
        elif op == "write2":
            s.put_all({arg % 4: arg, "x": None})
            m.update({arg % 4: arg, "x": None})
        elif op == "replace":
            if (arg % 4) in m:
                v = s[arg % 4]
                if isinstance(v, list):
                    v.append(arg)  # in place, then written back
                    s[arg % 4] = v
                    m[arg % 4] = [*m[arg % 4], arg]
        elif op == "remove":
            s.remove(arg % 4)
            m.pop(arg % 4, None)
        if not m:
            del model[key]
    elif kind == "reducing":
        if op in ("write", "write2", "replace", "remove"):
            s.add([arg])
            model[key] = [*model.get(key, []), arg]
    else:
        if op in ("write", "write2", "replace", "remove"):
            s.add(arg)
            acc = model.get(key, [0, 0])
            model[key] = [acc[0] + arg, acc[1] + 1]


def read_model(kind: str, s: Any) -> Any:
    if kind == "value":
        return s.value()
    if kind == "map":
        return dict(s.items())
    return s.get()


def expected_read(kind: str, stored: Any) -> Any:
    if stored is None:
        return {"list": [], "map": {}}.get(kind)
    if kind == "aggregating":
        return stored[0] / stored[1]
    return stored


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(OPS), st.integers(0, 5), st.integers(0, 30)), max_size=80
    )
)
def test_m_t3_m_t4_each_kind_matches_a_dict_model_across_snapshots_and_restores(
    kind: str,
    ops: list[tuple[str, int, int]],
) -> None:
    b = backend(max_parallelism=8)
    s = b.get_state(descriptor(kind))
    host, table = Host(), CopyingTable()
    c = create_handle(host, table, descriptor(kind), "model")
    model: dict[Any, Any] = {}
    shadow: dict[Any, Any] = {}
    outstanding: list[tuple[Any, dict[Any, Any]]] = []
    for op, key, arg in ops:
        if op == "snapshot":
            if len(outstanding) < 3:
                outstanding.append((b.snapshot(), copy.deepcopy(model)))
            continue
        if op == "check":
            if outstanding:
                snap, seen = outstanding.pop(arg % len(outstanding))
                assert flat(snap.materialize(), "s") == seen
                snap.release()
            continue
        if op == "restore":
            for snap, seen in outstanding:
                assert flat(snap.materialize(), "s") == seen
                snap.release()
            outstanding.clear()
            data = materialized(b)
            b = backend(max_parallelism=8)
            b.restore([data], range(8))
            s = b.get_state(descriptor(kind))
            continue
        b.current_key = host.current_key = key
        apply_op(kind, s, model, key, op, arg)
        apply_op(kind, c, shadow, key, op, arg)
    for snap, seen in outstanding:
        assert flat(snap.materialize(), "s") == seen
        snap.release()
    assert b.entries()["s"] == model
    assert table.contents() == shadow == model


def test_the_handle_base_class_is_shared() -> None:
    assert all(
        issubclass(t, KeyedStateHandle)
        for t in (ValueState, ListState, MapState, ReducingState, AggregatingState)
    )

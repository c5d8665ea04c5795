"""Operator list state and union list state: snapshots and redistribution (M-T3, M-T4)."""

from __future__ import annotations

import pytest

import lockgate as lg
from lockgate.state.operator_state import OperatorStateStore, even_chunk


def store_with(name: str, items: list[int], union: bool = False) -> OperatorStateStore:
    store = OperatorStateStore("op")
    desc = lg.ListStateDescriptor(name)
    state = store.get_union_list_state(desc) if union else store.get_list_state(desc)
    state.update(items)
    return store


def restored(
    snapshots: dict[int, dict], subtask: int, parallelism: int, same: bool
) -> OperatorStateStore:
    store = OperatorStateStore("op")
    store.restore(snapshots, subtask, parallelism, same)
    return store


def test_list_state_add_update_clear_and_iteration() -> None:
    state = OperatorStateStore("op").get_list_state(lg.ListStateDescriptor("s"))
    state.add(1)
    state.add_all([2, 3])
    assert list(state) == [1, 2, 3] and len(state) == 3
    state.update([7])
    assert state.get() == [7]
    state.clear()
    assert state.get() == []


def test_none_elements_are_refused_with_the_state_name() -> None:
    state = OperatorStateStore("op").get_list_state(lg.ListStateDescriptor("s"))
    with pytest.raises(lg.ConfigurationError, match="'s'"):
        state.add(None)
    with pytest.raises(lg.ConfigurationError, match="'s'"):
        state.update([1, None])


def test_operator_state_needs_a_list_state_descriptor() -> None:
    with pytest.raises(lg.ConfigurationError, match="ListStateDescriptor"):
        OperatorStateStore("op").get_list_state(lg.ValueStateDescriptor("v"))  # type: ignore[arg-type]


def test_the_same_name_cannot_be_split_and_union_state() -> None:
    store = OperatorStateStore("op")
    store.get_list_state(lg.ListStateDescriptor("s"))
    with pytest.raises(lg.ConfigurationError, match="split list state"):
        store.get_union_list_state(lg.ListStateDescriptor("s"))


def test_a_snapshot_is_a_copy_later_changes_do_not_reach_it_M_T3() -> None:
    store = store_with("s", [[1], [2]])
    snap = store.snapshot()
    state = store.get_list_state(lg.ListStateDescriptor("s"))
    state.get()[0].append(99)
    state.add([3])
    assert snap == {"s": {"mode": "split", "items": [[1], [2]]}}


def test_at_the_same_parallelism_each_subtask_gets_its_own_elements_back_M_T4() -> None:
    old = {0: store_with("s", [1, 2]).snapshot(), 1: store_with("s", [3]).snapshot()}
    for i, expected in ((0, [1, 2]), (1, [3])):
        state = restored(old, i, 2, True).get_list_state(lg.ListStateDescriptor("s"))
        assert state.get() == expected


@pytest.mark.parametrize("new_parallelism", [1, 2, 3, 4, 7])
def test_rescaled_split_state_is_dealt_out_evenly_without_loss_M_T4(new_parallelism: int) -> None:
    old = {
        0: store_with("s", list(range(0, 5))).snapshot(),
        1: store_with("s", list(range(5, 8))).snapshot(),
        2: store_with("s", []).snapshot(),
    }
    parts = [
        restored(old, i, new_parallelism, False).get_list_state(lg.ListStateDescriptor("s")).get()
        for i in range(new_parallelism)
    ]
    assert [x for p in parts for x in p] == list(range(8))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_union_state_gives_every_subtask_all_elements_M_T4() -> None:
    old = {
        0: store_with("u", [1], union=True).snapshot(),
        1: store_with("u", [2, 3], union=True).snapshot(),
    }
    for parallelism, same in ((2, True), (3, False)):
        for i in range(parallelism):
            state = restored(old, i, parallelism, same).get_union_list_state(
                lg.ListStateDescriptor("u")
            )
            assert state.get() == [1, 2, 3]


def test_restored_state_nobody_asks_for_is_kept_in_the_next_snapshot() -> None:
    old = {0: store_with("s", [1, 2]).snapshot()}
    store = restored(old, 0, 1, True)
    assert store.snapshot() == {"s": {"mode": "split", "items": [1, 2]}}


def test_restoring_as_the_other_mode_is_refused() -> None:
    old = {0: store_with("u", [1], union=True).snapshot()}
    with pytest.raises(lg.ConfigurationError, match="union list state"):
        restored(old, 0, 1, True).get_list_state(lg.ListStateDescriptor("u"))


def test_a_snapshot_entry_without_a_mode_is_refused() -> None:
    with pytest.raises(lg.ConfigurationError, match="mode"):
        restored({0: {"s": {"items": [1]}}}, 0, 1, True)


def test_even_chunks_cover_the_items_in_order() -> None:
    items = list(range(10))
    assert [even_chunk(items, i, 3) for i in range(3)] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [even_chunk([1], i, 3) for i in range(3)] == [[1], [], []]


def test_non_keyed_functions_are_told_where_keyed_state_is_available() -> None:
    ctx = lg.RuntimeContext(
        task_name="t",
        operator_name="m",
        operator_uid="m",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
    )
    with pytest.raises(lg.ConfigurationError, match="key_by"):
        ctx.get_list_state(lg.ListStateDescriptor("s"))
    with pytest.raises(lg.ConfigurationError, match="no operator state"):
        ctx.get_operator_list_state(lg.ListStateDescriptor("s"))

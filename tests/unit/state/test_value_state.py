"""ValueState: one value per key, scoped to the current key, with a default that keys never share."""

from __future__ import annotations

import pytest

import lockgate as lg
from lockgate.runtime.context import RuntimeContext
from lockgate.state.descriptors import StateDescriptor
from lockgate.state.keyed import HeapKeyedStateBackend


def backend() -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend("counter op")


def test_a_key_without_a_value_reads_the_default() -> None:
    b = backend()
    state = b.get_state(lg.ValueStateDescriptor("count", default=0))
    b.current_key = "a"
    assert state.value() == 0


def test_the_default_default_is_none() -> None:
    b = backend()
    state = b.get_state(lg.ValueStateDescriptor("x"))
    b.current_key = 1
    assert state.value() is None


def test_update_stores_a_value_for_the_current_key_only() -> None:
    b = backend()
    state = b.get_state(lg.ValueStateDescriptor("count", default=0))
    b.current_key = "a"
    state.update(5)
    b.current_key = "b"
    assert state.value() == 0
    state.update(7)
    b.current_key = "a"
    assert state.value() == 5
    assert sorted(b.keys("count")) == ["a", "b"]


def test_a_mutable_default_is_not_shared_between_keys() -> None:
    b = backend()
    state = b.get_state(lg.ValueStateDescriptor("seen", default=[]))
    b.current_key = "a"
    mine = state.value()
    mine.append("from a")
    state.update(mine)
    b.current_key = "b"
    assert state.value() == [], "key b must not see key a's list"
    assert state.value() is not mine


def test_mutating_a_default_without_update_does_not_change_the_default() -> None:
    desc = lg.ValueStateDescriptor("d", default={"n": 0})
    b = backend()
    state = b.get_state(desc)
    b.current_key = "a"
    state.value()["n"] = 99
    assert state.value() == {"n": 0}
    assert desc.default == {"n": 0}
    b.current_key = "b"
    assert state.value() == {"n": 0}


def test_clear_and_update_none_remove_the_value_so_the_default_returns() -> None:
    b = backend()
    state = b.get_state(lg.ValueStateDescriptor("count", default=-1))
    b.current_key = "a"
    state.update(3)
    state.clear()
    assert state.value() == -1
    state.update(4)
    state.update(None)
    assert state.value() == -1
    assert b.keys("count") == []


def test_two_handles_of_one_name_share_the_values() -> None:
    b = backend()
    first = b.get_state(lg.ValueStateDescriptor("count", default=0))
    second = b.get_state(lg.ValueStateDescriptor("count", default=0))
    b.current_key = "k"
    first.update(2)
    assert second.value() == 2


def test_state_of_different_names_is_independent() -> None:
    b = backend()
    x = b.get_state(lg.ValueStateDescriptor("x", default=0))
    y = b.get_state(lg.ValueStateDescriptor("y", default=0))
    b.current_key = "k"
    x.update(1)
    assert y.value() == 0


def test_asking_for_state_with_something_other_than_a_descriptor_is_a_configuration_error() -> None:
    with pytest.raises(lg.ConfigurationError, match="counter op.*ValueStateDescriptor"):
        backend().get_state("count")


def test_reusing_a_state_name_for_another_kind_of_state_is_a_configuration_error() -> None:
    class OtherKind(StateDescriptor):
        kind = "list"

    b = backend()
    b.get_state(lg.ValueStateDescriptor("s"))
    with pytest.raises(lg.ConfigurationError, match="already registered as value state"):
        b.get_state(OtherKind("s"))


def test_a_descriptor_needs_a_name() -> None:
    with pytest.raises(lg.ConfigurationError, match="non-empty string name"):
        lg.ValueStateDescriptor("")


def test_a_non_keyed_operator_asking_for_keyed_state_is_told_to_key_by_first() -> None:
    ctx = RuntimeContext(
        task_name="t",
        operator_name="plain map",
        operator_uid="u",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
    )
    with pytest.raises(lg.ConfigurationError) as err:
        ctx.get_state(lg.ValueStateDescriptor("x"))
    assert "plain map" in str(err.value) and "key_by" in str(err.value)

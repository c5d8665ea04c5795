"""A bad graph fails when the job is built (env.get_job_graph / env.execute), before anything
runs, with an InvalidGraphError naming the operator and the fix."""

from __future__ import annotations

import threading

import pytest

import lockgate as lg
from conftest import lockgate_threads
from lockgate.connectors import DiscardingSink


def ident(x):
    return x


def build_error(env: lg.StreamEnvironment) -> str:
    """The message of the InvalidGraphError both build entry points raise (they must agree)."""
    with pytest.raises(lg.InvalidGraphError) as from_graph:
        env.get_job_graph()
    with pytest.raises(lg.InvalidGraphError) as from_execute:
        env.execute("bad job")
    assert str(from_graph.value) == str(from_execute.value)
    assert not lockgate_threads(), "a bad graph must fail before any subtask starts"
    return str(from_graph.value)


def test_two_operators_with_one_uid_are_rejected_naming_both(make_env) -> None:
    env = make_env()
    s = env.from_collection([1, 2])
    s.map(ident, name="first").uid("dup").sink_to(DiscardingSink(), name="s1")
    s.map(ident, name="second").uid("dup").sink_to(DiscardingSink(), name="s2")
    msg = build_error(env)
    assert "uid 'dup'" in msg
    assert "'first'" in msg and "'second'" in msg
    assert "give each operator its own uid" in msg


def test_an_operator_parallelism_above_max_parallelism_is_rejected(make_env) -> None:
    env = make_env(parallelism=2, max_parallelism=4)
    env.from_collection([1]).map(ident, name="too wide").set_parallelism(5).sink_to(
        DiscardingSink(), name="sink"
    )
    msg = build_error(env)
    assert "'too wide'" in msg
    assert "parallelism 5 above its max_parallelism 4" in msg
    assert "raise max_parallelism" in msg


def test_a_default_parallelism_above_max_parallelism_is_rejected(make_env) -> None:
    env = lg.StreamEnvironment(parallelism=8, max_parallelism=4)
    env.from_collection([1], name="src").sink_to(DiscardingSink(), name="sink")
    msg = build_error(env)
    assert "'src'" in msg and "'sink'" in msg
    assert "lower the parallelism" in msg


def test_an_operator_max_parallelism_below_its_parallelism_is_rejected(make_env) -> None:
    env = make_env(parallelism=4)
    env.from_collection([1]).map(ident, name="narrow").set_max_parallelism(2).sink_to(
        DiscardingSink(), name="sink"
    )
    msg = build_error(env)
    assert "'narrow'" in msg and "max_parallelism 2" in msg


def test_an_operator_without_a_path_to_a_sink_is_rejected(make_env) -> None:
    env = make_env()
    s = env.from_collection([1, 2])
    s.map(ident, name="orphan")
    s.sink_to(DiscardingSink(), name="sink")
    msg = build_error(env)
    assert "'orphan'" in msg
    assert "no path to a sink" in msg
    assert ".sink_to(" in msg


def test_a_job_without_any_sink_is_rejected(make_env) -> None:
    env = make_env()
    env.from_collection([1, 2], name="src").map(ident, name="m")
    msg = build_error(env)
    assert "no sink" in msg
    assert "sink_to(" in msg
    assert "'m'" in msg, "the operators whose output would be lost are named too"


def test_an_empty_job_is_rejected_for_having_no_sink(make_env) -> None:
    msg = build_error(make_env())
    assert "no sink" in msg


@pytest.mark.parametrize("method", ["map", "filter", "flat_map", "map_batches", "process"])
def test_a_function_that_is_not_callable_is_rejected(make_env, method: str) -> None:
    env = make_env()
    stream = env.from_collection([1, 2])
    getattr(stream, method)(3, name="bad fn").sink_to(DiscardingSink(), name="sink")
    msg = build_error(env)
    assert "'bad fn'" in msg
    assert "3 is not callable" in msg
    assert "pass a function" in msg


def test_a_keyed_process_with_a_non_callable_function_is_rejected(make_env) -> None:
    env = make_env()
    env.from_collection([1]).key_by(ident).process("nope", name="keyed").sink_to(
        DiscardingSink(), name="sink"
    )
    msg = build_error(env)
    assert "'keyed'" in msg and "not callable" in msg


def test_a_function_capturing_a_lock_cannot_be_pickled_and_is_rejected(make_env) -> None:
    lock = threading.Lock()
    env = make_env()
    env.from_collection([1]).map(lambda x: (lock, x)[1], name="locked").sink_to(
        DiscardingSink(), name="sink"
    )
    msg = build_error(env)
    assert "'locked'" in msg
    assert "cannot be pickled" in msg
    assert "open(ctx)" in msg, "the fix (create locks/clients in open) is given"


def test_a_function_object_holding_a_lock_is_rejected(make_env) -> None:
    class Holder(lg.MapFunction):
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def map(self, value):
            return value

    env = make_env()
    env.from_collection([1]).map(Holder(), name="holder").sink_to(DiscardingSink(), name="sink")
    msg = build_error(env)
    assert "'holder'" in msg and "cannot be pickled" in msg


def test_a_key_selector_capturing_a_lock_is_rejected(make_env) -> None:
    lock = threading.Lock()
    env = make_env()
    env.from_collection([1]).key_by(lambda x: (lock, x)[1]).process(
        lambda v, ctx: [v], name="keyed"
    ).sink_to(DiscardingSink(), name="sink")
    msg = build_error(env)
    assert "'keyed'" in msg and "cannot be pickled" in msg


def test_every_problem_of_a_graph_is_reported_at_once(make_env) -> None:
    lock = threading.Lock()
    env = make_env()
    s = env.from_collection([1])
    s.map(ident, name="orphan")
    s.map(lambda x: (lock, x)[1], name="locked").sink_to(DiscardingSink(), name="sink")
    msg = build_error(env)
    assert "'orphan'" in msg and "'locked'" in msg


def test_invalid_graph_error_is_a_lockgate_error_and_a_value_error() -> None:
    assert issubclass(lg.InvalidGraphError, lg.LockgateError)
    assert issubclass(lg.InvalidGraphError, ValueError)


def test_a_valid_graph_builds_and_plans(make_env) -> None:
    env = make_env(parallelism=3)
    env.from_collection([1]).key_by(ident).process(lambda v, ctx: [v]).sink_to(DiscardingSink())
    plan = env.get_execution_plan("ok")
    assert plan.num_slots == 3
    assert "ok" in plan.describe()

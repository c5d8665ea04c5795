"""Operator chaining: which operators share a subtask (Flink's rule, see graph/job_graph.py).

``env.get_job_graph().chains()`` lists each vertex's operator names, head first.
"""

from __future__ import annotations

import lockgate as lg
from lockgate.connectors import DiscardingSink


def ident(x):
    return x


def chains(env: lg.StreamEnvironment) -> set[tuple[str, ...]]:
    return {tuple(c) for c in env.get_job_graph().chains()}


def source(env: lg.StreamEnvironment, name: str = "src") -> lg.DataStream:
    return env.from_collection(list(range(10)), name=name)


def test_forward_edges_between_operators_of_equal_parallelism_chain_into_one_vertex(
    make_env,
) -> None:
    env = make_env(parallelism=2)
    (
        source(env)
        .map(ident, name="m")
        .filter(bool, name="f")
        .flat_map(lambda x: [x], name="fm")
        .sink_to(DiscardingSink(), name="sink")
    )
    assert env.get_job_graph().chains() == [["src", "m", "f", "fm", "sink"]]


def test_key_by_breaks_the_chain(make_env) -> None:
    env = make_env(parallelism=2)
    (
        source(env)
        .map(ident, name="m")
        .key_by(lambda x: x % 3)
        .map(ident, name="after")
        .sink_to(DiscardingSink(), name="sink")
    )
    assert chains(env) == {("src", "m"), ("after", "sink")}


def test_key_by_breaks_the_chain_even_at_parallelism_one(make_env) -> None:
    env = make_env(parallelism=1)
    source(env).key_by(ident).map(ident, name="after").sink_to(DiscardingSink(), name="sink")
    assert chains(env) == {("src",), ("after", "sink")}


def test_rebalance_breaks_the_chain(make_env) -> None:
    env = make_env(parallelism=2)
    source(env).map(ident, name="m").rebalance().map(ident, name="after").sink_to(
        DiscardingSink(), name="sink"
    )
    assert chains(env) == {("src", "m"), ("after", "sink")}


def test_broadcast_breaks_the_chain(make_env) -> None:
    env = make_env(parallelism=2)
    source(env).broadcast().map(ident, name="after").sink_to(DiscardingSink(), name="sink")
    assert chains(env) == {("src",), ("after", "sink")}


def test_a_change_of_parallelism_breaks_the_chain(make_env) -> None:
    env = make_env(parallelism=2)
    (
        source(env)
        .map(ident, name="wide")
        .map(ident, name="narrow")
        .set_parallelism(1)
        .sink_to(DiscardingSink(), name="sink")
        .set_parallelism(1)
    )
    assert chains(env) == {("src", "wide"), ("narrow", "sink")}


def test_a_sink_of_other_parallelism_is_not_chained(make_env) -> None:
    env = make_env(parallelism=3)
    source(env).map(ident, name="m").sink_to(DiscardingSink(), name="sink").set_parallelism(1)
    assert chains(env) == {("src", "m"), ("sink",)}


def test_a_union_consumer_with_two_inputs_starts_its_own_chain(make_env) -> None:
    env = make_env(parallelism=2)
    a = source(env, "a").map(ident, name="am")
    b = source(env, "b")
    a.union(b).map(ident, name="merged").sink_to(DiscardingSink(), name="sink")
    assert chains(env) == {("a", "am"), ("b",), ("merged", "sink")}


def test_a_union_of_a_stream_with_itself_is_two_inputs_and_breaks_the_chain(make_env) -> None:
    env = make_env(parallelism=2)
    s = source(env)
    s.union(s).map(ident, name="m").sink_to(DiscardingSink(), name="sink")
    assert chains(env) == {("src",), ("m", "sink")}


def test_disable_operator_chaining_puts_every_operator_in_its_own_vertex(make_env) -> None:
    env = make_env(parallelism=2)
    env.disable_operator_chaining()
    source(env).map(ident, name="m").filter(bool, name="f").sink_to(DiscardingSink(), name="sink")
    assert chains(env) == {("src",), ("m",), ("f",), ("sink",)}


def test_disable_chaining_isolates_one_operator_and_keeps_its_neighbours_chained(make_env) -> None:
    env = make_env(parallelism=2)
    (
        source(env)
        .map(ident, name="a")
        .map(ident, name="b")
        .disable_chaining()
        .map(ident, name="c")
        .sink_to(DiscardingSink(), name="sink")
    )
    assert chains(env) == {("src", "a"), ("b",), ("c", "sink")}


def test_a_fan_out_of_forward_edges_chains_both_branches_to_the_producer(make_env) -> None:
    env = make_env(parallelism=2)
    s = source(env)
    s.map(ident, name="left").sink_to(DiscardingSink(), name="left sink")
    s.map(ident, name="right").sink_to(DiscardingSink(), name="right sink")
    [chain] = env.get_job_graph().chains()
    assert chain[0] == "src"
    assert set(chain) == {"src", "left", "left sink", "right", "right sink"}
    assert chain.index("left") < chain.index("left sink")
    assert chain.index("right") < chain.index("right sink")


def test_a_side_output_consumer_of_equal_parallelism_chains_to_its_producer(make_env) -> None:
    tag = lg.OutputTag("odd")

    class Split(lg.ProcessFunction):
        def process_element(self, value, ctx):
            if value % 2:
                ctx.output(tag, value)
            else:
                yield value

    env = make_env(parallelism=2)
    main = source(env).process(Split(), name="split")
    main.sink_to(DiscardingSink(), name="even sink")
    main.get_side_output(tag).sink_to(DiscardingSink(), name="odd sink")
    [chain] = env.get_job_graph().chains()
    assert set(chain) == {"src", "split", "even sink", "odd sink"}


def test_a_source_is_always_the_head_of_its_chain(make_env) -> None:
    env = make_env(parallelism=2)
    source(env).map(ident, name="m").sink_to(DiscardingSink(), name="sink")
    graph = env.get_job_graph()
    for vertex in graph.vertices:
        names = [graph.nodes[n].name for n in vertex.operators]
        assert vertex.is_source == (names[0] == "src")


def test_unchained_edges_carry_the_partitioning_in_the_execution_plan(make_env) -> None:
    env = make_env(parallelism=2)
    s = source(env)
    s.key_by(ident).map(ident, name="k").sink_to(DiscardingSink(), name="s1")
    s.rebalance().map(ident, name="r").sink_to(DiscardingSink(), name="s2")
    s.broadcast().map(ident, name="b").sink_to(DiscardingSink(), name="s3")
    plan = env.get_execution_plan("plan")
    by_target = {
        plan.vertex(e.target_vertex).name: e.partitioning.name for e in plan.edges.values()
    }
    assert by_target == {"k -> s1": "hash", "r -> s2": "rebalance", "b -> s3": "broadcast"}

"""Connected streams (issue 23 part 1): the API and its checks, the job graph of two
connected (keyed) inputs, and the co-operators driven directly: one method per input,
keyed state shared by both inputs, timers on the minimum of both watermarks with an
idle input ignored (M-W5, M-W4, M-W6), snapshot and restore at another parallelism
(M-T4, M-R1)."""

from __future__ import annotations

from typing import Any

import pytest

import lockgate as lg
from lockgate.runtime.operators.co_process import (
    CoFlatMapOperator,
    CoMapOperator,
    KeyedCoProcessOperator,
)
from lockgate.testing import OperatorHarness

TOTAL = lg.ValueStateDescriptor("total", default=0)
ODD = lg.OutputTag("odd")


# -- functions ------------------------------------------------------------------------------
class Tag(lg.CoMapFunction):
    def map1(self, value: Any) -> Any:
        return ("first", value)

    def map2(self, value: Any) -> Any:
        return ("second", value)


class Repeat(lg.CoFlatMapFunction):
    def flat_map1(self, value: Any) -> Any:
        yield from [value] * value

    def flat_map2(self, value: Any) -> Any:
        return [value.upper()]


class Route(lg.CoProcessFunction):
    def process_element1(self, value: Any, ctx: Any) -> Any:
        if value % 2:
            ctx.output(ODD, value)
            return None
        return [(1, value, ctx.timestamp)]

    def process_element2(self, value: Any, ctx: Any) -> Any:
        yield (2, value, ctx.timestamp)


class Sum(lg.KeyedCoProcessFunction):
    """Input 1 adds ``v``, input 2 subtracts ``amount`` of the same key's total; a record
    with event time registers a timer at that time + 10, which emits the total."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.total = ctx.get_state(TOTAL)

    def process_element1(self, value: Any, ctx: Any) -> Any:
        self.total.update(self.total.value() + value["v"])
        if ctx.timestamp is not None:
            ctx.timer_service().register_event_time_timer(ctx.timestamp + 10)
        yield ("1", ctx.current_key, self.total.value())

    def process_element2(self, value: Any, ctx: Any) -> Any:
        self.total.update(self.total.value() - value["amount"])
        if value["amount"] < 0:
            ctx.output(ODD, value)
        yield ("2", ctx.current_key, self.total.value())

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield ("timer", ctx.current_key, timestamp, self.total.value())


# -- the operators, driven by lockgate.testing.OperatorHarness --------------------------------
BACKENDS = {"hashmap": lg.HashMapStateBackend, "rocksdb": lambda: lg.RocksDBStateBackend()}


def keyed_sum(restored: Any = None, **options: Any) -> OperatorHarness:
    """Input 1 keyed by ``k``, input 2 by the ``order`` field: one key space; opened."""
    return OperatorHarness.for_keyed_co_process(
        Sum(), key1="k", key2=lambda r: r["order"], **options
    ).open(restored)


def test_co_map_and_co_flat_map_call_the_method_of_each_input() -> None:
    h = OperatorHarness.for_co_map(Tag()).open()
    h.process([1, 2], timestamps=[5, 6], input=1)
    h.process(["x"], input=2)
    assert h.output == [("first", 1), ("first", 2), ("second", "x")]
    assert h.timestamps == [5, 6, None], "map keeps each record's event time"
    assert h.operator.counters.records_in == 3

    h2 = OperatorHarness.for_co_flat_map(Repeat()).open()
    h2.process([2, 0, 1], input=1)
    h2.process(["a", "b"], input=2)
    assert h2.output == [2, 2, 1, "A", "B"]


def test_co_process_has_timestamps_and_side_outputs_per_input() -> None:
    h = OperatorHarness.for_co_process(Route()).open()
    h.process([1, 2, 3, 4], timestamps=[10, 20, 30, 40], input=1)
    h.process(["a"], timestamps=[7], input=2)
    assert h.output == [(1, 2, 20), (1, 4, 40), (2, "a", 7)]
    assert h.side_output(ODD) == [1, 3]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_keyed_state_is_shared_by_both_inputs_under_their_own_key_selectors(
    backend: str,
) -> None:
    h = keyed_sum(state_backend=BACKENDS[backend]())
    h.process([{"k": "a", "v": 5}, {"k": "b", "v": 1}], input=1)
    h.process([{"order": "a", "amount": 2}, {"order": "c", "amount": -1}], input=2)
    h.process([{"k": "a", "v": 1}], input=1)
    assert h.output == [
        ("1", "a", 5),
        ("1", "b", 1),
        ("2", "a", 3),
        ("2", "c", 1),
        ("1", "a", 4),
    ]
    assert h.side_output("odd") == [{"order": "c", "amount": -1}]
    h.close()


def test_event_time_timers_fire_on_the_minimum_of_both_watermarks_M_W5_M_W6() -> None:
    h = keyed_sum()
    h.process([{"k": "a", "v": 1}], timestamps=[100], input=1)  # timer at 110
    h.process_watermark(500, input=1)
    assert h.watermarks == [] and h.output == [("1", "a", 1)], (
        "input 1 has no watermark yet: event time does not advance"
    )
    h.process_watermark(105, input=2)
    assert h.watermarks == [105] and h.operator.current_watermark == 105
    h.process_watermark(120, input=2)
    assert h.watermarks == [105, 120]
    assert h.output[-1] == ("timer", "a", 110, 1)
    assert h.timestamps[-1] == 110, "timer output carries the timer's time"
    h.process_watermark(600, input=2)
    assert h.watermarks == [105, 120, 500], "now input 0 is the slower one"


def test_an_idle_input_does_not_hold_the_watermark_back_M_W4() -> None:
    h = keyed_sum()
    h.process([{"k": "a", "v": 1}], timestamps=[100], input=1)
    h.process_watermark(50, input=2)
    h.process_watermark(300, input=1)
    assert h.watermarks == [50]
    h.set_idle(input=2)
    assert h.watermarks == [50, 300], "the idle input no longer holds event time back"
    assert ("timer", "a", 110, 1) in h.output
    h.set_idle(False, input=2)
    h.process_watermark(310, input=1)
    assert h.watermarks[-1] == 300, "the active input again bounds event time"


def test_processing_time_timers_fire_with_the_key_current() -> None:
    class Later(lg.KeyedCoProcessFunction):
        def process_element1(self, value: Any, ctx: Any) -> Any:
            ctx.timer_service().register_processing_time_timer(1_000)
            return None

        def process_element2(self, value: Any, ctx: Any) -> Any:
            return None

        def on_timer(self, timestamp: int, ctx: Any) -> Any:
            yield (ctx.current_key, timestamp)

    h = OperatorHarness.for_keyed_co_process(
        Later(), key1=lambda v: v, key2=lambda v: v, clock=lg.ManualClock(0)
    ).open()
    h.process(["x"], input=1)
    assert h.advance_processing_time(999) == 0 and h.output == []
    assert h.advance_processing_time(1) == 1
    assert h.output == [("x", 1_000)]


def test_keyed_state_and_timers_restore_by_key_group_at_another_parallelism_M_R1() -> None:
    keys = [f"k{i}" for i in range(20)]
    old = keyed_sum()
    old.process([{"k": k, "v": 3} for k in keys], timestamps=[100] * len(keys), input=1)
    old.process([{"order": k, "amount": 1} for k in keys], input=2)
    snapshot = old.snapshot()
    seen: list[Any] = []
    for subtask in range(2):
        h = keyed_sum(subtask_index=subtask, parallelism=2, restored=snapshot)
        owned = [k for k in keys if lg.subtask_for_key(k, 2, 128) == subtask]
        h.process([{"order": k, "amount": 1} for k in owned], input=2)
        h.process_watermark(200, input=1)
        h.process_watermark(200, input=2)
        assert [r for r in h.output if r[0] == "2"] == [("2", k, 1) for k in owned]
        seen.extend(r[1] for r in h.output if r[0] == "timer")
    assert sorted(seen) == sorted(keys), "every key's timer fired once, in its new subtask"


# -- the API --------------------------------------------------------------------------------
def test_connect_makes_connected_streams_and_key_by_keys_both() -> None:
    env = lg.StreamEnvironment(parallelism=2)
    a, b = env.from_collection([1]), env.from_collection(["x"])
    c = a.connect(b)
    assert isinstance(c, lg.ConnectedStreams) and not c.keyed
    assert c.first_input is a and c.second_input is b
    assert c.key_by(lambda v: v, lambda v: v).keyed
    assert a.key_by(lambda v: v).connect(b.key_by(lambda v: v)).keyed
    assert not a.key_by(lambda v: v).connect(b).keyed
    assert "ConnectedStreams(" in repr(c)


def test_the_job_graph_key_group_partitions_both_inputs_by_their_own_selector() -> None:
    env = lg.StreamEnvironment(parallelism=2)
    a = env.from_collection([{"k": 1}]).uid("a")
    b = env.from_collection([{"order": 1}]).uid("b")
    a.key_by("k").connect(b.key_by("order")).process(Sum()).uid("op").sink_to(
        lg.connectors.DiscardingSink()
    ).uid("sink")
    graph = env.get_job_graph()
    op = next(n for n in graph.nodes.values() if n.uid == "op")
    into = sorted(
        (e for e in graph.edges.values() if e.target == op.id), key=lambda e: e.input_index
    )
    assert [graph.nodes[e.source].uid for e in into] == ["a", "b"]
    assert [e.input_index for e in into] == [0, 1]
    assert [type(e.partitioning).__name__ for e in into] == ["KeyGroupPartitioning"] * 2
    assert [e.partitioning.selector.describe() for e in into] == ["'k'", "'order'"]
    created = op.factory.create()
    assert isinstance(created, KeyedCoProcessOperator)


class OnlyFirst(lg.CoProcessFunction):
    def process_element1(self, value: Any, ctx: Any) -> Any:
        return None


class OnlyMap1(lg.CoMapFunction):
    def map1(self, value: Any) -> Any:
        return value


class Duck:
    def map1(self, value: Any) -> Any:
        return value

    def map2(self, value: Any) -> Any:
        return value


def test_a_duck_typed_function_with_both_methods_is_accepted() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    env.from_collection([1]).connect(env.from_collection([2])).map(Duck())


@pytest.mark.parametrize(
    ("call", "fn", "match"),
    [
        ("map", Tag, r"got the class Tag; pass an instance: Tag\(...\)"),
        ("map", OnlyMap1(), r"subclass lg\.CoMapFunction and override both.*does not define map2"),
        ("map", lambda v: v, r"map1\(...\) and map2\(...\) methods, one per input"),
        ("flat_map", Tag(), r"does not define flat_map1 or flat_map2.*call \.map\(fn\) with it"),
        ("process", OnlyFirst(), r"does not define process_element2"),
        ("process", Repeat(), r"is a CoFlatMapFunction: call \.flat_map\(fn\) with it"),
        ("process", Sum(), r"is a KeyedCoProcessFunction, but the first input and the second"),
    ],
)
def test_wrong_functions_are_refused_with_the_fix(call: str, fn: Any, match: str) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    c = env.from_collection([1]).connect(env.from_collection([2]))
    with pytest.raises(lg.ConfigurationError, match=match):
        getattr(c, call)(fn)


def test_a_keyed_function_needs_both_inputs_keyed() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    a, b = env.from_collection([1]), env.from_collection([2])
    with pytest.raises(
        lg.ConfigurationError,
        match=r"but the second input is not keyed: key both inputs, with "
        r"a\.key_by\(ka\)\.connect\(b\.key_by\(kb\)\)",
    ):
        a.key_by(lambda v: v).connect(b).process(Sum())
    with pytest.raises(
        lg.ConfigurationError, match=r"subclass lg\.KeyedCoProcessFunction and override both"
    ):
        a.key_by(lambda v: v).connect(b.key_by(lambda v: v)).process(OnlyFirst())


def test_connect_refuses_a_non_stream_and_another_environment() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    a = env.from_collection([1])
    with pytest.raises(lg.ConfigurationError, match=r"takes a DataStream or a broadcast stream"):
        a.connect([1, 2])  # type: ignore[call-overload]
    other = lg.StreamEnvironment(parallelism=1).from_collection([1])
    with pytest.raises(lg.ConfigurationError, match=r"same StreamEnvironment"):
        a.connect(other)
    with pytest.raises(lg.ConfigurationError, match=r"key_by needs a column name"):
        a.connect(a).key_by(3, "k")  # type: ignore[arg-type]
    with pytest.raises(lg.ConfigurationError, match=r"name must be a non-empty string"):
        a.connect(a).map(Tag(), name="")


def test_map_and_flat_map_of_keyed_connected_streams_partition_both_inputs_by_key() -> None:
    env = lg.StreamEnvironment(parallelism=2)
    a = env.from_collection([1]).uid("a")
    b = env.from_collection(["x"]).uid("b")
    keyed = a.connect(b).key_by(lambda v: v, lambda w: len(w))
    keyed.map(Tag()).uid("map").sink_to(lg.connectors.DiscardingSink()).uid("s1")
    keyed.flat_map(Repeat()).uid("flat").sink_to(lg.connectors.DiscardingSink()).uid("s2")
    graph = env.get_job_graph()
    for uid, operator in (("map", CoMapOperator), ("flat", CoFlatMapOperator)):
        op = next(n for n in graph.nodes.values() if n.uid == uid)
        into = [e for e in graph.edges.values() if e.target == op.id]
        assert sorted(e.input_index for e in into) == [0, 1]
        assert {type(e.partitioning).__name__ for e in into} == {"KeyGroupPartitioning"}
        assert isinstance(op.factory.create(), operator)


def test_a_co_process_function_on_keyed_inputs_runs_with_the_key_current() -> None:
    class Keys(lg.CoProcessFunction):
        def process_element1(self, value: Any, ctx: Any) -> Any:
            yield (1, ctx.current_key)

        def process_element2(self, value: Any, ctx: Any) -> Any:
            yield (2, ctx.current_key)

    env = lg.StreamEnvironment(parallelism=1)
    a, b = env.from_collection(["w"]), env.from_collection(["x"])
    out = a.key_by(lambda v: v).connect(b.key_by(lambda w: w)).process(Keys())
    op = out.transformation.factory.create()  # type: ignore[union-attr]
    assert isinstance(op, KeyedCoProcessOperator)
    h = OperatorHarness(op).open()
    h.process(["v"], input=1)
    h.process(["y"], input=2)
    assert h.output == [(1, "v"), (2, "y")]
    # keys of the two inputs that can never be equal (an int and a str) are refused
    with pytest.raises(lg.ConfigurationError, match=r"is int but .* is str; keys of these types"):
        h.process([7], input=1)


def test_timers_on_unkeyed_connected_streams_say_to_key_both_inputs() -> None:
    class Timer(lg.CoProcessFunction):
        def process_element1(self, value: Any, ctx: Any) -> Any:
            ctx.timer_service()

        def process_element2(self, value: Any, ctx: Any) -> Any:
            return None

    h = OperatorHarness.for_co_process(Timer()).open()
    with pytest.raises(lg.UserFunctionError, match=r"a\.key_by\(ka\)\.connect\(b\.key_by\(kb\)\)"):
        h.process([1], input=1)

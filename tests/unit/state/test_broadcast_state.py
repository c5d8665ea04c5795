"""Broadcast state: the state API, the read-only view, the API's checks, and the
broadcast operators' snapshot / restore (M-T3, M-T4, M-R1) without an executor."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import lockgate as lg
from lockgate.api.broadcast import BroadcastConnectedStream, BroadcastStream
from lockgate.api.functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction
from lockgate.core.partitioners import BroadcastPartitioning
from lockgate.runtime.operators.broadcast import (
    KeyedBroadcastProcessOperator,
)
from lockgate.state.broadcast import (
    BroadcastState,
    BroadcastStateStore,
    ReadOnlyBroadcastState,
)
from lockgate.state.snapshot import payload_part
from lockgate.testing import OperatorHarness, OperatorSnapshot, OutputBatch

RULES: lg.MapStateDescriptor[Any] = lg.MapStateDescriptor("rules")
LIMITS: lg.MapStateDescriptor[Any] = lg.MapStateDescriptor("limits")


# -- the state API --------------------------------------------------------------------
def test_broadcast_state_is_a_mapping_with_flink_style_methods() -> None:
    entries: dict[Any, Any] = {}
    s: BroadcastState[Any, Any] = BroadcastState("rules", entries)
    assert s.is_empty() and len(s) == 0 and s.get("a") is None and s.get("a", 7) == 7
    s.put("a", 1)
    s["b"] = None  # None is a value
    s.put_all({"c": 3, ("t", 1): [4]})
    assert s.contains("b") and "b" in s and "zz" not in s
    assert s["a"] == 1 and s.get("b", "default") is None and s[("t", 1)] == [4]
    assert sorted(map(str, s.keys())) == sorted(map(str, ["a", "b", "c", ("t", 1)]))
    assert len(s) == 4 and set(map(str, iter(s))) == set(map(str, s.keys()))
    assert dict(s.items())["c"] == 3 and 3 in s.values()
    for k in s.keys():  # noqa: SIM118 - keys() is a copy: removing while iterating is fine
        if k != "a":
            s.remove(k)
    assert s.items() == [("a", 1)]
    s.remove("missing")  # no error
    with pytest.raises(KeyError):
        _ = s["missing"]
    with pytest.raises(KeyError):
        del s["missing"]
    del s["a"]
    assert s.is_empty() and entries == {}
    s.put("x", 1)
    s.clear()
    assert len(s) == 0


def test_broadcast_state_rejects_unhashable_keys_and_non_mappings() -> None:
    s: BroadcastState[Any, Any] = BroadcastState("rules", {})
    with pytest.raises(lg.ConfigurationError, match=r"'rules'\.put: .*hashable.*list"):
        s.put([1], 1)
    with pytest.raises(lg.ConfigurationError, match=r"'rules'\.get: .*hashable"):
        s.get({})
    with pytest.raises(lg.ConfigurationError, match=r"put_all needs a mapping"):
        s.put_all([("a", 1)])  # type: ignore[arg-type]


def test_the_read_only_view_reads_live_entries_and_refuses_every_write() -> None:
    entries: dict[Any, Any] = {"a": 1}
    view: ReadOnlyBroadcastState[Any, Any] = ReadOnlyBroadcastState("rules", entries)
    assert view["a"] == 1 and view.get("a") == 1 and "a" in view and len(view) == 1
    entries["b"] = 2  # what process_broadcast_element writes shows at once
    assert view.items() == [("a", 1), ("b", 2)] and list(view) == ["a", "b"]
    writes = [
        lambda: view.put("c", 3),
        lambda: view.put_all({"c": 3}),
        lambda: view.remove("a"),
        view.clear,
        lambda: view.__setitem__("c", 3),
        lambda: view.__delitem__("a"),
    ]
    for write in writes:
        with pytest.raises(
            lg.ConfigurationError,
            match=r"read-only in process_element.*only writable in "
            r"process_broadcast_element",
        ):
            write()
    assert entries == {"a": 1, "b": 2}, "a refused write changes nothing"


def test_the_store_knows_only_declared_states_and_map_descriptors() -> None:
    store = BroadcastStateStore("rules-op", [RULES, LIMITS])
    store.writable(RULES).put("k", 1)
    assert store.read_only(lg.MapStateDescriptor("rules"))["k"] == 1, "looked up by name"
    with pytest.raises(
        lg.ConfigurationError,
        match=r"operator 'rules-op': no broadcast state named 'other'.*"
        r"declares 'rules', 'limits'",
    ):
        store.read_only(lg.MapStateDescriptor("other"))
    with pytest.raises(lg.ConfigurationError, match=r"needs the lg\.MapStateDescriptor"):
        store.writable(lg.ValueStateDescriptor("rules"))  # type: ignore[arg-type]


def test_a_store_snapshot_is_a_deep_copy_and_restore_replaces_the_entries_M_T3() -> None:
    store = BroadcastStateStore("op", [RULES, LIMITS])
    assert store.snapshot() is None, "no state, no snapshot part"
    rules = store.writable(RULES)
    rules.put("r", {"factor": 2})
    snap = store.snapshot()
    assert snap == {"rules": {"r": {"factor": 2}}, "limits": {}}
    rules.get("r")["factor"] = 99  # type: ignore[index]  # an in-place change after the snapshot
    rules.put("s", 1)
    assert snap == {"rules": {"r": {"factor": 2}}, "limits": {}}

    other = BroadcastStateStore("op", [RULES])
    view = other.read_only(RULES)
    other.restore(copy.deepcopy(snap))
    assert view.items() == [("r", {"factor": 2})], "views made before restore see it"
    assert other.snapshot() == {"rules": {"r": {"factor": 2}}, "limits": {}}, (
        "an undeclared restored state is kept"
    )
    with pytest.raises(lg.ConfigurationError, match=r"restored broadcast state 'rules' is a list"):
        other.restore({"rules": [1]})
    with pytest.raises(lg.ConfigurationError, match=r"restored broadcast state is a str"):
        other.restore("nope")


# -- the API's checks -----------------------------------------------------------------
class Rules(BroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put(value, True)
        return None


class KeyedRules(KeyedBroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        return None


def test_broadcast_without_descriptors_is_still_partitioning() -> None:
    env = lg.StreamEnvironment(parallelism=2)
    s = env.from_collection([1, 2]).broadcast()
    assert isinstance(s, lg.DataStream)
    assert isinstance(s.transformation.partitioning, BroadcastPartitioning)


def test_broadcast_with_descriptors_makes_a_broadcast_stream_that_connects() -> None:
    env = lg.StreamEnvironment(parallelism=2)
    bs = env.from_collection([1]).broadcast(RULES, LIMITS)
    assert isinstance(bs, BroadcastStream)
    assert [d.name for d in bs.descriptors] == ["rules", "limits"]
    assert isinstance(bs.transformation.partitioning, BroadcastPartitioning)
    data = env.from_collection([1, 2])
    connected = data.connect(bs)
    assert isinstance(connected, BroadcastConnectedStream) and not connected.keyed
    out = connected.process(Rules())
    t = out.transformation
    assert t.name == "BroadcastProcess" and not t.keyed
    assert t.inputs == [data.transformation, bs.transformation], "input 0: data, 1: broadcast"
    keyed = data.key_by(lambda v: v).connect(bs)
    assert keyed.keyed
    kt = keyed.process(KeyedRules(), name="rules").transformation
    assert kt.name == "rules" and kt.keyed
    assert kt.factory is not None and kt.factory.operator_class is KeyedBroadcastProcessOperator


def test_the_job_graph_gives_the_broadcast_input_index_1_and_broadcast_partitioning() -> None:
    env = lg.StreamEnvironment(parallelism=2)
    bs = env.from_collection([1]).uid("rules").broadcast(RULES)
    data = env.from_collection([1, 2]).uid("data")
    data.key_by(lambda v: v).connect(bs).process(KeyedRules()).uid("op").sink_to(
        lg.connectors.DiscardingSink()
    ).uid("sink")
    graph = env.get_job_graph()
    op = next(n for n in graph.nodes.values() if n.uid == "op")
    into = sorted(
        (e for e in graph.edges.values() if e.target == op.id), key=lambda e: e.input_index
    )
    assert [graph.nodes[e.source].uid for e in into] == ["data", "rules"]
    assert [e.input_index for e in into] == [0, 1]
    assert type(into[0].partitioning).__name__ == "KeyGroupPartitioning"
    assert isinstance(into[1].partitioning, BroadcastPartitioning)
    assert not any(e.chained for e in into)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((lg.ListStateDescriptor("x"),), r"broadcast state is a map; pass lg\.MapStateDescriptor"),
        (("rules",), r"MapStateDescriptor.*got 'rules'"),
        ((RULES, lg.MapStateDescriptor("rules")), r"two broadcast state descriptors are named"),
    ],
)
def test_broadcast_rejects_bad_descriptors(args: tuple[Any, ...], match: str) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    with pytest.raises(lg.ConfigurationError, match=match):
        env.from_collection([1]).broadcast(*args)


def test_broadcast_rejects_a_descriptor_with_ttl() -> None:
    d: lg.MapStateDescriptor[Any] = lg.MapStateDescriptor("ttl")
    d.enable_time_to_live(lg.StateTtlConfig(1000))
    env = lg.StreamEnvironment(parallelism=1)
    with pytest.raises(lg.ConfigurationError, match=r"TTL applies to keyed state only"):
        env.from_collection([1]).broadcast(d)


def test_connect_takes_a_broadcast_stream_or_a_data_stream() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    a, b = env.from_collection([1]), env.from_collection([2])
    assert isinstance(a.connect(b), lg.ConnectedStreams)  # two inputs (issue 23)
    assert isinstance(a.key_by(lambda v: v).connect(b.broadcast()), lg.ConnectedStreams)
    assert isinstance(a.connect(b.broadcast(RULES)), lg.BroadcastConnectedStream)
    with pytest.raises(lg.ConfigurationError, match=r"takes a DataStream or a broadcast stream"):
        a.connect(42)  # type: ignore[call-overload]
    other = lg.StreamEnvironment(parallelism=1).from_collection([1]).broadcast(RULES)
    with pytest.raises(lg.ConfigurationError, match=r"same StreamEnvironment"):
        a.connect(other)


class OnlyElements(BroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        return [value]


def test_process_needs_both_methods_and_the_matching_function_kind() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    bs = env.from_collection([1]).broadcast(RULES)
    data = env.from_collection([1])
    with pytest.raises(lg.ConfigurationError, match=r"does not define process_broadcast_element"):
        data.connect(bs).process(OnlyElements())
    with pytest.raises(
        lg.ConfigurationError, match=r"does not define process_element or process_broadcast_element"
    ):
        data.connect(bs).process(lambda v, ctx: [v])
    with pytest.raises(lg.ConfigurationError, match=r"pass an instance: Rules\(\.\.\.\)"):
        data.connect(bs).process(Rules)
    with pytest.raises(lg.ConfigurationError, match=r"is a KeyedBroadcastProcessFunction.*key_by"):
        data.connect(bs).process(KeyedRules())
    with pytest.raises(lg.ConfigurationError, match=r"is a BroadcastProcessFunction.*keyed"):
        data.key_by(lambda v: v).connect(bs).process(Rules())
    with pytest.raises(lg.ConfigurationError, match=r"name must be a non-empty string"):
        data.connect(bs).process(Rules(), name="")


# -- the operators, driven directly ----------------------------------------------------
BACKENDS = {"hashmap": lg.HashMapStateBackend, "rocksdb": lambda: lg.RocksDBStateBackend()}


def harness(
    fn: Any, *, key: Any = None, subtask: int = 0, parallelism: int = 1, backend: str = "hashmap"
) -> OperatorHarness:
    """The broadcast operator of ``fn`` (keyed by ``key`` when given): input 1 is the data
    stream, input 2 the broadcast stream."""
    options: dict[str, Any] = {
        "subtask_index": subtask,
        "parallelism": parallelism,
        "state_backend": BACKENDS[backend](),
        "name": "bc",
        "uid": "bc",
    }
    if key is None:
        return OperatorHarness.for_broadcast_process(fn, [RULES], **options)
    return OperatorHarness.for_keyed_broadcast_process(fn, [RULES], key=key, **options)


class Tagger(BroadcastProcessFunction):
    """Tags each record with the rule for its ``kind``; learns rules from the broadcast
    side; counts records in split operator state."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.seen = ctx.get_operator_list_state(lg.ListStateDescriptor("seen"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.seen.add(value["v"])
        rule = ctx.get_broadcast_state(RULES).get(value["kind"], "none")
        if rule == "side":
            ctx.output(lg.OutputTag("odd"), value)
            return
        yield {"v": value["v"], "rule": rule}

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put(value["kind"], value["rule"])
        yield {"learned": value["kind"]}


def test_input_1_writes_broadcast_state_that_input_0_reads() -> None:
    h = harness(Tagger()).open()
    h.process([{"kind": "a", "v": 1}], input=1)
    h.process([{"kind": "a", "rule": "double"}, {"kind": "b", "rule": "side"}], input=2)
    h.process([{"kind": "a", "v": 2}, {"kind": "b", "v": 3}], input=1)
    assert h.output == [
        {"v": 1, "rule": "none"},
        {"learned": "a"},
        {"learned": "b"},
        {"v": 2, "rule": "double"},
    ]
    assert h.side_output("odd") == [{"kind": "b", "v": 3}]
    assert [e.tag for e in h.elements if isinstance(e, OutputBatch) and e.tag] == ["odd"]
    assert h.operator.counters.records_in == 5
    h.close()


class WritesOnTheWrongSide(BroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put("x", value)
        return None

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(lg.MapStateDescriptor("undeclared"))
        return None


def test_bad_usage_fails_with_the_operator_and_a_clear_cause() -> None:
    h = harness(WritesOnTheWrongSide()).open()
    with pytest.raises(lg.UserFunctionError, match=r"operator 'bc'.*read-only in process_element"):
        h.process([1], input=1)
    with pytest.raises(
        lg.UserFunctionError, match=r"no broadcast state named 'undeclared'.*declares 'rules'"
    ):
        h.process([1], input=2)
    h.close()


def test_the_snapshot_holds_deep_copies_of_broadcast_and_operator_state_M_T3_M_T4() -> None:
    h = harness(Tagger()).open()
    assert payload_part(h.snapshot().state(), "broadcast") is None, "no broadcast state yet"
    h.process([{"kind": "a", "rule": ["x"]}], input=2)
    h.process([{"kind": "a", "v": 1}], input=1)
    snap = h.begin_snapshot()
    h.operator.broadcast_state.writable(RULES)["a"].append("changed later")
    h.process([{"kind": "b", "rule": "y"}], input=2)
    payload = snap.complete().state()
    assert payload_part(payload, "broadcast") == {"rules": {"a": ["x"]}}
    assert payload_part(payload, "operator") == {"seen": {"mode": "split", "items": [1]}}
    assert payload_part(payload, "keyed") is None
    h.close()


def test_a_function_without_other_state_snapshots_only_its_broadcast_state() -> None:
    h = harness(Rules()).open()
    assert h.snapshot().payload is None, "no state at all: nothing to write"
    h.process(["r"], input=2)
    payload = h.snapshot().state()
    assert payload_part(payload, "broadcast") == {"rules": {"r": True}}
    assert payload_part(payload, "operator") is None and payload_part(payload, "keyed") is None
    h.close()


@pytest.mark.parametrize(("old_parallelism", "new_parallelism"), [(2, 2), (2, 3), (3, 1)])
def test_every_restored_subtask_gets_the_broadcast_state_M_R1(
    old_parallelism: int, new_parallelism: int
) -> None:
    """Each new subtask i takes old subtask i % old parallelism's broadcast part; split
    operator state is dealt out without loss."""
    snapshots = []
    for j in range(old_parallelism):
        h = harness(Tagger(), subtask=j, parallelism=old_parallelism).open()
        h.process([{"kind": "a", "rule": "r1"}, {"kind": "b", "rule": "r2"}], input=2)
        h.process([{"kind": "a", "v": 10 * j + i} for i in range(3)], input=1)
        snapshots.append(h.snapshot())
        h.close()
    seen: list[int] = []
    for i in range(new_parallelism):
        h = harness(Tagger(), subtask=i, parallelism=new_parallelism).open(restored=snapshots)
        h.process([{"kind": "b", "v": 100}], input=1)
        assert h.output == [{"v": 100, "rule": "r2"}], f"subtask {i}"
        seen.extend(h.operator.operator_state.snapshot()["seen"]["items"][:-1])
        h.close()
    assert sorted(seen) == sorted(10 * j + i for j in range(old_parallelism) for i in range(3))


def test_restore_reads_the_broadcast_part_of_old_subtask_i_mod_old_parallelism() -> None:
    """Tell the old subtasks' parts apart (they are equal in a real job) to see which
    one each new subtask took."""
    snapshots = [
        OperatorSnapshot.of_state(
            {
                "lockgate_state": 1,
                "keyed": None,
                "operator": None,
                "broadcast": {"rules": {"from": j}},
                "function": None,
            },
            subtask_index=j,
            parallelism=2,
        )
        for j in range(2)
    ]
    took = []
    for i in range(3):
        h = harness(Tagger(), subtask=i, parallelism=3).open(restored=snapshots)
        took.append(h.operator.broadcast_state.read_only(RULES)["from"])
        h.close()
    assert took == [0, 1, 0]


COUNT = lg.ValueStateDescriptor("count", default=0)


class KeyedCounter(KeyedBroadcastProcessFunction):
    """Counts records per key; a broadcast ``"reset"`` reports and clears every count of
    the subtask; a broadcast ``"misuse"`` touches keyed state without a key."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(COUNT)

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.count.update(self.count.value() + 1)
        factor = ctx.get_broadcast_state(RULES).get("factor", 1)
        yield (ctx.current_key, value * factor, self.count.value())

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        if value == "misuse":
            self.count.value()
            return
        if value == "reset":
            out: list[Any] = []

            def reset(key: Any, state: Any) -> None:
                out.append(("reset", key, state.value()))
                state.clear()

            ctx.apply_to_keyed_state(COUNT, reset)
            yield from sorted(out)
            return
        ctx.get_broadcast_state(RULES).put("factor", value)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_keyed_variant_scopes_state_and_applies_a_function_to_every_key(backend: str) -> None:
    h = harness(KeyedCounter(), key=lambda v: v % 3, backend=backend).open()
    h.process([1, 2, 4], input=1)
    h.process([10], input=2)
    h.process([7], input=1)
    h.process(["reset"], input=2)
    h.process([5], input=1)
    assert h.output == [
        (1, 1, 1),
        (2, 2, 1),
        (1, 4, 2),
        (1, 70, 3),
        ("reset", 1, 3),
        ("reset", 2, 1),
        (2, 50, 1),
    ]
    with pytest.raises(
        lg.UserFunctionError,
        match=r"keyed state was used in process_broadcast_element.*"
        r"apply_to_keyed_state",
    ):
        h.process(["misuse"], input=2)
    h.close()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_keyed_variant_restores_keyed_and_broadcast_state_at_another_parallelism(
    backend: str,
) -> None:
    keys = list(range(12))
    h = harness(KeyedCounter(), key=lambda v: v, backend=backend).open()
    h.process([3], input=2)
    h.process(keys, input=1)
    snapshot = h.snapshot()
    h.close()
    assert payload_part(snapshot.state(), "broadcast") == {"rules": {"factor": 3}}
    outputs: list[Any] = []
    for i in range(2):
        h = harness(KeyedCounter(), key=lambda v: v, subtask=i, parallelism=2, backend=backend)
        h.open(restored=snapshot)
        owned = [k for k in keys if lg.subtask_for_key(k, 2, 128) == i]
        h.process(owned, input=1)
        h.process(["reset"], input=2)
        outputs.extend(h.output)
        h.close()
    counted = sorted(r for r in outputs if r[0] != "reset")
    assert counted == [(k, 3 * k, 2) for k in keys], "factor 3 and count 1 were restored"
    assert sorted(r for r in outputs if r[0] == "reset") == [("reset", k, 2) for k in keys], (
        "apply_to_keyed_state visits each key once, in the subtask that owns it"
    )


class BadApply(KeyedBroadcastProcessFunction):
    def __init__(self, descriptor: Any, function: Any) -> None:
        self.descriptor = descriptor
        self.function = function

    def process_element(self, value: Any, ctx: Any) -> Any:
        return None

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.apply_to_keyed_state(self.descriptor, self.function)
        return None


@pytest.mark.parametrize(
    ("descriptor", "function", "match"),
    [
        (COUNT, "not callable", r"apply_to_keyed_state needs a function \(key, state\)"),
        ("count", lambda k, s: None, r"needs a state descriptor such as lg\.ValueStateDescriptor"),
    ],
)
def test_apply_to_keyed_state_rejects_bad_arguments(
    descriptor: Any, function: Any, match: str
) -> None:
    h = harness(BadApply(descriptor, function), key=lambda v: v).open()
    with pytest.raises(lg.UserFunctionError, match=match):
        h.process([1], input=2)
    h.close()

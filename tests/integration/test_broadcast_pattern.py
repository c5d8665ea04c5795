"""The broadcast state pattern end to end on both executors: rules broadcast to a keyed
and a non-keyed stream change how later records are processed; broadcast state (with
keyed state, on both state backends) survives an injected failure and a savepoint round
trip, and a restore at another parallelism gives every subtask the broadcast state
(M-T4, M-R1, M-S1, M-S2).

The two inputs of a broadcast operator are not ordered against each other, so the jobs
here order them with :class:`GatedSource`: a source that emits a phase of records only
once the function has reported (to a :class:`FileProbe`) what that phase depends on.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from conftest import FileProbe, wait_until
from lockgate.api.functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction
from lockgate.connectors.base import InputStatus, ReaderOutput, Source, SourceReader
from lockgate.core.batch import RowBatch
from lockgate.testing import FailAtRecord, inject_faults

RULES: lg.MapStateDescriptor[Any] = lg.MapStateDescriptor("rules")
COUNT = lg.ValueStateDescriptor("count", default=0)
OP = "rules-op"
KEYS = 8
MAX_PARALLELISM = 128


# -- a source whose phases wait for the job ---------------------------------------------
@dataclass
class GateSplit:
    split_id: str
    phase: int = 0
    offset: int = 0


class GatedSource(Source):
    """Emits ``phases`` (``(gate, records)``) in order, one record per batch (so that a
    rebalance deals them out record by record); a phase starts once every token of its
    ``gate`` is among ``probe``'s items. After the last phase it ends once every token of
    ``end_gate`` is there; ``end_gate=None``: it never ends (a job stopped with a
    savepoint, or one that must keep checkpointing, keeps its sources running). The read
    position (phase, offset) is checkpointed, so a restored source goes on where it was,
    with the phases of the new job."""

    def __init__(
        self,
        probe: FileProbe,
        phases: list[tuple[list[Any], list[Any]]],
        end_gate: list[Any] | None = None,
    ) -> None:
        self.probe = probe
        self.phases = phases
        self.end_gate = end_gate

    def max_parallelism(self) -> int:
        return 1

    def create_splits(self, parallelism: int) -> list[GateSplit]:
        return [GateSplit("gated")]

    def create_reader(self, ctx: lg.RuntimeContext) -> SourceReader:
        return _GatedReader(self)


class _GatedReader(SourceReader):
    def __init__(self, source: GatedSource) -> None:
        self.source = source
        self.splits: list[GateSplit] = []

    def add_splits(self, splits: list[GateSplit]) -> None:
        self.splits.extend(splits)

    def _open(self, gate: list[Any]) -> bool:
        return not gate or set(gate) <= set(self.source.probe.items)

    def poll(self, output: ReaderOutput) -> InputStatus:
        if not self.splits:
            return InputStatus.END_OF_INPUT
        s = self.splits[0]
        phases = self.source.phases
        if s.phase < len(phases):
            gate, records = phases[s.phase]
            if s.offset == 0 and not self._open(gate):
                return InputStatus.NOTHING_AVAILABLE
            output.emit(RowBatch([records[s.offset]]))
            s.offset += 1
            if s.offset == len(records):
                s.phase, s.offset = s.phase + 1, 0
            return InputStatus.MORE_AVAILABLE
        end_gate = self.source.end_gate
        if end_gate is None or not self._open(end_gate):
            return InputStatus.NOTHING_AVAILABLE
        self.splits.clear()
        return InputStatus.END_OF_INPUT

    def wait_hint_ms(self) -> float | None:
        return 5.0

    def snapshot_positions(self) -> list[GateSplit]:
        return [GateSplit(s.split_id, s.phase, s.offset) for s in self.splits]


# -- the functions ------------------------------------------------------------------------
def rule(version: int, factor: int, reset: bool = False) -> dict[str, Any]:
    return {"version": version, "factor": factor, "reset": reset}


def records(values: range) -> list[dict[str, int]]:
    return [{"k": v % KEYS, "v": v} for v in values]


class Scale(BroadcastProcessFunction):
    """Multiplies each record's ``v`` by the current rule's factor (version 0 and no
    result without a rule); reports ``("rule", version, subtask)`` and ``("done", v)``."""

    def __init__(self, probe: FileProbe) -> None:
        self.probe = probe

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.subtask = ctx.subtask_index

    def apply(self, r: dict[str, int], ctx: Any) -> dict[str, Any]:
        rules = ctx.get_broadcast_state(RULES)
        factor = rules.get("factor")
        self.probe.add(("done", r["v"]))
        return {
            "k": r["k"],
            "v": r["v"],
            "version": rules.get("version", 0),
            "result": None if factor is None else r["v"] * factor,
            "subtask": self.subtask,
        }

    def process_element(self, value: dict[str, int], ctx: Any) -> Any:
        yield self.apply(value, ctx)

    def learn(self, value: dict[str, Any], ctx: Any) -> None:
        rules = ctx.get_broadcast_state(RULES)
        rules.put("factor", value["factor"])
        rules.put("version", value["version"])

    def process_broadcast_element(self, value: dict[str, Any], ctx: Any) -> Any:
        self.learn(value, ctx)
        self.probe.add(("rule", value["version"], self.subtask))
        return None


class KeyedScale(KeyedBroadcastProcessFunction):
    """:class:`Scale` on a keyed stream, with a per-key record count; a rule with
    ``reset`` emits ``{"reset": key, "count": n}`` for every key of the subtask and
    clears its count (``apply_to_keyed_state``)."""

    def __init__(self, probe: FileProbe) -> None:
        self.scale = Scale(probe)
        self.probe = probe

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.scale.open(ctx)
        self.count = ctx.get_state(COUNT)

    def process_element(self, value: dict[str, int], ctx: Any) -> Any:
        assert ctx.current_key == value["k"]
        c = self.count.value() + 1
        self.count.update(c)
        yield {**self.scale.apply(value, ctx), "count": c}

    def process_broadcast_element(self, value: dict[str, Any], ctx: Any) -> Any:
        self.scale.learn(value, ctx)
        out: list[dict[str, Any]] = []
        if value["reset"]:

            def reset(key: Any, state: Any) -> None:
                out.append({"reset": key, "count": state.value()})
                state.clear()

            ctx.apply_to_keyed_state(COUNT, reset)
        self.probe.add(("rule", value["version"], self.scale.subtask))
        yield from out


BACKENDS = {
    "hashmap": lambda: lg.HashMapStateBackend(),
    "rocksdb": lambda: lg.RocksDBStateBackend(incremental=True),
}
#: (keyed, state backend) of each job variant
VARIANTS = [
    pytest.param(False, "hashmap", id="non-keyed"),
    pytest.param(True, "hashmap", id="keyed-hashmap"),
    pytest.param(True, "rocksdb", id="keyed-rocksdb"),
]


def rules_arrived(version: int, parallelism: int) -> list[Any]:
    return [("rule", version, s) for s in range(parallelism)]


def done(values: range) -> list[Any]:
    return [("done", v) for v in values]


def build(
    env: lg.StreamEnvironment,
    probe: FileProbe,
    keyed: bool,
    rule_phases: list[tuple[list[Any], list[Any]]],
    rules_end: list[Any] | None,
    data_phases: list[tuple[list[Any], list[Any]]],
    data_end: list[Any] | None,
) -> lg.DataStream:
    """rules (uid ``rules``) -> broadcast; data (uid ``data``) -> [key_by] -> connect ->
    Scale / KeyedScale (name and uid ``rules-op``)."""
    rules = (
        env.from_source(GatedSource(probe, rule_phases, rules_end), name="rules")
        .uid("rules")
        .set_parallelism(1)
    )
    data = (
        env.from_source(GatedSource(probe, data_phases, data_end), name="data")
        .uid("data")
        .set_parallelism(1)
    )
    connected = (data.key_by("k") if keyed else data).connect(rules.broadcast(RULES))
    fn = KeyedScale(probe) if keyed else Scale(probe)
    return connected.process(fn, name=OP).uid(OP)


def new_env(
    tmp_path: Path, parallelism: int, backend: str, name: str, *, checkpoints: bool = True
) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=parallelism, max_parallelism=MAX_PARALLELISM)
    if checkpoints:
        env.enable_checkpointing(timedelta(milliseconds=50))
        env.checkpoint_config.storage = str(tmp_path / f"chk-{name}")
        env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    env.set_state_backend(BACKENDS[backend]())
    return env


def read_sink(folder: Path) -> list[dict[str, Any]]:
    """The records an exactly-once FileSink published (``part-*`` files)."""
    out: list[dict[str, Any]] = []
    for part in sorted(folder.glob("part-*")):
        out.extend(json.loads(line) for line in part.read_text().splitlines() if line)
    return out


def by_value(outputs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The data outputs by ``v``; fails on a duplicate (exactly-once output)."""
    seen: dict[int, dict[str, Any]] = {}
    for o in outputs:
        if "v" in o:
            assert o["v"] not in seen, f"record {o['v']} was output twice: {o}, {seen[o['v']]}"
            seen[o["v"]] = o
    return seen


def check_counts(outputs: list[dict[str, Any]], values: range, start: dict[int, int]) -> None:
    """Per key, the counts of the outputs for ``values`` run on from ``start[key]``, each
    once (exactly-once keyed state)."""
    counts: dict[int, list[int]] = defaultdict(list)
    for o in outputs:
        if "v" in o and o["v"] in values:
            counts[o["k"]].append(o["count"])
    for k, cs in counts.items():
        first = start.get(k, 0) + 1
        assert sorted(cs) == list(range(first, first + len(cs))), f"key {k}: counts {sorted(cs)}"


# -- rules change the processing of later records -------------------------------------------
@pytest.mark.parametrize("keyed", [False, True], ids=["non-keyed", "keyed"])
def test_broadcast_rules_change_how_later_records_are_processed_in_every_subtask(
    executor: Any, keyed: bool, tmp_path: Path
) -> None:
    """Rule 1 (factor 10) reaches every subtask before the first records; rule 2 (factor
    100, with a reset of every key's count in the keyed variant) comes after they were
    processed and before the next ones."""
    p = 2
    probe = FileProbe(tmp_path / "probe")
    first, second = range(0, 16), range(16, 32)
    env = new_env(tmp_path, p, "hashmap", "semantics", checkpoints=False)
    out = build(
        env,
        probe,
        keyed,
        rule_phases=[([], [rule(1, 10)]), (done(first), [rule(2, 100, reset=True)])],
        rules_end=[],
        data_phases=[(rules_arrived(1, p), records(first)), (rules_arrived(2, p), records(second))],
        data_end=[],
    )
    outputs: list[dict[str, Any]] = out.execute_and_collect(
        "broadcast semantics", executor=executor
    )

    results = by_value(outputs)
    assert sorted(results) == list(first) + list(second)
    for v, o in results.items():
        version, factor = (1, 10) if v in first else (2, 100)
        assert (o["version"], o["result"]) == (version, v * factor), o
    for values in (first, second):
        assert {results[v]["subtask"] for v in values} == {0, 1}, "both subtasks processed records"
    resets = [o for o in outputs if "reset" in o]
    if keyed:
        check_counts(outputs, first, {})
        check_counts(outputs, second, {})  # the reset cleared every count
        per_key = {k: sum(1 for v in first if v % KEYS == k) for k in range(KEYS)}
        assert sorted((o["reset"], o["count"]) for o in resets) == sorted(per_key.items()), (
            "apply_to_keyed_state visited every key once, in the subtask owning it"
        )
    else:
        assert resets == []


# -- an injected failure (M-R1) ---------------------------------------------------------------
@pytest.mark.hang_guard(120)
@pytest.mark.parametrize(("keyed", "backend"), VARIANTS)
def test_broadcast_state_survives_an_injected_failure_exactly_once_M_T4_M_R1(
    executor: Any, keyed: bool, backend: str, tmp_path: Path
) -> None:
    """The rule is broadcast once, a checkpoint completes after the first records, then
    the operator fails while processing the second ones. The restarted job restores the
    rule from the checkpoint (its source does not send it again): every second record is
    still scaled by it, and every record is output once (exactly-once FileSink)."""
    p = 2
    probe = FileProbe(tmp_path / "probe")
    first, second = range(0, 12), range(12, 72)
    env = new_env(tmp_path, p, backend, "failure")
    # index 1 + len(first) is past what any subtask sees before the second records
    inject_faults(env, FailAtRecord(OP, record=1 + len(first), subtask=None))
    folder = tmp_path / "out"
    build(
        env,
        probe,
        keyed,
        rule_phases=[([], [rule(1, 10)])],
        rules_end=[("go",)],
        data_phases=[(rules_arrived(1, p), records(first)), ([("go",)], records(second))],
        data_end=[],
    ).sink_to(lg.connectors.FileSink(str(folder), format="jsonl")).uid("sink")

    client = env.execute_async("broadcast failure", executor=executor)
    try:
        wait_until(
            lambda: set(done(first)) <= set(probe.items),
            "the first records were processed",
            timeout_s=60,
        )
        processed_at = time.time() * 1000
        wait_until(
            lambda: any(
                s.status == "completed" and s.trigger_timestamp > processed_at
                for s in client.checkpoints()
            ),
            "a checkpoint after the first records completed",
            timeout_s=60,
        )
        probe.add(("go",))
        result = client.wait(90)
    except BaseException:
        client.cancel()
        raise
    assert result.status is lg.JobStatus.FINISHED
    assert result.attempts == 2, "the injected failure restarted the job once"

    outputs = read_sink(folder)
    results = by_value(outputs)
    assert sorted(results) == list(first) + list(second), "every record output exactly once"
    assert all((o["version"], o["result"]) == (1, o["v"] * 10) for o in results.values()), (
        "the rule restored from the checkpoint scaled every record after the failure"
    )
    assert {results[v]["subtask"] for v in second} == {0, 1}
    if keyed:
        check_counts(outputs, range(0, 72), {})


# -- savepoint round trip and rescaling (M-S1, M-S2) ---------------------------------------------
@pytest.mark.hang_guard(120)
@pytest.mark.parametrize(("keyed", "backend"), VARIANTS)
def test_a_savepoint_restores_broadcast_state_into_every_subtask_at_another_parallelism_M_S1(
    executor: Any, keyed: bool, backend: str, tmp_path: Path
) -> None:
    """Stage one (parallelism 2) learns the rule and processes the first records, then
    stops with a savepoint, which holds the rule (read offline, M-S1). Stage two restores
    it at parallelism 3 (1 on Spark's two slots) without sending the rule again: every
    subtask, also a new one, scales the second records by the restored rule, and keyed
    counts go on from the savepoint."""
    first, second = range(0, 16), range(16, 64)
    p1 = 2
    p2 = 3 if isinstance(executor, lg.LocalExecutor) else 1
    if keyed:
        owners = {lg.subtask_for_key(k, p2, MAX_PARALLELISM) for k in range(KEYS)}
        assert owners == set(range(p2)), "the keys reach every subtask of stage two"
    probe = FileProbe(tmp_path / "probe")
    rule_phases: list[tuple[list[Any], list[Any]]] = [([], [rule(1, 10)])]
    data_phases = [(rules_arrived(1, p1), records(first)), ([], records(second))]

    env = new_env(tmp_path, p1, backend, "one")
    build(env, probe, keyed, rule_phases, None, data_phases[:1], None).sink_to(
        lg.connectors.FileSink(str(tmp_path / "out-one"), format="jsonl")
    ).uid("sink")
    client = env.execute_async("broadcast savepoint, stage one", executor=executor)
    try:
        wait_until(
            lambda: set(done(first)) <= set(probe.items),
            "stage one processed its records",
            timeout_s=60,
        )
        location = client.stop_with_savepoint(str(tmp_path / "sp"), timeout=60)
        stopped = client.wait(60)
    except BaseException:
        client.cancel()
        raise
    assert stopped.status is lg.JobStatus.FINISHED and stopped.savepoint_path == location
    frame = lg.savepoint.read(location, allow_pickle=True).state(OP, "rules").to_pandas()
    assert dict(zip(frame["key"], frame["value"])) == {"factor": 10, "version": 1}

    env2 = new_env(tmp_path, p2, backend, "two")
    folder = tmp_path / "out-two"
    build(env2, probe, keyed, rule_phases, [], data_phases, []).sink_to(
        lg.connectors.FileSink(str(folder), format="jsonl")
    ).uid("sink")
    env2.execute("broadcast savepoint, stage two", executor=executor, restore_from=location)

    outputs = read_sink(folder)
    results = by_value(outputs)
    assert sorted(results) == list(second), "stage two went on after the first records"
    assert all((o["version"], o["result"]) == (1, o["v"] * 10) for o in results.values()), (
        "the restored rule scaled every record"
    )
    assert {o["subtask"] for o in results.values()} == set(range(p2)), (
        "every subtask of stage two held the broadcast state"
    )
    if keyed:
        before = {k: sum(1 for v in first if v % KEYS == k) for k in range(KEYS)}
        check_counts(outputs, second, before)

"""Every state kind through failures, savepoints, backends and rescaling (M-T4, M-R1,
M-R3, M-S1, M-S2), end to end on both executors."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from conftest import FileProbe, wait_until
from lockgate.testing import FailAtRecord, inject_faults

KEYS = 20
UID = "all-kinds"


class Mean(lg.AggregateFunction):
    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: int, acc: tuple[int, int]) -> tuple[int, int]:
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc: tuple[int, int]) -> float:
        return acc[0] / acc[1]

    def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return (a[0] + b[0], a[1] + b[1])


class AllKinds(lg.KeyedProcessFunction):
    """Keeps one state of every keyed kind, a split operator list state (the number of
    records each subtask processed) and a union list state (a marker per parallelism
    the job ran at: every subtask gets all markers back on restore). ``done_at``
    (key -> count): report the key to ``probe`` when its count reaches that number."""

    def __init__(
        self, probe: FileProbe | None = None, done_at: dict[int, int] | None = None
    ) -> None:
        self.probe = probe
        self.done_at = done_at or {}

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))
        self.values = ctx.get_list_state(lg.ListStateDescriptor("values"))
        self.by_mod = ctx.get_map_state(lg.MapStateDescriptor("by_mod"))
        self.maximum = ctx.get_reducing_state(lg.ReducingStateDescriptor("max", max))
        self.mean = ctx.get_aggregating_state(lg.AggregatingStateDescriptor("mean", Mean()))
        self.processed = ctx.get_operator_list_state(lg.ListStateDescriptor("processed"))
        self.markers = ctx.get_union_list_state(lg.ListStateDescriptor("markers"))
        self.markers.update(sorted(set(self.markers.get()) | {f"p{ctx.parallelism}"}))

    def process_element(self, r: dict[str, int], ctx: Any) -> Any:
        v = r["v"]
        c = self.count.value() + 1
        self.count.update(c)
        self.values.add(v)
        self.by_mod[v % 3] = self.by_mod.get(v % 3, 0) + 1
        self.maximum.add(v)
        self.mean.add(v)
        done = self.processed.get()
        if done:
            done[-1] += 1
        else:
            self.processed.add(1)
        if self.probe is not None and self.done_at.get(ctx.current_key) == c:
            self.probe.add(ctx.current_key)
        yield {
            "k": ctx.current_key,
            "count": c,
            "n_values": len(self.values.get()),
            "by_mod": sorted(self.by_mod.items()),
            "max": self.maximum.get(),
            "mean": self.mean.get(),
            "markers": self.markers.get(),
        }


def to_record(i: int) -> dict[str, int]:
    return {"k": i % KEYS, "v": i}


def expected_state(values: range | list[int]) -> dict[int, dict[str, Any]]:
    by_key: dict[int, list[int]] = defaultdict(list)
    for i in values:
        by_key[i % KEYS].append(i)
    return {
        k: {
            "count": len(vs),
            "values": sorted(vs),
            "by_mod": dict(Counter(v % 3 for v in vs)),
            "max": max(vs),
            "mean": sum(vs) / len(vs),
        }
        for k, vs in by_key.items()
    }


def check_outputs(
    outputs: list[dict[str, Any]],
    expected: dict[int, dict[str, Any]],
    first_count: dict[int, int] | None = None,
) -> None:
    """Each key's outputs carry the counts first..final exactly once (exactly-once state
    and output) and the last one shows the expected state."""
    by_key: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for o in outputs:
        by_key[o["k"]].append(o)
    assert set(by_key) == set(expected)
    for k, exp in expected.items():
        counts = sorted(o["count"] for o in by_key[k])
        start = (first_count or {}).get(k, 1)
        assert counts == list(range(start, exp["count"] + 1)), f"key {k}: counts {counts[:5]}..."
        last = max(by_key[k], key=lambda o: o["count"])
        assert last["n_values"] == exp["count"]
        assert [list(p) for p in last["by_mod"]] == sorted([m, c] for m, c in exp["by_mod"].items())
        assert last["max"] == exp["max"]
        assert last["mean"] == pytest.approx(exp["mean"])


BACKENDS = {
    "hashmap": lambda: lg.HashMapStateBackend(),
    "rocksdb": lambda: lg.RocksDBStateBackend(incremental=True),
}


def build(
    env: lg.StreamEnvironment,
    ranges: list[tuple[int, int]],
    *,
    bounded: bool = True,
    probe: FileProbe | None = None,
    done_at: dict[int, int] | None = None,
    rows_per_second: float | None = None,
) -> lg.DataStream:
    """Sources ``src-<i>`` (one per range; unbounded unless ``bounded``: a task that
    finishes ends checkpointing, so a job to be stopped with a savepoint keeps every
    source running) ->
    records -> key_by -> AllKinds (uid ``all-kinds``)."""
    streams = []
    for i, (lo, hi) in enumerate(ranges):
        last = i == len(ranges) - 1
        src = lg.connectors.SequenceSource(
            lo, hi, bounded=bounded, rows_per_second=rows_per_second if last else None
        )
        streams.append(env.from_source(src, name=f"src-{i}").uid(f"src-{i}"))
    stream = streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]
    records = stream.map(to_record, name="records").uid("records")
    return records.key_by("k").process(AllKinds(probe, done_at), name="all-kinds").uid(UID)


def new_env(tmp_path: Any, parallelism: int, backend: str, name: str) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=parallelism)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / f"chk-{name}")
    env.set_state_backend(BACKENDS[backend]())
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    return env


@pytest.mark.hang_guard(240)
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_state_kind_survives_an_injected_failure_M_T4_M_R1(
    executor: Any, backend: str, tmp_path: Any
) -> None:
    env = new_env(tmp_path, 2, backend, "failure")
    inject_faults(env, FailAtRecord("all-kinds", record=3000, subtask=0))
    folder = tmp_path / "out"
    build(env, [(0, 8000)]).sink_to(lg.connectors.FileSink(str(folder), format="jsonl")).uid("sink")
    result = env.execute("every kind, one failure", executor=executor)
    assert result.attempts == 2, "the injected failure restarted the job once"
    outputs = read_sink(folder)
    check_outputs(outputs, expected_state(range(0, 8000)))
    assert all(o["markers"] == ["p2"] for o in outputs)


def read_sink(folder: Path) -> list[dict[str, Any]]:
    """The records an exactly-once FileSink published (``part-*`` files)."""
    out = []
    for part in sorted(folder.glob("part-*")):
        out.extend(json.loads(line) for line in part.read_text().splitlines() if line)
    return out


def stage_env(
    tmp_path: Path,
    parallelism: int,
    backend: str,
    name: str,
    ranges: list[tuple[int, int]],
    *,
    bounded: bool,
    probe: FileProbe | None = None,
) -> tuple[lg.StreamEnvironment, Path]:
    """The job over ``ranges`` into an exactly-once FileSink; with ``probe``, each key is
    reported once it has seen all its records of ``ranges``."""
    env = new_env(tmp_path, parallelism, backend, name)
    done_at = None
    if probe is not None:
        done_at = {k: e["count"] for k, e in expected_state(spread(ranges)).items()}
    out = build(env, ranges, bounded=bounded, probe=probe, done_at=done_at)
    folder = tmp_path / f"out-{name}"
    out.sink_to(lg.connectors.FileSink(str(folder), format="jsonl")).uid("sink")
    return env, folder


def spread(ranges: list[tuple[int, int]]) -> list[int]:
    return [i for lo, hi in ranges for i in range(lo, hi)]


def run_until_processed(
    env: lg.StreamEnvironment,
    executor: Any,
    name: str,
    probe: FileProbe,
    *,
    restore_from: str | None = None,
) -> lg.JobClient:
    client = env.execute_async(name, executor=executor, restore_from=restore_from)
    try:
        wait_until(
            lambda: len(set(probe.items)) >= KEYS,
            f"job '{name}' processed all its records",
            timeout_s=120,
        )
    except BaseException:
        client.cancel()
        raise
    return client


def stop_with_savepoint(client: lg.JobClient, path: Path) -> str:
    try:
        location = client.stop_with_savepoint(str(path), timeout=60)
    except BaseException:
        client.cancel()
        raise
    result = client.wait(60)
    assert result.status is lg.JobStatus.FINISHED
    assert result.savepoint_path == location
    assert (path / "_metadata").is_file()
    return location


def keyed_frame(location: str, name: str) -> dict[Any, Any]:
    frame = lg.savepoint.read(location, allow_pickle=True).state(UID, name).to_pandas()
    assert list(frame.columns) == ["key", "namespace", "value"]
    assert frame["namespace"].isna().all()
    return dict(zip(frame["key"], frame["value"]))


def check_savepoint_state(location: str, expected: dict[int, dict[str, Any]], records: int) -> None:
    """The savepoint read into pandas equals the live state at the savepoint (M-S1)."""
    assert keyed_frame(location, "count") == {k: e["count"] for k, e in expected.items()}
    assert {k: sorted(v) for k, v in keyed_frame(location, "values").items()} == {
        k: e["values"] for k, e in expected.items()
    }
    assert keyed_frame(location, "by_mod") == {k: e["by_mod"] for k, e in expected.items()}
    assert keyed_frame(location, "max") == {k: e["max"] for k, e in expected.items()}
    assert keyed_frame(location, "mean") == {
        k: (sum(e["values"]), e["count"]) for k, e in expected.items()
    }
    processed = lg.savepoint.read(location, allow_pickle=True).state(UID, "processed").to_pandas()
    assert sum(processed["value"]) == records
    markers = lg.savepoint.read(location, allow_pickle=True).state(UID, "markers").to_pandas()
    assert set(markers["value"]) and all(str(m).startswith("p") for m in markers["value"])


@pytest.mark.hang_guard(300)
@pytest.mark.parametrize(("first", "second"), [("hashmap", "rocksdb"), ("rocksdb", "hashmap")])
def test_a_savepoint_holds_the_live_state_and_restores_into_either_backend_M_S1(
    executor: Any, first: str, second: str, tmp_path: Path
) -> None:
    probe = FileProbe(tmp_path / "probe")
    env, _ = stage_env(tmp_path, 2, first, "one", [(0, 4000)], bounded=False, probe=probe)
    client = run_until_processed(env, executor, "savepoint stage one", probe)
    location = stop_with_savepoint(client, tmp_path / "sp1")
    before = expected_state(range(0, 4000))
    check_savepoint_state(location, before, 4000)
    if not isinstance(executor, lg.LocalExecutor):
        rows = (
            lg.savepoint.read(location, allow_pickle=True)
            .state(UID, "count")
            .to_spark(executor.spark)
            .collect()
        )
        assert {r["key"]: r["value"] for r in rows} == {k: e["count"] for k, e in before.items()}

    env2, folder = stage_env(tmp_path, 2, second, "two", [(0, 4000), (4000, 8000)], bounded=True)
    env2.execute("savepoint stage two", executor=executor, restore_from=location)
    check_outputs(
        read_sink(folder),
        expected_state(range(0, 8000)),
        first_count={k: e["count"] + 1 for k, e in before.items()},
    )


@pytest.mark.hang_guard(360)
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_restored_at_parallelism_1_then_3_then_2_the_keyed_results_equal_the_uninterrupted_run(
    executor: Any, backend: str, tmp_path: Path
) -> None:
    """Rescaling (M-R3, M-T4): keyed state moves by key group, split operator state is
    dealt out without loss. 1 -> 3 through a savepoint, 3 -> 2 through a retained
    checkpoint (the backend's own format: incremental for RocksDB). The test suite's
    Spark session has two cores (``local[2]``), so on Spark the job goes 1 -> 2 -> 1."""
    first, second, third = (1, 3, 2) if isinstance(executor, lg.LocalExecutor) else (1, 2, 1)
    a, b, c = (0, 3000), (3000, 6000), (6000, 9000)
    probe_a = FileProbe(tmp_path / "probe-a")
    env, _ = stage_env(tmp_path, first, backend, "p1", [a], bounded=False, probe=probe_a)
    sp = stop_with_savepoint(run_until_processed(env, executor, "p1", probe_a), tmp_path / "sp-a")
    check_savepoint_state(sp, expected_state(range(*a)), 3000)

    probe_b = FileProbe(tmp_path / "probe-b")
    env, _ = stage_env(tmp_path, second, backend, "p3", [a, b], bounded=False, probe=probe_b)
    env.checkpoint_config.externalized = lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
    client = run_until_processed(env, executor, "p3", probe_b, restore_from=sp)
    processed_at = time.time() * 1000
    try:
        wait_until(
            lambda: any(
                s.status == "completed" and s.trigger_timestamp > processed_at
                for s in client.checkpoints()
            ),
            "a checkpoint after the last record",
            timeout_s=60,
        )
    finally:
        client.cancel()
    assert client.wait(60).status is lg.JobStatus.CANCELED
    storage = str(tmp_path / "chk-p3")

    env, folder = stage_env(tmp_path, third, backend, "p2", [a, b, c], bounded=True)
    env.execute("p2", executor=executor, restore_from=storage)
    outputs = read_sink(folder)
    check_outputs(
        outputs,
        expected_state(range(0, 9000)),
        first_count={k: e["count"] + 1 for k, e in expected_state(range(0, 6000)).items()},
    )
    # union list state reached every subtask of every run (M-T4)
    assert {tuple(o["markers"]) for o in outputs} == {
        tuple(sorted({f"p{first}", f"p{second}", f"p{third}"}))
    }


# -- uid mapping (M-S2) -------------------------------------------------------------------
class Counting(lg.MapFunction):
    """Counts its records in split operator state and adds the count to the record under
    its ``tag``; reports ``tag`` to ``probe`` at ``report_at``."""

    def __init__(self, tag: str, probe: FileProbe | None = None, report_at: int = 0) -> None:
        self.tag = tag
        self.probe = probe
        self.report_at = report_at

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.seen = ctx.get_operator_list_state(lg.ListStateDescriptor("seen"))

    def map(self, value: Any) -> Any:
        n = (self.seen.get() or [0])[-1] + 1
        self.seen.update([n])
        if self.probe is not None and n == self.report_at:
            self.probe.add(self.tag)
        record = dict(value) if isinstance(value, dict) else {"v": value}
        record[self.tag] = n
        return record


def counters_job(
    env: lg.StreamEnvironment,
    order: tuple[str, ...],
    *,
    more: int = 0,
    probe: FileProbe | None = None,
) -> lg.DataStream:
    """numbers [0, 100) (unbounded when ``probe`` is given), plus ``more`` new records
    from a second source, through one Counting map per tag of ``order`` (uid
    ``count-<tag>``)."""
    stream = env.from_source(
        lg.connectors.SequenceSource(0, 100, bounded=probe is None), name="numbers"
    ).uid("numbers")
    if more:
        stream = stream.union(
            env.from_source(lg.connectors.SequenceSource(100, 100 + more), name="more").uid("more")
        )
    for tag in order:
        stream = stream.map(Counting(tag, probe, 100), name=f"count-{tag}").uid(f"count-{tag}")
    return stream


@pytest.fixture
def ab_savepoint(tmp_path: Path) -> str:
    """A savepoint of the job numbers -> count-a -> count-b after 100 records."""
    probe = FileProbe(tmp_path / "uid-probe")
    env = lg.StreamEnvironment(parallelism=1)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "uid-chk")
    counters_job(env, ("a", "b"), probe=probe).sink_to(
        lg.connectors.FileSink(str(tmp_path / "uid-out"), format="jsonl")
    ).uid("sink")
    client = env.execute_async("uid rules", executor=lg.LocalExecutor())
    try:
        wait_until(
            lambda: set(probe.items) == {"a", "b"}, "both counters saw 100 records", timeout_s=60
        )
    except BaseException:
        client.cancel()
        raise
    return stop_with_savepoint(client, tmp_path / "sp-ab")


def _restored_counts(
    tmp_path: Path, location: str, order: tuple[str, ...], executor: Any, allow: bool = False
) -> dict[str, list[int]]:
    env = lg.StreamEnvironment(parallelism=1)
    stream = counters_job(env, order, more=50)
    folder = tmp_path / ("restored-" + "".join(order))
    stream.sink_to(lg.connectors.FileSink(str(folder), format="jsonl")).uid("sink")
    env.execute(
        "uid rules, restored",
        executor=executor,
        restore_from=location,
        allow_non_restored_state=allow,
    )
    counts: dict[str, list[int]] = defaultdict(list)
    for r in read_sink(folder):
        for tag in order:
            counts[tag].append(r[tag])
    return {tag: sorted(ns) for tag, ns in counts.items()}


def test_reordered_operators_restore_their_state_by_uid_M_S2(
    ab_savepoint: str, executor: Any, tmp_path: Path
) -> None:
    counts = _restored_counts(tmp_path, ab_savepoint, ("b", "a"), executor)
    assert counts == {"a": list(range(101, 151)), "b": list(range(101, 151))}


def test_an_added_operator_starts_with_empty_state_M_S2(
    ab_savepoint: str, executor: Any, tmp_path: Path
) -> None:
    counts = _restored_counts(tmp_path, ab_savepoint, ("a", "b", "c"), executor)
    assert counts == {
        "a": list(range(101, 151)),
        "b": list(range(101, 151)),
        "c": list(range(1, 51)),
    }


def test_state_of_a_removed_operator_fails_the_restore_naming_its_uid_M_S2(
    ab_savepoint: str, tmp_path: Path
) -> None:
    with pytest.raises(lg.RestoreError, match=r"count-b"):
        _restored_counts(tmp_path, ab_savepoint, ("a",), lg.LocalExecutor())


def test_allow_non_restored_state_drops_the_state_of_a_removed_operator_M_S2(
    ab_savepoint: str, executor: Any, tmp_path: Path
) -> None:
    counts = _restored_counts(tmp_path, ab_savepoint, ("a",), executor, allow=True)
    assert counts == {"a": list(range(101, 151))}


def test_operators_without_an_explicit_uid_are_warned_about_M_S2(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    env.enable_checkpointing(1000)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.from_sequence(0, 10).uid("numbers").map(Counting("x"), name="unnamed-uid").sink_to(
        lg.connectors.FileSink(str(tmp_path / "out"), format="jsonl")
    ).uid("sink")
    with caplog.at_level(logging.WARNING, logger="lockgate"):
        plan = env.get_execution_plan("warned")
    warned = [r.getMessage() for r in caplog.records if "explicit uid" in r.getMessage()]
    assert len(warned) == 1
    assert "'unnamed-uid' (generated uid auto-" in warned[0]
    assert "numbers" not in warned[0] and "'sink'" not in warned[0]
    generated = [u for u, n in plan.operator_names.items() if n == "unnamed-uid"]
    assert generated and generated == [
        u for u, n in env.get_execution_plan("again").operator_names.items() if n == "unnamed-uid"
    ], "the generated uid is stable"

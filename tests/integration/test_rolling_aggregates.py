"""Rolling aggregates end to end (``keyed.sum(field)``, ``keyed.min``, ``keyed.max``): a
running sum then a running minimum per key, through an injected failure restored from a
checkpoint (M-T3, M-R1), on the heap and the RocksDB backend (its column mode, with the
default cache and with a cache of 40 entries that writes back and empties all the time),
records as dicts and as Arrow batches, on both executors. The exactly-once file sink's
output must equal the failure-free fold record for record: a lost or repeated update
shows as a wrong running value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lockgate as lg
from lockgate.testing import FailAtRecord, inject_faults

KEYS = 300
N = 20_000


def record(i: int) -> dict[str, Any]:
    return {"i": i, "k": (i * 7919) % KEYS, "s": i % 13 - 4, "m": float((i * 31) % 997)}


def to_arrow(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch  # the records arrive as an Arrow batch and stay one


def expected() -> dict[int, dict[str, Any]]:
    sums: dict[int, int] = {}
    mins: dict[int, float] = {}
    out = {}
    for i in range(N):
        r = record(i)
        k = r["k"]
        sums[k] = sums.get(k, 0) + r["s"]
        mins[k] = min(mins.get(k, r["m"]), r["m"])
        out[i] = {**r, "s": sums[k], "m": mins[k]}
    return out


@pytest.mark.hang_guard(300)
@pytest.mark.parametrize(
    ("backend", "arrow"),
    [("heap", False), ("rocksdb", True), ("rocksdb-40", False)],
    ids=["heap-dicts", "rocksdb-arrow", "rocksdb-tiny-cache-dicts"],
)
def test_rolling_sum_and_min_are_exact_through_a_failure(
    executor: Any, tmp_path: Path, backend: str, arrow: bool
) -> None:
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    if backend == "rocksdb":
        env.set_state_backend(lg.RocksDBStateBackend())
    elif backend == "rocksdb-40":
        env.set_state_backend(lg.RocksDBStateBackend(cache_entries=40))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    inject_faults(env, FailAtRecord("running min", record=N // 4, subtask=1))
    # one source subtask: each key's records reach its keyed subtask in sequence order
    stream = env.from_sequence(0, N).uid("numbers").set_parallelism(1)
    stream = stream.map(record, name="records").uid("records").set_parallelism(1)
    if arrow:
        stream = stream.map_batches(to_arrow, name="arrow").uid("arrow").set_parallelism(1)
    folder = tmp_path / "out"
    (
        stream.key_by("k")
        .sum("s", name="running sum")
        .uid("sum")
        .key_by("k")
        .min("m", name="running min")
        .uid("min")
        .sink_to(lg.connectors.FileSink(str(folder), format="jsonl"))
        .uid("sink")
    )
    result = env.execute("rolling aggregates", executor=executor)
    assert result.attempts == 2, "the injected failure restarted the job once"
    out = [
        json.loads(line)
        for part in sorted(folder.glob("part-*"))
        for line in part.read_text().splitlines()
        if line
    ]
    by_index = {o["i"]: o for o in out}
    assert len(out) == len(by_index) == N, "every record exactly once"
    assert by_index == expected()
    assert all(type(o["s"]) is int and type(o["m"]) is float for o in out)


def test_a_record_without_a_number_fails_the_job_naming_it(tmp_path: Path) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    records = [{"k": 1, "v": 1}, {"k": 1, "v": "two"}]
    (
        env.from_collection(records)
        .key_by("k")
        .sum("v", name="total")
        .sink_to(lg.connectors.FileSink(str(tmp_path / "out"), format="jsonl"))
    )
    with pytest.raises(Exception, match=r"(?s)total.*needs an int or float in field 'v'.*'two'"):
        env.execute("bad sum", executor=lg.LocalExecutor())


def test_a_null_in_an_arrow_column_fails_the_job_naming_the_record(tmp_path: Path) -> None:
    env = lg.StreamEnvironment(parallelism=1)

    def with_null(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([{"k": 1, "v": 1}, {"k": 1, "v": None}])

    (
        env.from_collection([{"k": 1, "v": 1}])
        .map_batches(with_null)
        .key_by("k")
        .max("v", name="highest")
        .sink_to(lg.connectors.FileSink(str(tmp_path / "out"), format="jsonl"))
    )
    with pytest.raises(Exception, match=r"(?s)highest.*record 1 of its batch has no value"):
        env.execute("null max", executor=lg.LocalExecutor())

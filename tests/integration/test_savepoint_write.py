"""``lockgate.savepoint.write``: a savepoint built from data (pandas, Arrow, Spark) that
a job restores at another parallelism and sees exactly, on both executors; read →
modify → write round-trips; a 1,000,000-key Spark DataFrame is written on the
executors and restored on Spark (M-S1, M-T4, docs/state_evolution.md)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import lockgate as lg
from lockgate.savepoint import State

UID = "bootstrapped"


@dataclasses.dataclass
class Profile:
    name: str
    visits: int
    level: int = 1  # not in the written frame: its default


class Report(lg.KeyedProcessFunction):
    """Emits, per record, what the state holds for its key."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", type=int))
        self.profile = ctx.get_state(lg.ValueStateDescriptor("profile", type=Profile))
        self.legacy = ctx.get_state(lg.ValueStateDescriptor("legacy"))  # pickled values
        self.tags = ctx.get_list_state(lg.ListStateDescriptor("tags", type=str))

    def process_element(self, key: int, ctx: Any) -> Any:
        p = self.profile.value()
        yield {
            "k": key,
            "count": self.count.value(),
            "profile": None if p is None else [p.name, p.visits, p.level],
            "legacy": self.legacy.value(),
            "tags": self.tags.get(),
        }


def restored_outputs(location: str, keys: list[int], executor: Any, parallelism: int) -> list[Any]:
    env = lg.StreamEnvironment(parallelism=parallelism)
    env.from_collection(keys, name="keys").uid("keys").key_by(lambda k: k).process(
        Report(), name="report"
    ).uid(UID).sink_to(lg.connectors.CollectSink()).uid("out")
    result = env.execute("bootstrapped job", executor=executor, restore_from=location)
    return sorted((r for part in result.sink_results["out"] for r in part), key=lambda r: r["k"])


def frames(n: int) -> dict[tuple[str, str], Any]:
    keys = list(range(n))
    return {
        (UID, "count"): pd.DataFrame({"key": keys, "value": [k * 3 for k in keys]}),
        (UID, "profile"): pa.table(
            {
                "key": pa.array(keys, pa.int64()),
                "value": [{"name": f"n{k}", "visits": k % 7} for k in keys],
            }
        ),
        (UID, "legacy"): State(
            pd.DataFrame({"key": keys, "value": [f"x{k}" for k in keys]}), typed=False
        ),
        (UID, "tags"): State(
            pd.DataFrame({"key": keys, "value": [[str(k), "t"] for k in keys]}), kind="list"
        ),
    }


def expected(k: int) -> dict[str, Any]:
    return {
        "k": k,
        "count": k * 3,
        "profile": [f"n{k}", k % 7, 1],
        "legacy": f"x{k}",
        "tags": [str(k), "t"],
    }


@pytest.mark.hang_guard(300)
def test_a_job_bootstrapped_from_frames_starts_with_exactly_that_state_at_another_parallelism(
    tmp_path: Path, executor: Any
) -> None:
    location = lg.savepoint.write(tmp_path / "sp", frames(1000), parallelism=3)
    out = restored_outputs(location, list(range(1000)), executor, parallelism=2)
    assert out == [expected(k) for k in range(1000)]


def test_read_modify_write_round_trips(tmp_path: Path) -> None:
    first = lg.savepoint.write(tmp_path / "sp1", frames(100), parallelism=1)
    sp = lg.savepoint.read(first, allow_pickle=True)
    counts = sp.state(UID, "count").to_pandas()[["key", "value"]]
    counts.loc[counts["key"] == 5, "value"] = 1_000  # fix a counter
    counts = counts[counts["key"] != 7]  # drop a key
    profiles = sp.state(UID, "profile").to_arrow().select(["key", "value"])
    legacy = sp.state(UID, "legacy").to_pandas()[["key", "value"]]
    tags = sp.state(UID, "tags").to_pandas()[["key", "value"]]
    second = lg.savepoint.write(
        tmp_path / "sp2",
        {
            (UID, "count"): counts,
            (UID, "profile"): profiles,
            (UID, "legacy"): State(legacy, typed=False),
            (UID, "tags"): State(tags, kind="list"),
        },
        parallelism=3,
    )
    again = lg.savepoint.read(second, allow_pickle=True)
    assert dict(again.state(UID, "count").to_pandas()[["key", "value"]].values.tolist()) == {
        k: (1_000 if k == 5 else k * 3) for k in range(100) if k != 7
    }
    assert again.state(UID, "profile").rows == sp.state(UID, "profile").rows
    assert again.state(UID, "tags").rows == sp.state(UID, "tags").rows
    out = restored_outputs(second, [5, 7, 8], lg.LocalExecutor(), parallelism=2)
    assert [o["count"] for o in out] == [1_000, None, 24]


def test_bad_arguments_are_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(lg.ConfigurationError, match=r"\(operator uid, state name\)"):
        lg.savepoint.write(tmp_path / "a", {"count": pd.DataFrame({"key": [1], "value": [1]})})
    with pytest.raises(lg.ConfigurationError, match="needs key, value"):
        lg.savepoint.write(tmp_path / "b", {("u", "s"): pd.DataFrame({"k": [1], "value": [1]})})
    with pytest.raises(lg.ConfigurationError, match="kind must be one of"):
        lg.savepoint.write(tmp_path / "c", {("u", "s"): State(pd.DataFrame(), kind="timers")})
    lg.savepoint.write(tmp_path / "d", {("u", "s"): pd.DataFrame({"key": [1], "value": [1]})})
    with pytest.raises(lg.ConfigurationError, match="already holds a savepoint"):
        lg.savepoint.write(tmp_path / "d", {("u", "s"): pd.DataFrame({"key": [1], "value": [1]})})


class Check(lg.KeyedProcessFunction):
    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", type=int))

    def process_element(self, key: int, ctx: Any) -> Any:
        yield key if self.count.value() == key * 3 else -1 - key


@pytest.mark.spark
@pytest.mark.hang_guard(600)
def test_a_million_key_spark_frame_is_written_on_spark_and_restored_on_spark(
    tmp_path: Path, spark_executor: Any
) -> None:
    n = 1_000_000
    spark = spark_executor.spark
    df = spark.range(n).selectExpr("id AS key", "id * 3 AS value").repartition(4)
    location = lg.savepoint.write(tmp_path / "sp", {(UID, "count"): df})
    info = lg.savepoint.read(location).operators()[UID]
    assert info.parallelism == 4  # one file per partition's subtask, written by executors
    env = lg.StreamEnvironment(parallelism=2)
    env.from_sequence(0, n).uid("keys").key_by(lambda k: k).process(Check()).uid(UID).sink_to(
        lg.connectors.CollectSink()
    ).uid("out")
    result = env.execute("million keys", executor=spark_executor, restore_from=location)
    got = [v for part in result.sink_results["out"] for v in part]
    assert len(got) == n
    bad = [-1 - v for v in got if v < 0]
    assert not bad, f"{len(bad)} keys restored wrong, e.g. {bad[:5]}"

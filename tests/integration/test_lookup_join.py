"""Stream–table lookup joins (``DataStream.lookup_join``) as jobs, on the local executor
and on Spark: the output equals pandas' merge (inner and left, Arrow and row records),
a failure restores to exactly that output (M-R1, M-X1), and a restore joins against the
Delta version or Iceberg snapshot the checkpoint recorded although the table moved on
(M-R1, M-T4). A refresh mid-stream runs on the local executor's manual clock."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from conftest import Probe, wait_until
from lockgate.connectors.base import InputStatus, ReaderOutput, Source, SourceReader
from lockgate.connectors.lookup_source import LoadedTable, LookupSource
from lockgate.core.batch import RowBatch
from lockgate.testing import FailAtRecord, inject_faults

#: the table: x -> 2x for x in [0, TABLE_ROWS), as in the latency suite's Query C
TABLE_ROWS = 1_000


def doubles(factor: int = 2) -> pa.Table:
    x = np.arange(TABLE_ROWS, dtype=np.int64)
    return pa.table({"x": x, "y": factor * x})


def events(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Records with keys in and out of the table (a fifth have no table row)."""
    keys = np.random.default_rng(seed).integers(0, TABLE_ROWS + TABLE_ROWS // 4, n)
    return [{"id": i, "key": int(k)} for i, k in enumerate(keys)]


def merged(records: list[dict[str, Any]], table: pa.Table, how: str) -> pd.DataFrame:
    """pandas' merge: what the join must give, sorted by id."""
    out = pd.DataFrame(records).merge(
        table.to_pandas(), left_on="key", right_on="x", how=how, sort=False
    )
    return frame(out)


def frame(df: pd.DataFrame) -> pd.DataFrame:
    df = df[["id", "key", "x", "y"]].astype("Float64")
    return df.sort_values("id", kind="stable").reset_index(drop=True)


def collected(result: lg.JobExecutionResult, name: str = "out") -> pd.DataFrame:
    rows = [r for part in result.sink_results[name] for r in part]
    return frame(pd.DataFrame(rows, columns=["id", "key", "x", "y"]))


@pytest.mark.parametrize("how", ["inner", "left"])
def test_row_records_joined_equal_pandas_merge(executor: Any, tmp_path: Path, how: str) -> None:
    """Dict records (row batches) joined with a Parquet table at parallelism 2."""
    pq.write_table(doubles(), tmp_path / "t.parquet")
    records = events(5_000)
    env = lg.StreamEnvironment(parallelism=2)
    (
        env.from_collection(records)
        .lookup_join(
            lg.LookupTable.parquet(tmp_path / "t.parquet"), on="key", table_key="x", how=how
        )
        .sink_to(lg.connectors.CollectSink(), name="out")
        .uid("out")
        .set_parallelism(1)
    )
    result = env.execute(f"lookup {how}", executor=executor)
    pd.testing.assert_frame_equal(collected(result), merged(records, doubles(), how))


@pytest.mark.parametrize("how", ["inner", "left"])
def test_arrow_records_joined_equal_pandas_merge(executor: Any, tmp_path: Path, how: str) -> None:
    """Arrow batches (a Parquet stream) joined with a CSV table."""
    records = events(5_000, seed=1)
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "events.parquet")
    lines = "\n".join(f"{x},{2 * x}" for x in range(TABLE_ROWS))
    (tmp_path / "t.csv").write_text(f"x,y\n{lines}\n")
    env = lg.StreamEnvironment(parallelism=2)
    (
        env.from_source(lg.connectors.FileSource(tmp_path / "events.parquet", "parquet"))
        .lookup_join(lg.LookupTable.csv(tmp_path / "t.csv"), on="key", table_key="x", how=how)
        .sink_to(lg.connectors.CollectSink(), name="out")
        .uid("out")
        .set_parallelism(1)
    )
    result = env.execute(f"lookup arrow {how}", executor=executor)
    pd.testing.assert_frame_equal(collected(result), merged(records, doubles(), how))


def paced_job(
    env: lg.StreamEnvironment, records: list[dict[str, Any]], table: lg.LookupTable, how: str
) -> lg.DataStream:
    """Records paced by completed checkpoints (every attempt lives through some), a
    lookup join named "lookup", collected exactly once."""
    paced = CheckpointPacedSource(
        lg.connectors.CollectionSource(records, batch_size=250), 1_000, end_after=3
    )
    joined = (
        env.from_source(paced)
        .uid("events")
        .lookup_join(table, on="key", table_key="x", how=how, name="lookup")
        .uid("lookup")
    )
    joined.sink_to(lg.connectors.CollectSink(), name="out").uid("out").set_parallelism(1)
    return joined


def restarting_env(tmp_path: Path) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(timedelta(milliseconds=100))
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=2, delay=0))
    return env


def test_a_failure_restores_to_exactly_the_merge_M_R1(executor: Any, tmp_path: Path) -> None:
    """The join fails in subtask 0 after two checkpoints; the job restores from the
    newest and its exactly-once output is still the merge, every record once (M-X1)."""
    pq.write_table(doubles(), tmp_path / "t.parquet")
    records = events(6_000, seed=2)
    env = restarting_env(tmp_path)
    paced_job(env, records, lg.LookupTable.parquet(tmp_path / "t.parquet"), "left")
    inject_faults(env, FailAtRecord("lookup", record=1_500, subtask=0, after_checkpoints=2))
    result = env.execute("lookup restore", executor=executor)
    assert result.attempts == 2, "the injected failure restarted the job"
    pd.testing.assert_frame_equal(collected(result), merged(records, doubles(), "left"))


class OverwriteDeltaAt(lg.MapFunction):
    """Passes records on; in attempt 0, subtask 0, at its ``at``-th record, overwrites
    the Delta table at ``uri`` with x -> 10x (a new version the join must not see)."""

    def __init__(self, uri: str, at: int) -> None:
        self.uri = uri
        self.at = at
        self.seen = 0

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.armed = ctx.attempt_number == 0 and ctx.subtask_index == 0

    def map(self, value: Any) -> Any:
        self.seen += 1
        if self.armed and self.seen == self.at:
            deltalake.write_deltalake(self.uri, doubles(10), mode="overwrite")
        return value


def test_a_restore_joins_the_delta_version_the_checkpoint_recorded_M_R1(
    executor: Any, tmp_path: Path
) -> None:
    """The join loads version 0 (x -> 2x); during the first attempt the table gets
    version 1 (x -> 10x); after the failure the restored join loads version 0 again
    (the checkpoint's), so every record is joined with 2x. Without the pin the records
    after the restore would get 10x."""
    uri = str(tmp_path / "delta")
    deltalake.write_deltalake(uri, doubles())
    records = events(6_000, seed=3)
    env = restarting_env(tmp_path)
    paced = CheckpointPacedSource(
        lg.connectors.CollectionSource(records, batch_size=250), 1_000, end_after=3
    )
    (
        env.from_source(paced)
        .uid("events")
        .map(OverwriteDeltaAt(uri, at=500), name="overwrite")
        .uid("overwrite")
        .lookup_join(lg.LookupTable.delta(uri), on="key", table_key="x", name="lookup")
        .uid("lookup")
        .sink_to(lg.connectors.CollectSink(), name="out")
        .uid("out")
        .set_parallelism(1)
    )
    inject_faults(env, FailAtRecord("lookup", record=1_500, subtask=0, after_checkpoints=2))
    result = env.execute("lookup delta pinned", executor=executor)
    assert result.attempts == 2, "the injected failure restarted the job"
    assert deltalake.DeltaTable(uri).version() == 1, "the table moved on during the run"
    pd.testing.assert_frame_equal(collected(result), merged(records, doubles(), "inner"))


class OverwriteIcebergAt(OverwriteDeltaAt):
    """The same for the Iceberg table ``table`` of the catalog ``props``."""

    def __init__(self, props: dict[str, str], table: str, at: int) -> None:
        super().__init__("", at)
        self.props, self.table = props, table

    def map(self, value: Any) -> Any:
        self.seen += 1
        if self.armed and self.seen == self.at:
            from pyiceberg.catalog import load_catalog

            load_catalog("default", **self.props).load_table(self.table).overwrite(doubles(10))
        return value


def test_a_restore_joins_the_iceberg_snapshot_the_checkpoint_recorded_M_R1(
    executor: Any, tmp_path: Path
) -> None:
    """As for Delta: the table gets a new snapshot during the first attempt; the restored
    join loads the snapshot the checkpoint recorded."""
    from pyiceberg.catalog import load_catalog

    props = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }
    catalog = load_catalog("default", **props)
    catalog.create_namespace("ref")
    catalog.create_table("ref.doubles", schema=doubles().schema).append(doubles())
    records = events(6_000, seed=4)
    env = restarting_env(tmp_path)
    paced = CheckpointPacedSource(
        lg.connectors.CollectionSource(records, batch_size=250), 1_000, end_after=3
    )
    (
        env.from_source(paced)
        .uid("events")
        .map(OverwriteIcebergAt(props, "ref.doubles", at=500), name="overwrite")
        .uid("overwrite")
        .lookup_join(
            lg.LookupTable.iceberg(props, "ref.doubles"), on="key", table_key="x", name="lookup"
        )
        .uid("lookup")
        .sink_to(lg.connectors.CollectSink(), name="out")
        .uid("out")
        .set_parallelism(1)
    )
    inject_faults(env, FailAtRecord("lookup", record=1_500, subtask=0, after_checkpoints=2))
    result = env.execute("lookup iceberg pinned", executor=executor)
    assert result.attempts == 2, "the injected failure restarted the job"
    snapshots = catalog.load_table("ref.doubles").snapshots()
    assert len(snapshots) >= 2, "the table moved on during the run"
    pd.testing.assert_frame_equal(collected(result), merged(records, doubles(), "inner"))


class GatedSource(Source):
    """Emits ``first``, then ``second`` once ``probe``'s counter "gate" is set, then ends
    (one split)."""

    def __init__(self, first: list[Any], second: list[Any], probe: Probe) -> None:
        self.first, self.second, self.probe = first, second, probe

    def create_splits(self, parallelism: int) -> list[Any]:
        return ["only"]

    def create_reader(self, ctx: lg.RuntimeContext) -> SourceReader:
        return _GatedReader(self)


class _GatedReader(SourceReader):
    def __init__(self, source: GatedSource) -> None:
        self.source = source
        self.batches: list[list[Any]] = []

    def add_splits(self, splits: list[Any]) -> None:
        if splits:
            self.batches = [self.source.first, self.source.second]

    def poll(self, output: ReaderOutput) -> InputStatus:
        if not self.batches:
            return InputStatus.END_OF_INPUT
        if len(self.batches) == 1 and not self.source.probe.count("gate"):
            return InputStatus.NOTHING_AVAILABLE
        output.emit(RowBatch(list(self.batches.pop(0))))
        return InputStatus.MORE_AVAILABLE

    def wait_hint_ms(self) -> float | None:
        return 10.0


class CountedLoads(LookupSource):
    """``inner``, counting its loads in ``probe``'s counter "loads"."""

    def __init__(self, inner: LookupSource, probe: Probe) -> None:
        self.inner, self.probe = inner, probe

    def load(self, version: int | None = None) -> LoadedTable:
        loaded = self.inner.load(version)
        self.probe.bump("loads")
        return loaded

    def describe(self) -> str:
        return self.inner.describe()


def test_a_refresh_mid_stream_joins_the_new_rows_on_the_jobs_clock(
    tmp_path: Path, probe: Probe
) -> None:
    """The first records join x -> 2x; the Parquet file is rewritten (x -> 10x); the
    manual clock passes the refresh interval and the join reloads it; the records after
    that join x -> 10x. Nothing sleeps: the job's processing time is the test's clock."""
    path = tmp_path / "t.parquet"
    pq.write_table(doubles(), path)
    clock = lg.ManualClock()
    first = [{"id": i, "key": i} for i in range(5)]
    second = [{"id": 5 + i, "key": i} for i in range(5)]
    env = lg.StreamEnvironment(parallelism=1)
    table = lg.LookupTable(CountedLoads(lg.LookupTable.parquet(path).source, probe))
    (
        env.from_source(GatedSource(first, second, probe))
        .lookup_join(table, on="key", table_key="x", refresh=timedelta(minutes=1))
        .map(lambda r: (probe.bump("joined"), r)[1])
        .sink_to(lg.connectors.CollectSink())
        .uid("out")
    )
    client = env.execute_async("lookup refresh", executor=lg.LocalExecutor(clock=clock))
    try:
        wait_until(lambda: probe.count("joined") == 5, "the first records are joined")
        pq.write_table(doubles(10), path)
        clock.advance(60_000)
        wait_until(lambda: probe.count("loads") == 2, "the join reloads its table after 60 s")
        probe.bump("gate")
        clock.advance(1)  # wakes the task waiting on its clock for the source
        result = client.wait(30)
    except BaseException:
        client.cancel()
        raise
    finally:
        clock.advance(10_000)
    assert result.status is lg.JobStatus.FINISHED
    got = [r for part in result.sink_results["out"] for r in part]
    assert got == [{**r, "x": r["key"], "y": 2 * r["key"]} for r in first] + [
        {**r, "x": r["key"], "y": 10 * r["key"]} for r in second
    ]

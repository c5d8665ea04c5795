"""IcebergSink (issue 24 part 3; M-X1, M-X2, M-X3): exactly-once appends to an Apache
Iceberg table through pyiceberg's SQL catalog.

* A keyed running total -> IcebergSink through five seeded failures (one between
  pre-commit and commit), on both executors: the table (read with pyiceberg) holds
  exactly the failure-free output; the history holds one append per subtask and
  checkpoint, none repeated; no uncommitted data file of the sink is left.
* The same on a PostgreSQL catalog with an S3 (moto) warehouse (local executor).
* A bounded job without checkpoints: one snapshot per subtask under the final
  checkpoint id; on Spark the current snapshot's data files are read with
  ``spark.read.parquet`` (no iceberg-spark-runtime is published for Spark 4.3).
* The commit protocol directly: a repeated commit (also from a never-opened copy, as
  on the driver) adds nothing, an older checkpoint of the same run and subtask is
  skipped, another run's is not; abort and abort_lingering delete only the sink's own
  uncommitted files.
* Bad arguments are refused when the sink is made; a record that does not fit the
  table fails naming the field.
"""

from __future__ import annotations

import os
import pickle
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lockgate as lg
from conftest import is_spark, on_executors, wait_for_checkpoints, wait_until
from lockgate.connectors import IcebergSink, SequenceSource
from lockgate.connectors.iceberg.sink import (
    CHECKPOINT_ID,
    FINAL_CHECKPOINT_ID,
    RUN_ID,
    SINK_ID,
    SUBTASK,
    TRANSACTION,
    IcebergSchemaError,
)
from lockgate.errors import ConfigurationError
from lockgate.runtime.context import RuntimeContext
from lockgate.testing import FailCommit, inject_faults, seeded_faults
from pg_fixtures import DSN
from running_sums import RunningTotal, ToRecord, expected_totals, key_of
from s3_server import DUMMY_CREDENTIALS, REGION, moto_server, s3_url  # noqa: F401 - fixtures

N = 40_000
CHUNK = 2_000
RATE = 16_000


# ---------------------------------------------------------------------------- helpers


def sqlite_catalog(tmp_path: Path) -> dict[str, str]:
    return {
        "name": "lgtest",
        "type": "sql",
        "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }


def load(catalog: dict[str, str], table: str) -> Any:
    from pyiceberg.catalog import load_catalog

    props = dict(catalog)
    name = props.pop("name")
    return load_catalog(name, **props).load_table(table)


def rows(table: Any) -> list[tuple[int, int, int]]:
    data = table.scan().to_arrow()
    got = zip(data["k"].to_pylist(), data["v"].to_pylist(), data["total"].to_pylist())
    return sorted(got, key=lambda r: (r[1], r[2]))


def sink_snapshots(table: Any) -> list[dict[str, str]]:
    """The summaries of the sink's snapshots, oldest first, with the operation."""
    from pyiceberg.table.snapshots import ancestors_of

    out = []
    for s in reversed(list(ancestors_of(table.current_snapshot(), table.metadata))):
        if s.summary[SINK_ID]:
            out.append({**s.summary.additional_properties, "operation": s.summary.operation.value})
    return out


def data_files(table: Any) -> set[str]:
    return {task.file.file_path for task in table.scan().plan_files()}


def files_in_data_folder(table: Any) -> set[str]:
    from lockgate.connectors.iceberg.sink import _data_root, _list_files

    return set(_list_files(table.io, _data_root(table)))


def assert_history(table: Any, job: str, uid: str, records: int) -> list[dict[str, str]]:
    """One append per (run, subtask, checkpoint), increasing per subtask, adding one file;
    every data file of the sink in the folder is committed."""
    snaps = sink_snapshots(table)
    assert snaps, "the sink committed nothing"
    keys = [(s[SINK_ID], s[RUN_ID], s[SUBTASK], s[CHECKPOINT_ID]) for s in snaps]
    assert len(keys) == len(set(keys)), f"a (sink, run, subtask, checkpoint) repeats: {keys}"
    assert len({s[TRANSACTION] for s in snaps}) == len(snaps)
    for s in snaps:
        assert s["operation"] == "append"
        assert s[SINK_ID] == f"{job}/{uid}"
        assert s["added-data-files"] == "1"
    for sub in {s[SUBTASK] for s in snaps}:
        ids = [int(s[CHECKPOINT_ID]) for s in snaps if s[SUBTASK] == sub]
        assert ids == sorted(ids), f"subtask {sub} committed out of order: {ids}"
    assert sum(int(s["added-records"]) for s in snaps) == records
    # no uncommitted file of the sink is left (aborts and the driver's clean-up)
    ours = {f for f in files_in_data_folder(table) if f.rsplit("/", 1)[-1].startswith("lockgate-")}
    assert ours == data_files(table)
    return snaps


def build(executor, tmp_path, sink, *, n=N, rate=RATE, faults=(), checkpoints=True, bounded=True):
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    if checkpoints:
        env.enable_checkpointing(150)
        env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=8, delay=0))
    totals = (
        env.from_source(SequenceSource(0, n, rows_per_second=rate, bounded=bounded), name="numbers")
        .uid("numbers")
        .map(ToRecord(CHUNK), name="to record")
        .uid("to record")
        .key_by(key_of)
        .process(RunningTotal(), name="running total")
        .uid("totals")
    )
    totals.sink_to(sink, name="iceberg").uid("iceberg")
    if faults:
        inject_faults(env, *faults)
    return env


def context(job="job", uid="iceberg", run="run1", attempt=0, subtask=0, parallelism=1):
    return RuntimeContext(
        task_name="iceberg",
        operator_name="iceberg",
        operator_uid=uid,
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
        attempt_number=attempt,
        job_name=job,
        run_id=run,
    )


# ----------------------------------------------------------------------- end to end


@pytest.mark.hang_guard(240)
@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2), indirect=["executor"])
def test_m_x2_a_keyed_aggregation_to_iceberg_is_exactly_once_through_five_failures(
    executor, parallelism, tmp_path
) -> None:
    catalog = sqlite_catalog(tmp_path)
    faults = seeded_faults(
        31,
        5,
        operators={"source": "numbers", "operator": "running total", "sink": "iceberg"},
        records=3_000,
    )
    assert any(isinstance(f, FailCommit) for f in faults)
    env = build(executor, tmp_path, IcebergSink(catalog, "lg.totals"), faults=faults)
    result = env.execute("iceberg exactly once")
    table = load(catalog, "lg.totals")
    got = rows(table)
    assert len(got) == N, f"{len(got)} rows, expected {N}"
    assert got == expected_totals(N, CHUNK)
    assert_history(table, "iceberg exactly once", "iceberg", N)
    assert result.attempts == 6, f"every fault fires once: {result.attempts} attempts"


@pytest.mark.hang_guard(180)
def test_m_x2_a_postgresql_catalog_with_an_s3_warehouse(tmp_path, s3_url) -> None:  # noqa: F811
    """Local executor only, to keep the module short (the SQLite cases cover shipping
    the catalog properties to Spark's Python workers)."""
    executor = lg.LocalExecutor()
    bucket_path = s3_url.split("?", 1)[0]  # s3://bucket/test-...
    endpoint = s3_url.split("endpoint_override=", 1)[1].split("&", 1)[0]
    name = f"lgtest_{uuid.uuid4().hex[:8]}"
    catalog = {
        "name": name,
        "type": "sql",
        "uri": DSN.replace("postgresql://", "postgresql+psycopg://", 1),
        "warehouse": bucket_path,
        "s3.endpoint": f"http://{endpoint}",
        "s3.access-key-id": DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "s3.secret-access-key": DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "s3.region": REGION,
    }
    n = 12_000
    faults = [FailCommit("iceberg", checkpoint=1, attempt=0, subtask=0)]
    sink = IcebergSink(catalog, "lgs3.totals")
    env = build(executor, tmp_path, sink, n=n, rate=8_000, faults=faults)
    try:
        result = env.execute("iceberg on s3")
        table = load(catalog, "lgs3.totals")
        assert table.location().startswith("s3://")
        assert rows(table) == expected_totals(n, CHUNK)
        assert_history(table, "iceberg on s3", "iceberg", n)
        assert result.attempts == 2
    finally:
        from pyiceberg.catalog import load_catalog

        props = dict(catalog)
        cat = load_catalog(props.pop("name"), **props)
        if cat.table_exists("lgs3.totals"):
            cat.drop_table("lgs3.totals")
        cat.drop_namespace("lgs3")


@pytest.mark.hang_guard(180)
def test_m_x2_a_bounded_job_without_checkpoints_commits_once_per_subtask_at_the_end(
    executor, tmp_path
) -> None:
    catalog = sqlite_catalog(tmp_path)
    n = 20_000
    env = build(
        executor, tmp_path, IcebergSink(catalog, "lg.final"), n=n, rate=None, checkpoints=False
    )
    env.execute("iceberg final")
    table = load(catalog, "lg.final")
    assert rows(table) == expected_totals(n, CHUNK)
    snaps = assert_history(table, "iceberg final", "iceberg", n)
    assert sorted(s[SUBTASK] for s in snaps) == ["0", "1"]
    assert {s[CHECKPOINT_ID] for s in snaps} == {str(FINAL_CHECKPOINT_ID)}
    if is_spark(executor):
        # no iceberg-spark-runtime is published for Spark 4.3 (Maven Central has 4.0 and
        # 4.1): Spark reads the data files the current snapshot lists
        paths = sorted(data_files(table))
        frame = executor.spark.read.parquet(*paths)
        got = sorted(tuple(r) for r in frame.select("v", "k", "total").collect())
        assert [(v, k, t) for k, v, t in expected_totals(n, CHUNK)] == got


@pytest.mark.hang_guard(120)
def test_m_x2_a_cancelled_job_leaves_committed_checkpoints_only_and_no_stray_file(
    tmp_path,
) -> None:
    """An unbounded job cancelled mid-run, with a transaction open: the driver commits the
    newest completed checkpoint's transactions and deletes every other file of the run;
    each key's rows in the table are its first values, with no gap and none twice."""
    catalog = sqlite_catalog(tmp_path)
    env = build(
        lg.LocalExecutor(),
        tmp_path,
        IcebergSink(catalog, "lg.cancel"),
        n=10**9,
        rate=5_000,
        bounded=False,
    )
    client = env.execute_async("iceberg cancel")

    def uncommitted() -> set[str]:
        try:
            table = load(catalog, "lg.cancel")
        except Exception:  # noqa: BLE001 - not created yet
            return set()
        return files_in_data_folder(table) - data_files(table)

    try:
        wait_for_checkpoints(client, 3)
        wait_until(lambda: bool(uncommitted()), "a transaction's data file is being written")
    finally:
        client.cancel()
    result = client.wait(60)
    assert result.status is lg.JobStatus.CANCELED, result
    table = load(catalog, "lg.cancel")
    got = rows(table)
    assert got, "completed checkpoints published rows"
    assert_history(table, "iceberg cancel", "iceberg", len(got))
    by_key: dict[int, list[tuple[int, int, int]]] = {}
    for r in got:
        by_key.setdefault(r[0], []).append(r)
    for k, key_rows in by_key.items():
        first = k * CHUNK
        want = [
            (k, v, (first + v) * (v - first + 1) // 2) for v in range(first, first + len(key_rows))
        ]
        assert key_rows == want, f"key {k}: committed rows are not a gap-free prefix"


@pytest.mark.hang_guard(120)
def test_m_x2_a_job_restored_from_another_runs_savepoint_commits_its_transactions_once(
    tmp_path,
) -> None:
    """Run 1 stops with a savepoint (the driver commits its pending transactions); run 2
    restores it, commits them again (skipped: the history holds run 1's checkpoint) and
    goes on to the end: the table holds the failure-free output exactly."""
    catalog = sqlite_catalog(tmp_path)
    n = 20_000
    first = build(lg.LocalExecutor(), tmp_path, IcebergSink(catalog, "lg.resume"), n=n, rate=4_000)
    client = first.execute_async("iceberg resume")
    try:
        wait_until(
            lambda: sum(1 for c in client.checkpoints() if c.status == "completed") >= 2,
            "two checkpoints complete",
            timeout_s=60,
        )
        savepoint = client.stop_with_savepoint(str(tmp_path / "savepoint"))
    finally:
        if not client.done():
            client.cancel()
    client.wait(60)
    before = len(rows(load(catalog, "lg.resume")))
    assert 0 < before < n
    second = build(lg.LocalExecutor(), tmp_path, IcebergSink(catalog, "lg.resume"), n=n, rate=None)
    second.execute("iceberg resume", restore_from=savepoint)
    table = load(catalog, "lg.resume")
    assert rows(table) == expected_totals(n, CHUNK)
    snaps = sink_snapshots(table)
    assert len({s[RUN_ID] for s in snaps}) == 2, "both runs committed"
    assert sum(int(s["added-records"]) for s in snaps) == n


def test_without_pyiceberg_making_the_sink_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pyiceberg", None)
    with pytest.raises(ImportError, match=r"pip install 'lockgate\[iceberg\]'"):
        IcebergSink({"uri": "sqlite://"}, "a.b")


# --------------------------------------------------------------- the commit protocol


def pending(sink: IcebergSink, values: range, checkpoint: int) -> Any:
    txn = sink.begin_transaction()
    sink.write(txn, pa.record_batch({"k": [v // CHUNK for v in values], "v": list(values)}))
    sink.pre_commit_at(txn, checkpoint)
    return txn


def test_m_x2_a_repeated_commit_after_restore_is_skipped(tmp_path) -> None:
    catalog = sqlite_catalog(tmp_path)
    sink = IcebergSink(catalog, "lg.repeat")
    sink.check_before_run()
    sink.open(context())
    older = pending(sink, range(0, 10), 2)
    txn = pending(sink, range(10, 20), 3)
    sink.commit(txn)
    sink.commit(txn)
    # the driver's (or a restored subtask's) copy was never opened
    restored = pickle.loads(pickle.dumps(sink))
    restored.recover_and_commit(pickle.loads(pickle.dumps(txn)))
    # an older checkpoint of the same run and subtask is committed already (in order)
    restored.recover_and_commit(older)
    table = load(catalog, "lg.repeat")
    snaps = sink_snapshots(table)
    assert [s[CHECKPOINT_ID] for s in snaps] == ["3"]
    assert sorted(table.scan().to_arrow()["v"].to_pylist()) == list(range(10, 20))
    # another run's checkpoint 3 is its own
    other = IcebergSink(catalog, "lg.repeat")
    other.open(context(run="run2"))
    other.commit(pending(other, range(20, 25), 3))
    table.refresh()
    assert [(s[RUN_ID], s[CHECKPOINT_ID]) for s in sink_snapshots(table)] == [
        ("run1", "3"),
        ("run2", "3"),
    ]
    sink.close()
    other.close()


def test_m_x2_abort_deletes_only_the_sinks_own_uncommitted_files(tmp_path) -> None:
    catalog = sqlite_catalog(tmp_path)
    first = IcebergSink(catalog, "lg.abort")
    first.check_before_run()
    first.open(context(attempt=0))
    committed_txn = pending(first, range(0, 5), 1)
    first.commit(committed_txn)
    lingering = pending(first, range(5, 10), 2)  # attempt 0 fails before this commits
    aborted = pending(first, range(10, 15), 3)
    table = load(catalog, "lg.abort")
    root = table.location().removeprefix("file://") + "/data"
    first.abort(aborted)
    assert not os.path.exists(aborted.files[0].removeprefix("file://"))
    first.abort(committed_txn)  # committed: the file stays
    assert os.path.exists(committed_txn.files[0].removeprefix("file://"))
    # other runs' and other writers' files are never touched
    other_run = IcebergSink(catalog, "lg.abort")
    other_run.open(context(run="run0"))
    other_txn = pending(other_run, range(15, 20), 1)
    foreign = os.path.join(root, "00000-0-someone-else.parquet")
    Path(foreign).write_bytes(b"not ours")
    # attempt 1 of run1 restores a checkpoint holding nothing pending
    second = IcebergSink(catalog, "lg.abort")
    second.open(context(attempt=1))
    second.abort_lingering([], context(attempt=1))
    assert not os.path.exists(lingering.files[0].removeprefix("file://"))
    assert os.path.exists(committed_txn.files[0].removeprefix("file://"))
    assert os.path.exists(other_txn.files[0].removeprefix("file://"))
    assert os.path.exists(foreign)
    # at the end of the job the driver deletes the current attempt's leftovers too
    current = pending(second, range(20, 25), 4)
    kept = pending(second, range(25, 30), 5)
    second.abort_lingering([kept], context(attempt=1), job_ended=True)
    assert not os.path.exists(current.files[0].removeprefix("file://"))
    assert os.path.exists(kept.files[0].removeprefix("file://"))
    for s in (first, other_run, second):
        s.close()


# ------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("catalog", "table", "properties", "needle"),
    [
        ("sqlite:////tmp/c.db", "a.b", None, "catalog must be a dict of pyiceberg catalog"),
        ({"warehouse": "file:///tmp/w"}, "a.b", None, "needs a 'type'"),
        ({"type": "sql", "warehouse": "file:///w"}, "a.b", None, "needs a 'uri'"),
        ({"uri": "sqlite://", "pool-size": 3}, "a.b", None, "must map str to str"),
        ({"uri": "sqlite://", "name": ""}, "a.b", None, "'name' must not be empty"),
        ({"uri": "sqlite://"}, "totals", None, "must be 'namespace.table'"),
        ({"uri": "sqlite://"}, "a..b", None, "no empty part"),
        ({"uri": "sqlite://"}, 3, None, "must be 'namespace.table'"),
        ({"uri": "sqlite://"}, "a.b", {"format-version": 2}, "properties must be a dict of str"),
    ],
)
def test_bad_arguments_are_refused_saying_what_to_do(catalog, table, properties, needle) -> None:
    with pytest.raises(ConfigurationError, match="IcebergSink") as err:
        IcebergSink(catalog, table, properties=properties)
    assert needle in str(err.value)


def test_a_live_catalog_is_taken_by_its_name_and_properties(tmp_path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    props = sqlite_catalog(tmp_path)
    name = props.pop("name")
    live = SqlCatalog(name, **props)
    sink = pickle.loads(pickle.dumps(IcebergSink(live, "lg.live")))
    assert sink.catalog_name == name
    assert sink.catalog_properties["uri"] == props["uri"]
    live.close()


@pytest.mark.parametrize(
    ("batch", "needle"),
    [
        ({"k": [1], "v": [2], "extra": [3]}, "record field 'extra' is not a column"),
        ({"k": [1], "v": ["two"]}, "field 'v' of type string does not fit column 'v'"),
        ({"k": [1], "v": ["2"]}, "field 'v' of type string does not fit column 'v'"),
        ({"k": [1], "v": [2.5]}, "field 'v' of type double does not fit column 'v'"),
        ({"k": [1], "v": [None]}, "field 'v' is null in 1 records"),
        ({"k": [1]}, "records lack field 'v', a required column"),
    ],
)
def test_a_record_that_does_not_fit_the_table_names_the_field(tmp_path, batch, needle) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    catalog = sqlite_catalog(tmp_path)
    props = dict(catalog)
    from pyiceberg.catalog import load_catalog

    cat = load_catalog(props.pop("name"), **props)
    cat.create_namespace("lg")
    cat.create_table(
        "lg.strict",
        Schema(
            NestedField(1, "k", LongType(), required=False),
            NestedField(2, "v", LongType(), required=True),
        ),
    )
    sink = IcebergSink(catalog, "lg.strict")
    sink.open(context())
    txn = sink.begin_transaction()
    with pytest.raises(IcebergSchemaError, match="lg.strict") as err:
        sink.write(txn, pa.record_batch(batch))
    assert needle in str(err.value)
    sink.abort(txn)
    sink.close()


def test_a_job_whose_records_do_not_fit_fails_naming_the_field_without_restarts(
    tmp_path,
) -> None:
    catalog = sqlite_catalog(tmp_path)
    sink = IcebergSink(catalog, "lg.typed")
    sink.open(context())
    sink.commit(pending(sink, range(0, 3), 1))  # creates lg.typed with k, v: long
    sink.close()
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    (
        env.from_source(SequenceSource(0, 10), name="numbers")
        .map(lambda v: {"k": v, "v": f"text {v}"}, name="to text")
        .sink_to(IcebergSink(catalog, "lg.typed"), name="iceberg")
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("iceberg bad record")
    message = str(err.value)
    assert "field 'v' of type string does not fit column 'v'" in message
    assert "not restartable" in message, message[:600]

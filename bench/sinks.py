"""Rows per second into PostgreSQL through PostgresSink, into a Delta Lake table through
DeltaSink and into an Apache Iceberg table through IcebergSink, one JSON line per mode.

The job: sequence -> map_batches making ``{"k", "v", "s"}`` rows (an int key, an int
value, a 16-character string) -> PostgresSink (or DeltaSink), at ``--parallelism``
(default 2), with exactly-once checkpoints every second. Modes (``--modes``):

exactly_once  COPY into one transaction per subtask and checkpoint, PREPARE TRANSACTION
              on the barrier, COMMIT PREPARED when the checkpoint completes;
upsert        INSERT ... SELECT FROM unnest(...) ON CONFLICT (k) DO UPDATE, one
              transaction per batch; ``--upsert-keys`` distinct keys (default 100,000),
              so most rows update an existing one;
append        plain COPY, one transaction per batch (at-least-once);
delta         DeltaSink into a new local Delta table (a temporary folder): Parquet files
              per subtask and checkpoint, one Delta commit each when the checkpoint
              completes (exactly-once; needs the ``deltalake`` package).
iceberg       IcebergSink on pyiceberg's SQL catalog on SQLite with a local warehouse
              (both in a fresh temporary folder): one Parquet file per subtask and
              checkpoint, one append snapshot per subtask when the checkpoint completes.

``rows_per_s`` is the rows divided by the job's wall time (start-up and the final
commit included); each table is created fresh (and dropped after), and the row count in
it is checked. Needs the PostgreSQL of ``--dsn`` (default the test database on
127.0.0.1, as scripts/services.sh starts it). Usage:

    python bench/sinks.py [--modes exactly_once,upsert,append,delta,iceberg] [--rows N]
                          [--parallelism 2] [--executor local|spark] [--repeat K]
                          [--dsn DSN]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from bench_executors import executor_for

import lockgate as lg
from lockgate.connectors import DeltaSink, PostgresSink, SequenceSource

TABLE = "lockgate_bench_sink"


def rows_of(keys: int | None):
    def make(batch: pa.RecordBatch) -> pa.RecordBatch:
        i = batch.column(0)
        k = i if keys is None else pc.remainder(i, keys)  # type: ignore[attr-defined]
        s = pc.binary_join_element_wise("row-", pc.cast(i, pa.string()), "")
        return pa.RecordBatch.from_arrays([k, i, s], names=["k", "v", "s"])

    return make


def run_into_table(
    mode: str, sink_of: Any, count_rows: Any, rows: int, parallelism: int, executor: object
) -> dict:
    """Run ``rows`` rows into the sink ``sink_of(folder)`` makes (a table in a fresh
    temporary folder, exactly-once checkpoints every second), then check that
    ``count_rows(folder)`` finds every row."""
    folder = tempfile.mkdtemp(prefix=f"lockgate-bench-{mode}-")
    try:
        env = lg.StreamEnvironment(parallelism=parallelism)
        env.enable_checkpointing(1000)
        env.checkpoint_config.storage = os.path.join(folder, "checkpoints")
        (
            env.from_source(SequenceSource(0, rows, batch_size=10_000), name="numbers")
            .uid("numbers")
            .map_batches(rows_of(None), name="rows")
            .uid("rows")
            .sink_to(sink_of(folder), name=mode)
            .uid(mode)
        )
        started = time.perf_counter()
        client = env.execute_async(f"bench sink {mode}", executor=executor)
        client.wait()
        seconds = time.perf_counter() - started
        checkpoints = sum(1 for c in client.checkpoints() if c.status == "completed")
        stored = count_rows(folder)
        assert stored == rows, f"{mode}: {stored} rows in the table, expected {rows}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"seconds": seconds, "checkpoints": checkpoints}


def _iceberg_catalog(folder: str) -> dict[str, str]:
    return {
        "name": "bench",
        "type": "sql",
        "uri": f"sqlite:///{folder}/catalog.db",
        "warehouse": f"file://{folder}/warehouse",
    }


def run_iceberg(rows: int, parallelism: int, executor: object) -> dict:
    from pyiceberg.catalog import load_catalog

    from lockgate.connectors import IcebergSink

    def count(folder: str) -> int:
        props = _iceberg_catalog(folder)
        table = load_catalog(props.pop("name"), **props).load_table("bench.rows")
        return int(table.scan().to_arrow().num_rows)

    return run_into_table(
        "iceberg",
        lambda folder: IcebergSink(_iceberg_catalog(folder), "bench.rows"),
        count,
        rows,
        parallelism,
        executor,
    )


def run_delta(rows: int, parallelism: int, executor: object) -> dict:
    import deltalake

    return run_into_table(
        "delta",
        lambda folder: DeltaSink(os.path.join(folder, "table")),
        lambda folder: deltalake.DeltaTable(os.path.join(folder, "table")).count(),
        rows,
        parallelism,
        executor,
    )


def run_once(
    dsn: str, mode: str, rows: int, parallelism: int, executor: object, upsert_keys: int
) -> dict:
    if mode == "delta":
        return run_delta(rows, parallelism, executor)
    if mode == "iceberg":
        return run_iceberg(rows, parallelism, executor)
    key_sql = "PRIMARY KEY" if mode == "upsert" else ""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        conn.execute(f"CREATE TABLE {TABLE} (k bigint {key_sql}, v bigint, s text)")
    try:
        env = lg.StreamEnvironment(parallelism=parallelism)
        env.enable_checkpointing(1000)
        env.checkpoint_config.storage = tempfile.mkdtemp(prefix="lockgate-bench-sinks-")
        (
            env.from_source(SequenceSource(0, rows, batch_size=10_000), name="numbers")
            .uid("numbers")
            .map_batches(rows_of(upsert_keys if mode == "upsert" else None), name="rows")
            .uid("rows")
            .sink_to(
                PostgresSink(dsn, TABLE, mode, key="k" if mode == "upsert" else None), name="pg"
            )
            .uid("pg")
        )
        started = time.perf_counter()
        client = env.execute_async(f"bench sink {mode}", executor=executor)
        client.wait()
        seconds = time.perf_counter() - started
        checkpoints = sum(1 for c in client.checkpoints() if c.status == "completed")
        with psycopg.connect(dsn, autocommit=True) as conn:
            stored = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0]
        want = upsert_keys if mode == "upsert" else rows
        assert stored == want, f"{mode}: {stored} rows in the table, expected {want}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    return {"seconds": seconds, "checkpoints": checkpoints}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--modes", default="exactly_once,upsert,append,delta,iceberg")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--upsert-keys", type=int, default=100_000)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--executor", default="local", choices=["local", "spark"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--dsn",
        default=os.environ.get("LOCKGATE_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    args = ap.parse_args()
    executor = executor_for(args.executor)
    for mode in args.modes.split(","):
        runs = [
            run_once(args.dsn, mode, args.rows, args.parallelism, executor, args.upsert_keys)
            for _ in range(args.repeat)
        ]
        best = min(runs, key=lambda r: r["seconds"])
        print(
            json.dumps(
                {
                    "case": mode,
                    "executor": type(executor).__name__,
                    "parallelism": args.parallelism,
                    "rows": args.rows,
                    "upsert_keys": args.upsert_keys if mode == "upsert" else None,
                    "checkpoint_interval_ms": 1000,
                    "seconds": round(best["seconds"], 3),
                    "rows_per_s": round(args.rows / best["seconds"]),
                    "checkpoints_completed": best["checkpoints"],
                    "runs": args.repeat,
                    "cores": os.cpu_count(),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Flink SQL side of ``bench/windows.py``'s ``flink`` case: the keyed one-second
tumbling event-time count, run with PyFlink's Table API on a local MiniCluster
(the Nexmark suite's ``flink_sql`` set-up, ``bench/nexmark/run_flink.py``).

Reads the events (``k`` BIGINT, ``ts`` BIGINT epoch ms) from Parquet when
``--parquet-jar`` names Flink's ``flink-sql-parquet`` jar (fetched from Maven
Central by ``windows.py``), from their CSV copy otherwise; writes the counts in
the same format. Watermarks: ``ts - 500 ms``; exactly-once checkpoints every
``--checkpoint-ms`` to a ``file://`` folder (hashmap state backend).

Run it with the Flink peer's virtual environment (``bash bench/setup_peers.sh flink``)::

    bench/.peers/flink/bin/python bench/windows_flink.py --data DIR --format parquet \\
        --out OUT --work WORK [--parquet-jar JAR] [--parallelism 2] [--checkpoint-ms 1000]

The last line of stdout is a JSON object: ``job_seconds`` (planning, submission,
run and the sink's final commit, with the cluster already up), ``checkpoints``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "nexmark"))

from run_flink import epoch_ms, start_mini_cluster, stop_jvm

DISORDER_MS = 500


def table_ddl(name: str, path: Path, fmt: str, columns: list[str], extra: list[str]) -> str:
    cols = ",\n  ".join(columns + extra)
    return (
        f"CREATE TEMPORARY TABLE {name} (\n  {cols}\n) WITH (\n"
        f"  'connector' = 'filesystem',\n  'path' = '{path.resolve().as_uri()}',\n"
        f"  'format' = '{fmt}'\n)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, required=True, help="folder of the event files")
    ap.add_argument("--format", choices=["parquet", "csv"], required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--parquet-jar", type=Path, default=None)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--checkpoint-ms", type=int, default=1000)
    args = ap.parse_args()
    if args.format == "parquet" and args.parquet_jar is None:
        sys.exit("--format parquet needs --parquet-jar (Flink's flink-sql-parquet jar)")
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"output folder {args.out} is not empty")
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    ckpt = args.work / "checkpoints"
    shutil.rmtree(ckpt, ignore_errors=True)

    from pyflink.common import Configuration
    from pyflink.java_gateway import get_gateway
    from pyflink.table import EnvironmentSettings, TableEnvironment
    from pyflink.version import __version__ as flink_version

    p = args.parallelism
    settings = {
        "table.local-time-zone": "UTC",
        "execution.checkpointing.interval": f"{args.checkpoint_ms} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": ckpt.resolve().as_uri(),
        "state.backend.type": "hashmap",
        "pipeline.object-reuse": "true",
    }
    cluster, remote = start_mini_cluster(p)
    jvm = get_gateway().jvm
    config = Configuration()
    for k, v in {**remote, **settings}.items():
        config.set_string(k, v)
    t_env = TableEnvironment.create(
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(config).build()
    )
    if args.parquet_jar is not None:
        # the job's jars; TableConfig.set also loads it into the planner's class loader
        t_env.get_config().set("pipeline.jars", args.parquet_jar.resolve().as_uri())
    t_env.execute_sql(
        table_ddl(
            "events",
            args.data,
            args.format,
            ["`k` BIGINT", "`ts` BIGINT"],
            [
                "et AS TO_TIMESTAMP_LTZ(ts, 3)",
                f"WATERMARK FOR et AS et - INTERVAL '0.{DISORDER_MS:03d}' SECOND",
            ],
        )
    )
    t_env.execute_sql(
        table_ddl(
            "sink",
            args.out,
            args.format,
            ["`k` BIGINT", "`window_start` BIGINT", "`window_end` BIGINT", "`count` BIGINT"],
            [],
        )
    )
    table = t_env.sql_query(
        f"SELECT k, {epoch_ms('window_start')}, {epoch_ms('window_end')}, COUNT(*) "
        "FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(et), INTERVAL '1' SECOND)) "
        "GROUP BY k, window_start, window_end"
    )
    jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
    started = time.perf_counter()
    result = table.execute_insert("sink")
    result.wait()
    seconds = time.perf_counter() - started
    job_id = jvm.org.apache.flink.api.common.JobID.fromHexString(
        str(result.get_job_client().get_job_id())
    )
    graph = cluster.getExecutionGraphInfo(job_id).get().getArchivedExecutionGraph()
    status = str(graph.getState().toString())
    checkpoints = int(
        graph.getCheckpointStatsSnapshot().getCounts().getNumberOfCompletedCheckpoints()
    )
    cluster.closeAsync().get()
    stop_jvm(get_gateway(), jvm_pid)
    if status != "FINISHED":
        sys.exit(f"job ended in state {status}")
    print(
        json.dumps(
            {
                "version": flink_version,
                "job_seconds": round(seconds, 3),
                "checkpoints": checkpoints,
                "input": args.format,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

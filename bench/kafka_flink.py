"""Flink SQL peer of ``bench/kafka.py``: Kafka -> one-second tumbling event-time count
per key -> Kafka, exactly-once.

Runs in the Flink peer's virtual environment (``bash bench/setup_peers.sh flink``), with
the Kafka SQL connector jar ``bench/kafka.py`` fetched from Maven Central::

    bench/.peers/flink/bin/python bench/kafka_flink.py --bootstrap 127.0.0.1:9092 \\
        --input IN --output OUT --work WORK --jar flink-sql-connector-kafka.jar \\
        [--parallelism 2] [--checkpoint-ms 1000] \\
        [--format avro-confluent --registry URL --jar flink-sql-avro-confluent-registry.jar]

The job: the input topic read from its earliest offsets up to the latest offsets at the
job's start (``scan.bounded.mode = latest-offset``, read_committed), JSON values
``{"key": int, "ts": epoch ms}``, watermarks ``ts - 500 ms``, ``TUMBLE`` of one second,
``COUNT(*)`` per key and window, written as JSON ``{"key", "window_start", "count"}``
with ``sink.delivery-guarantee = exactly-once`` (Kafka transactions committed on
checkpoints, the last one when the bounded input ends), checkpoints every
``--checkpoint-ms``. The last line of stdout is a JSON object: ``seconds`` (from the
statement's submission to the job's end: SQL planning, deployment on the already running
local MiniCluster, the run and the final commit; the JVM and cluster start-up are not
included), ``checkpoints``, ``version``.

``--format avro-confluent`` (the Avro case): the values are Avro records in the Confluent
wire format (``{"key": long, "ts": long, "temperature": double, "sensor": string}``,
whatever schema id and version they were written with), read with Flink's
``avro-confluent`` format from the registry at ``--registry`` (its Confluent-compatible
API), and the results written as ``avro-confluent`` too (Flink registers its output schema
under ``<output topic>-value``); the format's jar (``flink-sql-avro-confluent-registry``)
is a second ``--jar``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "nexmark"))

from run_flink import epoch_ms, start_mini_cluster, stop_jvm

DISORDER_MS = 500


def value_format(fmt: str, registry: str | None) -> str:
    """The Kafka table's value format options."""
    if fmt == "json":
        return "'format' = 'json'"
    return f"'value.format' = 'avro-confluent', 'value.avro-confluent.url' = '{registry}'"


def source_ddl(bootstrap: str, topic: str, fmt: str = "json", registry: str | None = None) -> str:
    # The Avro record's columns, declared NOT NULL as its fields are (Flink derives its
    # reader schema from them; a nullable column would read as a union with null).
    columns = (
        "`key` INT,\n          ts BIGINT,"
        if fmt == "json"
        else "`key` BIGINT NOT NULL,\n          ts BIGINT NOT NULL,\n"
        "          temperature DOUBLE NOT NULL,\n          sensor STRING NOT NULL,"
    )
    return f"""
        CREATE TEMPORARY TABLE src (
          {columns}
          rt AS TO_TIMESTAMP_LTZ(ts, 3),
          WATERMARK FOR rt AS rt - INTERVAL '{DISORDER_MS / 1000}' SECOND
        ) WITH (
          'connector' = 'kafka',
          'topic' = '{topic}',
          'properties.bootstrap.servers' = '{bootstrap}',
          'properties.group.id' = 'lgbench-flink-{topic}',
          'properties.isolation.level' = 'read_committed',
          'scan.startup.mode' = 'earliest-offset',
          'scan.bounded.mode' = 'latest-offset',
          {value_format(fmt, registry)}
        )"""


def sink_ddl(bootstrap: str, topic: str, fmt: str = "json", registry: str | None = None) -> str:
    # The broker's transaction.max.timeout.ms is 15 minutes; Flink's default transaction
    # timeout (1 hour) would be refused.
    key, not_null = ("INT", "") if fmt == "json" else ("BIGINT", " NOT NULL")
    return f"""
        CREATE TEMPORARY TABLE snk (
          `key` {key}{not_null},
          window_start BIGINT{not_null},
          `count` BIGINT{not_null}
        ) WITH (
          'connector' = 'kafka',
          'topic' = '{topic}',
          'properties.bootstrap.servers' = '{bootstrap}',
          'properties.transaction.timeout.ms' = '600000',
          'sink.delivery-guarantee' = 'exactly-once',
          'sink.transactional-id-prefix' = 'lgbench-flink-{topic}',
          {value_format(fmt, registry)}
        )"""


QUERY = f"""
    INSERT INTO snk
    SELECT `key`, {epoch_ms("window_start")}, COUNT(*)
    FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(rt), INTERVAL '1' SECOND))
    GROUP BY `key`, window_start, window_end"""


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument(
        "--jar",
        required=True,
        type=Path,
        action="append",
        help="a jar for pipeline.jars (repeat: the Kafka connector, the format's jar)",
    )
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--checkpoint-ms", type=int, default=1000)
    ap.add_argument("--format", choices=("json", "avro-confluent"), default="json")
    ap.add_argument("--registry", help="the schema registry's URL (--format avro-confluent)")
    args = ap.parse_args()
    for jar in args.jar:
        if not jar.is_file():
            sys.exit(f"the jar {jar} does not exist")
    if args.format == "avro-confluent" and not args.registry:
        sys.exit("--format avro-confluent needs --registry URL (the schema registry's API)")
    args.work.mkdir(parents=True, exist_ok=True)

    from pyflink.common import Configuration
    from pyflink.java_gateway import get_gateway
    from pyflink.table import EnvironmentSettings, TableEnvironment
    from pyflink.version import __version__ as flink_version

    p = args.parallelism
    # A local MiniCluster (one task manager, p slots) started before the timing; the
    # statement is submitted to it over REST, as in bench/nexmark/run_flink.py.
    cluster, remote = start_mini_cluster(p)
    jvm = get_gateway().jvm
    settings = {
        **remote,
        "table.local-time-zone": "UTC",
        "pipeline.jars": ";".join(jar.resolve().as_uri() for jar in args.jar),
        "execution.checkpointing.interval": f"{args.checkpoint_ms} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": (args.work / "checkpoints").resolve().as_uri(),
        "state.backend.type": "hashmap",
        "pipeline.object-reuse": "true",
    }
    config = Configuration()
    for k, v in settings.items():
        config.set_string(k, v)
    t_env = TableEnvironment.create(
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(config).build()
    )
    t_env.execute_sql(source_ddl(args.bootstrap, args.input, args.format, args.registry))
    t_env.execute_sql(sink_ddl(args.bootstrap, args.output, args.format, args.registry))

    jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
    started = time.perf_counter()
    result = t_env.execute_sql(QUERY)
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
        sys.exit(f"the Flink job ended in state {status}")
    print(
        json.dumps(
            {
                "seconds": round(seconds, 3),
                "checkpoints": checkpoints,
                "version": flink_version,
                "connector": " + ".join(jar.name for jar in args.jar),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

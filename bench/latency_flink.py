"""Flink peer of ``bench/latency.py`` (issue 42): Query A, B or C from Kafka to Kafka in
Flink SQL, or Query B in PyFlink's DataStream API (a Python KeyedProcessFunction).

Runs in the Flink peer's virtual environment (``bash bench/setup_peers.sh flink``), with
the Kafka SQL connector jar ``bench/kafka.py`` fetches from Maven Central::

    bench/.peers/flink/bin/python bench/latency_flink.py --query A|B|C [--api sql|datastream]
        --bootstrap 127.0.0.1:9092 --input IN --output OUT --work WORK --jar KAFKA_JAR
        [--exactly-once] [--checkpoint-ms 1000] [--table CSV_DIR] [--parallelism 2]

Every value starts with a 20-byte send-time head, kept at the start of the output; the
values are read and written with the ``raw`` format as one STRING column.

- Query A: ``SUBSTRING(v FROM 1 FOR 20) || TO_BASE64(SUBSTRING(v FROM 21 FOR 500 KB))``.
- Query B: ``COUNT(*) OVER (PARTITION BY payload ORDER BY proctime ROWS BETWEEN UNBOUNDED
  PRECEDING AND CURRENT ROW)``: ``head || count || '|' || TO_BASE64(payload)``.
- Query C: each record gets ``CAST(FLOOR(RAND() * 10000) AS BIGINT)``, a regular inner
  join with the bounded 10,000-row table ``x -> y`` of the ``filesystem`` connector (the
  table's CSV copy: PyFlink ships the csv format but no Parquet format, and Flink's
  Parquet format needs Hadoop on the class path; the filesystem connector is no lookup
  source, so a regular join, not a lookup join), its state kept 1 s for the stream side
  and 10 years for the table side (``STATE_TTL`` hint) so the stream side's state stays
  small: ``head || y || '|' || TO_BASE64(payload)``.
- ``--api datastream`` (Query B only): ``KafkaSource`` -> ``key_by(payload)`` -> a Python
  ``KeyedProcessFunction`` with a ``ValueState`` count -> ``KafkaSink``.

Settings: the public suite's where it sets them (flink-app StreamingJob.java): checkpoints
EXACTLY_ONCE mode, ``--checkpoint-ms`` apart, min pause = the interval, at most 1
concurrent; the producer's ``acks = all``, ``retries = MAX_INT``,
``max.in.flight.requests.per.connection = 1``, ``compression.type = snappy``. The sink's
``sink.delivery-guarantee``: ``at-least-once``, or ``exactly-once`` (transactions committed
on checkpoints, ``transaction.timeout.ms = 600000``). Flink's defaults otherwise, among
them ``execution.buffer-timeout.interval`` 100 ms, the hashmap state backend, no
mini-batch, and for PyFlink's Python functions ``python.execution-mode = process``,
``python.fn-execution.bundle.size = 100000``, ``bundle.time = 1000 ms``. Not Flink's
defaults: ``restart-strategy.type = none`` (a failure ends the run with its error, where
the default would restart forever) and ``python.executable`` = this interpreter.
Parallelism ``--parallelism`` on the local MiniCluster PyFlink starts.

After the job's submission the script prints one JSON line (the configuration) and runs
until it is stopped (SIGTERM) or the job fails (exit 1, the error on stderr).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path

HEAD = 20
TRUNCATE = 500 * 1024
LOOKUP_ROWS = 10_000
PRODUCER = {
    "acks": "all",
    "retries": "2147483647",
    "max.in.flight.requests.per.connection": "1",
    "compression.type": "snappy",
}


def sink_options(args: argparse.Namespace) -> dict[str, str]:
    options = {f"properties.{k}": v for k, v in PRODUCER.items()}
    if args.exactly_once:
        options["sink.delivery-guarantee"] = "exactly-once"
        options["sink.transactional-id-prefix"] = f"lgbench-latency-{args.output}"
        # the broker's transaction.max.timeout.ms is 15 minutes; Flink's default 1 hour
        options["properties.transaction.timeout.ms"] = "600000"
    else:
        options["sink.delivery-guarantee"] = "at-least-once"
    return options


def sql_statements(args: argparse.Namespace) -> list[str]:
    """The DDL and the INSERT of the SQL job."""
    src = f"""CREATE TEMPORARY TABLE src (v STRING, proctime AS PROCTIME()) WITH (
        'connector' = 'kafka', 'topic' = '{args.input}',
        'properties.bootstrap.servers' = '{args.bootstrap}',
        'properties.group.id' = 'lgbench-{args.input}',
        'scan.startup.mode' = 'earliest-offset', 'format' = 'raw')"""
    options = ", ".join(f"'{k}' = '{v}'" for k, v in sink_options(args).items())
    snk = f"""CREATE TEMPORARY TABLE snk (v STRING) WITH (
        'connector' = 'kafka', 'topic' = '{args.output}',
        'properties.bootstrap.servers' = '{args.bootstrap}', 'format' = 'raw', {options})"""
    parts = f"""SUBSTRING(v FROM 1 FOR {HEAD}) AS head,
        SUBSTRING(v FROM {HEAD + 1} FOR {TRUNCATE}) AS payload"""
    if args.query == "A":
        insert = f"INSERT INTO snk SELECT head || TO_BASE64(payload) FROM (SELECT {parts} FROM src)"
        return [src, snk, insert]
    if args.query == "B":
        insert = f"""INSERT INTO snk
            SELECT head || CAST(COUNT(*) OVER w AS STRING) || '|' || TO_BASE64(payload)
            FROM (SELECT {parts}, proctime FROM src)
            WINDOW w AS (PARTITION BY payload ORDER BY proctime
                         ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"""
        return [src, snk, insert]
    table = f"""CREATE TEMPORARY TABLE lookup (x BIGINT, y BIGINT) WITH (
        'connector' = 'filesystem', 'path' = '{Path(args.table).resolve().as_uri()}',
        'format' = 'csv')"""
    insert = f"""INSERT INTO snk
        SELECT /*+ STATE_TTL('s' = '1s', 't' = '3650d') */
               s.head || CAST(t.y AS STRING) || '|' || TO_BASE64(s.payload)
        FROM (SELECT {parts}, CAST(FLOOR(RAND() * {LOOKUP_ROWS}) AS BIGINT) AS k FROM src) s
        JOIN lookup t ON s.k = t.x"""
    return [src, snk, table, insert]


def settings(args: argparse.Namespace) -> dict[str, str]:
    return {
        "parallelism.default": str(args.parallelism),
        "pipeline.jars": Path(args.jar).resolve().as_uri(),
        "execution.checkpointing.interval": f"{args.checkpoint_ms} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.min-pause": f"{args.checkpoint_ms} ms",
        "execution.checkpointing.max-concurrent-checkpoints": "1",
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": (args.work / "checkpoints").resolve().as_uri(),
        "table.local-time-zone": "UTC",
        # a failure ends the job (and this script, with its error) instead of restarting
        # it forever; no effect on a run without failures
        "restart-strategy.type": "none",
        # PyFlink's Python workers run this environment's interpreter, not `python` on PATH
        "python.executable": sys.executable,
    }


def run_sql(args: argparse.Namespace) -> None:
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    config = Configuration()
    for k, v in settings(args).items():
        config.set_string(k, v)
    t_env = TableEnvironment.create(
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(config).build()
    )
    *ddl, insert = sql_statements(args)
    for statement in ddl:
        t_env.execute_sql(statement)
    result = t_env.execute_sql(insert)
    announce(args, "sql", ddl + [insert])
    result.wait()
    sys.exit("the Flink job ended")


def run_datastream(args: argparse.Namespace) -> None:
    from pyflink.common import Configuration, Types, WatermarkStrategy
    from pyflink.common.serialization import SimpleStringSchema
    from pyflink.datastream import KeyedProcessFunction, StreamExecutionEnvironment
    from pyflink.datastream.connectors.base import DeliveryGuarantee
    from pyflink.datastream.connectors.kafka import (
        KafkaOffsetsInitializer,
        KafkaRecordSerializationSchema,
        KafkaSink,
        KafkaSource,
    )
    from pyflink.datastream.state import ValueStateDescriptor

    config = Configuration()
    for k, v in settings(args).items():
        config.set_string(k, v)
    env = StreamExecutionEnvironment.get_execution_environment(config)

    class KeyedCount(KeyedProcessFunction):
        def open(self, ctx: object) -> None:
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))  # type: ignore[attr-defined]

        def process_element(self, value: str, ctx: object) -> object:
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            payload = value[HEAD : HEAD + TRUNCATE].encode()
            yield f"{value[:HEAD]}{n}|{base64.b64encode(payload).decode()}"

    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(args.bootstrap)
        .set_topics(args.input)
        .set_group_id(f"lgbench-{args.input}")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(SimpleStringSchema())
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(args.bootstrap)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(args.output)
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE)
    )
    for k, v in PRODUCER.items():
        sink = sink.set_property(k, v)
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka-in")
        .key_by(lambda v: v[HEAD : HEAD + TRUNCATE], key_type=Types.STRING())
        .process(KeyedCount(), output_type=Types.STRING())
        .sink_to(sink.build())
    )
    client = env.execute_async("lgbench-latency-B-datastream")
    announce(args, "datastream", ["KafkaSource -> key_by(payload) -> KeyedProcessFunction"])
    client.get_job_execution_result().result()
    sys.exit("the Flink job ended")


def announce(args: argparse.Namespace, api: str, statements: list[str]) -> None:
    from pyflink.version import __version__

    config = {
        "version": __version__,
        "api": api,
        "connector": Path(args.jar).name,
        "settings": {k: v for k, v in settings(args).items() if "dir" not in k},
        "sink": sink_options(args),
        "statements": [" ".join(s.split()) for s in statements],
        "defaults": "execution.buffer-timeout.interval 100 ms, hashmap state backend, "
        "python.fn-execution.bundle.size 100000 and bundle.time 1000 ms",
    }
    print(json.dumps({"config": config}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--query", choices="ABC", required=True)
    ap.add_argument("--api", choices=("sql", "datastream"), default="sql")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--jar", required=True, type=Path)
    ap.add_argument("--exactly-once", action="store_true")
    ap.add_argument("--checkpoint-ms", type=int, default=1000)
    ap.add_argument("--table", type=Path, help="Query C's table as CSV files (a folder)")
    ap.add_argument("--parallelism", type=int, default=2)
    args = ap.parse_args()
    if not args.jar.is_file():
        sys.exit(f"the Kafka connector jar {args.jar} does not exist")
    if args.query == "C" and args.table is None:
        sys.exit("--query C needs --table CSV_DIR (the table x -> y)")
    if args.api == "datastream" and (args.query != "B" or args.exactly_once):
        sys.exit("--api datastream runs Query B at-least-once only")
    args.work.mkdir(parents=True, exist_ok=True)
    (run_datastream if args.api == "datastream" else run_sql)(args)


if __name__ == "__main__":
    main()

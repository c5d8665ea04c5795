"""Kafka -> one-second tumbling event-time count per key -> Kafka, exactly-once: lockgate
side by side with Spark Structured Streaming and Flink SQL, one JSON line per case, on
JSON records and on Avro records through a Schema Registry (``--formats json,avro``).

The data (written once per run, read by every system): ``--records`` JSON values
``{"key": k, "ts": epoch ms}`` in a fresh input topic of 2 partitions (record ``i`` goes
to partition ``i % 2``); 1,000 keys (``i * 7919 % 1000``); event time advancing 1 ms every
10 records from 2023-11-14 22:13:20 UTC, each record up to 499 ms ahead of that (so up to
500 ms out of order, as in ``bench/windows.py``); the event time is in the value, so every
system reads it the same way. The input ends with one marker record per partition, key
-1, event time 5 s after the last record: Spark has no end-of-input watermark (windows
fire only once a later record moves the watermark past them), so without it Spark would
never write the last windows. The marker's own window is left out of the comparison.

The job, in each system: read the input topic from its earliest offsets up to its end at
the job's start (read_committed) -> watermarks ``ts - 500 ms`` -> key by ``key`` -> 1 s
tumbling event-time windows -> count -> JSON ``{"key", "window_start", "count"}`` into
the system's own output topic (2 partitions); checkpoints every second, parallelism 2.

=================  ============================================================
system             how
=================  ============================================================
lockgate           ``KafkaSource(bounded=True)`` -> ``TumblingEventTimeWindows``
                   -> ``agg.count()`` -> ``KafkaSink(delivery="exactly_once")``,
                   exactly-once checkpoints every 1 s, in this process (local
                   executor; ``--executors local,spark`` adds Spark ``local[2]``,
                   its session and workers started before the timing). Three
                   decodes (``--lockgate-decode``): ``json``, the source's
                   ``format="json"`` (a dict per record), ``arrow``,
                   ``format="bytes"`` then ``map_batches`` with pyarrow's JSON
                   reader (a batch of values at once), and ``schema``, the
                   source's ``schema=`` (Arrow batches of typed columns decoded
                   in the source, like Flink SQL's JSON format)
spark              Structured Streaming, Kafka source and sink
                   (``spark-sql-kafka-0-10``; the sink is at-least-once),
                   ``Trigger.AvailableNow``, ``bench/kafka_spark.py``
flink              Flink SQL, Kafka connector (``flink-sql-connector-kafka``),
                   ``sink.delivery-guarantee = exactly-once``, checkpoints every
                   1 s, ``bench/kafka_flink.py``
=================  ============================================================

The Avro case (``--formats avro``, ``bench/kafka_avro.py``): the same records (markers
included) as Avro values in the Confluent wire format (magic byte, schema id, Avro binary)
of a record schema ``{key: long, ts: long, temperature: double, sensor: string}``
registered under ``<input topic>-value`` in the registry at ``--registry`` (its
Confluent-compatible API; ``scripts/services.sh`` starts Apicurio Registry at
``http://127.0.0.1:8081/apis/ccompat/v7``); the results ``{key, window_start, count}`` as
Avro in the wire format, each system registering its own output schema under ``<output
topic>-value``. lockgate reads with ``KafkaSource(format="avro", schema_registry=...,
schema=<pyarrow schema>)`` and writes with ``KafkaSink(format="avro",
schema_registry=..., schema=<pyarrow schema>)`` (``--lockgate-avro-decode registry``);
Flink SQL with ``'value.format' = 'avro-confluent'`` on both tables (its
``flink-sql-avro-confluent-registry`` jar from Maven Central), otherwise as in the JSON
case. Spark has no Avro case: open-source Spark's ``from_avro`` takes a fixed schema (its
registry support is Databricks-only). The run's subjects are deleted at its end (with its
topics, unless ``--keep-topics``).

Verification: each output topic is read with a read_committed consumer after its job;
the multiset of ``(key, window_start, count)`` (Avro: decoded by fastavro with the
writer's schema fetched by each value's id) is compared with the counts computed from
the generated data. ``missing`` counts expected results not written, ``duplicates``
results written more than once, ``unexpected`` results with a wrong count or window;
``verified`` is true only when all three are zero.

``seconds`` is each job's own time, measured the same way in every system: from the
job's submission to its end (bounded input fully processed, output committed), planning
included; the start of the JVM (Spark, Flink), of the Flink MiniCluster and Spark's
package resolution are not (``process_seconds`` is the peer's whole process, start-up
included). ``records_per_s`` = records / seconds. With ``--repeat K`` every case runs K times (each
into a fresh output topic, each verified): ``seconds`` is the fastest run, ``seconds_each``
all of them, and ``verified`` holds only if every run's output is right. ``cores`` is the
machine's CPU count, ``load_average_1m`` the machine's load after the case (other work
on the same cores slows every system).

Usage (the peers' virtual environments come from ``bash bench/setup_peers.sh flink
spark``; the jars from Maven Central, cached under ``~/.cache/lockgate``; the broker from
``bash scripts/services.sh``)::

    .venv/bin/python bench/kafka.py [--records 5000000] [--formats json,avro]
                                    [--systems lockgate,spark,flink]
                                    [--executors local] [--lockgate-decode json,arrow,schema]
                                    [--lockgate-avro-decode registry]
                                    [--registry http://127.0.0.1:8081/apis/ccompat/v7]
                                    [--parallelism 2]
                                    [--bootstrap 127.0.0.1:9092] [--keep-topics]
                                    [--spark-max-offsets 500000] [--repeat 1]

``--spark-max-offsets`` is Spark's ``maxOffsetsPerTrigger``: the records per micro-batch,
each of which commits its offsets and state (Spark's checkpoint); fewer records per
micro-batch means more commits, closer to the others' one-second checkpoints, and a
slower run.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# `python bench/kafka.py` puts bench/ first on sys.path, where this file would shadow the
# kafka-python package (`import kafka`) that lockgate's Kafka sink imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def _load_bench_module(name: str) -> Any:
    """A module of bench/ by its file (bench/ is off sys.path, see above)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"lgbench_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


AVRO = _load_bench_module("kafka_avro")

ROOT = HERE.parent
KEYS = 1000
DISORDER_MS = 500
WINDOW_MS = 1000
PARTITIONS = 2
BASE_MS = 1_700_000_000_000
MARKER_KEY = -1
MARKER_AFTER_MS = 5000
CACHE = Path(
    os.environ.get("LOCKGATE_CACHE_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lockgate"
)
# Spark's Kafka connector for Scala 2.13. Maven Central serves no 4.3.0 (the peer's
# pyspark), so the closest served version: 4.2.0.
SPARK_KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
FLINK_KAFKA = "org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2"
# The avro-confluent format of the peer's Flink (apache-flink 2.3.0, bench/setup_peers.sh)
FLINK_AVRO = "org.apache.flink:flink-sql-avro-confluent-registry:2.3.0"
PEERS = HERE / ".peers"

Result = collections.Counter  # (key, window_start, count) -> times written


# -- data ------------------------------------------------------------------------------


def event_columns(start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys and event times (epoch ms) of records ``start .. stop - 1``."""
    i = np.arange(start, stop, dtype=np.int64)
    keys = (i * 7919) % KEYS
    ts = BASE_MS + i // 10 + (i * 104729) % DISORDER_MS
    return keys, ts


def expected_counts(records: int) -> Result:
    """Every ``(key, window_start, count)`` a correct job writes (the markers' window
    left out)."""
    keys, ts = event_columns(0, records)
    windows = ts - ts % WINDOW_MS
    combined = (windows - BASE_MS) * KEYS + keys
    uniq, counts = np.unique(combined, return_counts=True)
    starts = uniq // KEYS + BASE_MS
    return Result(
        {(int(k), int(w), int(c)): 1 for k, w, c in zip(uniq % KEYS, starts, counts, strict=True)}
    )


def create_topic(admin: AdminClient, name: str) -> None:
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(name, timeout=10).topics.get(name)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == PARTITIONS
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.05)  # bounded polling for the partitions' leaders
    raise SystemExit(f"topic {name}: not every partition had a leader within 30 s")


def json_values(keys: np.ndarray, ts: np.ndarray) -> list[bytes]:
    """The JSON case's values of records with these keys and event times."""
    return [b'{"key":%d,"ts":%d}' % kt for kt in zip(keys.tolist(), ts.tolist(), strict=True)]


def produce_input(
    bootstrap: str,
    topic: str,
    records: int,
    encode: Callable[[np.ndarray, np.ndarray], list[bytes]] = json_values,
) -> float:
    """Write the records and the two markers, their values made by ``encode`` from
    their keys and event times; return the seconds it took."""
    started = time.perf_counter()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "acks": "all",
        }
    )
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    chunk = 200_000
    for start in range(0, records, chunk):
        keys, ts = event_columns(start, min(records, start + chunk))
        for j, value in enumerate(encode(keys, ts)):
            while True:
                try:
                    producer.produce(
                        topic, value, partition=(start + j) % PARTITIONS, on_delivery=delivered
                    )
                    break
                except BufferError:
                    producer.poll(0.05)  # the local queue is full: let deliveries drain it
        producer.poll(0)
    last = int(event_columns(max(records - 1, 0), records)[1].max()) if records else BASE_MS
    marker = encode(np.array([MARKER_KEY]), np.array([last + MARKER_AFTER_MS]))[0]
    for p in range(PARTITIONS):
        producer.produce(topic, marker, partition=p, on_delivery=delivered)
    left = producer.flush(120)
    if left or errors:
        raise SystemExit(f"producing to {topic}: {left} unacknowledged, {errors[:3]}")
    return time.perf_counter() - started


def json_result(value: bytes) -> tuple[int, int, int]:
    """``(key, window_start, count)`` of a JSON output value."""
    r = json.loads(value)
    return int(r["key"]), int(r["window_start"]), int(r["count"])


def read_output(
    bootstrap: str,
    topic: str,
    timeout_s: float = 120.0,
    decode: Callable[[bytes], tuple[int, int, int]] = json_result,
) -> tuple[Result, int]:
    """The ``(key, window_start, count)`` results (``decode`` of each value) a
    read_committed consumer sees in ``topic`` (markers left out), and how many records
    it read in all."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lgbench-check-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    seen: Result = collections.Counter()
    total = 0
    try:
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        done: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(done) < len(parts):
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"reading {topic} (read_committed) took over {timeout_s} s: partitions "
                    f"{sorted(set(parts) - done)} did not reach their end (a transaction "
                    "left open holds the last stable offset back?)"
                )
            for msg in consumer.consume(50_000, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        done.add(msg.partition())
                        continue
                    raise KafkaException(msg.error())
                total += 1
                result = decode(msg.value())
                if result[0] != MARKER_KEY:
                    seen[result] += 1
    finally:
        consumer.close()
    return seen, total


def compare(expected: Result, seen: Result) -> dict[str, Any]:
    missing = sum(1 for r in expected if r not in seen)
    duplicates = sum(n - 1 for r, n in seen.items() if r in expected and n > 1)
    unexpected = sum(n for r, n in seen.items() if r not in expected)
    return {
        "results_expected": len(expected),
        "results_written": sum(seen.values()),
        "missing": missing,
        "duplicates": duplicates,
        "unexpected": unexpected,
        "verified": missing == 0 and duplicates == 0 and unexpected == 0,
    }


# -- lockgate --------------------------------------------------------------------------


def _to_output(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [batch.column("key"), batch.column("window_start"), batch.column("count")],
        names=["key", "window_start", "count"],
    )


INPUT_SCHEMA = pa.schema([("key", pa.int64()), ("ts", pa.int64())])


def _decode_json(batch: pa.RecordBatch) -> pa.Table:
    """The ``arrow`` decode: the batch's raw JSON values (one ``value`` column of bytes)
    parsed by pyarrow's JSON reader into ``key`` and ``ts`` columns."""
    import pyarrow.json as pj

    lines = b"\n".join(batch.column(0).to_pylist())
    options = pj.ParseOptions(explicit_schema=INPUT_SCHEMA, unexpected_field_behavior="ignore")
    return pj.read_json(io.BytesIO(lines), parse_options=options)


DECODES = {
    "json": "KafkaSource(format='json'): the source decodes each value (json.loads, a dict "
    "per record)",
    "arrow": "KafkaSource(format='bytes') -> map_batches(pyarrow.json.read_json): the raw "
    "values of a batch decoded at once into Arrow columns",
    "schema": "KafkaSource(format='json', schema=...): the source decodes each partition's "
    "poll at once into an Arrow batch of the schema's columns",
}


AVRO_DECODES = {
    "registry": "KafkaSource(format='avro', schema_registry=..., schema=...): the source "
    "decodes each partition's poll into an Arrow batch of the schema's columns (flat records "
    "straight from the fetched bytes in compiled code), the writer's schema fetched by id; "
    "KafkaSink(format='avro', schema_registry=..., schema=...) "
    "registers its schema under <topic>-value and frames every record with its id",
}


_SPARK_EXECUTORS: dict[int, object] = {}


def _spark_executor(parallelism: int) -> object:
    """One SparkExecutor for every lockgate-on-Spark run, warmed up when made: its session
    and Python workers start before the timing, as the peers' JVMs do (a second executor
    in the same session would ship the lockgate package again, which Spark refuses once
    the sources changed)."""
    if parallelism not in _SPARK_EXECUTORS:
        from lockgate.executor.spark import SparkExecutor

        executor = SparkExecutor(master=f"local[{parallelism}]", conf={"spark.ui.enabled": "false"})
        executor.warm_up()
        _SPARK_EXECUTORS[parallelism] = executor
    return _SPARK_EXECUTORS[parallelism]


def run_lockgate(
    args: argparse.Namespace,
    executor_name: str,
    decode: str,
    topic_in: str,
    topic_out: str,
    fmt: str = "json",
) -> dict:
    import lockgate as lg
    from lockgate.connectors.kafka.sink import KafkaSink
    from lockgate.connectors.kafka.source import KafkaSource

    if executor_name == "local":
        executor: object = lg.LocalExecutor()
    else:
        executor = _spark_executor(args.parallelism)
    env = lg.StreamEnvironment(parallelism=args.parallelism)
    env.enable_checkpointing(1000, mode=lg.CheckpointingMode.EXACTLY_ONCE)
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(0, 0))  # a failure ends the run
    work = tempfile.mkdtemp(prefix="lockgate-bench-kafka-")
    env.checkpoint_config.storage = work
    strategy = lg.WatermarkStrategy.for_bounded_out_of_orderness(
        DISORDER_MS
    ).with_timestamp_assigner("ts")
    if fmt == "avro":
        registry = lg.connectors.SchemaRegistry(args.registry)
        source_format: dict[str, Any] = {
            "format": "avro",
            "schema_registry": registry,
            "schema": AVRO.INPUT_ARROW,
        }
        sink_format: dict[str, Any] = {
            "format": "avro",
            "schema_registry": registry,
            "schema": AVRO.OUTPUT_ARROW,
        }
    else:
        source_format = {
            "format": "bytes" if decode == "arrow" else "json",
            **({"schema": INPUT_SCHEMA} if decode == "schema" else {}),
        }
        sink_format = {"format": "json"}
    stream = env.from_source(
        KafkaSource(
            args.bootstrap,
            [topic_in],
            group_id=f"lgbench-lockgate-{topic_in}",
            start="earliest",
            bounded=True,
            **source_format,
        ),
        name="kafka-in",
    ).uid("kafka-in")
    if decode == "arrow":
        stream = stream.map_batches(_decode_json, name="decode").uid("decode")
    (
        stream.assign_timestamps_and_watermarks(strategy)
        .uid("timestamps")
        .key_by("key")
        .window(lg.TumblingEventTimeWindows.of(WINDOW_MS))
        .aggregate(lg.agg.count(name="count"), name="window-count")
        .uid("window-count")
        .map_batches(_to_output, name="to-output")
        .uid("to-output")
        .sink_to(
            KafkaSink(
                args.bootstrap,
                topic_out,
                **sink_format,
                delivery="exactly_once",
                transactional_id_prefix=f"lgbench-lockgate-{topic_out}",
            ),
            name="kafka-out",
        )
        .uid("kafka-out")
    )
    wall = time.time()
    started = time.perf_counter()
    client = env.execute_async("kafka-window-count", executor=executor)
    result = client.wait()
    seconds = time.perf_counter() - started
    checkpoints = len([c for c in client.checkpoints() if c.status == "completed"])
    shutil.rmtree(work, ignore_errors=True)
    source = result.operators["kafka-in"]
    read = result.records_out("kafka-in")
    if read != args.records + PARTITIONS:
        raise SystemExit(f"the Kafka source read {read} records, not {args.records + PARTITIONS}")
    return {
        "system": "lockgate",
        "executor": type(executor).__name__,
        "decode": (AVRO_DECODES if fmt == "avro" else DECODES)[decode],
        "version": lg.__version__ if hasattr(lg, "__version__") else None,
        "seconds": seconds,
        "delivery": "exactly-once (Kafka transactions committed on checkpoints)",
        "checkpoints_completed": checkpoints,
        # where the time goes: the source's first and last batch, seconds after the start
        "source_first_batch_s": round(source.first_emit_s - wall, 3)
        if source.first_emit_s is not None
        else None,
        "source_last_batch_s": round(source.last_emit_s - wall, 3)
        if source.last_emit_s is not None
        else None,
        "timing": "execute_async to wait() in this process: graph building, the run and "
        "the final commit"
        + (
            " (SparkSession and Python workers started before: SparkExecutor.warm_up)"
            if executor_name != "local"
            else ""
        ),
    }


# -- peers -----------------------------------------------------------------------------


def peer_python(name: str) -> Path:
    python = PEERS / name / "bin" / "python"
    if not python.exists():
        raise SystemExit(
            f"{python} does not exist: create the peer's environment with "
            f"'bash bench/setup_peers.sh {name}'"
        )
    return python


def flink_jar(coordinates: str = FLINK_KAFKA) -> Path:
    """A Flink jar (the Kafka SQL connector by default), fetched once from Maven Central
    with mvn."""
    group, artifact, version = coordinates.split(":")
    folder = CACHE / "bench-kafka-flink"
    jar = folder / f"{artifact}-{version}.jar"
    if not jar.exists():
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [
            "mvn", "-q", "-B", "dependency:copy",
            f"-Dartifact={coordinates}", f"-DoutputDirectory={folder}",
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not jar.exists():
            raise SystemExit(
                f"fetching {coordinates} from Maven Central failed: "
                f"{(done.stdout + done.stderr)[-2000:]}"
            )
    return jar


def run_peer(
    name: str, args: argparse.Namespace, topic_in: str, topic_out: str, fmt: str = "json"
) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"lockgate-bench-kafka-{name}-"))
    common = [
        "--bootstrap", args.bootstrap, "--input", topic_in, "--output", topic_out,
        "--work", str(work), "--parallelism", str(args.parallelism),
    ]  # fmt: skip
    if name == "flink":
        cmd = [str(peer_python("flink")), str(HERE / "kafka_flink.py"), *common]
        cmd += ["--jar", str(flink_jar()), "--checkpoint-ms", "1000"]
        if fmt == "avro":
            cmd += ["--format", "avro-confluent", "--registry", args.registry]
            cmd += ["--jar", str(flink_jar(FLINK_AVRO))]
    else:
        cmd = [str(peer_python("spark")), str(HERE / "kafka_spark.py"), *common]
        cmd += ["--package", SPARK_KAFKA, "--ivy", str(CACHE / "bench-kafka-spark-ivy")]
        cmd += ["--max-offsets-per-trigger", str(args.spark_max_offsets)]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    process_seconds = time.perf_counter() - started
    shutil.rmtree(work, ignore_errors=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stderr[-5000:])
        raise SystemExit(f"the {name} run failed (exit {done.returncode}): {' '.join(cmd)}")
    out = json.loads(lines[-1])
    row: dict[str, Any] = {
        "system": "flink-sql" if name == "flink" else "spark-structured-streaming",
        "executor": f"MiniCluster, {args.parallelism} slots"
        if name == "flink"
        else f"local[{args.parallelism}]",
        "version": out["version"],
        "connector": out["connector"],
        "seconds": out["seconds"],
        "process_seconds": round(process_seconds, 3),
    }
    if name == "flink":
        row["delivery"] = "exactly-once (sink.delivery-guarantee = exactly-once)"
        if fmt == "avro":
            row["decode"] = (
                "'value.format' = 'avro-confluent' on both tables: the writer's schema "
                "fetched by id and resolved to the table's; the output schema registered "
                "under <topic>-value"
            )
        row["checkpoints_completed"] = out["checkpoints"]
        row["timing"] = (
            "statement submission to the job's end: SQL planning, deployment on the "
            "MiniCluster started before, the run and the final commit"
        )
    else:
        row["delivery"] = "at-least-once (Spark's Kafka sink has no transactions)"
        row["micro_batches"] = out["batches"]
        row["micro_batches_with_no_data"] = out["batches_with_no_data"]
        row["max_offsets_per_trigger"] = args.spark_max_offsets
        row["timing"] = (
            "writeStream.start() to the query's end (Trigger.AvailableNow): planning, "
            "every micro-batch and the sink's writes; SparkSession and package "
            "resolution before"
        )
    return row


# -- driver ----------------------------------------------------------------------------


def run_case(
    args: argparse.Namespace,
    admin: AdminClient,
    case: tuple[str, str, str, str],
    topic_in: str,
    run_id: str,
    made: list[str],
    expected: Result,
) -> dict[str, Any]:
    """Run one case ``(system, lockgate executor, lockgate decode, format)`` ``--repeat``
    times, each into a fresh output topic (added to ``made``) checked against
    ``expected``; the case's JSON line."""
    system, executor, decode, fmt = case
    decode_result = AVRO.result_decoder(args.registry) if fmt == "avro" else json_result
    suffix = (f"-{executor}-{decode}" if executor else "") + ("-avro" if fmt == "avro" else "")
    runs = []
    for attempt in range(args.repeat):
        topic_out = f"lgbench-kafka-out-{system}{suffix}-{run_id}-{attempt}"
        create_topic(admin, topic_out)
        made.append(topic_out)
        if system == "lockgate":
            row = run_lockgate(args, executor, decode, topic_in, topic_out, fmt)
        else:
            row = run_peer(system, args, topic_in, topic_out, fmt)
        seen, total = read_output(args.bootstrap, topic_out, decode=decode_result)
        runs.append((row, total, compare(expected, seen)))
    seconds_each = [round(r[0]["seconds"], 3) for r in runs]
    row, total, checked = min(runs, key=lambda r: r[0]["seconds"])
    seconds = row.pop("seconds")
    line = {
        "bench": "kafka",
        "case": f"{system}{suffix}",
        "job": "window-count",
        "format": "avro-confluent" if fmt == "avro" else "json",
        **row,
        "records": args.records,
        "keys": KEYS,
        "disorder_ms": DISORDER_MS,
        "window_ms": WINDOW_MS,
        "checkpoint_interval_ms": 1000,
        "parallelism": args.parallelism,
        "partitions": PARTITIONS,
        "seconds": round(seconds, 3),
        "records_per_s": round(args.records / seconds),
        "runs": args.repeat,
        "seconds_each": seconds_each,
        "output_records": total,
        **checked,
        # every run's output, not only the fastest one's, must be right
        "verified": all(r[2]["verified"] for r in runs),
        "cores": os.cpu_count(),
        # the machine's load after the case (other work shares the cores)
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    return line


def _split(option: str, value: str, allowed: Any) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or any(v not in allowed for v in items):
        raise SystemExit(
            f"{option}: a comma-separated subset of {','.join(allowed)}, got {value!r}"
        )
    return items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--formats", default="json,avro", help="the cases' formats: json,avro")
    ap.add_argument("--systems", default="lockgate,spark,flink")
    ap.add_argument("--executors", default="local", help="lockgate executors: local,spark")
    ap.add_argument(
        "--lockgate-decode",
        default="json,arrow,schema",
        help="how lockgate decodes JSON: json,arrow,schema",
    )
    ap.add_argument(
        "--lockgate-avro-decode",
        default="registry",
        help=f"how lockgate decodes Avro: {','.join(AVRO_DECODES)}",
    )
    ap.add_argument(
        "--registry",
        default=os.environ.get("LOCKGATE_TEST_SCHEMA_REGISTRY", AVRO.DEFAULT_REGISTRY),
        help="the schema registry's Confluent-compatible API (the Avro case)",
    )
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--bootstrap", default=os.environ.get("LOCKGATE_TEST_KAFKA", "127.0.0.1:9092"))
    ap.add_argument("--spark-max-offsets", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=1, help="runs per case; the fastest is kept")
    ap.add_argument("--keep-topics", action="store_true")
    args = ap.parse_args()
    formats = _split("--formats", args.formats, ("json", "avro"))
    systems = _split("--systems", args.systems, ("lockgate", "spark", "flink"))
    executors = _split("--executors", args.executors, ("local", "spark"))
    decodes = _split("--lockgate-decode", args.lockgate_decode, tuple(DECODES))
    avro_decodes = _split("--lockgate-avro-decode", args.lockgate_avro_decode, tuple(AVRO_DECODES))
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.records < 1:
        ap.error(f"--records must be at least 1, got {args.records}")
    if "avro" in formats:
        AVRO.wait_for_registry(args.registry)

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    run_id = uuid.uuid4().hex[:8]
    made: list[str] = []
    expected = expected_counts(args.records)
    try:
        for fmt in formats:
            topic_in = f"lgbench-kafka-in-{run_id}" + ("-avro" if fmt == "avro" else "")
            made.append(topic_in)
            try:
                create_topic(admin, topic_in)
            except KafkaException as e:
                raise SystemExit(
                    f"cannot create topic {topic_in} on {args.bootstrap}: {e}; is the broker "
                    "running (bash scripts/services.sh starts it)?"
                ) from e
            if fmt == "avro":
                schema_id = AVRO.register_input_schema(args.registry, topic_in)
                encode = AVRO.value_encoder(schema_id)
            else:
                encode = json_values
            produce_s = produce_input(args.bootstrap, topic_in, args.records, encode)
            print(
                f"wrote {args.records:,} {fmt} records to {topic_in} in {produce_s:.1f} s",
                file=sys.stderr,
            )
            cases: list[tuple[str, str, str]] = []
            if "lockgate" in systems:
                for_lockgate = avro_decodes if fmt == "avro" else decodes
                cases += [("lockgate", e, d) for e in executors for d in for_lockgate]
            if fmt == "avro" and "spark" in systems:
                print(
                    "no Spark case for Avro: open-source Spark's from_avro takes a fixed "
                    "schema, its Schema Registry support is Databricks-only",
                    file=sys.stderr,
                )
            peers = ("flink",) if fmt == "avro" else ("spark", "flink")
            cases += [(s, "", "") for s in peers if s in systems]
            for system, executor, decode in cases:
                line = run_case(
                    args, admin, (system, executor, decode, fmt), topic_in, run_id, made, expected
                )
                print(json.dumps(line), flush=True)
    finally:
        if not args.keep_topics:
            if made:
                for future in admin.delete_topics(made).values():
                    try:
                        future.result(30)
                    except KafkaException:
                        pass  # already gone
            if "avro" in formats:
                AVRO.delete_subjects(args.registry, [f"{t}-value" for t in made])


if __name__ == "__main__":
    main()

"""Spark Structured Streaming peer of ``bench/kafka.py``: Kafka -> one-second tumbling
event-time count per key -> Kafka.

Runs in the Spark peer's virtual environment (``bash bench/setup_peers.sh spark``), with
Spark's Kafka source and sink (``spark-sql-kafka-0-10``, resolved from Maven Central
through ``spark.jars.packages`` into ``--ivy``)::

    bench/.peers/spark/bin/python bench/kafka_spark.py --bootstrap 127.0.0.1:9092 \\
        --input IN --output OUT --work WORK --package GROUP:ARTIFACT:VERSION --ivy DIR \\
        [--parallelism 2] [--max-offsets-per-trigger N]

The query: ``readStream`` kafka from the earliest offsets (read_committed), ``from_json``
of ``{"key": int, "ts": epoch ms}``, ``withWatermark`` 500 ms, ``groupBy(window(1 s),
key).count()`` in append mode, ``writeStream`` kafka as JSON ``{"key", "window_start",
"count"}``, checkpointLocation under ``--work``, ``Trigger.AvailableNow`` (every offset
present at the start, in micro-batches of at most ``--max-offsets-per-trigger`` records;
each micro-batch commits its offsets and state: Spark's analogue of a checkpoint), on
``local[p]`` with ``spark.sql.shuffle.partitions = p``.

Spark's Kafka sink is **at-least-once** (no transactions): a retried task or micro-batch
writes its records again. The last line of stdout is a JSON object: ``seconds`` (from
``start()`` to the query's end: planning, every micro-batch and the sink's writes; the JVM
start and the package resolution happen before), ``batches``, ``version``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

DISORDER_MS = 500


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--package", required=True)
    ap.add_argument("--ivy", required=True, type=Path)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=500_000)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    p = args.parallelism

    import pyspark
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master(f"local[{p}]")
        .appName("lgbench-kafka")
        .config("spark.jars.packages", args.package)
        .config("spark.jars.ivy", str(args.ivy.resolve()))
        .config("spark.sql.shuffle.partitions", str(p))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        .load()
    )
    rows = (
        raw.select(F.from_json(F.col("value").cast("string"), "key INT, ts BIGINT").alias("r"))
        .select("r.key", "r.ts")
        .withColumn("rt", F.timestamp_millis("ts"))
    )
    counts = (
        rows.withWatermark("rt", f"{DISORDER_MS} milliseconds")
        .groupBy(F.window("rt", "1 second"), F.col("key"))
        .count()
    )
    out = counts.select(
        F.to_json(
            F.struct(
                F.col("key"),
                F.unix_millis(F.col("window.start")).alias("window_start"),
                F.col("count"),
            )
        ).alias("value")
    )
    started = time.perf_counter()
    query = (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("checkpointLocation", str((args.work / "checkpoint").resolve()))
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    if query.exception() is not None:
        sys.exit(f"the Spark query failed: {query.exception()}")
    batches = len([b for b in query.recentProgress if b.get("numInputRows", 0) > 0])
    all_batches = len(query.recentProgress)
    spark.stop()
    print(
        json.dumps(
            {
                "seconds": round(seconds, 3),
                "batches": batches,
                "batches_with_no_data": all_batches - batches,
                "version": pyspark.__version__,
                "connector": args.package,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

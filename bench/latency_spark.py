"""Spark Structured Streaming peer of ``bench/latency.py`` (issue 42): Query A, B or C
from Kafka to Kafka, micro-batch with a zero trigger or Real-Time Mode.

Runs in the Spark peer's virtual environment (``bash bench/setup_peers.sh spark``), with
Spark's Kafka source and sink (``spark-sql-kafka-0-10``, resolved from Maven Central
through ``spark.jars.packages`` into ``--ivy``)::

    bench/.peers/spark/bin/python bench/latency_spark.py --query A|B|C \\
        --trigger microbatch|realtime --bootstrap 127.0.0.1:9092 --input IN --output OUT \\
        --work WORK --package GROUP:ARTIFACT:VERSION --ivy DIR [--table PARQUET_DIR] \\
        [--parallelism 2]

Every value starts with a 20-byte send-time head, kept at the start of the output.
Query A: ``head || base64(payload[:500 KB])``. Query B: a keyed count (key = the
payload) in ``transformWithStateInPandas`` (a ``ValueState`` count per key, RocksDB state
store, as the API requires): ``head || count || '|' || base64(payload)``. Query C: each
record gets a random key in [0, 10,000) (``rand()``), a stream-static join with the
Parquet table ``x -> y`` (``broadcast``): ``head || y || '|' || base64(payload)``.

The public suite's settings where it sets them (spark/q1.scala, q2.scala): the source's
``kafka.fetch.max.wait.ms = 50`` and ``kafka.max.partition.fetch.bytes = 10 MB``; the
sink's ``kafka.buffer.memory = 64 MB`` and ``kafka.compression.type = snappy``, output
mode ``update``, ``asyncProgressTrackingEnabled = true`` (stateless queries only: open
source Spark refuses it with stateful operators); ``trigger(processingTime="0 seconds")``
or ``trigger(realTime="5 minutes")``. Not the suite's: ``spark.sql.shuffle.partitions``
= the parallelism (the suite's 40 is sized for its cluster), ``local[p]``, startingOffsets
earliest (a fresh topic). Spark's Kafka sink is at-least-once.

After ``start()`` the script prints one JSON line (the configuration) and runs until it is
stopped (SIGTERM) or the query fails (exit 1, the query's error on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HEAD = 20
TRUNCATE = 500 * 1024
LOOKUP_ROWS = 10_000


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--query", choices="ABC", required=True)
    ap.add_argument("--trigger", choices=("microbatch", "realtime"), required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--package", required=True)
    ap.add_argument("--ivy", required=True, type=Path)
    ap.add_argument("--table", type=Path, help="Query C's Parquet table (a folder)")
    ap.add_argument("--parallelism", type=int, default=2)
    args = ap.parse_args()
    if args.query == "C" and args.table is None:
        sys.exit("--query C needs --table PARQUET_DIR (the table x -> y)")
    args.work.mkdir(parents=True, exist_ok=True)
    p = args.parallelism

    # the Python workers run this environment's interpreter, not python3 on PATH
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import pyspark
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    session: dict[str, str] = {
        "spark.master": f"local[{p}]",
        "spark.jars.packages": args.package,
        "spark.jars.ivy": str(args.ivy.resolve()),
        "spark.sql.shuffle.partitions": str(p),
        "spark.ui.enabled": "false",
        "spark.driver.memory": "2g",
        "spark.pyspark.python": sys.executable,
    }
    if args.query == "B":
        session["spark.sql.streaming.stateStore.providerClass"] = (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        )
    builder = SparkSession.builder.appName(f"lgbench-latency-{args.query}")
    for k, v in session.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")

    source = {
        "kafka.bootstrap.servers": args.bootstrap,
        "subscribe": args.input,
        "startingOffsets": "earliest",
        "kafka.fetch.max.wait.ms": "50",
        "kafka.max.partition.fetch.bytes": "10485760",
    }
    raw = spark.readStream.format("kafka").options(**source).load()
    v = F.col("value").cast("string")
    rows = raw.select(
        F.substring(v, 1, HEAD).alias("head"),
        F.substring(v, HEAD + 1, TRUNCATE).alias("payload"),
    )
    b64 = F.base64(F.col("payload").cast("binary"))
    if args.query == "A":
        out = rows.select(F.concat(F.col("head"), b64).alias("value"))
        how = "select: head || base64(payload)"
    elif args.query == "C":
        table = spark.read.parquet(str(args.table.resolve()))
        keyed = rows.withColumn("key", (F.rand() * LOOKUP_ROWS).cast("long"))
        joined = keyed.join(F.broadcast(table), F.col("key") == F.col("x"))
        out = joined.select(
            F.concat(F.col("head"), F.col("y").cast("string"), F.lit("|"), b64).alias("value")
        )
        how = "stream-static join: rand() key, broadcast(spark.read.parquet(table)), inner"
    else:
        out = keyed_count(rows.select("head", "payload", b64.alias("b64")))
        how = "groupBy(payload).transformWithStateInPandas(ValueState count), Update mode"

    sink = {
        "kafka.bootstrap.servers": args.bootstrap,
        "topic": args.output,
        "checkpointLocation": str((args.work / "checkpoint").resolve()),
        "kafka.buffer.memory": "67108864",
        "kafka.compression.type": "snappy",
    }
    if args.query != "B":
        sink["asyncProgressTrackingEnabled"] = "true"
    writer = out.writeStream.format("kafka").options(**sink).outputMode("update")
    if args.trigger == "microbatch":
        writer, trigger = writer.trigger(processingTime="0 seconds"), 'processingTime="0 seconds"'
    else:
        writer, trigger = writer.trigger(realTime="5 minutes"), 'realTime="5 minutes"'
    query = writer.start()
    config = {
        "version": pyspark.__version__,
        "connector": args.package,
        "session": session,
        "source": source,
        "sink": {k: v for k, v in sink.items() if k != "checkpointLocation"},
        "trigger": trigger,
        "output_mode": "update",
        "query": how,
        "delivery": "at-least-once (Spark's Kafka sink)",
    }
    print(json.dumps({"config": config}), flush=True)
    query.awaitTermination()
    error = query.exception()
    sys.exit(f"the Spark query ended: {error}" if error is not None else "the Spark query ended")


def keyed_count(rows: object) -> object:
    """Query B: ``transformWithStateInPandas`` with a ``ValueState`` count per payload."""
    import numpy as np
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class KeyedCount(StatefulProcessor):
        def init(self, handle: object) -> None:
            self.count = handle.getValueState("count", "count long")  # type: ignore[attr-defined]

        def handleInputRows(self, key: object, rows: object, timerValues: object) -> object:
            n = self.count.get()[0] if self.count.exists() else 0
            for pdf in rows:  # type: ignore[attr-defined]
                counts = pd.Series(np.arange(n + 1, n + 1 + len(pdf)), index=pdf.index)
                n += len(pdf)
                yield pd.DataFrame({"value": pdf["head"] + counts.astype(str) + "|" + pdf["b64"]})
            self.count.update((n,))

        def close(self) -> None:
            pass

    return rows.groupBy("payload").transformWithStateInPandas(  # type: ignore[attr-defined]
        statefulProcessor=KeyedCount(),
        outputStructType="value string",
        outputMode="Update",
        timeMode="None",
    )


if __name__ == "__main__":
    main()

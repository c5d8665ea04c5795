"""The Nexmark-style queries on lockgate, one query per process.

Every query reads the generator's Parquet files with ``FileSource`` (one part
file per subtask), runs at parallelism 2 with exactly-once checkpoints every
``--checkpoint-ms``, and writes Parquet through the exactly-once ``FileSink``.
Built-in operators only work on whole Arrow batches: projections and
arithmetic in ``map_batches``, selections as ``filter`` expressions, window
counts and maxima as ``lg.agg`` aggregates. The definitions are in
``queries.py``. Usage (the suite's runner calls it; see ``run.py``)::

    python bench/nexmark/run_lockgate.py --query q5 --data DATA --out OUT --work WORK \
        [--executor spark|local] [--parallelism 2] [--checkpoint-ms 1000]

The last line printed is one JSON object (the runner contract in ``run.py``).
``job_seconds`` runs from ``execute_async`` to the job's end, with the Spark
session and its Python workers already up (``SparkExecutor.warm_up``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from queries import (  # noqa: E402
    COLUMNS_READ,
    OUT_OF_ORDERNESS_MS,
    Q1_RATE,
    Q2_MODULUS,
    QUERIES,
    SLIDE_MS,
    WINDOW_MS,
    events_read,
    runner_parser,
)

import lockgate as lg  # noqa: E402
from lockgate.connectors import FileSink, FileSource  # noqa: E402

BATCH_ROWS = 65_536


def _events(env: lg.StreamEnvironment, data: Path, table: str, query: str) -> lg.DataStream:
    source = FileSource(
        data / "parquet" / table,
        "parquet",
        batch_size=BATCH_ROWS,
        columns=COLUMNS_READ[query][table],
    )
    return env.from_source(source, name=f"{table}s").uid(f"{table}s")


def _event_time(stream: lg.DataStream, name: str) -> lg.DataStream:
    strategy = lg.WatermarkStrategy.for_bounded_out_of_orderness(
        OUT_OF_ORDERNESS_MS
    ).with_timestamp_assigner("date_time")
    return stream.assign_timestamps_and_watermarks(strategy).uid(f"{name}-timestamps")


def _select(*names: str) -> Any:
    def select(batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.select(list(names))

    return select


def q1_convert(batch: pa.RecordBatch) -> pa.RecordBatch:
    price = pc.multiply(batch.column("price").cast(pa.float64()), Q1_RATE)
    return pa.RecordBatch.from_arrays(
        [
            batch.column("auction"),
            batch.column("bidder"),
            price,
            batch.column("date_time"),
            batch.column("extra"),
        ],
        names=["auction", "bidder", "price", "date_time", "extra"],
    )


def q5_local_maxima(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Mark the rows holding their window's highest count within this batch (ties
    included). The rows of a window's global maximum are always among them, so the
    mark is a safe local pre-selection (local-global top-N): the same rows come
    out, with a ``keep`` column."""
    start = batch.column("window_start").to_numpy()
    num = batch.column("num").to_numpy()
    windows, group = np.unique(start, return_inverse=True)
    best = np.zeros(len(windows), dtype=num.dtype)
    np.maximum.at(best, group, num)
    return batch.append_column("keep", pa.array(num == best[group]))


def q5_hot_items(key: Any, ctx: Any, elements: list[dict]) -> Iterable[dict]:
    """The window's auctions with the most bids (all ties)."""
    top = max(e["num"] for e in elements)
    for e in elements:
        if e["num"] == top:
            yield {
                "auction": e["auction"],
                "num": e["num"],
                "window_start": e["window_start"],
                "window_end": e["window_end"],
            }


def q7_constant_key(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(np.zeros(batch.num_rows, dtype=np.int8)), batch.column("price")],
        names=["all", "price"],
    )


def q8_persons(batch: pa.RecordBatch) -> pa.RecordBatch:
    n = batch.num_rows
    return pa.RecordBatch.from_arrays(
        [
            batch.column("id"),
            batch.column("name"),
            pa.array(np.ones(n, np.int8)),
            pa.array(np.zeros(n, np.int8)),
        ],
        names=["id", "name", "person", "auction"],
    )


def q8_sellers(batch: pa.RecordBatch) -> pa.RecordBatch:
    n = batch.num_rows
    return pa.RecordBatch.from_arrays(
        [
            batch.column("seller"),
            pa.nulls(n, pa.string()),
            pa.array(np.zeros(n, np.int8)),
            pa.array(np.ones(n, np.int8)),
        ],
        names=["id", "name", "person", "auction"],
    )


def build(env: lg.StreamEnvironment, query: str, data: Path, out: Path) -> None:
    sink = FileSink(out, format="parquet", exactly_once=True)
    if query == "q8":
        persons = (
            _event_time(_events(env, data, "person", query), "person")
            .map_batches(q8_persons, name="persons-as-rows")
            .uid("persons-as-rows")
        )
        sellers = (
            _event_time(_events(env, data, "auction", query), "auction")
            .map_batches(q8_sellers, name="sellers-as-rows")
            .uid("sellers-as-rows")
        )
        (
            persons.union(sellers)
            .key_by("id")
            .window(lg.TumblingEventTimeWindows.of(WINDOW_MS))
            .aggregate(
                lg.agg.sum("person", name="persons"),
                lg.agg.sum("auction", name="auctions"),
                lg.agg.first("name", name="name"),
                name="person-window",
            )
            .uid("person-window")
            .filter((pc.field("persons") > 0) & (pc.field("auctions") > 0), name="new-sellers")
            .uid("new-sellers")
            .map_batches(_select("id", "name", "window_start"), name="q8")
            .uid("q8")
            .sink_to(sink)
            .uid("sink")
        )
        return
    if query not in COLUMNS_READ:
        raise SystemExit(f"unknown query {query!r}: one of {', '.join(QUERIES)}")
    bids = _events(env, data, "bid", query)
    if query == "q0":
        result = bids
    elif query == "q1":
        result = bids.map_batches(q1_convert, name="q1").uid("q1")
    elif query == "q2":
        auction = pc.field("auction")
        result = bids.filter(
            auction - auction / Q2_MODULUS * Q2_MODULUS == 0, name="auction-mod-123"
        ).uid("auction-mod-123")
    elif query == "q5":
        result = (
            _event_time(bids, "bid")
            .key_by("auction")
            .window(lg.SlidingEventTimeWindows.of(WINDOW_MS, SLIDE_MS))
            .aggregate(lg.agg.count(name="num"), name="bids-per-auction")
            .uid("bids-per-auction")
            .map_batches(q5_local_maxima, name="local-maxima")
            .uid("local-maxima")
            .filter(pc.field("keep"), name="keep-local-maxima")
            .uid("keep-local-maxima")
            .key_by("window_start")
            .window(lg.TumblingEventTimeWindows.of(SLIDE_MS))
            .process(q5_hot_items, name="hot-items")
            .uid("hot-items")
        )
    elif query == "q7":
        result = (
            _event_time(bids, "bid")
            .map_batches(q7_constant_key, name="prices")
            .uid("prices")
            .key_by("all")
            .window(lg.TumblingEventTimeWindows.of(WINDOW_MS))
            .aggregate(lg.agg.max("price", name="price"), name="highest-price")
            .uid("highest-price")
            .map_batches(_select("window_start", "window_end", "price"), name="q7")
            .uid("q7")
        )
    elif query == "q12":
        result = (
            bids.key_by("bidder")
            .window(lg.TumblingProcessingTimeWindows.of(WINDOW_MS))
            .aggregate(lg.agg.count(name="num"), name="bids-per-bidder")
            .uid("bids-per-bidder")
            .map_batches(_select("bidder", "num", "window_start", "window_end"), name="q12")
            .uid("q12")
        )
    else:
        raise SystemExit(f"unknown query {query!r}: one of {', '.join(QUERIES)}")
    result.sink_to(sink).uid("sink")


def executor_for(name: str, parallelism: int) -> Any:
    if name == "local":
        return lg.LocalExecutor()
    from lockgate.executor.spark import SparkExecutor

    executor = SparkExecutor(
        master=os.environ.get("LOCKGATE_SPARK_MASTER", "local[2]"),
        conf={"spark.ui.enabled": "false"},
    )
    # the session and its Python workers are up before the clock starts, as Flink's
    # mini-cluster is in run_flink.py
    executor.warm_up(parallelism)
    return executor


def main() -> None:
    ap = runner_parser(__doc__)
    ap.add_argument("--executor", default="spark", choices=["spark", "local"])
    args = ap.parse_args()
    executor = executor_for(args.executor, args.parallelism)

    env = lg.StreamEnvironment(parallelism=args.parallelism)
    env.enable_checkpointing(args.checkpoint_ms, mode=lg.CheckpointingMode.EXACTLY_ONCE)
    args.work.mkdir(parents=True, exist_ok=True)
    env.checkpoint_config.storage = str(args.work / "checkpoints")
    build(env, args.query, args.data, args.out)
    started = time.perf_counter()
    client = env.execute_async(f"nexmark-{args.query}", executor=executor)
    client.wait()
    seconds = time.perf_counter() - started
    completed = sum(1 for c in client.checkpoints() if c.status == "completed")
    print(
        json.dumps(
            {
                "system": f"lockgate ({args.executor})",
                "version": getattr(lg, "__version__", "?"),
                "query": args.query,
                "events": events_read(args.data, args.query),
                "job_seconds": round(seconds, 3),
                "input": "parquet",
                "checkpointing": f"exactly-once, every {args.checkpoint_ms} ms",
                "checkpoints": completed,
                "settings": f"parallelism {args.parallelism}, batches of {BATCH_ROWS} rows"
                + (", Spark local[2]" if args.executor == "spark" else ", threads"),
                "note": "",
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

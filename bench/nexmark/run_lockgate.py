"""The Nexmark-style queries on lockgate, one query per process.

Every query reads the generator's Parquet files with ``FileSource`` (one part
file per subtask), runs at parallelism 2 with exactly-once checkpoints every
``--checkpoint-ms``, and writes Parquet through the exactly-once ``FileSink``.
Built-in operators only work on whole Arrow batches: projections and
arithmetic in ``map_batches``, selections as ``filter`` expressions, window
counts and maxima as ``lg.agg`` aggregates, the joins of q4, q8 and q9 as the
vectorized interval and window joins (``fn=None``). Only q3's join runs a
Python function per record (a ``KeyedCoProcessFunction``, on the persons and
auctions its filters keep). The definitions are in ``queries.py``. Usage (the
suite's runner calls it; see ``run.py``)::

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

from queries import (
    COLUMNS_READ,
    MAX_AUCTION_MS,
    OUT_OF_ORDERNESS_MS,
    Q1_RATE,
    Q2_MODULUS,
    Q3_CATEGORY,
    Q3_STATES,
    QUERIES,
    SLIDE_MS,
    WINDOW_MS,
    events_read,
    runner_parser,
)

import lockgate as lg
from lockgate.connectors import FileSink, FileSource

BATCH_ROWS = 65_536
#: a tumbling window this long holds all of the data's event time: it fires only
#: with the final watermark at the end of a bounded input (q4's overall averages)
ALL_TIME_MS = 2**62


def _events(env: lg.StreamEnvironment, data: Path, table: str, query: str) -> lg.DataStream:
    source = FileSource(
        data / "parquet" / table,
        "parquet",
        batch_size=BATCH_ROWS,
        columns=COLUMNS_READ[query][table],
    )
    return env.from_source(source, name=f"{table}s").uid(f"{table}s")


def _event_time(
    stream: lg.DataStream,
    name: str,
    column: str = "date_time",
    out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS,
) -> lg.DataStream:
    strategy = lg.WatermarkStrategy.for_bounded_out_of_orderness(
        out_of_orderness_ms
    ).with_timestamp_assigner(column)
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


class Q3LocalItems(lg.KeyedCoProcessFunction):
    """q3's join of sellers (input 1: persons of the kept states, keyed by ``id``) with
    their auctions (input 2: category 10, keyed by ``seller``), both unbounded and in
    no order against each other: a person is kept for their later auctions, an
    auction whose seller has not arrived yet waits for them. Every (person, auction)
    pair is emitted once. As Flink SQL's regular join, the state is never cleaned
    (no time bound relates the two)."""

    def open(self, ctx: Any) -> None:
        self.person = ctx.get_state(lg.ValueStateDescriptor("person", default=None))
        self.waiting = ctx.get_list_state(lg.ListStateDescriptor("waiting-auctions"))

    def process_element1(self, value: dict, ctx: Any) -> Iterable[dict]:
        person = (value["name"], value["city"], value["state"])
        self.person.update(person)
        waiting = self.waiting.get()
        if waiting:
            self.waiting.clear()
            for auction in waiting:
                yield _q3_row(person, auction)

    def process_element2(self, value: dict, ctx: Any) -> Iterable[dict]:
        person = self.person.value()
        if person is None:
            self.waiting.add(value["id"])
        else:
            yield _q3_row(person, value["id"])


def _q3_row(person: tuple[str, str, str], auction: int) -> dict:
    return {"name": person[0], "city": person[1], "state": person[2], "id": auction}


def build_q3(env: lg.StreamEnvironment, data: Path) -> lg.DataStream:
    persons = (
        _events(env, data, "person", "q3")
        .filter(pc.field("state").isin(list(Q3_STATES)), name="sellers-states")
        .uid("sellers-states")
    )
    auctions = (
        _events(env, data, "auction", "q3")
        .filter(pc.field("category") == Q3_CATEGORY, name="category-10")
        .uid("category-10")
    )
    return (
        persons.key_by("id")
        .connect(auctions.key_by("seller"))
        .process(Q3LocalItems(), name="local-items")
        .uid("local-items")
    )


def _running_bids(env: lg.StreamEnvironment, data: Path, query: str) -> lg.DataStream:
    """q4's and q9's pairs of an auction and a bid placed while it ran, as Arrow
    batches: the auction's columns, then the bid's (``auction``, ``price``, ...;
    ``date_time_right`` the bid's time), each pair stamped with the auction's
    ``expires``.

    The auctions' event time is their ``expires`` (when their result is due; their
    watermark allows the generator's longest auction on top of the suite's
    out-of-orderness, as ``expires`` arrive in ``date_time`` order), the bids' their
    ``date_time``. The vectorized interval join pairs an auction with the bids of
    its key at ``expires - (MAX_AUCTION_MS - 1) <= bid time <= expires``; a
    filter keeps the bids at or after the auction's ``date_time``. Each pair's
    timestamp is the later of the two, the auction's ``expires``, so a window keyed
    by auction that holds ``expires`` fires once every bid of the auction is in.
    """
    auctions = _event_time(
        _events(env, data, "auction", query),
        "auction",
        column="expires",
        out_of_orderness_ms=MAX_AUCTION_MS + OUT_OF_ORDERNESS_MS,
    )
    bids = _event_time(_events(env, data, "bid", query), "bid")
    return (
        auctions.key_by("id")
        .interval_join(bids.key_by("auction"))
        .between(-(MAX_AUCTION_MS - 1), 0)
        .process(name="auction-bids")
        .uid("auction-bids")
        .filter(pc.field("date_time_right") >= pc.field("date_time_left"), name="while-open")
        .uid("while-open")
    )


#: q9's winning bid per auction as one int64 to maximize: the price, then the earlier
#: bid (time since the auction opened, fewer bits), then the lower bidder
_Q9_OFFSET_BITS = 16  # MAX_AUCTION_MS - 1 = 59,999 < 2**16
_Q9_BIDDER_BITS = 20
_Q9_PRICE_BITS = 63 - _Q9_OFFSET_BITS - _Q9_BIDDER_BITS
#: plain strings (Spark's workers unpickle these functions without bench/ to import)
Q9_COLUMNS = tuple(QUERIES["q9"].columns)


def q9_rank(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``rank``: price, then earliest bid, then lowest bidder, packed in one int64
    so that the built-in ``lg.agg.max`` picks the winning bid (Nexmark's ``ORDER BY
    price DESC, date_time ASC``, then bidder). Fails on values outside the packing's
    bounds (prices up to 2**27, bidders up to 2**20: 52 million events)."""
    price = batch.column("price").to_numpy()
    offset = batch.column("date_time_right").to_numpy() - batch.column("date_time_left").to_numpy()
    bidder = batch.column("bidder").to_numpy()
    if len(price) and (
        price.min() < 0
        or price.max() >= 1 << _Q9_PRICE_BITS
        or offset.max() >= 1 << _Q9_OFFSET_BITS
        or bidder.min() < 0
        or bidder.max() >= 1 << _Q9_BIDDER_BITS
    ):
        raise ValueError(
            f"q9's packed rank holds prices below 2**{_Q9_PRICE_BITS}, auctions up to "
            f"2**{_Q9_OFFSET_BITS} ms and bidders below 2**{_Q9_BIDDER_BITS}; got prices "
            f"{price.min()}..{price.max()}, offsets up to {offset.max()}, bidders "
            f"{bidder.min()}..{bidder.max()}"
        )
    low = (1 << _Q9_OFFSET_BITS) - 1 - offset
    rank = (price << (_Q9_OFFSET_BITS + _Q9_BIDDER_BITS)) | (low << _Q9_BIDDER_BITS)
    rank |= (1 << _Q9_BIDDER_BITS) - 1 - bidder
    return pa.RecordBatch.from_arrays(
        [
            batch.column("id"),
            batch.column("category"),
            batch.column("date_time_left"),
            batch.column("expires"),
            pa.array(rank),
        ],
        names=["id", "category", "date_time", "expires", "rank"],
    )


def q9_unpack(batch: pa.RecordBatch) -> pa.RecordBatch:
    rank = batch.column("rank").to_numpy()
    start = batch.column("date_time").to_numpy()
    low = (rank >> _Q9_BIDDER_BITS) & ((1 << _Q9_OFFSET_BITS) - 1)
    return pa.RecordBatch.from_arrays(
        [
            batch.column("id"),
            batch.column("category"),
            batch.column("date_time"),
            batch.column("expires"),
            pa.array((1 << _Q9_BIDDER_BITS) - 1 - (rank & ((1 << _Q9_BIDDER_BITS) - 1))),
            pa.array(rank >> (_Q9_OFFSET_BITS + _Q9_BIDDER_BITS)),
            pa.array(start + (1 << _Q9_OFFSET_BITS) - 1 - low),
        ],
        names=list(Q9_COLUMNS),
    )


def build_q4(env: lg.StreamEnvironment, data: Path) -> lg.DataStream:
    """Each auction's highest bid once its window (which holds its ``expires``) has
    fired, then the mean per category over the whole input: a window spanning all
    time, fired by the final watermark (the bounded input's end), so one row per
    category, the final value of Flink SQL's updating result."""
    finals = (
        _running_bids(env, data, "q4")
        .key_by("id")
        .window(lg.TumblingEventTimeWindows.of(WINDOW_MS))
        .aggregate(
            lg.agg.max("price", name="final"),
            lg.agg.first("category", name="category"),
            name="closing-price",
        )
        .uid("closing-price")
        .map_batches(_select("category", "final"), name="finals")
        .uid("finals")
    )
    return (
        finals.key_by("category")
        .window(lg.TumblingEventTimeWindows.of(ALL_TIME_MS))
        .aggregate(lg.agg.mean("final", name="final"), name="average-per-category")
        .uid("average-per-category")
        .map_batches(_select("category", "final"), name="q4")
        .uid("q4")
    )


def build_q9(env: lg.StreamEnvironment, data: Path) -> lg.DataStream:
    """Each auction's winning bid once its window (which holds its ``expires``) has
    fired: the built-in max of the packed rank (``q9_rank``)."""
    return (
        _running_bids(env, data, "q9")
        .map_batches(q9_rank, name="rank-bids")
        .uid("rank-bids")
        .key_by("id")
        .window(lg.TumblingEventTimeWindows.of(WINDOW_MS))
        .aggregate(
            lg.agg.max("rank", name="rank"),
            lg.agg.first("category", name="category"),
            lg.agg.first("date_time", name="date_time"),
            lg.agg.first("expires", name="expires"),
            name="winning-bid",
        )
        .uid("winning-bid")
        .map_batches(q9_unpack, name="q9")
        .uid("q9")
    )


def q8_sellers(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.select(["seller", "window_start"])


def build_q8(env: lg.StreamEnvironment, data: Path) -> lg.DataStream:
    """Flink SQL's plan, as a window join: the distinct sellers of each tumbling
    window (a built-in count per seller and window, stamped ``window_end - 1``, so
    in the same window), joined with the persons of that window on ``id = seller``
    by the vectorized window join: one row per person and window."""
    persons = (
        _event_time(_events(env, data, "person", "q8"), "person")
        .map_batches(_select("id", "name"), name="person-columns")
        .uid("person-columns")
    )
    sellers = (
        _event_time(_events(env, data, "auction", "q8"), "auction")
        .key_by("seller")
        .window(lg.TumblingEventTimeWindows.of(WINDOW_MS))
        .aggregate(lg.agg.count(name="auctions"), name="sellers")
        .uid("sellers")
        .map_batches(q8_sellers, name="seller-windows")
        .uid("seller-windows")
    )
    return (
        persons.join(sellers)
        .where("id")
        .equal_to("seller")
        .window(lg.TumblingEventTimeWindows.of(WINDOW_MS))
        .apply(name="new-sellers")
        .uid("new-sellers")
        .map_batches(_select("id", "name", "window_start"), name="q8")
        .uid("q8")
    )


TWO_INPUTS = {"q3": build_q3, "q4": build_q4, "q8": build_q8, "q9": build_q9}


def build(env: lg.StreamEnvironment, query: str, data: Path, out: Path) -> None:
    sink = FileSink(out, format="parquet", exactly_once=True)
    if query in TWO_INPUTS:
        TWO_INPUTS[query](env, data).sink_to(sink).uid("sink")
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

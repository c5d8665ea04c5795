"""The Nexmark-style queries of the suite: what each reads, computes and writes.

Every system implements these definitions exactly; the checker compares their
outputs with lockgate's. Times are the ``date_time`` column (epoch
milliseconds, int64); event-time queries use watermarks of ``date_time - 1 s``
(bounded out-of-orderness of 1 s; the data has none beyond 100 ms). Windows are
aligned to the epoch. ``window_start`` / ``window_end`` are written as epoch
milliseconds (int64; ``window_end`` exclusive).

=====  ========================  =====================================================
query  reads                     writes (one row per ...)
=====  ========================  =====================================================
q0     bid                       every bid, all columns: passthrough
q1     bid                       every bid as ``auction, bidder, price, date_time,
                                 extra`` with ``price = 0.908 * price`` (dollars to
                                 euros; float64, compared to 1e-9 relative)
q2     bid                       ``auction, price`` of the bids whose
                                 ``auction % 123 == 0`` (selection)
q3     person, auction           local item suggestion: the auctions of category 10
                                 whose seller lives in OR, ID or CA (an equi-join of
                                 the two unbounded streams on ``seller = id``, no
                                 time): ``name, city, state, id`` (``id`` the
                                 auction's; one row per such auction)
q4     auction, bid              average closing price per category: each auction's
                                 highest bid among those with ``date_time`` between
                                 the auction's ``date_time`` and ``expires`` (both
                                 inclusive; auctions without such a bid have none),
                                 averaged per category over all auctions:
                                 ``category, final`` (``final`` float64, the mean of
                                 the integer maxima; compared after rounding)
q5     bid                       hot items: for every sliding window of 10 s every
                                 2 s, the auction(s) with the most bids in it (all
                                 ties): ``auction, num, window_start, window_end``
q7     bid                       highest bid: for every tumbling window of 10 s, the
                                 highest price: ``window_start, window_end, price``
q8     person, auction           monitor new users: the persons who registered and
                                 opened at least one auction (as ``seller``) in the
                                 same tumbling 10 s window: ``id, name,
                                 window_start`` (one row per person and window)
q9     auction, bid              winning bids: for each auction, its highest bid with
                                 ``date_time`` between the auction's ``date_time``
                                 and ``expires`` (both inclusive), ties to the
                                 earliest bid, then the lowest bidder: ``id,
                                 category, date_time, expires, bidder, price,
                                 bid_date_time`` (one row per auction with such a bid)
q12    bid                       processing-time tumbling windows of 10 s, bids per
                                 bidder: ``bidder, num, window_start, window_end``;
                                 windows depend on the wall clock, so only the total
                                 of ``num`` (every bid counted once) is compared
=====  ========================  =====================================================

Simplifications against the original Nexmark, the same for every system: q7
writes the window's highest price, not the whole bid that carried it; q8
writes a person once per window even when they opened several auctions; q4
averages as float64 (Flink's Nexmark SQL averages BIGINTs, truncating); q9
writes the auction's key columns and the winning bid's, not every column, and
breaks ties between equal bids at the same millisecond by bidder.

q3, q4 and q9 are Nexmark's unbounded formulations (a regular join, then
aggregations or a top-1 that update their results as bids arrive): the result
compared is the final one, after every input row. A system whose output is a
changelog (Flink SQL's for q4 and q9) has it replayed into those final rows.

Output: files under the output folder, either Parquet with the column names
above or CSV **without a header** with the columns in the order above. Files
and folders whose names start with ``_`` or ``.`` are ignored (in-progress
files, Spark's ``_spark_metadata``, ...).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Query:
    name: str
    reads: tuple[str, ...]
    columns: tuple[str, ...]
    #: checker mode: "rows" (equal multisets of rows) or "total:<column>" (equal sums)
    compare: str = "rows"
    #: float columns compared with a relative tolerance
    floats: tuple[str, ...] = ()
    #: part of the targets (lockgate vs Flink SQL x5 and vs Bytewax x20)
    targeted: bool = True


BID_COLUMNS = ("auction", "bidder", "price", "channel", "url", "date_time", "extra")

QUERIES: dict[str, Query] = {
    q.name: q
    for q in (
        Query("q0", ("bid",), BID_COLUMNS),
        Query(
            "q1", ("bid",), ("auction", "bidder", "price", "date_time", "extra"), floats=("price",)
        ),
        Query("q2", ("bid",), ("auction", "price")),
        Query("q3", ("person", "auction"), ("name", "city", "state", "id")),
        Query("q4", ("auction", "bid"), ("category", "final"), floats=("final",)),
        Query("q5", ("bid",), ("auction", "num", "window_start", "window_end")),
        Query("q7", ("bid",), ("window_start", "window_end", "price")),
        Query("q8", ("person", "auction"), ("id", "name", "window_start")),
        Query(
            "q9",
            ("auction", "bid"),
            ("id", "category", "date_time", "expires", "bidder", "price", "bid_date_time"),
        ),
        Query(
            "q12",
            ("bid",),
            ("bidder", "num", "window_start", "window_end"),
            compare="total:num",
            targeted=False,
        ),
    )
}

#: per query, the columns it reads from each table (projection: the runners read
#: only these from the Parquet files, as Flink's and Spark's planners do on their own)
COLUMNS_READ: dict[str, dict[str, list[str]]] = {
    "q0": {"bid": list(BID_COLUMNS)},
    "q1": {"bid": ["auction", "bidder", "price", "date_time", "extra"]},
    "q2": {"bid": ["auction", "price"]},
    "q3": {"person": ["id", "name", "city", "state"], "auction": ["id", "seller", "category"]},
    "q4": {
        "auction": ["id", "category", "date_time", "expires"],
        "bid": ["auction", "price", "date_time"],
    },
    "q5": {"bid": ["auction", "date_time"]},
    "q7": {"bid": ["price", "date_time"]},
    "q8": {"person": ["id", "name", "date_time"], "auction": ["seller", "date_time"]},
    "q9": {
        "auction": ["id", "category", "date_time", "expires"],
        "bid": ["auction", "bidder", "price", "date_time"],
    },
    "q12": {"bid": ["bidder"]},
}

WINDOW_MS = 10_000
SLIDE_MS = 2_000
OUT_OF_ORDERNESS_MS = 1_000
Q1_RATE = 0.908
Q2_MODULUS = 123
#: q3: the sellers' states and the auctions' category it keeps
Q3_STATES = ("OR", "ID", "CA")
Q3_CATEGORY = 10
#: the longest an auction of the generator runs (``expires - date_time``, ms): the
#: upper bound of the interval join of q4 and q9 (generate.py draws 1 s to 60 s)
MAX_AUCTION_MS = 60_000


# --- the runner contract (stdlib only: every system's runner imports this) -----------


def runner_parser(description: str | None) -> argparse.ArgumentParser:
    """The command line every ``run_<system>.py`` takes (see ``run.py``): ``--query
    --data --out --work [--parallelism 2] [--checkpoint-ms 1000]``; a runner adds its
    own options to it."""
    ap = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--query", required=True, choices=list(QUERIES))
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--checkpoint-ms", type=int, default=1000)
    return ap


def events_read(data: Path, query: str) -> int:
    """The rows of the tables ``query`` reads, from the data set's manifest."""
    rows = json.loads((data / "manifest.json").read_text())["rows"]
    return sum(int(rows[t]) for t in QUERIES[query].reads)

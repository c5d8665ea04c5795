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
q5     bid                       hot items: for every sliding window of 10 s every
                                 2 s, the auction(s) with the most bids in it (all
                                 ties): ``auction, num, window_start, window_end``
q7     bid                       highest bid: for every tumbling window of 10 s, the
                                 highest price: ``window_start, window_end, price``
q8     person, auction           monitor new users: the persons who registered and
                                 opened at least one auction (as ``seller``) in the
                                 same tumbling 10 s window: ``id, name,
                                 window_start`` (one row per person)
q12    bid                       processing-time tumbling windows of 10 s, bids per
                                 bidder: ``bidder, num, window_start, window_end``;
                                 windows depend on the wall clock, so only the total
                                 of ``num`` (every bid counted once) is compared
=====  ========================  =====================================================

Simplifications against the original Nexmark, the same for every system: q7
writes the window's highest price, not the whole bid that carried it; q8
writes a person once per window even when they opened several auctions.

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
        Query("q5", ("bid",), ("auction", "num", "window_start", "window_end")),
        Query("q7", ("bid",), ("window_start", "window_end", "price")),
        Query("q8", ("person", "auction"), ("id", "name", "window_start"), targeted=False),
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
    "q5": {"bid": ["auction", "date_time"]},
    "q7": {"bid": ["price", "date_time"]},
    "q8": {"person": ["id", "name", "date_time"], "auction": ["seller", "date_time"]},
    "q12": {"bid": ["bidder"]},
}

WINDOW_MS = 10_000
SLIDE_MS = 2_000
OUT_OF_ORDERNESS_MS = 1_000
Q1_RATE = 0.908
Q2_MODULUS = 123


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

"""Compare a system's query output with the expected result.

The expected result is computed here, in plain pyarrow and numpy from the
generator's Parquet files, by the definitions in ``queries.py``; the suite
checks lockgate's output against it and every peer's, so "equal" for a peer
means equal to lockgate's. Rows are compared as multisets (sorted on every
column); float columns after rounding to 6 decimals (``0.908 * price`` in cents
has 3); strings with a missing value equal to the empty string (CSV cannot tell
them apart). Usage::

    python bench/nexmark/check.py --query q5 --data DATA --out OUT
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from queries import (
    Q1_RATE,
    Q2_MODULUS,
    Q3_CATEGORY,
    Q3_STATES,
    QUERIES,
    SLIDE_MS,
    WINDOW_MS,
    Query,
)


def _read(data: Path, table: str) -> pa.Table:
    return pq.read_table(data / "parquet" / table)


def _floor(ts: np.ndarray, size: int) -> np.ndarray:
    return ts - np.mod(ts, size)


def _auction_bids(data: Path) -> pa.Table:
    """The pairs of an auction and one of its bids placed while it ran (``date_time``
    between the auction's ``date_time`` and ``expires``, both inclusive): the
    auction's ``id, category, date_time, expires`` and the bid's ``bidder, price,
    bid_date_time``."""
    auction = _read(data, "auction").select(["id", "category", "date_time", "expires"])
    bid = _read(data, "bid").select(["auction", "bidder", "price", "date_time"])
    bid = bid.rename_columns(["id", "bidder", "price", "bid_date_time"])
    pairs = auction.join(bid, "id", join_type="inner")
    t = pairs["bid_date_time"]
    running = pc.and_(pc.greater_equal(t, pairs["date_time"]), pc.less_equal(t, pairs["expires"]))
    return pairs.filter(running)


def _q4(data: Path) -> pa.Table:
    pairs = _auction_bids(data)
    final = pairs.group_by(["id", "category"]).aggregate([("price", "max")])
    per_category = final.group_by("category").aggregate(
        [("price_max", "sum"), ("price_max", "count")]
    )
    # integer sum, one division: what a float64 mean of integers below 2**53 gives
    total = per_category["price_max_sum"].to_numpy().astype(np.float64)
    count = per_category["price_max_count"].to_numpy()
    return pa.table({"category": per_category["category"], "final": total / count})


def _q9(data: Path) -> pa.Table:
    pairs = _auction_bids(data).sort_by(
        [
            ("id", "ascending"),
            ("price", "descending"),
            ("bid_date_time", "ascending"),
            ("bidder", "ascending"),
        ]
    )
    _, first = np.unique(pairs["id"].to_numpy(), return_index=True)
    return pairs.take(pa.array(first)).select(list(QUERIES["q9"].columns))


def expected(query: str, data: Path) -> pa.Table:
    """The result of ``query`` over the data set in ``data`` (rows in no order)."""
    if query == "q3":
        person = _read(data, "person").select(["id", "name", "city", "state"])
        person = person.filter(pc.is_in(person["state"], pa.array(Q3_STATES)))
        auction = _read(data, "auction").select(["id", "seller", "category"])
        auction = auction.filter(pc.equal(auction["category"], Q3_CATEGORY))
        sellers = person.rename_columns(["seller", "name", "city", "state"])
        return auction.join(sellers, "seller", join_type="inner").select(
            list(QUERIES[query].columns)
        )
    if query == "q4":
        return _q4(data)
    if query == "q9":
        return _q9(data)
    if query == "q8":
        person, auction = _read(data, "person"), _read(data, "auction")
        p_start = _floor(person.column("date_time").to_numpy(), WINDOW_MS)
        a_start = _floor(auction.column("date_time").to_numpy(), WINDOW_MS)
        sellers = pa.table({"id": auction.column("seller"), "window_start": a_start})
        sellers = sellers.group_by(["id", "window_start"]).aggregate([])
        persons = pa.table(
            {"id": person.column("id"), "name": person.column("name"), "window_start": p_start}
        )
        return persons.join(sellers, ["id", "window_start"], join_type="inner").select(
            list(QUERIES[query].columns)
        )
    bid = _read(data, "bid")
    if query == "q0":
        return bid
    if query == "q1":
        return pa.table(
            {
                "auction": bid["auction"],
                "bidder": bid["bidder"],
                "price": pc.multiply(bid["price"].cast(pa.float64()), Q1_RATE),
                "date_time": bid["date_time"],
                "extra": bid["extra"],
            }
        )
    if query == "q2":
        auction = bid["auction"].to_numpy()
        return bid.filter(pa.array(auction % Q2_MODULUS == 0)).select(["auction", "price"])
    if query == "q5":
        ts = bid["date_time"].to_numpy()
        auction = bid["auction"].to_numpy()
        last = _floor(ts, SLIDE_MS)
        starts = np.concatenate([last - k * SLIDE_MS for k in range(WINDOW_MS // SLIDE_MS)])
        counts = (
            pa.table({"auction": np.tile(auction, WINDOW_MS // SLIDE_MS), "window_start": starts})
            .group_by(["auction", "window_start"])
            .aggregate([([], "count_all")])
        )
        counts = counts.rename_columns(["auction", "window_start", "num"])
        best = counts.group_by("window_start").aggregate([("num", "max")])
        top = counts.join(best, "window_start")
        top = top.filter(pc.equal(top["num"], top["num_max"]))
        return pa.table(
            {
                "auction": top["auction"],
                "num": top["num"],
                "window_start": top["window_start"],
                "window_end": pc.add(top["window_start"], WINDOW_MS),
            }
        )
    if query == "q7":
        start = _floor(bid["date_time"].to_numpy(), WINDOW_MS)
        best = (
            pa.table({"window_start": start, "price": bid["price"]})
            .group_by("window_start")
            .aggregate([("price", "max")])
        )
        return pa.table(
            {
                "window_start": best["window_start"],
                "window_end": pc.add(best["window_start"], WINDOW_MS),
                "price": best["price_max"],
            }
        )
    if query == "q12":
        return pa.table({"num": pa.array([bid.num_rows], pa.int64())})
    raise ValueError(f"unknown query {query!r}")


def _files(out: Path) -> list[Path]:
    found = []
    for root, dirs, names in os.walk(out):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        found += [
            Path(root) / n
            for n in sorted(names)
            if not n.startswith(("_", ".")) and not n.endswith(".crc")
        ]
    return found


def read_output(out: Path, query: Query, types: pa.Schema) -> pa.Table:
    """Every result file under ``out`` (Parquet by its magic bytes, else headerless
    CSV in the query's column order), as one table with ``types``."""
    tables = []
    for path in _files(out):
        with open(path, "rb") as f:
            magic = f.read(4)
        if not magic:
            continue
        if magic == b"PAR1":
            t = pq.read_table(path)
            missing = [c for c in types.names if c not in t.column_names]
            if missing:
                raise ValueError(f"{path}: no column(s) {missing}; has {t.column_names}")
            t = t.select(types.names)
        else:
            t = pacsv.read_csv(
                path,
                read_options=pacsv.ReadOptions(column_names=list(query.columns)),
                convert_options=pacsv.ConvertOptions(
                    column_types={
                        f.name: (pa.float64() if f.name in query.floats else f.type) for f in types
                    },
                    strings_can_be_null=False,
                ),
            )
            t = t.select(types.names)
        tables.append(t.cast(types))
    if not tables:
        return types.empty_table()
    return pa.concat_tables(tables)


def _normal(t: pa.Table, query: Query) -> pa.Table:
    cols = {}
    for name in t.column_names:
        c = t[name]
        if pa.types.is_string(c.type) or pa.types.is_large_string(c.type):
            c = pc.fill_null(c, "")
        if name in query.floats:
            c = pc.round(c, 6)
        cols[name] = c
    t = pa.table(cols)
    return t.sort_by([(n, "ascending") for n in t.column_names])


def compare(query_name: str, data: Path, out: Path, want: pa.Table | None = None) -> dict:
    """``{"equal": bool, "rows": n, "expected_rows": m, "detail": "..."}``."""
    query = QUERIES[query_name]
    want = expected(query_name, data) if want is None else want
    if query.compare.startswith("total:"):
        column = query.compare.split(":", 1)[1]
        schema = pa.schema([(c, pa.int64()) for c in query.columns])
        got = read_output(out, query, schema)
        total = int(pc.sum(got[column]).as_py() or 0)
        need = int(want[column][0].as_py())
        return {
            "equal": total == need,
            "rows": got.num_rows,
            "expected_rows": None,
            "detail": f"sum of {column} = {total:,}, events = {need:,}",
        }
    want = want.select(list(query.columns))
    got = read_output(out, query, want.schema)
    a, b = _normal(got, query), _normal(want, query)
    if a.num_rows != b.num_rows:
        return {
            "equal": False,
            "rows": a.num_rows,
            "expected_rows": b.num_rows,
            "detail": f"{a.num_rows:,} rows, expected {b.num_rows:,}",
        }
    if a.equals(b):
        return {
            "equal": True,
            "rows": a.num_rows,
            "expected_rows": b.num_rows,
            "detail": f"{a.num_rows:,} rows equal",
        }
    for name in a.column_names:
        same = pc.equal(a[name], b[name]).to_numpy(zero_copy_only=False)
        if not same.all():
            i = int(np.argmin(same))
            return {
                "equal": False,
                "rows": a.num_rows,
                "expected_rows": b.num_rows,
                "detail": f"first difference in sorted row {i}: got "
                f"{a.slice(i, 1).to_pylist()[0]}, expected "
                f"{b.slice(i, 1).to_pylist()[0]}",
            }
    return {
        "equal": False,
        "rows": a.num_rows,
        "expected_rows": b.num_rows,
        "detail": "tables differ (types?)",
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--query", required=True, choices=sorted(QUERIES))
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    result = compare(args.query, args.data, args.out)
    print(json.dumps(result))
    sys.exit(0 if result["equal"] else 1)


if __name__ == "__main__":
    main()

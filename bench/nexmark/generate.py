"""A deterministic Nexmark event generator writing Parquet files (and a CSV copy).

Nexmark models an online auction: people register, open auctions and bid.
Events are numbered ``0 .. events-1``; in every block of 50 events the first is
a person, the next three are auctions and the other 46 are bids (Nexmark's
1:3:46 proportions). Event ``i`` happens at ``BASE_MS + i // 10`` milliseconds
(10,000 events per second of event time, Nexmark's default rate), so every
table is ordered by time.

* person ``id`` = 1000 + i // 50; auction ``id`` = 1000 + 3 * (i // 50) + (i % 50 - 1);
* a bid's ``auction`` is one of the 100 newest auctions nine times in ten
  (hot items), else any auction so far; its ``bidder`` likewise among persons;
* an auction's ``seller`` is one of the 10 newest persons nine times in ten,
  else any person so far (so q8 finds sellers who registered in the same window);
* ``price`` is ``round(100 * 10 ** (6 * u))`` cents for a uniform ``u``;
* an auction runs 1 s to 60 s: ``expires - date_time`` is drawn from
  ``[1000, MAX_AUCTION_MS)`` (``queries.py``; q4 and q9 rely on the bound);
* ``category`` is 10 to 14, a person's ``state`` one of six (q3 keeps three);
* ``date_time`` (and ``expires``) are epoch milliseconds (int64), so every
  system reads the same integers and derives its event-time column from them.

The same seed and event count always give the same files, whatever the
machine: chunk ``c`` of 1,000,000 events draws from ``default_rng([seed, c])``.
Rows are dealt to ``files`` part files per table (default 2, the suite's
parallelism) in runs of 1,000 consecutive events, so every part file covers the
whole time range in order and parallel readers advance in event time together.
One file per reader matters: a reader that went through its files one after the
other would restart at the first second with the second file, far behind its
watermark, and every system would drop those bids as late.

The CSV copy (no header, same columns, same order) exists for the peers that
cannot read Parquet: the ``apache-flink`` package ships no Parquet format.

Usage::

    python bench/nexmark/generate.py OUT_DIR [--events N] [--seed S] [--files F]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from queries import MAX_AUCTION_MS

BASE_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
EVENTS_PER_MS = 10
CHUNK = 1_000_000
RUN = 1000
FIRST_ID = 1000
TABLES = ("person", "auction", "bid")

SCHEMAS = {
    "person": pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("email_address", pa.string()),
            ("credit_card", pa.string()),
            ("city", pa.string()),
            ("state", pa.string()),
            ("date_time", pa.int64()),
            ("extra", pa.string()),
        ]
    ),
    "auction": pa.schema(
        [
            ("id", pa.int64()),
            ("item_name", pa.string()),
            ("description", pa.string()),
            ("initial_bid", pa.int64()),
            ("reserve", pa.int64()),
            ("date_time", pa.int64()),
            ("expires", pa.int64()),
            ("seller", pa.int64()),
            ("category", pa.int64()),
            ("extra", pa.string()),
        ]
    ),
    "bid": pa.schema(
        [
            ("auction", pa.int64()),
            ("bidder", pa.int64()),
            ("price", pa.int64()),
            ("channel", pa.string()),
            ("url", pa.string()),
            ("date_time", pa.int64()),
            ("extra", pa.string()),
        ]
    ),
}

_FIRST = [
    "Peter",
    "Paul",
    "Luke",
    "John",
    "Saul",
    "Vicky",
    "Kate",
    "Julie",
    "Sarah",
    "Deiter",
    "Walter",
    "Mei",
    "Aiko",
    "Chen",
    "Ines",
    "Omar",
]
_LAST = [
    "Shultz",
    "Abrams",
    "Spencer",
    "White",
    "Bartels",
    "Walton",
    "Smith",
    "Jones",
    "Noris",
    "Wang",
    "Sato",
    "Garcia",
    "Okafor",
    "Ivanova",
    "Haddad",
    "Kowalski",
]
_CITIES = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
]
_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
_CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]


def _pool(rng: np.random.Generator, size: int, make) -> pa.Array:  # type: ignore[no-untyped-def]
    return pa.array([make(rng, j) for j in range(size)], pa.string())


def _pools() -> dict[str, pa.Array]:
    """Fixed string pools (drawn from a fixed seed): values are picked by index."""
    rng = np.random.default_rng(20240101)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))

    def word(r: np.random.Generator, lo: int, hi: int) -> str:
        return "".join(r.choice(letters, int(r.integers(lo, hi + 1))))

    return {
        "name": _pool(rng, 256, lambda r, j: f"{_FIRST[j % 16]} {_LAST[j // 16]}"),
        "email": _pool(rng, 256, lambda r, j: f"{word(r, 4, 9)}@{word(r, 4, 9)}.com"),
        "card": _pool(
            rng, 256, lambda r, j: " ".join(f"{int(r.integers(0, 10000)):04d}" for _ in range(4))
        ),
        "city": pa.array(_CITIES, pa.string()),
        "state": pa.array(_STATES, pa.string()),
        "item": _pool(rng, 256, lambda r, j: word(r, 5, 12)),
        "description": _pool(
            rng, 256, lambda r, j: f"{word(r, 3, 8)} {word(r, 3, 8)} {word(r, 3, 8)}"
        ),
        "channel": pa.array(_CHANNELS + [f"channel-{k}" for k in range(4, 16)], pa.string()),
        "url": _pool(
            rng,
            256,
            lambda r, j: (
                f"https://www.nexmark.com/{word(r, 5, 8)}/"
                f"{word(r, 5, 8)}/item.htm?query=1&channel_id="
                f"{int(r.integers(0, 1 << 20))}"
            ),
        ),
        "extra": _pool(rng, 256, lambda r, j: word(r, 0, 20)),
    }


def _pick(rng: np.random.Generator, pool: pa.Array, n: int) -> pa.Array:
    return pool.take(pa.array(rng.integers(0, len(pool), n)))


def _recent(rng: np.random.Generator, newest: np.ndarray, window: int) -> np.ndarray:
    """Nine times in ten one of the ``window`` newest ids, else any id so far."""
    hot = newest - rng.integers(0, window, len(newest))
    cold = FIRST_ID + (rng.random(len(newest)) * (newest - FIRST_ID + 1)).astype(np.int64)
    return np.maximum(np.where(rng.random(len(newest)) < 0.9, hot, cold), FIRST_ID)


def chunk_tables(
    seed: int, chunk: int, events: int, pools: dict[str, pa.Array]
) -> dict[str, tuple[pa.Table, np.ndarray]]:
    """The rows of events ``[chunk * CHUNK, min(events, (chunk + 1) * CHUNK))``, per
    table, each with the event numbers of its rows."""
    rng = np.random.default_rng([seed, chunk])
    i = np.arange(chunk * CHUNK, min(events, (chunk + 1) * CHUNK), dtype=np.int64)
    epoch, offset = i // 50, i % 50
    ts = BASE_MS + i // EVENTS_PER_MS
    out: dict[str, tuple[pa.Table, np.ndarray]] = {}

    p = offset == 0
    n = int(p.sum())
    out["person"] = (
        pa.Table.from_arrays(
            [
                pa.array(FIRST_ID + epoch[p]),
                _pick(rng, pools["name"], n),
                _pick(rng, pools["email"], n),
                _pick(rng, pools["card"], n),
                _pick(rng, pools["city"], n),
                _pick(rng, pools["state"], n),
                pa.array(ts[p]),
                _pick(rng, pools["extra"], n),
            ],
            schema=SCHEMAS["person"],
        ),
        i[p],
    )

    a = (offset >= 1) & (offset <= 3)
    n = int(a.sum())
    initial = np.round(100 * 10 ** (3 * rng.random(n))).astype(np.int64)
    out["auction"] = (
        pa.Table.from_arrays(
            [
                pa.array(FIRST_ID + 3 * epoch[a] + offset[a] - 1),
                _pick(rng, pools["item"], n),
                _pick(rng, pools["description"], n),
                pa.array(initial),
                pa.array(initial + rng.integers(0, 10_000, n)),
                pa.array(ts[a]),
                pa.array(ts[a] + rng.integers(1_000, MAX_AUCTION_MS, n)),
                pa.array(_recent(rng, FIRST_ID + epoch[a], 10)),
                pa.array(10 + rng.integers(0, 5, n)),
                _pick(rng, pools["extra"], n),
            ],
            schema=SCHEMAS["auction"],
        ),
        i[a],
    )

    b = offset >= 4
    n = int(b.sum())
    out["bid"] = (
        pa.Table.from_arrays(
            [
                pa.array(_recent(rng, FIRST_ID + 3 * epoch[b] + 2, 100)),
                pa.array(_recent(rng, FIRST_ID + epoch[b], 100)),
                pa.array(np.round(100 * 10 ** (6 * rng.random(n))).astype(np.int64)),
                _pick(rng, pools["channel"], n),
                _pick(rng, pools["url"], n),
                pa.array(ts[b]),
                _pick(rng, pools["extra"], n),
            ],
            schema=SCHEMAS["bid"],
        ),
        i[b],
    )
    return out


def _chunks(seed: int, events: int) -> Iterator[dict[str, tuple[pa.Table, np.ndarray]]]:
    pools = _pools()
    for c in range((events + CHUNK - 1) // CHUNK):
        yield chunk_tables(seed, c, events, pools)


def generate(out: Path, events: int, seed: int = 42, files: int = 2) -> dict:
    """Write ``out/parquet/<table>/part-NNNNN.parquet`` and the same rows to
    ``out/csv/<table>/part-NNNNN.csv``; return (and store in ``out/manifest.json``)
    the row counts. An existing data set with the same parameters is kept."""
    if events < 50 or files < 1:
        raise ValueError(f"need at least 50 events and 1 file, got events={events}, files={files}")
    manifest_path = out / "manifest.json"
    params = {"events": events, "seed": seed, "files": files, "version": 1}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("params") == params:
            return manifest
    shutil.rmtree(out, ignore_errors=True)
    writers: dict[tuple[str, str, int], object] = {}
    counts = dict.fromkeys(TABLES, 0)
    started = time.perf_counter()
    for tables in _chunks(seed, events):
        for table, (rows, numbers) in tables.items():
            counts[table] += rows.num_rows
            part = (numbers // RUN) % files
            for f in range(files):
                piece = rows.filter(pa.array(part == f))
                for fmt in ("parquet", "csv"):
                    key = (fmt, table, f)
                    if key not in writers:
                        folder = out / fmt / table
                        folder.mkdir(parents=True, exist_ok=True)
                        path = folder / f"part-{f:05d}.{fmt}"
                        writers[key] = (
                            pq.ParquetWriter(path, SCHEMAS[table])
                            if fmt == "parquet"
                            else pacsv.CSVWriter(
                                path,
                                SCHEMAS[table],
                                write_options=pacsv.WriteOptions(include_header=False),
                            )
                        )
                    writers[key].write_table(piece)  # type: ignore[attr-defined]
    for w in writers.values():
        w.close()  # type: ignore[attr-defined]
    manifest = {
        "params": params,
        "rows": counts,
        "seconds": round(time.perf_counter() - started, 2),
    }
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return manifest


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("out", type=Path)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--files", type=int, default=2)
    args = ap.parse_args()
    print(json.dumps(generate(args.out, args.events, args.seed, args.files)))


if __name__ == "__main__":
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    main()

"""A seeded fault campaign: hundreds of injected failures, then count what was lost.

The job (issue 17's): ``SequenceSource(0, 600_000, rows_per_second=60_000)`` at
parallelism 2 -> ``map`` to ``{"k": x % 89, "v": x}`` -> ``key_by("k")`` -> a keyed
count in a ValueState -> an exactly-once ``PostgresSink`` and an exactly-once
``FileSink``. Checkpoints every 150 ms (unaligned or aligned), ``timeout`` 2 s,
``tolerable_failures`` 0, ``fixed_delay(attempts=18)``.

Each run injects one fault into each of its first ``--faults`` attempts (15), drawn
from a seeded generator among: an operator exception at a record (source or count),
a failing synchronous or asynchronous snapshot part, a failure inside an alignment, a
dropped acknowledgement (the checkpoint expires), a failure between pre-commit and
commit, and on Spark a killed Python worker. Then the job must finish on its own.

What is checked, per run and per sink (the table and the published part files): every
value 0..N-1 is there exactly once (``lost``, ``duplicated``), every key's counts are
exactly 1..n (``wrong``: a count that repeats, skips or exceeds the key's records),
and no prepared transaction of the run is left in PostgreSQL (``prepared_left``). A run
that does not finish counts as ``failed_runs`` with its error.

One JSON line per run, then one ``summary`` line with the totals (``faults_injected``
counts the faults scheduled in runs that started; ``faults_fired`` the restarts the
runs reported). Exit status 1 when anything was lost, duplicated, wrong or left, or a
run failed.

Usage:
    python bench/fault_campaign.py [--runs 34] [--executor local|spark|both]
        [--mode unaligned|aligned|both] [--seed 1] [--records 600000] [--rate 60000]
        [--faults 15] [--dsn postgresql://postgres@127.0.0.1:5432/test]

Needs PostgreSQL with max_prepared_transactions > 0 (``bash scripts/services.sh``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import lockgate as lg
from lockgate.connectors import FileSink, PostgresSink, SequenceSource
from lockgate.testing import (
    DropAcknowledgement,
    FailAtRecord,
    FailCommit,
    FailDuringAlignment,
    FailSnapshot,
    KillWorker,
    inject_faults,
)

KEYS = 89
PARALLELISM = 2
SOURCE, COUNT, PG, FILES = "numbers", "count", "pg", "files"


class KeyedCount(lg.KeyedProcessFunction):
    """Counts the records of each key: emits ``{k, v, n}`` with the key's count so far."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value: dict[str, int], ctx: Any) -> Any:
        n = self.count.value() + 1
        self.count.update(n)
        yield {"k": value["k"], "v": value["v"], "n": n}


def to_record(x: int) -> dict[str, int]:
    return {"k": x % KEYS, "v": x}


def draw_faults(rng: random.Random, count: int, *, spark: bool, records: int) -> list[Any]:
    """Fault ``i`` fires in attempt ``i``. Records are drawn so the fault is reached: a
    subtask of the count sees about ``records / parallelism`` records per attempt at most,
    and an attempt after a restore sees fewer, so the numbers stay in the first tenth."""
    kinds = [
        "record-source",
        "record-count",
        "snapshot-sync",
        "snapshot-async",
        "alignment",
        "drop-ack",
        "commit-pg",
        "commit-files",
    ]
    if spark:
        kinds.append("kill-worker")
    out = []
    low, high = 500, max(1_000, records // (PARALLELISM * 20))
    for attempt in range(count):
        kind = rng.choice(kinds)
        sub = rng.randrange(PARALLELISM)
        nth = rng.randint(1, 3)
        record = rng.randint(low, high)
        if kind == "record-source":
            out.append(FailAtRecord(SOURCE, record, attempt, sub))
        elif kind == "record-count":
            out.append(FailAtRecord(COUNT, record, attempt, sub))
        elif kind == "snapshot-sync":
            out.append(FailSnapshot(COUNT, nth, "sync", attempt, sub))
        elif kind == "snapshot-async":
            out.append(FailSnapshot(COUNT, nth, "async", attempt, sub))
        elif kind == "alignment":
            out.append(FailDuringAlignment(COUNT, attempt, sub))
        elif kind == "drop-ack":
            out.append(DropAcknowledgement(COUNT, nth, attempt, sub))
        elif kind == "commit-pg":
            out.append(FailCommit(PG, nth, attempt, sub))
        elif kind == "commit-files":
            out.append(FailCommit(FILES, nth, attempt, sub))
        else:
            out.append(KillWorker(COUNT, record, attempt, sub))
    return out


def query(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def check(rows: list[tuple[int, int, int]], records: int) -> dict[str, int]:
    """Lost, duplicated and wrong records of one sink's ``(k, v, n)`` rows.

    ``lost``: values 0..records-1 with no row; ``duplicated``: rows beyond the first of a
    value; ``wrong``: rows (one per value) whose key is not ``v % KEYS``, whose value is out
    of range, or whose count is outside 1..(the key's records) or equal to the count of
    another value of the key (a count that repeats, where a restore replayed state)."""
    seen = Counter(v for _, v, _ in rows)
    lost = sum(1 for v in range(records) if v not in seen)
    duplicated = sum(c - 1 for c in seen.values() if c > 1)
    first: dict[int, tuple[int, int]] = {}
    for k, v, n in rows:
        first.setdefault(v, (k, n))
    wrong = 0
    counts: dict[int, Counter[int]] = {}
    for v, (k, n) in first.items():
        if not 0 <= v < records or k != v % KEYS:
            wrong += 1
            continue
        counts.setdefault(k, Counter())[n] += 1
    for k, by_count in counts.items():
        want = len(range(k, records, KEYS))
        for n, c in by_count.items():
            wrong += c if not 1 <= n <= want else c - 1
    return {"lost": lost, "duplicated": duplicated, "wrong": wrong}


def file_rows(folder: str) -> list[tuple[int, int, int]]:
    out = []
    for path in glob.glob(os.path.join(folder, "part-*")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                out.append((r["k"], r["v"], r["n"]))
    return out


def run_once(
    index: int,
    executor_name: str,
    executor: Any,
    unaligned: bool,
    args: argparse.Namespace,
    rng: random.Random,
) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="lockgate-campaign-")
    os.chmod(work, 0o700)
    table = f"lg_campaign_{uuid.uuid4().hex[:10]}"
    prefix = f"lgcampaign-{uuid.uuid4().hex[:10]}"
    query(args.dsn, f"CREATE TABLE {table} (k bigint, v bigint, n bigint)")
    faults = draw_faults(rng, args.faults, spark=executor_name == "spark", records=args.records)
    line: dict[str, Any] = {
        "case": "run",
        "run": index,
        "executor": executor_name,
        "mode": "unaligned" if unaligned else "aligned",
        "faults_injected": len(faults),
        "fault_kinds": dict(
            Counter(
                type(f).__name__ + (f"/{f.phase}" if isinstance(f, FailSnapshot) else "")
                for f in faults
            )
        ),
        "cores": os.cpu_count(),
    }
    started = time.perf_counter()
    try:
        env = lg.StreamEnvironment(parallelism=PARALLELISM)
        env.enable_checkpointing(timedelta(milliseconds=150))
        cfg = env.checkpoint_config
        cfg.storage = os.path.join(work, "checkpoints")
        cfg.unaligned = unaligned
        cfg.timeout = timedelta(seconds=2)
        cfg.tolerable_failures = 0
        env.set_restart_strategy(
            lg.RestartStrategy.fixed_delay(attempts=args.faults + 3, delay=timedelta(0))
        )
        counts = (
            env.from_source(SequenceSource(0, args.records, rows_per_second=args.rate), name=SOURCE)
            .uid(SOURCE)
            .map(to_record, name="to record")
            .uid("to-record")
            .key_by("k")
            .process(KeyedCount(), name=COUNT)
            .uid(COUNT)
        )
        counts.sink_to(PostgresSink(args.dsn, table, transaction_prefix=prefix), name=PG).uid(PG)
        counts.sink_to(FileSink(os.path.join(work, "out"), format="jsonl"), name=FILES).uid(FILES)
        inject_faults(env, *faults)
        result = env.execute(f"fault campaign {index}", executor=executor)
        line["status"] = result.status.value
        line["faults_fired"] = result.attempts - 1
    except Exception as e:  # noqa: BLE001 - a failed run is a finding, reported
        line["status"] = "FAILED"
        line["error"] = f"{type(e).__name__}: {e}"[:2000]
        line["faults_fired"] = None
        traceback.print_exc(file=sys.stderr)
    line["seconds"] = round(time.perf_counter() - started, 2)
    pg = check([tuple(r) for r in query(args.dsn, f"SELECT k, v, n FROM {table}")], args.records)
    files = check(file_rows(os.path.join(work, "out")), args.records)
    left = query(
        args.dsn, "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, %s)", (prefix,)
    )
    for (gid,) in left:  # leave the server clean for the next run
        query(args.dsn, f"ROLLBACK PREPARED '{gid}'")
    query(args.dsn, f"DROP TABLE IF EXISTS {table}")
    if args.keep and line["status"] != "FINISHED":
        line["kept"] = work
    else:
        shutil.rmtree(work, ignore_errors=True)
    line.update({f"pg_{k}": v for k, v in pg.items()})
    line.update({f"files_{k}": v for k, v in files.items()})
    line["prepared_left"] = len(left)
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=34, help="runs (15 faults each)")
    parser.add_argument("--executor", choices=["local", "spark", "both"], default="both")
    parser.add_argument("--mode", choices=["unaligned", "aligned", "both"], default="both")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--rate", type=float, default=60_000)
    parser.add_argument("--faults", type=int, default=15, help="faults per run")
    parser.add_argument(
        "--only",
        type=int,
        action="append",
        default=None,
        help="run only these run indexes (the others' faults are still drawn, "
        "so a run is reproduced exactly); repeatable",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep a failed run's folder (checkpoints, output) and print it",
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get("LOCKGATE_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    args = parser.parse_args()
    if args.runs < 1 or args.faults < 0 or args.records < 1 or args.rate <= 0:
        parser.error("--runs, --records and --rate must be positive, --faults >= 0")
    executors = ["local", "spark"] if args.executor == "both" else [args.executor]
    modes = [True, False] if args.mode == "both" else [args.mode == "unaligned"]
    made: dict[str, Any] = {}

    def executor_for(name: str) -> Any:
        if name not in made:
            if name == "local":
                made[name] = lg.LocalExecutor()
            else:
                from lockgate.executor.spark import SparkExecutor

                made[name] = SparkExecutor(
                    master=os.environ.get("LOCKGATE_SPARK_MASTER", "local[2]"),
                    conf={"spark.ui.enabled": "false"},
                )
        return made[name]

    rng = random.Random(args.seed)
    totals: Counter[str] = Counter()
    failed_runs = 0
    started = time.perf_counter()
    for i in range(args.runs):
        name = executors[i % len(executors)]
        unaligned = modes[(i // len(executors)) % len(modes)]
        if args.only is not None and i not in args.only:
            draw_faults(rng, args.faults, spark=name == "spark", records=args.records)
            continue
        line = run_once(i, name, executor_for(name), unaligned, args, rng)
        print(json.dumps(line), flush=True)
        failed_runs += line["status"] != "FINISHED"
        totals["faults_injected"] += line["faults_injected"]
        totals["faults_fired"] += line["faults_fired"] or 0
        for key in ("lost", "duplicated", "wrong"):
            totals[key] += line[f"pg_{key}"] + line[f"files_{key}"]
        totals["prepared_left"] += line["prepared_left"]
    summary = {
        "case": "summary",
        "runs": args.runs if args.only is None else len(args.only),
        "failed_runs": failed_runs,
        **totals,
        "seconds": round(time.perf_counter() - started, 1),
        "executors": executors,
        "modes": ["unaligned" if m else "aligned" for m in modes],
        "cores": os.cpu_count(),
    }
    print(json.dumps(summary), flush=True)
    bad = (
        failed_runs
        or totals["lost"]
        or totals["duplicated"]
        or totals["wrong"]
        or totals["prepared_left"]
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

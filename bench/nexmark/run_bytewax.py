"""Bytewax runner of the Nexmark-style suite (see ``queries.py`` for the queries).

Runs with the peer's own environment (``bench/.peers/bytewax/bin/python``)::

    python bench/nexmark/run_bytewax.py --query q5 --data DATA --out OUT \
        --work WORK --parallelism 2 --checkpoint-ms 1000

Every query is an ordinary Bytewax dataflow built from ``bytewax.operators``
and ``bytewax.operators.windowing``:

* input: a ``FixedPartitionedSource`` with one partition per Parquet part file;
  each partition iterates the file's pyarrow record batches and emits one
  tuple per row; its resume state is the row offset, so a resumed execution
  continues after the last snapshotted row;
* output: a ``DynamicSink`` with one partition per worker, writing headerless
  CSV (``OUT/part-<worker>-<run>.csv``; in progress as ``OUT/_part-...``);
* event time: ``EventClock`` on ``date_time`` (epoch ms as UTC datetimes),
  ``wait_for_system_duration`` = 1 s, with its system-time getter held still
  (``frozen_now``) so the watermark is exactly "largest date_time - 1 s" (per
  key, Bytewax has no global watermark); windows aligned to the epoch, so a
  window's id times its offset is its start in epoch milliseconds; for the
  event-time queries (q5, q7, q8) the first process reads all part files;
* recovery: a ``RecoveryConfig`` over a recovery database folder in WORK
  (created with ``bytewax.recovery.init_db_dir``), epoch interval =
  ``--checkpoint-ms``; Bytewax snapshots input offsets and operator state at
  the end of every epoch.

The cluster is ``--parallelism`` worker processes with one worker each (the
Python operators hold the GIL, so two threads in one process would share one
core), started as children of this process through
``bytewax.testing.cluster_main`` and connected over localhost TCP. Each child
imports Bytewax and builds its dataflow, reports that it is ready, and waits;
``job_seconds`` runs from the moment the parent releases them until every
child has returned from ``cluster_main`` (all output files closed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from queries import (
    COLUMNS_READ,
    OUT_OF_ORDERNESS_MS,
    Q1_RATE,
    Q2_MODULUS,
    SLIDE_MS,
    WINDOW_MS,
    events_read,
    runner_parser,
)

SYSTEM = "bytewax"
OUT_OF_ORDERNESS = timedelta(milliseconds=OUT_OF_ORDERNESS_MS)
#: bid rows per input batch (one pyarrow record batch per ``next_batch``); the
#: other tables get batches covering the same span of event time (~0.45 s of
#: events per part file), so inputs read in lockstep stay within the 1 s bound
BATCH_ROWS = 2048
#: event-time queries whose part files are all read by the first process (see
#: ``ParquetSource.list_parts``)
ONE_READER = {"q5", "q7", "q8"}
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def batch_rows(data: Path, table: str) -> int:
    rows = json.loads((data / "manifest.json").read_text())["rows"]
    return max(1, round(BATCH_ROWS * int(rows[table]) / int(rows["bid"])))


def frozen_now() -> datetime:
    """The EventClock's "system time", held still: the watermark is then the
    largest ``date_time`` seen (per key) minus ``wait_for_system_duration``,
    pure event time, and does not run ahead of the data when the dataflow
    processes the recorded events slower than real time."""
    return EPOCH


def no_wakeup(close_time: datetime) -> None:
    """Windows close on later items or at end of input, not on system timers
    (event times of 2024 are all in the past as system times)."""
    return None


# --------------------------------------------------------------------------- #
# Dataflow (built in every worker process)
# --------------------------------------------------------------------------- #


def build_flow(  # noqa: C901 (one branch per query and reader kind, kept whole like the lockgate and Spark runners it mirrors)
    query: str,
    data: Path,
    out: Path,
    run_id: str,
    late: dict,
    reader: bool = True,
):
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    import pyarrow.parquet as pq
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    class ParquetPartition(StatefulSourcePartition):
        """One Parquet part file, one tuple per row; state = rows emitted."""

        def __init__(
            self, path: Path, columns: list[str], rows_per_batch: int, resume_row: int | None
        ):
            self._row = resume_row or 0
            self._file = pq.ParquetFile(path)
            meta = self._file.metadata
            first_group, skip = 0, self._row
            while (
                first_group < meta.num_row_groups and skip >= meta.row_group(first_group).num_rows
            ):
                skip -= meta.row_group(first_group).num_rows
                first_group += 1
            self._skip = skip
            self._batches = self._file.iter_batches(
                batch_size=rows_per_batch,
                columns=columns,
                row_groups=range(first_group, meta.num_row_groups),
                use_threads=False,
            )

        def next_batch(self) -> list[tuple]:
            batch = next(self._batches)  # StopIteration = end of this partition
            if self._skip:
                batch, self._skip = (
                    batch.slice(min(self._skip, batch.num_rows)),
                    max(0, self._skip - batch.num_rows),
                )
            rows = list(zip(*(column.to_pylist() for column in batch.columns)))
            self._row += len(rows)
            return rows

        def snapshot(self) -> int:
            return self._row

        def close(self) -> None:
            self._file.close()

    class ParquetSource(FixedPartitionedSource):
        def __init__(self, table: str, columns: list[str]):
            self._folder = data / "parquet" / table
            self._columns = columns
            self._batch_rows = batch_rows(data, table)

        def list_parts(self) -> list[str]:
            # Event-time queries: only the first process lists (and so reads)
            # the part files. Bytewax clocks are per key and a process reads
            # for a whole epoch before it waits for the others, so two reading
            # processes drift apart by seconds of event time and the bids of
            # the slower one come late; one process reading its partitions in
            # turn, one batch each, keeps every key's bids within the bound.
            if not reader:
                return []
            return sorted(p.name for p in self._folder.glob("*.parquet"))

        def build_part(self, step_id: str, for_part: str, resume_state: int | None):
            return ParquetPartition(
                self._folder / for_part, self._columns, self._batch_rows, resume_state
            )

    class CsvPartition(StatelessSinkPartition):
        def __init__(self, name: str):
            self._tmp, self._final = out / f"_{name}", out / name
            self._file = open(self._tmp, "w", newline="")  # noqa: SIM115
            self._writer = csv.writer(self._file)

        def write_batch(self, items: list[tuple]) -> None:
            self._writer.writerows(items)
            self._file.flush()  # in the file before the epoch can commit

        def close(self) -> None:
            self._file.close()
            os.replace(self._tmp, self._final)

    class CsvSink(DynamicSink):
        """Headerless CSV, one file per worker and execution."""

        def build(self, step_id: str, worker_index: int, worker_count: int):
            return CsvPartition(f"part-{worker_index:05d}-{run_id}.csv")

    def event_time(row: tuple) -> datetime:  # date_time is the last column read
        return EPOCH + timedelta(milliseconds=row[-1])

    def clock() -> win.EventClock:
        return win.EventClock(
            ts_getter=event_time,
            wait_for_system_duration=OUT_OF_ORDERNESS,
            now_getter=frozen_now,
            to_system_utc=no_wakeup,
        )

    def count_late(step_id: str, item) -> None:
        late[step_id] = late.get(step_id, 0) + 1

    sliding = win.SlidingWindower(
        length=timedelta(milliseconds=WINDOW_MS),
        offset=timedelta(milliseconds=SLIDE_MS),
        align_to=EPOCH,
    )
    tumbling = win.TumblingWindower(length=timedelta(milliseconds=WINDOW_MS), align_to=EPOCH)

    flow = Dataflow(f"nexmark_{query}")
    inputs = {
        table: op.input(f"{table}_in", flow, ParquetSource(table, columns))
        for table, columns in COLUMNS_READ[query].items()
    }
    sink = CsvSink()

    if query == "q0":
        result = inputs["bid"]
    elif query == "q1":
        result = op.map(
            "to_euro", inputs["bid"], lambda r: (r[0], r[1], Q1_RATE * r[2], r[3], r[4])
        )
    elif query == "q2":
        result = op.filter("selection", inputs["bid"], lambda r: r[0] % Q2_MODULUS == 0)
    elif query == "q5":
        counts = win.count_window("count", inputs["bid"], clock(), sliding, key=lambda r: str(r[0]))
        op.inspect("late_bids", counts.late, count_late)

        # second stage: every count of one window to one key (the window id),
        # folded into the window's maximum and the auctions that reach it
        per_window = op.map(
            "by_window", counts.down, lambda k_v: (str(k_v[1][0]), (int(k_v[0]), k_v[1][1]))
        )

        def keep_max(best: tuple, auction_num: tuple) -> tuple:
            auction, num = auction_num
            if num > best[0]:
                return (num, (auction,))
            if num == best[0]:
                return (num, best[1] + (auction,))
            return best

        hot = op.fold_final("max_per_window", per_window, lambda: (0, ()), keep_max)

        def hot_rows(wid_best: tuple) -> list[tuple]:
            start = int(wid_best[0]) * SLIDE_MS
            num, auctions = wid_best[1]
            return [(a, num, start, start + WINDOW_MS) for a in auctions]

        result = op.flat_map("hot_items", hot, hot_rows)
    elif query == "q7":
        everything = op.key_on("all", inputs["bid"], lambda _: "ALL")
        highest = win.max_window("highest", everything, clock(), tumbling, by=lambda r: r[0])
        op.inspect("late_bids", highest.late, count_late)
        result = op.map(
            "rows",
            highest.down,
            lambda k_w: (k_w[1][0] * WINDOW_MS, k_w[1][0] * WINDOW_MS + WINDOW_MS, k_w[1][1][0]),
        )
    elif query == "q8":
        persons = op.key_on("person_id", inputs["person"], lambda r: str(r[0]))
        sellers = op.key_on("seller_id", inputs["auction"], lambda r: str(r[0]))
        joined = win.join_window(
            "same_window",
            clock(),
            tumbling,
            persons,
            sellers,
            insert_mode="first",
            emit_mode="final",
        )
        op.inspect("late_rows", joined.late, count_late)

        def new_user(key_wid_pair: tuple) -> tuple | None:
            wid, (person, auction) = key_wid_pair[1]
            if person is None or auction is None:
                return None
            return (person[0], person[1], wid * WINDOW_MS)

        result = op.filter_map("new_users", joined.down, new_user)
    elif query == "q12":
        counts = win.count_window(
            "count", inputs["bid"], win.SystemClock(), tumbling, key=lambda r: str(r[0])
        )
        result = op.map(
            "rows",
            counts.down,
            lambda k_w: (
                int(k_w[0]),
                k_w[1][1],
                k_w[1][0] * WINDOW_MS,
                k_w[1][0] * WINDOW_MS + WINDOW_MS,
            ),
        )
    else:
        raise ValueError(f"unknown query {query!r}")

    op.output("out", result, sink)
    return flow


# --------------------------------------------------------------------------- #
# Worker process
# --------------------------------------------------------------------------- #


def worker_main(args: argparse.Namespace) -> None:
    """One process of the cluster: build the flow, say ready, wait, run."""
    from bytewax.recovery import RecoveryConfig
    from bytewax.testing import cluster_main

    late: dict[str, int] = {}
    reader = args.process_id == 0 or args.query not in ONE_READER
    flow = build_flow(args.query, args.data, args.out, args.run_id, late, reader)
    recovery = RecoveryConfig(args.work / "recovery", backup_interval=timedelta(0))
    control = os.fdopen(args.control_fd, "w")
    control.write("ready\n")
    control.flush()
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go from the parent")
    cluster_main(
        flow,
        args.addresses.split(";"),
        args.process_id,
        epoch_interval=timedelta(milliseconds=args.checkpoint_ms),
        recovery_config=recovery,
        worker_count_per_proc=args.threads,
    )
    control.write(json.dumps({"done": True, "late": late}) + "\n")
    control.flush()


# --------------------------------------------------------------------------- #
# Parent
# --------------------------------------------------------------------------- #


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def count_checkpoints(db_dir: Path) -> int | None:
    """Epochs snapshotted and committed by this execution: the recovery store's
    frontier (smallest over workers) minus the epoch the execution started at."""
    import sqlite3

    started, frontiers = None, []
    try:
        for path in sorted(db_dir.glob("part-*.sqlite3")):
            con = sqlite3.connect(path)
            try:
                row = con.execute(
                    "SELECT ex_num, resume_epoch FROM exs ORDER BY ex_num DESC LIMIT 1"
                ).fetchone()
                if row is not None:
                    started = row
                frontiers += [
                    r[0]
                    for r in con.execute(
                        "SELECT worker_frontier FROM fronts WHERE ex_num = "
                        "(SELECT MAX(ex_num) FROM fronts)"
                    )
                ]
            finally:
                con.close()
    except sqlite3.Error:
        return None
    if started is None or not frontiers:
        return None
    return max(0, min(frontiers) - started[1])


def keep_partial_output(out: Path) -> None:
    """Before resuming: keep what a failed execution wrote (the sink is
    at-least-once), without a row cut short by the failure."""
    for path in sorted(out.glob("_part-*.csv")):
        with open(path, "rb+") as f:
            data = f.read()
            f.truncate(data.rfind(b"\n") + 1)
        os.replace(path, out / path.name[1:])


def wait_for_reports(children: list) -> list[dict]:
    """The final report line of every worker process; fail as soon as one of
    them ends without one (the others are then killed by the caller)."""
    import selectors

    sel = selectors.DefaultSelector()
    for proc, control in children:
        sel.register(control, selectors.EVENT_READ, proc)
    reports: dict[int, dict] = {}
    while len(reports) < len(children):
        for key, _ in sel.select():
            proc = key.data
            line = key.fileobj.readline()
            if not line:
                raise RuntimeError(f"worker process {proc.pid} failed (exit code {proc.wait()})")
            reports[proc.pid] = json.loads(line)
            sel.unregister(key.fileobj)
    return list(reports.values())


def parent_main(args: argparse.Namespace) -> None:  # noqa: C901 (benchmark driver: argument checks, run, report, one after the other)
    from importlib.metadata import version

    events = events_read(args.data, args.query)
    processes = args.processes or args.parallelism
    if args.parallelism % processes:
        raise SystemExit("--parallelism must be a multiple of --processes")
    threads = args.parallelism // processes

    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    db_dir = args.work / "recovery"
    if not args.resume:
        shutil.rmtree(db_dir, ignore_errors=True)
    else:
        keep_partial_output(args.out)
    if not db_dir.exists():
        from bytewax.recovery import init_db_dir

        db_dir.mkdir(parents=True)
        init_db_dir(db_dir, args.parallelism)

    run_id = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
    addresses = ";".join(f"localhost:{p}" for p in free_ports(processes))
    children = []
    try:
        for pid in range(processes):
            r, w = os.pipe()
            argv = [
                sys.executable,
                os.path.abspath(__file__),
                "--worker",
                "--query",
                args.query,
                "--data",
                str(args.data),
                "--out",
                str(args.out),
                "--work",
                str(args.work),
                "--parallelism",
                str(args.parallelism),
                "--checkpoint-ms",
                str(args.checkpoint_ms),
                "--process-id",
                str(pid),
                "--threads",
                str(threads),
                "--addresses",
                addresses,
                "--run-id",
                run_id,
                "--control-fd",
                str(w),
            ]
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=sys.stderr, pass_fds=(w,), text=True
            )
            os.close(w)
            children.append((proc, os.fdopen(r)))
        for proc, control in children:
            if control.readline().strip() != "ready":
                raise RuntimeError(f"worker process {proc.pid} failed to start")

        t0 = time.perf_counter()
        for proc, _ in children:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = wait_for_reports(children)
        job_seconds = time.perf_counter() - t0

        late: dict[str, int] = {}
        for report in reports:
            for step, n in report["late"].items():
                late[step] = late.get(step, 0) + n
        for proc, _ in children:
            if proc.wait() != 0:
                raise RuntimeError(f"worker process {proc.pid} exited with {proc.returncode}")
    finally:
        for proc, _ in children:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    notes = []
    if late:
        notes.append("LATE ITEMS DROPPED: " + ", ".join(f"{k}={v}" for k, v in late.items()))
    if args.query in ONE_READER:
        notes.append(
            "event time: EventClock with its now_getter held still, so the "
            "watermark is the largest date_time - 1 s per key (Bytewax clocks are "
            "per key; with the default wall-clock getter the watermark runs ahead "
            "whenever Bytewax is slower than real time and bids are dropped as "
            "late); windows close on a later item of the key or at end of input; "
            "the first process reads all part files (a second reading process "
            "drifts seconds ahead within an epoch), the window work is spread "
            "over both workers by key"
        )
    if args.query == "q5":
        notes.append(
            "q5 = count_window per auction (sliding 10 s / 2 s), then the counts "
            "keyed by window and folded to the maximum with ties (fold_final): "
            "with no global watermark nothing tells when every auction's count "
            "of a window is in, so the maxima come out at end of input"
        )
    if args.query == "q7":
        notes.append(
            "global maximum: every bid keyed to one key ('ALL'), so one worker does the window work"
        )
    if args.query == "q12":
        notes.append("SystemClock closes all windows at end of input: every bid counted once")
    mode = (
        f"{processes} worker processes x {threads} worker thread(s) "
        "(bytewax.testing.cluster_main, children of the runner, localhost TCP)"
    )
    print(
        json.dumps(
            {
                "system": SYSTEM,
                "version": version("bytewax"),
                "query": args.query,
                "events": events,
                "job_seconds": round(job_seconds, 3),
                "input": "parquet",
                "checkpointing": (
                    "Bytewax recovery: RecoveryConfig over a SQLite recovery db in "
                    f"WORK ({args.parallelism} partitions, init_db_dir), epoch interval "
                    f"{args.checkpoint_ms} ms, input offsets and operator state "
                    "snapshotted at every epoch end (state exactly-once; the CSV "
                    "DynamicSink is at-least-once on resume)"
                ),
                "checkpoints": count_checkpoints(db_dir),
                "settings": (
                    f"{mode}, measured faster than 1 process x 2 threads (GIL); input "
                    f"batches of {BATCH_ROWS} bid rows (same event-time span for other "
                    "tables), one tuple per row; only the query's columns read; "
                    "EventClock wait_for_system_duration 1 s, windows aligned to the "
                    "epoch"
                ),
                "note": "; ".join(notes),
            }
        )
    )


#: the join queries of issue 23 have no Bytewax version (Flink SQL and Spark are their peers)
NOT_WRITTEN = {
    q: "not written for Bytewax: the suite's join queries (q3, q4, q9) compare with "
    "Flink SQL and Spark Structured Streaming only"
    for q in ("q3", "q4", "q9")
}


def main() -> None:
    ap = runner_parser(__doc__)
    ap.add_argument(
        "--processes",
        type=int,
        default=None,
        help="worker processes (default: --parallelism, one worker each)",
    )
    ap.add_argument(
        "--resume", action="store_true", help="keep WORK/recovery and resume from its last snapshot"
    )
    # internal: a worker process of the cluster
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--addresses", help=argparse.SUPPRESS)
    ap.add_argument("--run-id", help=argparse.SUPPRESS)
    ap.add_argument("--control-fd", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.data, args.out, args.work = (p.resolve() for p in (args.data, args.out, args.work))
    if args.query in NOT_WRITTEN:
        print(
            json.dumps(
                {"system": "bytewax", "query": args.query, "not_supported": NOT_WRITTEN[args.query]}
            )
        )
        return
    if args.worker:
        worker_main(args)
    else:
        parent_main(args)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)

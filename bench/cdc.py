"""PostgreSQL change data capture, initial snapshot and streaming: lockgate's
``PostgresCdcSource`` side by side with Debezium's embedded PostgreSQL connector, one JSON
line per case, same table, same machine, one run.

The table (made afresh, with the same content, before each system; ``VACUUM (FREEZE,
ANALYZE)`` after the load so no system pays for hint bits the other set)::

    CREATE TABLE public.lgbench_cdc_<run> (
        id bigint PRIMARY KEY, name text, amount numeric(12,2), updated timestamptz,
        payload jsonb)

with ``--rows`` rows (ids 1..rows; ``payload`` about 80 bytes of JSON). Default replica
identity (the primary key), as most CDC deployments run.

Each case has two phases, timed in the same job (the consumer runs through both):

1. **snapshot**: from the job's start (lockgate: ``env.execute_async``; Debezium: the
   engine's ``run``, after the JVM started) to the moment the consumer has counted every
   row of the table as a snapshot row (lockgate: rows with a null ``_lsn``; Debezium:
   ``op = "r"``). Slot and publication creation are included for both.
2. **stream**: once the snapshot is counted, a writer (this process, one connection)
   applies ``--changes`` row changes in transactions of ``--txn-changes`` changes: 60 %
   updates (``amount``, ``updated`` and ``name`` of a range of existing ids), 20 % deletes,
   20 % inserts of new ids, each as one set-based statement. Timed from the writer's first
   statement to the moment the consumer has counted every change (lockgate: rows with an
   ``_lsn``, one ``+U``/``-D``/``+I`` per change with the default replica identity;
   Debezium: records with ``op`` ``u``/``d``/``c``, tombstones off). ``writer_seconds`` is
   the writer's own time (to its last commit): a consumer that finishes about then kept up
   with the writer and its rate is a lower bound (``writer_bound`` is true when the
   consumer saw the last change within 10 % of the writer's time after its last commit).

A case's line: ``{"case": "<system>-<phase>", "system", "rows", "seconds", "rows_per_s",
"cores", ...}``, the two phases of a system as two lines; ``verified`` is true when the
consumer counted exactly the rows and changes written (no more: a duplicate would show).

=================  ============================================================
system             how
=================  ============================================================
lockgate           ``PostgresCdcSource(dsn, [table], slot=..., publication=...,
                   snapshot="initial")`` (chunks of ``--chunk-size`` rows by
                   primary-key range, ``batch_size`` ``--batch-size``) ->
                   a counting sink (parallelism 1, changelog-accepting, counts
                   ``_lsn`` nulls and non-nulls per batch and records the time
                   the totals are reached), ``--parallelism`` 2, checkpoints
                   every ``--checkpoint-ms`` (1 s; the stream starts once the
                   snapshot's chunks are in a completed checkpoint), local
                   executor (threads of this process); ``--executors
                   local,spark`` adds Spark ``local[2]`` (session and workers
                   started before the timing). The job is cancelled once every
                   change is counted.
debezium           ``debezium-embedded`` + ``debezium-connector-postgres``
                   3.6.1.Final (``debezium-bom``), Java 17, in its own JVM
                   (``bench/cdc_debezium/Harness.java``): ``plugin.name=pgoutput``,
                   ``snapshot.mode=initial``, offsets in a file
                   (``FileOffsetBackingStore``, flushed every
                   ``--checkpoint-ms``), ``publication.autocreate.mode=filtered``,
                   ``tombstones.on.delete=false``, ``max.batch.size`` =
                   ``--batch-size``, ``max.queue.size`` = 4 x that, records in the
                   engine's Connect format (SourceRecords: no JSON/Avro
                   serialisation) counted by their envelope's ``op`` in a
                   ``ChangeConsumer`` that marks each batch processed.
=================  ============================================================

Both read the same table with their own slot and publication (``lgbench_cdc_<run>_<system>``),
created by the system itself and dropped by this script at the case's end (only those: the
names carry the run's id and are checked to be absent before the run).

What each side produces differs a little: lockgate emits typed Arrow columns
(``decimal128(12,2)``, ``timestamp[us, UTC]``, JSON text, plus ``_table``/``_lsn``/
``_commit_time``); Debezium emits Connect Structs (``BigDecimal`` with
``decimal.handling.mode=precise``, ISO strings for ``timestamptz``, JSON text) with its
envelope (``before``/``after``/``source``/``op``/``ts_ms``). Neither writes anywhere.

Usage (PostgreSQL with ``wal_level=logical`` on 127.0.0.1:5433 from ``bash
scripts/services.sh``; the Debezium jars from Maven Central with ``bash
bench/cdc_debezium/fetch.sh``, which this script runs when needed, cached under
``~/.cache/lockgate/bench-cdc-debezium``)::

    .venv/bin/python bench/cdc.py [--rows 1000000] [--changes 1000000]
                                  [--txn-changes 50000] [--systems lockgate,debezium]
                                  [--executors local] [--parallelism 2]
                                  [--chunk-size 10000] [--batch-size 10000]
                                  [--checkpoint-ms 1000] [--dsn DSN]
                                  [--profile lockgate.pstats]

``--profile FILE``: the lockgate case runs under cProfile (every thread of the local
executor, merged into FILE; the top functions by own time are printed to stderr). Its
figures are then slowed by the profiler: profile in a separate run.
``--debezium-log FILE`` keeps the engine's log.

Results (one run, 2026-12-06 11:52 UTC, after the stream's compiled pass, ``--rows 1000000
--changes 1000000 --txn-changes 50000 --systems lockgate,debezium --executors
local,spark``; 2 cores, nothing else running: load average 1.0 to 1.9)::

    case                       seconds   rows/s   CPU s   writer s  lag after last commit
    lockgate-local-snapshot      6.29   158,989    5.5
    lockgate-spark-snapshot      3.77   265,560     -
    debezium-snapshot           20.50    48,776   28.9
    lockgate-local-stream        9.42   106,198    6.2      8.1        1.3 s
    lockgate-spark-stream        9.06   110,364     -       6.5        2.5 s
    debezium-stream             30.07    33,260   37.8      9.0       21.1 s

Snapshot: lockgate 3.3x (local) / 5.4x (Spark) Debezium. Stream: 3.2x (local) / 3.3x
(Spark); lockgate's stream is bound by the writer (it is done 1.3 to 2.5 s after the
writer's last commit, Debezium 21 s after). Every count was exact (``verified``).

The run before the compiled pass (same command, the machine shared with a test suite,
load 4.6 to 6.1): snapshot 113,885 / 103,509 rows/s against Debezium's 24,667; stream
22,115 / 29,916 changes/s against 25,243 (0.88x / 1.19x), the pgoutput decoder's Python
calls the limit (below).

What limits each side:

* lockgate snapshot: chunks of 10,000 rows read by two subtasks, rows arrive as text and
  become Arrow columns in bulk: 5.7 CPU s per million rows in this process, the rest is
  the server's (the two ``SELECT``s run in parallel).
* lockgate stream, before the compiled pass (``postgres_cdc/change_kernels.py`` now walks
  a read's Insert/Update/Delete messages in one numba pass and builds each column from one
  buffer: about 1 us per change in 50,000-change transactions): one subtask reads the
  slot (the WAL is one ordered stream), so the second core does not help, and its
  per-change Python work was the limit (cProfile of a
  100,000-change run, shares of ``CdcReader._read_stream``): the pgoutput decoder, 53 %
  (``pgoutput._Reader.take`` / ``int32`` / ``tuple_data``: about 21 Python calls per
  change; decoding alone measured 23.7 us per update of this table, so at most about
  42,000 changes/s, where an inlined loop over the same bytes with ``int.from_bytes`` /
  ``struct.unpack_from`` took 4.5 us), the frame reads, 22 % (``ReplicationStream.read``:
  a ``get_copy_data`` per frame, and ``decode_frame`` copies each payload twice), the
  reader's per-change bookkeeping, 16 % (``_handle``, ``_change``, ``_add``, ``_plain``),
  and the Arrow batches, 6 % (``_emit``, ``types.batch_of``). On the local executor the
  reader shares the GIL with the sink, the checkpoints and the writer's client (0.66
  cores busy, with other work on both cores); on Spark it has a process of its own,
  hence the faster stream. The first change reaches the sink 2.5 to
  2.7 s after the writer starts: the stream waits for a completed checkpoint of the
  snapshot's chunks (1 s interval), reads the slot for their markers, then reads it again
  from the start (by design, docs/postgres_cdc.md).
* Debezium snapshot: one thread per table (``snapshot.max.threads`` parallelises tables
  only), and JIT warm-up: its log shows about 15,000 rows/s over the first 300,000 rows and
  about 43,000 rows/s later. Its stream: about 37 CPU us per change across the JVM's
  threads (decoding, Connect Structs, the engine's queue and batches).

Not measured here: repeated runs; a catch-up phase (changes written before the consumer
streams) apart from a concurrent writer; ``REPLICA IDENTITY FULL`` (``-U`` rows too);
several tables; Debezium's incremental (chunked, signal-driven) snapshot; the CPU of
lockgate's Spark workers.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_DSN = os.environ.get(
    "LOCKGATE_TEST_CDC_DSN", "host=127.0.0.1 port=5433 user=postgres dbname=test"
)
DEBEZIUM_VERSION = "3.6.1.Final"
TABLE_COLUMNS = (
    "id bigint PRIMARY KEY, name text, amount numeric(12,2), updated timestamptz, payload jsonb"
)
ROW_SELECT = (
    "SELECT g, 'customer-' || g, (g %% 100000) / 100.0, "
    "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', "
    "jsonb_build_object('k', g, 'tag', md5(g::text), 'n', g %% 7, 'ok', g %% 2 = 0) "
    "FROM generate_series(%s::bigint, %s::bigint) g"
)
POLL_S = 0.005


# -- the table and the writer ----------------------------------------------------------


def sql(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def make_table(dsn: str, table: str, rows: int) -> float:
    """The table afresh with ``rows`` rows; the seconds it took."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} ({TABLE_COLUMNS})")
        step = 200_000
        for lo in range(1, rows + 1, step):
            conn.execute(f"INSERT INTO {table} {ROW_SELECT}", (lo, min(rows, lo + step - 1)))
        conn.execute(f"VACUUM (FREEZE, ANALYZE) {table}")
    return time.perf_counter() - started


def change_plan(rows: int, changes: int, txn_changes: int) -> list[tuple[str, int, int]]:
    """The writer's statements ``(kind, lo, hi)`` (ids inclusive), grouped by transaction
    in order: 60 % updates of ids from 1 up, 20 % deletes of ids from ``rows`` down, 20 %
    inserts of new ids above ``rows``; every id changed at most once."""
    updates = changes * 6 // 10
    deletes = changes * 2 // 10
    inserts = changes - updates - deletes
    if updates + deletes > rows:
        raise SystemExit(
            f"--changes {changes} needs at least {updates + deletes} rows (60 % updates and "
            f"20 % deletes of distinct ids), --rows is {rows}"
        )
    txns = max(1, -(-changes // txn_changes))
    plan = []
    for t in range(txns):

        def part(total: int, t: int = t) -> tuple[int, int]:
            return total * t // txns, total * (t + 1) // txns

        u0, u1 = part(updates)
        d0, d1 = part(deletes)
        i0, i1 = part(inserts)
        plan.append(("txn", t, t))
        if u1 > u0:
            plan.append(("update", u0 + 1, u1))
        if d1 > d0:
            plan.append(("delete", rows - d1 + 1, rows - d0))
        if i1 > i0:
            plan.append(("insert", rows + i0 + 1, rows + i1))
    return plan


def write_changes(dsn: str, table: str, rows: int, changes: int, txn_changes: int) -> dict:
    """Apply the change plan; wall-clock times of the first statement and last commit."""
    plan = change_plan(rows, changes, txn_changes)
    statements = {
        "update": f"UPDATE {table} SET amount = amount + 1, updated = now(), "
        "name = name || '+' WHERE id BETWEEN %s AND %s",
        "delete": f"DELETE FROM {table} WHERE id BETWEEN %s AND %s",
        "insert": f"INSERT INTO {table} {ROW_SELECT}",
    }
    with psycopg.connect(dsn) as conn:  # not autocommit: one transaction per "txn"
        first = time.time()
        done = 0
        for kind, lo, hi in plan:
            if kind == "txn":
                if lo > 0:
                    conn.commit()
                continue
            cur = conn.execute(statements[kind], (lo, hi))
            if cur.rowcount != hi - lo + 1:
                raise SystemExit(f"the writer's {kind} of ids {lo}..{hi} hit {cur.rowcount} rows")
            done += cur.rowcount
        conn.commit()
        last = time.time()
    if done != changes:
        raise SystemExit(f"the writer applied {done} changes, not {changes}")
    return {
        "first": first,
        "last_commit": last,
        "transactions": sum(1 for k, _, _ in plan if k == "txn"),
    }


# -- lockgate --------------------------------------------------------------------------


def counting_sink(progress: str, snapshot_rows: int, stream_rows: int) -> Any:
    """A sink that counts snapshot rows (null ``_lsn``) and streamed changes and appends
    ``<phase> <time.time()> <count> <time.process_time()>`` to ``progress`` when a total
    is reached (and
    ``final <snapshot> <stream>`` when closed, ``excess ...`` if more arrive)."""
    from lockgate.connectors.base import Sink, SinkWriter

    class _Writer(SinkWriter):
        def __init__(self) -> None:
            self.snapshot = 0
            self.stream = 0
            self.excess = False

        def _note(self, line: str) -> None:
            with open(progress, "a") as f:
                f.write(line + "\n")

        def write(self, batch: Any) -> None:
            n = batch.num_rows
            nulls = batch.column("_lsn").null_count
            if nulls:
                before = self.snapshot
                self.snapshot += nulls
                if before < snapshot_rows <= self.snapshot:
                    self._note(f"snapshot {time.time()} {self.snapshot} {time.process_time()}")
            if n > nulls:
                if self.stream == 0:
                    self._note(f"stream_first {time.time()}")
                before = self.stream
                self.stream += n - nulls
                if before < stream_rows <= self.stream:
                    self._note(f"stream {time.time()} {self.stream} {time.process_time()}")
            if not self.excess and (self.snapshot > snapshot_rows or self.stream > stream_rows):
                self.excess = True
                self._note(f"excess {self.snapshot} {self.stream}")

        def close(self) -> None:
            self._note(f"final {self.snapshot} {self.stream}")

    class CountingSink(Sink):
        default_name = "count"

        @property
        def accepts_changes(self) -> bool:
            return True

        def create_writer(self, ctx: Any) -> SinkWriter:
            return _Writer()

    return CountingSink()


def read_progress(path: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if parts:
                    out[parts[0]] = parts[1:]
    return out


def wait_progress(path: str, phase: str, client: Any, timeout_s: float) -> float:
    """The time the sink reached ``phase``'s total (bounded polling of its file; a job
    that ends first raises its error)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = read_progress(path).get(phase)
        if got:
            return float(got[0])
        if client.done():
            client.wait()
            raise SystemExit(f"the lockgate job ended before its sink counted the {phase}")
        time.sleep(POLL_S)
    raise SystemExit(
        f"the lockgate sink did not count the whole {phase} within {timeout_s:.0f} s "
        f"(progress: {read_progress(path)})"
    )


class ThreadProfiles:
    """cProfile in every thread started while active (the local executor's subtasks)."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []
        self.lock = threading.Lock()

    def _start(self, *_: Any) -> None:
        p = cProfile.Profile()  # enable() replaces this thread's hook (sys.setprofile)
        with self.lock:
            self.profiles.append(p)
        p.enable()

    def __enter__(self) -> ThreadProfiles:
        threading.setprofile(self._start)
        return self

    def __exit__(self, *_: Any) -> None:
        threading.setprofile(None)

    def save(self, path: str) -> None:
        stats = None
        for p in self.profiles:
            try:
                s = pstats.Stats(p)
            except TypeError:
                continue  # a thread that recorded nothing
            if stats is None:
                stats = s
            else:
                stats.add(s)
        if stats is None:
            print("the profile recorded nothing", file=sys.stderr)
            return
        stats.dump_stats(path)
        stats.stream = sys.stderr  # type: ignore[attr-defined]
        stats.sort_stats("tottime").print_stats(30)


_SPARK: dict[int, Any] = {}


def _executor(name: str, parallelism: int) -> Any:
    import lockgate as lg

    if name == "local":
        return lg.LocalExecutor()
    if parallelism not in _SPARK:
        from lockgate.executor.spark import SparkExecutor

        ex = SparkExecutor(master=f"local[{parallelism}]", conf={"spark.ui.enabled": "false"})
        ex.warm_up()
        _SPARK[parallelism] = ex
    return _SPARK[parallelism]


def run_lockgate(args: argparse.Namespace, table: str, names: str, executor_name: str) -> dict:
    import lockgate as lg
    from lockgate.connectors.postgres.cdc import PostgresCdcSource

    executor = _executor(executor_name, args.parallelism)
    work = tempfile.mkdtemp(prefix="lockgate-bench-cdc-")
    progress = os.path.join(work, "progress")
    env = lg.StreamEnvironment(parallelism=args.parallelism)
    env.enable_checkpointing(args.checkpoint_ms, mode=lg.CheckpointingMode.EXACTLY_ONCE)
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(0, 0))  # a failure ends the run
    env.checkpoint_config.storage = os.path.join(work, "checkpoints")
    source = PostgresCdcSource(
        args.dsn,
        [f"public.{table}"],
        slot=names,
        publication=names,
        snapshot="initial",
        chunk_size=args.chunk_size,
        batch_size=args.batch_size,
    )
    (
        env.from_source(source, name="cdc")
        .uid("cdc")
        .sink_to(counting_sink(progress, args.rows, args.changes), name="count")
        .uid("count")
        .set_parallelism(1)
    )
    profiles = ThreadProfiles() if args.profile and executor_name == "local" else None
    if profiles is not None:
        profiles.__enter__()
    try:
        start, start_cpu = time.time(), time.process_time()
        client = env.execute_async("cdc-bench", executor=executor)
        snapshot_done = wait_progress(progress, "snapshot", client, args.timeout)
        writer_cpu = time.process_time()
        writer = write_changes(args.dsn, table, args.rows, args.changes, args.txn_changes)
        stream_done = wait_progress(progress, "stream", client, args.timeout)
        stream_first = float(read_progress(progress)["stream_first"][0])
        checkpoints = len([c for c in client.checkpoints() if c.status == "completed"])
        client.cancel()
        try:
            client.wait(timeout=120)
        except Exception as e:  # noqa: BLE001 - a cancelled job may report its cancel
            print(f"lockgate job after cancel: {type(e).__name__}: {e}", file=sys.stderr)
    finally:
        if profiles is not None:
            profiles.__exit__()
    if profiles is not None:
        profiles.save(args.profile)
    final = read_progress(progress)
    shutil.rmtree(work, ignore_errors=True)
    cpu = None
    if executor_name == "local":  # the sink ran in this process: its CPU clock is ours
        cpu = (
            float(final["snapshot"][2]) - start_cpu,
            float(final["stream"][2]) - writer_cpu,
        )
    counted = final.get("final") or ["?", "?"]
    verified = "excess" not in final and counted == [str(args.rows), str(args.changes)]
    return {
        "system": "lockgate",
        "executor": type(executor).__name__,
        "config": f"PostgresCdcSource(chunk_size={args.chunk_size}, "
        f"batch_size={args.batch_size}), parallelism {args.parallelism}, counting sink",
        "start": start,
        "snapshot_done": snapshot_done,
        "writer": writer,
        "stream_done": stream_done,
        "stream_first": stream_first,
        "counted": counted,
        "cpu": cpu,
        "cpu_of": "this process (every thread: the job's, the writer's client, the script)"
        if cpu
        else None,
        "verified": verified,
        "checkpoints_completed": checkpoints,
        "profiled": profiles is not None,
    }


# -- Debezium --------------------------------------------------------------------------


def debezium_home() -> Path:
    done = subprocess.run(
        ["bash", str(HERE / "cdc_debezium" / "fetch.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench/cdc_debezium/fetch.sh failed: {done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def debezium_properties(args: argparse.Namespace, table: str, names: str, work: Path) -> dict:
    info = psycopg.conninfo.conninfo_to_dict(args.dsn)
    return {
        "name": f"lgbench-{names}",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(work / "offsets.dat"),
        "offset.flush.interval.ms": str(args.checkpoint_ms),
        "database.hostname": str(info.get("host", "127.0.0.1")),
        "database.port": str(info.get("port", "5432")),
        "database.user": str(info.get("user", "postgres")),
        "database.password": str(info.get("password", "")),
        "database.dbname": str(info.get("dbname", "test")),
        "topic.prefix": "lgbench",
        "plugin.name": "pgoutput",
        "slot.name": names,
        "publication.name": names,
        "publication.autocreate.mode": "filtered",
        "table.include.list": f"public.{table}",
        "snapshot.mode": "initial",
        "tombstones.on.delete": "false",
        "max.batch.size": str(args.batch_size),
        "max.queue.size": str(4 * args.batch_size),
    }


def run_debezium(args: argparse.Namespace, table: str, names: str) -> dict:
    home = debezium_home()
    work = Path(tempfile.mkdtemp(prefix="lockgate-bench-cdc-debezium-"))
    props = work / "engine.properties"
    with open(props, "w") as f:
        for k, v in debezium_properties(args, table, names, work).items():
            f.write(f"{k}={v}\n")  # none of these values needs escaping
    log_path = work / "debezium.log"
    cmd = [
        "java",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
        "-cp",
        f"{home / 'classes'}:{home / 'lib'}/*",
        "Harness",
        str(props),
        str(args.rows),
        str(args.changes),
        str(int(args.timeout)),
    ]
    events: queue.Queue[dict | None] = queue.Queue()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.strip()
                if line.startswith("{"):
                    events.put(json.loads(line))
            events.put(None)

        threading.Thread(target=pump, daemon=True).start()

        def wait_event(name: str) -> dict:
            deadline = time.monotonic() + args.timeout + 90
            while True:
                try:
                    event = events.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    event = None
                if event is None:
                    proc.kill()
                    tail = log_path.read_text()[-3000:]
                    raise SystemExit(f"the Debezium harness ended before '{name}':\n{tail}")
                if event["event"] == "end" and name != "end":
                    tail = log_path.read_text()[-3000:]
                    raise SystemExit(f"the Debezium harness ended before '{name}': {event}\n{tail}")
                if event["event"] == name:
                    return event

        started = wait_event("start")
        snapped = wait_event("snapshot_done")
        start, snapshot_done = started["t_us"] / 1e6, snapped["t_us"] / 1e6
        writer = write_changes(args.dsn, table, args.rows, args.changes, args.txn_changes)
        stream_first = wait_event("stream_first")["t_us"] / 1e6
        streamed = wait_event("stream_done")
        stream_done = streamed["t_us"] / 1e6
        end = wait_event("end")
        proc.wait(timeout=120)
    if args.debezium_log:
        shutil.copyfile(log_path, args.debezium_log)
    shutil.rmtree(work, ignore_errors=True)
    return {
        "system": "debezium",
        "executor": "embedded engine, one JVM",
        "config": f"debezium-embedded + debezium-connector-postgres {DEBEZIUM_VERSION}, pgoutput, "
        f"max.batch.size={args.batch_size}, counting ChangeConsumer (Connect format)",
        "start": start,
        "snapshot_done": snapshot_done,
        "writer": writer,
        "stream_done": stream_done,
        "stream_first": stream_first,
        "counted": [str(end["snapshot"]), str(end["stream"])],
        # the stream phase's CPU from the snapshot's end (the JVM idles until the writer)
        "cpu": (snapped["cpu_s"] - started["cpu_s"], streamed["cpu_s"] - snapped["cpu_s"]),
        "cpu_of": "the JVM (every thread)",
        "verified": bool(end["ok"]),
    }


# -- slots, publications, lines ---------------------------------------------------------


def drop_replication(dsn: str, name: str) -> None:
    """Drop the slot and publication ``name`` (this run's own), once the slot's reader let
    go of it (bounded wait)."""
    deadline = time.monotonic() + 60
    while True:
        rows = sql(dsn, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (name,))
        if not rows:
            break
        if rows[0][0] is None:
            sql(dsn, "SELECT pg_drop_replication_slot(%s)", (name,))
            break
        if time.monotonic() > deadline:
            print(
                f"warning: slot {name} still in use by pid {rows[0][0]} after 60 s; "
                f"drop it with SELECT pg_drop_replication_slot('{name}')",
                file=sys.stderr,
            )
            break
        time.sleep(0.1)
    sql(dsn, f'DROP PUBLICATION IF EXISTS "{name}"')


def lines(args: argparse.Namespace, row: dict, case_suffix: str) -> list[dict]:
    writer = row.pop("writer")
    start, snapshot_done = row.pop("start"), row.pop("snapshot_done")
    stream_first, stream_done = row.pop("stream_first"), row.pop("stream_done")
    cpu = row.pop("cpu")
    snapshot_s = snapshot_done - start
    stream_s = stream_done - writer["first"]
    writer_s = writer["last_commit"] - writer["first"]
    lag_s = stream_done - writer["last_commit"]
    common = {
        "bench": "cdc",
        "table": TABLE_COLUMNS,
        "parallelism": args.parallelism if row["system"] == "lockgate" else 1,
        "checkpoint_interval_ms": args.checkpoint_ms,
        "cores": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    system = row["system"] + case_suffix
    return [
        {
            "case": f"{system}-snapshot",
            **row,
            "phase": "snapshot",
            "rows": args.rows,
            "seconds": round(snapshot_s, 3),
            "rows_per_s": round(args.rows / snapshot_s),
            "cpu_seconds": round(cpu[0], 2) if cpu else None,
            "cores_busy": round(cpu[0] / snapshot_s, 2) if cpu else None,
            "timing": "job start (slot and publication creation included) to the last "
            "snapshot row counted",
            **common,
        },
        {
            "case": f"{system}-stream",
            **row,
            "phase": "stream",
            "rows": args.changes,
            "changes": {"update": 0.6, "delete": 0.2, "insert": 0.2},
            "transactions": writer["transactions"],
            "seconds": round(stream_s, 3),
            "rows_per_s": round(args.changes / stream_s),
            "cpu_seconds": round(cpu[1], 2) if cpu else None,
            "cores_busy": round(cpu[1] / stream_s, 2) if cpu else None,
            "writer_seconds": round(writer_s, 3),
            # the first change counted, seconds after the writer's first statement (the
            # first transaction's commit, then the consumer's delay to its first change)
            "first_change_after_s": round(stream_first - writer["first"], 3),
            "lag_after_last_commit_s": round(lag_s, 3),
            "writer_bound": lag_s < 0.1 * writer_s,
            "timing": "the writer's first statement to the last change counted",
            **common,
        },
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=1_000_000)
    ap.add_argument("--txn-changes", type=int, default=50_000, help="changes per transaction")
    ap.add_argument("--systems", default="lockgate,debezium")
    ap.add_argument("--executors", default="local", help="lockgate executors: local,spark")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--chunk-size", type=int, default=10_000)
    ap.add_argument("--batch-size", type=int, default=10_000)
    ap.add_argument("--checkpoint-ms", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per phase at most")
    ap.add_argument("--dsn", default=DEFAULT_DSN)
    ap.add_argument("--debezium-log", help="keep the Debezium engine's log in this file")
    ap.add_argument("--profile", help="cProfile the lockgate local case into this file")
    args = ap.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    executors = [e for e in args.executors.split(",") if e]
    if not systems or set(systems) - {"lockgate", "debezium"}:
        ap.error(f"--systems: a subset of lockgate,debezium, got {args.systems!r}")
    if not executors or set(executors) - {"local", "spark"}:
        ap.error(f"--executors: a subset of local,spark, got {args.executors!r}")
    if min(args.rows, args.changes, args.txn_changes) < 1:
        ap.error("--rows, --changes and --txn-changes must be at least 1")
    change_plan(args.rows, args.changes, args.txn_changes)  # fails early on a bad mix
    try:
        level = sql(args.dsn, "SHOW wal_level")[0][0]
    except psycopg.OperationalError as e:
        raise SystemExit(
            f"cannot connect to {args.dsn!r} ({e}); bash scripts/services.sh starts the "
            "PostgreSQL with wal_level=logical on 127.0.0.1:5433"
        ) from e
    if level != "logical":
        raise SystemExit(f"{args.dsn!r} has wal_level={level}; CDC needs wal_level=logical")
    if "debezium" in systems:
        debezium_home()  # fetched and compiled before any timing

    run = uuid.uuid4().hex[:8]
    table = f"lgbench_cdc_{run}"
    cases = [("lockgate", e) for e in executors if "lockgate" in systems]
    cases += [("debezium", "")] if "debezium" in systems else []
    try:
        for system, executor in cases:
            names = f"lgbench_cdc_{run}_{system}{'_' + executor if executor else ''}"
            taken = sql(
                args.dsn,
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s UNION ALL "
                "SELECT 1 FROM pg_publication WHERE pubname = %s",
                (names, names),
            )
            if taken:
                raise SystemExit(f"a slot or publication named {names} exists already")
            load_s = make_table(args.dsn, table, args.rows)
            print(
                f"{system}: loaded {args.rows:,} rows into {table} in {load_s:.1f} s",
                file=sys.stderr,
            )
            try:
                if system == "lockgate":
                    row = run_lockgate(args, table, names, executor)
                else:
                    row = run_debezium(args, table, names)
            finally:
                drop_replication(args.dsn, names)
            suffix = f"-{executor}" if system == "lockgate" else ""
            for line in lines(args, row, suffix):
                print(json.dumps(line), flush=True)
    finally:
        sql(args.dsn, f"DROP TABLE IF EXISTS {table}")


if __name__ == "__main__":
    main()

"""Flink SQL peer runner of the Nexmark suite (see ``queries.py`` for the queries).

Runs one query with PyFlink's Table API / SQL (``apache-flink`` from PyPI) on the
local mini-cluster in streaming mode, reading the CSV copy of the data (the
package ships no Parquet format) and writing CSV without header to OUT.

Run it with the peer's own virtual environment::

    bench/.peers/flink/bin/python bench/nexmark/run_flink.py \\
        --query q5 --data DATA --out OUT --work WORK --parallelism 2 --checkpoint-ms 1000

The last line of stdout is a JSON object describing the run (see the contract).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from queries import Q3_CATEGORY, Q3_STATES, QUERIES, events_read, runner_parser

SYSTEM = "flink-sql"

# Columns of the CSV copy, in file order (generate.py's SCHEMAS).
COLUMNS = {
    "person": [
        ("id", "BIGINT"),
        ("name", "STRING"),
        ("email_address", "STRING"),
        ("credit_card", "STRING"),
        ("city", "STRING"),
        ("state", "STRING"),
        ("date_time", "BIGINT"),
        ("extra", "STRING"),
    ],
    "auction": [
        ("id", "BIGINT"),
        ("item_name", "STRING"),
        ("description", "STRING"),
        ("initial_bid", "BIGINT"),
        ("reserve", "BIGINT"),
        ("date_time", "BIGINT"),
        ("expires", "BIGINT"),
        ("seller", "BIGINT"),
        ("category", "BIGINT"),
        ("extra", "STRING"),
    ],
    "bid": [
        ("auction", "BIGINT"),
        ("bidder", "BIGINT"),
        ("price", "BIGINT"),
        ("channel", "STRING"),
        ("url", "STRING"),
        ("date_time", "BIGINT"),
        ("extra", "STRING"),
    ],
}

# Output columns (queries.py) and their SQL types.
OUTPUT = {
    "q0": COLUMNS["bid"],
    "q1": [
        ("auction", "BIGINT"),
        ("bidder", "BIGINT"),
        ("price", "DOUBLE"),
        ("date_time", "BIGINT"),
        ("extra", "STRING"),
    ],
    "q2": [("auction", "BIGINT"), ("price", "BIGINT")],
    "q3": [("name", "STRING"), ("city", "STRING"), ("state", "STRING"), ("id", "BIGINT")],
    "q4": [("category", "BIGINT"), ("final", "DOUBLE")],
    "q5": [
        ("auction", "BIGINT"),
        ("num", "BIGINT"),
        ("window_start", "BIGINT"),
        ("window_end", "BIGINT"),
    ],
    "q7": [("window_start", "BIGINT"), ("window_end", "BIGINT"), ("price", "BIGINT")],
    "q8": [("id", "BIGINT"), ("name", "STRING"), ("window_start", "BIGINT")],
    "q9": [
        ("id", "BIGINT"),
        ("category", "BIGINT"),
        ("date_time", "BIGINT"),
        ("expires", "BIGINT"),
        ("bidder", "BIGINT"),
        ("price", "BIGINT"),
        ("bid_date_time", "BIGINT"),
    ],
    "q12": [
        ("bidder", "BIGINT"),
        ("num", "BIGINT"),
        ("window_start", "BIGINT"),
        ("window_end", "BIGINT"),
    ],
}


def epoch_ms(col: str) -> str:
    """A window bound (TIMESTAMP(3), wall clock of the session time zone, which is
    UTC) as epoch milliseconds. Windows here are aligned to whole seconds, so the
    difference in seconds times 1000 is exact; the INT that TIMESTAMPDIFF returns
    holds epoch seconds until 2038."""
    return f"CAST(TIMESTAMPDIFF(SECOND, TIMESTAMP '1970-01-01 00:00:00', {col}) AS BIGINT) * 1000"


QUERY_SQL = {
    "q0": "SELECT auction, bidder, price, channel, url, date_time, extra FROM bid",
    "q1": "SELECT auction, bidder, CAST(price AS DOUBLE) * CAST(0.908 AS DOUBLE) AS price, "
    "date_time, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
    # Nexmark's q3 (local item suggestion): a regular (unbounded) join, append-only.
    "q3": f"""
        SELECT P.name, P.city, P.state, A.id
        FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
        WHERE A.category = {Q3_CATEGORY}
          AND ({" OR ".join(f"P.state = '{s}'" for s in Q3_STATES)})""",
    # Nexmark's q4 (average closing price per category): a regular join with the
    # time range as a join condition, MAX per auction, AVG per category: an
    # updating result (see CHANGELOG_QUERIES). Averages as DOUBLE (Nexmark's SQL
    # averages the BIGINT maxima, which truncates).
    "q4": """
        SELECT Q.category, AVG(CAST(Q.final AS DOUBLE)) AS final
        FROM (
          SELECT MAX(B.price) AS final, A.category
          FROM auction A, bid B
          WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
          GROUP BY A.id, A.category
        ) Q
        GROUP BY Q.category""",
    # Hot items: bids per auction in sliding windows (HOP), joined in the same
    # window with the highest count of that window. Flink's Window Top-N only
    # accepts ROW_NUMBER() (RANK() is rejected), which cannot keep all ties, so
    # this is the Nexmark formulation: both sides are window aggregations (the
    # max is a window aggregation attached to the first one's windows) and the
    # join is a window join, so the result is append-only.
    "q5": f"""
        WITH counts AS (
          SELECT auction, COUNT(*) AS num, window_start, window_end
          FROM TABLE(HOP(TABLE bid, DESCRIPTOR(ts),
                         INTERVAL '2' SECOND, INTERVAL '10' SECOND))
          GROUP BY auction, window_start, window_end
        ), best AS (
          SELECT MAX(num) AS maxn, window_start, window_end
          FROM counts
          GROUP BY window_start, window_end
        )
        SELECT C.auction, C.num, {epoch_ms("C.window_start")}, {epoch_ms("C.window_end")}
        FROM counts C JOIN best B
        ON C.window_start = B.window_start AND C.window_end = B.window_end
           AND C.num >= B.maxn""",
    "q7": f"""
        SELECT {epoch_ms("window_start")}, {epoch_ms("window_end")}, MAX(price)
        FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND))
        GROUP BY window_start, window_end""",
    # Monitor new users: a window join of the persons of each tumbling window with
    # the distinct sellers of the same window.
    "q8": f"""
        SELECT P.id, P.name, {epoch_ms("P.window_start")}
        FROM (
          SELECT id, name, window_start, window_end
          FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(ts), INTERVAL '10' SECOND))
          GROUP BY id, name, window_start, window_end
        ) P
        JOIN (
          SELECT seller, window_start, window_end
          FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(ts), INTERVAL '10' SECOND))
          GROUP BY seller, window_start, window_end
        ) A
        ON P.id = A.seller AND P.window_start = A.window_start
           AND P.window_end = A.window_end""",
    # Nexmark's q9 (winning bids): a regular join with the time range as a join
    # condition and a Top-1 per auction (ROW_NUMBER), updated as higher bids come;
    # ties broken by the earlier bid, then the lower bidder (see queries.py).
    "q9": """
        SELECT id, category, date_time, expires, bidder, price, bid_date_time
        FROM (
          SELECT A.id, A.category, A.date_time, A.expires, B.bidder, B.price,
                 B.date_time AS bid_date_time,
                 ROW_NUMBER() OVER (
                   PARTITION BY A.id
                   ORDER BY B.price DESC, B.date_time ASC, B.bidder ASC) AS rownum
          FROM auction A, bid B
          WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
        )
        WHERE rownum <= 1""",
    "q12": f"""
        SELECT bidder, COUNT(*) AS num, {epoch_ms("window_start")}, {epoch_ms("window_end")}
        FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(p), INTERVAL '10' SECOND))
        GROUP BY bidder, window_start, window_end""",
}

EVENT_TIME = ("q5", "q7", "q8")
PROC_TIME = ("q12",)
#: queries whose result is an updating table: the sink writes Flink's changelog
#: (debezium-json) under WORK, replayed into the final rows (CSV in OUT) after the job
CHANGELOG_QUERIES = ("q4", "q9")
#: Nexmark's own table settings (nexmark-flink conf/config.yaml), for the queries
#: with regular joins and unbounded aggregations, the ones mini-batching applies to
MINI_BATCH = {
    "table.exec.mini-batch.enabled": "true",
    "table.exec.mini-batch.allow-latency": "2 s",
    "table.exec.mini-batch.size": "50000",
}
MINI_BATCH_QUERIES = ("q3", "q4", "q9")


def source_ddl(table: str, data: Path, query: str) -> str:
    cols = [f"`{n}` {t}" for n, t in COLUMNS[table]]
    if query in EVENT_TIME:
        cols.append("ts AS TO_TIMESTAMP_LTZ(date_time, 3)")
        cols.append("WATERMARK FOR ts AS ts - INTERVAL '1' SECOND")
    elif query in PROC_TIME:
        cols.append("p AS PROCTIME()")
    path = (data / "csv" / table).resolve().as_uri()
    return (
        f"CREATE TEMPORARY TABLE {table} (\n  " + ",\n  ".join(cols) + "\n) WITH (\n"
        f"  'connector' = 'filesystem',\n  'path' = '{path}',\n  'format' = 'csv'\n)"
    )


def sink_ddl(query: str, out: Path, fmt: str = "csv") -> str:
    cols = [f"`{n}` {t}" for n, t in OUTPUT[query]]
    return (
        "CREATE TEMPORARY TABLE sink (\n  " + ",\n  ".join(cols) + "\n) WITH (\n"
        f"  'connector' = 'filesystem',\n  'path' = '{out.resolve().as_uri()}',\n"
        f"  'format' = '{fmt}'\n)"
    )


def replay_changelog(changelog: Path, query: str, out: Path) -> int:
    """Replay the debezium-json changelog files under ``changelog`` (inserts and
    update-afters as ``after`` rows, deletes and update-befores as ``before`` rows)
    into the final rows of the table, written to ``out/part-0.csv`` (no header,
    the query's columns); returns the number of changelog records. Fails if a
    retraction finds no row to retract."""
    import csv
    from collections import Counter

    names = [n for n, _ in OUTPUT[query]]
    rows: Counter[tuple] = Counter()
    records = 0
    for f in sorted(changelog.rglob("*")):
        if not f.is_file() or f.name.startswith((".", "_")):
            continue
        with open(f) as fh:
            for line in fh:
                if not line.strip():
                    continue
                change = json.loads(line)
                records += 1
                if change.get("before") is not None:
                    row = tuple(change["before"][n] for n in names)
                    if rows[row] <= 0:
                        sys.exit(f"changelog retracts a row never inserted: {row}")
                    rows[row] -= 1
                if change.get("after") is not None:
                    rows[tuple(change["after"][n] for n in names)] += 1
    with open(out / "part-0.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        for row, count in rows.items():
            for _ in range(count):
                writer.writerow(
                    ["" if v is None else repr(v) if isinstance(v, float) else v for v in row]
                )
    return records


def count_checkpoints(log_dir: Path) -> int | None:
    """Completed checkpoints, from the CheckpointCoordinator's INFO log lines."""
    files = glob.glob(str(log_dir / "*.log"))
    if not files:
        return None
    n = 0
    for f in files:
        with open(f, errors="replace") as fh:
            n += sum(1 for line in fh if "Completed checkpoint " in line)
    return n


def jvm_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of the JVM so far, for a line on stderr."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def stop_jvm(gateway, pid: int) -> None:
    """End the gateway JVM (our child process) and reap it, so that it is gone
    when the runner exits and its CPU time and memory count among the runner's
    children (PyFlink lets it die only after the runner has exited).

    The JVM (PythonGatewayServer) exits when its stdin reaches EOF: after the
    py4j gateway is shut down, close our end of that pipe (found through
    /proc), then wait for the process."""
    with contextlib.suppress(Exception):
        gateway.shutdown()
    try:
        stdin = os.readlink(f"/proc/{pid}/fd/0")
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == stdin:
                    os.close(int(fd))
            except OSError:
                pass
    except OSError:
        pass
    deadline = time.monotonic() + 30
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # not our child (or already reaped)
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if not done:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def start_mini_cluster(p: int) -> tuple[Any, dict[str, str]]:
    """Start a local Flink MiniCluster (one task manager with ``p`` slots) in PyFlink's
    JVM; returns it and the settings that submit to it over REST (``execution.target``
    remote, its address and port, ``parallelism.default``)."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    cluster_conf = jvm.org.apache.flink.configuration.Configuration()
    cluster_conf.setString("rest.address", "localhost")
    cluster_conf.setString("rest.bind-address", "localhost")
    cluster_conf.setString("rest.bind-port", "0")
    builder = getattr(jvm.org.apache.flink.runtime.minicluster, "MiniClusterConfiguration$Builder")
    cluster = jvm.org.apache.flink.runtime.minicluster.MiniCluster(
        builder()
        .setConfiguration(cluster_conf)
        .setNumTaskManagers(1)
        .setNumSlotsPerTaskManager(p)
        .build()
    )
    cluster.start()
    rest = cluster.getRestAddress().get()
    return cluster, {
        "execution.target": "remote",
        "rest.address": str(rest.getHost()),
        "rest.port": str(rest.getPort()),
        "parallelism.default": str(p),
    }


def main() -> None:
    ap = runner_parser(__doc__)
    ap.add_argument(
        "--explain",
        action="store_true",
        help="print the query plan to stderr and exit without running",
    )
    args = ap.parse_args()

    events = events_read(args.data, args.query)

    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"output folder {args.out} is not empty")
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    ckpt_dir = args.work / "checkpoints"
    log_dir = args.work / "flink-log"
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    # The gateway JVM (and its mini-cluster) logs to a file in this folder, not to
    # stdout; the log is where the completed checkpoints are counted.
    os.environ["FLINK_LOG_DIR"] = str(log_dir.resolve())

    from pyflink.common import Configuration
    from pyflink.java_gateway import get_gateway
    from pyflink.table import EnvironmentSettings, TableEnvironment
    from pyflink.version import __version__ as flink_version

    p = args.parallelism
    # Start the JVM and, in it, a local Flink cluster (a MiniCluster: one task
    # manager with `p` slots, the cluster that PyFlink's local executor would
    # otherwise start inside the job submission); the query is then submitted
    # to it through its REST endpoint, like to a session cluster, so job_seconds
    # does not include the cluster's startup.
    cluster, remote = start_mini_cluster(p)
    jvm = get_gateway().jvm

    settings = {
        **remote,
        "table.local-time-zone": "UTC",
        "execution.checkpointing.interval": f"{args.checkpoint_ms} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": ckpt_dir.resolve().as_uri(),
        "state.backend.type": "hashmap",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "3",
        "restart-strategy.fixed-delay.delay": "1 s",
        "pipeline.object-reuse": "true",
    }
    if args.query in MINI_BATCH_QUERIES:
        settings.update(MINI_BATCH)
    config = Configuration()
    for k, v in settings.items():
        config.set_string(k, v)
    env_settings = (
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(config).build()
    )
    t_env = TableEnvironment.create(env_settings)

    for table in QUERIES[args.query].reads:
        t_env.execute_sql(source_ddl(table, args.data, args.query))
    changelog = args.work / "changelog"
    if args.query in CHANGELOG_QUERIES:
        shutil.rmtree(changelog, ignore_errors=True)
        changelog.mkdir(parents=True)
        t_env.execute_sql(sink_ddl(args.query, changelog, "debezium-json"))
    else:
        t_env.execute_sql(sink_ddl(args.query, args.out))
    table = t_env.sql_query(QUERY_SQL[args.query])
    if args.explain:
        print(table.explain(), file=sys.stderr)
        return

    # job_seconds: planning, submission, the run, and the sink's final commit.
    jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
    cpu_started = jvm_cpu_seconds(jvm_pid)
    started = time.perf_counter()
    result = table.execute_insert("sink")
    result.wait()
    job_seconds = time.perf_counter() - started
    job_cpu = jvm_cpu_seconds(jvm_pid) - cpu_started
    print(
        f"flink-sql {args.query}: job {job_seconds:.2f} s, JVM CPU during the job {job_cpu:.2f} s",
        file=sys.stderr,
    )

    job_id = jvm.org.apache.flink.api.common.JobID.fromHexString(
        str(result.get_job_client().get_job_id())
    )
    try:
        graph = cluster.getExecutionGraphInfo(job_id).get().getArchivedExecutionGraph()
        status = str(graph.getState().toString())
        checkpoints = int(
            graph.getCheckpointStatsSnapshot().getCounts().getNumberOfCompletedCheckpoints()
        )
    except Exception:  # noqa: BLE001 - statistics only
        status, checkpoints = "FINISHED", count_checkpoints(log_dir)
    cluster.closeAsync().get()
    stop_jvm(get_gateway(), jvm_pid)
    if status != "FINISHED":
        sys.exit(f"job ended in state {status}")

    written = changelog if args.query in CHANGELOG_QUERIES else args.out
    hidden = [
        f for f in written.rglob("*") if f.name.startswith((".", "_")) and "inprogress" in f.name
    ]
    if hidden:
        sys.exit(f"uncommitted part files left in {args.out}: {hidden[:3]}")

    notes = [
        "reads the CSV copy (the apache-flink package ships no Parquet format)",
        (
            "job_seconds includes the SQL planning and the job's deployment on the "
            "already running local cluster"
        ),
    ]
    if args.query == "q5":
        notes.append(
            "Flink's Window Top-N rejects RANK() (only ROW_NUMBER()), so the "
            "ties are kept by a window join of the per-auction counts with the "
            "per-window maximum"
        )
    if args.query in MINI_BATCH_QUERIES:
        notes.append(
            "Nexmark's mini-batch settings (table.exec.mini-batch.enabled, allow-latency "
            "2 s, size 50000) for its regular join and unbounded aggregations"
        )
    if args.query in CHANGELOG_QUERIES:
        replay_started = time.perf_counter()
        records = replay_changelog(changelog, args.query, args.out)
        notes.append(
            f"the result is an updating table: the job writes its changelog "
            f"({records:,} debezium-json records), replayed into the final rows after the "
            f"job in {time.perf_counter() - replay_started:.1f} s (not in job_seconds)"
        )
    if args.query == "q12":
        counted = sum(
            int(line.split(",")[1])
            for f in args.out.rglob("*")
            if f.is_file() and not f.name.startswith((".", "_"))
            for line in f.read_text().splitlines()
            if line
        )
        notes.append(
            f"{counted:,} of {events:,} bids counted: Flink does not fire "
            "pending processing-time windows when a bounded input ends (their "
            "timers are dropped), so the bids of the last, still open 10 s "
            "window(s) are never written"
        )
    note = "; ".join(notes)
    print(
        json.dumps(
            {
                "system": SYSTEM,
                "version": flink_version,
                "query": args.query,
                "events": events,
                "job_seconds": round(job_seconds, 3),
                "input": "csv",
                "checkpointing": f"exactly-once, every {args.checkpoint_ms} ms "
                f"(hashmap state backend, checkpoints to a file:// folder)",
                "checkpoints": checkpoints,
                "settings": f"parallelism.default={p}; local MiniCluster (1 task manager, {p} "
                "slots) started before the timing, job submitted to it over REST; "
                "hashmap state backend; pipeline.object-reuse=true; "
                "table.local-time-zone=UTC; restart-strategy fixed-delay 3 x 1 s"
                + ("; mini-batch 2 s / 50000" if args.query in MINI_BATCH_QUERIES else ""),
                "note": note,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

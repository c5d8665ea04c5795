"""p32 on four hosts, exactly once through faults (issue 43, part 2): one JSON line.

The cluster is the test suite's network-namespace cluster (``tests/spark/netns_cluster.py``;
root is needed): a master, ``--hosts`` workers of ``--cores`` cores each plus one spare
worker for failovers, and the driver, each a host of its own on a private /24. Kafka and
PostgreSQL stay on this machine's loopback: a forwarder on the cluster bridge carries
each host's connections to them (inside every host, a forwarder on 127.0.0.1:9092 stands
for the broker's advertised address).

The job (``bench/scale_cluster_job.py``) at ``--parallelism``: a bounded read_committed
Kafka source of 32 partitions, written in one transaction beforehand and read at
``--rate``; a window join of the even and odd records (two keyed edges); a sample over a
broadcast edge; an exactly-once PostgresSink. Checkpoints every ``--interval-ms``.

Faults (``--faults``, in turn, each once a checkpoint of the running attempt completed):
``executor`` (a slot's executor JVM, SIGKILL), ``host`` (every process of a slot's worker
host, SIGKILL; the worker is started again once the job recovered), ``network`` (a slot's
host cut off for longer than the heartbeat timeout, then back). Each recovery time is
from the fault to every slot of the next attempt registered.

At the end the table must equal the failure-free output (each pair once, each sampled
pair once per broadcast subtask) with no prepared transaction left. Figures: start-up
to every slot running and to the first completed checkpoint, checkpoint duration and
alignment p50/p99, per slot data-plane connections, TCP connections, descriptors and
memory (RSS/PSS/USS), recoveries, the core count.

    sudo .venv/bin/python bench/scale_cluster.py [--parallelism 32] [--hosts 4]
        [--cores 8] [--records 200000] [--rate 2000] [--faults executor,host,network]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "spark"))
sys.path.insert(0, str(HERE.parent / "tests"))

from netns_cluster import NetnsCluster, netns_unavailable
from netns_driver import NetnsDriver
from scale_cluster_job import PARTITIONS, expected_rows
from tcp_forwarder import TcpForwarder

KAFKA = ("127.0.0.1", 9092)
HEARTBEAT_TIMEOUT_S = 10.0


class Loopbacks:
    """The cluster's hosts reach Kafka and PostgreSQL on this machine's loopback: one
    forwarder each on the bridge, and inside each host a forwarder process on Kafka's
    advertised 127.0.0.1:9092 (started again with :meth:`into` after a host was killed)."""

    def __init__(self, cluster: NetnsCluster, pg_port: int) -> None:
        bridge = f"{cluster.subnet}.1"
        self.cluster = cluster
        self.kafka = TcpForwarder(bridge, *KAFKA)
        self.pg = TcpForwarder(bridge, "127.0.0.1", pg_port)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def into(self, ns: str) -> None:
        old = self.processes.pop(ns, None)
        if old is not None and old.poll() is None:
            old.kill()
            old.wait(5)
        host, port = self.kafka.address
        self.processes[ns] = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                sys.executable,
                str(HERE.parent / "tests" / "spark" / "tcp_forwarder.py"),
                "127.0.0.1",
                str(KAFKA[1]),
                host,
                str(port),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        line = self.processes[ns].stdout.readline()  # type: ignore[union-attr]
        if not line.startswith(b"forwarding"):
            raise RuntimeError(f"the Kafka forwarder in {ns} did not start: {line!r}")

    def close(self) -> None:
        for p in self.processes.values():
            if p.poll() is None:
                p.kill()
                p.wait(5)
        self.kafka.close()
        self.pg.close()


def fill_topic(n: int) -> str:
    """A fresh topic of PARTITIONS partitions holding records 0..n-1, written in one
    transaction; record v goes to partition (v // 2) % PARTITIONS, in order."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"scale-{uuid.uuid4().hex[:8]}"
    bootstrap = f"{KAFKA[0]}:{KAFKA[1]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"scale-fill-{topic}",
            "linger.ms": 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for v in range(n):
        value = json.dumps({"k": (v // 2) % 500, "v": v, "ts": v}).encode()
        while True:
            try:
                producer.produce(topic, value, partition=(v // 2) % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    producer.commit_transaction(120)
    return topic


def completed_checkpoints(storage: Path) -> int:
    """The newest completed checkpoint's id (older ones are subsumed and deleted)."""
    return max((int(p.parent.name[4:]) for p in storage.glob("chk-*/_metadata")), default=0)


def await_checkpoint(storage: Path, driver: NetnsDriver, when: str, timeout_s: float = 120) -> None:
    """Bounded: a checkpoint newer than now completes (none of an earlier attempt)."""
    target = completed_checkpoints(storage) + 1
    deadline = time.monotonic() + timeout_s
    while completed_checkpoints(storage) < target:
        if time.monotonic() > deadline or not driver.messages.empty():
            said = None if driver.messages.empty() else driver.messages.get()
            raise SystemExit(f"no checkpoint completed {when} (said: {said})\n{driver.log_tail()}")
        threading.Event().wait(0.1)


def inject(
    fault: str,
    cluster: NetnsCluster,
    loopbacks: Loopbacks,
    running: dict[str, Any],
    driver: NetnsDriver,
    storage: Path,
) -> tuple[dict[str, Any], float]:
    """Inject ``fault`` at the slot 0 of the running attempt; the next attempt's
    ``running`` message and the recovery time."""
    await_checkpoint(storage, driver, f"before the {fault} fault")
    victim = running["slot_pids"]["0"]
    host = cluster.worker_index_of(victim)
    if host is None:
        raise SystemExit(f"slot 0 ({victim}) runs on no worker of the cluster")
    at = time.monotonic()
    if fault == "executor":
        jvm = cluster.executor_of(victim)
        assert jvm is not None
        os.kill(jvm, signal.SIGKILL)
    elif fault == "host":
        cluster.kill_worker_host(host)
    elif fault == "network":
        cluster.cut_worker_network(host)
    else:
        raise SystemExit(f"unknown fault {fault!r}: executor, host or network")
    again = driver.expect(
        "running", HEARTBEAT_TIMEOUT_S + 240, f"the job ran again after the {fault} fault"
    )
    took = time.monotonic() - at
    if fault == "host":
        cluster.restart_worker(host)
        loopbacks.into(cluster.worker_ns[host])
    elif fault == "network":
        cluster.restore_worker_network(host)
    return again, took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parallelism", type=int, default=32)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--cores", type=int, default=8)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rate", type=float, default=2_000)
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--sink-parallelism", type=int, default=8)
    ap.add_argument("--faults", default="executor,host,network")
    args = ap.parse_args()
    reason = netns_unavailable()
    if reason:
        raise SystemExit(reason)
    import psycopg

    from pg_fixtures import SHARED_DSN, prepared, query

    faults = [f for f in args.faults.split(",") if f]
    topic = fill_topic(args.records)
    suffix = uuid.uuid4().hex[:8]
    table, txn_prefix = f"lg_scale_{suffix}", f"lgscale-{suffix}"
    query(f"CREATE TABLE {table} (kind text, k bigint, a bigint, b bigint, s int)", dsn=SHARED_DSN)
    pg = urllib.parse.urlsplit(SHARED_DSN)
    cluster = NetnsCluster(
        prefix="lgs",
        subnet="10.213.41",
        workers=args.hosts + 1,
        cores=args.cores,
        memory="2g",
        start_timeout_s=180,
    )
    started = time.monotonic()
    cluster.start()
    cluster_s = time.monotonic() - started
    loopbacks = Loopbacks(cluster, pg.port or 5432)
    storage = cluster.folder / "checkpoints"
    driver: NetnsDriver | None = None
    recoveries: dict[str, float] = {}
    try:
        for ns in [cluster.driver_ns, *cluster.worker_ns]:
            loopbacks.into(ns)
        host, port = loopbacks.pg.address
        options = {
            "bootstrap": f"{KAFKA[0]}:{KAFKA[1]}",
            "topic": topic,
            "rate": args.rate,
            "parallelism": args.parallelism,
            "sink_parallelism": args.sink_parallelism,
            "interval_ms": args.interval_ms,
            "storage": storage.as_uri(),
            "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S,
            "postgres": {
                "dsn": pg._replace(netloc=f"{pg.username}@{host}:{port}").geturl(),
                "table": table,
                "prefix": txn_prefix,
            },
            "conf": {
                "spark.ui.enabled": "false",
                "spark.cores.max": str((args.hosts + 1) * args.cores),
                "spark.executor.cores": str(args.cores),
                "spark.executor.memory": "1g",
                "spark.python.daemon.module": "lockgate.executor.spark.daemon",
                "spark.network.timeout": f"{HEARTBEAT_TIMEOUT_S:.0f}s",
                "spark.executor.heartbeatInterval": "1s",
                "spark.network.timeoutInterval": "1s",
            },
        }
        driver = NetnsDriver(
            cluster,
            [
                sys.executable,
                str(HERE / "scale_cluster_job.py"),
                cluster.master_url,
                json.dumps(options),
            ],
            log=cluster.folder / "driver.log",
            cwd=HERE,
            env={"PYTHONPATH": str(HERE)},
        )
        driver.expect("ready", 180, "the driver's SparkSession started")
        running = driver.expect("running", 300, "every slot of the job registered")
        figures = driver.expect("figures", 180, "the first checkpoint completed")
        for fault in faults:
            running, recoveries[fault] = inject(fault, cluster, loopbacks, running, driver, storage)
        result = driver.expect("result", 900, "the job finished")
    finally:
        if driver is not None:
            driver.stop()
        loopbacks.close()
        cluster.stop()
    rows = sorted(tuple(r) for r in query(f"SELECT kind, k, a, b, s FROM {table}", dsn=SHARED_DSN))
    expected = expected_rows(args.records, args.parallelism)
    left = prepared(txn_prefix)
    exact = rows == expected and not left
    missing = len(set(expected) - set(rows))
    repeated = len(rows) - len(set(rows))
    with psycopg.connect(SHARED_DSN, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {table}")
    figures.pop("kind", None)
    result.pop("kind", None)
    print(
        json.dumps(
            {
                "bench": "scale_cluster",
                "parallelism": args.parallelism,
                "hosts": args.hosts,
                "spare_hosts": 1,
                "cores_per_host": args.cores,
                "records": args.records,
                "rate": args.rate,
                "rows": len(rows),
                "expected_rows": len(expected),
                "missing": missing,
                "repeated": repeated,
                "prepared_left": len(left),
                "exact": exact,
                "cluster_start_s": round(cluster_s, 1),
                **result,
                "recovery_s": {k: round(v, 1) for k, v in recoveries.items()},
                **figures,
                "cores": os.cpu_count(),
            }
        ),
        flush=True,
    )
    if not exact:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

"""On a multi-host Spark standalone cluster (master, three 1-core workers and the driver each
in a network namespace of its own, ``netns_cluster.py``) a parallelism-2 job with a key_by
shuffle runs its two slots on two different hosts, as the addresses the slots registered with
the driver show, each slot binds one data-plane socket for all its channels, every
connection of the job (the driver's control socket, each slot's data-plane socket) is on
a namespace address, never 127.0.0.1, bytes crossed both slots'
hosts' links, and the result equals the local executor's. On the same cluster: an
exactly-once job survives a killed executor JVM, a killed worker host, a cut network and a
slowed network; and a job submitted in cluster deploy mode (``lockgate submit --supervise``)
survives its driver killed on its worker.

Run as ``__main__`` (``python test_multi_host_cluster.py spark://ADDR:7077 N RATE``), this file
is the driver: inside the driver namespace it runs the job of ``cluster_driver.build_sums`` and
prints, once every slot registered, the control endpoint and each slot's registration, then the
result, as ``LOCKGATE-TEST {json}`` lines.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import alive, cmdline
from cluster_driver import CLUSTER_CONF, build_sums, final_sums, report_attempts, say
from netns_cluster import NetnsCluster, _netns_pids, netns_unavailable
from netns_driver import NetnsDriver

import lockgate as lg

pytestmark = [pytest.mark.spark, pytest.mark.system, pytest.mark.hang_guard(300)]

HERE = Path(__file__).resolve().parent


def _host_of(endpoint: str) -> str:
    """``tcp://HOST:PORT`` -> HOST."""
    return endpoint.split("://", 1)[1].rsplit(":", 1)[0]


# ----------------------------------------------------------------- the driver (subprocess)


def _report_registrations(executor: Any, done: threading.Event) -> None:
    while not done.is_set():
        if executor.running.wait(0.05):
            control = executor.control
            if control is None:  # the attempt ended before we looked
                return
            say(
                "running",
                control_endpoint=control.endpoint,
                registrations={
                    str(slot): {
                        "pid": reg["pid"],
                        "endpoints": sorted(set(reg["endpoints"].values())),
                    }
                    for slot, reg in control.registrations.items()
                },
            )
            return


def driver_main(master: str, n: int, rate: float) -> None:
    import cloudpickle
    import cluster_driver

    from lockgate.executor.spark import SparkExecutor

    # the job's functions travel by value: the executors need not import the test folder
    cloudpickle.register_pickle_by_value(cluster_driver)

    executor = SparkExecutor(master=master, conf=CLUSTER_CONF, slot_wait_timeout_s=90)
    executor.spark.sparkContext.setLogLevel("ERROR")
    say(
        "ready",
        pid=os.getpid(),
        driver_host=executor.spark.sparkContext.getConf().get("spark.driver.host"),
    )
    done = threading.Event()
    watcher = threading.Thread(target=_report_registrations, args=(executor, done), daemon=True)
    watcher.start()
    try:
        env = lg.StreamEnvironment(parallelism=2)
        records = build_sums(env, n, rate).execute_and_collect(
            "sums across hosts", executor=executor
        )
    except Exception as e:  # noqa: BLE001 - reported to the test
        done.set()
        say("failed", error_type=type(e).__name__, message=str(e)[-4000:])
    else:
        done.set()
        watcher.join(5)
        say("result", records=records)
    finally:
        executor.spark.stop()
        say("bye")


def faults_driver_main(
    master: str, n: int, rate: float, out: str, storage: str, options: str = "{}"
) -> None:
    """An exactly-once job (keyed running sums into a FileSink, checkpoints every 300 ms,
    restarts without delay) on the cluster; its output and checkpoints on the shared
    filesystem every namespace sees. ``options`` (JSON): ``conf`` (more Spark settings),
    ``heartbeat_timeout_s`` (the SparkExecutor's), ``warm_up`` (start every executor's
    Python daemon first, ``SparkExecutor.warm_up``), ``postgres`` (``dsn``, ``table``,
    ``prefix``: the records go to an exactly-once PostgresSink too)."""
    import cloudpickle
    import cluster_driver

    from lockgate.connectors import FileSink, PostgresSink, SequenceSource
    from lockgate.executor.spark import SparkExecutor

    # the job's functions travel by value: the executors need not import the test folder
    cloudpickle.register_pickle_by_value(cluster_driver)
    # lockgate's warnings (attempts failing, restarts) with the time, in driver.log
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    opts = json.loads(options)
    executor = SparkExecutor(
        master=master,
        conf={**CLUSTER_CONF, **opts.get("conf", {})},
        slot_wait_timeout_s=90,
        heartbeat_timeout_s=float(opts.get("heartbeat_timeout_s", 60.0)),
    )
    executor.spark.sparkContext.setLogLevel("ERROR")
    say("ready", pid=os.getpid())
    if opts.get("warm_up"):
        executor.warm_up()  # every executor's Python daemon up before the job
    done = threading.Event()
    threading.Thread(target=report_attempts, args=(executor, done), daemon=True).start()
    try:
        env = lg.StreamEnvironment(parallelism=2)
        env.enable_checkpointing(300)
        env.checkpoint_config.storage = storage
        env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=4, delay=0))
        sums = (
            env.from_source(SequenceSource(0, n, rows_per_second=rate), name="numbers")
            .uid("numbers")
            .key_by(lambda x: x % 11)
            .process(cluster_driver.SumWithPid(), name="sums")
            .uid("sums")
        )
        sums.sink_to(FileSink(out, format="jsonl"), name="files").uid("files")
        if "postgres" in opts:
            pg = opts["postgres"]
            sink = PostgresSink(pg["dsn"], pg["table"], transaction_prefix=pg["prefix"])
            sums.sink_to(sink, name="postgres").uid("postgres")
        result = env.execute("faults across hosts", executor=executor)
    except Exception as e:  # noqa: BLE001 - reported to the test
        done.set()
        say("failed", error_type=type(e).__name__, message=str(e)[-4000:])
    else:
        done.set()
        say("result", attempts=result.attempts, status=result.status.name)
    finally:
        executor.spark.stop()
        say("bye")


# ----------------------------------------------------------------- the test


def netns_driver(cluster: NetnsCluster, n: int, rate: float, *extra: str) -> NetnsDriver:
    """This file as the driver (``driver_main``, or ``faults_driver_main`` with ``extra``:
    the exactly-once job's output and storage folders, and options) in the cluster's
    driver namespace."""
    args = [sys.executable, str(Path(__file__).resolve()), cluster.master_url, str(n), str(rate)]
    return NetnsDriver(cluster, [*args, *extra], log=cluster.folder / "driver.log", cwd=HERE)


@pytest.fixture(scope="module")
def netns_cluster() -> Iterator[NetnsCluster]:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    # another checkout's suite may run its cluster at the same time: give this one other
    # names and addresses (LOCKGATE_TEST_NETNS_PREFIX / _SUBNET), or the two clash
    c = NetnsCluster(
        prefix=os.environ.get("LOCKGATE_TEST_NETNS_PREFIX", "lgt"),
        subnet=os.environ.get("LOCKGATE_TEST_NETNS_SUBNET", "10.213.38"),
        workers=3,
        cores=1,
        memory="1g",
        start_timeout_s=60,
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()
        assert not c.leftovers(), f"the cluster left {c.leftovers()}"


def test_a_keyed_job_runs_its_slots_on_two_hosts_and_matches_the_local_result(
    netns_cluster: NetnsCluster,
) -> None:
    cluster = netns_cluster
    started = time.monotonic()
    workers = {w["host"] for w in cluster.status()["workers"] if w["state"] == "ALIVE"}
    assert workers == set(cluster.worker_addresses), workers
    before = {ns: cluster.veth_bytes(ns) for ns in cluster.worker_ns}

    n, rate = 3000, 1000  # about 3 s of records
    driver = netns_driver(cluster, n, rate)
    try:
        ready = driver.expect("ready", 120, "the driver's SparkSession on the cluster started")
        assert ready["driver_host"] == cluster.driver_address, ready
        running = driver.expect("running", 60, "both slots of the job registered")
        result = driver.expect("result", 60, "the job finished")
    finally:
        driver.stop()
    elapsed = time.monotonic() - started

    control = running["control_endpoint"]
    assert _host_of(control) == cluster.driver_address, (
        f"the driver's control server listens on {control}, not the driver's address"
    )
    registrations = {int(k): v for k, v in running["registrations"].items()}
    assert sorted(registrations) == [0, 1]
    slot_hosts: dict[int, str] = {}
    for slot, reg in registrations.items():
        # one data-plane socket per slot, whatever the channels (issue 43, part 1)
        assert len(reg["endpoints"]) == 1, f"slot {slot} bound several data sockets: {reg}"
        hosts = {_host_of(e) for e in reg["endpoints"]}
        assert len(hosts) == 1, f"slot {slot} bound its data plane on several hosts: {reg}"
        (slot_hosts[slot],) = hosts
    assert set(slot_hosts.values()) <= set(cluster.worker_addresses), (
        f"the slots bound {slot_hosts}, not worker addresses {cluster.worker_addresses}"
    )
    assert slot_hosts[0] != slot_hosts[1], f"both slots ran on host {slot_hosts[0]}"
    for ns, address in zip(cluster.worker_ns, cluster.worker_addresses, strict=True):
        if address in slot_hosts.values():
            moved = cluster.veth_bytes(ns) - before[ns]
            assert moved > 10_000, f"only {moved} bytes crossed {ns}'s link ({address})"

    records = result["records"]
    assert len(records) == n
    assert {r["pid"] for r in records} == {reg["pid"] for reg in registrations.values()}
    env = lg.StreamEnvironment(parallelism=2)
    local = build_sums(env, n).execute_and_collect(executor=lg.LocalExecutor())
    assert final_sums(records) == final_sums(local)
    assert sorted(r["key"] for r in records) == sorted(r["key"] for r in local)
    print(f"slots on {slot_hosts}, control at {control}; driver start to result {elapsed:.1f}s")


def _published(folder: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(folder.glob("part-*")):
        with open(path, encoding="utf-8") as f:
            records.extend(json.loads(line) for line in f)
    return records


class ClusterPostgres:
    """A fresh table of the test database for a fault job's exactly-once PostgresSink, and
    the way the cluster's hosts reach it: PostgreSQL listens on 127.0.0.1 only, so a
    :class:`TcpForwarder` on the cluster bridge's address (the root namespace's end of the
    cluster network) carries their connections to it. ``options`` go to the job's driver;
    :meth:`check` compares the table with the FileSink's records and finds no prepared
    transaction of the job left; :meth:`close` stops the forwarder and drops the table."""

    def __init__(self, cluster: NetnsCluster) -> None:
        from tcp_forwarder import TcpForwarder

        from pg_fixtures import DSN, query

        suffix = f"{os.getpid()}_{time.monotonic_ns() % 10**6}"
        self.table = f"lg_cluster_faults_{suffix}"
        self.prefix = f"lgtest-{suffix}"  # the job's prepared transactions' ids
        query(f'CREATE TABLE {self.table} ("key" bigint, v bigint, "sum" bigint, pid bigint)')
        pg = urllib.parse.urlsplit(DSN)
        self.forwarder = TcpForwarder(
            f"{cluster.subnet}.1", pg.hostname or "127.0.0.1", pg.port or 5432
        )
        host, port = self.forwarder.address
        dsn = pg._replace(netloc=f"{pg.username}@{host}:{port}").geturl()
        self.options = {"dsn": dsn, "table": self.table, "prefix": self.prefix}

    def check(self, records: list[dict[str, Any]], n: int) -> None:
        from pg_fixtures import prepared, query

        rows = query(f'SELECT "key", v, "sum" FROM {self.table} ORDER BY v')
        values = {r[1] for r in rows}
        assert [r[1] for r in rows] == list(range(n)), (
            f"PostgreSQL has {len(rows)} rows for {n} inputs: "
            f"{len(rows) - len(values)} repeated, {n - len(values)} missing"
        )
        files = sorted((r["key"], r["v"], r["sum"]) for r in records)
        assert files == sorted(tuple(r) for r in rows), "the two sinks hold different records"
        assert prepared(self.prefix) == [], "prepared transactions were left behind"

    def close(self) -> None:
        from pg_fixtures import release_tables

        self.forwarder.close()
        release_tables([self.table])  # and what a failed job left prepared on it


def _check_exact(records: list[dict[str, Any]], n: int, pg: ClusterPostgres) -> None:
    """Every input of ``range(n)`` exactly once in the FileSink's ``records``, each key's
    final running sum (key ``v % 11``) that of the failure-free run, and the PostgresSink
    holding the same records with no prepared transaction left."""
    values = sorted(r["v"] for r in records)
    assert values == list(range(n)), (
        f"{len(values)} records for {n} inputs: "
        f"{len(values) - len(set(values))} repeated, {n - len(set(values))} missing"
    )
    finals: dict[int, int] = {}
    for r in records:
        finals[r["key"]] = max(finals.get(r["key"], 0), r["sum"])
    assert finals == {k: sum(range(k, n, 11)) for k in range(11)}
    pg.check(records, n)


@pytest.fixture
def pg(netns_cluster: NetnsCluster) -> Iterator[ClusterPostgres]:
    made = ClusterPostgres(netns_cluster)
    try:
        yield made
    finally:
        made.close()


def test_m_r1_a_killed_executor_then_a_killed_worker_host_recover_with_exact_output(
    netns_cluster: NetnsCluster, pg: ClusterPostgres
) -> None:
    """Issue 22 part 3: an exactly-once job runs on two worker hosts. First one slot's
    executor JVM is killed (SIGKILL); once the job runs again and completed a checkpoint,
    the whole worker host of a slot is killed (every process in its namespace: worker JVM,
    executor JVM, Python workers). Each time the job restarts by itself on an executor
    Spark launches in its place (two cores at most: a spare worker takes it), and the
    output, in an exactly-once FileSink and PostgresSink, holds every input exactly once,
    with no prepared transaction left. The time from each kill to every slot running
    again is printed."""
    from conftest import wait_until  # not at the top: the driver runs this file alone

    cluster = netns_cluster
    run = cluster.folder / f"faults-{time.monotonic_ns()}"
    out, storage = run / "out", run / "checkpoints"
    n, rate = 48_000, 4_000  # about 12 s of records, besides the recoveries
    host: int | None = None
    recovered: dict[str, float] = {}

    def published_files() -> int:
        return len(list(out.glob("part-*")))

    def kill(victim: str, running: dict[str, Any]) -> dict[str, Any]:
        nonlocal host
        files = published_files()
        wait_until(
            lambda: published_files() > files or not driver.messages.empty(),
            f"a checkpoint completed before the {victim} kill",
            timeout_s=30,
        )
        assert published_files() > files, f"no checkpoint completed\n{driver.log_tail()}"
        victim_pid = running["slot_pids"]["0"]
        jvm = cluster.executor_of(victim_pid)
        assert jvm is not None, f"slot 0's Python worker {victim_pid} runs under no executor"
        killed_at = time.monotonic()
        if victim == "executor":
            os.kill(jvm, signal.SIGKILL)
        else:
            host = cluster.worker_index_of(victim_pid)
            assert host is not None, f"no worker of the cluster runs executor {jvm}"
            cluster.kill_worker_host(host)
        again = driver.expect("running", 60, f"the job ran again after the {victim} kill")
        recovered[victim] = time.monotonic() - killed_at
        assert again["attempt"] > running["attempt"], (running, again)
        assert alive(again["slot_pids"]["0"]) and alive(again["slot_pids"]["1"])
        return again

    # file:// URLs: a folder on a filesystem every host mounts (this machine's stands for it)
    options = json.dumps({"postgres": pg.options})
    driver = netns_driver(cluster, n, rate, out.as_uri(), storage.as_uri(), options)
    try:
        driver.expect("ready", 120, "the driver's SparkSession on the cluster started")
        first = driver.expect("running", 60, "both slots of the job registered")
        assert first["attempt"] == 0, first
        second = kill("executor", first)
        kill("worker", second)
        result = driver.expect("result", 90, "the job finished")
    finally:
        driver.stop()
        if host is not None:
            cluster.restart_worker(host)  # a later test has three workers again
    assert result["status"] == "FINISHED" and result["attempts"] >= 3, result
    _check_exact(_published(out), n, pg)
    print(
        "every slot running again after the kill: "
        + ", ".join(f"{victim} {s:.1f} s" for victim, s in recovered.items())
    )


#: the network-fault job's timeouts: Spark declares an executor lost after 10 s without a
#: heartbeat (sent every second, checked every second) and so does lockgate's driver for
#: a slot; see the test's docstring for why 10 s is safe here
NET_TIMEOUT_S = 10.0
NET_FAULT_OPTIONS = {
    "heartbeat_timeout_s": NET_TIMEOUT_S,
    "warm_up": True,
    "conf": {
        # the executors run this interpreter (a cluster with lockgate installed): their
        # Python daemons import lockgate before forking, so a failover's slots start fast
        "spark.python.daemon.module": "lockgate.executor.spark.daemon",
        "spark.network.timeout": f"{NET_TIMEOUT_S:.0f}s",
        "spark.executor.heartbeatInterval": "1s",
        "spark.network.timeoutInterval": "1s",
        # an executor on each of the three workers: one spare for a failover
        "spark.cores.max": "3",
    },
}
#: a slot host's link while slowed (each way): below what the job sends at full pace
SLOW_RATE = "256kbit"


@pytest.mark.hang_guard(480)
def test_m_r1_a_cut_network_then_a_slow_network_recover_with_exact_output(
    netns_cluster: NetnsCluster, pg: ClusterPostgres
) -> None:
    """Issue 22 part 3, the network faults: an exactly-once job (keyed state, a shuffle, an
    exactly-once FileSink and PostgresSink) runs on two of three worker hosts, the third
    executor spare.

    First one slot's host is cut off (its veth down inside its namespace: every packet lost,
    its processes running on) for longer than the heartbeat timeout: the driver finds the
    slot silent, fails the attempt over (M-R1) and the job runs again by itself on the
    remaining executor and the spare one. Then the host comes back: the old attempt's slot
    there ends (Spark kills the executor it declared lost) without committing anything (it
    never hears of a completed checkpoint again; its prepared transactions are rolled back).
    Then the traffic of a slot's host is slowed (a token bucket of ``SLOW_RATE`` each way,
    below what the job sends at full pace; this kernel has no netem) while checkpoints run:
    the job goes on without a restart and checkpoints complete, slower. Both sinks hold
    every input exactly once, the same records, and no prepared transaction is left. The
    time from the cut to every slot running again, and the pace of checkpoints before and
    while slow, are printed.

    Timeouts: lockgate's heartbeat timeout and Spark's ``spark.network.timeout`` are 10 s
    (heartbeats every second). That is safe here because every heartbeat path is kept
    short: slots send heartbeats from a control thread of their own, the slowed link still
    carries them (the token bucket queues at most 400 ms), and the test cluster has no long
    GC pauses (512 MB executors). With bigger heaps or a congested network keep Spark's
    default 120 s, or at least several times the longest pause, since a false loss costs a
    restart."""
    from conftest import wait_until  # not at the top: the driver runs this file alone

    cluster = netns_cluster
    run = cluster.folder / f"net-faults-{time.monotonic_ns()}"
    out, storage = run / "out", run / "checkpoints"
    n, rate = 96_000, 4_000  # about 24 s of records, besides the recoveries
    options = {**NET_FAULT_OPTIONS, "postgres": pg.options}
    cut: int | None = None
    slowed: int | None = None
    measured: dict[str, str] = {}

    def published_files() -> int:
        return len(list(out.glob("part-*")))

    def a_checkpoint_completes(when: str, timeout_s: float = 30) -> None:
        files = published_files()
        wait_until(
            lambda: published_files() > files or not driver.messages.empty(),
            f"a checkpoint completed {when}",
            timeout_s=timeout_s,
        )
        assert published_files() > files, f"no checkpoint completed {when}\n{driver.log_tail()}"

    driver = netns_driver(cluster, n, rate, out.as_uri(), storage.as_uri(), json.dumps(options))
    try:
        driver.expect("ready", 120, "the driver's SparkSession on the cluster started")
        first = driver.expect("running", 180, "every executor warmed up, both slots registered")
        a_checkpoint_completes("before the cut")
        victim = first["slot_pids"]["0"]
        cut = cluster.worker_index_of(victim)
        assert cut is not None, f"slot 0's Python worker {victim} runs on no worker"
        cut_at = time.monotonic()
        cluster.cut_worker_network(cut)
        again = driver.expect(
            "running", NET_TIMEOUT_S + 60, "the job ran again after the network cut"
        )
        recovered = time.monotonic() - cut_at
        measured["cut"] = f"running again {recovered:.1f} s after the cut"
        assert again["attempt"] > first["attempt"], (first, again)
        hosts = {cluster.worker_index_of(p) for p in again["slot_pids"].values()}
        assert cut not in hosts, f"a slot of the new attempt runs on the cut host {cut}"
        cluster.restore_worker_network(cut)
        restored_at, restored, cut = time.monotonic(), cut, None
        # the old attempt's slot on the cut host learns nothing of the failover while cut
        # off; once back, Spark ends it (its executor was declared lost and is killed)
        wait_until(
            lambda: not alive(victim),
            f"the old attempt's slot (pid {victim}) on the cut host ended after it came back",
            timeout_s=60,
        )
        measured["stale slot"] = (
            f"ended {time.monotonic() - restored_at:.1f} s after the host came back"
        )
        a_checkpoint_completes("after the cut host came back")

        def completed() -> int:
            ids = [int(p.parent.name[4:]) for p in storage.glob("chk-*/_metadata")]
            return max(ids, default=0)

        def three_checkpoints(when: str) -> str:
            """Wait for three checkpoints to complete; their pace, and the bytes that
            crossed the slowed host's link meanwhile."""
            bytes_before, at = cluster.veth_bytes(cluster.worker_ns[host]), time.monotonic()
            target = completed() + 3
            wait_until(
                lambda: completed() >= target or not driver.messages.empty(),
                f"three checkpoints completed {when}",
                timeout_s=90,
            )
            assert completed() >= target, f"checkpoints stopped {when}\n{driver.log_tail()}"
            took = time.monotonic() - at
            moved = cluster.veth_bytes(cluster.worker_ns[host]) - bytes_before
            return f"3 checkpoints in {took:.1f} s, {moved * 8 / took / 1e6:.2f} Mbit/s"

        host = cluster.worker_index_of(again["slot_pids"]["0"])
        assert host is not None
        measured["before slow"] = three_checkpoints("before the network is slowed")
        cluster.slow_worker_network(host, SLOW_RATE)
        slowed = host
        measured[f"slowed to {SLOW_RATE}"] = three_checkpoints("while the network is slow")
        cluster.unslow_worker_network(host)
        slowed = None
        assert driver.messages.empty(), (
            f"the slow network restarted the job: {driver.messages.get()}\n{driver.log_tail()}"
        )
        result = driver.expect("result", 120, "the job finished")
    finally:
        if cut is not None:
            cluster.restore_worker_network(cut)
        if slowed is not None:
            cluster.unslow_worker_network(slowed)
        driver.stop()
    print(f"cut host {restored}; " + "; ".join(f"{k}: {v}" for k, v in measured.items()))
    assert result["status"] == "FINISHED" and result["attempts"] == 2, result
    _check_exact(_published(out), n, pg)


SUBMIT_REST_PORT = 18081


def test_m_c8_a_submitted_supervised_driver_killed_on_its_worker_resumes_and_ends_exact(
    netns_cluster: NetnsCluster, pg: ClusterPostgres
) -> None:
    """Issue 22 parts 4 and 5: ``lockgate submit --supervise`` (spark-submit --deploy-mode
    cluster through Spark's PythonRunner) from the client host starts the driver on a worker
    host; the job answers the remote command line at that worker's address with the token
    given in advance. The driver's Python process is killed (SIGKILL) mid-job: the cluster
    starts the driver again (--supervise), which resumes from the newest completed
    checkpoint by itself (M-C8) and answers again. A drained stop with savepoint through the
    remote command line ends the job, the cluster reports the driver FINISHED, and the
    FileSink and the PostgresSink hold every input exactly once (the same records), with no
    temporary file and no prepared transaction left."""
    from conftest import wait_until  # not at the top: the driver runs this file alone

    cluster = netns_cluster
    run = cluster.folder / f"submit-{time.monotonic_ns()}"
    run.mkdir()
    out, storage, savepoint = run / "out", run / "checkpoints", run / "savepoint"
    token_file = run / "token"
    token = secrets.token_urlsafe(32)
    token_file.write_text(token)
    token_file.chmod(0o600)
    n = 6000  # 12 s at 500 records/s
    env = cluster.driver_env()

    def lockgate(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cluster.driver_command(sys.executable, "-m", "lockgate.cli", *args),
            env={**env, "LOCKGATE_TOKEN": token},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )

    submitted = lockgate(
        "submit",
        "--master",
        cluster.master_url,
        "--conf",
        "spark.cores.max=2",
        "--conf",
        "spark.executor.cores=1",
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.ui.enabled=false",
        "--supervise",
        "--rest-bind",
        "0.0.0.0",
        "--rest-port",
        str(SUBMIT_REST_PORT),
        "--rest-token-file",
        str(token_file),
        str(HERE / "submit_job.py"),
        out.as_uri(),
        storage.as_uri(),
        str(n),
        pg.options["dsn"],
        pg.options["table"],
        pg.options["prefix"],
        timeout_s=300,
    )
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    driver_id = submitted.stdout.strip().splitlines()[-1]
    assert driver_id.startswith("driver-"), submitted.stdout

    def driver() -> dict[str, Any]:
        status = cluster.status()
        for d in status.get("activedrivers", []) + status.get("completeddrivers", []):
            if d["id"] == driver_id:
                return d
        return {}

    def driver_log() -> str:
        logs = sorted(cluster.folder.glob(f"work/*/{driver_id}/std*"))
        return "\n".join(f"--- {p} ---\n{p.read_text(errors='replace')[-3000:]}" for p in logs)

    def driver_host() -> str:
        wait_until(lambda: driver().get("state") == "RUNNING", "the master ran the driver", 90)
        workers = {w["id"]: w["host"] for w in cluster.status()["workers"]}
        host = workers[driver()["worker"]]
        assert host in cluster.worker_addresses, (host, cluster.worker_addresses)
        return host

    def answering(url: str) -> None:
        def running() -> bool:
            try:
                done = lockgate("status", "submitted", "--url", url, timeout_s=30)
            except subprocess.TimeoutExpired:
                return False  # a loaded host: ask again, within the wait's own bound
            return done.returncode == 0 and "RUNNING" in done.stdout

        wait_until(
            running,
            lambda: f"the job answered 'lockgate status --url {url}'\n{driver_log()}",
            180,
            every_s=0.5,
        )

    def published() -> list[int]:
        values = []
        for part in out.glob("part-*"):
            values += [json.loads(line)["v"] for line in part.read_text().splitlines() if line]
        return values

    host = driver_host()
    answering(f"http://{host}:{SUBMIT_REST_PORT}")
    wait_until(lambda: len(published()) >= 1000, f"records published\n{driver_log()}", 120)
    ns = cluster.worker_ns[cluster.worker_addresses.index(host)]
    # the Python driver (the DriverWrapper JVM running PythonRunner names the script too)
    drivers = [
        p
        for p in _netns_pids(ns)
        if "submitted_driver.py" in " ".join(cmdline(p)) and "java" not in cmdline(p)[0]
    ]
    assert len(drivers) == 1, drivers
    os.kill(drivers[0], signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: not alive(drivers[0]), "the killed driver exited", 30)
    host = driver_host()  # --supervise: the master starts it again, maybe elsewhere
    url = f"http://{host}:{SUBMIT_REST_PORT}"
    answering(url)
    print(f"the driver answered again {time.monotonic() - killed_at:.1f} s after the kill")
    wait_until(lambda: len(published()) >= n, f"{n} records published\n{driver_log()}", 120)
    stopped = lockgate("stop", "submitted", "--savepoint", str(savepoint), "--drain", "--url", url)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == str(savepoint), stopped.stdout
    wait_until(
        lambda: driver().get("state") == "FINISHED", f"the driver finished\n{driver_log()}", 90
    )
    pg.check(_published(out), n)  # both sinks exact, no prepared transaction left
    values = sorted(published())
    assert values == list(range(n)), (
        f"{len(values)} records for {n} inputs: "
        f"{len(values) - len(set(values))} repeated, {n - len(set(values))} missing"
    )
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("part-")) == []
    # the supervised rerun resumed (a fresh start would have repeated 0.. in the output)
    stdout = "".join(
        p.read_text(errors="replace") for p in cluster.folder.glob(f"work/*/{driver_id}/stdout")
    )
    assert f"job 'submitted' resumes from its checkpoint storage {storage.as_uri()}" in stdout


if __name__ == "__main__":
    if len(sys.argv) > 4:
        faults_driver_main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), *sys.argv[4:7])
    else:
        driver_main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))

"""On a multi-host Spark standalone cluster (master, three 1-core workers and the driver each
in a network namespace of its own, ``netns_cluster.py``) a parallelism-2 job with a key_by
shuffle runs its two slots on two different hosts, as the addresses the slots registered with
the driver show, every connection of the job (the driver's control socket, each slot's
data-plane sockets) is on a namespace address, never 127.0.0.1, bytes crossed both slots'
hosts' links, and the result equals the local executor's.

Run as ``__main__`` (``python test_multi_host_cluster.py spark://ADDR:7077 N RATE``), this file
is the driver: inside the driver namespace it runs the job of ``cluster_driver.build_sums`` and
prints, once every slot registered, the control endpoint and each slot's registration, then the
result, as ``LOCKGATE-TEST {json}`` lines.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import alive, descendants
from cluster_driver import CLUSTER_CONF, PREFIX, build_sums, final_sums, say
from netns_cluster import NetnsCluster, netns_unavailable

import lockgate as lg

pytestmark = [pytest.mark.spark, pytest.mark.hang_guard(240)]

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


def _report_attempts(executor: Any, done: threading.Event) -> None:
    """Say ``running`` (with the slots' pids) each time every slot of an attempt registered."""
    attempt = 0
    while not done.is_set():
        if not executor.running.wait(0.05):
            continue
        say(
            "running", attempt=attempt, slot_pids={str(k): v for k, v in executor.slot_pids.items()}
        )
        attempt += 1
        while executor.running.is_set() and not done.is_set():
            done.wait(0.05)


def faults_driver_main(master: str, n: int, rate: float, out: str, storage: str) -> None:
    """An exactly-once job (keyed running sums into a FileSink, checkpoints every 300 ms,
    restarts without delay) on the cluster; its output and checkpoints on the shared
    filesystem every namespace sees."""
    import cloudpickle
    import cluster_driver

    from lockgate.connectors import FileSink, SequenceSource
    from lockgate.executor.spark import SparkExecutor

    # the job's functions travel by value: the executors need not import the test folder
    cloudpickle.register_pickle_by_value(cluster_driver)
    executor = SparkExecutor(master=master, conf=CLUSTER_CONF, slot_wait_timeout_s=90)
    executor.spark.sparkContext.setLogLevel("ERROR")
    say("ready", pid=os.getpid())
    done = threading.Event()
    threading.Thread(target=_report_attempts, args=(executor, done), daemon=True).start()
    try:
        env = lg.StreamEnvironment(parallelism=2)
        env.enable_checkpointing(300)
        env.checkpoint_config.storage = storage
        env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=4, delay=0))
        (
            env.from_source(SequenceSource(0, n, rows_per_second=rate), name="numbers")
            .uid("numbers")
            .key_by(lambda x: x % 11)
            .process(cluster_driver.SumWithPid(), name="sums")
            .uid("sums")
            .sink_to(FileSink(out, format="jsonl"), name="files")
            .uid("files")
        )
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


class NetnsDriver:
    """The driver subprocess inside the driver namespace; its JSON messages in a queue.
    ``extra``: more arguments (the exactly-once job's output and storage folders)."""

    def __init__(self, cluster: NetnsCluster, n: int, rate: float, *extra: str) -> None:
        self.log = cluster.folder / "driver.log"
        self._log_file = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            cluster.driver_command(
                sys.executable,
                str(Path(__file__).resolve()),
                cluster.master_url,
                str(n),
                str(rate),
                *extra,
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            env=cluster.driver_env(),
            cwd=HERE,
            start_new_session=True,
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, name="netns driver reader", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace")
            if line.startswith(PREFIX):
                self.messages.put(json.loads(line[len(PREFIX) :]))
        self.messages.put({"kind": "exited", "code": self.process.wait()})

    def expect(self, kind: str, timeout_s: float, what: str) -> dict[str, Any]:
        try:
            message = self.messages.get(timeout=timeout_s)
        except queue.Empty:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting until {what}\n{self.log_tail()}")
        if message["kind"] != kind:
            pytest.fail(f"expected '{kind}' ({what}), got {message}\n{self.log_tail()}")
        return message

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            text = []
        return f"--- driver log {self.log} ---\n" + "\n".join(text)

    def stop(self) -> None:
        """Wait (bounded) for the driver to exit, then kill what is left of it, by pid."""
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            pass
        pause = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [self.process.pid, *descendants(self.process.pid)]
            if not any(alive(p) for p in pids):
                break
            for p in pids:
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while any(alive(p) for p in pids) and time.monotonic() < deadline:
                pause.wait(0.05)  # bounded: the killed processes finish exiting
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._log_file.close()


@pytest.fixture(scope="module")
def netns_cluster() -> Iterator[NetnsCluster]:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    c = NetnsCluster(workers=3, cores=1, memory="1g", start_timeout_s=60)
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
    driver = NetnsDriver(cluster, n, rate)
    try:
        ready = driver.expect("ready", 60, "the driver's SparkSession on the cluster started")
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


def test_m_r1_a_killed_executor_then_a_killed_worker_host_recover_with_exact_output(
    netns_cluster: NetnsCluster,
) -> None:
    """Issue 22 part 3: an exactly-once job runs on two worker hosts. First one slot's
    executor JVM is killed (SIGKILL); once the job runs again and completed a checkpoint,
    the whole worker host of a slot is killed (every process in its namespace: worker JVM,
    executor JVM, Python workers). Each time the job restarts by itself on an executor
    Spark launches in its place (two cores at most: a spare worker takes it), and the
    output holds every input exactly once. The time from each kill to every slot running
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
    driver = NetnsDriver(cluster, n, rate, out.as_uri(), storage.as_uri())
    try:
        driver.expect("ready", 60, "the driver's SparkSession on the cluster started")
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
    records = _published(out)
    values = sorted(r["v"] for r in records)
    assert values == list(range(n)), (
        f"{len(values)} records for {n} inputs: "
        f"{len(values) - len(set(values))} repeated, {n - len(set(values))} missing"
    )
    finals: dict[int, int] = {}
    for r in records:
        finals[r["key"]] = max(finals.get(r["key"], 0), r["sum"])
    assert finals == {k: sum(range(k, n, 11)) for k in range(11)}
    print(
        "every slot running again after the kill: "
        + ", ".join(f"{victim} {s:.1f} s" for victim, s in recovered.items())
    )


if __name__ == "__main__":
    if len(sys.argv) > 4:
        faults_driver_main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), *sys.argv[4:6])
    else:
        driver_main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))

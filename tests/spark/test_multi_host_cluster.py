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


# ----------------------------------------------------------------- the test


class NetnsDriver:
    """The driver subprocess inside the driver namespace; its JSON messages in a queue."""

    def __init__(self, cluster: NetnsCluster, n: int, rate: float) -> None:
        self.log = cluster.folder / "driver.log"
        self._log_file = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            cluster.driver_command(
                sys.executable, str(Path(__file__).resolve()), cluster.master_url, str(n), str(rate)
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


if __name__ == "__main__":
    driver_main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))

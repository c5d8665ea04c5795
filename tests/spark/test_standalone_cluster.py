"""On a Spark standalone cluster (master + two 1-core workers on 127.0.0.1, started from the
pyspark package by ``cluster.py``) a parallelism-2 job with a key_by shuffle runs its two slots
in Python workers of two different executors and gives the local executor's result; killing
one executor JVM while a job runs fails the job within 10 s, leaving no Python worker of it.

The application runs in a subprocess (``cluster_driver.py``): this process already holds the
shared local[2] SparkContext, and a process can hold only one.
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
from cluster import StandaloneCluster, alive, descendants
from cluster_driver import PREFIX, build_sums, final_sums

import lockgate as lg

pytestmark = [pytest.mark.spark, pytest.mark.system, pytest.mark.hang_guard(400)]

HERE = Path(__file__).resolve().parent


class Driver:
    """The cluster driver subprocess: send a command, read its JSON answers."""

    def __init__(self, master_url: str, log: Path) -> None:
        self.log = log
        env = dict(os.environ)
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        env["PYSPARK_PYTHON"] = sys.executable
        self._log_file = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "cluster_driver.py"), master_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            env=env,
            cwd=HERE,
            start_new_session=True,
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(
            target=self._read, name="test cluster driver reader", daemon=True
        )
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace")
            if line.startswith(PREFIX):
                self.messages.put(json.loads(line[len(PREFIX) :]))
        self.messages.put({"kind": "exited", "code": self.process.wait()})

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command.encode() + b"\n")
        self.process.stdin.flush()

    def expect(self, kind: str, timeout_s: float, what: str) -> dict[str, Any]:
        """The next message, which must be of ``kind``, within ``timeout_s``."""
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
        pids = [self.process.pid, *descendants(self.process.pid)]
        if self.process.poll() is None:
            try:
                self.send("quit")
                self.process.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not any(alive(p) for p in pids):
                break
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass
            for p in pids:
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            pause = threading.Event()
            while any(alive(p) for p in pids) and time.monotonic() < deadline:
                pause.wait(0.05)  # bounded: the killed processes finish exiting
            try:
                self.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self._log_file.close()
        left = [p for p in pids if alive(p)]
        assert not left, f"the driver left processes running: {left}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(workers=2, cores=1, memory="1g")
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def driver(cluster: StandaloneCluster) -> Iterator[Driver]:
    d = Driver(cluster.master_url, cluster.folder / "driver.log")
    try:
        d.expect("ready", 120, "the driver's SparkSession on the cluster started")
        yield d
    finally:
        d.stop()


def test_a_keyed_job_runs_its_slots_on_two_executors_and_matches_the_local_result(
    cluster: StandaloneCluster, driver: Driver
) -> None:
    n, rate = 3000, 1000  # about 3 s: time enough to look at the slots' processes
    driver.send(f"sums {n} {rate}")
    running = driver.expect("running", 150, "both slots of the job registered")
    slot_pids = {int(k): v for k, v in running["slot_pids"].items()}
    assert sorted(slot_pids) == [0, 1]
    executors = cluster.executor_pids()
    hosts = {slot: cluster.executor_of(pid) for slot, pid in slot_pids.items()}
    first, second = hosts[0], hosts[1]
    assert first is not None and second is not None, (
        f"every slot's Python worker runs under an executor JVM of the cluster: slots {slot_pids}, "
        f"their executors {hosts}, the cluster's executors {executors}"
    )
    assert first != second, f"the two slots share executor {first}"
    assert executors[first] != executors[second], "the two executors share a worker"

    result = driver.expect("result", 60, "the job finished")
    records = result["records"]
    assert len(records) == n
    assert {r["pid"] for r in records} == set(slot_pids.values()), (
        "the keyed records were computed in the two slots' Python workers"
    )

    env = lg.StreamEnvironment(parallelism=2)
    local = build_sums(env, n).execute_and_collect(executor=lg.LocalExecutor())
    assert final_sums(records) == final_sums(local)
    assert sorted(r["key"] for r in records) == sorted(r["key"] for r in local)


def test_killing_one_executor_jvm_fails_the_job_within_10s_leaving_no_python_worker(
    cluster: StandaloneCluster, driver: Driver
) -> None:
    driver.send("endless")
    running = driver.expect("running", 150, "both slots of the endless job registered")
    slot_pids = {int(k): v for k, v in running["slot_pids"].items()}
    victim = cluster.executor_of(slot_pids[0])
    assert victim is not None, (
        f"slot 0 (pid {slot_pids[0]}) runs under none of {cluster.executor_pids()}"
    )

    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    failed = driver.expect("failed", 10, "the job failed after its executor was killed")
    elapsed = time.monotonic() - killed_at
    assert failed["error_type"] == "JobFailedError", failed
    assert elapsed < 10, f"the failure took {elapsed:.1f}s"
    left = {slot: pid for slot, pid in slot_pids.items() if alive(pid)}
    assert not left, f"Python workers of the failed job still running: {left}"

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import alive, cmdline
from netns_cluster import NetnsCluster, _netns_pids, netns_unavailable

pytestmark = [pytest.mark.spark, pytest.mark.hang_guard(400)]

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def netns_cluster() -> Iterator[NetnsCluster]:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    c = NetnsCluster(
        prefix="lgd", subnet="10.213.42", workers=3, cores=1, memory="1g", start_timeout_s=60
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()
        assert not c.leftovers(), f"the cluster left {c.leftovers()}"


SUBMIT_REST_PORT = 18081


def test_m_c8_a_submitted_supervised_driver_killed_on_its_worker_resumes_and_ends_exact(
    netns_cluster: NetnsCluster,
) -> None:
    """Issue 22 parts 4 and 5: ``lockgate submit --supervise`` (spark-submit --deploy-mode
    cluster through Spark's PythonRunner) from the client host starts the driver on a worker
    host; the job answers the remote command line at that worker's address with the token
    given in advance. The driver's Python process is killed (SIGKILL) mid-job: the cluster
    starts the driver again (--supervise), which resumes from the newest completed
    checkpoint by itself (M-C8) and answers again. A drained stop with savepoint through the
    remote command line ends the job, the cluster reports the driver FINISHED, and the
    FileSink holds every input exactly once, with no temporary file left."""
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
            done = lockgate("status", "submitted", "--url", url, timeout_s=30)
            return done.returncode == 0 and "RUNNING" in done.stdout

        wait_until(running, f"the job answered 'lockgate status --url {url}'\n{driver_log()}", 180)

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

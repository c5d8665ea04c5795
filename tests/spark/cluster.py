"""A Spark standalone cluster on 127.0.0.1 for tests, started from the installed pyspark package.

``SPARK_HOME`` is the ``pyspark`` package folder (the pip package has ``bin/spark-class`` but no
``sbin/start-*.sh``). One master and ``workers`` workers (``cores`` cores each) are started as
``spark-class`` processes, each in a session of its own; :meth:`StandaloneCluster.start` waits
(bounded) until the master's JSON status lists every worker ALIVE, and
:meth:`StandaloneCluster.stop` ends every process the cluster started, by pid: the process
groups of master and workers, and every process below them (executor JVMs, Python daemons and
workers, which put themselves in groups of their own).

    with StandaloneCluster(workers=2) as cluster:
        SparkExecutor(master=cluster.master_url, ...)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


class ClusterError(RuntimeError):
    """The cluster did not come up (the message includes the end of the process logs)."""


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------- /proc helpers


def parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def ancestors(pid: int) -> list[int]:
    """``pid``'s parent, grandparent, ... up to (not including) pid 0."""
    chain: list[int] = []
    current = parent_pid(pid)
    while current and current not in chain:
        chain.append(current)
        current = parent_pid(current)
    return chain


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = parent_pid(int(entry))
            if ppid is not None:
                out.setdefault(ppid, []).append(int(entry))
    return out


def descendants(pid: int) -> list[int]:
    kids = children_map()
    found: list[int] = []
    stack = list(kids.get(pid, []))
    while stack:
        p = stack.pop()
        if p not in found:
            found.append(p)
            stack.extend(kids.get(p, []))
    return found


def group_members(groups: set[int]) -> list[int]:
    """Live processes whose process group is one of ``groups``."""
    out: list[int] = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and int(fields[2]) in groups and fields[0] not in ("Z", "X"):
                out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    """Exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


# ------------------------------------------------------------------------- the cluster


@dataclass
class _Started:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class StandaloneCluster:
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    start_timeout_s: float = 180.0
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lockgate-cluster-")))

    def __post_init__(self) -> None:
        self.port = free_port()
        self.webui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.status_url = f"http://127.0.0.1:{self.webui_port}/json/"
        self._started: list[_Started] = []
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": spark_home(),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(self.folder / "logs"),
                "SPARK_WORKER_DIR": str(self.folder / "work"),
                "PYSPARK_PYTHON": sys.executable,
            }
        )
        return env

    def _spawn(self, name: str, args: list[str]) -> _Started:
        log = self.folder / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [os.path.join(spark_home(), "bin", "spark-class"), *args],
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.folder,
            )
        started = _Started(name, process, log)
        with self._lock:
            self._started.append(started)
        return started

    def start(self) -> StandaloneCluster:
        (self.folder / "work").mkdir(parents=True, exist_ok=True)
        try:
            self._spawn(
                "master",
                [
                    MASTER_CLASS,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.webui_port),
                ],
            )
            for i in range(self.workers):
                work = self.folder / "work" / f"worker-{i}"
                work.mkdir(parents=True, exist_ok=True)
                self._spawn(
                    f"worker-{i}",
                    [
                        WORKER_CLASS,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--webui-port",
                        str(free_port()),
                        "--work-dir",
                        str(work),
                        self.master_url,
                    ],
                )
            self._await_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def _await_workers(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        pause = threading.Event()
        last: Any = None
        while True:
            for s in self._started:
                if s.process.poll() is not None:
                    raise ClusterError(
                        f"{s.name} exited with {s.process.returncode} while the "
                        f"cluster started\n{self.log_tail(s.name)}"
                    )
            try:
                last = self.status()
            except (OSError, ValueError) as e:  # the master's web UI is not up yet
                last = e
            else:
                alive_workers = [w for w in last.get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive_workers) >= self.workers:
                    return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"after {self.start_timeout_s:.0f}s the master at {self.status_url} did not "
                    f"list {self.workers} ALIVE workers; last status: {last!r}\n"
                    + "\n".join(self.log_tail(s.name) for s in self._started)
                )
            pause.wait(0.5)

    def stop(self, timeout_s: float = 15.0) -> None:
        """End every process the cluster started: TERM, then KILL what is left, by pid.

        Before each signal the process groups and descendants are looked up again, since a
        worker may have launched an executor since the last look."""
        with self._lock:
            started = list(self._started)
        groups = {s.process.pid for s in started}
        pids: set[int] = set()

        def scan() -> None:
            for s in started:
                pids.add(s.process.pid)
                pids.update(descendants(s.process.pid))
            pids.update(group_members(groups))

        pause = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            scan()
            for g in groups:
                try:
                    os.killpg(g, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            for p in pids:
                try:
                    os.kill(p, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + (timeout_s if sig == signal.SIGTERM else 10.0)
            while time.monotonic() < deadline:
                for s in started:
                    s.process.poll()  # reap the ones we started
                scan()
                if not any(alive(p) for p in pids):
                    break
                pause.wait(0.05)
            if not any(alive(p) for p in pids):
                break
        leftover = [p for p in pids if alive(p)]
        if leftover:
            raise ClusterError(f"processes of the cluster still running after SIGKILL: {leftover}")

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- inspection ------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.status_url, timeout=5) as r:
            return json.loads(r.read())

    @property
    def worker_pids(self) -> list[int]:
        return [s.process.pid for s in self._started if s.name.startswith("worker-")]

    def executor_pids(self) -> dict[int, int]:
        """Executor JVM pid -> the pid of the worker that launched it."""
        out: dict[int, int] = {}
        for worker in self.worker_pids:
            for p in descendants(worker):
                if alive(p) and EXECUTOR_CLASS in cmdline(p):
                    out[p] = worker
        return out

    def executor_of(self, pid: int) -> int | None:
        """The executor JVM ``pid`` (a Python worker) runs under, if any of this cluster's."""
        executors = self.executor_pids()
        for a in ancestors(pid):
            if a in executors:
                return a
        return None

    def log_tail(self, name: str, lines: int = 30) -> str:
        for s in self._started:
            if s.name == name:
                try:
                    text = s.log.read_text(errors="replace").splitlines()[-lines:]
                except OSError:
                    text = []
                return f"--- {name} ({s.log}) ---\n" + "\n".join(text)
        return ""

"""A multi-host Spark standalone cluster on one machine, for tests: network namespaces.

Each "host" is a network namespace of its own (``<prefix>-master``, ``<prefix>-w1`` ...,
``<prefix>-driver``) with one address of the project's private /24 on a veth pair whose
other end sits on a bridge in the root namespace (which holds the subnet's ``.1``, so the
test process reaches the master's web UI); loopback is up in each. The master and one worker
per worker namespace run from the installed pyspark's ``spark-class`` through
``ip netns exec``, bound to their namespace's address (``--host`` and ``SPARK_LOCAL_IP``), so
traffic between them crosses the bridge, never 127.0.0.1.

Guarantees: :meth:`NetnsCluster.start` first removes what an earlier run of the same prefix
left (only names with the prefix, which are the project's), waits (bounded) until the master
lists every worker ALIVE, and on any failure tears down what it made before raising;
:meth:`NetnsCluster.stop` ends every process the cluster started and every process still
inside one of its namespaces (by pid), then deletes the namespaces, veths and bridge. An
``atexit`` hook stops a cluster that was started and not stopped.

:func:`netns_unavailable` says why namespaces cannot be made here (not root, no ``ip``), for
a skip; ``scripts/cluster.sh`` does the same from a shell for people.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cluster import MASTER_CLASS, WORKER_CLASS, ClusterError, StandaloneCluster, _Started, alive

MASTER_PORT = 7077
MASTER_WEBUI_PORT = 8080


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be made on this machine, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); run the multi-host tests as root"
    if shutil.which("ip") is None:  # a fresh machine: scripts/cluster.sh installs iproute2
        script = Path(__file__).resolve().parents[2] / "scripts" / "cluster.sh"
        subprocess.run(["bash", str(script), "install"], capture_output=True, timeout=600)
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is missing: apt-get install iproute2"
    probe = f"lgprobe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise ClusterError(f"'ip {' '.join(args)}' failed: {done.stderr.strip()}")
    return done


def _tc(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["tc", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise ClusterError(f"'tc {' '.join(args)}' failed: {done.stderr.strip()}")
    return done


def _netns_pids(ns: str) -> list[int]:
    done = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()] if done.returncode == 0 else []


@dataclass
class NetnsCluster(StandaloneCluster):
    """A master, ``workers`` 1-core workers and a driver namespace, each on its own address.

    ``subnet`` is the first three octets of the /24 (the bridge takes ``.1``, the master
    ``.10``, worker i ``.10+i``, the driver ``.20``)."""

    prefix: str = "lgt"
    subnet: str = "10.213.38"
    workers: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.prefix.isalnum() or len(self.prefix) > 5:
            raise ValueError(f"prefix {self.prefix!r}: use 1-5 letters or digits")
        self.bridge = f"{self.prefix}-br"
        self.master_ns = f"{self.prefix}-master"
        self.worker_ns = [f"{self.prefix}-w{i + 1}" for i in range(self.workers)]
        self.driver_ns = f"{self.prefix}-driver"
        self.address: dict[str, str] = {self.master_ns: f"{self.subnet}.10"}
        for i, ns in enumerate(self.worker_ns):
            self.address[ns] = f"{self.subnet}.{11 + i}"
        self.address[self.driver_ns] = f"{self.subnet}.20"
        self.master_address = self.address[self.master_ns]
        self.worker_addresses = [self.address[ns] for ns in self.worker_ns]
        self.driver_address = self.address[self.driver_ns]
        self.port = MASTER_PORT
        self.webui_port = MASTER_WEBUI_PORT
        self.master_url = f"spark://{self.master_address}:{MASTER_PORT}"
        self.status_url = f"http://{self.master_address}:{MASTER_WEBUI_PORT}/json/"
        self._ns_of: dict[str, str] = {}
        self._started_once = False

    # -- names -----------------------------------------------------------------------
    @property
    def namespaces(self) -> list[str]:
        return [self.master_ns, *self.worker_ns, self.driver_ns]

    def host_veth(self, ns: str) -> str:
        """The root-namespace end of ``ns``'s veth pair (its byte counters are the host's
        traffic)."""
        return f"{self.prefix}h-{ns[len(self.prefix) + 1 :]}"[:15]

    def _peer_veth(self, ns: str) -> str:
        return f"{self.prefix}n-{ns[len(self.prefix) + 1 :]}"[:15]

    # -- the network -----------------------------------------------------------------
    def _teardown_network(self) -> None:
        existing = set(_ip("netns", "list", check=False).stdout.split())
        for ns in self.namespaces:
            if ns in existing:
                _ip("netns", "del", ns, check=False)
            _ip("link", "del", self.host_veth(ns), check=False)
        _ip("link", "del", self.bridge, check=False)

    def _kill_namespace_processes(self, timeout_s: float = 15.0) -> list[int]:
        """TERM, then KILL, every process inside one of the namespaces; the ones left."""
        existing = set(_ip("netns", "list", check=False).stdout.split())
        spaces = [ns for ns in self.namespaces if ns in existing]
        pause = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [p for ns in spaces for p in _netns_pids(ns)]
            if not pids:
                return []
            for p in pids:
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                for s in self._started:
                    s.process.poll()
                if not any(alive(p) for ns in spaces for p in _netns_pids(ns)):
                    return []
                pause.wait(0.05)
        return [p for ns in spaces for p in _netns_pids(ns) if alive(p)]

    def _make_network(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for ns in self.namespaces:
            host, peer = self.host_veth(ns), self._peer_veth(ns)
            _ip("netns", "add", ns)
            _ip("link", "add", host, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", ns)
            _ip("link", "set", host, "master", self.bridge)
            _ip("link", "set", host, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{self.address[ns]}/24", "dev", peer)
            _ip("-n", ns, "link", "set", peer, "up")
            _ip("-n", ns, "route", "add", "default", "via", f"{self.subnet}.1")

    # -- processes -------------------------------------------------------------------
    def env_for(self, ns: str) -> dict[str, str]:
        env = self.env()
        env["SPARK_LOCAL_IP"] = self.address[ns]
        env["SPARK_LOCAL_HOSTNAME"] = self.address[ns]
        return env

    def _spawn(self, name: str, args: list[str]) -> _Started:
        ns = self._ns_of[name]
        log = self.folder / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                ["ip", "netns", "exec", ns, os.path.join(self._spark_home, "bin", "spark-class")]
                + args,
                env=self.env_for(ns),
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

    def start(self) -> NetnsCluster:
        from cluster import spark_home

        self._spark_home = spark_home()
        (self.folder / "work").mkdir(parents=True, exist_ok=True)
        self._started_once = True
        atexit.register(self.stop)
        try:
            left = self._kill_namespace_processes()  # an earlier run's, same prefix
            if left:
                raise ClusterError(f"processes of an earlier cluster will not end: {left}")
            self._teardown_network()
            self._make_network()
            self._ns_of["master"] = self.master_ns
            self._spawn(
                "master",
                [
                    MASTER_CLASS,
                    "--host",
                    self.master_address,
                    "--port",
                    str(MASTER_PORT),
                    "--webui-port",
                    str(MASTER_WEBUI_PORT),
                ],
            )
            for i in range(len(self.worker_ns)):
                self._spawn_worker(i)
            self._await_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn_worker(self, i: int) -> None:
        ns = self.worker_ns[i]
        work = self.folder / "work" / f"worker-{i}"
        work.mkdir(parents=True, exist_ok=True)
        self._ns_of[f"worker-{i}"] = ns
        self._spawn(
            f"worker-{i}",
            [
                WORKER_CLASS,
                "--host",
                self.address[ns],
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--work-dir",
                str(work),
                self.master_url,
            ],
        )

    def kill_worker_host(self, i: int, timeout_s: float = 15.0) -> list[int]:
        """SIGKILL every process on worker ``i``'s host (its namespace): the worker JVM,
        its executor JVMs and their Python workers, as when the machine dies. Returns the
        pids killed; raises ``ClusterError`` if any is still alive after ``timeout_s``."""
        ns = self.worker_ns[i]
        pids = _netns_pids(ns)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        with self._lock:
            mine = [s for s in self._started if s.name == f"worker-{i}"]
            self._started = [s for s in self._started if s.name != f"worker-{i}"]
        for s in mine:
            s.process.wait(timeout_s)  # reaped: it was this process's child
        pause = threading.Event()
        deadline = time.monotonic() + timeout_s
        while any(alive(p) for p in pids):
            if time.monotonic() > deadline:
                raise ClusterError(f"processes of {ns} survived SIGKILL: {pids}")
            pause.wait(0.05)
        return pids

    def worker_index_of(self, pid: int) -> int | None:
        """The index of the worker whose executor runs the process ``pid`` (a Python worker
        of a slot), if any."""
        executor = self.executor_of(pid)
        if executor is None:
            return None
        worker = self.executor_pids().get(executor)
        with self._lock:
            for s in self._started:
                if s.process.pid == worker and s.name.startswith("worker-"):
                    return int(s.name.split("-", 1)[1])
        return None

    def restart_worker(self, i: int) -> None:
        """Start worker ``i`` again (after :meth:`kill_worker_host`) and wait until the
        master lists as many ALIVE workers as the cluster has."""
        self._spawn_worker(i)
        self._await_workers()

    # -- network faults ----------------------------------------------------------------
    def cut_worker_network(self, i: int) -> None:
        """Cut worker ``i``'s host off the network: its veth goes down inside its namespace
        (``ip link set down``), so every packet to and from it is lost, as when a cable is
        pulled; its processes keep running and their TCP connections stay open."""
        ns = self.worker_ns[i]
        _ip("-n", ns, "link", "set", self._peer_veth(ns), "down")

    def restore_worker_network(self, i: int) -> None:
        """Undo :meth:`cut_worker_network`: the veth comes up with its address and default
        route again (taking a link down drops its routes)."""
        ns = self.worker_ns[i]
        _ip("-n", ns, "link", "set", self._peer_veth(ns), "up")
        _ip("-n", ns, "route", "replace", "default", "via", f"{self.subnet}.1")

    def slow_worker_network(self, i: int, rate: str = "2mbit", latency: str = "400ms") -> None:
        """Slow worker ``i``'s traffic both ways: a token-bucket filter (``tc qdisc tbf``)
        of ``rate`` on each end of its veth, queueing packets up to ``latency`` (then
        dropping them). This machine's kernel has no ``netem``; ``tbf`` is in every
        kernel's tc and needs no extra package."""
        ns = self.worker_ns[i]
        args = ["tbf", "rate", rate, "burst", "16kb", "latency", latency]
        _tc("-n", ns, "qdisc", "replace", "dev", self._peer_veth(ns), "root", *args)
        _tc("qdisc", "replace", "dev", self.host_veth(ns), "root", *args)

    def unslow_worker_network(self, i: int) -> None:
        """Undo :meth:`slow_worker_network` (missing filters are fine)."""
        ns = self.worker_ns[i]
        _tc("-n", ns, "qdisc", "del", "dev", self._peer_veth(ns), "root", check=False)
        _tc("qdisc", "del", "dev", self.host_veth(ns), "root", check=False)

    def stop(self, timeout_s: float = 15.0) -> None:
        """End every process started (and any left in the namespaces), then delete the
        namespaces, veths and bridge. Safe to call twice."""
        if not self._started_once:
            return
        errors: list[str] = []
        try:
            super().stop(timeout_s)
        except ClusterError as e:
            errors.append(str(e))
        left = self._kill_namespace_processes(timeout_s)
        if left:
            errors.append(f"processes still inside the cluster's namespaces: {left}")
        self._teardown_network()
        self._started_once = False
        atexit.unregister(self.stop)
        if errors:
            raise ClusterError("; ".join(errors))

    def driver_command(self, *args: str) -> list[str]:
        """``args`` run inside the driver namespace."""
        return ["ip", "netns", "exec", self.driver_ns, *args]

    def driver_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SPARK_LOCAL_IP"] = self.driver_address
        env["SPARK_LOCAL_HOSTNAME"] = self.driver_address
        env["PYSPARK_PYTHON"] = sys.executable
        return env

    def veth_bytes(self, ns: str) -> int:
        """Bytes received plus sent by ``ns`` through its veth (counted at the bridge end)."""
        stats = Path("/sys/class/net") / self.host_veth(ns) / "statistics"
        return int((stats / "rx_bytes").read_text()) + int((stats / "tx_bytes").read_text())

    def leftovers(self) -> list[str]:
        """Namespaces and links of this cluster that still exist (empty after stop())."""
        spaces = set(_ip("netns", "list", check=False).stdout.split())
        links = _ip("-o", "link", "show", check=False).stdout
        out = [ns for ns in self.namespaces if ns in spaces]
        out += [
            n
            for n in [self.bridge, *map(self.host_veth, self.namespaces)]
            if f" {n}:" in links or f" {n}@" in links
        ]
        return out

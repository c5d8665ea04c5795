"""Soak: an endless exactly-once job on the multi-host cluster, a fault every few minutes,
its processes' memory, threads and open files sampled throughout (issue 22 part 6).

The cluster is the test suite's network-namespace cluster (``tests/spark/netns_cluster.py``:
a master, three 1-core workers and the driver, each a "host" of its own; root is needed).
The job (``bench/soak_driver.py``) runs at parallelism 2: a rate-limited endless sequence,
keyed one-second tumbling event-time windows on RocksDB state, checkpoints every second, an
exactly-once FileSink on the shared filesystem. Every ``--fault-every`` seconds one fault, in
turn: a slot's executor JVM killed (SIGKILL); a slot's whole worker host killed (worker JVM,
executor JVM, Python workers; the worker is started again once the job recovered); a slot's
Python worker killed. The recovery time of each (from the kill to every slot running again) is
measured. Every ``--sample-every`` seconds the resident memory, threads and open descriptors of
every process of the cluster are read from ``/proc``, by role: ``driver`` (the Python driver),
``driver-jvm``, ``master``, ``workers``, ``executors``, ``python-workers``.

At the end the job is stopped with a drained savepoint (every window fires, the sinks commit)
and the output is checked exact: one row per (key, window), each row's count, sum and maximum
equal to those of the contiguous input ``0..K`` the source emitted (``K`` the largest value
seen), so a lost or repeated record shows.

Flatness: for each role, the least-squares trend of memory and descriptors after the warm-up
(``--warm-up``, default a quarter of the run), leaving out each fault's recovery and the
``--settle`` seconds after it (replaced processes start small and grow back to their
working size), as growth over that span in percent of its mean (memory) and in
descriptors. A role is flat when memory grows less than ``--max-growth-pct`` (default
10 %) and descriptors by fewer than ``--max-fd-growth`` (default 16) over the span.

Output: ``samples.jsonl`` (every sample), ``faults.jsonl``, ``soak.png`` (memory and
descriptors per role over time, faults marked; needs matplotlib) in ``--out``, and one JSON
line per role plus a summary line on stdout. Exit status 0 only when every fault recovered,
the output is exact and every role is flat.

    sudo python bench/soak.py [--minutes 20] [--fault-every 120] [--sample-every 10]
                              [--rate 2000] [--keys 64] [--out DIR]
    python bench/soak.py --analyse DIR     # the flatness lines and plot of a finished run
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "spark"))

from cluster import cmdline, descendants
from netns_cluster import NetnsCluster, netns_unavailable
from soak_driver import PREFIX, SPAN, WINDOW_MS

FAULTS = ("executor", "worker-host", "python-worker")
ROLES = ("driver", "driver-jvm", "master", "workers", "executors", "python-workers")


# ----------------------------------------------------------------------- /proc readings


def read_process(pid: int) -> dict[str, int] | None:
    """Resident memory (bytes), threads and open descriptors of ``pid``; None once gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kb = int(fields.get("VmRSS", "0 kB").split()[0])
    return {"rss": rss_kb * 1024, "threads": int(fields["Threads"].strip()), "fds": fds}


def roles_of(cluster: NetnsCluster, driver_pid: int) -> dict[str, list[int]]:
    """The pids of each role now."""
    out: dict[str, list[int]] = {r: [] for r in ROLES}
    out["driver"] = [driver_pid]
    out["driver-jvm"] = [p for p in descendants(driver_pid) if "java" in " ".join(cmdline(p))]
    with cluster._lock:
        started = list(cluster._started)
    for s in started:
        if s.name == "master":
            out["master"] = [s.process.pid]
    executors = cluster.executor_pids()
    workers = set(cluster.worker_pids)
    # spark-class is a shell script that runs the JVM as its child: count the JVMs
    for w in workers:
        out["workers"] += [
            p
            for p in [w, *descendants(w)]
            if "org.apache.spark.deploy.worker.Worker" in " ".join(cmdline(p))
        ]
    out["executors"] = list(executors)
    for e in executors:
        out["python-workers"] += [p for p in descendants(e) if "python" in " ".join(cmdline(p))]
    return out


def sample(cluster: NetnsCluster, driver_pid: int, t: float) -> dict[str, Any]:
    row: dict[str, Any] = {"t": round(t, 1)}
    for role, pids in roles_of(cluster, driver_pid).items():
        readings = [r for r in map(read_process, pids) if r is not None]
        row[role] = {
            "processes": len(readings),
            "rss_mb": round(sum(r["rss"] for r in readings) / 2**20, 1),
            "threads": sum(r["threads"] for r in readings),
            "fds": sum(r["fds"] for r in readings),
        }
    return row


def sample_until(
    cluster: NetnsCluster,
    driver: SoakDriver,
    started: float,
    every_s: float,
    folder: Path,
    samples: list[dict[str, Any]],
    stop: threading.Event,
) -> None:
    """Append a sample every ``every_s`` to ``samples`` (and ``samples.jsonl``) until
    ``stop``; faults and recoveries do not hold it up (it runs on a thread of its own)."""
    with open(folder / "samples.jsonl", "w") as out:
        next_at = started
        while not stop.is_set():
            try:
                row = sample(cluster, driver.process.pid, time.monotonic() - started)
            except OSError as e:  # a process ended while it was read: the next sample counts
                print(f"soak: a sample failed ({e}); going on", file=sys.stderr)
                next_at += every_s
                stop.wait(max(0.0, next_at - time.monotonic()))
                continue
            row["checkpoint"] = driver.progress.get("checkpoint")
            row["checkpoint_ms"] = driver.progress.get("checkpoint_ms")
            samples.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            next_at += every_s
            stop.wait(max(0.0, next_at - time.monotonic()))


# ----------------------------------------------------------------------- the driver


class SoakDriver:
    """``soak_driver.py`` inside the driver namespace; its messages in a queue."""

    def __init__(self, cluster: NetnsCluster, out: str, storage: str, rate: float, keys: int):
        self.log = cluster.folder / "soak-driver.log"
        self._log_file = open(self.log, "wb")  # noqa: SIM115 - closed in close()
        env = cluster.driver_env()
        env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
        self.process = subprocess.Popen(
            cluster.driver_command(
                sys.executable,
                str(HERE / "soak_driver.py"),
                cluster.master_url,
                out,
                storage,
                str(rate),
                str(keys),
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            env=env,
            cwd=HERE,
            start_new_session=True,
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.progress: dict[str, Any] = {}
        threading.Thread(target=self._read, name="soak driver reader", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace")
            if not line.startswith(PREFIX):
                continue
            message = json.loads(line[len(PREFIX) :])
            if message["kind"] == "progress":
                self.progress = message
            else:
                self.messages.put(message)
        self.messages.put({"kind": "exited", "code": self.process.wait()})

    def expect(self, kind: str, timeout_s: float, what: str) -> dict[str, Any]:
        try:
            message = self.messages.get(timeout=timeout_s)
        except queue.Empty:
            raise SoakError(f"timed out after {timeout_s:.0f} s waiting until {what}") from None
        if message["kind"] != kind:
            raise SoakError(f"expected '{kind}' ({what}), got {message}")
        return message

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((command + "\n").encode())
        self.process.stdin.flush()

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {self.log} ---\n" + "\n".join(text)

    def close(self) -> None:
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            for p in [self.process.pid, *descendants(self.process.pid)]:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.process.wait(30)
        self._log_file.close()


class SoakError(RuntimeError):
    """The soak could not go on; the message says where it stopped."""


# ----------------------------------------------------------------------- faults


def inject(
    cluster: NetnsCluster, driver: SoakDriver, kind: str, running: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Inject fault ``kind`` into slot 0 and wait until every slot runs again; the new
    ``running`` message and the fault's record."""
    victim = int(running["slot_pids"]["0"])
    executor = cluster.executor_of(victim)
    if executor is None:
        raise SoakError(f"slot 0's Python worker {victim} runs under no executor of the cluster")
    host = cluster.worker_index_of(victim)
    killed_at = time.monotonic()
    if kind == "executor":
        os.kill(executor, signal.SIGKILL)
    elif kind == "python-worker":
        os.kill(victim, signal.SIGKILL)
    else:
        if host is None:
            raise SoakError(f"no worker of the cluster runs executor {executor}")
        cluster.kill_worker_host(host)
    again = driver.expect("running", 180, f"the job ran again after the {kind} kill")
    recovered_s = time.monotonic() - killed_at
    if again["attempt"] <= running["attempt"]:
        raise SoakError(f"no new attempt after the {kind} kill: {running} then {again}")
    if kind == "worker-host":
        assert host is not None
        cluster.restart_worker(host)
    return again, {"kind": kind, "recovered_s": round(recovered_s, 2), "attempt": again["attempt"]}


# ----------------------------------------------------------------------- checks


def check_output(out: Path, keys: int) -> dict[str, Any]:
    """Every (key, window) once, with exactly the count and sum of each segment's contiguous
    prefix ``s * SPAN .. top_s`` (``top_s`` the largest value seen of segment ``s``)."""
    rows = []
    for part in sorted(out.glob("part-*")):
        with open(part, encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    if not rows:
        return {"exact": False, "problem": "no output"}
    problems: list[str] = []
    records = 0
    for segment in (0, 1):
        mine = [r for r in rows if r["k"] // keys == segment]
        if not mine:
            problems.append(f"no output of segment {segment}")
            continue
        base = segment * SPAN
        i = np.arange(base, max(r["max_v"] for r in mine) + 1, dtype=np.int64)
        records += len(i)
        group = ((i - base) // WINDOW_MS) * keys + i % keys
        count = np.bincount(group)
        total = np.zeros(len(count), dtype=np.int64)
        np.add.at(total, group, i)  # exact: int64, no float rounding
        seen: set[int] = set()
        for r in mine:
            g = (r["window_start"] // WINDOW_MS) * keys + r["k"] % keys
            if g in seen:
                problems.append(f"window {r['window_start']} of key {r['k']} twice")
                continue
            seen.add(g)
            if g >= len(count) or r["count"] != count[g] or r["sum_v"] != int(total[g]):
                problems.append(f"window {r['window_start']} of key {r['k']}: {r}")
        missing = [int(g) for g in np.flatnonzero(count) if int(g) not in seen]
        if missing:
            problems.append(
                f"segment {segment}: {len(missing)} windows missing, e.g. {missing[:5]}"
            )
    return {
        "exact": not problems,
        "records": records,
        "windows": len(rows),
        "problems": problems[:10],
    }


def trend(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``ts`` (per second)."""
    if len(ts) < 3:
        return 0.0
    return float(np.polyfit(np.asarray(ts), np.asarray(ys, dtype=float), 1)[0])


def steady(
    samples: list[dict[str, Any]], faults: list[dict[str, Any]], warm_up_s: float, settle_s: float
) -> list[dict[str, Any]]:
    """The samples after the warm-up that are not within a fault's recovery: from the fault
    to ``settle_s`` after every slot ran again (the replaced processes start small and
    grow back to their working size; that is not a trend)."""
    windows = [(f["t"], f["t"] + f["recovered_s"] + settle_s) for f in faults]
    return [
        s
        for s in samples
        if s["t"] >= warm_up_s and not any(lo <= s["t"] <= hi for lo, hi in windows)
    ]


def flatness(
    after: list[dict[str, Any]], max_growth_pct: float, max_fd_growth: float
) -> list[dict[str, Any]]:
    out = []
    if len(after) < 3:
        return out
    span = after[-1]["t"] - after[0]["t"]
    for role in ROLES:
        ts = [s["t"] for s in after]
        rss = [s[role]["rss_mb"] for s in after]
        fds = [s[role]["fds"] for s in after]
        threads = [s[role]["threads"] for s in after]
        mean_rss = float(np.mean(rss)) or 1.0
        growth_pct = trend(ts, rss) * span / mean_rss * 100
        fd_growth = trend(ts, fds) * span
        out.append(
            {
                "case": "soak-role",
                "role": role,
                "samples": len(after),
                "span_s": round(span),
                "rss_mb_mean": round(mean_rss, 1),
                "rss_mb_min": min(rss),
                "rss_mb_max": max(rss),
                "rss_growth_pct": round(growth_pct, 2),
                "fds_mean": round(float(np.mean(fds)), 1),
                "fds_growth": round(fd_growth, 1),
                "threads_growth": round(trend(ts, threads) * span, 1),
                "flat": growth_pct < max_growth_pct and fd_growth < max_fd_growth,
            }
        )
    return out


def report_flatness(
    samples: list[dict[str, Any]], faults: list[dict[str, Any]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Print and return one line per role (see :func:`flatness`)."""
    warm_up = args.warm_up or args.minutes * 15
    roles = flatness(
        steady(samples, faults, warm_up, args.settle), args.max_growth_pct, args.max_fd_growth
    )
    for r in roles:
        print(json.dumps(r))
    return roles


def analyse(folder: Path, args: argparse.Namespace) -> int:
    """``--analyse FOLDER``: the flatness lines and the plot again, from a run's
    ``samples.jsonl`` and ``faults.jsonl`` (nothing runs)."""

    def lines(name: str) -> list[dict[str, Any]]:
        with open(folder / name) as f:
            return [json.loads(line) for line in f if line.strip()]

    samples, faults = lines("samples.jsonl"), lines("faults.jsonl")
    args.minutes = samples[-1]["t"] / 60 if samples else args.minutes
    roles = report_flatness(samples, faults, args)
    problem = plot(samples, faults, folder / "soak.png")
    flat = bool(roles) and all(r["flat"] for r in roles)
    print(
        json.dumps(
            {"case": "soak-analysis", "flat": flat, "plot": problem or str(folder / "soak.png")}
        )
    )
    return 0 if flat else 1


def plot(samples: list[dict[str, Any]], faults: list[dict[str, Any]], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no plot"
    fig, (mem, fds) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    ts = [s["t"] / 60 for s in samples]
    for role in ROLES:
        mem.plot(ts, [s[role]["rss_mb"] for s in samples], label=role)
        fds.plot(ts, [s[role]["fds"] for s in samples], label=role)
    for f in faults:
        for ax in (mem, fds):
            ax.axvline(f["t"] / 60, color="grey", linestyle=":", linewidth=1)
    mem.set_ylabel("resident memory (MiB)")
    fds.set_ylabel("open descriptors")
    fds.set_xlabel("minutes (dotted: a fault)")
    mem.legend(loc="upper left", fontsize="small", ncol=3)
    mem.set_title("lockgate soak on the multi-host cluster, per role")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return None


# ----------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> int:
    reason = netns_unavailable()
    if reason is not None:
        print(f"soak: {reason}", file=sys.stderr)
        return 2
    folder = Path(args.out or tempfile.mkdtemp(prefix="lockgate-soak-"))
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    out, storage = folder / "out", folder / "checkpoints"
    cluster = NetnsCluster(
        prefix="lgsk", subnet="10.213.41", workers=3, cores=1, memory="1g", folder=folder / "cl"
    )
    samples: list[dict[str, Any]] = []
    faults: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"case": "soak", "cores": os.cpu_count()}
    cluster.start()
    driver: SoakDriver | None = None
    try:
        driver = SoakDriver(cluster, out.as_uri(), storage.as_uri(), args.rate, args.keys)
        driver.expect("ready", 120, "the driver's SparkSession started")
        running = driver.expect("running", 180, "every slot of the job registered")
        started = time.monotonic()
        end = started + args.minutes * 60
        stop_sampling = threading.Event()
        sampler = threading.Thread(
            target=sample_until,
            args=(cluster, driver, started, args.sample_every, folder, samples, stop_sampling),
            name="soak sampler",
            daemon=True,
        )
        sampler.start()
        next_fault = started + args.fault_every
        try:
            while time.monotonic() < end:
                now = time.monotonic()
                if now >= next_fault and now + 30 < end:
                    kind = FAULTS[len(faults) % len(FAULTS)]
                    running, fault = inject(cluster, driver, kind, running)
                    fault["t"] = round(now - started, 1)
                    faults.append(fault)
                    print(json.dumps({"case": "soak-fault", **fault}), flush=True)
                    next_fault += args.fault_every
                if not driver.messages.empty():
                    raise SoakError(f"the job said {driver.messages.get()}")
                stop_sampling.wait(max(0.0, min(next_fault, end) - time.monotonic()))
        finally:
            stop_sampling.set()
            sampler.join(60)
        driver.send("stop")
        result = driver.expect("result", 300, "the job stopped with a drained savepoint")
        summary.update(status=result["status"], attempts=result["attempts"])
    except SoakError as e:
        summary["error"] = str(e)
        if driver is not None:
            summary["driver_log"] = driver.log_tail()
    finally:
        if driver is not None:
            if driver.process.poll() is None:
                try:
                    driver.send("stop")
                except OSError:
                    pass
            driver.close()
        cluster.stop()
    with open(folder / "faults.jsonl", "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in faults)
    roles = report_flatness(samples, faults, args)
    output = check_output(out, args.keys) if "error" not in summary else {"exact": False}
    recoveries = [f["recovered_s"] for f in faults]
    summary.update(
        minutes=args.minutes,
        rate=args.rate,
        faults=len(faults),
        recovered_s_max=max(recoveries, default=None),
        recovered_s_median=float(np.median(recoveries)) if recoveries else None,
        flat=bool(roles) and all(r["flat"] for r in roles),
        folder=str(folder),
        **output,
    )
    problem = plot(samples, faults, folder / "soak.png")
    summary["plot"] = problem or str(folder / "soak.png")
    print(json.dumps(summary))
    ok = "error" not in summary and summary["exact"] and summary["flat"]
    return 0 if ok else 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=20.0, help="how long the job runs")
    p.add_argument("--fault-every", type=float, default=120.0, help="seconds between faults")
    p.add_argument("--sample-every", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--rate", type=float, default=2000.0, help="records per second")
    p.add_argument("--keys", type=int, default=64, help="distinct keys")
    p.add_argument("--warm-up", type=float, default=0.0, help="seconds (default: a quarter)")
    p.add_argument("--max-growth-pct", type=float, default=10.0)
    p.add_argument("--max-fd-growth", type=float, default=16.0)
    p.add_argument(
        "--settle",
        type=float,
        default=60.0,
        help="seconds after a fault's recovery left out of the flatness trend",
    )
    p.add_argument("--out", help="folder for the output and samples (default: a new temp one)")
    p.add_argument("--analyse", metavar="FOLDER", help="only analyse a finished run's folder")
    args = p.parse_args()
    if args.analyse:
        sys.exit(analyse(Path(args.analyse), args))
    for name in ("minutes", "fault_every", "sample_every", "rate"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.keys < 1:
        p.error("--keys must be at least 1")
    sys.exit(run(args))


if __name__ == "__main__":
    main()

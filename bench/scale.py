"""A keyed exactly-once job at growing parallelism, one JSON line per case (issue 43).

The job: a rate-limited sequence -> row map ``{"k": x % 100, "v": x}`` -> key_by(k) ->
running sum in ValueState (``bench/throughput.py``'s) -> key_by(total % 101) -> a count
per key -> broadcast -> a map -> discarding sink, with
aligned exactly-once checkpoints every ``--interval-ms``: two keyed edges and a
broadcast, so every pair of slots exchanges data in both directions on three edges.
Each parallelism runs in a process of its own (Spark: a ``local[P]`` session of P
slots; a process holds one SparkContext).

Figures per case: ``startup_s`` (``execute_async`` until every slot registered: Spark
only), ``first_checkpoint_s`` (until the first checkpoint completed), the completed
checkpoints' duration p50/p99 and alignment p50 (the slowest subtask's), and, on Spark,
per slot (sampled once while the job runs): its data-plane TCP connections (to or from
a slot's data-plane port), every TCP connection, open file descriptors and memory (RSS,
PSS and USS: a slot forked from Spark's worker daemon shares the daemon's imports, which
RSS counts in full, PSS as a share and USS not at all); with ``--idle`` the source does
not end: once every record went through and three more checkpoints completed, the same
figures again (``idle_...``: an idle slot holding the job's state), then a cancel; beside
them ``per_channel_sockets``: the sockets per slot the per-channel PUSH/PULL design
opened for the same job (4 for every network channel a slot's subtasks consume or
produce). Usage:

    python bench/scale.py [--executor spark|local] [--parallelism 8,16,32]
                          [--records N] [--rate R] [--interval-ms MS]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import cloudpickle
import throughput  # the same pipeline pieces (bench/ is on the path)

import lockgate as lg
from lockgate.connectors import DiscardingSink, SequenceSource


class Count(lg.KeyedProcessFunction):
    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value, ctx):
        c = self.count.value() + 1
        self.count.update(c)
        yield c


def build(env: lg.StreamEnvironment, records: int, rate: float, bounded: bool = True) -> None:
    (
        env.from_source(
            SequenceSource(0, records, rows_per_second=rate, bounded=bounded), name="numbers"
        )
        .map(throughput.to_row, name="rows")
        .key_by(throughput.key_of)
        .process(throughput.RunningSum(), name="sums")
        .key_by(lambda r: r["total"] % 101)
        .process(Count(), name="counts")
        .broadcast()
        .map(lambda c: c, name="everywhere")
        .sink_to(DiscardingSink(), name="sink")
    )


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def _inodes_of(pid: int) -> tuple[set[str], int]:
    """The socket inodes of process ``pid`` and its count of open descriptors."""
    inodes: set[str] = set()
    fds = os.listdir(f"/proc/{pid}/fd")
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes, len(fds)


def _tcp_table(pid: int) -> list[tuple[int, int, str]]:
    """(local port, remote port, inode) of the established TCP sockets in ``pid``'s
    network namespace."""
    rows = []
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] != "01":  # ESTABLISHED
                        continue
                    local = int(parts[1].rsplit(":", 1)[1], 16)
                    remote = int(parts[2].rsplit(":", 1)[1], 16)
                    rows.append((local, remote, parts[9]))
        except FileNotFoundError:
            continue
    return rows


def slot_figures(executor: Any) -> dict[str, Any]:
    """Per slot: data-plane connections, TCP connections, descriptors, RSS."""
    from lockgate.executor.spark.slot_channels import slot_key

    control = executor.control
    ports = {}
    for slot, registration in control.registrations.items():
        endpoint = registration["endpoints"][slot_key(slot)]
        ports[slot] = int(endpoint.rsplit(":", 1)[1])
    data_ports = set(ports.values())
    per_slot = []
    for slot, pid in sorted(executor.slot_pids.items()):
        try:
            inodes, fds = _inodes_of(pid)
            table = [row for row in _tcp_table(pid) if row[2] in inodes]
            with open(f"/proc/{pid}/status") as f:
                rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
            memory = _smaps_rollup(pid)
        except (OSError, StopIteration):  # the slot's process ended meanwhile
            continue
        data = [r for r in table if r[0] == ports.get(slot) or r[1] in data_ports]
        per_slot.append(
            {
                "slot": slot,
                "data": len(data),
                "tcp": len(table),
                "fds": fds,
                "rss_mb": rss_kb // 1024,
                # proportional (shared pages split among their sharers) and private
                "pss_mb": memory["Pss"] // 1024,
                "uss_mb": (memory["Private_Clean"] + memory["Private_Dirty"]) // 1024,
            }
        )
    if not per_slot:
        return {"slots": 0}
    return {
        "slots": len(per_slot),
        "data_connections_per_slot_max": max(s["data"] for s in per_slot),
        "tcp_per_slot_max": max(s["tcp"] for s in per_slot),
        "fds_per_slot_max": max(s["fds"] for s in per_slot),
        "rss_mb_per_slot_median": statistics.median(s["rss_mb"] for s in per_slot),
        "rss_mb_per_slot_max": max(s["rss_mb"] for s in per_slot),
        "pss_mb_per_slot_median": statistics.median(s["pss_mb"] for s in per_slot),
        "uss_mb_per_slot_median": statistics.median(s["uss_mb"] for s in per_slot),
        "uss_mb_per_slot_max": max(s["uss_mb"] for s in per_slot),
    }


def _smaps_rollup(pid: int) -> dict[str, int]:
    """A process's memory totals in kB (``/proc/<pid>/smaps_rollup``): ``Pss`` counts
    each shared page as its share, ``Private_*`` the pages only this process has. A
    slot forked from Spark's worker daemon shares the daemon's imports (copy-on-write),
    which its RSS counts in full."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                out[parts[0][:-1]] = int(parts[1])
    return out


def _sources_done(client: Any) -> int:
    """Records the sources emitted so far."""
    return sum(
        int(o["records_out"]) for o in client.metrics()["operators"] if o["name"] == "numbers"
    )


def per_channel_sockets(plan: Any) -> int:
    """Sockets per slot under the per-channel design (the most of any slot): a data and
    a priority socket at this end of every network channel it produces or consumes."""
    ends: dict[int, int] = {}
    for e in plan.edges.values():
        for p, c in e.channel_pairs():
            if p != c:
                ends[p] = ends.get(p, 0) + 1
                ends[c] = ends.get(c, 0) + 1
    return 2 * max(ends.values(), default=0)


def run_case(
    executor_name: str, p: int, records: int, rate: float, interval_ms: int, idle: bool = False
) -> None:
    # Spark's workers cannot import bench/: the pipeline pieces travel by value
    cloudpickle.register_pickle_by_value(throughput)
    env = lg.StreamEnvironment(parallelism=p)
    env.enable_checkpointing(interval_ms)
    env.checkpoint_config.storage = tempfile.mkdtemp(prefix="lockgate-scale-")
    build(env, records, rate, bounded=not idle)
    plan = env.get_execution_plan("scale")
    if executor_name == "spark":
        from lockgate.executor.spark import SparkExecutor

        executor: Any = SparkExecutor(
            master=f"local[{p}]", conf={"spark.ui.enabled": "false"}, slot_wait_timeout_s=300
        )
    else:
        executor = lg.LocalExecutor()
    started = time.monotonic()
    client = env.execute_async(f"scale p{p}", executor=executor)
    startup_s = None
    figures: dict[str, Any] = {}
    idle_figures: dict[str, Any] = {}
    first_checkpoint_s = None
    idle_since: int | None = None
    while not client.done():
        if startup_s is None and executor_name == "spark" and executor.running.is_set():
            startup_s = round(time.monotonic() - started, 2)
        if first_checkpoint_s is None and any(
            c.status == "completed" for c in client.checkpoints()
        ):
            first_checkpoint_s = round(time.monotonic() - started, 2)
            if executor_name == "spark":
                figures = slot_figures(executor)
        if idle and executor_name == "spark" and not idle_figures:
            # unbounded: once every record went through and 3 more checkpoints completed,
            # the slots are idle with the job's state: sample them, then stop
            done = sum(c.status == "completed" for c in client.checkpoints())
            if idle_since is None and _sources_done(client) >= records:
                idle_since = done
            if idle_since is not None and done >= idle_since + 3:
                idle_figures = {f"idle_{k}": v for k, v in slot_figures(executor).items()}
                client.cancel()
        try:
            client.wait(0.05)
        except TimeoutError:
            pass
    result = client.wait()
    completed = [c for c in client.checkpoints() if c.status == "completed"]
    durations = [c.duration_ms for c in completed if c.duration_ms is not None]
    alignments = [
        max((m.alignment_ms for m in c.subtasks.values()), default=0.0) for c in completed
    ]
    print(
        json.dumps(
            {
                "bench": "scale",
                "executor": executor_name,
                "parallelism": p,
                "records": records,
                "rate": rate,
                "status": result.status.name,
                "seconds": round(time.monotonic() - started, 1),
                "startup_s": startup_s,
                "first_checkpoint_s": first_checkpoint_s,
                "checkpoints": len(completed),
                "checkpoint_ms_p50": percentile(durations, 0.5),
                "checkpoint_ms_p99": percentile(durations, 0.99),
                "alignment_ms_p50": percentile(alignments, 0.5),
                **figures,
                **idle_figures,
                "per_channel_sockets": per_channel_sockets(plan),
                "cores": os.cpu_count(),
            }
        ),
        flush=True,
    )
    if executor_name == "spark":
        executor.spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--executor", default="spark", choices=["spark", "local"])
    ap.add_argument("--parallelism", default="8,16,32")
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--rate", type=float, default=20_000)
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--idle", action="store_true", help="also sample the slots idle (Spark)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        run_case(args.executor, args.one, args.records, args.rate, args.interval_ms, args.idle)
        return
    for p in (int(x) for x in args.parallelism.split(",")):
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--executor",
                args.executor,
                "--records",
                str(args.records),
                "--rate",
                str(args.rate),
                "--interval-ms",
                str(args.interval_ms),
                "--one",
                str(p),
                *(["--idle"] if args.idle else []),
            ],
            check=False,
        )


if __name__ == "__main__":
    main()

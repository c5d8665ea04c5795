"""Hostile neighbours against a running job, one JSON line per case (issue 18).

One endless checkpointed job runs on ``SparkExecutor(master=--master)`` (default
``local[2]``): a rate-limited sequence -> row map -> key_by (data crosses slots both
ways over the data plane) -> keyed running sum -> discarding sink, checkpoints every
``--interval-ms``. Each case attacks it, then checks that it is unaffected: still
running, and a checkpoint triggered after the attack completes (TRIGGERs still reach
every slot, every channel still flows).

Sockets (items 4 and 5):

oversize_registry   ``--frames`` frames of ``--frame-mb`` MB to the job registry's
                    ROUTER, from a separate process (its buffer is not counted).
oversize_control    the same to the Spark control ROUTER on the driver.
oversize_data       the same to the data-plane socket of every slot.
                    For these three: the peak RSS growth of the driver and of the slot
                    processes during the attack (sampled every 10 ms) must stay under a
                    tenth of one frame; the registry/control server must have disconnected
                    the sender without counting a message.
replay_registry     a savepoint command, captured on the way (a forwarding tap, as a
                    network observer would), then replayed ``--replays`` times: exactly
                    one savepoint is taken, every replay is dropped.
replay_control      slot 0's REGISTER and HEARTBEAT sent again under sequence numbers the
                    driver already passed (rebuilt byte for byte with the job's secret: the
                    bench cannot capture slot traffic), the heartbeat carrying a payload
                    that creates a file when unpickled: all dropped, nothing unpickled,
                    slot 0 keeps its connection.
replay_data         a data message under an already-used sequence number on one data
                    channel of every slot (again rebuilt with the secret), its element
                    creating a file when unpickled: dropped by the slot's receiver as a
                    replay, never decoded (no file), the job runs on.

Another part (checkpoint tampering, item 6) adds cases with :func:`case`, and so do
issue 37's attacks (each a module of its own, runnable alone, running its own jobs):
``delta_fork`` (bench/hostile_delta_fork.py), ``forged_offset_deltas`` and ``gzip_bomb``
(bench/hostile_kafka_batches.py), ``txn_prefix_collision`` (bench/hostile_txn_prefix.py),
``cookie_on_second_port``, ``sustained_slow_heads`` and ``planted_token_file``
(bench/hostile_rest.py), ``unsigned_export`` (bench/hostile_export.py); and issue 38's
``registry_read`` (bench/hostile_registry_read.py: Avro records built to crash a decoder).
Usage:

    python bench/hostile.py [--cases a,b] [--frame-mb 300] [--frames 3] [--replays 3]
                            [--master local[2]] [--interval-ms 1000]

Exit status 1 when a case is not ``ok``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import throughput  # bench/ is on the path when this file runs
import zmq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the forwarding tap of the replay tests captures the registry command
sys.path.insert(0, os.path.join(ROOT, "tests"))
import lockgate as lg
from lockgate.executor import job_registry
from lockgate.executor.spark import SparkExecutor
from lockgate.executor.spark.control import (
    HEARTBEAT,
    REGISTER,
    SLOT_CHANNEL,
    ControlServer,
    _frames,
)
from lockgate.executor.spark.mux.frames import DATA, MUX_CONTEXT, mux_header
from lockgate.executor.spark.slot_channels import slot_key
from lockgate.executor.spark.wire import encode
from zmq_tap import RouterTap

# the job's functions live in bench/throughput.py; Spark's Python workers cannot import
# bench modules, so they travel by value
cloudpickle.register_pickle_by_value(throughput)


class Tripwire:
    """Unpickling it creates ``path``: proof that a payload was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.path, "w"))


@dataclass
class Target:
    """The running job and what the cases need to reach it."""

    args: argparse.Namespace
    executor: SparkExecutor
    client: lg.JobClient
    job: job_registry.JobInfo
    work: str
    #: pids of processes the bench started itself (attackers): not the job's
    own: set[int] = field(default_factory=set)

    @property
    def control(self) -> ControlServer:
        server = self.executor.control
        if server is None:
            raise RuntimeError("the job has no running attempt")
        return server

    @property
    def registry_rejected(self) -> dict[str, int]:
        return dict(self.client._registration.rejected)


Case = Callable[[Target], dict[str, Any]]
CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Case], Case]:
    """Register a case: a function of the :class:`Target` returning its JSON fields
    (``ok`` among them); the runner adds ``case``, ``healthy`` and ``seconds``."""

    def register(fn: Case) -> Case:
        CASES[name] = fn
        return fn

    return register


# --------------------------------------------------------------------------- measuring


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _is_python(pid: int) -> bool:
    try:
        return "python" in os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False


def job_processes(target: Target) -> tuple[int, list[int]]:
    """(driver pid, the slot processes: Python descendants of the driver)."""
    me = os.getpid()
    tree, workers, todo = _children(), [], list(_children().get(me, []))
    while todo:
        pid = todo.pop()
        if pid in target.own:
            continue
        todo.extend(tree.get(pid, []))
        if _is_python(pid):
            workers.append(pid)
    return me, workers


class PeakRss:
    """Samples the driver's and the slot processes' RSS every 10 ms while it runs."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.driver, self.workers = job_processes(target)
        self.base_driver = _rss(self.driver)
        self.base_workers = {p: _rss(p) for p in self.workers}
        self.peak_driver = 0
        self.peak_workers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_driver = max(self.peak_driver, _rss(self.driver) - self.base_driver)
            self.peak_workers = max(
                self.peak_workers,
                max((_rss(p) - base for p, base in self.base_workers.items()), default=0),
            )
            self._stop.wait(0.01)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


_ATTACKER = """
import sys, zmq
kind, endpoint, size, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sock = zmq.Context.instance().socket(getattr(zmq, kind))
sock.connect(endpoint)
frame = bytearray(size)
for _ in range(count):
    sock.send_multipart([b"h" * 25, frame, b"m" * 16], copy=False)
sock.close(linger=int(sys.argv[5]))
"""


def attack(target: Target, kind: str, endpoints: list[str]) -> dict[str, Any]:
    """Send the oversize frames to ``endpoints`` from child processes; the RSS growth."""
    size = target.args.frame_mb * 1024 * 1024
    with PeakRss(target) as rss:
        procs = []
        for endpoint in endpoints:
            p = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _ATTACKER,
                    kind,
                    endpoint,
                    str(size),
                    str(target.args.frames),
                    str(target.args.linger_ms),
                ]
            )
            target.own.add(p.pid)
            procs.append(p)
        for p in procs:
            p.wait(120)
    limit = size // 10
    return {
        "frame_bytes": size,
        "frames": target.args.frames,
        "targets": len(endpoints),
        "driver_rss_growth": rss.peak_driver,
        "slot_rss_growth": rss.peak_workers,
        "slot_processes": len(rss.workers),
        "rss_ok": rss.peak_driver < limit and rss.peak_workers < limit,
    }


def wait_for(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.05)
    return True


def healthy(target: Target, timeout_s: float = 60.0) -> bool:
    """The job runs and a checkpoint triggered from now on completes."""
    if not target.client.running:
        return False
    started = time.time() * 1000

    def new_checkpoint() -> bool:
        return any(
            c.status == "completed" and c.trigger_timestamp >= started
            for c in target.client.checkpoints()
        )

    return wait_for(new_checkpoint, timeout_s) and target.client.running


# --------------------------------------------------------------------------- the cases


@case("oversize_registry")
def oversize_registry(target: Target) -> dict[str, Any]:
    server: Any = target.client._registration._server
    before, rejected = server._disconnects.disconnects, target.registry_rejected
    result = attack(target, "DEALER", [target.job.endpoint])
    disconnected = wait_for(lambda: server._disconnects.disconnects > before, 10)
    counted = target.registry_rejected != rejected
    return {
        **result,
        "disconnected": disconnected,
        "reached_the_job": counted,
        "ok": result["rss_ok"] and disconnected and not counted,
    }


@case("oversize_control")
def oversize_control(target: Target) -> dict[str, Any]:
    server: Any = target.control
    before, rejected = server._disconnects.disconnects, dict(server.rejected)
    result = attack(target, "DEALER", [server.endpoint])
    disconnected = wait_for(lambda: server._disconnects.disconnects > before, 10)
    counted = dict(server.rejected) != rejected
    return {
        **result,
        "disconnected": disconnected,
        "reached_the_driver": counted,
        "ok": result["rss_ok"] and disconnected and not counted,
    }


def data_channels(target: Target) -> list[tuple[Any, str]]:
    """One network channel (key, endpoint of its consumer's slot) consumed by every slot."""
    plan: Any = target.client._plan
    addresses: dict[Any, str] = {}
    for registration in target.control.registrations.values():
        addresses.update(registration["endpoints"])
    chosen = []
    for slot in range(plan.num_slots):
        keys = [
            (edge.id, p, c)
            for edge in plan.edges.values()
            for p, c in edge.channel_pairs()
            if c == slot and p != slot
        ]
        if keys and slot_key(slot) in addresses:
            chosen.append((min(keys), addresses[slot_key(slot)]))
    return chosen


@case("oversize_data")
def oversize_data(target: Target) -> dict[str, Any]:
    channels = data_channels(target)
    result = attack(target, "DEALER", [endpoint for _, endpoint in channels])
    return {
        **result,
        "channels": [str(k) for k, _ in channels],
        "ok": result["rss_ok"] and len(channels) > 0,
    }


@case("replay_registry")
def replay_registry(target: Target) -> dict[str, Any]:
    folder = os.path.join(target.work, "replay-savepoints")
    tap = RouterTap(target.job.endpoint)
    attacker: Any = zmq.Context.instance().socket(zmq.DEALER)
    try:
        via_tap = job_registry.JobInfo(**{**target.job.__dict__, "endpoint": tap.endpoint})
        before = target.registry_rejected.get("replayed", 0)
        taken = savepoints(target)
        job_registry.send_command(via_tap, "savepoint", path=folder, timeout=120)
        attacker.connect(target.job.endpoint)
        for _ in range(target.args.replays):
            attacker.send_multipart(tap.to_server[0])
        dropped = wait_for(
            lambda: target.registry_rejected.get("replayed", 0) - before == target.args.replays, 20
        )
        # a replay that ran would trigger a savepoint of its own; give it the time to
        wait_for(lambda: savepoints(target) - taken > 1, 5)
        count = savepoints(target) - taken
    finally:
        attacker.close(linger=0)
        tap.close()
    return {
        "replays": target.args.replays,
        "captured": "tap",
        "all_dropped": dropped,
        "savepoints": count,
        "ok": dropped and count == 1,
    }


def savepoints(target: Target) -> int:
    """The savepoints the job triggered so far."""
    return sum(c.is_savepoint for c in target.client.checkpoints())


@case("replay_control")
def replay_control(target: Target) -> dict[str, Any]:
    server: Any = target.control
    tripwire = os.path.join(target.work, "control-unpickled")
    slot = min(server.registrations)
    identity = server._identities.get(slot)
    # what slot 0 sent first (a heartbeat, then REGISTER), under the numbers it used
    messages = [
        _frames(
            server.auth,
            REGISTER,
            server.generation,
            slot,
            server.registrations[slot],
            seq,
            SLOT_CHANNEL,
        )
        for seq in range(1, target.args.replays + 1)
    ]
    messages.append(
        _frames(
            server.auth, HEARTBEAT, server.generation, slot, Tripwire(tripwire), 1, SLOT_CHANNEL
        )
    )
    rejected = dict(server.rejected)
    attacker: Any = zmq.Context.instance().socket(zmq.DEALER)
    try:
        attacker.connect(server.endpoint)
        for frames in messages:
            attacker.send_multipart(frames)

        def dropped() -> int:
            return sum(
                server.rejected[k] - rejected.get(k, 0) for k in ("replayed", "impersonation")
            )

        all_dropped = wait_for(lambda: dropped() == len(messages), 20)
        got_trigger = bool(attacker.poll(0))
    finally:
        attacker.close(linger=0)
    same_connection = server._identities.get(slot) == identity
    unpickled = os.path.exists(tripwire)
    return {
        "replays": len(messages),
        "captured": "rebuilt with the secret",
        "all_dropped": all_dropped,
        "dropped": dropped(),
        "unpickled": unpickled,
        "slot_keeps_its_connection": same_connection,
        "attacker_got_messages": got_trigger,
        "ok": all_dropped and not unpickled and same_connection and not got_trigger,
    }


@case("replay_data")
def replay_data(target: Target) -> dict[str, Any]:
    server: Any = target.control
    tripwire = os.path.join(target.work, "data-unpickled")
    channels = data_channels(target)
    sockets = []
    try:
        for key, endpoint in channels:
            sock: Any = zmq.Context.instance().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 2000)
            sock.connect(endpoint)
            sockets.append(sock)
            for _ in range(target.args.replays):
                header, body = encode(Tripwire(tripwire), server.generation, 0, 1)
                sock.send_multipart(
                    server.auth.seal(mux_header(DATA, 0, key, 0), header, body, context=MUX_CONTEXT)
                )
    finally:
        for sock in sockets:
            sock.close()  # delivers first (linger)
    # a checkpoint completing after the replays: every channel read past them
    ok_after = healthy(target)
    unpickled = os.path.exists(tripwire)
    return {
        "replays": target.args.replays * len(channels),
        "captured": "rebuilt with the secret",
        "channels": [str(k) for k, _ in channels],
        "unpickled": unpickled,
        "ok": ok_after and not unpickled and len(channels) > 0,
    }


# checkpoint tampering (item 6): a signed job's checkpoint rewritten without the key is
# refused before anything in it is unpickled (see bench/hostile_checkpoints.py)
from hostile_checkpoints import tampered_checkpoint

case("tampered_checkpoint")(tampered_checkpoint)

# issue 37, items 1-8: each attack is a module of its own (runnable alone, one JSON line
# per case) that runs its own jobs beside the one above.


def _attacks(module: str, *names: str) -> list[Case]:
    """The cases ``names`` of bench module ``module``. The Kafka ones take bench/ off
    sys.path (bench/kafka.py would shadow kafka-python): kafka-python is imported while
    it is off, then the path is put back."""
    saved = list(sys.path)
    try:
        loaded = importlib.import_module(module)
        if sys.path != saved:  # took bench/ off: kafka-python, whatever sys.path says later
            importlib.import_module("kafka")
    finally:
        sys.path[:] = saved
    return [getattr(loaded, name) for name in names]


for _attack in (
    *_attacks("hostile_delta_fork", "delta_fork"),  # 1: a fork writing the same Delta table
    *_attacks("hostile_kafka_batches", "forged_offset_deltas"),  # 2: offsets not increasing
    *_attacks("hostile_txn_prefix", "txn_prefix_collision"),  # 3: colliding default prefixes
    # 4: a page on another port of 127.0.0.1; 5: unfinished request heads, reopened as
    # they close; 6: a 0600 token file another user planted
    *_attacks(
        "hostile_rest", "cookie_on_second_port", "sustained_slow_heads", "planted_token_file"
    ),
    *_attacks("hostile_kafka_batches", "gzip_bomb"),  # 7: batches expanding a thousandfold
    *_attacks("hostile_export", "unsigned_export"),  # 8: export of a tripwire checkpoint
    # issue 38: registry records with a wrapping string length, a 10,000-deep recursive
    # record, an array of a 2**62 empty items
    *_attacks("hostile_registry_read", "registry_read"),
):
    case(_attack.__name__)(_attack)


# --------------------------------------------------------------------------- running


def start_job(args: argparse.Namespace, work: str) -> tuple[SparkExecutor, lg.JobClient]:
    executor = SparkExecutor(master=args.master)
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(args.interval_ms)
    env.checkpoint_config.storage = os.path.join(work, "checkpoints")
    throughput.keyed_running_sums(env, 10**12, args.rate, batch_size=200)
    return executor, env.execute_async("hostile-neighbours")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}"
    )
    parser.add_argument("--frame-mb", type=int, default=300)
    parser.add_argument("--frames", type=int, default=3)
    parser.add_argument("--replays", type=int, default=3)
    parser.add_argument(
        "--linger-ms",
        type=int,
        default=5000,
        help="how long an attacker keeps trying to send its frames",
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=20000, help="records per second")
    args = parser.parse_args(argv)
    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown or args.frame_mb <= 0 or args.frames <= 0 or args.replays <= 0:
        parser.error(
            f"unknown cases {unknown} (known: {', '.join(CASES)})"
            if unknown
            else "--frame-mb, --frames and --replays must be positive"
        )
    work = tempfile.mkdtemp(prefix="lockgate-hostile-")
    executor, client = start_job(args, work)
    failed = 0
    try:
        if not wait_for(lambda: client.running, 180) or not healthy(
            Target(args, executor, client, None, work), 120
        ):  # type: ignore[arg-type]
            raise RuntimeError("the job did not start and complete a checkpoint")
        job = next(j for j in job_registry.list_jobs() if j.job_id == client._registration.job_id)
        target = Target(args, executor, client, job, work)
        for name in names:
            began = time.monotonic()
            try:
                result = CASES[name](target)
            except Exception as e:  # noqa: BLE001 - a crashing case is reported, not fatal
                result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            ok_after = healthy(target)
            line = {
                "case": name,
                **result,
                "healthy": ok_after,
                "seconds": round(time.monotonic() - began, 2),
            }
            line["ok"] = bool(result.get("ok")) and ok_after
            failed += not line["ok"]
            print(json.dumps(line, default=str), flush=True)
    finally:
        client.cancel()
        try:
            client.wait(120)
        except BaseException:  # noqa: BLE001 - the cases were reported
            pass
        shutil.rmtree(work, ignore_errors=True)
        executor.spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

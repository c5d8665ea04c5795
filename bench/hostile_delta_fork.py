"""A job forked from a savepoint of a Delta job that keeps running (issue 37 item 1).

Job A writes a Delta table with checkpoints; a savepoint is taken while it runs, and job
B (same job name and sink uid: the usual fork of a job to try a new version) is started
from it and writes the same table. Before the fix, B's cleanup at start took A for a
dead, restored run and deleted A's pre-committed Parquet file; A then committed a Delta
version adding the deleted file, and reading the table failed with
``FileNotFoundError``. :func:`delta_fork` plays the fork at the worst moment: a gate sink
on a branch of A holds one of A's checkpoints open after A's Delta sink pre-committed its
file for it, B starts and cleans up, then the gate opens and A commits. The table must
read completely: every file the log lists is on disk, A's records are each there once
from 0, B's each once.

It is meant as a case of ``bench/hostile.py`` (``delta_fork``) and runs on its own too
(``LocalExecutor``), printing one JSON line::

    python bench/hostile_delta_fork.py
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

import lockgate as lg
from lockgate.connectors import DeltaSink, SequenceSource
from lockgate.connectors.base import Sink, SinkWriter

JOB = "hostile delta fork"
END = 10_000_000  # far more than is read: both jobs are drained
RATE = 2_000
WAIT_S = 120.0


class _Tag:
    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __call__(self, v: Any) -> dict[str, Any]:
        return {"v": int(v), "job": self.tag}


class _Gate(Sink):
    """In job ``a``, once ``<folder>/armed`` exists, holds the next checkpoint (its task
    does not acknowledge) until ``<folder>/opened`` exists, writing ``holding`` with the
    checkpoint id meanwhile (bounded)."""

    def __init__(self, folder: str, tag: str) -> None:
        self.folder = folder
        self.tag = tag

    def create_writer(self, ctx: lg.RuntimeContext) -> SinkWriter:
        return _GateWriter(self.folder, self.tag)


class _GateWriter(SinkWriter):
    def __init__(self, folder: str, tag: str) -> None:
        self.folder = folder
        self.tag = tag

    def write(self, batch: Any) -> None:
        pass

    def snapshot_state(self, checkpoint_id: int) -> None:
        def there(name: str) -> bool:
            return os.path.exists(os.path.join(self.folder, name))

        if self.tag != "a" or not there("armed") or there("opened"):
            return
        with open(os.path.join(self.folder, "holding"), "w") as f:
            f.write(str(checkpoint_id))
        deadline = time.monotonic() + WAIT_S
        while not there("opened"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"nobody opened the gate ({self.folder}/opened)")
            threading.Event().wait(0.02)


def _job(work: str, tag: str) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.enable_checkpointing(300)
    env.checkpoint_config.storage = os.path.join(work, f"checkpoints-{tag}")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    (
        env.from_source(SequenceSource(0, END, rows_per_second=RATE, batch_size=50, bounded=False))
        .uid("numbers")
        .map(_Tag(tag), name="tag")
        .uid("tag")
        .sink_to(DeltaSink(os.path.join(work, "table")), name="out")
        .uid("out")
    )
    env.from_source(SequenceSource(0, END, rows_per_second=10, batch_size=1, bounded=False)).uid(
        "ticks"
    ).sink_to(_Gate(work, tag), name="gate").uid("gate").disable_chaining()
    return env


def _completed(client: lg.JobClient) -> int:
    return sum(1 for c in client.checkpoints() if c.status == "completed")


def _until(predicate: Any, what: str) -> None:
    """Bounded polling: ``predicate`` true within ``WAIT_S``, else ``RuntimeError``."""
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting until {what}")
        threading.Event().wait(0.05)


def _checkpoints(client: lg.JobClient, count: int, what: str) -> None:
    def reached() -> bool:
        if client.done():
            client.wait(0)  # raises the job's error
            raise RuntimeError(f"{what}: the job ended early")
        return _completed(client) >= count

    _until(reached, f"{what} ({count} checkpoints)")


def _held(client: lg.JobClient, work: str) -> bool:
    path = os.path.join(work, "holding")
    if not os.path.exists(path):
        return False
    with open(path) as f:
        held = int(f.read() or 0)
    # three tasks (sequence -> tag -> out, ticks, gate): all but the gate acknowledged
    return any(
        c.checkpoint_id == held and c.status == "in_progress" and len(c.subtasks) >= 2
        for c in client.checkpoints()
    )


def _live_files(table: str) -> list[str]:
    """The data files the Delta log lists now (adds minus removes)."""
    live: set[str] = set()
    for path in sorted(glob.glob(os.path.join(table, "_delta_log", "*.json"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                action = json.loads(line)
                if "add" in action:
                    live.add(action["add"]["path"])
                if "remove" in action:
                    live.discard(action["remove"]["path"])
    return sorted(live)


def _run_of(values: list[int], start: int) -> bool:
    return values == list(range(start, start + len(values)))


def delta_fork(target: Any = None) -> dict[str, Any]:
    """The case (``target``, the job of ``bench/hostile.py``, is not needed). JSON
    fields: ``ok``, whether the table read, files the log lists that are missing, and
    each job's records."""
    import deltalake

    work = tempfile.mkdtemp(prefix="lockgate-hostile-delta-fork-")
    a = b = None
    try:
        a = _job(work, "a").execute_async(JOB)
        _checkpoints(a, 2, "job A runs")
        savepoint = a.trigger_savepoint(os.path.join(work, "savepoint"), timeout=WAIT_S)
        open(os.path.join(work, "armed"), "w").close()
        _until(lambda: _held(a, work), "A pre-committed a checkpoint the gate holds open")
        b = _job(work, "b").execute_async(JOB, restore_from=savepoint)
        _checkpoints(b, 1, "job B, forked from A's savepoint, runs")
        open(os.path.join(work, "opened"), "w").close()
        _checkpoints(a, _completed(a) + 2, "job A commits beside B")
        b.stop_with_savepoint(os.path.join(work, "stop-b"), drain=True, timeout=WAIT_S)
        a.stop_with_savepoint(os.path.join(work, "stop-a"), drain=True, timeout=WAIT_S)
        statuses = {}
        for name, client in (("a", a), ("b", b)):
            try:
                statuses[name] = client.wait(WAIT_S).status.name
            except Exception as e:  # noqa: BLE001 - reported in the JSON line
                statuses[name] = f"failed: {type(e).__name__}: {e}"[:300]
        table = os.path.join(work, "table")
        missing = [p for p in _live_files(table) if not os.path.exists(os.path.join(table, p))]
        try:
            records = deltalake.DeltaTable(table).to_pyarrow_table().to_pylist()
            readable = True
        except Exception as e:  # noqa: BLE001 - the attack's symptom, reported
            records, readable = [], f"{type(e).__name__}: {e}"[:300]
        got_a = sorted(r["v"] for r in records if r["job"] == "a")
        got_b = sorted(r["v"] for r in records if r["job"] == "b")
        result: dict[str, Any] = {
            "jobs": statuses,
            "table_readable": readable,
            "files_in_log": len(_live_files(table)),
            "missing_files": len(missing),
            "a_records": len(got_a),
            "a_each_once_from_0": _run_of(got_a, 0),
            "b_records": len(got_b),
            "b_each_once": bool(got_b) and _run_of(got_b, got_b[0]),
        }
        result["ok"] = (
            statuses == {"a": "FINISHED", "b": "FINISHED"}
            and readable is True
            and not missing
            and bool(got_a)
            and result["a_each_once_from_0"]
            and result["b_each_once"]
        )
        return result
    finally:
        open(os.path.join(work, "opened"), "w").close()  # never leave a task held
        for client in (a, b):
            if client is not None and not client.done():
                client.cancel()
                try:
                    client.wait(WAIT_S)
                except Exception:  # noqa: BLE001 - cleaning up after a failed case
                    pass
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    line = {"case": "delta_fork", **delta_fork()}
    print(json.dumps(line, default=str), flush=True)
    sys.exit(0 if line["ok"] else 1)

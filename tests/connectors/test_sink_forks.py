"""A job forked from a savepoint of a job that keeps running (issue 37 item 1; M-X1, M-X2).

Job A writes a table (Delta, FileSink's folder, Iceberg) with checkpoints; a savepoint is
taken while it runs, and job B (same job name, same sink uid: the usual fork to try a new
version) is started from that savepoint and writes the same table while A goes on. B's
restore commits the savepoint's pending transactions (idempotent: A commits them too)
and cleans up what earlier attempts left behind, but A is alive (its driver and writer
hold A's run lock in the folder, ``lockgate.connectors.run_locks``): nothing A may still
commit is deleted or aborted. Then A commits more checkpoints, both jobs are drained,
and the table reads completely: every record A emitted is there exactly once (A's
records are a contiguous run from 0), every record B emitted exactly once, and no file
the table refers to is missing. Once a restored run is gone, its leftovers are deleted.

The schedule waits for checkpoints and files, never for wall time. A ``Gate`` sink on a
branch of its own holds one checkpoint of A open (it does not acknowledge until the test
lets it) after A's table sink pre-committed its transaction for it: that transaction's
files are written, closed and not committed while B starts and cleans up (B's cleanup
runs before its first checkpoint can complete). Then the gate opens and A commits them.
"""

from __future__ import annotations

import glob
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from conftest import wait_until
from lockgate.connectors import DeltaSink, FileSink, IcebergSink, SequenceSource
from lockgate.connectors.base import Sink, SinkWriter

JOB = "forked job"
#: far more than the test reads: both jobs are drained long before their sources end
END = 10_000_000
RATE = 2_000
WAIT_S = 180.0


class Tagged:
    """A sequence number to the record ``{"v": v, "job": tag}`` (which job wrote it)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __call__(self, v: Any) -> dict[str, Any]:
        return {"v": int(v), "job": self.tag}


class Gate(Sink):
    """Discards its records; in job ``tag``, once the file ``armed`` exists, it holds the
    next checkpoint's barrier (its task does not acknowledge) until the file ``opened``
    exists, writing ``holding`` meanwhile. Polls the files with a bound (the test's
    failure names it), on either executor (files work across processes)."""

    def __init__(self, folder: Path, tag: str) -> None:
        self.folder = str(folder)
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
        pause = threading.Event()
        while not there("opened"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the test never opened the gate ({self.folder}/opened)")
            pause.wait(0.02)


def completed(client: lg.JobClient) -> int:
    return sum(1 for c in client.checkpoints() if c.status == "completed")


def wait_for_completed(client: lg.JobClient, count: int, what: str) -> None:
    """Wait until ``client``'s job has completed ``count`` checkpoints; fail at once if it
    ended (its error says why)."""

    def reached() -> bool:
        if client.done():
            result = client.wait(0)  # raises the job's error if it failed
            pytest.fail(f"{what}: the job ended early ({result.status})")
        return completed(client) >= count

    wait_until(reached, f"{what} ({count} checkpoints completed)", timeout_s=WAIT_S)


def sink_of(kind: str, tmp_path: Path) -> Any:
    if kind == "delta":
        return DeltaSink(str(tmp_path / "table"))
    if kind == "files":
        return FileSink(str(tmp_path / "out"), format="jsonl")
    catalog = {
        "name": "lgfork",
        "type": "sql",
        "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }
    return IcebergSink(catalog, "lg.forked")


def read_back(kind: str, tmp_path: Path, sink: Any) -> list[dict[str, Any]]:
    """Every record the table (or folder) publishes; raises when a file it refers to is
    missing."""
    if kind == "delta":
        import deltalake

        table = deltalake.DeltaTable(str(tmp_path / "table")).to_pyarrow_table()
        return table.to_pylist()
    if kind == "files":
        records = []
        for path in sorted(glob.glob(os.path.join(tmp_path / "out", "part-*"))):
            with open(path, encoding="utf-8") as f:
                records.extend(json.loads(line) for line in f)
        return records
    return sink._load_table().scan().to_arrow().to_pylist()


def job(executor: Any, tmp_path: Path, kind: str, tag: str) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.enable_checkpointing(300)
    env.checkpoint_config.storage = str(tmp_path / f"checkpoints-{tag}")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    (
        env.from_source(SequenceSource(0, END, rows_per_second=RATE, batch_size=50, bounded=False))
        .uid("numbers")
        .map(Tagged(tag), name="tag")
        .uid("tag")
        .sink_to(sink_of(kind, tmp_path), name="out")
        .uid("out")
    )
    env.from_source(SequenceSource(0, END, rows_per_second=10, batch_size=1, bounded=False)).uid(
        "ticks"
    ).sink_to(Gate(tmp_path, tag), name="gate").uid("gate").disable_chaining()
    return env


def held(client: lg.JobClient, gate: Path) -> bool:
    """Whether the gate holds a checkpoint that A's table sink acknowledged (its
    transaction for that checkpoint is pre-committed, not committed)."""
    if not (gate / "holding").exists():
        return False
    held_id = int((gate / "holding").read_text() or 0)
    for c in client.checkpoints():
        if c.checkpoint_id == held_id and c.status == "in_progress":
            # three tasks (sequence -> tag -> out, ticks, gate): all but the gate acked
            return len(c.subtasks) >= 2
    return False


def values_of(records: list[dict[str, Any]], tag: str) -> list[int]:
    return sorted(r["v"] for r in records if r["job"] == tag)


@pytest.mark.hang_guard(600)
@pytest.mark.parametrize("kind", ["delta", "files", "iceberg"])
def test_issue37_1_m_x2_a_fork_from_a_savepoint_leaves_the_running_jobs_files_alone(
    executor: Any, tmp_path: Path, kind: str
) -> None:
    a = job(executor, tmp_path, kind, "a").execute_async(JOB)
    b = None
    try:
        wait_for_completed(a, 2, "job A runs")
        savepoint = a.trigger_savepoint(str(tmp_path / "savepoint"), timeout=WAIT_S)
        (tmp_path / "armed").touch()
        wait_until(
            lambda: held(a, tmp_path),
            "A's sink pre-committed a checkpoint the gate holds open",
            timeout_s=WAIT_S,
        )
        b = job(executor, tmp_path, kind, "b").execute_async(JOB, restore_from=savepoint)
        # B cleaned up before its first checkpoint could complete
        wait_for_completed(b, 1, "job B, forked from A's savepoint, runs")
        (tmp_path / "opened").touch()
        # A commits the transaction it had pre-committed while B started
        wait_for_completed(a, completed(a) + 2, "job A commits beside B")
        b.stop_with_savepoint(str(tmp_path / "stop-b"), drain=True, timeout=WAIT_S)
        a.stop_with_savepoint(str(tmp_path / "stop-a"), drain=True, timeout=WAIT_S)
    finally:
        (tmp_path / "opened").touch()  # never leave a task held
        for client in (a, b):
            if client is not None and not client.done():
                client.cancel()
    for name, client in (("A", a), ("B", b)):
        assert client is not None
        result = client.wait(WAIT_S)  # raises the job's error if it failed
        assert result.status is lg.JobStatus.FINISHED, f"job {name} ended {result.status}"
        assert not result.restart_causes, f"job {name} restarted: {result.restart_causes}"
    records = read_back(kind, tmp_path, sink_of(kind, tmp_path))  # no file missing
    got_a, got_b = values_of(records, "a"), values_of(records, "b")
    assert got_a, "job A published nothing"
    assert got_a == list(range(len(got_a))), (
        f"job A's records are not each there once from 0: {len(got_a)} records, "
        f"{len(set(got_a))} distinct, lowest missing "
        f"{min(set(range(len(got_a))) - set(got_a), default=None)}"
    )
    assert got_b, "job B published nothing"
    assert got_b == list(range(got_b[0], got_b[0] + len(got_b))), (
        f"job B's records are not each there once: {len(got_b)} records, {len(set(got_b))} distinct"
    )
    # B went on where A's savepoint stood, inside what A published
    assert got_b[0] <= got_a[-1]


# ------------------------------------------------ the rule, transaction by transaction


def context(run: str, attempt: int = 0) -> lg.RuntimeContext:
    return lg.RuntimeContext(
        task_name="t",
        operator_name="out",
        operator_uid="out",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
        attempt_number=attempt,
        job_name=JOB,
        run_id=run,
    )


def rows(lo: int, hi: int) -> Any:
    from lockgate.core.batch import RowBatch

    return RowBatch([{"v": v, "job": "a"} for v in range(lo, hi)])


def test_issue37_1_m_x2_a_delta_restore_deletes_its_own_leftovers_never_a_running_runs(
    tmp_path: Path,
) -> None:
    """Files of the run whose savepoint was restored (it may be alive) stay; files an
    earlier attempt of this very run left uncommitted go."""
    import deltalake

    uri = str(tmp_path / "table")
    a = DeltaSink(uri).create_writer(context("runA"))
    a.initialize_state([])
    a.write(rows(0, 10))
    savepoint = a.snapshot_state(1)
    a.notify_checkpoint_complete(1)
    a.write(rows(10, 20))
    a.snapshot_state(2)  # A pre-committed checkpoint 2's file and goes on
    a.write(rows(20, 30))
    pending = set(os.listdir(uri))  # A's committed, pre-committed and open files
    # B restores A's savepoint, fails, and its attempt 1 restores it again
    b0 = DeltaSink(uri).create_writer(context("runB"))
    b0.initialize_state([savepoint])
    b0.write(rows(100, 110))
    b0.snapshot_state(2)  # never completes: attempt 0 dies
    b_leftover = {f for f in set(os.listdir(uri)) - pending if f.endswith(".parquet")}
    assert len(b_leftover) == 1, b_leftover
    b1 = DeltaSink(uri).create_writer(context("runB", attempt=1))
    b1.initialize_state([savepoint])
    assert not (b_leftover & set(os.listdir(uri))), "B's own dead attempt's file stays"
    assert pending <= set(os.listdir(uri)), "B deleted a file of A, which runs on"
    a.notify_checkpoint_complete(2)  # A commits checkpoint 2: its file is there
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table()["v"].to_pylist()) == list(range(20))
    for w in (a, b0, b1):
        w.close()


def test_issue37_1_m_x2_a_file_sink_restore_leaves_a_restored_runs_files_and_numbers(
    tmp_path: Path,
) -> None:
    """B, restored from A's savepoint, deletes neither A's open transaction of the
    savepoint nor A's later ones, numbers its files after A's, and a commit never
    replaces a part file another run published under the same number."""
    out = tmp_path / "out"
    a = FileSink(out).create_writer(context("runA"))
    a.initialize_state([])
    a.write(rows(0, 10))
    savepoint = a.snapshot_state(1)  # pending part 0; open: part 1
    a.notify_checkpoint_complete(1)
    a.write(rows(10, 20))
    a.snapshot_state(2)  # part 1 pre-committed; open: part 2
    a.write(rows(20, 30))
    b = FileSink(out).create_writer(context("runB"))
    b.initialize_state([savepoint])
    assert sorted(os.listdir(out)) == [
        ".lockgate-runs",  # the run locks of A and B (both writers are open)
        ".part-0-1.jsonl.runA.inprogress",
        ".part-0-2.jsonl.runA.inprogress",
        "part-0-0.jsonl",
    ]
    b.write(rows(100, 101))
    b.snapshot_state(2)
    b.notify_checkpoint_complete(2)
    assert "part-0-3.jsonl" in os.listdir(out), "B numbers its files after A's"
    a.notify_checkpoint_complete(2)
    a.snapshot_state(3)  # A's part 2: B took number 3 meanwhile, so A's 3 is next
    a.write(rows(30, 40))
    a.snapshot_state(4)
    a.notify_checkpoint_complete(4)
    published = sorted(n for n in os.listdir(out) if n.startswith("part-"))
    records = []
    for name in published:
        with open(out / name, encoding="utf-8") as f:
            records.extend(json.loads(line)["v"] for line in f)
    assert sorted(records) == [*range(40), 100], published
    for w in (a, b):
        w.close()


def test_issue37_1_m_x2_a_file_commit_never_replaces_another_runs_part_file(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    a = FileSink(out).create_writer(context("runA"))
    a.initialize_state([])
    a.write(rows(0, 10))
    a.snapshot_state(1)
    taken = out / "part-0-0.jsonl"
    taken.write_text('{"v": -1, "job": "other"}\n')  # another run published number 0
    a.notify_checkpoint_complete(1)
    a.notify_checkpoint_complete(1)  # a repeated commit finds it published
    assert taken.read_text() == '{"v": -1, "job": "other"}\n'
    moved = out / "part-0-0.runA.jsonl"
    assert [json.loads(line)["v"] for line in moved.read_text().splitlines()] == list(range(10))
    assert not [n for n in os.listdir(out) if n.endswith(".inprogress") and "-0-0." in n]
    a.close()


def test_issue37_1_m_x2_a_restore_cleans_up_after_a_restored_run_proven_dead(
    tmp_path: Path,
) -> None:
    """When no process of the restored run holds its run lock any more (its driver and
    writers are gone), its transactions begun after the checkpoint are deleted: on Delta
    the uncommitted Parquet files, in a FileSink folder the temporary files."""
    uri, out = str(tmp_path / "table"), tmp_path / "out"
    for sink, listing in ((DeltaSink(uri), uri), (FileSink(out), str(out))):
        a = sink.create_writer(context("runA"))
        a.initialize_state([])
        a.write(rows(0, 10))
        savepoint = a.snapshot_state(1)
        a.notify_checkpoint_complete(1)
        a.write(rows(10, 20))
        a.snapshot_state(2)  # never completes: A dies with it pre-committed
        a.write(rows(20, 30))
        before = set(os.listdir(listing))
        a.close()  # A's last process is gone: its run lock is free
        b = type(sink)(listing).create_writer(context("runB"))
        b.initialize_state([savepoint])
        left = sorted(n for n in set(os.listdir(listing)) & before if "runA" in n)
        if isinstance(sink, DeltaSink):
            import deltalake

            committed = {os.path.basename(p) for p in deltalake.DeltaTable(uri).file_uris()}
            assert [n for n in left if n.endswith(".parquet")] == sorted(committed), left
        else:
            assert left == [], f"A's temporary files after its checkpoint stay: {left}"
        b.close()
        sink.hold_run(context("runB")).release(forget=True)  # B's driver, at B's end
        assert not os.path.exists(os.path.join(listing, ".lockgate-runs")), os.listdir(listing)

"""Restoring an unaligned checkpoint never loses in-flight data (issue 17: M-B7, M-R3, M-S3).

The job: sequence -> "to record" (chained into the source task) -> key_by -> keyed running
sum -> a slow step -> exactly-once FileSink. The slow step keeps the key_by edge under
backpressure, so every unaligned checkpoint records in-flight batches of that edge (at the
producer: overtaken output; at the consumer: input arriving before a channel's barrier).
Each key's values come from one source split, in order, so the failure-free output is
known exactly: for each value ``v`` one record ``{"k", "v", "sum"}`` with the running sum
of its key up to ``v`` (:func:`expected_records`); any lost, repeated or
reordered in-flight record changes it.

Each test runs the job with retained unaligned checkpoints, cancels it once checkpoints
hold in-flight data, and restores the newest one with ``restore_from=<storage>/chk-N`` in a
new ``StreamEnvironment`` (in the same process, or a new one), at the same or another
parallelism, or after a stateless operator was added upstream: the published output must be
exactly the failure-free one. An operator inserted on the edge that carries the in-flight
records must fail the restore before anything runs, naming the edge.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from test_recovery import RunningSum, by_value, key_of, published

import lockgate as lg
from conftest import SPARK_SLOTS, is_spark, wait_until
from lockgate.connectors import FileSink, SequenceSource
from lockgate.recovery.restore import resolve_restore_path
from running_sums import expected_running_sums

#: values per source split (at the checkpoint's parallelism); keys are value // CHUNK
SPLIT = 30_000
CHUNK = 3_000
#: small channels and buffers: the producer stays backpressured by the slow step
CONFIG = dict(channel_capacity_bytes=512 * 1024, buffer_max_bytes=64 * 1024)
#: checkpoints holding in-flight data before the first run is cancelled
WITH_IN_FLIGHT = 3


def to_record(x):
    return {"k": x // CHUNK, "v": x}


def expected_records(n: int) -> list[dict]:
    """The failure-free output, ordered by value."""
    return expected_running_sums(n, CHUNK)


def identity(x):
    return x


def slow(batch):
    # the slow consumer under test (it builds backpressure), not a wait: 30 µs a record
    time.sleep(batch.num_rows * 30e-6)
    return batch


def build_env(
    parallelism: int, storage: str, out: str, n: int, *, executor=None, added: str | None = None
) -> lg.StreamEnvironment:
    """The job at ``parallelism``; ``added="upstream"``: a stateless map between the source
    and "to record" (chained into the source task, the key_by edge keeps its ends);
    ``added="on edge"``: a stateless map between "to record" and the key_by, so the edge
    that carries the in-flight records now starts at another operator."""
    env = lg.StreamEnvironment(
        parallelism=parallelism, executor=executor, config=lg.ExecutionConfig(**CONFIG)
    )
    env.enable_checkpointing(100)
    cfg = env.checkpoint_config
    cfg.storage = storage
    cfg.unaligned = True
    cfg.retained = 1000
    cfg.externalized = lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
    env.set_restart_strategy(lg.RestartStrategy.none())
    numbers = env.from_source(SequenceSource(0, n, batch_size=500), name="numbers").uid("numbers")
    if added == "upstream":
        numbers = numbers.map(identity, name="added").uid("added")
    records = numbers.map(to_record, name="to record").uid("to-record")
    if added == "on edge":
        records = records.map(identity, name="added").uid("added")
    (
        records.key_by(key_of)
        .process(RunningSum(), name="running sum")
        .uid("sums")
        .map_batches(slow, name="slow")
        .uid("slow")
        .sink_to(FileSink(out, format="jsonl"), name="files")
        .uid("files")
    )
    return env


class Checkpointed:
    """A first run cancelled after unaligned checkpoints with in-flight data, and a copy
    of its output and checkpoints, so each restore starts from the same files."""

    def __init__(self, executor, root, parallelism: int) -> None:
        self.root = root
        self.n = parallelism * SPLIT
        self.out = str(root / "out")
        self.storage = str(root / "checkpoints")
        client = build_env(
            parallelism, self.storage, self.out, self.n, executor=executor
        ).execute_async("unaligned, to cancel")
        try:
            wait_until(
                lambda: client.done() or len(self._with_in_flight(client)) >= WITH_IN_FLIGHT,
                f"{WITH_IN_FLIGHT} completed unaligned checkpoints held in-flight data",
                timeout_s=90,
            )
        finally:
            client.cancel()
        result = client.wait(60)
        assert result.status is lg.JobStatus.CANCELED, (
            f"the first run should have been cancelled under backpressure, it ended {result.status}"
        )
        done = [c for c in client.checkpoints() if c.status == "completed"]
        newest = max(done, key=lambda c: c.checkpoint_id)
        # the newest: the output the cancelled run committed is exactly its output
        assert newest.persisted_inflight_bytes > 0, (
            f"checkpoint {newest.checkpoint_id} (the one restored) persisted no in-flight data: "
            "the test would not exercise channel state"
        )
        self.checkpoint = newest
        self.path = os.path.join(self.storage, f"chk-{newest.checkpoint_id}")
        assert os.path.isdir(self.path), f"{self.path} was not retained"
        spec = resolve_restore_path(self.path)
        assert sum(s.num_batches for s in spec.channels) > 0, "no recorded channel in the files"
        assert len(published(self.out)) < self.n, "the first run was cancelled before the end"
        shutil.copytree(self.out, root / "saved-out")
        shutil.copytree(self.storage, root / "saved-checkpoints")

    @staticmethod
    def _with_in_flight(client: lg.JobClient) -> list[lg.CheckpointStats]:
        return [
            c
            for c in client.checkpoints()
            if c.status == "completed" and c.persisted_inflight_bytes > 0
        ]

    def reset(self) -> None:
        """Put the output and checkpoint folders back as the cancelled run left them."""
        for live, saved in ((self.out, "saved-out"), (self.storage, "saved-checkpoints")):
            shutil.rmtree(live)
            shutil.copytree(self.root / saved, live)

    def restore(self, executor, parallelism: int, added: str | None = None) -> None:
        """Restore in this process at ``parallelism``; the output must be exact."""
        self.reset()
        env = build_env(parallelism, self.storage, self.out, self.n, executor=executor, added=added)
        result = env.execute(f"restored at parallelism {parallelism}", restore_from=self.path)
        assert result.status is lg.JobStatus.FINISHED
        self.check(f"restored at parallelism {parallelism}" + (f", added {added}" if added else ""))

    def check(self, what: str) -> None:
        out = by_value(published(self.out))
        expected = expected_records(self.n)
        assert len(out) == len(expected), (
            f"{what}: {len(out)} records published, expected {len(expected)} "
            f"(checkpoint {self.checkpoint.checkpoint_id} held "
            f"{self.checkpoint.persisted_inflight_bytes} bytes in flight)"
        )
        assert out == expected, f"{what}: the output differs from the failure-free run"


def _restore_parallelisms(executor) -> list[int]:
    return [p for p in (1, 2, 3) if not is_spark(executor) or p <= SPARK_SLOTS]


@pytest.mark.hang_guard(420)
def test_m_b7_m_r3_m_s3_a_retained_unaligned_checkpoint_restores_in_a_new_environment_at_any_parallelism(
    executor, tmp_path
) -> None:
    """Checkpoint at parallelism 2; restore in a new StreamEnvironment of the same process
    at parallelism 1, 2 and 3 (Spark: up to its 2 slots), and at 2 with a stateless operator
    added upstream: every in-flight record is replayed exactly once, in order per key."""
    checkpointed = Checkpointed(executor, tmp_path, parallelism=2)
    for parallelism in _restore_parallelisms(executor):
        checkpointed.restore(executor, parallelism)
    checkpointed.restore(executor, 2, added="upstream")


@pytest.mark.hang_guard(420)
def test_m_b7_m_r3_a_checkpoint_taken_at_parallelism_3_restores_at_1_2_and_3(tmp_path) -> None:
    """The Spark test session has 2 slots, so parallelism 3 runs on the local executor."""
    checkpointed = Checkpointed(lg.LocalExecutor(), tmp_path, parallelism=3)
    for parallelism in (2, 1, 3):
        checkpointed.restore(lg.LocalExecutor(), parallelism)


def test_m_b7_an_operator_inserted_on_the_edge_with_in_flight_data_fails_the_restore_before_running(
    tmp_path,
) -> None:
    checkpointed = Checkpointed(lg.LocalExecutor(), tmp_path, parallelism=2)
    checkpointed.reset()
    env = build_env(
        2,
        checkpointed.storage,
        checkpointed.out,
        checkpointed.n,
        executor=lg.LocalExecutor(),
        added="on edge",
    )
    before = sorted(os.listdir(checkpointed.out))
    with pytest.raises(lg.RestoreError) as error:
        env.execute("restored with an operator on the edge", restore_from=checkpointed.path)
    message = str(error.value)
    for part in ("'to-record'", "'sums'", "in-flight", "savepoint", "stop_with_savepoint"):
        assert part in message, f"{part!r} missing from the error: {message}"
    assert sorted(os.listdir(checkpointed.out)) == before, "nothing ran"


#: restores the job of this module in a process of its own (``python job.py ...``)
JOB = """
import sys

from test_unaligned_restore import build_env

out, storage, n, parallelism, restore = sys.argv[1:6]
env = build_env(int(parallelism), storage, out, int(n))
result = env.execute("restored in a new process", restore_from=restore)
print(result.status.name)
"""


@pytest.mark.hang_guard(420)
def test_m_b7_m_r3_a_retained_unaligned_checkpoint_restores_in_a_new_process(
    executor, tmp_path
) -> None:
    """The job file runs with ``python``, on the executor the test runs (``LOCKGATE_EXECUTOR``,
    Spark on a ``local[2]`` session of its own), at parallelism 1."""
    checkpointed = Checkpointed(executor, tmp_path, parallelism=2)
    checkpointed.reset()
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = dict(os.environ)
    if is_spark(executor):
        env.update(LOCKGATE_EXECUTOR="spark", LOCKGATE_SPARK_MASTER="local[2]")
    else:
        env["LOCKGATE_EXECUTOR"] = "local"
    done = subprocess.run(
        [
            sys.executable,
            str(job),
            checkpointed.out,
            checkpointed.storage,
            str(checkpointed.n),
            "1",
            checkpointed.path,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, f"the job file failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    assert done.stdout.strip().splitlines()[-1] == "FINISHED", done.stdout
    checkpointed.check("restored in a new process at parallelism 1")

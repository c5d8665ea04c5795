"""Recovery and end-to-end exactly-once, on both executors (M-R1, M-R2, M-R3, M-X1, M-X2,
M-X3, M-S3).

The equivalence job: sequence (parallelism 2) -> keyed running sum (one shuffle) ->
exactly-once FileSink, checkpoints every 200 ms. Every key's records come from one
source split, in order, so the failure-free output is known exactly: for each value
``v`` one record ``{"k", "v", "sum"}`` with the running sum of its key up to ``v``.
Seeded faults (``lockgate.testing.seeded_faults``) fail attempt after attempt in a
source, in the operator, inside an alignment, in the asynchronous snapshot part and
between pre-commit and commit; the published files must hold exactly the failure-free
records.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil

import pytest
from test_checkpointing import cancel_after_checkpoints, chk_folders

import lockgate as lg
from lockgate.connectors import CollectSink, FileSink, SequenceSource
from lockgate.testing import FailAtRecord, KillWorker, inject_faults, seeded_faults
from published_files import published
from running_sums import expected_running_sums

#: values per source split; keys are value // CHUNK, so each key lives in one split
SPLIT = 60_000
CHUNK = 6_000
RATE = 40_000
FAULTS = 20


class RunningSum(lg.KeyedProcessFunction):
    """The running sum of ``v`` per key. ``dedupe``: ignore values a key already applied
    (an idempotent update, for at-least-once checkpoints where records replay)."""

    def __init__(self, dedupe: bool = False) -> None:
        self.dedupe = dedupe

    def open(self, ctx):
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=(0, -1)))

    def process_element(self, value, ctx):
        total, last = self.total.value()
        v = value["v"]
        if self.dedupe and v <= last:
            return
        total += v
        self.total.update((total, v))
        yield {"k": value["k"], "v": v, "sum": total}


def to_record(x):
    return {"k": x // CHUNK, "v": x}


def key_of(r):
    return r["k"]


def expected_records(n: int) -> list[dict]:
    return expected_running_sums(n, CHUNK)


def by_value(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: (r["v"], r["sum"]))


def sum_job(
    executor,
    tmp_path,
    *,
    mode=lg.CheckpointingMode.EXACTLY_ONCE,
    unaligned=False,
    n=2 * SPLIT,
    dedupe=False,
    faults=(),
    strategy=None,
    rate=RATE,
    bounded=True,
) -> lg.StreamEnvironment:
    """``bounded=False``: the source waits for more after its ``n`` numbers instead of
    ending (the job runs until cancelled, whatever the machine's speed)."""
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(200, mode)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.checkpoint_config.unaligned = unaligned
    env.set_restart_strategy(strategy or lg.RestartStrategy.fixed_delay(attempts=50, delay=0))
    (
        env.from_source(SequenceSource(0, n, rows_per_second=rate, batch_size=500, bounded=bounded))
        .uid("numbers")
        .map(to_record, name="to record")
        .key_by(key_of)
        .process(RunningSum(dedupe), name="running sum")
        .uid("sums")
        .sink_to(FileSink(str(tmp_path / "out"), format="jsonl"), name="files")
        .uid("files")
    )
    if faults:
        inject_faults(env, *faults)
    return env


ROLES = {"source": "Source: sequence", "operator": "running sum", "sink": "files"}


@pytest.mark.hang_guard(300)
@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_m_r1_m_x2_seeded_failures_leave_exactly_the_failure_free_output(
    executor, tmp_path, unaligned
) -> None:
    seed = 5 if unaligned else 4
    faults = seeded_faults(seed, FAULTS, operators=ROLES, records=4_000)
    # three splits' worth of input: every attempt moves the job on until its fault fires
    # (a checkpoint-phase fault after up to three checkpoints), and on a loaded machine
    # checkpoints take longer, so two splits were used up before the last faults' attempts
    # (16 of 21 attempts once, in a CI run on a busy machine); at half the usual rate an
    # attempt reads half as much while it waits for its checkpoint-phase fault (20 of 21
    # attempts once at the full rate, with a CPU-burning process beside the suite)
    n = 3 * SPLIT
    env = sum_job(executor, tmp_path, unaligned=unaligned, faults=faults, n=n, rate=RATE // 2)
    result = env.execute("recovery equivalence")
    assert result.attempts == FAULTS + 1, (
        f"every seeded fault fires in its own attempt: expected {FAULTS + 1} attempts, "
        f"got {result.attempts}"
    )
    out = published(str(tmp_path / "out"))
    expected = expected_records(n)
    assert len(out) == len(expected), f"{len(out)} records published, expected {len(expected)}"
    assert by_value(out) == expected
    leftovers = glob.glob(str(tmp_path / "out" / ".*"))
    assert leftovers == [], f"uncommitted files left behind: {leftovers}"


@pytest.mark.hang_guard(300)
def test_m_x1_at_least_once_checkpoints_lose_nothing_and_only_duplicate(executor, tmp_path) -> None:
    faults = seeded_faults(11, 5, operators=ROLES, records=4_000)
    env = sum_job(
        executor, tmp_path, mode=lg.CheckpointingMode.AT_LEAST_ONCE, dedupe=True, faults=faults
    )
    result = env.execute("recovery at least once")
    assert result.attempts == 6
    out = published(str(tmp_path / "out"))
    expected = expected_records(2 * SPLIT)
    as_tuples = {(r["k"], r["v"], r["sum"]) for r in out}
    assert as_tuples == {(r["k"], r["v"], r["sum"]) for r in expected}, (
        "at-least-once output must hold every failure-free record and nothing else"
    )
    assert len(out) >= len(expected)


# ---------------------------------------------------------------- restart strategies (M-R2)


def small_job(executor, tmp_path, strategy, faults, n=20_000) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(strategy)
    env.from_source(SequenceSource(0, n, rows_per_second=20_000, batch_size=200)).map(
        lambda x: x + 1, name="plus one"
    ).sink_to(CollectSink(), name="collect").uid("collect")
    inject_faults(env, *faults)
    return env


def collected(result: lg.JobExecutionResult) -> list:
    return sorted(x for part in result.sink_results["collect"] for x in part)


def test_m_r2_a_failed_attempt_restarts_and_the_job_finishes_with_every_record_once(
    executor, tmp_path
) -> None:
    env = small_job(
        executor,
        tmp_path,
        lg.RestartStrategy.fixed_delay(attempts=2, delay=10),
        [FailAtRecord("plus one", record=6_000, attempt=0, subtask=1)],
    )
    result = env.execute("restart once")
    assert result.attempts == 2
    assert collected(result) == list(range(1, 20_001))


def test_m_r2_when_the_strategy_gives_up_the_error_names_the_last_cause_and_the_attempts(
    executor, tmp_path
) -> None:
    faults = [FailAtRecord("plus one", record=500, attempt=a) for a in range(3)]
    env = small_job(executor, tmp_path, lg.RestartStrategy.fixed_delay(attempts=2, delay=0), faults)
    with pytest.raises(lg.JobFailedError) as info:
        env.execute("gives up")
    error = info.value
    assert error.attempts == 3
    assert "after 3 attempts" in str(error)
    assert "fixed_delay" in str(error) and "injected" in str(error).lower()
    assert error.operator == "plus one"


def test_m_r2_no_restarts_without_a_strategy_and_without_checkpoints(executor) -> None:
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.from_sequence(0, 100).map(lambda x: x, name="same").sink_to(CollectSink())
    inject_faults(env, FailAtRecord("same", record=10))
    with pytest.raises(lg.JobFailedError) as info:
        env.execute("no restarts")
    assert info.value.attempts == 1


class AttemptTag(lg.MapFunction):
    def open(self, ctx):
        self.attempt = ctx.attempt_number

    def map(self, x):
        return (self.attempt, x)


def test_m_r2_runtime_context_attempt_number_counts_attempts(executor, tmp_path) -> None:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    env.from_source(SequenceSource(0, 20_000, rows_per_second=20_000, batch_size=200)).map(
        AttemptTag(), name="tag"
    ).sink_to(CollectSink(), name="collect").uid("collect")
    inject_faults(
        env,
        FailAtRecord("tag", record=6_000, attempt=0),
        FailAtRecord("tag", record=3_000, attempt=1),
    )
    result = env.execute("attempt numbers")
    records = [r for part in result.sink_results["collect"] for r in part]
    assert result.attempts == 3
    assert sorted(x for _, x in records) == list(range(20_000))
    assert {a for a, _ in records} <= {0, 1, 2} and 2 in {a for a, _ in records}


@pytest.mark.spark
@pytest.mark.hang_guard(120)
def test_m_r1_killing_a_slots_python_worker_mid_job_recovers_by_itself(
    spark_executor, tmp_path
) -> None:
    env = sum_job(
        spark_executor,
        tmp_path,
        n=60_000,
        faults=[KillWorker("running sum", record=8_000, attempt=0, subtask=1)],
    )
    result = env.execute("kill a worker")
    assert result.attempts == 2
    assert by_value(published(str(tmp_path / "out"))) == expected_records(60_000)


# ----------------------------------------------------------------------- manual restore (M-R3)


def unbounded_sums(
    executor, tmp_path, n: int, rate: float = RATE, *, bounded: bool = False
) -> lg.StreamEnvironment:
    """The running sums of ``n`` numbers, two checkpoints retained, kept on cancellation.

    Unless ``bounded``, the source waits for more after its ``n`` numbers instead of
    ending: a job to cancel never finishes first, however slow the machine. A run with a
    larger ``n`` restored from its checkpoint reads on where it stopped (SequenceSource
    keeps the end of each split it finished), so a test cancels a run of ``n // 2``
    numbers and restores one of ``n``, ``bounded=True``: the cancelled run certainly
    left work to the restore."""
    env = sum_job(executor, tmp_path, n=n, rate=rate, bounded=bounded)
    env.checkpoint_config.retained = 2
    env.checkpoint_config.externalized = lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
    return env


@pytest.mark.hang_guard(120)
def test_m_r3_m_s3_a_checkpoint_retained_after_cancellation_restores_to_the_correct_result(
    executor, tmp_path
) -> None:
    n = 2 * SPLIT
    client = unbounded_sums(executor, tmp_path, n // 2).execute_async("to cancel")
    result = cancel_after_checkpoints(client, 3, "three checkpoints completed")
    assert result.status is lg.JobStatus.CANCELED
    storage = str(tmp_path / "checkpoints")
    assert len(chk_folders(storage)) == 2, "RETAIN_ON_CANCELLATION keeps the retained ones"
    restored = unbounded_sums(executor, tmp_path, n, bounded=True).execute(
        "restored", restore_from=storage
    )
    assert restored.status is lg.JobStatus.FINISHED
    assert by_value(published(str(tmp_path / "out"))) == expected_records(n)


@pytest.mark.hang_guard(120)
def test_m_r3_a_damaged_newest_checkpoint_falls_back_to_the_previous_one_only_when_allowed(
    executor, tmp_path, caplog
) -> None:
    """Issue 18 item 2: the damaged newest checkpoint completed, so the FileSink (two-phase
    commit) may have committed its output; falling back replays it (duplicates). The
    restore fails saying so, unless ``allow_replaying_committed_output``."""
    n = 2 * SPLIT
    client = unbounded_sums(executor, tmp_path, n // 2).execute_async("to damage")
    cancel_after_checkpoints(client, 3, "three checkpoints completed")
    storage = str(tmp_path / "checkpoints")
    newest, older = chk_folders(storage)[-1], chk_folders(storage)[0]
    assert newest != older
    victim = sorted(glob.glob(os.path.join(storage, newest, "op-sums-*")))[0]
    with open(victim, "r+b") as f:  # flip bytes in the middle of a state file
        f.seek(os.path.getsize(victim) // 2)
        f.write(b"\xff\x00\xff\x00")
    before = published(str(tmp_path / "out"))
    with pytest.raises(lg.RestoreError, match="allow_replaying_committed_output") as refused:
        unbounded_sums(executor, tmp_path, n, bounded=True).execute(
            "restored", restore_from=os.path.join(storage, newest)
        )
    message = str(refused.value)
    assert f"checkpoint {newest[4:]} " in message and "'files'" in message, message
    assert published(str(tmp_path / "out")) == before, "the refused restore wrote output"
    env = unbounded_sums(executor, tmp_path, n, bounded=True)
    env.checkpoint_config.allow_replaying_committed_output = True
    with caplog.at_level(logging.WARNING, logger="lockgate.recovery.restore"):
        restored = env.execute("restored", restore_from=os.path.join(storage, newest))
    assert restored.status is lg.JobStatus.FINISHED
    assert any(
        newest in r.getMessage() and "falling back" in r.getMessage() for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
    assert any("allow_replaying_committed_output=True" in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]
    # The state comes from the older checkpoint, so every record is right and none is
    # missing; the output the cancelled run committed after that checkpoint (with the
    # newest one) is written once more: the user accepted those duplicates.
    out = published(str(tmp_path / "out"))
    expected = expected_records(n)
    assert {tuple(r.values()) for r in out} == {tuple(r.values()) for r in expected}
    final = {}
    for r in out:
        final[r["k"]] = max(final.get(r["k"], 0), r["sum"])
    assert final == {r["k"]: r["sum"] for r in expected}


def test_m_r3_restoring_a_damaged_checkpoint_with_nothing_older_fails_clearly(tmp_path) -> None:
    client = unbounded_sums(lg.LocalExecutor(), tmp_path, 2 * SPLIT).execute_async("to damage")
    cancel_after_checkpoints(client, 2, "two checkpoints completed")
    storage = tmp_path / "checkpoints"
    folders = chk_folders(str(storage))
    for folder in folders[:-1]:
        shutil.rmtree(storage / folder)
    newest = folders[-1]
    for path in glob.glob(str(storage / newest / "op-sums-*")):
        os.remove(path)
    with pytest.raises(lg.RestoreError, match="no older intact checkpoint"):
        sum_job(lg.LocalExecutor(), tmp_path, n=2_000).execute(
            "restore", restore_from=str(storage / newest)
        )


def test_m_r3_restore_from_a_folder_without_checkpoints_fails_clearly(tmp_path) -> None:
    env = sum_job(lg.LocalExecutor(), tmp_path, n=100)
    with pytest.raises(lg.RestoreError, match="no intact completed checkpoint"):
        env.execute("restore", restore_from=str(tmp_path))


def test_m_s2_state_of_an_operator_the_job_no_longer_has_fails_the_restore_unless_allowed(
    tmp_path,
) -> None:
    client = unbounded_sums(lg.LocalExecutor(), tmp_path, 2 * SPLIT).execute_async("old job")
    cancel_after_checkpoints(client, 1, "a checkpoint completed")
    storage = str(tmp_path / "checkpoints")
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = storage
    env.from_source(SequenceSource(0, 10)).uid("other numbers").sink_to(CollectSink()).uid("c")
    with pytest.raises(lg.RestoreError, match="allow_non_restored_state"):
        env.execute("new job", restore_from=storage)
    result = env.execute("new job", restore_from=storage, allow_non_restored_state=True)
    assert result.status is lg.JobStatus.FINISHED


# ------------------------------------------------------ unaligned channel state replay (M-R1)


@pytest.mark.hang_guard(120)
def test_m_r1_m_b7_in_flight_data_of_an_unaligned_checkpoint_is_replayed_on_restore(
    executor, tmp_path, caplog
) -> None:
    from test_checkpointing import slow_map

    from lockgate.checkpoint.channel_state import decode
    from lockgate.checkpoint.storage_url import open_storage
    from lockgate.recovery.restore import resolve_restore_path

    n = 400_000
    # small channels: the source stays backpressured (and running) until near the end
    config = lg.ExecutionConfig(channel_capacity_bytes=64 * 1024, buffer_max_bytes=32 * 1024)
    env = lg.StreamEnvironment(parallelism=2, executor=executor, config=config)
    env.enable_checkpointing(200)
    cfg = env.checkpoint_config
    cfg.storage = str(tmp_path / "checkpoints")
    cfg.unaligned = True
    cfg.retained = 100
    env.set_buffer_timeout(0)
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=1, delay=0))
    (
        env.from_source(SequenceSource(0, n, batch_size=500))
        .uid("numbers")
        .rebalance()
        .map_batches(slow_map, name="slow")
        .uid("slow")
        .sink_to(CollectSink(), name="collect")
        .uid("collect")
    )
    inject_faults(
        env, FailAtRecord("slow", record=120_000, attempt=0, subtask=0, after_checkpoints=1)
    )
    with caplog.at_level(logging.INFO, logger="lockgate.recovery.failover"):
        result = env.execute("replay in-flight data")
    assert result.attempts == 2
    assert collected(result) == list(range(n)), "every record exactly once"
    restored = [
        r.getMessage().rsplit(" restores ", 1)[1]
        for r in caplog.records
        if " restores " in r.getMessage()
    ]
    assert restored, "the second attempt restored a checkpoint"
    spec = resolve_restore_path(restored[0])
    storage = open_storage(spec.storage_url)
    in_flight = sum(
        len(recorded.batches)
        for uid, by in spec.operators.items()
        if uid.startswith("channels:")
        for h in by.values()
        for recorded in decode(storage.read_state(h))
    )
    assert in_flight > 0, "the restored checkpoint held in-flight batches to replay"

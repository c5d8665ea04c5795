"""Checkpoints after tasks finished, and the final checkpoint (Flink's FLIP-147), on both
executors (M-C1, M-C3, M-C7, M-R1, M-X2, M-W1, M-W6, M-S1):

* a source that ended is not triggered any more, checkpoints go on while other tasks run,
  and they record the finished operator; a failure after that restores it as finished:
  it does not read its input again (its records are counted: exactly once);
* every task of a bounded job waits at its end for a final checkpoint, whose completion
  notice commits the exactly-once FileSink's last transaction in the task (the driver's
  copy of the sink refuses to commit here), promptly rather than an interval later;
  without checkpoints the job still ends and the driver commits, as before;
* ``stop_with_savepoint(drain=True)`` sends the maximum watermark through the job: every
  event-time window and timer fires, the savepoint holds no pending state, the job
  finishes.

Failures fire on observed events (a checkpoint in storage recording the short source as
finished), never after a sleep.
"""

from __future__ import annotations

import glob
import logging
import os
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import lockgate as lg
from conftest import FileProbe, wait_until
from lockgate.checkpoint.coordinator.completed_store import CompletedCheckpoint
from lockgate.checkpoint.coordinator.plan import is_fully_finished
from lockgate.checkpoint.storage_url import open_storage
from lockgate.connectors import (
    CollectSink,
    FileSink,
    FileSource,
    RateLimitedSource,
    SequenceSource,
)
from lockgate.core.elements import MAX_WATERMARK
from lockgate.recovery.restore import resolve_restore_path
from lockgate.testing import InjectedFault
from published_files import published

SHORT = 300
LONG_START = 1_000_000
LONG = 60_000


def leftovers(folder: str) -> list[str]:
    return glob.glob(os.path.join(folder, ".*"))


def checkpoints_with_finished(
    root: str, uid: str, subtasks: tuple[int, ...] | None = None
) -> list[int]:
    """Ids of the completed checkpoints in ``root`` that record every subtask of operator
    ``uid`` as finished (or, with ``subtasks``, those subtasks)."""
    storage = open_storage(root)
    found = []
    for checkpoint_id in storage.completed_ids():
        try:
            meta = CompletedCheckpoint.from_metadata(storage.read_metadata(checkpoint_id))
        except (OSError, ValueError):  # discarded meanwhile
            continue
        entry = meta.finished_operators.get(uid)
        if (
            subtasks is None
            and is_fully_finished(entry)
            or subtasks is not None
            and entry is not None
            and set(subtasks) <= set(entry[1])
        ):
            found.append(checkpoint_id)
    return found


class CountShort(lg.MapFunction):
    """Counts every record the short source emits, in any attempt (across processes)."""

    def __init__(self, probe: FileProbe) -> None:
        self.probe = probe

    def map(self, value: int) -> int:
        self.probe.bump("short")
        return value


class FailAfterShortFinished(lg.MapFunction):
    """In attempt 0, raises at the first record of the long input it sees once two
    completed checkpoints recorded operator ``uid`` (the short source; with ``subtasks``,
    those of its subtasks) as finished: a failure *after* the short input ended and
    checkpoints went on without it (an observed event, not a time)."""

    def __init__(
        self, storage: str, uid: str = "short", subtasks: tuple[int, ...] | None = None
    ) -> None:
        self.storage = storage
        self.uid = uid
        self.subtasks = subtasks

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.attempt = ctx.attempt_number
        self.seen = 0

    def map(self, value: Any) -> Any:
        self.seen += 1
        v = value["v"] if isinstance(value, dict) else value
        if (
            self.attempt == 0
            and self.seen % 200 == 0
            and v >= LONG_START
            and len(checkpoints_with_finished(self.storage, self.uid, self.subtasks)) >= 2
        ):
            raise InjectedFault("injected: the short input finished two checkpoints ago")
        return value


@pytest.mark.hang_guard(180)
def test_flip147_m_c3_m_r1_checkpoints_go_on_after_a_source_ended_and_a_restore_does_not_rerun_it(
    executor: Any, tmp_path: Any, caplog: Any
) -> None:
    probe = FileProbe(tmp_path / "short.count")
    root = str(tmp_path / "checkpoints")
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = root
    env.checkpoint_config.retained = 100
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=1, delay=0))
    short = (
        env.from_source(SequenceSource(0, SHORT, batch_size=50), name="short")
        .uid("short")
        .map(CountShort(probe), name="count short")
        .uid("count-short")
    )
    long = env.from_source(
        SequenceSource(LONG_START, LONG_START + LONG, rows_per_second=12_000, batch_size=100),
        name="long",
    ).uid("long")
    (
        short.union(long)
        .map(FailAfterShortFinished(root), name="gate")
        .uid("gate")
        .sink_to(FileSink(str(tmp_path / "out")), name="files")
        .uid("files")
    )
    with caplog.at_level(logging.INFO, logger="lockgate.recovery.failover"):
        result = env.execute("short and long")
    assert result.attempts == 2, (
        "the failure fires once two checkpoints recorded the short source as finished: "
        "the long source ended first, or checkpoints stopped when the short one ended"
    )
    assert probe.count("short") == SHORT, (
        f"the short source emitted {probe.count('short')} records in all attempts, expected "
        f"{SHORT}: the restore read it again instead of deploying it as finished"
    )
    out = published(str(tmp_path / "out"))
    assert sorted(out) == list(range(SHORT)) + list(range(LONG_START, LONG_START + LONG))
    assert leftovers(str(tmp_path / "out")) == []
    [restored] = [
        r.getMessage().rsplit(" restores ", 1)[1]
        for r in caplog.records
        if " restores " in r.getMessage()
    ]
    spec = resolve_restore_path(restored)
    assert spec.fully_finished("short") and spec.fully_finished("count-short")
    assert not spec.fully_finished("long") and "short" not in spec.operators, (
        "a finished operator leaves no state in the checkpoints after it finished"
    )


class TaskCommitsOnly(FileSink):
    """An exactly-once FileSink whose commits are recorded, with where they ran: in a
    task (an opened copy) or on the driver (its copy is never opened). With
    ``refuse_driver`` the driver's copy cannot commit, as if the driver could not reach
    the sink's storage."""

    def __init__(self, path: str, probe: FileProbe, refuse_driver: bool) -> None:
        super().__init__(path, format="jsonl")
        self.probe = probe
        self.refuse_driver = refuse_driver

    def open(self, ctx: lg.RuntimeContext) -> None:
        super().open(ctx)
        self.opened_in_task = True

    def commit(self, transaction: Any) -> None:
        where = "task" if getattr(self, "opened_in_task", False) else "driver"
        self.probe.add((where, transaction.records))
        if where == "driver" and self.refuse_driver:
            raise OSError("the driver cannot reach this sink's storage")
        super().commit(transaction)


def to_record(x: int) -> dict[str, int]:
    return {"k": x % 7, "v": x}


def key_of(record: dict[str, int]) -> int:
    return record["k"]


def bounded_file_job(
    executor: Any, tmp_path: Any, probe: FileProbe, *, checkpoints: bool
) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    if checkpoints:
        # an interval far longer than the job: only the final checkpoints can commit
        env.enable_checkpointing(timedelta(minutes=10))
        env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    (
        env.from_source(SequenceSource(0, 5_000, batch_size=250))
        .uid("numbers")
        .map(to_record, name="records")
        .uid("records")
        .key_by(key_of)
        .map(lambda r: r, name="keyed")
        .uid("keyed")
        .sink_to(
            TaskCommitsOnly(str(tmp_path / "out"), probe, refuse_driver=checkpoints), name="files"
        )
        .uid("files")
    )
    return env


@pytest.mark.hang_guard(120)
def test_flip147_m_x2_a_bounded_jobs_final_checkpoint_commits_the_file_sink_in_the_tasks(
    executor: Any, tmp_path: Any
) -> None:
    probe = FileProbe(tmp_path / "commits")
    client = bounded_file_job(executor, tmp_path, probe, checkpoints=True).execute_async(
        "final checkpoint"
    )
    result = client.wait(90)
    assert result.status is lg.JobStatus.FINISHED and result.attempts == 1
    assert sorted(r["v"] for r in published(str(tmp_path / "out"))) == list(range(5_000))
    assert leftovers(str(tmp_path / "out")) == []
    commits = probe.items
    assert [c for c in commits if c[0] == "driver"] == [], (
        f"the driver tried to commit: {commits}; the final checkpoint commits in the tasks"
    )
    assert sum(n for where, n in commits if where == "task") == 5_000
    completed = [c for c in client.checkpoints() if c.status == "completed"]
    assert completed, "the tasks ended through a completed final checkpoint"
    # triggered when the tasks reached their end, not after the ten-minute interval
    assert result.duration_ms < 60_000


@pytest.mark.hang_guard(120)
def test_flip147_without_checkpoints_a_bounded_job_ends_and_the_driver_commits_at_its_end(
    executor: Any, tmp_path: Any
) -> None:
    probe = FileProbe(tmp_path / "commits")
    result = bounded_file_job(executor, tmp_path, probe, checkpoints=False).execute("no ckpt")
    assert result.status is lg.JobStatus.FINISHED
    assert sorted(r["v"] for r in published(str(tmp_path / "out"))) == list(range(5_000))
    commits = probe.items
    assert commits and all(where == "driver" for where, _ in commits), commits


def collected_values(result: lg.JobExecutionResult, uid: str) -> list[Any]:
    return sorted(v for part in result.sink_results[uid] if part for v in part)


@pytest.mark.hang_guard(180)
def test_flip147_a_collect_sink_restored_as_finished_still_returns_its_records(
    executor: Any, tmp_path: Any
) -> None:
    """The short source's own CollectSink finishes with it; the restore deploys it as
    finished (it runs nothing): the records it reported when it finished stand in."""
    root = str(tmp_path / "checkpoints")
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = root
    env.checkpoint_config.retained = 100
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=1, delay=0))
    (
        env.from_source(SequenceSource(0, SHORT, batch_size=50), name="short")
        .uid("short")
        .sink_to(CollectSink(), name="short out")
        .uid("short-out")
    )
    (
        env.from_source(
            SequenceSource(LONG_START, LONG_START + LONG, rows_per_second=12_000, batch_size=100),
            name="long",
        )
        .uid("long")
        .map(FailAfterShortFinished(root), name="gate")
        .uid("gate")
        .sink_to(CollectSink(), name="long out")
        .uid("long-out")
    )
    result = env.execute("collect after finish")
    assert result.attempts == 2
    assert collected_values(result, "short-out") == list(range(SHORT))
    assert collected_values(result, "long-out") == list(range(LONG_START, LONG_START + LONG))


@pytest.mark.hang_guard(180)
def test_flip147_a_collect_sink_subtask_that_finished_before_a_failure_keeps_its_records(
    executor: Any, tmp_path: Any
) -> None:
    """Source, map and CollectSink chained, at parallelism 2: subtask 0 reads a short file
    and finishes, subtask 1 a long one and fails later. The restored checkpoint records
    subtask 0 as finished (partly finished operators: it left no state); the records it
    reported when it finished stand in for it."""
    folder = tmp_path / "in"
    folder.mkdir()
    long = 30_000
    (folder / "a.jsonl").write_text("".join(f'{{"v": {i}}}\n' for i in range(SHORT)))
    (folder / "b.jsonl").write_text("".join(f'{{"v": {LONG_START + i}}}\n' for i in range(long)))
    root = str(tmp_path / "checkpoints")
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = root
    env.checkpoint_config.retained = 100
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=1, delay=0))
    (
        env.from_source(
            RateLimitedSource(FileSource(str(folder), batch_size=100), 20_000), name="files in"
        )
        .uid("files-in")
        .map(FailAfterShortFinished(root, "files-in", (0,)), name="gate")
        .uid("gate")
        .sink_to(CollectSink(), name="out")
        .uid("out")
    )
    result = env.execute("partly finished")
    assert result.attempts == 2
    values = sorted(r["v"] for part in result.sink_results["out"] for r in part)
    assert values == list(range(SHORT)) + list(range(LONG_START, LONG_START + long))


# ------------------------------------------------------------------------- drain (M-W1)

HOUR = 3_600_000


def keyed_events(batch: pa.RecordBatch) -> pa.RecordBatch:
    x = batch.column(0).to_numpy()
    return pa.RecordBatch.from_arrays([pa.array(x % 4), pa.array(x)], names=["k", "ts"])


class PendingUntilTheHourEnds(lg.KeyedProcessFunction):
    """Counts each key's records in ValueState "pending"; an event-time timer at the end
    of the first hour emits the count and clears it (M-W6)."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.pending = ctx.get_state(lg.ValueStateDescriptor("pending", default=0))

    def process_element(self, value: Any, ctx: Any) -> Any:
        count = self.pending.value()
        if count == 0:
            ctx.timer_service().register_event_time_timer(HOUR)
        self.pending.update(count + 1)
        return ()

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield {"k": ctx.current_key, "n": self.pending.value()}
        self.pending.clear()


@pytest.mark.hang_guard(180)
def test_flip147_m_w1_stop_with_savepoint_drain_fires_every_window_and_timer_and_finishes(
    executor: Any, tmp_path: Any
) -> None:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    events = (
        env.from_source(
            SequenceSource(0, 10**9, rows_per_second=20_000, batch_size=200), name="numbers"
        )
        .uid("numbers")
        .map_batches(keyed_events, name="events")
        .uid("events")
        .assign_timestamps_and_watermarks(
            lg.WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_assigner("ts")
        )
        .uid("timestamps")
    )
    (
        events.key_by("k")
        .window(lg.TumblingEventTimeWindows.of(timedelta(hours=1)))
        .aggregate(lg.agg.count(), name="windows")
        .uid("windows")
        .sink_to(CollectSink(), name="window out")
        .uid("window-out")
    )
    (
        events.key_by("k")
        .process(PendingUntilTheHourEnds(), name="pending")
        .uid("pending")
        .sink_to(CollectSink(), name="timer out")
        .uid("timer-out")
    )
    client = env.execute_async("drain")
    try:
        wait_until(
            lambda: any(c.status == "completed" for c in client.checkpoints()) or client.done(),
            "a checkpoint completed",
            timeout_s=90,
        )
        assert not client.done(), "the unbounded job ended by itself"
        location = client.stop_with_savepoint(str(tmp_path / "savepoint"), drain=True, timeout=90)
    finally:
        if not client.done():
            client.cancel()
    result = client.wait(60)
    assert result.status is lg.JobStatus.FINISHED and result.savepoint_path == location
    # how far the sources read before the drain stopped them, from the savepoint itself
    spec = resolve_restore_path(location)
    storage = open_storage(spec.storage_url)
    starts = {s.split_id: s.next for s in SequenceSource(0, 10**9).create_splits(2)}
    read = sum(
        split.next - starts[split.split_id]
        for handle in spec.operators["numbers"].values()
        for split in storage.read_state(handle)["state"]["splits"]
    )
    assert read > 0
    windows = sum(r["count"] for part in result.sink_results["window-out"] for r in part)
    timers = sum(r["n"] for part in result.sink_results["timer-out"] for r in part)
    assert windows == read, f"windows counted {windows} of the {read} records read"
    assert timers == read, f"timers emitted {timers} of the {read} records read"
    # the savepoint was taken after every window and timer fired: nothing is pending
    savepoint = lg.savepoint.read(location, allow_pickle=True)
    assert len(savepoint.state("pending", "pending")) == 0
    windows_state = [row[-1] for row in savepoint.state("windows", "_function").rows]
    assert len(windows_state) == 2, "one window state per subtask"
    for state in windows_state:
        assert state["watermark"] == MAX_WATERMARK, "event time ended before the snapshot"
        assert state["blocks"] == [], f"windows still pending in the savepoint: {state}"

"""A bounded job restored from an unbounded job's savepoint ends by itself (M-R3).

The usual catch-up: a job runs unbounded, is stopped with a savepoint, more input
arrives, and the job is restarted from the savepoint with a bounded source to read what
came meanwhile and finish. The restored splits carry the unbounded run's positions but no
end: the source reconciles them with its configuration (``Source.restore_splits``), so
they get the ends of the restore (Kafka: each partition's end offset when the run starts;
files: the folder's files then; sequence: the range of the restored source), and the job
ends with every record exactly once. A bounded job's own checkpoint keeps its ends.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from conftest import FileProbe, wait_until
from kafka_fixtures import BOOTSTRAP, produce
from lockgate.connectors import FileSink, FileSource, KafkaSource, SequenceSource
from lockgate.connectors.base import InputStatus, ReaderOutput
from lockgate.connectors.builtin.sequence import SequenceSplit
from lockgate.connectors.kafka.source import EARLIEST, KafkaSplit
from lockgate.runtime.context import RuntimeContext

#: how long the restored bounded job may take to end by itself (it reads a few thousand
#: records; on a loaded machine a Spark run takes seconds, never minutes)
END_TIMEOUT_S = 90.0


def published(folder: Path) -> list[Any]:
    """The records an exactly-once FileSink published (``part-*`` files) in ``folder``."""
    return [
        json.loads(line)
        for p in sorted(folder.glob("part-*"))
        for line in p.read_text().splitlines()
        if line
    ]


def run_unbounded_then_stop(
    env: lg.StreamEnvironment, probe: FileProbe, seen: int, savepoint: Path, executor: Any
) -> None:
    """Run ``env`` until ``probe`` has ``seen`` records, then stop it with a savepoint."""
    client = env.execute_async("unbounded", executor=executor)
    try:
        wait_until(lambda: len(probe) >= seen, f"the unbounded job read {seen} records", 90)
        client.stop_with_savepoint(str(savepoint), timeout=90)
    except BaseException:
        client.cancel()
        raise
    assert client.wait(90).status is lg.JobStatus.FINISHED


def run_restored_to_its_end(env: lg.StreamEnvironment, savepoint: Path, executor: Any) -> None:
    """Run ``env`` from ``savepoint``; fail unless it ends by itself, FINISHED."""
    client = env.execute_async("restored bounded", executor=executor, restore_from=str(savepoint))
    try:
        result = client.wait(END_TIMEOUT_S)
    except TimeoutError:
        client.cancel()
        client.wait(60)
        pytest.fail(
            f"the bounded job restored from an unbounded job's savepoint was still running "
            f"after {END_TIMEOUT_S:.0f} s: its restored splits have no end"
        )
    assert result.status is lg.JobStatus.FINISHED


def pipeline(
    env: lg.StreamEnvironment, source: lg.connectors.base.Source, probe: FileProbe, out: Path
) -> None:
    (
        env.from_source(source, name="input")
        .uid("input")
        .map(lambda r: probe.add(1) or r, name="seen")
        .uid("seen")
        .sink_to(FileSink(str(out), format="jsonl", exactly_once=True))
        .uid("sink")
    )


def environment(tmp_path: Path, executor: Any, name: str) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(timedelta(milliseconds=200))
    env.checkpoint_config.storage = str(tmp_path / f"chk-{name}")
    return env


# --------------------------------------------------------------------------- Kafka


@pytest.mark.hang_guard(400)
def test_kafka_a_bounded_job_restored_from_an_unbounded_savepoint_reads_what_came_and_ends_M_R3(
    executor: Any, kafka_topic: Any, tmp_path: Path
) -> None:
    """Unbounded run, savepoint, more records, bounded restore: every partition's restored
    split ends at its end offset of the restore, so the job finishes, and both runs'
    output holds every record exactly once."""
    topic = kafka_topic(3)
    first, more = 3_000, 3_000
    produce(topic, [{"v": v} for v in range(first)], partitioner=lambda i, r: r["v"] % 3)
    probe = FileProbe(tmp_path / "probe-1")
    env = environment(tmp_path, executor, "1")
    pipeline(env, KafkaSource(BOOTSTRAP, topic), probe, tmp_path / "out-1")
    run_unbounded_then_stop(env, probe, first, tmp_path / "sp", executor)

    produce(
        topic, [{"v": v} for v in range(first, first + more)], partitioner=lambda i, r: r["v"] % 3
    )
    env = environment(tmp_path, executor, "2")
    source = KafkaSource(BOOTSTRAP, topic, bounded=True)
    pipeline(env, source, FileProbe(tmp_path / "probe-2"), tmp_path / "out-2")
    run_restored_to_its_end(env, tmp_path / "sp", executor)

    before = [r["v"] for r in published(tmp_path / "out-1")]
    after = [r["v"] for r in published(tmp_path / "out-2")]
    assert sorted(before) == list(range(first))
    assert sorted(before + after) == list(range(first + more)), "each record exactly once"


def kafka_ctx() -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="kafka",
        operator_uid="kafka",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
    )


def test_kafka_restored_splits_get_the_ends_of_the_restore_and_keep_ends_they_have(
    kafka_topic: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A bounded source gives a restored split without an end its partition's end offset
    of this run (and a split never positioned its first offset); a split with an end (a
    bounded job's checkpoint) keeps it. An unbounded source keeps a restored end too (as
    Flink's KafkaSource keeps a split's stopping offset), and says so."""
    topic = kafka_topic(2)
    produce(topic, [{"v": v} for v in range(10)], partition=0)
    produce(topic, [{"v": v} for v in range(4)], partition=1)
    restored = [KafkaSplit(topic, 0, 3, None), KafkaSplit(topic, 1, EARLIEST, None)]
    bounded = KafkaSource(BOOTSTRAP, topic, bounded=True)
    bounded.prepare_run()
    produce(topic, [{"v": 99}], partition=0)  # after the run's start: beyond its end
    assert bounded.restore_splits(restored, kafka_ctx()) == [
        KafkaSplit(topic, 0, 3, 10),
        KafkaSplit(topic, 1, 0, 4),
    ]
    assert restored[0].end is None, "the restored splits are not changed in place"
    ended = [KafkaSplit(topic, 0, 3, 5)]
    assert bounded.restore_splits(ended, kafka_ctx()) == ended
    unbounded = KafkaSource(BOOTSTRAP, topic)
    with caplog.at_level("WARNING", logger="lockgate.connectors.kafka.source"):
        assert unbounded.restore_splits(ended, kafka_ctx()) == ended
        assert unbounded.restore_splits(restored, kafka_ctx()) == restored
    [warning] = [r.getMessage() for r in caplog.records]
    assert f"{topic}[0]" in warning and "end offset 5" in warning and "bounded" in warning


class Records(ReaderOutput):
    """What a reader emits, as records."""

    def __init__(self) -> None:
        self.records: list[Any] = []

    def emit(self, batch: Any) -> None:
        self.records.extend(batch.rows)

    def emit_from_split(self, split_id: Any, batch: Any) -> None:
        self.emit(batch)

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        raise AssertionError(f"no record is malformed here: {record}")


def test_kafka_a_bounded_runs_finished_partitions_stay_finished_in_its_state(
    kafka_topic: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A bounded run's checkpoint keeps the partitions it finished (at their ends), so a
    restore never takes them for partitions it has not read: an unbounded source with
    partition discovery restored from it does not read them again from their start (it
    did: every record of a finished partition twice), and keeps their ends."""
    topic = kafka_topic(2)
    produce(topic, [{"v": v} for v in range(6)], partitioner=lambda i, r: r["v"] % 2)
    bounded = KafkaSource(BOOTSTRAP, topic, bounded=True)
    reader = bounded.create_reader(kafka_ctx())
    try:
        reader.add_splits(bounded.create_splits(1))
        out = Records()
        wait_until(lambda: reader.poll(out) is InputStatus.END_OF_INPUT, "the bounded read", 30)
        state = reader.snapshot_positions()
    finally:
        reader.close()
    assert sorted(r["v"] for r in out.records) == list(range(6))
    assert sorted((s.partition, s.offset, s.end) for s in state) == [(0, 3, 3), (1, 3, 3)]
    produce(topic, [{"v": 6}], partition=0)
    unbounded = KafkaSource(BOOTSTRAP, topic, partition_discovery_interval=0.01)
    reader = unbounded.create_reader(kafka_ctx())
    try:
        with caplog.at_level("WARNING", logger="lockgate.connectors.kafka.source"):
            reader.add_splits(unbounded.restore_splits(state, kafka_ctx()))
        again = Records()
        reader.poll(again)  # discovers the topic's partitions
        assert reader.snapshot_positions() == state, "no partition started again"
        assert again.records == []
    finally:
        reader.close()
    assert any("end offset 3" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- files


def put(folder: Path, name: str, ids: range) -> None:
    """Create ``folder/name`` with records ``{"v": i}`` atomically (hidden, then renamed)."""
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({"v": i}) + "\n" for i in ids), encoding="utf-8")
    os.rename(tmp, folder / name)


@pytest.mark.hang_guard(300)
def test_files_a_bounded_job_restored_from_a_watching_savepoint_reads_new_files_and_ends_M_R3(
    executor: Any, tmp_path: Path
) -> None:
    """A watching FileSource's savepoint restored into a bounded one: the files finished
    before are not read again, the unfinished ones resume, the files added meanwhile are
    read, and the job ends."""
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(4):
        put(folder, f"a-{i}.jsonl", range(i * 250, (i + 1) * 250))
    probe = FileProbe(tmp_path / "probe-1")
    env = environment(tmp_path, executor, "1")
    pipeline(env, FileSource(str(folder), monitor_interval=0.05), probe, tmp_path / "out-1")
    run_unbounded_then_stop(env, probe, 1_000, tmp_path / "sp", executor)

    for i in range(4, 8):
        put(folder, f"b-{i}.jsonl", range(i * 250, (i + 1) * 250))
    env = environment(tmp_path, executor, "2")
    pipeline(env, FileSource(str(folder)), FileProbe(tmp_path / "probe-2"), tmp_path / "out-2")
    run_restored_to_its_end(env, tmp_path / "sp", executor)

    before = [r["v"] for r in published(tmp_path / "out-1")]
    after = [r["v"] for r in published(tmp_path / "out-2")]
    assert sorted(before) == list(range(1_000))
    assert sorted(before + after) == list(range(2_000)), "each record exactly once"


def test_files_a_bounded_runs_finished_files_are_never_read_again_by_a_restore(
    tmp_path: Path,
) -> None:
    """A bounded run's state names the files it finished (DoneFiles, marked bounded): a
    watching source restored from it reads only the files it never read (it read every
    file again), and a bounded source restored from it keeps its end (the files of its
    start: one added since is not read)."""
    folder = tmp_path / "in"
    folder.mkdir()
    put(folder, "a.jsonl", range(0, 3))
    put(folder, "b.jsonl", range(3, 6))
    ctx = RuntimeContext(
        task_name="t",
        operator_name="files",
        operator_uid="files",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
        clock=lg.ManualClock(),
    )
    bounded = FileSource(str(folder))
    reader = bounded.create_reader(ctx)
    reader.add_splits(bounded.create_splits(1))
    out = Records()
    wait_until(lambda: reader.poll(out) is InputStatus.END_OF_INPUT, "the bounded read", 30)
    state = reader.snapshot_positions()
    reader.close()
    assert sorted(r["v"] for r in out.records) == list(range(6))
    put(folder, "c.jsonl", range(6, 9))

    again = bounded.create_reader(ctx)
    again.add_splits(bounded.restore_splits(state, ctx))
    assert again.poll(Records()) is InputStatus.END_OF_INPUT, "its end: the start's files"

    watching = FileSource(str(folder), monitor_interval=1.0)
    reader = watching.create_reader(ctx)
    reader.add_splits(watching.restore_splits(state, ctx))
    more = Records()
    wait_until(lambda: reader.poll(more) is InputStatus.NOTHING_AVAILABLE, "c.jsonl read", 30)
    reader.close()
    assert sorted(r["v"] for r in more.records) == [6, 7, 8]


# --------------------------------------------------------------------------- sequence


@pytest.mark.hang_guard(300)
def test_sequence_a_bounded_job_restored_with_a_longer_range_reads_the_rest_and_ends_M_R3(
    executor: Any, tmp_path: Path
) -> None:
    """An unbounded SequenceSource(0, 1000) stopped with a savepoint after its last value,
    restored as SequenceSource(0, 2000, bounded=True): the values past the old range are
    read, none before it again, and the job ends."""
    probe = FileProbe(tmp_path / "probe-1")
    env = environment(tmp_path, executor, "1")
    pipeline(env, SequenceSource(0, 1_000, bounded=False), probe, tmp_path / "out-1")
    run_unbounded_then_stop(env, probe, 1_000, tmp_path / "sp", executor)

    env = environment(tmp_path, executor, "2")
    env.set_parallelism(1)  # rescaled: the restored splits and the new one meet in one
    source = SequenceSource(0, 2_000, bounded=True)
    pipeline(env, source, FileProbe(tmp_path / "probe-2"), tmp_path / "out-2")
    run_restored_to_its_end(env, tmp_path / "sp", executor)

    before = published(tmp_path / "out-1")
    after = published(tmp_path / "out-2")
    assert sorted(before) == list(range(1_000))
    assert sorted(before + after) == list(range(2_000)), "each value exactly once"


def test_sequence_restored_splits_are_shared_once_and_the_range_past_them_is_added() -> None:
    """Every restored split goes to one subtask (by its index), finished ones included in
    the state; the range past the old end becomes one new split; a checkpoint without its
    finished splits (an older lockgate's) cannot tell the old end and is refused when the
    range grew."""
    restored = [SequenceSplit("seq-0", 500, 500, 2), SequenceSplit("seq-1", 700, 1_000, 2)]
    source = SequenceSource(0, 2_000, bounded=True)
    shares = [source.restore_splits(restored + restored, _ctx(i, 2)) for i in range(2)]
    assert shares == [
        [
            SequenceSplit("seq-0", 500, 500, 3, 2_000),
            SequenceSplit("seq-2", 1_000, 2_000, 3, 2_000),
        ],
        [SequenceSplit("seq-1", 700, 1_000, 3, 2_000)],
    ]
    assert restored[0].count == 2, "the restored splits are not changed in place"
    same = SequenceSource(0, 1_000, bounded=True)
    assert same.restore_splits(restored, _ctx(0, 1)) == [
        replace(s, range_end=1_000) for s in restored
    ]
    older = [SequenceSplit("seq-1", 700, 1_000)]  # its finished seq-0 was not kept
    assert same.restore_splits(older, _ctx(0, 1)) == older
    with pytest.raises(lg.ConfigurationError, match="cannot tell where the restored range"):
        source.restore_splits(older, _ctx(0, 1))


def test_sequence_a_finished_subtasks_missing_split_stays_finished_M_R3() -> None:
    """A subtask that finished its split takes no more checkpoints, so a later one lacks
    its split: the restore neither refuses (it did, on Spark's attempt-number test) nor
    reads that split again, and a longer range still adds the values past the old end,
    after the last index of the range."""
    present = [SequenceSplit("seq-0", 600, 1_000, 2, 2_000)]  # seq-1 had finished
    same = SequenceSource(0, 2_000, bounded=True)
    assert same.restore_splits(present, _ctx(0, 1)) == present
    longer = SequenceSource(0, 3_000, bounded=True)
    assert longer.restore_splits(present, _ctx(0, 1)) == [
        SequenceSplit("seq-0", 600, 1_000, 3, 3_000),
        SequenceSplit("seq-2", 2_000, 3_000, 3, 3_000),
    ]


def _ctx(subtask: int, parallelism: int) -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="sequence",
        operator_uid="sequence",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
    )

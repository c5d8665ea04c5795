"""KafkaSource against the real broker on 127.0.0.1:9092 (never mocked): partitions as
splits whose offsets a restore rewinds to (M-X1, M-R1), start offsets resolved once,
bounded reading to the end offsets of the job's start, aborted transactions skipped,
per-partition watermarks (M-W1, M-W2), malformed records failing with
``topic[partition]@offset`` or going to ``lg.DEAD_LETTER``, partition discovery,
rescaling through a savepoint, and the argument checks."""

from __future__ import annotations

import collections
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from recording_output import RecordingOutput

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from conftest import FileProbe, on_executors, wait_until
from kafka_fixtures import BOOTSTRAP, add_partitions, admin, create_topic, produce
from lockgate.connectors import RateLimitedSource
from lockgate.connectors.base import InputStatus, SourceReader
from lockgate.connectors.kafka import source_limits
from lockgate.connectors.kafka.source import EARLIEST, KafkaSource, KafkaSplit, owner_of
from lockgate.errors import ConfigurationError, MalformedRecordError
from lockgate.runtime.context import RuntimeContext
from lockgate.testing import (
    FailAtRecord,
    FailDuringAlignment,
    FailSnapshot,
    inject_faults,
)
from running_sums import expected_running_sums

# --------------------------------------------------------------------------------- helpers


def ctx(subtask: int = 0, parallelism: int = 1) -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="kafka",
        operator_uid="kafka",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
    )


@pytest.fixture
def open_reader() -> Iterator[Callable[..., SourceReader]]:
    """``open_reader(source, splits=None, subtask=0, parallelism=1)``: a reader given
    ``splits`` (default: its share of ``create_splits``); closed at teardown."""
    readers: list[SourceReader] = []

    def open_(
        source: KafkaSource, splits: list[Any] | None = None, subtask: int = 0, parallelism: int = 1
    ) -> SourceReader:
        reader = source.create_reader(ctx(subtask, parallelism))
        readers.append(reader)
        if splits is None:
            splits = lg.connectors.base.assign_splits(
                source.create_splits(parallelism), subtask, parallelism
            )
        reader.add_splits(splits)
        return reader

    yield open_
    for reader in readers:
        reader.close()


def read_until(
    reader: SourceReader, out: RecordingOutput, done: Callable[[], bool], what: str
) -> None:
    """Poll until ``done()``; fails after 30 s (bounded polling: a poll never blocks)."""
    deadline = time.monotonic() + 30
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after 30 s reading until {what}; got {len(out.records)}")
        if reader.poll(out) is InputStatus.NOTHING_AVAILABLE:
            time.sleep((reader.wait_hint_ms() or 10) / 1000)  # the task's own idle wait


def read_to_end(reader: SourceReader, out: RecordingOutput) -> None:
    status: list[InputStatus] = []

    def ended() -> bool:
        return bool(status) and status[-1] is InputStatus.END_OF_INPUT

    deadline = time.monotonic() + 30
    while not ended():
        if time.monotonic() > deadline:
            pytest.fail(f"the reader did not end within 30 s; got {len(out.records)} records")
        status.append(reader.poll(out))
        if status[-1] is InputStatus.NOTHING_AVAILABLE:
            time.sleep((reader.wait_hint_ms() or 10) / 1000)


def by_partition(n: int, partitions: int) -> Callable[[int, Any], int]:
    return lambda i, v: i % partitions


def values(records: list[Any]) -> list[int]:
    return sorted(r["v"] for r in records)


def committed_offsets(group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": group})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def transactional_batch(topic: str, vals: list[Any], *, commit: bool, partition: int = 0) -> None:
    producer = Producer(
        {"bootstrap.servers": BOOTSTRAP, "transactional.id": f"lgtest-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for v in vals:
        producer.produce(topic, json.dumps(v).encode(), partition=partition)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


# --------------------------------------------------------------------------------- reading


def test_a_bounded_source_reads_every_partition_in_offset_order_then_ends_M_X1(
    kafka_topic, open_reader
) -> None:
    topic = kafka_topic(3)
    produce(topic, [{"v": i} for i in range(300)], partitioner=by_partition(300, 3))
    source = KafkaSource(BOOTSTRAP, topic, bounded=True)
    reader = open_reader(source)
    out = RecordingOutput()
    read_to_end(reader, out)
    assert values(out.records) == list(range(300))
    for p in range(3):
        split_id = f"{topic}[{p}]"
        rows = [r["v"] for s, batch in out.batches if s == split_id for r in batch]
        assert rows == list(range(p, 300, 3)), "each partition in offset order, its own split"
    assert sorted(out.finished) == [f"{topic}[{p}]" for p in range(3)]
    # the finished splits stay in the state, at their ends (a restore never reads them)
    assert sorted((s.partition, s.offset, s.end) for s in reader.snapshot_positions()) == [
        (p, 100, 100) for p in range(3)
    ]


def test_bounded_stops_at_the_end_offsets_of_the_start_even_after_a_restore(
    kafka_topic, open_reader
) -> None:
    """The end offsets are resolved with the start and travel in the split: records
    written afterwards are not read, before or after a restore."""
    topic = kafka_topic(1)
    produce(topic, [{"v": i} for i in range(10)])
    source = KafkaSource(BOOTSTRAP, topic, bounded=True)
    source.prepare_run()
    assert source.create_splits(1) == [KafkaSplit(topic, 0, 0, 10)]
    produce(topic, [{"v": i} for i in range(10, 15)])  # after the start: never read
    out = RecordingOutput()
    read_to_end(open_reader(source), out)
    assert values(out.records) == list(range(10))
    restored = open_reader(source, [KafkaSplit(topic, 0, 4, 10)])
    again = RecordingOutput()
    read_to_end(restored, again)
    assert values(again.records) == list(range(4, 10))


def test_a_new_reader_resumes_at_the_snapshotted_offsets_M_R1(kafka_topic, open_reader) -> None:
    """M-R1: a reader given the snapshotted splits seeks every partition back to them:
    no record is lost and none is read twice."""
    topic = kafka_topic(2)
    produce(topic, [{"v": i} for i in range(4000)], partitioner=by_partition(4000, 2))
    source = KafkaSource(BOOTSTRAP, topic)
    first = open_reader(source)
    out = RecordingOutput()
    read_until(first, out, lambda: len(out.records) >= 100, "some records")
    snapshot = first.snapshot_positions()
    at_snapshot = len(out.records)
    assert sorted(s.offset for s in snapshot) != [EARLIEST, EARLIEST]
    assert sum(s.offset for s in snapshot if s.offset >= 0) == at_snapshot
    read_until(first, out, lambda: len(out.records) == 4000, "all records")
    first.close()

    after = RecordingOutput()
    second = open_reader(source, snapshot)
    read_until(second, after, lambda: len(after.records) == 4000 - at_snapshot, "the rest")
    assert values(out.records[:at_snapshot] + after.records) == list(range(4000))


def test_start_latest_committed_timestamp_and_explicit_offsets(kafka_topic, open_reader) -> None:
    topic = kafka_topic(2)
    produce(
        topic,
        [{"v": i} for i in range(20)],
        partitioner=by_partition(20, 2),
        timestamps=[1_000_000 + i * 10 for i in range(20)],
    )  # partition p holds v = p, p + 2, ...; v's timestamp 1,000,000 + 10 v

    def read(source: KafkaSource, more: list[dict[str, int]] | None = None) -> list[int]:
        source.prepare_run()  # what a job does once, on the driver
        if more:
            produce(topic, more, partitioner=by_partition(len(more), 2))
        out = RecordingOutput()
        expected = len(more or []) + sum(
            s.end - max(s.offset, 0) for s in source.create_splits(1) if s.end is not None
        )
        reader = open_reader(source)
        read_until(reader, out, lambda: len(out.records) >= expected, f"{expected} records")
        return values(out.records)

    # latest: resolved when the run is prepared; later records are read, earlier are not
    latest = KafkaSource(BOOTSTRAP, topic, start="latest")
    assert read(latest, [{"v": 100}, {"v": 101}]) == [100, 101]
    # explicit offsets: partition 0 from offset 8 (v = 16, 18, 100), partition 1 from 9
    explicit = KafkaSource(BOOTSTRAP, topic, start={0: 8, (topic, 1): 9}, bounded=True)
    assert read(explicit) == [16, 18, 19, 100, 101]
    # timestamp: the first record at or after 1,000,150 ms (v >= 15)
    stamped = KafkaSource(BOOTSTRAP, topic, start=1_000_150, bounded=True)
    assert read(stamped) == [15, 16, 17, 18, 19, 100, 101]
    # committed: partition 0 from the group's offset 10 (v = 100); partition 1 has none: earliest
    group = f"lgtest-{uuid.uuid4().hex[:8]}"
    committer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": group})
    committer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    committer.close()
    committed = KafkaSource(BOOTSTRAP, topic, start="committed", group_id=group, bounded=True)
    assert read(committed) == [*range(1, 20, 2), 100, 101]


def test_start_latest_is_resolved_once_so_a_restart_before_a_checkpoint_replays_the_same(
    kafka_topic, open_reader
) -> None:
    """The splits of a run are fixed by ``prepare_run``: a second ``create_splits`` (a
    restart without checkpoint) starts where the first did, not at the new end."""
    topic = kafka_topic(1)
    produce(topic, [{"v": i} for i in range(5)])
    source = KafkaSource(BOOTSTRAP, topic, start="latest")
    source.prepare_run()
    first = source.create_splits(1)
    produce(topic, [{"v": 5}])
    assert source.create_splits(1) == first == [KafkaSplit(topic, 0, 5)]
    out = RecordingOutput()
    read_until(open_reader(source), out, lambda: len(out.records) == 1, "the one new record")
    assert out.records == [{"v": 5}]


def test_read_committed_skips_aborted_transactions_and_moves_past_their_markers(
    kafka_topic, open_reader
) -> None:
    topic = kafka_topic(1)
    produce(topic, [{"v": 0}])
    transactional_batch(topic, [{"v": -1}, {"v": -2}], commit=False)
    transactional_batch(topic, [{"v": 1}, {"v": 2}], commit=True)
    transactional_batch(topic, [{"v": -3}], commit=False)
    source = KafkaSource(BOOTSTRAP, topic, bounded=True)
    source.prepare_run()
    [split] = source.create_splits(1)
    assert split.end == 9  # 1 + (2 + marker) + (2 + marker) + (1 + marker)
    out = RecordingOutput()
    reader = open_reader(source)
    read_to_end(reader, out)  # ends: the offsets move past the aborted records and markers
    assert out.records == [{"v": 0}, {"v": 1}, {"v": 2}]
    uncommitted = KafkaSource(BOOTSTRAP, topic, bounded=True, isolation="read_uncommitted")
    everything = RecordingOutput()
    read_to_end(open_reader(uncommitted), everything)
    assert [r["v"] for r in everything.records] == [0, -1, -2, 1, 2, -3]


def test_text_bytes_key_and_timestamp_fields(kafka_topic, open_reader) -> None:
    topic = kafka_topic(1)
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    producer.produce(topic, b'{"a": 1}', key=b"k1", timestamp=1234)
    producer.produce(topic, b"[1, 2]", timestamp=1235)
    producer.produce(topic, None, key=b"gone", timestamp=1236)
    producer.flush(30)

    def read(**kwargs: Any) -> list[Any]:
        out = RecordingOutput()
        read_to_end(open_reader(KafkaSource(BOOTSTRAP, topic, bounded=True, **kwargs)), out)
        return out.records

    assert read() == [{"a": 1}, [1, 2], None]
    assert read(format="text") == ['{"a": 1}', "[1, 2]", None]
    assert read(format="bytes") == [b'{"a": 1}', b"[1, 2]", None]
    assert read(key_field="key", timestamp_field="ts") == [
        {"a": 1, "key": "k1", "ts": 1234},
        {"value": [1, 2], "key": None, "ts": 1235},
        {"value": None, "key": "gone", "ts": 1236},
    ]
    assert read(format="text", timestamp_field="ts")[0] == {"value": '{"a": 1}', "ts": 1234}


def test_partitions_are_owned_by_a_stable_hash_and_each_read_by_one_subtask(
    kafka_topic, open_reader
) -> None:
    topic = kafka_topic(5)
    produce(topic, [{"v": i} for i in range(50)], partitioner=by_partition(50, 5))
    source = KafkaSource(BOOTSTRAP, topic, bounded=True)
    outs = []
    for subtask in range(3):
        out = RecordingOutput()
        read_to_end(open_reader(source, subtask=subtask, parallelism=3), out)
        outs.append(out)
        owned = {int(s.split("[")[1][:-1]) for s, _ in out.batches}
        assert owned == {p for p in range(5) if owner_of(topic, p, 3) == subtask}
    assert values([r for out in outs for r in out.records]) == list(range(50))
    assert owner_of("t", 1, 4) == owner_of("t", 1, 4) == (owner_of("t", 0, 4) + 1) % 4


def test_checkpoint_completion_commits_the_offsets_to_the_group(kafka_topic, open_reader) -> None:
    topic = kafka_topic(2)
    produce(topic, [{"v": i} for i in range(40)], partitioner=by_partition(40, 2))
    group = f"lgtest-{uuid.uuid4().hex[:8]}"
    reader = open_reader(KafkaSource(BOOTSTRAP, topic, group_id=group))
    out = RecordingOutput()
    read_until(reader, out, lambda: len(out.records) == 40, "all records")
    positions = reader.snapshot_positions()
    assert committed_offsets(group, topic, 2) == {0: -1001, 1: -1001}, "nothing before"
    reader.notify_checkpoint_complete(1, positions)
    wait_until(
        lambda: committed_offsets(group, topic, 2) == {0: 20, 1: 20},
        "the checkpointed offsets are committed",
        timeout_s=30,
    )


# --------------------------------------------------------------------------------- malformed


BAD = [
    pytest.param("json", b"{not json", "invalid JSON", id="json"),
    pytest.param("json", b"\xff\xfe", "not valid UTF-8", id="json-utf8"),
    pytest.param("text", b"\xff", "not valid UTF-8", id="text-utf8"),
    pytest.param("bytes", b"x" * 65, "over max_record_bytes=64", id="oversized"),
]


@pytest.mark.parametrize(("fmt", "bad", "error"), BAD)
def test_a_malformed_record_fails_naming_topic_partition_and_offset(
    kafka_topic, open_reader, fmt, bad, error
) -> None:
    topic = kafka_topic(2)
    produce(topic, [b'"ok"', bad, b'"ok"'], partition=1, raw=True)
    source = KafkaSource(BOOTSTRAP, topic, format=fmt, bounded=True, max_record_bytes=64)
    with pytest.raises(MalformedRecordError) as err:
        read_to_end(open_reader(source), RecordingOutput())
    assert err.value.location == f"{topic}[1]@1"
    assert error in str(err.value) and "on_error='dead_letter'" in str(err.value)


@pytest.mark.parametrize(("fmt", "bad", "error"), BAD)
def test_with_dead_letter_a_malformed_record_goes_to_the_side_output_with_its_position(
    kafka_topic, open_reader, fmt, bad, error
) -> None:
    topic = kafka_topic(1)
    produce(topic, [b'"a"', bad, b'"b"', bad], raw=True)
    source = KafkaSource(BOOTSTRAP, topic, format=fmt, on_error="dead_letter", max_record_bytes=64)
    assert source.side_outputs == ("dead-letter",)
    reader = open_reader(source)
    out = RecordingOutput()
    read_until(reader, out, lambda: len(out.dead) == 2, "two dead letters")
    assert len(out.records) == 2
    assert [(d["topic"], d["partition"], d["offset"]) for d in out.dead] == [
        (topic, 0, 1),
        (topic, 0, 3),
    ]
    assert all(error in d["error"] and d["raw"] for d in out.dead)
    assert out.dead[0]["location"] == f"{topic}[0]@1"
    assert reader.snapshot_positions()[0].offset == 4, "the position moves past them"


# --------------------------------------------------------------------------------- discovery


def test_partitions_added_while_reading_are_discovered_and_read_from_their_start(
    kafka_topic, open_reader
) -> None:
    topic = kafka_topic(1)
    produce(topic, [{"v": 0}])
    source = KafkaSource(BOOTSTRAP, topic, partition_discovery_interval=0.05)
    reader = open_reader(source)
    out = RecordingOutput()
    read_until(reader, out, lambda: len(out.records) == 1, "the first record")
    add_partitions(topic, 3)
    produce(topic, [{"v": 1}, {"v": 2}, {"v": 3}, {"v": 4}], partitioner=lambda i, v: 1 + i % 2)
    read_until(reader, out, lambda: len(out.records) == 5, "the new partitions' records")
    assert values(out.records) == [0, 1, 2, 3, 4]
    assert sorted(s.split_id for s in reader.snapshot_positions()) == [
        f"{topic}[{p}]" for p in range(3)
    ]


def test_a_pattern_discovers_new_matching_topics(open_reader) -> None:
    prefix = f"lgtest-pattern-{uuid.uuid4().hex[:8]}"
    made = [create_topic(f"{prefix}-a", 1)]
    try:
        source = KafkaSource(
            BOOTSTRAP, re.compile(re.escape(prefix) + "-.*"), partition_discovery_interval=0.05
        )
        produce(made[0], [{"v": 1}])
        reader = open_reader(source)
        out = RecordingOutput()
        read_until(reader, out, lambda: len(out.records) == 1, "the first topic's record")
        made.append(create_topic(f"{prefix}-b", 2))
        create_topic(f"{prefix.replace('pattern', 'other')}-c", 1)
        made.append(f"{prefix.replace('pattern', 'other')}-c")
        produce(made[1], [{"v": 2}, {"v": 3}], partitioner=by_partition(2, 2))
        produce(made[2], [{"v": 99}])  # does not match: never read
        read_until(reader, out, lambda: len(out.records) == 3, "the new topic's records")
        assert values(out.records) == [1, 2, 3]
    finally:
        client = admin()  # held until the answers came
        for future in client.delete_topics(made).values():
            future.result(30)


# --------------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"bootstrap_servers": "localhost"}, "bootstrap_servers"),
        ({"bootstrap_servers": ""}, "bootstrap_servers"),
        ({"topics": ""}, "topics"),
        ({"topics": []}, "topics"),
        ({"topics": ["a", "a"]}, "distinct"),
        ({"topics": "bad name"}, "letters, digits"),
        ({"topics": re.compile(b"x")}, "str pattern"),
        ({"topics": 5}, "topics"),
        ({"group_id": ""}, "group_id"),
        ({"start": "newest"}, "start"),
        ({"start": "committed"}, "group_id"),
        ({"start": -1}, "epoch milliseconds"),
        ({"start": True}, "start"),
        ({"start": {}}, "empty"),
        ({"start": {0: -1}}, "offset >= 0"),
        ({"start": {"0": 1}}, "keyed by partition"),
        ({"topics": ["a", "b"], "start": {0: 1}}, "exactly one named topic"),
        ({"bounded": 1}, "bounded"),
        ({"format": "avro"}, "format"),
        ({"key_field": ""}, "key_field"),
        ({"timestamp_field": 3}, "timestamp_field"),
        ({"key_field": "k", "timestamp_field": "k"}, "differ"),
        ({"on_error": "skip"}, "on_error"),
        ({"isolation": "serializable"}, "isolation"),
        ({"properties": {"group.id": "x"}}, "group_id"),
        ({"properties": {"enable.auto.commit": True}}, "checkpoints"),
        ({"properties": ["x"]}, "properties"),
        ({"partition_discovery_interval": 0}, "partition_discovery_interval"),
        ({"partition_discovery_interval": "1s"}, "partition_discovery_interval"),
        ({"partition_discovery_interval": 1, "bounded": True}, "bounded"),
        ({"max_record_bytes": 0}, "max_record_bytes"),
    ],
)
def test_bad_arguments_raise_a_configuration_error_saying_what_to_pass(kwargs, named) -> None:
    args: dict[str, Any] = {"bootstrap_servers": BOOTSTRAP, "topics": "t", **kwargs}
    with pytest.raises(ConfigurationError) as err:
        KafkaSource(args.pop("bootstrap_servers"), args.pop("topics"), **args)
    assert named in str(err.value)


def test_good_arguments_of_every_kind_are_accepted() -> None:
    KafkaSource(["h1:9092", "h2:9093"], ["a", "b"], start={("a", 0): 5, ("b", 2): 0})
    KafkaSource(BOOTSTRAP, re.compile("orders-.*"), partition_discovery_interval=timedelta(1))
    source = KafkaSource(BOOTSTRAP, "t", start={3: 7}, group_id="g", properties={"debug": ""})
    assert source.start == {("t", 3): 7}
    assert KafkaSource(BOOTSTRAP, "t", start=0).start == 0


def test_a_missing_topic_or_unreachable_broker_fails_naming_them(monkeypatch) -> None:
    missing = f"lgtest-missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ConfigurationError) as err:
        KafkaSource(BOOTSTRAP, missing).check_before_run()
    assert repr(missing) in str(err.value) and BOOTSTRAP in str(err.value)
    monkeypatch.setattr(source_limits, "REQUEST_TIMEOUT_S", 1.0)  # not 10 s of waiting
    with pytest.raises(ConfigurationError) as err:
        KafkaSource("127.0.0.1:1", "t").check_before_run()
    assert "cannot reach Kafka at '127.0.0.1:1'" in str(err.value) and "'t'" in str(err.value)


# --------------------------------------------------------------------------------- jobs

#: the exactly-once job: keys are v // CHUNK and key k lives in partition k % 3, so each
#: key's records come from one partition in order and the failure-free output is known
RECORDS = 30_000
CHUNK = 500
#: the job's source reads at most this many records per completed checkpoint (a
#: subtask reading two partitions needs about ten checkpoints for its 20,000)
PACE = 2_000


class RunningSum(lg.KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(lg.ValueStateDescriptor("sum", default=0))

    def process_element(self, value, ctx):
        total = self.total.value() + value["v"]
        self.total.update(total)
        yield {"k": value["k"], "v": value["v"], "sum": total}


def key_of(record):
    return record["k"]


@pytest.mark.hang_guard(240)
@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2), indirect=["executor"])
def test_a_keyed_running_sum_is_exactly_once_through_injected_failures_M_X1_M_R1(
    kafka_topic, executor, parallelism, caplog
) -> None:
    """M-X1, M-R1: four faults (an asynchronous snapshot, the source, the operator, an
    alignment) fail four attempts; each restore seeks every partition back to its
    checkpointed offset, so the collected output equals the failure-free run's.

    Every fault waits for checkpoints, never for time: the source is paced by completed
    checkpoints (:class:`CheckpointPacedSource`: nothing before an attempt's first
    completed checkpoint, then ``PACE`` records per completion, and its end held until
    three completions), so on a machine of any speed each attempt is still reading when
    its fault's checkpoint comes. Attempt by attempt (subtask 0 reads partitions 0 and
    2, 20,000 records; subtask 1 partition 1):

    0. the sources cannot end before three completed checkpoints, and the third needs
       the running sum's third snapshot, which fails: the job fails, and the last of the
       two completed checkpoints holds at most ``PACE`` records and one more poll
       (at most 5,000) a subtask;
    1. restores it; the source fails once it read 100 records after the attempt's first
       completed checkpoint (subtask 0 has at least 13,000 records left);
    2. restores a checkpoint of attempt 1 (subtask 0 emitted at most 100 records
       before); the running sum's subtask 1 fails on a batch after its first completed
       checkpoint: the 12,900 or more records left in partitions 0 and 2 hold keys of
       both subtasks (any five consecutive keys of a partition, 2,500 records, include
       one of subtask 1);
    3. restores attempt 2's last checkpoint; its first checkpoint finds both sources
       running (their end is held), so the running sum's subtask 0 aligns two channels
       and fails inside that alignment;
    4. restores attempt 2's checkpoint again and reads to the end."""
    topic = kafka_topic(3)
    produce(
        topic,
        [{"k": v // CHUNK, "v": v} for v in range(RECORDS)],
        partitioner=lambda i, r: r["k"] % 3,
    )
    env = lg.StreamEnvironment(parallelism=parallelism, executor=executor)
    env.enable_checkpointing(timedelta(milliseconds=100))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=8, delay=0))
    source = KafkaSource(BOOTSTRAP, topic, bounded=True)
    sums = (
        env.from_source(CheckpointPacedSource(source, PACE, end_after=3), name="kafka")
        .uid("kafka")
        .key_by(key_of)
        .process(RunningSum(), name="running sum")
        .uid("sums")
    )
    inject_faults(
        env,
        FailSnapshot("running sum", checkpoint=3, phase="async", attempt=0, subtask=0),
        FailAtRecord("kafka", record=100, attempt=1, subtask=0, after_checkpoints=1),
        FailAtRecord(
            "running sum", record=100, attempt=2, subtask=parallelism - 1, after_checkpoints=1
        ),
        FailDuringAlignment("running sum", attempt=3, subtask=0),
    )
    with caplog.at_level(logging.INFO, logger="lockgate.recovery.failover"):
        out = sums.execute_and_collect("kafka exactly once", executor=executor)
    restores = [r for r in caplog.records if " restores " in r.getMessage()]
    assert len(restores) == 4, "each later attempt restored a checkpoint"
    got = sorted(out, key=lambda r: r["v"])
    assert len(got) == RECORDS, f"{len(got)} records, expected {RECORDS}"
    assert got == expected_running_sums(RECORDS, CHUNK)


def read_published(folder: Any) -> list[int]:
    """The values an exactly-once FileSink published (``part-*`` files) in ``folder``."""
    return [
        json.loads(line)["v"]
        for p in sorted(folder.glob("part-*"))
        for line in p.read_text().splitlines()
        if line
    ]


@pytest.mark.hang_guard(180)
def test_a_savepoint_at_2_subtasks_restores_at_3_without_loss_or_repeat_M_R3(
    kafka_topic, probe, tmp_path
) -> None:
    """M-R3, M-T4: the splits of both old subtasks reach every new one; each keeps the
    partitions it owns at 3 subtasks, so every partition is read by exactly one, from
    its savepointed offset: the two runs' published output holds each record once."""
    topic = kafka_topic(6)
    n = 6_000
    produce(topic, [{"v": v} for v in range(n // 2)], partitioner=lambda i, r: r["v"] % 6)

    def run(parallelism: int, folder: Any, restore: str | None) -> Any:
        env = lg.StreamEnvironment(parallelism=parallelism, executor=lg.LocalExecutor())
        env.enable_checkpointing(timedelta(milliseconds=100))
        stream = env.from_source(KafkaSource(BOOTSTRAP, topic), name="kafka").uid("kafka")
        stream = stream.map(lambda r: probe.add(r["v"]) or r, name="seen").uid("seen")
        stream.sink_to(lg.connectors.FileSink(str(folder), format="jsonl")).uid("sink")
        return env.execute_async(f"kafka p{parallelism}", restore_from=restore)

    first = run(2, tmp_path / "out-1", None)
    try:
        wait_until(lambda: len(probe) >= n // 2, "the first half read at 2 subtasks", 60)
        savepoint = first.stop_with_savepoint(str(tmp_path / "sp"), timeout=60)
    except BaseException:
        first.cancel()
        raise
    assert first.wait(60).status is lg.JobStatus.FINISHED
    before = read_published(tmp_path / "out-1")
    assert sorted(before) == list(range(n // 2))
    # the second half: every partition's offset in the savepoint is mid-partition now
    produce(topic, [{"v": v} for v in range(n // 2, n)], partitioner=lambda i, r: r["v"] % 6)

    second = run(3, tmp_path / "out-2", savepoint)
    try:
        wait_until(
            lambda: len(read_published(tmp_path / "out-2")) >= n // 2,
            "the second half published at 3 subtasks",
            60,
        )
    finally:
        second.cancel()
        second.wait(60)
    after = read_published(tmp_path / "out-2")
    assert sorted(before + after) == list(range(n)), "each record exactly once"


#: event times of the watermark tests start here (a timestamp of 0 means "now" to the
#: producer); a multiple of the 1 s windows
T0 = 1_700_000_000_000


@pytest.mark.hang_guard(200)  # the first Spark test of a run starts the session
@pytest.mark.parametrize(
    "executor",
    [pytest.param("local"), pytest.param("spark", marks=pytest.mark.spark)],
    indirect=True,
)
def test_a_lagging_partition_holds_the_watermark_back_so_nothing_is_late_M_W1(
    executor, kafka_topic
) -> None:
    """M-W1: each partition has its own watermark generator and the source's watermark
    is their minimum. Partition 0 holds 200 records at T0 + 10 s, read at once; partition 1
    holds 20,000 records from T0 to T0 + 10 s, read over many polls. With one generator for
    both, the watermark would jump to 10 s and partition 1's windows would lose their
    late records; per partition, every window counts all its records."""
    topic = kafka_topic(2)
    produce(
        topic,
        [{"k": 0}] * 200,
        partition=0,
        timestamps=[T0 + 10_000 + i for i in range(200)],
    )
    produce(
        topic, [{"k": 0}] * 20_000, partition=1, timestamps=[T0 + i // 2 for i in range(20_000)]
    )
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    strategy = (
        lg.WatermarkStrategy.for_bounded_out_of_orderness(0)
        .with_timestamp_assigner("ts")
        .with_periodic_emit_interval(1)
    )
    source = KafkaSource(BOOTSTRAP, topic, bounded=True, timestamp_field="ts")
    counts = (
        env.from_source(
            RateLimitedSource(source, 40_000), name="kafka", watermark_strategy=strategy
        )
        .key_by("k")
        .window(lg.TumblingEventTimeWindows.of(1000))
        .aggregate(lg.agg.count(), name="count")
        .execute_and_collect("kafka watermarks")
    )
    got = sorted((r["window_start"] - T0, r["count"]) for r in counts)
    assert got == [(s, 2000) for s in range(0, 10_000, 1000)] + [(10_000, 200)]


@pytest.mark.hang_guard(200)  # the first Spark test of a run starts the session
@pytest.mark.parametrize(
    "executor",
    [pytest.param("local"), pytest.param("spark", marks=pytest.mark.spark)],
    indirect=True,
)
def test_an_idle_partition_stops_holding_the_watermark_back_with_idleness_M_W2(
    executor, kafka_topic, tmp_path
) -> None:
    """M-W2: partition 1 has one record at T0, then nothing; partition 0 keeps
    receiving records 10 ms of event time apart. Partition 1's generator marks it idle
    after 100 ms, so the watermark follows partition 0 and its windows fire while the
    job runs (partition 1 alone would hold event time at 0).

    Partition 0 is fed only once the job has read partition 1's record: a split that
    went idle before its first record was fetched (100 ms is short beside a loaded
    machine's start) lets the others' event time pass it, and then its record is late,
    as with Flink's idleness; the feed must not race the job's start."""
    topic = kafka_topic(2)
    produce(topic, [{"k": 0}], partition=1, timestamps=[T0])
    probe = FileProbe(tmp_path / "windows")  # user code may run in a Spark worker
    read = FileProbe(tmp_path / "read")
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    strategy = (
        lg.WatermarkStrategy.for_bounded_out_of_orderness(0)
        .with_timestamp_assigner("ts")
        .with_idleness(timedelta(milliseconds=100))
    )
    source = KafkaSource(BOOTSTRAP, topic, timestamp_field="ts")
    (
        env.from_source(source, name="kafka", watermark_strategy=strategy)
        .map(lambda r: read.add(r["ts"] - T0) or r)
        .key_by("k")
        .window(lg.TumblingEventTimeWindows.of(1000))
        .aggregate(lg.agg.count(), name="count")
        .map(lambda r: probe.add((r["window_start"] - T0, r["count"])) or r)
        .sink_to(lg.connectors.DiscardingSink())
    )
    stop = threading.Event()

    def feed() -> None:  # partition 0 stays active: a record every 5 ms, 10 ms apart
        producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 0})
        i = 0
        while not stop.is_set():
            producer.produce(topic, b'{"k": 0}', partition=0, timestamp=T0 + i * 10)
            producer.poll(0)
            i += 1
            stop.wait(0.005)  # pacing the feed, not waiting for the job
        producer.flush(10)

    feeder = threading.Thread(target=feed, name="test feeder", daemon=True)
    client = env.execute_async("kafka idleness")
    try:
        wait_until(lambda: len(read) >= 1, "the job read partition 1's record", 60)
        feeder.start()
        wait_until(lambda: len(probe) >= 3, "the windows up to 3 s fired", 30)
    finally:
        stop.set()
        if feeder.ident is not None:
            feeder.join(30)
        client.cancel()
        client.wait(60)
    assert probe.items[:3] == [(0, 101), (1000, 100), (2000, 100)]


@pytest.mark.hang_guard(200)  # the first Spark test of a run starts the session
@pytest.mark.parametrize(
    "executor",
    [pytest.param("local"), pytest.param("spark", marks=pytest.mark.spark)],
    indirect=True,
)
def test_a_job_sends_malformed_records_to_the_dead_letter_output(executor, kafka_topic) -> None:
    topic = kafka_topic(2)
    produce(topic, [b'{"v": 1}', b"nope", b'{"v": 3}'], partition=1, raw=True)
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    records = env.from_source(
        KafkaSource(BOOTSTRAP, topic, bounded=True, on_error="dead_letter"), name="kafka"
    )
    dead = records.get_side_output(lg.DEAD_LETTER).map(lambda d: ("dead", d))
    out = records.map(lambda r: ("good", r)).union(dead).execute_and_collect("kafka dead")
    assert sorted(r["v"] for tag, r in out if tag == "good") == [1, 3]
    letters = [d for tag, d in out if tag == "dead"]
    assert [(d["topic"], d["partition"], d["offset"], d["raw"]) for d in letters] == [
        (topic, 1, 1, "nope")
    ]
    assert letters[0]["location"] == f"{topic}[1]@1"


@pytest.mark.hang_guard(200)  # the first Spark test of a run starts the session
@pytest.mark.parametrize(
    "executor",
    [pytest.param("local"), pytest.param("spark", marks=pytest.mark.spark)],
    indirect=True,
)
def test_a_job_with_a_malformed_record_fails_naming_topic_partition_and_offset(
    executor, kafka_topic
) -> None:
    topic = kafka_topic(1)
    produce(topic, [b"1", b"{"], raw=True)
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.from_source(KafkaSource(BOOTSTRAP, topic, bounded=True), name="kafka").sink_to(
        lg.connectors.DiscardingSink()
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("kafka malformed")
    assert isinstance(err.value.__cause__, MalformedRecordError)
    assert err.value.__cause__.location == f"{topic}[0]@1"
    assert err.value.reason is lg.FailureReason.MALFORMED_INPUT


def test_a_job_on_a_missing_topic_fails_before_it_runs_naming_it() -> None:
    missing = f"lgtest-missing-{uuid.uuid4().hex[:8]}"
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.from_source(KafkaSource(BOOTSTRAP, missing), name="kafka").sink_to(
        lg.connectors.DiscardingSink()
    )
    with pytest.raises(ConfigurationError) as err:
        env.execute("kafka missing topic")
    assert repr(missing) in str(err.value) and BOOTSTRAP in str(err.value)


class Seen(lg.MapFunction):
    """Reports ``(attempt, v)`` of every record to ``probe``."""

    def __init__(self, probe: Any) -> None:
        self.probe = probe

    def open(self, ctx):
        self.attempt = ctx.attempt_number

    def map(self, value):
        self.probe.add((self.attempt, value["v"]))
        return value


def test_a_restart_before_any_checkpoint_replays_the_same_records_from_latest(
    kafka_topic, probe
) -> None:
    """``start="latest"`` is resolved once, when the job is submitted: attempt 0 fails
    without a checkpoint, and attempt 1 starts again at that offset (not at the end
    offsets of its own start), so it reads the same 100 records."""
    topic = kafka_topic(2)
    produce(topic, [{"v": -1}] * 10, partitioner=by_partition(10, 2))  # before: not read
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=1, delay=0))
    (
        env.from_source(KafkaSource(BOOTSTRAP, topic, start="latest"), name="kafka")
        .map(Seen(probe), name="seen")
        .sink_to(lg.connectors.DiscardingSink())
    )
    inject_faults(env, FailAtRecord("seen", record=30, attempt=0, subtask=None))
    client = env.execute_async("kafka latest")  # the start offsets are fixed now
    try:
        produce(topic, [{"v": v} for v in range(100)], partitioner=by_partition(100, 2))
        wait_until(
            lambda: sorted(v for a, v in probe.items if a == 1) == list(range(100)),
            "attempt 1 read the 100 records",
            20,
        )
    finally:
        client.cancel()
        client.wait(60)
    assert all(v >= 0 for _, v in probe.items), "the records before the start: never read"


@pytest.mark.hang_guard(200)  # the first Spark test of a run starts the session
@pytest.mark.parametrize(
    "executor",
    [pytest.param("local"), pytest.param("spark", marks=pytest.mark.spark)],
    indirect=True,
)
def test_a_job_discovers_partitions_added_while_it_runs_and_commits_offsets_to_the_group(
    executor, kafka_topic, tmp_path
) -> None:
    """New partitions are found by the subtask that owns them and read from their
    earliest offset; completed checkpoints commit every partition's offset to group_id."""
    topic = kafka_topic(1)
    group = f"lgtest-{uuid.uuid4().hex[:8]}"
    produce(topic, [{"v": 0}])
    probe = FileProbe(tmp_path / "seen")  # user code may run in a Spark worker
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(timedelta(milliseconds=100))
    source = KafkaSource(BOOTSTRAP, topic, group_id=group, partition_discovery_interval=0.1)
    env.from_source(source, name="kafka").map(lambda r: probe.add(r["v"]) or r).sink_to(
        lg.connectors.DiscardingSink()
    )
    client = env.execute_async("kafka discovery")
    try:
        wait_until(lambda: probe.items == [0], "the first record was read", 30)
        add_partitions(topic, 4)
        produce(topic, [{"v": v} for v in range(1, 41)], partitioner=lambda i, r: i % 4)
        wait_until(lambda: len(probe) >= 41, "the records of the new partitions", 30)
        wait_until(
            lambda: committed_offsets(group, topic, 4) == {0: 11, 1: 10, 2: 10, 3: 10},
            "a completed checkpoint committed every partition's offset",
            30,
        )
    finally:
        client.cancel()
        client.wait(60)
    assert sorted(probe.items) == list(range(41))


# --------------------------------------------------------------------------------- decoding


class BatchOutput(RecordingOutput):
    """Records the batches as emitted (Arrow or rows), with their split."""

    def __init__(self) -> None:
        super().__init__()
        self.emitted: list[tuple[Any, Any]] = []

    def emit_from_split(self, split_id: Any, batch: Any) -> None:
        self.emitted.append((split_id, batch))

    def rows(self) -> list[dict[str, Any]]:
        return [r for _, b in self.emitted for r in b.to_pylist()]


SCHEMA = pa.schema([("key", pa.int64()), ("ts", pa.string()), ("n", pa.float64())])


def read_schema(topic: str, **kwargs: Any) -> BatchOutput:
    out = BatchOutput()
    reader = KafkaSource(BOOTSTRAP, topic, bounded=True, schema=SCHEMA, **kwargs).create_reader(
        ctx()
    )
    try:
        reader.add_splits(KafkaSource(BOOTSTRAP, topic, bounded=True).create_splits(1))
        read_to_end(reader, out)
    finally:
        reader.close()
    return out


def test_json_values_decoded_at_once_equal_json_loads_of_each(kafka_topic, open_reader) -> None:
    """The fast path (the C scanner over every value of a poll) gives exactly what
    ``json.loads`` gives each value: big ints stay ints, strings stay strings, and a
    value with surrounding whitespace or a tombstone (decoded one by one) still works."""
    topic = kafka_topic(1)
    raw = [
        b'{"a": 12345678901234567890, "t": "2024-01-01T00:00:00Z", "f": 1.0, "n": null}',
        b'"text"',
        b"[1, 2.5, true]",
        b'{"nan": NaN, "nested": {"x": [{}]}}',
    ]
    produce(topic, raw * 50, raw=True)
    out = RecordingOutput()
    read_to_end(open_reader(KafkaSource(BOOTSTRAP, topic, bounded=True)), out)
    assert repr(out.records) == repr([json.loads(v) for v in raw * 50])
    assert type(out.records[0]["a"]) is int and out.records[0]["t"] == "2024-01-01T00:00:00Z"
    produce(topic, [b' {"a": 1}\n', None, b"7"], raw=True)
    out = RecordingOutput()
    read_to_end(open_reader(KafkaSource(BOOTSTRAP, topic, bounded=True)), out)
    assert out.records[-3:] == [{"a": 1}, None, 7]


def test_values_decoded_at_once_get_key_and_timestamp_fields(kafka_topic, open_reader) -> None:
    """The fast path (no tombstone, every value well-formed) adds key and timestamp
    fields as record by record does: into objects, others wrapped as ``{"value": ...}``."""
    topic = kafka_topic(1)
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    producer.produce(topic, b'{"a": 1, "k": "replaced"}', key=b"k1", timestamp=1234)
    producer.produce(topic, b"[1, 2]", timestamp=1235)
    producer.produce(topic, b'"s"', key=b"\xffk", timestamp=1236)
    producer.flush(30)

    def read(**kwargs: Any) -> list[Any]:
        out = RecordingOutput()
        source = KafkaSource(BOOTSTRAP, topic, bounded=True, key_field="k", **kwargs)
        read_to_end(open_reader(source), out)
        return out.records

    assert read(timestamp_field="ts") == [
        {"a": 1, "k": "k1", "ts": 1234},
        {"value": [1, 2], "k": None, "ts": 1235},
        {"value": "s", "k": "\ufffdk", "ts": 1236},
    ]
    assert read(format="bytes") == [
        {"value": b'{"a": 1, "k": "replaced"}', "k": "k1"},
        {"value": b"[1, 2]", "k": None},
        {"value": b'"s"', "k": "\ufffdk"},
    ]


def test_a_schema_gives_one_arrow_batch_per_partition_and_poll_with_its_types(
    kafka_topic,
) -> None:
    """Missing fields are null, extra fields ignored, a timestamp string stays a string
    and an int64 stays int64; a tombstone is a row of nulls; partitions stay apart."""
    topic = kafka_topic(2)
    produce(
        topic,
        [
            b'{"key": 1, "ts": "2024-01-01T00:00:00Z", "extra": [1, {"x": 2}]}',
            b'{"key": 2, "n": 2.5}',
            b'{"ts": "b", "key": 3, "n": 4}',
            None,
        ],
        partition=1,
        raw=True,
    )
    produce(topic, [{"key": 10 + i} for i in range(100)], partition=0)
    out = read_schema(topic)
    assert out.emitted, "nothing emitted"
    for split_id, batch in out.emitted:
        assert isinstance(batch, pa.RecordBatch), f"{split_id}: {type(batch).__name__}"
        assert batch.schema == SCHEMA
    p1 = [r for s, b in out.emitted if s == f"{topic}[1]" for r in b.to_pylist()]
    assert p1 == [
        {"key": 1, "ts": "2024-01-01T00:00:00Z", "n": None},
        {"key": 2, "ts": None, "n": 2.5},
        {"key": 3, "ts": "b", "n": 4.0},
        {"key": None, "ts": None, "n": None},
    ]
    p0 = [r["key"] for s, b in out.emitted if s == f"{topic}[0]" for r in b.to_pylist()]
    assert p0 == list(range(10, 110)), "partition 0 in offset order, its own split"


def test_a_schema_decodes_pretty_printed_multi_line_values(kafka_topic) -> None:
    topic = kafka_topic(1)
    pretty = [json.dumps({"key": i, "ts": f"t{i}", "other": {"a": i}}, indent=2) for i in range(5)]
    produce(topic, [p.encode() for p in pretty] + [b'{"key": 5}'], raw=True)
    out = read_schema(topic)
    assert [r["key"] for r in out.rows()] == [0, 1, 2, 3, 4, 5]
    assert [r["ts"] for r in out.rows()] == ["t0", "t1", "t2", "t3", "t4", None]


def test_with_a_schema_a_wrong_type_record_fails_naming_topic_partition_and_offset(
    kafka_topic,
) -> None:
    topic = kafka_topic(2)
    produce(topic, [b'{"key": 1}', b'{"key": "abc"}', b'{"key": 3}'], partition=1, raw=True)
    with pytest.raises(MalformedRecordError) as err:
        read_schema(topic)
    assert err.value.location == f"{topic}[1]@1"
    assert "invalid JSON for the schema" in str(err.value)
    assert "on_error='dead_letter'" in str(err.value)


def test_with_a_schema_bad_records_go_to_the_dead_letter_and_the_good_ones_arrive_in_order(
    kafka_topic,
) -> None:
    """Each kind of bad record is found among good ones (decoded by halves) and
    reported with its position, in offset order; the good ones still go out as Arrow."""
    topic = kafka_topic(1)
    good = [b'{"key": %d}' % i for i in range(40)]
    bad = {
        3: (b'{"key": "abc"}', "changed from number to string"),
        7: (b'{"key": 1.5}', "int64"),
        8: (b"[1, 2]", "not a JSON object"),
        9: (b'{"ts": "\xff"}', "not valid UTF-8"),
        20: (b'{"key": 1} {"key": 2}', "more than one JSON value"),
        30: (b'{"ts": "' + b"x" * 100 + b'"}', "over max_record_bytes=64"),
        31: (b'{"key": 1', "invalid JSON for the schema"),
        39: (b'{"ts": 5}', "changed from string to number"),
    }
    values = [bad[i][0] if i in bad else v for i, v in enumerate(good)]
    produce(topic, values, raw=True)
    out = read_schema(topic, on_error="dead_letter", max_record_bytes=64)
    assert [d["offset"] for d in out.dead] == sorted(bad)
    for d in out.dead:
        assert bad[d["offset"]][1] in d["error"], d
        assert d["location"] == f"{topic}[0]@{d['offset']}" and d["topic"] == topic
    assert all(isinstance(b, pa.RecordBatch) and b.schema == SCHEMA for _, b in out.emitted)
    assert [r["key"] for r in out.rows()] == [i for i in range(40) if i not in bad]


def test_a_schema_with_key_and_timestamp_fields_adds_them_as_columns(kafka_topic) -> None:
    topic = kafka_topic(1)
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    producer.produce(topic, b'{"key": 1, "ts": "a"}', key=b"k1", timestamp=1234)
    producer.produce(topic, b'{"key": 2}', timestamp=1235)
    producer.produce(topic, b'{"key": 3}', key=b"\xffk", timestamp=1236)
    producer.flush(30)
    out = read_schema(topic, key_field="kafka_key", timestamp_field="kafka_ts")
    batch = out.emitted[0][1]
    assert batch.schema == SCHEMA.append(pa.field("kafka_key", pa.string())).append(
        pa.field("kafka_ts", pa.int64())
    )
    assert out.rows() == [
        {"key": 1, "ts": "a", "n": None, "kafka_key": "k1", "kafka_ts": 1234},
        {"key": 2, "ts": None, "n": None, "kafka_key": None, "kafka_ts": 1235},
        {"key": 3, "ts": None, "n": None, "kafka_key": "\ufffdk", "kafka_ts": 1236},
    ]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"schema": SCHEMA, "format": "bytes"}, "format='json'"),
        ({"schema": {"key": "int64"}}, "pyarrow.Schema"),
        ({"schema": pa.schema([])}, "at least one field"),
        ({"schema": SCHEMA, "key_field": "key"}, "also a schema field"),
        ({"schema": SCHEMA, "timestamp_field": "ts"}, "also a schema field"),
        ({"schema": pa.schema([("m", pa.map_(pa.string(), pa.int64()))])}, "JSON reader"),
    ],
)
def test_bad_schema_arguments_raise_a_configuration_error(kwargs, named) -> None:
    with pytest.raises(ConfigurationError) as err:
        KafkaSource(BOOTSTRAP, "t", **kwargs)
    assert named in str(err.value)


def test_a_job_counts_event_time_windows_over_schema_decoded_arrow_batches_M_W1(
    kafka_topic,
) -> None:
    """The Arrow batches of a schema feed the timestamp assigner and windows directly."""
    topic = kafka_topic(2)
    produce(
        topic,
        [{"key": i % 3, "ts": 1000 * (i // 10)} for i in range(60)],
        partitioner=by_partition(60, 2),
    )
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    schema = pa.schema([("key", pa.int64()), ("ts", pa.int64())])
    strategy = lg.WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_assigner("ts")
    out = (
        env.from_source(KafkaSource(BOOTSTRAP, topic, bounded=True, schema=schema), name="kafka")
        .assign_timestamps_and_watermarks(strategy)
        .key_by("key")
        .window(lg.TumblingEventTimeWindows.of(1000))
        .aggregate(lg.agg.count(name="count"))
        .execute_and_collect("kafka schema windows")
    )
    counts = sorted((r["key"], r["window_start"], r["count"]) for r in out)
    expected = collections.Counter((i % 3, 1000 * (i // 10)) for i in range(60))
    assert counts == sorted((k, w, c) for (k, w), c in expected.items())


def test_the_reader_tells_its_lag_behind_the_partitions_end(kafka_topic, open_reader, monkeypatch):
    """The source lag metric (issue 21): records between the reader's offsets and the
    partitions' high watermarks, from the client's cached watermarks; 0 once caught up."""

    monkeypatch.setattr(source_limits, "LAG_INTERVAL_S", 0.0)  # refreshed on every poll
    topic = kafka_topic(1)
    total = 30_000
    produce(topic, [{"v": i} for i in range(total)])
    reader = open_reader(KafkaSource(BOOTSTRAP, topic))
    assert reader.pending_records is None  # nothing known before the first fetch
    out = RecordingOutput()
    seen: list[tuple[int, int]] = []

    def caught_up() -> bool:
        if reader.pending_records is not None:
            seen.append((len(out.records), reader.pending_records))
        return len(out.records) == total and reader.pending_records == 0

    read_until(reader, out, caught_up, "every record read and the lag 0")
    behind = [(n, lag) for n, lag in seen if lag > 0]
    assert behind, f"the lag was never above 0 while reading: {seen[:5]}"
    # the lag is the records not read yet (exactly, for a topic nobody writes to now)
    assert all(lag == total - n for n, lag in behind), behind[:5]


@pytest.mark.parametrize("deadline_s", [10.0, 0.0])
def test_a_split_at_earliest_of_a_partition_not_led_yet_is_read_once_it_is(
    kafka_topic, monkeypatch, deadline_s
) -> None:
    """A discovered partition may have no leader for a moment, so its first offset is
    unknown: the reader keeps asking (or, past its deadline, reads through librdkafka)
    and never fails the job for it."""
    monkeypatch.setattr(source_limits, "REQUEST_TIMEOUT_S", deadline_s)
    topic = kafka_topic(1)
    source = KafkaSource(BOOTSTRAP, topic)
    reader: Any = source.create_reader(ctx())
    try:
        reader.add_splits([KafkaSplit(topic, 1, EARLIEST)])  # partition 1: not there yet
        out = RecordingOutput()
        assert reader.poll(out) is InputStatus.NOTHING_AVAILABLE
        add_partitions(topic, 2)
        produce(topic, [{"v": i} for i in range(50)], partition=1)
        read_until(reader, out, lambda: len(out.records) >= 50, "partition 1's records")
        assert values(out.records) == list(range(50))
        assert (not reader.fetches_directly) == (deadline_s == 0.0)
    finally:
        reader.close()

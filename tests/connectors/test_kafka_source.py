"""KafkaSource against the real broker on 127.0.0.1:9092 (never mocked): partitions as
splits whose offsets a restore rewinds to (M-X1, M-R1), start offsets resolved once,
bounded reading to the end offsets of the job's start, aborted transactions skipped,
per-partition watermarks (M-W1, M-W2), malformed records failing with
``topic[partition]@offset`` or going to ``lg.DEAD_LETTER``, partition discovery,
rescaling through a savepoint, and the argument checks."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from conftest import FileProbe, on_executors, wait_until
from kafka_fixtures import BOOTSTRAP, add_partitions, admin, create_topic, produce
from recording_output import RecordingOutput

import lockgate as lg
from lockgate.connectors import RateLimitedSource
from lockgate.connectors.base import InputStatus, SourceReader
from lockgate.connectors import kafka_source
from lockgate.connectors.kafka_source import EARLIEST, KafkaSource, KafkaSplit, owner_of
from lockgate.errors import ConfigurationError, MalformedRecordError
from lockgate.runtime.context import RuntimeContext
from lockgate.testing import inject_faults, seeded_faults
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
    assert reader.snapshot_positions() == []


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
    source = KafkaSource(
        BOOTSTRAP, topic, format=fmt, on_error="dead_letter", max_record_bytes=64
    )
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
    monkeypatch.setattr(kafka_source, "REQUEST_TIMEOUT_S", 1.0)  # not 10 s of waiting
    with pytest.raises(ConfigurationError) as err:
        KafkaSource("127.0.0.1:1", "t").check_before_run()
    assert "cannot reach Kafka at '127.0.0.1:1'" in str(err.value) and "'t'" in str(err.value)

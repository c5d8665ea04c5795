"""KafkaSource's direct fetching (``fetch="auto"``: its own Fetch v4 requests, record
batches decoded with numpy) against the real broker on 127.0.0.1:9092, checked record
for record against librdkafka's consumer (``fetch="librdkafka"``): keys, tombstones,
headers, large values, gzip, log append time, read_committed over interleaved
transactions (M-X1), and the hand-over to librdkafka (no record lost or read twice)
when direct fetching cannot go on."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from recording_output import RecordingOutput
from test_kafka_source import BatchOutput, read_to_end, read_until

from kafka_fixtures import BOOTSTRAP, produce
from lockgate.connectors.base import InputStatus, assign_splits
from lockgate.connectors.kafka import reader as kafka_reader
from lockgate.connectors.kafka import source as kafka_source
from lockgate.connectors.kafka.source import KafkaSource
from lockgate.connectors.kafka.source_limits import MAX_BATCH
from lockgate.core.batch import RowBatch
from lockgate.runtime.context import RuntimeContext


def ctx() -> RuntimeContext:
    return RuntimeContext(
        task_name="t", operator_name="kafka", operator_uid="kafka", subtask_index=0,
        parallelism=1, max_parallelism=128,
    )  # fmt: skip


class Batches(BatchOutput):
    """Records every emitted batch with its split (``emitted``), and its rows too."""

    def emit_from_split(self, split_id: Any, batch: Any) -> None:
        super().emit_from_split(split_id, batch)
        if isinstance(batch, pa.RecordBatch):
            batch = RowBatch(batch.to_pylist())
        RecordingOutput.emit_from_split(self, split_id, batch)


def read(topic: str, fetch: str, **kwargs: Any) -> tuple[Batches, Any]:
    """Every record of ``topic`` (bounded) through a reader with ``fetch``; the output
    and whether the reader still fetched directly at its end."""
    source = KafkaSource(BOOTSTRAP, topic, bounded=True, fetch=fetch, **kwargs)
    reader: Any = source.create_reader(ctx())
    try:
        reader.add_splits(assign_splits(source.create_splits(1), 0, 1))
        out = Batches()
        read_to_end(reader, out)
        return out, reader.fetches_directly
    finally:
        reader.close()


def rows(out: Batches) -> list[Any]:
    return [
        r for _, b in out.emitted for r in (b.to_pylist() if isinstance(b, pa.RecordBatch) else b)
    ]


def write(topic: str, messages: list[dict[str, Any]], **config: Any) -> None:
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 20, **config})
    for m in messages:
        producer.produce(topic, **m)
    assert producer.flush(30) == 0


def mixed(n: int) -> list[dict[str, Any]]:
    """Keys absent, empty, long and not UTF-8; tombstones; values up to 20 KB (lengths
    of one to three varint bytes); headers on some; explicit timestamps."""
    out = []
    for i in range(n):
        m: dict[str, Any] = {
            "value": None if i % 97 == 5 else json.dumps({"i": i, "pad": "x" * (i % 7 * 40)}),
            "key": [None, b"", b"k%d" % i, b"\xff" * 300][i % 4],
            "timestamp": 1_600_000_000_000 + i,
        }
        if i % 3 == 0:
            m["headers"] = [("h", b"v" * (i % 50))]
        if i % 500 == 7:
            m["value"] = json.dumps({"i": i, "big": "y" * 20_000})
        out.append(m)
    return out


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_direct_fetch_reads_what_librdkafka_reads_record_for_record(
    kafka_topic, compression
) -> None:
    topic = kafka_topic(2)
    write(topic, mixed(6_000), **{"compression.type": compression})
    fields = {"key_field": "key", "timestamp_field": "ts"}
    for fmt in ("bytes", "json"):
        direct, still_direct = read(topic, "auto", format=fmt, **fields)
        assert still_direct, "the direct fetcher read every batch itself"
        rdkafka, _ = read(topic, "librdkafka", format=fmt, **fields)
        assert len(direct.records) == 6_000
        for split in {s for s, _ in rdkafka.emitted}:
            assert [r for s, b in direct.emitted if s == split for r in b.rows] == [
                r for s, b in rdkafka.emitted if s == split for r in b.rows
            ], f"{fmt}: partition {split} differs"


def test_with_a_schema_direct_fetch_gives_the_arrow_columns_librdkafka_gives(kafka_topic) -> None:
    topic = kafka_topic(1)
    write(
        topic,
        [
            {"value": json.dumps({"k": i % 10, "s": f"é{i}", "f": i / 4}), "key": b"%d" % i}
            for i in range(12_000)
        ],
    )
    schema = pa.schema([("k", pa.int64()), ("s", pa.string()), ("f", pa.float64())])
    fields = {"schema": schema, "key_field": "key", "timestamp_field": "ts"}
    direct, still_direct = read(topic, "auto", **fields)
    rdkafka, _ = read(topic, "librdkafka", **fields)
    assert still_direct and len(rows(direct)) == 12_000
    assert rows(direct) == rows(rdkafka)
    assert all(isinstance(b, pa.RecordBatch) for _, b in direct.emitted)


def test_log_append_time_stamps_every_record_with_the_broker_time(kafka_topic) -> None:
    topic = kafka_topic(1, {"message.timestamp.type": "LogAppendTime"})
    write(topic, [{"value": b"%d" % i, "timestamp": 5} for i in range(300)])
    direct, _ = read(topic, "auto", format="text", timestamp_field="ts")
    rdkafka, _ = read(topic, "librdkafka", format="text", timestamp_field="ts")
    assert direct.records == rdkafka.records
    assert all(r["ts"] > 1_000_000_000_000 for r in direct.records), "the broker's time, not 5"


def test_read_committed_skips_interleaved_aborted_transactions_M_X1(kafka_topic) -> None:
    """Two transactional producers write to one partition in turns; one aborts. Read
    committed, the direct fetcher gives exactly the committed and plain records, in
    offset order, as librdkafka does; read uncommitted, everything."""
    topic = kafka_topic(1)
    a = Producer({"bootstrap.servers": BOOTSTRAP, "transactional.id": f"lgt-{uuid.uuid4()}"})
    b = Producer({"bootstrap.servers": BOOTSTRAP, "transactional.id": f"lgt-{uuid.uuid4()}"})
    a.init_transactions(30)
    b.init_transactions(30)
    produce(topic, [{"v": "plain-0"}])
    a.begin_transaction()
    b.begin_transaction()
    for i in range(3):
        a.produce(topic, json.dumps({"v": f"a-{i}"}).encode(), partition=0)
        a.flush(30)
        b.produce(topic, json.dumps({"v": f"b-{i}"}).encode(), partition=0)
        b.flush(30)
    b.abort_transaction(30)
    a.commit_transaction(30)
    produce(topic, [{"v": "plain-1"}])
    direct, still_direct = read(topic, "auto")
    rdkafka, _ = read(topic, "librdkafka")
    want = ["plain-0", "a-0", "a-1", "a-2", "plain-1"]
    assert [r["v"] for r in direct.records] == want == [r["v"] for r in rdkafka.records]
    assert still_direct
    everything, _ = read(topic, "auto", isolation="read_uncommitted")
    assert sorted(r["v"] for r in everything.records) == sorted(want + ["b-0", "b-1", "b-2"])


def test_batches_are_cut_at_max_batch_and_each_moves_the_split_past_it(kafka_topic) -> None:
    """A fetch of many records goes out in batches of at most MAX_BATCH, one per poll,
    and a snapshot after any poll holds the offset after the last record emitted, so a
    checkpoint between two parts of a fetch replays nothing and loses nothing (M-X1)."""
    topic = kafka_topic(1)
    n = 3 * MAX_BATCH + 123
    produce(topic, [{"v": i} for i in range(n)])
    source = KafkaSource(BOOTSTRAP, topic, bounded=True)
    reader: Any = source.create_reader(ctx())
    try:
        reader.add_splits(source.create_splits(1))
        out = Batches()
        deadline = time.monotonic() + 30
        while len(out.records) < n:
            assert time.monotonic() < deadline, f"only {len(out.records)} records in 30 s"
            status = reader.poll(out)
            positions = reader.snapshot_positions()
            if positions:
                assert positions[0].offset == len(out.records)
            if status is InputStatus.NOTHING_AVAILABLE:
                time.sleep((reader.wait_hint_ms() or 10) / 1000)  # the task's own idle wait
        assert max(len(b) for _, b in out.emitted) <= MAX_BATCH
        assert [r["v"] for r in out.records] == list(range(n))
    finally:
        reader.close()


def test_a_broker_the_direct_fetcher_cannot_use_hands_over_to_librdkafka_without_loss(
    kafka_topic, monkeypatch, caplog
) -> None:
    """Direct fetching stops (here: the leader it is given does not answer) after some
    records; librdkafka continues from the split offsets: every record once, in order."""
    topic = kafka_topic(1)
    produce(topic, [{"v": i} for i in range(2_000)])
    source = KafkaSource(BOOTSTRAP, topic)
    reader: Any = source.create_reader(ctx())
    try:
        reader.add_splits(source.create_splits(1))
        out = Batches()
        read_until(reader, out, lambda: len(out.records) == 2_000, "the first records")
        # the next request goes to a port nothing listens on
        reader.fetcher.client._leaders_of = lambda tps: {tp: ("127.0.0.1", 1) for tp in tps}
        reader.fetcher.client._stale = True
        reader.fetcher.client.close()
        produce(topic, [{"v": i} for i in range(2_000, 4_000)])
        with caplog.at_level(logging.WARNING, logger=kafka_reader.__name__):
            read_until(reader, out, lambda: len(out.records) >= 4_000, "every record")
        assert not reader.fetches_directly
        assert "reading through librdkafka from the same offsets" in caplog.text
        assert [r["v"] for r in out.records] == list(range(4_000))
    finally:
        reader.close()


def test_a_compression_codec_it_does_not_decode_hands_over_without_loss(kafka_topic) -> None:
    topic = kafka_topic(1)
    write(topic, [{"value": b'{"v": %d}' % i} for i in range(1_000)])
    write(topic, [{"value": b'{"v": %d}' % i} for i in range(1_000, 2_000)], **{
        "compression.type": "lz4"
    })  # fmt: skip
    out, still_direct = read(topic, "auto")
    assert not still_direct
    assert [r["v"] for r in out.records] == list(range(2_000))


def test_fetch_must_name_a_mode() -> None:
    with pytest.raises(kafka_source.ConfigurationError, match="fetch must be 'auto'"):
        KafkaSource(BOOTSTRAP, "t", fetch="fast")


@pytest.mark.parametrize("fetch", ["auto", "librdkafka"])
def test_a_dead_letter_goes_out_with_its_partitions_records_never_before_them_M_X1(
    kafka_topic, fetch
) -> None:
    """A dead letter is emitted in the same poll as the move of its split past the bad
    record: a checkpoint taken after any poll never holds a dead letter together with an
    offset before its record (a restore would send it twice)."""
    topic = kafka_topic(2)
    write(topic, [{"value": b'{"v": %d}' % i, "partition": 0} for i in range(100)])
    write(
        topic,
        [{"value": b"not json" if i == 3 else b'{"v": %d}' % i, "partition": 1} for i in range(10)],
    )
    source = KafkaSource(BOOTSTRAP, topic, bounded=True, fetch=fetch, on_error="dead_letter")
    reader: Any = source.create_reader(ctx())
    try:
        reader.add_splits(assign_splits(source.create_splits(1), 0, 1))
        out = Batches()
        deadline = time.monotonic() + 30
        while not out.finished or len(out.finished) < 2:
            assert time.monotonic() < deadline, "the reader did not end within 30 s"
            status = reader.poll(out)
            at = {s.partition: s.offset for s in reader.snapshot_positions()}
            if out.dead and 1 in at:
                assert at[1] > 3, f"a dead letter out, but partition 1 still at {at[1]}"
            if status is InputStatus.NOTHING_AVAILABLE:
                time.sleep((reader.wait_hint_ms() or 10) / 1000)  # the task's own idle wait
        assert [d["offset"] for d in out.dead] == [3]
        assert sorted(r["v"] for r in out.records) == sorted([*range(100), 0, 1, 2, *range(4, 10)])
    finally:
        reader.close()


def test_a_batch_over_the_partition_limit_is_not_starved_by_a_busy_partition(kafka_topic) -> None:
    """Fetch v4 returns a batch larger than the per-partition limit (8 MiB) only for the
    first partition of a response with data; the request order turns, so a 9 MiB record
    comes out while the busy partition still has most of its records to go."""
    topic = kafka_topic(2, {"max.message.bytes": str(12 << 20)})
    write(
        topic,
        [{"value": json.dumps({"big": "x" * (9 << 20)}).encode(), "partition": 1}],
        **{"message.max.bytes": 12 << 20},
    )
    busy = 60_000
    write(topic, [{"value": b'{"v": %d, "pad": "%s"}' % (i, b"p" * 400), "partition": 0}
                  for i in range(busy)])  # fmt: skip
    out, still_direct = read(topic, "auto", format="bytes", max_record_bytes=16 << 20)
    assert still_direct
    first_big = next(i for i, (s, _) in enumerate(out.emitted) if s.endswith("[1]"))
    before = sum(len(b) for s, b in out.emitted[:first_big] if s.endswith("[0]"))
    assert before < busy / 2, f"the 9 MiB record came out after {before} of {busy} records"


def test_the_direct_fetch_wakes_the_task_when_records_arrive_not_on_an_interval(
    kafka_topic, monkeypatch
) -> None:
    """Wake on arrival (issue 42): after a poll that found nothing, the reader arms its
    arrival watch with the fetch in flight; a record produced then wakes the task. The
    broker's long poll is set to 60 s, so within the 10 s this test waits only the
    record's arrival can answer the fetch, and no interval is involved. librdkafka's
    reader cannot watch and says so."""
    from lockgate.connectors.kafka import direct_client

    monkeypatch.setattr(direct_client, "MAX_WAIT_MS", 60_000)
    monkeypatch.setattr(direct_client, "REQUEST_TIMEOUT_S", 120.0)
    topic = kafka_topic(1)
    source = KafkaSource(BOOTSTRAP, topic, fetch="auto")
    reader: Any = source.create_reader(ctx())
    try:
        reader.add_splits(assign_splits(source.create_splits(1), 0, 1))
        out = Batches()
        woke = threading.Event()
        deadline = time.monotonic() + 30
        armed = False
        while not armed:  # until the first offsets are known and a fetch is in flight
            assert time.monotonic() < deadline, "the reader never had a fetch in flight"
            assert reader.poll(out) is InputStatus.NOTHING_AVAILABLE
            armed = reader.watch_arrival(woke.set)
            if not armed:
                woke.wait(0.01)  # a bounded pause between polls while offsets resolve
        assert reader.fetches_directly
        assert not woke.is_set()
        produce(topic, [7])
        assert woke.wait(10), "the arrival of a record did not wake the task within 10 s"
        read_until(reader, out, lambda: len(out.records) == 1, "the record that woke it")
    finally:
        reader.close()
    lib: Any = KafkaSource(BOOTSTRAP, topic, fetch="librdkafka").create_reader(ctx())
    try:
        assert lib.watch_arrival(lambda: None) is False
    finally:
        lib.close()

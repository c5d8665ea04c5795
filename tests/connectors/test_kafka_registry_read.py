"""KafkaSource reading Schema Registry formats (issue 38) against the real registry
(Apicurio, Confluent-compatible API) and the real broker, never mocked.

Input is produced by confluent-kafka's own serializers (AvroSerializer,
ProtobufSerializer, JSONSerializer) in two schema versions (v2 adds a field with a
default and removes one, tests/registry_schemas.py); lockgate must read exactly the
expected rows, as written and through a reader schema, on both executors and both
fetch paths (direct fetch and librdkafka), as dicts and as Arrow batches. Malformed
records (unframed, an unknown schema id, a corrupt payload) fail the job naming
``topic[partition]@offset`` and the schema id, or go to ``lg.DEAD_LETTER`` with their
position (the bad-input rule); an unreachable registry fails the job with its URL,
credentials redacted. Exactly-once reading is the offsets' (M-X1): decoding changes
nothing of it."""

from __future__ import annotations

import io
import json
import logging
import pickle
import struct
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from recording_output import RecordingOutput

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from conftest import on_executors
from kafka_fixtures import BOOTSTRAP
from lockgate.connectors.base import InputStatus, SourceReader
from lockgate.connectors.kafka.source import KafkaSource
from lockgate.connectors.schema_registry import SchemaRegistry
from lockgate.connectors.schema_registry.avro_arrow import avro_arrow_schema
from lockgate.connectors.schema_registry.wire import frame
from lockgate.errors import ConfigurationError, MalformedRecordError
from lockgate.runtime.context import RuntimeContext
from lockgate.testing import FailAtRecord, FailDuringAlignment, FailSnapshot, inject_faults
from registry_schemas import (
    AVRO_KEY,
    AVRO_V1_TEXT,
    AVRO_V2,
    AVRO_V2_TEXT,
    JSON_V1_TEXT,
    JSON_V2,
    JSON_V2_TEXT,
    REGISTRY_URL,
    OrderV1,
    OrderV2,
    allow_any_evolution,
    as_v2,
    order_v1,
    order_v2,
    proto_row,
    proto_v1,
    proto_v2,
    protobuf_serializer,
    unique,
)
from running_sums import RunningTotal, expected_totals, key_of

#: records per schema version and partition
N = 30


def registry() -> SchemaRegistry:
    return SchemaRegistry(REGISTRY_URL)


def confluent_client() -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": REGISTRY_URL})


def send(topic: str, items: list[tuple[int, bytes | None, bytes | None]]) -> None:
    """``(partition, key, value)`` written in order; returns when all are acknowledged."""
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5, "acks": "all"})
    errors: list[str] = []
    for partition, key, value in items:
        producer.produce(
            topic,
            value,
            key,
            partition=partition,
            on_delivery=lambda err, _m: errors.append(str(err)) if err else None,
        )
    assert producer.flush(60) == 0 and not errors, errors[:3]


def two_versions(
    topic: str, fmt: str, partitions: int = 2
) -> list[tuple[int, bytes | None, bytes | None]]:
    """``N`` records of version 1 then ``N`` of version 2 in each of 2 partitions,
    serialized by confluent-kafka's own serializer of ``fmt`` (registering the
    subject's two versions); record ``i`` goes to partition ``i % partitions``."""
    items = _two_versions(topic, fmt)
    return [(i % partitions, k, v) for i, (_, k, v) in enumerate(items)]


def _two_versions(topic: str, fmt: str) -> list[tuple[int, bytes | None, bytes | None]]:
    ctx = SerializationContext(topic, MessageField.VALUE)
    if fmt == "avro":
        v1 = AvroSerializer(confluent_client(), AVRO_V1_TEXT)
        v2 = AvroSerializer(confluent_client(), AVRO_V2_TEXT)
        first = [(i % 2, None, v1(order_v1(i), ctx)) for i in range(2 * N)]
        return first + [(i % 2, None, v2(order_v2(i), ctx)) for i in range(2 * N, 4 * N)]
    if fmt == "json_schema":
        j1 = JSONSerializer(JSON_V1_TEXT, confluent_client())
        j2 = JSONSerializer(JSON_V2_TEXT, confluent_client())
        first = [(i % 2, None, j1(order_v1(i), ctx)) for i in range(2 * N)]
        # Apicurio's JSON Schema check counts a new property as narrowing (BACKWARD)
        allow_any_evolution(f"{topic}-value")
        return first + [(i % 2, None, j2(order_v2(i), ctx)) for i in range(2 * N, 4 * N)]
    p1 = protobuf_serializer(OrderV1)
    first = [(i % 2, None, p1(proto_v1(i), ctx)) for i in range(2 * N)]
    allow_any_evolution(f"{topic}-value")
    p2 = protobuf_serializer(OrderV2)
    return first + [(i % 2, None, p2(proto_v2(i), ctx)) for i in range(2 * N, 4 * N)]


def written(fmt: str, i: int, reader: Any) -> dict[str, Any]:
    """What lockgate must give for record ``i`` of :func:`two_versions` read with
    ``reader`` (None: as written; for Protobuf the class, 1 or 2)."""
    version = 1 if i < 2 * N else 2
    if fmt == "protobuf":
        return proto_row(i, version, reader)
    record = order_v1(i) if version == 1 else order_v2(i)
    return record if reader is None else as_v2(record)


def by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


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
def open_reader() -> Iterator[Callable[[KafkaSource], SourceReader]]:
    readers: list[SourceReader] = []

    def open_(source: KafkaSource) -> SourceReader:
        reader = source.create_reader(ctx())
        readers.append(reader)
        reader.add_splits(source.create_splits(1))
        return reader

    yield open_
    for reader in readers:
        reader.close()


class BatchOutput(RecordingOutput):
    """Records the batches as emitted (Arrow or rows), with their split."""

    def __init__(self) -> None:
        super().__init__()
        self.emitted: list[tuple[Any, Any]] = []

    def emit_from_split(self, split_id: Any, batch: Any) -> None:
        self.emitted.append((split_id, batch))

    def rows(self) -> list[dict[str, Any]]:
        return [
            r
            for _, b in self.emitted
            for r in (b.to_pylist() if hasattr(b, "to_pylist") else b.rows)
        ]

    @property
    def dead_letters(self) -> list[dict[str, Any]]:
        return self.dead


def read_to_end(reader: SourceReader) -> BatchOutput:
    """Everything a bounded reader emits until its end (bounded polling, 60 s)."""
    out = BatchOutput()
    deadline = time.monotonic() + 60
    while True:
        status = reader.poll(out)
        if status is InputStatus.END_OF_INPUT:
            return out
        if time.monotonic() > deadline:
            pytest.fail(f"the reader did not end within 60 s; got {len(out.emitted)} batches")
        if status is InputStatus.NOTHING_AVAILABLE:
            time.sleep((reader.wait_hint_ms() or 10) / 1000)  # the task's own idle wait


READERS = {"avro": AVRO_V2, "json_schema": JSON_V2, "protobuf": OrderV2}


# --------------------------------------------------------------------------- jobs


@pytest.mark.hang_guard(300)  # the first Spark test of a run starts the session
@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
@pytest.mark.parametrize(
    "executor",
    [pytest.param("local"), pytest.param("spark", marks=pytest.mark.spark)],
    indirect=True,
)
def test_two_schema_versions_read_as_written_and_through_a_reader_schema_M_X1(
    executor, kafka_topic, fmt
) -> None:
    """confluent-kafka's serializers wrote v1 then v2; one job reads the topic twice:
    as written (Protobuf: with the v1 class) and through the v2 reader schema, each into
    exactly the expected rows (v1 records gain v2's default, lose the removed field)."""
    topic = kafka_topic(2)
    send(topic, two_versions(topic, fmt))
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    as_written = OrderV1 if fmt == "protobuf" else None

    def source(reader: Any) -> KafkaSource:
        return KafkaSource(
            BOOTSTRAP,
            topic,
            bounded=True,
            format=fmt,
            schema_registry=registry(),
            reader_schema=reader,
        )

    plain = env.from_source(source(as_written), name="as-written").map(lambda r: ("w", r))
    resolved = env.from_source(source(READERS[fmt]), name="resolved").map(lambda r: ("r", r))
    out = plain.union(resolved).execute_and_collect(f"registry read {fmt}")
    expect_written = 1 if fmt == "protobuf" else None
    expect_resolved = 2 if fmt == "protobuf" else AVRO_V2
    assert by_id([r for tag, r in out if tag == "w"]) == [
        written(fmt, i, expect_written) for i in range(4 * N)
    ]
    assert by_id([r for tag, r in out if tag == "r"]) == [
        written(fmt, i, expect_resolved) for i in range(4 * N)
    ]


@pytest.mark.hang_guard(300)
@pytest.mark.parametrize(
    "executor",
    [pytest.param("local"), pytest.param("spark", marks=pytest.mark.spark)],
    indirect=True,
)
def test_unknown_ids_corrupt_and_unframed_records_go_to_the_dead_letter_with_positions(
    executor, kafka_topic
) -> None:
    """The bad-input rule: each malformed record reaches lg.DEAD_LETTER with topic,
    partition, offset, schema_id and its bytes; the good ones all arrive."""
    topic = kafka_topic(2)
    good = two_versions(topic, "avro")[: 2 * N]
    schema_id = struct.unpack(">I", good[0][2][1:5])[0]  # type: ignore[index]
    unknown = frame(2**31 - 7, good[0][2][5:])  # type: ignore[index]
    corrupt = frame(schema_id, b"\x02\x0eorder-x\xff\xff\xff\xff\xff\xff\xff")
    send(topic, [*good[:4], (1, None, unknown), (1, None, corrupt), (0, None, b"not framed")])
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    records = env.from_source(
        KafkaSource(
            BOOTSTRAP,
            topic,
            bounded=True,
            format="avro",
            schema_registry=registry(),
            on_error="dead_letter",
        ),
        name="kafka",
    )
    dead = records.get_side_output(lg.DEAD_LETTER).map(lambda d: ("dead", d))
    out = records.map(lambda r: ("good", r)).union(dead).execute_and_collect("registry dead")
    assert by_id([r for tag, r in out if tag == "good"]) == [order_v1(i) for i in range(4)]
    letters = sorted(
        (
            (d["partition"], d["offset"], d["schema_id"], d["raw"], d["location"], d["topic"])
            for tag, d in out
            if tag == "dead"
        ),
    )
    assert [letter[:4] for letter in letters] == [
        (0, 2, None, b"not framed"),
        (1, 2, 2**31 - 7, unknown),
        (1, 3, schema_id, corrupt),
    ]
    assert [letter[4:] for letter in letters] == [
        (f"{topic}[0]@2", topic),
        (f"{topic}[1]@2", topic),
        (f"{topic}[1]@3", topic),
    ]
    errors = {d["offset"]: d["error"] for tag, d in out if tag == "dead" and d["partition"] == 1}
    assert f"schema id {2**31 - 7}" in errors[2]
    assert f"schema id {schema_id}" in errors[3]


#: the exactly-once test's records and key width
EO_RECORDS = 60_000
#: the job's source reads at most this many records a subtask per completed checkpoint
EO_PACE = 2_000
EO_CHUNK = 500
EO_SCHEMA = {
    "type": "record",
    "name": "Sum",
    "namespace": "lgtest",
    "fields": [{"name": "k", "type": "int"}, {"name": "v", "type": "long"}],
}
#: the reader's shape: k promoted to long, a field the writer lacks with its default
EO_READER = {
    "type": "record",
    "name": "Sum",
    "namespace": "lgtest",
    "fields": [
        {"name": "k", "type": "long"},
        {"name": "v", "type": "long"},
        {"name": "note", "type": "string", "default": "-"},
    ],
}


@pytest.mark.hang_guard(300)
@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2), indirect=["executor"])
def test_an_avro_keyed_running_sum_is_exactly_once_through_five_injected_failures_M_X1(
    kafka_topic, executor, parallelism, caplog
) -> None:
    """M-X1, M-R1: five faults (the source, the operator, an alignment, an asynchronous
    snapshot) fail five attempts of a job reading Avro through a reader schema; each
    restore seeks every partition back to its checkpointed offset, so the output equals
    the failure-free run's: decoding through the registry changes nothing of it.

    Every fault waits for checkpoints, never for time: the source is paced by completed
    checkpoints (``CheckpointPacedSource``: nothing before an attempt's first completed
    checkpoint, then ``EO_PACE`` records per completion, its end held until three), so on
    a machine of any speed each attempt is still reading when its fault comes. Partitions
    0 and 2 go to one source subtask, 1 to the other: at least 20,000 records each.

    0. the sources cannot end before three completed checkpoints and the third needs the
       failing snapshot: the job fails; the second checkpoint holds at most ``EO_PACE``
       records and one more poll (at most 5,000) a subtask;
    1. the source's subtask 0 fails at its 100th record after the attempt's first
       completed checkpoint (it has more than 13,000 left);
    2. the running sum's last subtask fails likewise (thousands of records of many keys
       are left);
    3. the first checkpoint finds both sources running (their end is held): the running
       sum's subtask 0 fails inside its alignment of two channels;
    4. the source's last subtask fails at its 500th record after a completed checkpoint
       (attempts 1 to 3 moved the input on by at most a poll each);
    5. reads to the end."""
    topic = kafka_topic(3)
    ctx_ = SerializationContext(topic, MessageField.VALUE)
    serialize = AvroSerializer(confluent_client(), json_text(EO_SCHEMA))
    send(
        topic,
        [
            ((v // EO_CHUNK) % 3, None, serialize({"k": v // EO_CHUNK, "v": v}, ctx_))
            for v in range(EO_RECORDS)
        ],
    )
    env = lg.StreamEnvironment(parallelism=parallelism, executor=executor)
    env.enable_checkpointing(timedelta(milliseconds=100))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=10, delay=0))
    source = KafkaSource(
        BOOTSTRAP,
        topic,
        bounded=True,
        format="avro",
        schema_registry=registry(),
        reader_schema=EO_READER,
    )
    sums = (
        env.from_source(CheckpointPacedSource(source, EO_PACE, end_after=3), name="kafka")
        .uid("kafka")
        .key_by(key_of)
        .process(RunningTotal(), name="running sum")
        .uid("sums")
    )
    last = parallelism - 1
    inject_faults(
        env,
        FailSnapshot("running sum", checkpoint=3, phase="async", attempt=0, subtask=0),
        FailAtRecord("kafka", record=100, attempt=1, subtask=0, after_checkpoints=1),
        FailAtRecord("running sum", record=100, attempt=2, subtask=last, after_checkpoints=1),
        FailDuringAlignment("running sum", attempt=3, subtask=0),
        FailAtRecord("kafka", record=500, attempt=4, subtask=last, after_checkpoints=1),
    )
    with caplog.at_level(logging.INFO, logger="lockgate.recovery.failover"):
        out = sums.execute_and_collect("registry exactly once", executor=executor)
    restores = [r for r in caplog.records if " restores " in r.getMessage()]
    assert len(restores) == 5, "each later attempt restored a checkpoint"
    got = sorted((r["k"], r["v"], r["total"]) for r in out)
    assert len(got) == EO_RECORDS, f"{len(got)} records, expected {EO_RECORDS}"
    assert got == expected_totals(EO_RECORDS, EO_CHUNK)


@pytest.mark.parametrize("fetch", ["auto", "librdkafka"])
def test_a_corrupt_record_fails_the_job_naming_topic_partition_offset_and_schema_id(
    kafka_topic, fetch
) -> None:
    topic = kafka_topic(1)
    good = two_versions(topic, "avro", 1)[:1]
    schema_id = struct.unpack(">I", good[0][2][1:5])[0]  # type: ignore[index]
    send(topic, [(0, None, good[0][2]), (0, None, frame(schema_id, b"\x02"))])
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.from_source(
        KafkaSource(
            BOOTSTRAP, topic, bounded=True, format="avro", schema_registry=registry(), fetch=fetch
        ),
        name="kafka",
    ).sink_to(lg.connectors.DiscardingSink())
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("registry corrupt")
    cause = err.value.__cause__
    assert isinstance(cause, MalformedRecordError)
    assert cause.location == f"{topic}[0]@1"
    assert f"schema id {schema_id}" in str(cause)
    assert err.value.reason is lg.FailureReason.MALFORMED_INPUT


@pytest.mark.parametrize(
    "executor",
    [pytest.param("local"), pytest.param("spark", marks=pytest.mark.spark)],
    indirect=True,
)
def test_a_writer_schema_with_references_is_read_with_the_schemas_it_refers_to(
    executor, kafka_topic
) -> None:
    """An Avro writer's schema with registry references was read without them (fastavro:
    unknown type), and with dead_letter every record of the topic went to the
    dead-letter output. The referenced subjects' versions are fetched (their own
    references too) and the records decode; nothing is dead-lettered."""
    from lockgate.connectors.schema_registry import Schema, SchemaReference

    topic = kafka_topic(1)
    inner = {"type": "enum", "name": "Kind", "namespace": "lgtest", "symbols": ["A", "B"]}
    other = {"type": "record", "name": "Other", "namespace": "lgtest", "fields": [
        {"name": "x", "type": "long"}, {"name": "k", "type": "lgtest.Kind"}]}  # fmt: skip
    main = {"type": "record", "name": "Main", "namespace": "lgtest", "fields": [
        {"name": "o", "type": "lgtest.Other"}]}  # fmt: skip
    client = registry()
    client.register(f"{topic}-kind", Schema(json.dumps(inner)))
    kind_ref = (SchemaReference("lgtest.Kind", f"{topic}-kind", 1),)
    client.register(f"{topic}-other", Schema(json.dumps(other), references=kind_ref))
    refs = (SchemaReference("lgtest.Other", f"{topic}-other", 1),)
    schema_id = client.register(f"{topic}-value", Schema(json.dumps(main), references=refs))
    send(
        topic,
        [(0, None, frame(schema_id, b"\x02\x00")), (0, None, frame(schema_id, b"\x04\x02"))],
    )
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    records = env.from_source(
        KafkaSource(
            BOOTSTRAP,
            topic,
            bounded=True,
            format="avro",
            schema_registry=client,
            on_error="dead_letter",
        ),
        name="kafka",
    )
    dead = records.get_side_output(lg.DEAD_LETTER).map(lambda d: ("dead", d))
    out = records.map(lambda r: ("good", r)).union(dead).execute_and_collect("registry refs")
    assert sorted(r["o"]["x"] for _, r in out) == [1, 2], out
    assert sorted((tag, r["o"]["k"]) for tag, r in out) == [("good", "A"), ("good", "B")]


def test_an_unreachable_registry_fails_the_job_with_its_url_redacted(kafka_topic) -> None:
    """After the client's bounded retries (retry_for_s) the job fails naming the
    registry's URL without its password; no record is skipped or dead-lettered."""
    topic = kafka_topic(1)
    send(topic, [(0, None, frame(1, b"\x02"))])
    unreachable = SchemaRegistry(
        "http://reader:s3cret-pw@127.0.0.1:9/apis/ccompat/v7", retry_for_s=0.5, timeout_s=1
    )
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    records = env.from_source(
        KafkaSource(
            BOOTSTRAP,
            topic,
            bounded=True,
            format="avro",
            schema_registry=unreachable,
            on_error="dead_letter",
        ),
        name="kafka",
    )
    records.sink_to(lg.connectors.DiscardingSink())
    records.get_side_output(lg.DEAD_LETTER).sink_to(lg.connectors.DiscardingSink())
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("registry unreachable")
    chain = []
    e: BaseException | None = err.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__
    text = "\n".join(chain)
    assert "http://***@127.0.0.1:9/apis/ccompat/v7" in text, text
    assert "s3cret-pw" not in text
    assert isinstance(err.value.__cause__, lg.connectors.schema_registry.SchemaRegistryUnavailable)


# --------------------------------------------------------------------------- readers


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
def test_both_fetch_paths_give_the_same_records(kafka_topic, open_reader, fmt) -> None:
    """The direct fetch and librdkafka's consumer go through one decode function."""
    topic = kafka_topic(2)
    send(topic, two_versions(topic, fmt))
    got = {}
    for fetch in ("auto", "librdkafka"):
        source = KafkaSource(
            BOOTSTRAP,
            topic,
            bounded=True,
            format=fmt,
            schema_registry=registry(),
            reader_schema=READERS[fmt],
            fetch=fetch,
            timestamp_field="ts",
        )
        out = read_to_end(open_reader(source))
        got[fetch] = sorted(
            (
                (split, r["id"], r["ts"] > 0, repr(sorted(r.items())))
                for split, b in out.emitted
                for r in b.rows
            ),
        )
    assert got["auto"] == got["librdkafka"]
    assert len(got["auto"]) == 4 * N


@pytest.mark.parametrize("fetch", ["auto", "librdkafka"])
def test_a_schema_gives_one_arrow_batch_per_partition_and_poll_with_exactly_its_columns(
    kafka_topic, open_reader, fetch
) -> None:
    topic = kafka_topic(2)
    items = two_versions(topic, "avro")
    send(topic, [*items, (1, b"k", None)])  # a tombstone: a row of nulls
    schema = avro_arrow_schema(AVRO_V2)
    source = KafkaSource(
        BOOTSTRAP,
        topic,
        bounded=True,
        format="avro",
        schema_registry=registry(),
        reader_schema=AVRO_V2,
        schema=schema,
        key_field="key",
        timestamp_field="ts",
        fetch=fetch,
    )
    out = read_to_end(open_reader(source))
    assert out.emitted
    expected_schema = schema.append(pa.field("key", pa.string())).append(pa.field("ts", pa.int64()))
    for split_id, batch in out.emitted:
        assert isinstance(batch, pa.RecordBatch), f"{split_id}: {type(batch).__name__}"
        assert batch.schema == expected_schema
    rows = {
        p: [r for s, b in out.emitted if s == f"{topic}[{p}]" for r in b.to_pylist()]
        for p in (0, 1)
    }
    for p in (0, 1):
        ids = [i for i in range(4 * N) if i % 2 == p]
        body = [{k: v for k, v in r.items() if k not in ("key", "ts")} for r in rows[p]]
        tail = [{name: None for name in schema.names}] if p == 1 else []
        assert body == [written("avro", i, AVRO_V2) for i in ids] + tail
        assert all(r["ts"] > 0 for r in rows[p])
    assert rows[1][-1]["key"] == "k" and rows[0][0]["key"] is None


def test_an_arrow_row_that_does_not_fit_the_schema_is_malformed_and_the_rest_arrive(
    kafka_topic, open_reader
) -> None:
    topic = kafka_topic(1)
    send(topic, two_versions(topic, "avro", 1)[: 2 * N])
    schema = pa.schema([("id", pa.int64()), ("name", pa.int64())])  # name is a string
    source = KafkaSource(
        BOOTSTRAP,
        topic,
        bounded=True,
        format="avro",
        schema_registry=registry(),
        schema=schema,
        on_error="dead_letter",
    )
    letters = read_to_end(open_reader(source))
    assert [b.num_rows for _, b in letters.emitted] == [] or all(
        b.num_rows == 0 for _, b in letters.emitted
    )
    assert [d["offset"] for d in letters.dead_letters] == list(range(2 * N))
    assert "does not fit the schema" in letters.dead_letters[0]["error"]
    assert letters.dead_letters[0]["schema_id"] is not None


def test_registry_encoded_keys_are_decoded_into_the_key_field(kafka_topic, open_reader) -> None:
    topic = kafka_topic(1)
    ctx_ = SerializationContext(topic, MessageField.KEY)
    keys = AvroSerializer(confluent_client(), json_text(AVRO_KEY))
    values = two_versions(topic, "avro", 1)[:N]
    send(
        topic,
        [(0, keys({"region": "eu", "id": i}, ctx_), v) for i, (_, _, v) in enumerate(values)]
        + [(0, None, values[0][2])],
    )
    source = KafkaSource(
        BOOTSTRAP,
        topic,
        bounded=True,
        format="avro",
        key_format="avro",
        key_field="k",
        schema_registry=registry(),
    )
    rows = read_to_end(open_reader(source)).rows()
    assert [r["k"] for r in rows] == [{"region": "eu", "id": i} for i in range(N)] + [None]
    assert [r["id"] for r in rows] == list(range(N)) + [0]


@pytest.mark.parametrize("fetch", ["auto", "librdkafka"])
def test_a_dead_letter_of_a_registry_keyed_record_carries_its_key_bytes(
    kafka_topic, open_reader, fetch
) -> None:
    """With key_format, a record whose key (or value) is malformed was dead-lettered
    with ``raw`` = the value only: a bad key's bytes were lost. Its dead letter has
    ``raw_key`` (the key's bytes, None without a key) too."""
    topic = kafka_topic(1)
    ctx_ = SerializationContext(topic, MessageField.KEY)
    keys = AvroSerializer(confluent_client(), json_text(AVRO_KEY))
    values = two_versions(topic, "avro", 1)[:2]
    good_key = keys({"region": "eu", "id": 1}, ctx_)
    bad_key = b"not a framed key"
    send(
        topic,
        [
            (0, good_key, values[0][2]),
            (0, bad_key, values[1][2]),
            (0, good_key, b"not a framed value"),
            (0, None, b"unframed, no key"),
        ],
    )
    source = KafkaSource(
        BOOTSTRAP,
        topic,
        bounded=True,
        format="avro",
        key_format="avro",
        key_field="k",
        schema_registry=registry(),
        on_error="dead_letter",
        fetch=fetch,
    )
    out = read_to_end(open_reader(source))
    assert [r["k"] for r in out.rows()] == [{"region": "eu", "id": 1}]
    letters = [(d["offset"], d["raw"], d["raw_key"]) for d in out.dead_letters]
    assert letters == [
        (1, values[1][2], bad_key),
        (2, b"not a framed value", good_key),
        (3, b"unframed, no key", None),
    ]
    assert "its key" in out.dead_letters[0]["error"]


def test_a_json_schema_value_that_breaks_its_writer_schema_is_malformed(
    kafka_topic, open_reader
) -> None:
    topic = kafka_topic(1)
    good = two_versions(topic, "json_schema", 1)[:1]
    schema_id = struct.unpack(">I", good[0][2][1:5])[0]  # type: ignore[index]
    send(topic, [good[0], (0, None, frame(schema_id, b'{"id": "x"}'))])
    source = KafkaSource(
        BOOTSTRAP,
        topic,
        bounded=True,
        format="json_schema",
        schema_registry=registry(),
        on_error="dead_letter",
    )
    out = read_to_end(open_reader(source))
    assert out.rows() == [order_v1(0)]
    (letter,) = out.dead_letters
    assert letter["offset"] == 1 and letter["schema_id"] == schema_id
    assert "writer's JSON Schema" in letter["error"]


def test_avro_bytes_left_after_the_record_make_it_malformed(kafka_topic, open_reader) -> None:
    """A payload longer than its record is corrupt (fastavro alone would not notice)."""
    topic = kafka_topic(1)
    good = two_versions(topic, "avro", 1)[:1]
    value = good[0][2]
    assert value is not None
    send(topic, [(0, None, value + b"\x00")])
    source = KafkaSource(
        BOOTSTRAP,
        topic,
        bounded=True,
        format="avro",
        schema_registry=registry(),
        on_error="dead_letter",
    )
    out = read_to_end(open_reader(source))
    assert out.rows() == []
    assert "1 bytes follow the Avro record" in out.dead_letters[0]["error"]


def json_text(schema: Any) -> str:
    return json.dumps(schema)


# --------------------------------------------------------------------------- arguments


def test_the_source_pickles_with_a_protobuf_class_built_at_run_time() -> None:
    """It travels to Spark workers: the class goes as its descriptors."""
    source = KafkaSource(
        BOOTSTRAP, "t", format="protobuf", schema_registry=registry(), reader_schema=OrderV2
    )
    copy = pickle.loads(pickle.dumps(source))
    cls = copy.value_decoding.reader_schema.cls
    assert cls.DESCRIPTOR.full_name == "lgtest.Order"
    assert cls.FromString(proto_v2(3).SerializeToString()).score == 0.75


BAD = [
    ({"format": "avro"}, "pass schema_registry=lg.connectors.SchemaRegistry"),
    ({"format": "json", "schema_registry": "reg"}, "drop schema_registry"),
    ({"format": "text", "schema_registry": "reg"}, "drop schema_registry"),
    ({"format": "avro", "schema_registry": "http://x"}, "must be a lg.connectors.SchemaRegistry"),
    ({"format": "protobuf", "schema_registry": "reg"}, "message class"),
    ({"format": "protobuf", "schema_registry": "reg", "reader_schema": {"a": 1}}, "message class"),
    ({"format": "avro", "schema_registry": "reg", "reader_schema": {"type": "nope"}}, "fastavro"),
    ({"format": "avro", "schema_registry": "reg", "reader_schema": 5}, "reader_schema must be"),
    ({"format": "json_schema", "schema_registry": "reg", "reader_schema": "{"}, "JSON Schema"),
    ({"format": "json", "reader_schema": AVRO_V2}, "drop reader_schema"),
    ({"format": "avro", "schema_registry": "reg", "key_format": "avro"}, "pass key_field"),
    ({"key_format": "json", "key_field": "k"}, "key_format must be None"),
    ({"format": "json", "key_format": "avro", "key_field": "k"}, "pass schema_registry"),
    (
        {"format": "avro", "schema_registry": "reg", "key_format": "protobuf", "key_field": "k"},
        "key_reader_schema=",
    ),
    ({"format": "avro", "schema_registry": "reg", "key_reader_schema": AVRO_KEY}, "key_format"),
    (
        {
            "format": "avro",
            "schema_registry": "reg",
            "key_format": "avro",
            "key_field": "k",
            "schema": pa.schema([("id", pa.int64())]),
        },
        "drop key_format",
    ),
    ({"format": "bytes", "schema": pa.schema([("id", pa.int64())])}, "format='json', 'avro'"),
]


@pytest.mark.parametrize(("kwargs", "named"), BAD)
def test_bad_registry_arguments_raise_a_configuration_error_saying_how_to_fix(
    kwargs, named
) -> None:
    kwargs = dict(kwargs)
    if kwargs.get("schema_registry") == "reg":
        kwargs["schema_registry"] = registry()
    with pytest.raises(ConfigurationError) as err:
        KafkaSource(BOOTSTRAP, "t", **kwargs)
    assert named in str(err.value)


def test_good_registry_arguments_are_accepted() -> None:
    reg = registry()
    KafkaSource(BOOTSTRAP, "t", format="avro", schema_registry=reg, reader_schema=AVRO_V2_TEXT)
    KafkaSource(BOOTSTRAP, "t", format="avro", schema_registry=reg, reader_schema='"string"')
    KafkaSource(BOOTSTRAP, "t", format="json_schema", schema_registry=reg, reader_schema=JSON_V2)
    KafkaSource(BOOTSTRAP, "t", format="protobuf", schema_registry=reg, reader_schema=OrderV1)
    KafkaSource(
        BOOTSTRAP,
        "t",
        format="json",
        key_format="protobuf",
        key_field="k",
        key_reader_schema=OrderV1,
        schema_registry=reg,
    )
    KafkaSource(
        BOOTSTRAP,
        "t",
        format="avro",
        schema_registry=reg,
        schema=avro_arrow_schema(AVRO_V2),
        key_field="k",
    )


def test_avro_arrow_schema_maps_types_and_refuses_what_no_column_holds() -> None:
    schema = {
        "type": "record",
        "name": "A",
        "namespace": "x",
        "fields": [
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "m", "type": {"type": "map", "values": "long"}},
            {
                "name": "d",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            },
            {
                "name": "n",
                "type": [
                    "null",
                    {"type": "record", "name": "B", "fields": [{"name": "v", "type": "int"}]},
                ],
            },
            {"name": "again", "type": ["null", "B"]},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
            {"name": "f", "type": {"type": "fixed", "name": "F", "size": 4}},
        ],
    }
    got = avro_arrow_schema(schema)
    b = pa.struct([pa.field("v", pa.int32(), nullable=False)])
    assert got == pa.schema(
        [
            ("ts", pa.timestamp("ms", tz="UTC")),
            ("m", pa.map_(pa.string(), pa.field("value", pa.int64(), nullable=False))),
            ("d", pa.decimal128(10, 2)),
            ("n", b),
            ("again", b),
            ("e", pa.string()),
            ("f", pa.binary(4)),
        ]
    )
    record = {
        "ts": 1_700_000_000_000,
        "m": {"a": 1},
        "d": __import__("decimal").Decimal("1.25"),
        "n": {"v": 1},
        "again": None,
        "e": "A",
        "f": b"abcd",
    }
    buf = io.BytesIO()
    parsed = fastavro.parse_schema(schema)
    fastavro.schemaless_writer(buf, parsed, record)
    buf.seek(0)
    decoded = fastavro.schemaless_reader(buf, parsed)
    assert pa.RecordBatch.from_pylist([decoded], schema=got).num_rows == 1
    with pytest.raises(ValueError, match="several non-null"):
        avro_arrow_schema(
            {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["int", "string"]}]}
        )
    with pytest.raises(ValueError, match="refers to itself"):
        avro_arrow_schema(
            {"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]}
        )


def _with_field(schema: dict[str, Any], name: str, field: dict[str, Any] | None) -> dict[str, Any]:
    """``schema`` with field ``name`` replaced by ``field`` (None: removed)."""
    out = json.loads(json.dumps(schema))
    fields = [f for f in out["fields"] if f["name"] != name or field is not None]
    out["fields"] = [field if f["name"] == name and field is not None else f for f in fields]
    return out


def test_avro_resolution_without_fastavro_per_record_resolution_gives_fastavros_records() -> None:
    """The planned resolution (fields dropped and defaulted once decoded with the
    writer's schema) gives exactly fastavro's resolved record; anything else falls back
    to fastavro's resolution."""
    from lockgate.connectors.schema_registry import Schema
    from lockgate.connectors.schema_registry.avro_read import AvroValueDecoder, resolution_plan
    from lockgate.connectors.schema_registry.formats import MalformedValue

    v1, v2 = json.loads(AVRO_V1_TEXT), AVRO_V2
    list_default = _with_field(
        v2, "score", {"name": "score", "type": {"type": "array", "items": "long"}, "default": [1]}
    )
    long_id = _with_field(v1, "id", {"name": "id", "type": "long"})
    int_id = _with_field(v1, "id", {"name": "id", "type": "int"})
    bytes_name = _with_field(v2, "name", {"name": "name", "type": "bytes"})
    more_symbols = _with_field(
        v2,
        "status",
        {
            "name": "status",
            "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "X"]},
        },
    )
    no_default = _with_field(v2, "score", {"name": "score", "type": "double"})
    cases = [
        (v1, v2, True),
        (v1, v1, True),
        (v1, list_default, True),
        (int_id, long_id, True),
        (v1, bytes_name, False),
        (v1, more_symbols, False),
        (v1, no_default, False),
    ]
    reg = registry()
    for writer, reader, planned in cases:
        pw, pr = fastavro.parse_schema(writer), fastavro.parse_schema(reader)
        assert (resolution_plan(pw, pr) is not None) is planned, (writer, reader)
        record = order_v1(3) if "legacy" in json.dumps(writer) else order_v2(3)
        schema_id = reg.register(unique("plan") + "-value", Schema(json.dumps(writer)))
        decoder = AvroValueDecoder(reg, reader)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, pw, record)
        value = frame(schema_id, buf.getvalue())
        try:
            expected = fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), pw, pr)
        except fastavro.read.SchemaResolutionError:
            with pytest.raises(MalformedValue, match="cannot be resolved to the reader schema"):
                decoder.decode(schema_id, value)
            continue
        got = decoder.decode(schema_id, value)
        assert got == expected and list(got) == list(expected), (writer, reader)


@pytest.mark.parametrize("fmt", ["protobuf", "json_schema"])
def test_protobuf_and_json_schema_records_become_arrow_batches_of_the_schema(
    kafka_topic, open_reader, fmt
) -> None:
    topic = kafka_topic(1)
    send(topic, two_versions(topic, fmt, 1))
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("status", pa.string()),
            ("tags", pa.list_(pa.string())),
            ("score", pa.float64()),
            ("customer", pa.struct([("email", pa.string())])),
        ]
    )
    source = KafkaSource(
        BOOTSTRAP,
        topic,
        bounded=True,
        format=fmt,
        schema_registry=registry(),
        reader_schema=READERS[fmt],
        schema=schema,
    )
    out = read_to_end(open_reader(source))
    assert all(isinstance(b, pa.RecordBatch) and b.schema == schema for _, b in out.emitted)
    reader = 2 if fmt == "protobuf" else AVRO_V2
    assert out.rows() == [
        {name: written(fmt, i, reader).get(name) for name in schema.names} for i in range(4 * N)
    ]


def test_a_writer_json_schema_with_a_remote_ref_fails_the_job_and_is_never_fetched(
    kafka_topic, open_reader
) -> None:
    """A $ref to another document is never fetched (the registry's schema must not make
    the reader open connections). The schema, not the record, is wrong: the job fails
    naming the schema id and the registry, even with dead_letter (its records were each
    dead-lettered, and a whole topic drained into the dead-letter output)."""
    from lockgate.connectors.schema_registry import Schema
    from lockgate.connectors.schema_registry.formats import WriterSchemaError

    topic = kafka_topic(1)
    remote = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"a": {"$ref": "http://127.0.0.1:9/other.json"}},
    }
    schema_id = registry().register(f"{topic}-value", Schema(json.dumps(remote), "JSON"))
    send(topic, [(0, None, frame(schema_id, b'{"a": 1}'))])
    source = KafkaSource(
        BOOTSTRAP,
        topic,
        bounded=True,
        format="json_schema",
        schema_registry=registry(),
        on_error="dead_letter",
    )
    reader = open_reader(source)
    with pytest.raises(WriterSchemaError) as raised:
        read_to_end(reader)
    message = str(raised.value)
    assert f"schema id {schema_id}" in message and REGISTRY_URL in message
    assert "http://127.0.0.1:9/other.json" in message
    assert "never fetched" in message and "Connection refused" not in message


FLAT_WRITER = {
    "type": "record",
    "name": "Flat",
    "namespace": "lgtest",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "by", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "ns", "type": ["null", "string"]},
        {"name": "nl", "type": ["long", "null"]},
        {"name": "gone", "type": "string"},
    ],
}
FLAT_READER = {
    **FLAT_WRITER,
    "fields": [f for f in FLAT_WRITER["fields"] if f["name"] != "gone"]
    + [
        {"name": "added", "type": "string", "default": "x"},
        {"name": "addn", "type": ["null", "long"], "default": None},
    ],
}


def flat_record(i: int) -> dict[str, Any]:
    import datetime

    return {
        "b": i % 2 == 0,
        "i": (i * 7919) % 2**31 - 2**30,
        "l": (i * 104729) ** 2 * 7 - 2**40,
        "f": i / 3,
        "d": -i / 7,
        "s": f"s{i}-é€" * (i % 4),
        "by": bytes(range(i % 7)),
        "e": "ABC"[i % 3],
        "ts": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
        + datetime.timedelta(milliseconds=i * 1001),
        "us": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
        + datetime.timedelta(microseconds=i * 1001),
        "ns": None if i % 3 == 0 else f"n{i}",
        "nl": None if i % 5 == 0 else -i,
        "gone": "g",
    }


def _decoders(reader_schema: Any, schema: pa.Schema) -> tuple[Any, Any]:
    from lockgate.connectors.schema_registry.formats import RegistryDecoder, RegistryFormat

    def make() -> Any:
        return RegistryDecoder(
            registry(),
            value=RegistryFormat("avro", reader_schema),
            plain_format="avro",
            key=None,
            key_field="k",
            timestamp_field="t",
            schema=schema,
            max_record_bytes=1 << 20,
        )

    fast, general = make(), make()
    general._fast = None
    return fast, general


@pytest.mark.parametrize("resolved", [False, True])
def test_the_compiled_avro_reader_gives_the_general_paths_arrow_batches(resolved) -> None:
    """Flat records (every type the compiled reader takes, nulls, a dropped field, added
    ones with defaults) give the same batch through the compiled reader as through
    fastavro and from_pylist; a poll with a corrupt record falls back to the general
    path, which reports it."""
    from lockgate.connectors.schema_registry import Schema

    reader = FLAT_READER if resolved else None
    schema = avro_arrow_schema(FLAT_READER if resolved else FLAT_WRITER)
    if not resolved:
        schema = schema.append(pa.field("missing", pa.int64()))
    schema_id = registry().register(unique("flat") + "-value", Schema(json.dumps(FLAT_WRITER)))
    parsed = fastavro.parse_schema(FLAT_WRITER)

    def value(i: int) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, flat_record(i))
        return frame(schema_id, buf.getvalue())

    values = [value(i) for i in range(300)]
    keys = [None if i % 4 == 0 else f"k{i}".encode() for i in range(300)]
    kinds = np.array([0 if i % 6 == 0 else 1 for i in range(300)])
    stamps = np.arange(300, dtype=np.int64) + 10**12
    fast, general = _decoders(reader, schema)
    args = (lambda: keys, lambda: (kinds, stamps))

    def never(*bad: Any) -> None:
        raise AssertionError(bad)

    assert fast._columns(values, None) is not None, "the compiled reader took the poll"
    got = fast.decode(values, *args, never)
    expected = general.decode(values, *args, never)
    assert got.schema == expected.schema and got.equals(expected)
    assert got.num_rows == 300
    # the same through the raw buffer (as the direct fetch hands it)
    joined = np.frombuffer(b"".join(values), dtype=np.uint8)
    lengths = np.array([len(v) for v in values], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    assert fast.decode(lambda: values, *args, never, raw=(joined, starts, lengths)).equals(expected)
    # a corrupt record: the general path decodes the poll and reports it
    broken = [*values[:5], values[5][:-1], *values[6:]]
    assert fast._columns(broken, None) is None
    seen: list[Any] = []
    got = fast.decode(broken, *args, lambda *bad: seen.append(bad))
    assert [b[0] for b in seen] == [5] and got.num_rows == 299


@pytest.mark.parametrize("fetch", ["auto", "librdkafka"])
def test_flat_avro_arrow_batches_from_kafka_equal_the_general_paths(
    kafka_topic, open_reader, fetch, monkeypatch
) -> None:
    from lockgate.connectors.schema_registry import Schema
    from lockgate.connectors.schema_registry.avro_columns import AvroColumnsReader

    compiled: list[int] = []
    read = AvroColumnsReader.read

    def counting(self: Any, *args: Any) -> Any:
        table = read(self, *args)
        compiled.append(-1 if table is None else table.num_rows)
        return table

    monkeypatch.setattr(AvroColumnsReader, "read", counting)

    topic = kafka_topic(2)
    schema_id = registry().register(f"{topic}-value", Schema(json.dumps(FLAT_WRITER)))
    parsed = fastavro.parse_schema(FLAT_WRITER)
    items = []
    for i in range(400):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, flat_record(i))
        items.append((i % 2, None, frame(schema_id, buf.getvalue())))
    send(topic, items)
    schema = avro_arrow_schema(FLAT_READER)
    source = KafkaSource(
        BOOTSTRAP,
        topic,
        bounded=True,
        format="avro",
        schema_registry=registry(),
        reader_schema=FLAT_READER,
        schema=schema,
        fetch=fetch,
    )
    out = read_to_end(open_reader(source))
    assert all(isinstance(b, pa.RecordBatch) and b.schema == schema for _, b in out.emitted)
    rows = sorted(out.rows(), key=lambda r: (r["i"], r["l"]))
    _, general = _decoders(FLAT_READER, schema)
    expected = general.decode(
        [v for _, _, v in items], lambda: [None] * 400, lambda: ([0] * 400, [0] * 400), None
    )
    expected_rows = [
        {k: v for k, v in r.items() if k in schema.names} for r in expected.to_pylist()
    ]
    assert rows == sorted(expected_rows, key=lambda r: (r["i"], r["l"]))
    assert compiled and -1 not in compiled and sum(compiled) == 400, compiled

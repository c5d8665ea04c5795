"""KafkaSink(format="avro") encodes flat Arrow batches a column at a time
(``RegistryWriter.encode_columns``, :mod:`lockgate.connectors.schema_registry.avro_columns_write`):
the same bytes as the record-by-record path, read back by confluent-kafka's
AvroDeserializer, with plain keys; a batch it does not encode (a null where the schema
takes none) falls back to the record path, which fails naming the record's position.
Against the real registry and broker, on both executors."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

import lockgate as lg
from kafka_fixtures import BOOTSTRAP, read_committed
from lockgate.connectors.kafka.sink import KafkaSink
from lockgate.connectors.schema_registry.client import SchemaRegistry
from lockgate.connectors.schema_registry.wire import frame, schema_id_of
from lockgate.connectors.schema_registry.writing import RegistryWriter
from registry_schemas import REGISTRY_URL

UTC = datetime.timezone.utc

FLAT = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("blob", pa.binary()),
        ("small", pa.int32()),
        ("ratio", pa.float32()),
        ("score", pa.float64()),
        ("ok", pa.bool_()),
        ("at", pa.timestamp("ms", tz="UTC")),
        ("at_us", pa.timestamp("us", tz="UTC")),
    ]
)


def flat_row(i: int) -> dict[str, Any]:
    base = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    return {
        "id": i - 3,
        "name": None if i % 5 == 0 else f"order-{i}-é€" * (i % 40),
        "blob": None if i % 7 == 0 else bytes(range(i % 200)),
        "small": None if i % 3 == 0 else -(2**31) + i,
        "ratio": None if i % 4 == 0 else 0.5 * i,
        "score": None if i % 6 == 0 else i / 7,
        "ok": None if i % 9 == 0 else i % 2 == 0,
        "at": None if i % 8 == 0 else base + datetime.timedelta(milliseconds=i),
        "at_us": base + datetime.timedelta(microseconds=i) if i % 2 else None,
    }


def to_flat(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(batch.to_pylist(), schema=FLAT)


def test_registry_writer_encodes_a_flat_batch_by_columns_as_by_records() -> None:
    """The column path is taken for a flat batch (not None) and gives each record's
    bytes of the record path (``encode`` of the row, framed with the same id)."""
    topic = f"lgtest-avro-columns-{uuid.uuid4().hex[:8]}"
    writer = RegistryWriter("KafkaSink", "avro", SchemaRegistry(REGISTRY_URL), FLAT, "topic", True)
    batch = pa.RecordBatch.from_pylist([flat_row(i) for i in range(300)], schema=FLAT)
    got = writer.encode_columns(batch, topic)
    assert got is not None, "a flat batch is encoded a column at a time"
    schema_id = writer.schema_id(topic)
    assert got == [writer.encode(row, schema_id) for row in batch.to_pylist()]
    assert {schema_id_of(v) for v in got} == {schema_id}
    assert got[0] == frame(schema_id, got[0][5:])


def read_messages(topic: str, count: int) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": f"lgtest-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        messages: list[Any] = []
        for _ in range(60):  # bounded: each consume waits up to 2 s
            if len(messages) >= count:
                break
            messages += [m for m in consumer.consume(500, 2) if m.error() is None]
        assert len(messages) == count, f"{len(messages)} of {count} records read from {topic}"
    finally:
        consumer.close()
    return messages


@pytest.mark.hang_guard(300)
def test_flat_arrow_batches_with_a_key_column_are_read_by_the_avro_deserializer(
    executor, tmp_path, kafka_topic
) -> None:
    topic = kafka_topic(1)
    sink = KafkaSink(
        BOOTSTRAP,
        topic,
        key="id",
        format="avro",
        schema_registry=SchemaRegistry(REGISTRY_URL),
        schema=FLAT,
        delivery="exactly_once",
    )
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    records = [flat_row(i) for i in range(500)]
    env.from_collection(records).map_batches(to_flat, name="to arrow").sink_to(
        sink, name="out"
    ).uid("out")
    env.execute("flat arrow to avro")
    client = SchemaRegistryClient({"url": REGISTRY_URL})
    schema_id = client.get_latest_version(f"{topic}-value").schema_id
    deserializer = AvroDeserializer(schema_registry_client=client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    messages = read_messages(topic, len(records))
    assert {schema_id_of(m.value()) for m in messages} == {schema_id}
    got = [(m.key(), deserializer(m.value(), ctx)) for m in messages]
    assert got == [(str(r["id"]).encode(), r) for r in records]


@pytest.mark.hang_guard(300)
def test_a_null_in_a_non_nullable_column_fails_with_the_record_position(
    executor, tmp_path, kafka_topic
) -> None:
    """The column path does not take the batch; the record path fails naming record
    #3, and the exactly-once transaction leaves nothing."""
    topic = kafka_topic(1)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    sink = KafkaSink(
        BOOTSTRAP,
        topic,
        format="avro",
        schema_registry=SchemaRegistry(REGISTRY_URL),
        schema=schema,
        delivery="exactly_once",
    )

    def to_arrow(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist(batch.to_pylist(), schema=schema)

    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.none())
    records: list[dict[str, Any]] = [{"id": i, "name": f"n{i}"} for i in range(5)]
    records[3] = {"id": None, "name": "no id"}
    env.from_collection(records).map_batches(to_arrow, name="to arrow").sink_to(
        sink, name="out"
    ).uid("out")
    with pytest.raises(lg.JobFailedError) as info:
        env.execute("null in a non-nullable column")
    text = str(info.value)
    assert "record #3" in text and "cannot encode" in text, text
    assert read_committed(topic, raw=True) == [], "the failed attempt's records roll back"

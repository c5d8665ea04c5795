"""Debezium change events for the tests of ``KafkaSource(format="debezium-json" |
"debezium-avro")``, made by a script in the format Debezium's PostgreSQL connector
documents (never by lockgate's own writer): a table's change history with a snapshot
(``op="r"``), inserts, updates, deletes (each followed by a tombstone, as Debezium does
by default), primary-key changes (a delete, its tombstone and a create, as Debezium
writes them), and multi-row transactions (one ``txId`` and commit time, growing LSNs).

``REPLICA IDENTITY FULL`` gives updates and deletes a whole ``before``; ``DEFAULT``
gives updates none and deletes only the key columns (the others null)."""

from __future__ import annotations

import base64
import decimal
import json
import random
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

from kafka_fixtures import BOOTSTRAP

COLUMNS = ("id", "status", "qty")
STATUSES = ("new", "paid", "shipped", "returned")


@dataclass
class Event:
    """One Kafka record of the topic: its key (``{"id": ...}``) and its value (an
    envelope, or None for a tombstone)."""

    key: dict[str, Any]
    value: dict[str, Any] | None

    @property
    def partition_key(self) -> int:
        return int(self.key["id"])


@dataclass
class History:
    events: list[Event] = field(default_factory=list)
    #: the source table at the end: id -> row
    table: dict[int, dict[str, Any]] = field(default_factory=dict)


def source_block(ts_ms: int, tx: int, lsn: int, snapshot: bool) -> dict[str, Any]:
    return {
        "version": "3.1.0.Final",
        "connector": "postgresql",
        "name": "pg",
        "ts_ms": ts_ms,
        "snapshot": "true" if snapshot else "false",
        "db": "test",
        "sequence": json.dumps([None, str(lsn)]),
        "schema": "public",
        "table": "orders",
        "txId": tx,
        "lsn": lsn,
        "xmin": None,
    }


def history(
    *, snapshot_rows: int = 20, changes: int = 300, full: bool = True, seed: int = 39
) -> History:
    """A change history of table ``orders`` (``id``, ``status``, ``qty``): a snapshot of
    ``snapshot_rows`` rows, then ``changes`` row changes in transactions of 1 to 4
    changes. ``full``: ``REPLICA IDENTITY FULL`` (else ``DEFAULT``)."""
    rng = random.Random(seed)
    out = History()
    table = out.table
    lsn = 24_000_000
    ts = 1_714_000_000_000
    tx = 500
    next_id = 1

    def emit(op: str, before: Any, after: Any, snapshot: bool = False) -> None:
        nonlocal lsn
        lsn += rng.randint(40, 400)
        row = after if after is not None else before
        envelope = {
            "before": before,
            "after": after,
            "source": source_block(ts, tx, lsn, snapshot),
            "op": op,
            "ts_ms": ts + 120,
            "transaction": None,
        }
        out.events.append(Event({"id": row["id"]}, envelope))
        if op == "d":
            out.events.append(Event({"id": row["id"]}, None))  # Debezium's tombstone

    def new_row() -> dict[str, Any]:
        nonlocal next_id
        row = {"id": next_id, "status": rng.choice(STATUSES), "qty": rng.randint(1, 50)}
        next_id += 1
        return row

    for _ in range(snapshot_rows):
        row = new_row()
        table[row["id"]] = row
        emit("r", None, dict(row), snapshot=True)
    done = 0
    while done < changes:
        tx += 1
        ts += rng.randint(5, 2000)
        for _ in range(rng.randint(1, 4)):
            done += 1
            choice = rng.random()
            if not table or choice < 0.3:
                row = new_row()
                table[row["id"]] = row
                emit("c", None, dict(row))
            elif choice < 0.75:
                rid = rng.choice(sorted(table))
                old = table[rid]
                new = {**old, "status": rng.choice(STATUSES), "qty": rng.randint(1, 50)}
                table[rid] = new
                emit("u", dict(old) if full else None, dict(new))
            elif choice < 0.92:
                rid = rng.choice(sorted(table))
                old = table.pop(rid)
                emit("d", dict(old) if full else {"id": rid, "status": None, "qty": None}, None)
            else:  # a primary-key change: Debezium writes a delete and a create
                rid = rng.choice(sorted(table))
                old = table.pop(rid)
                moved = {**old, "id": next_id}
                next_id += 1
                table[moved["id"]] = moved
                emit("d", dict(old) if full else {"id": rid, "status": None, "qty": None}, None)
                emit("c", None, dict(moved))
    return out


def produce_events(topic: str, events: list[Event], partitions: int, encode: Any = None) -> None:
    """Write ``events`` to ``topic`` keyed by their JSON key, to partition
    ``id % partitions`` (every change of a row in one partition, in order, as Debezium's
    key hashing gives); values encoded by ``encode(envelope)`` (default: JSON)."""
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5, "acks": "all"})
    errors: list[str] = []
    for e in events:
        if e.value is None:
            value = None
        elif encode is not None:
            value = encode(e.value)
        else:
            value = json.dumps(e.value).encode()
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    json.dumps(e.key, separators=(",", ":")).encode(),
                    partition=e.partition_key % partitions,
                    on_delivery=lambda err, _m: errors.append(str(err)) if err else None,
                )
                break
            except BufferError:
                producer.poll(0.1)  # the local queue is full: let deliveries drain it
    left = producer.flush(60)
    assert left == 0 and not errors, f"producing to {topic}: {left} unacknowledged, {errors[:3]}"


# -------------------------------------------------------------- JsonConverter wrapper


def price_of(row: dict[str, Any]) -> decimal.Decimal:
    """The ``price`` column the wrapped events add: a decimal(10, 2) from ``qty``."""
    return decimal.Decimal(row["qty"] * 137).scaleb(-2)


def _b64_decimal(value: decimal.Decimal, scale: int) -> str:
    unscaled = int(value.scaleb(scale))
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def _value_schema(name: str) -> dict[str, Any]:
    return {
        "type": "struct",
        "optional": True,
        "name": "pg.public.orders.Value",
        "field": name,
        "fields": [
            {"type": "int32", "optional": False, "field": "id"},
            {"type": "string", "optional": True, "field": "status"},
            {"type": "int32", "optional": True, "field": "qty"},
            {
                "type": "bytes",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Decimal",
                "version": 1,
                "parameters": {"scale": "2", "connect.decimal.precision": "10"},
                "field": "price",
            },
        ],
    }


CONNECT_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "optional": False,
    "name": "pg.public.orders.Envelope",
    "fields": [
        _value_schema("before"),
        _value_schema("after"),
        {
            "type": "struct",
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "field": "source",
            "fields": [
                {"type": "string", "optional": False, "field": "connector"},
                {"type": "int64", "optional": False, "field": "ts_ms"},
                {"type": "int64", "optional": True, "field": "txId"},
                {"type": "int64", "optional": True, "field": "lsn"},
            ],
        },
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
    ],
}


def with_price(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """``row`` with its price encoded as Kafka Connect's JsonConverter writes a
    ``Decimal`` (base64 of the unscaled two's-complement integer); a key-only row (a
    DEFAULT replica identity's delete) gets a null price."""
    if row is None:
        return None
    price = None if row["qty"] is None else _b64_decimal(price_of(row), 2)
    return {**row, "price": price}


def connect_json(envelope: dict[str, Any]) -> bytes:
    """``envelope`` as Kafka Connect's JsonConverter writes it with
    ``schemas.enable=true``: ``{"schema": ..., "payload": ...}``, prices added."""
    payload = {
        **envelope,
        "before": with_price(envelope["before"]),
        "after": with_price(envelope["after"]),
    }
    return json.dumps({"schema": CONNECT_SCHEMA, "payload": payload}).encode()


# ------------------------------------------------------------------------------- Avro


def avro_envelope(extra_column: bool = False) -> dict[str, Any]:
    """The Avro schema of the envelope as Debezium's AvroConverter registers it (a
    ``Value`` record for ``before``/``after``, a ``Source`` record); ``extra_column``: a
    version 2 of the table with an added nullable column ``note``."""
    value_fields: list[dict[str, Any]] = [
        {"name": "id", "type": "int"},
        {"name": "status", "type": ["null", "string"], "default": None},
        {"name": "qty", "type": ["null", "int"], "default": None},
    ]
    if extra_column:
        value_fields.append({"name": "note", "type": ["null", "string"], "default": None})
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "pg.public.orders",
        "fields": [
            {
                "name": "before",
                "type": ["null", {"type": "record", "name": "Value", "fields": value_fields}],
                "default": None,
            },
            {"name": "after", "type": ["null", "Value"], "default": None},
            {
                "name": "source",
                "type": {
                    "type": "record",
                    "name": "Source",
                    "namespace": "io.debezium.connector.postgresql",
                    "fields": [
                        {"name": "version", "type": "string"},
                        {"name": "connector", "type": "string"},
                        {"name": "name", "type": "string"},
                        {"name": "ts_ms", "type": "long"},
                        {"name": "snapshot", "type": ["null", "string"], "default": None},
                        {"name": "db", "type": "string"},
                        {"name": "sequence", "type": ["null", "string"], "default": None},
                        {"name": "schema", "type": "string"},
                        {"name": "table", "type": "string"},
                        {"name": "txId", "type": ["null", "long"], "default": None},
                        {"name": "lsn", "type": ["null", "long"], "default": None},
                        {"name": "xmin", "type": ["null", "long"], "default": None},
                    ],
                },
            },
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }


def read_records(topic: str, timeout_s: float = 60.0) -> list[tuple[int, Any, Any]]:
    """Every record a ``read_committed`` consumer sees in ``topic`` now, as
    ``(partition, key, value)`` with key and value JSON-decoded (None for a tombstone),
    partition by partition in offset order."""
    import time
    import uuid

    import pytest
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": f"lgtest-dbz-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in parts
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: dict[int, list[tuple[int, Any, Any]]] = {p: [] for p in parts}
        done = {p for p in parts if ends[p] == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(parts):
            if time.monotonic() > deadline:
                pytest.fail(f"reading {topic}: partitions {sorted(set(parts) - done)} unfinished")
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        done.add(msg.partition())
                        continue
                    raise RuntimeError(str(msg.error()))
                key, value = msg.key(), msg.value()
                out[msg.partition()].append(
                    (
                        msg.partition(),
                        None if key is None else json.loads(key),
                        None if value is None else json.loads(value),
                    )
                )
        return [r for p in parts for r in out[p]]
    finally:
        consumer.close()


def compacted(records: list[tuple[int, Any, Any]]) -> dict[str, Any]:
    """What a compacted topic keeps: the last value of each key (by its JSON text), a
    tombstone removing the key."""
    view: dict[str, Any] = {}
    for _, key, value in records:
        text = json.dumps(key, sort_keys=True)
        if value is None:
            view.pop(text, None)
        else:
            view[text] = value
    return view

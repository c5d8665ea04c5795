"""Apache Kafka helpers of the connector tests: the broker on 127.0.0.1:9092 (started by
``scripts/services.sh``), topics with unique names, producing test records, reading what
a ``read_committed`` consumer sees, and the transactions a prefix left open."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from conftest import wait_until

BOOTSTRAP = os.environ.get("LOCKGATE_TEST_KAFKA", "127.0.0.1:9092")


def admin() -> AdminClient:
    return AdminClient({"bootstrap.servers": BOOTSTRAP})


#: the topic config every test topic gets: no time-based deletion
KEEP_RECORDS = {"retention.ms": "-1"}


def create_topic(name: str, partitions: int, config: dict[str, str] | None = None) -> str:
    """Create ``name`` with ``partitions`` partitions (replication 1, topic ``config``)
    and wait until every partition has a leader; fails naming the broker when it does
    not answer.

    Test topics keep their records whatever their timestamps (``retention.ms=-1``
    unless ``config`` sets it): tests write event times of 1970 or 2020, and the
    broker's time retention (24 h), checked every 5 minutes, would otherwise delete a
    topic's whole log between a test's writes and its reads (a bounded reader then
    waits for records that are gone)."""
    client = admin()
    try:
        topic = NewTopic(name, partitions, 1, config={**KEEP_RECORDS, **(config or {})})
        for future in client.create_topics([topic]).values():
            future.result(30)
    except KafkaException as e:
        pytest.fail(
            f"cannot create Kafka topic {name!r} on {BOOTSTRAP}: {e}; is the broker running "
            "(bash scripts/services.sh starts it)?"
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = client.list_topics(name, timeout=10).topics.get(name)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return name
        time.sleep(0.05)  # bounded polling for the partitions' leaders
    pytest.fail(f"Kafka topic {name!r}: not every partition had a leader within 30 s")


def add_partitions(name: str, total: int) -> None:
    """Grow topic ``name`` to ``total`` partitions; returns when each has a leader."""
    client = admin()  # held: a collected client destroys its handle before the answer
    for future in client.create_partitions([NewPartitions(name, total)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = client.list_topics(name, timeout=10).topics.get(name)
        if (
            meta is not None
            and len(meta.partitions) == total
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.05)  # bounded polling for the new partitions' leaders
    pytest.fail(f"Kafka topic {name!r}: the new partitions had no leader within 30 s")


def produce(
    topic: str,
    values: list[Any],
    *,
    partition: int | None = None,
    partitioner: Any = None,
    timestamps: list[int] | None = None,
    raw: bool = False,
) -> None:
    """Write ``values`` to ``topic`` (JSON unless ``raw``: then bytes as given), to
    ``partition``, or to ``partitioner(index, value)``, with optional timestamps (ms);
    returns when every record is acknowledged."""
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5, "acks": "all"})
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for i, value in enumerate(values):
        data = value if raw else json.dumps(value).encode()
        kwargs: dict[str, Any] = {"on_delivery": delivered}
        p = partitioner(i, value) if partitioner is not None else partition
        if p is not None:
            kwargs["partition"] = p
        if timestamps is not None:
            kwargs["timestamp"] = timestamps[i]
        while True:
            try:
                producer.produce(topic, data, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)  # the local queue is full: let deliveries drain it
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    assert left == 0 and not errors, f"producing to {topic}: {left} unacknowledged, {errors[:3]}"


def read_committed(topic: str, *, raw: bool = False, timeout_s: float = 60.0) -> list[Any]:
    """Every record a ``read_committed`` consumer sees in ``topic`` now, partition by
    partition in offset order (JSON-decoded unless ``raw``). Reads up to each partition's
    last stable offset; fails if that takes longer than ``timeout_s`` (a transaction left
    open holds the last stable offset back)."""
    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": f"lgtest-reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = sorted(meta.partitions)
        ends = {}
        for p in parts:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: dict[int, list[Any]] = {p: [] for p in parts}
        done = {p for p in parts if ends[p] == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(parts):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"reading {topic} (read_committed) took over {timeout_s} s: partitions "
                    f"{sorted(set(parts) - done)} did not reach their end; an open "
                    "transaction holds the last stable offset back?"
                )
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        done.add(msg.partition())
                        continue
                    raise KafkaException(msg.error())
                value = msg.value()
                out[msg.partition()].append(value if raw else json.loads(value))
        return [v for p in parts for v in out[p]]
    finally:
        consumer.close()


def wait_stable(topic: str, timeout_s: float = 30.0) -> None:
    """Wait until no partition of ``topic`` has a transaction still ending: a producer's
    ``commit_transaction()`` returns once the coordinator logged the commit, before the
    partitions' commit markers are written, and until then a ``read_committed`` reader
    (and a bounded source's end) stops at the last stable offset, before the
    transaction's records. Fails after ``timeout_s`` naming the partitions."""
    consumers = {
        iso: Consumer(
            {
                "bootstrap.servers": BOOTSTRAP,
                "group.id": f"lgtest-stable-{uuid.uuid4().hex[:8]}",
                "isolation.level": iso,
            }
        )
        for iso in ("read_committed", "read_uncommitted")
    }
    try:
        parts = sorted(
            consumers["read_committed"].list_topics(topic, timeout=10).topics[topic].partitions
        )
        seen: dict[int, tuple[int, int]] = {}

        def settled() -> bool:
            for p in parts:
                ends = tuple(
                    consumers[iso].get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for iso in ("read_committed", "read_uncommitted")
                )
                seen[p] = ends  # type: ignore[assignment]
            return all(stable == high for stable, high in seen.values())

        wait_until(
            settled,
            lambda: (
                f"{topic}: a transaction did not end within {timeout_s} s "
                f"(partition: (last stable offset, high watermark) {seen})"
            ),
            timeout_s,
            every_s=0.05,
        )
    finally:
        for c in consumers.values():
            c.close()


def open_transactions(prefix: str) -> list[str]:
    """The transactional ids starting with ``prefix`` whose transaction is still open
    (Ongoing, or its commit or abort not finished), from the broker's admin API."""
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        listings = client.list_transactions(
            state_filters=["Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"]
        )
        ids = [
            t.transactional_id
            for per_broker in listings.values()
            for t in per_broker
            if t.transactional_id.startswith(prefix)
        ]
        if not ids:
            return []
        described = client.describe_transactions(ids)
        return sorted(
            tid
            for tid, d in described.items()
            if d.state.value not in ("Empty", "CompleteCommit", "CompleteAbort", "Dead")
        )
    finally:
        client.close()


@pytest.fixture
def kafka_topic(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make(partitions=1, config=None)`` creates a topic with a unique name and returns it; every
    topic made is deleted at the end."""
    made: list[str] = []

    def make(partitions: int = 1, config: dict[str, str] | None = None) -> str:
        base = re.sub(r"[^a-zA-Z0-9_-]", "_", request.node.name[:40])
        name = create_topic(f"lgtest-{base}-{uuid.uuid4().hex[:8]}", partitions, config)
        made.append(name)
        return name

    yield make
    if made:
        client = admin()  # held: a collected client destroys its handle before the answer
        for future in client.delete_topics(made).values():
            try:
                future.result(30)
            except KafkaException:
                pass  # already gone

"""Why lockgate moves Kafka records with confluent-kafka: the two Python clients side by
side on the same broker, producing and consuming the same small JSON records.

Cases: ``produce`` (send N records of ~40 bytes and wait for every acknowledgement, acks=all,
idempotent), ``produce_transactional`` (the same inside one transaction, committed), and
``consume`` (read the N records back from offset 0, read_committed), for confluent-kafka
(librdkafka, C) and kafka-python (pure Python). Values are pre-encoded, so the figures are
the clients' own cost. One JSON line per case, with the core count.

Run (the broker from ``bash scripts/services.sh``): ``.venv/bin/python bench/kafka_clients.py
[--records 200000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid

# bench/ holds kafka.py: keep it from shadowing the kafka-python package
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(__file__)]

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = "127.0.0.1:9092"


def new_topic() -> str:
    name = f"lgbench-clients-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(30)
    return name


def confluent_produce(topic: str, values: list[bytes], transactional: bool) -> None:
    config = {"bootstrap.servers": BOOTSTRAP, "enable.idempotence": True, "linger.ms": 5}
    if transactional:
        config["transactional.id"] = f"lgbench-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    if transactional:
        producer.commit_transaction(60)
    assert producer.flush(60) == 0


def kafka_python_produce(topic: str, values: list[bytes], transactional: bool) -> None:
    from kafka import KafkaProducer

    kwargs = {"bootstrap_servers": BOOTSTRAP, "enable_idempotence": True, "linger_ms": 5}
    if transactional:
        kwargs["transactional_id"] = f"lgbench-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(**kwargs)
    if transactional:
        producer.init_transactions()
        producer.begin_transaction()
    for value in values:
        producer.send(topic, value, partition=0)
    if transactional:
        producer.commit_transaction()
    producer.flush()
    producer.close()


def confluent_consume(topic: str, n: int) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": "lgbench",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    while got < n:
        got += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
    consumer.close()


def kafka_python_consume(topic: str, n: int) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=BOOTSTRAP, enable_auto_commit=False, isolation_level="read_committed"
    )
    tp = KTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = 0
    while got < n:
        for records in consumer.poll(timeout_ms=1000, max_records=10_000).values():
            got += len(records)
    consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    n = parser.parse_args().records
    values = [json.dumps({"key": i % 1000, "ts": 1_700_000_000_000 + i}).encode() for i in range(n)]
    clients = {
        "confluent-kafka": (confluent_produce, confluent_consume),
        "kafka-python": (kafka_python_produce, kafka_python_consume),
    }
    for client, (produce, consume) in clients.items():
        for case, transactional in (("produce", False), ("produce_transactional", True)):
            topic = new_topic()
            start = time.perf_counter()
            produce(topic, values, transactional)
            seconds = time.perf_counter() - start
            print_case(case, client, n, seconds)
        start = time.perf_counter()
        consume(topic, n)
        print_case("consume", client, n, time.perf_counter() - start)


def print_case(case: str, client: str, n: int, seconds: float) -> None:
    line = {
        "bench": "kafka_clients",
        "case": case,
        "client": client,
        "records": n,
        "seconds": round(seconds, 3),
        "records_per_s": round(n / seconds),
        "cores": os.cpu_count(),
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

"""End-to-end latency through Kafka, after the method of the public latency suite
(databricks-solutions/latency-benchmarks): issue 42's first part, begun.

A producer process sends records of about ``--size`` bytes at a fixed rate (default
10,000/s) into a fresh topic of 2 partitions; each value starts with its send time (epoch
nanoseconds, 19 ASCII digits, then ``|``), so the time travels through any system that
keeps the value's head. A consumer process reads the output topic and takes, for each
record, its receive time minus that send time. Records sent in the first ``--warmup``
seconds are left out; one JSON line per case gives p50, p90, p95, p99 and max (ms), the
counts sent and received, and the core count. Producer and consumer run in processes of
their own, never in the job's interpreter.

Cases (``--cases``):

=========  ===============================================================================
floor      the harness alone: the consumer reads the producer's topic, nothing between
local-A    lockgate on the local executor, Query A: each value's payload truncated to
           500 KB and base64-encoded (its send-time head kept), KafkaSource(format=
           "bytes") -> map -> KafkaSink(format="bytes", delivery="at_least_once"),
           parallelism 2, no checkpoints
=========  ===============================================================================

Each case's figures are also given as what it adds over the floor of the same run
(``over_floor_ms``). Client settings: the producer sends with ``linger.ms=0`` and
``acks=1``; the consumer fetches with ``fetch.wait.max.ms=10``; lockgate's source and
sink use their defaults (docs/kafka.md). Not yet here (issue 42): Queries B and C, the
Spark executor, exactly-once, Flink and Spark Structured Streaming side by side, other
rates and backpressure.

Run (the broker from ``bash scripts/services.sh``)::

    .venv/bin/python bench/latency.py [--rate 10000] [--seconds 30] [--warmup 10]
                                      [--cases floor,local-A]
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing as mp
import os
import sys
import time
import uuid
from typing import Any

# bench/ holds kafka.py: keep it from shadowing the kafka-python package
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(__file__)]

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

#: the send time's head: 19 digits of epoch nanoseconds and a separator
HEAD = 20
#: Query A truncates each payload to this many bytes
TRUNCATE = 500 * 1024


def new_topic(bootstrap: str, tag: str) -> str:
    name = f"lgbench-latency-{tag}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 2, 1)]).values():
        future.result(30)
    return name


def produce(bootstrap: str, topic: str, rate: int, seconds: float, size: int, sent: Any) -> None:
    """Send ``rate`` records a second for ``seconds``, each value its send time's head
    and a payload filling it to ``size`` bytes, paced every millisecond."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    payload = b"x" * max(0, size - HEAD)
    start = time.perf_counter()
    n = 0
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
        due = int(elapsed * rate)
        while n < due:
            head = b"%019d|" % time.time_ns()
            producer.produce(topic, head + payload, partition=n % 2)
            n += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(30)
    sent.value = n


def consume(bootstrap: str, topic: str, until: float, warmup_ns: int, ready: Any, out: Any) -> None:
    """Read ``topic`` from its end until ``until`` (epoch seconds); put the latencies
    (ms) of the records sent after ``warmup_ns`` and the count received on ``out``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lgbench-latency-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "isolation.level": "read_uncommitted",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    consumer.consume(num_messages=1, timeout=1.0)  # connected and assigned
    ready.set()
    latencies: list[float] = []
    received = 0
    while time.time() < until:
        # poll() returns at the first record; consume(timeout=...) would wait out its
        # timeout unless num_messages came, adding up to that timeout to every latency
        first = consumer.poll(0.05)
        if first is None:
            continue
        for m in [first, *consumer.consume(num_messages=1000, timeout=0)]:
            now = time.time_ns()
            if m.error() is not None or m.value() is None:
                continue
            received += 1
            sent_ns = int(m.value()[: HEAD - 1])
            if sent_ns >= warmup_ns:
                latencies.append((now - sent_ns) / 1e6)
    consumer.close()
    out.put((received, latencies))


def query_a(value: bytes) -> bytes:
    """Query A: the payload truncated to 500 KB and base64-encoded, the head kept."""
    return value[:HEAD] + base64.b64encode(value[HEAD : HEAD + TRUNCATE])


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {
        "p50": at(0.50),
        "p90": at(0.90),
        "p95": at(0.95),
        "p99": at(0.99),
        "max": round(ordered[-1], 2),
    }


def run_case(case: str, args: argparse.Namespace) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    source = new_topic(args.bootstrap, "in")
    output = source if case == "floor" else new_topic(args.bootstrap, "out")
    client = None
    if case == "local-A":
        import lockgate as lg
        from lockgate.connectors import KafkaSink, KafkaSource

        env = lg.StreamEnvironment(parallelism=2)
        (
            env.from_source(KafkaSource(args.bootstrap, source, format="bytes"))
            .map(query_a)
            .sink_to(KafkaSink(args.bootstrap, output, format="bytes", delivery="at_least_once"))
        )
        client = env.execute_async("latency-A", executor=lg.LocalExecutor())
    ready = ctx.Event()
    out: Any = ctx.Queue()
    sent = ctx.Value("q", 0)
    start = time.time()
    until = start + args.seconds + args.drain
    warmup_ns = int((start + args.warmup) * 1e9)
    reader = ctx.Process(
        target=consume, args=(args.bootstrap, output, until, warmup_ns, ready, out)
    )
    reader.start()
    if not ready.wait(60):
        raise RuntimeError("the consumer did not start within 60 s")
    writer = ctx.Process(
        target=produce, args=(args.bootstrap, source, args.rate, args.seconds, args.size, sent)
    )
    writer.start()
    writer.join()
    received, latencies = out.get(timeout=args.seconds + args.drain + 60)
    reader.join()
    if client is not None:
        client.cancel()
    return {
        "bench": "latency",
        "case": case,
        "rate": args.rate,
        "size": args.size,
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "sent": sent.value,
        "received": received,
        "measured": len(latencies),
        **percentiles(latencies),
        "cores": os.cpu_count(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default=os.environ.get("LOCKGATE_TEST_KAFKA", "127.0.0.1:9092"))
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--drain", type=float, default=5.0, help="seconds read after the last send")
    ap.add_argument("--size", type=int, default=1200)
    ap.add_argument("--cases", default="floor,local-A")
    args = ap.parse_args()
    floor: dict[str, Any] | None = None
    for case in args.cases.split(","):
        row = run_case(case, args)
        if case == "floor":
            floor = row
        elif floor is not None and "p50" in row and "p50" in floor:
            row["over_floor_ms"] = {
                k: round(row[k] - floor[k], 2) for k in ("p50", "p90", "p95", "p99")
            }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

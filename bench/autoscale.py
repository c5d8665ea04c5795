"""The autoscaler under a stepped Kafka input (issue 43, part 4): one JSON line per
executor.

A producer process sends records at a rate that steps through ``--phases`` (default
20,000/s for 60 s, 200,000/s for 60 s, 20,000/s for 120 s) into a fresh topic of
``PARTITIONS`` partitions; each value is its send time (epoch ns), a sequence number
and its key (``id % KEYS``), padded to ``--size`` bytes, and goes to partition
``key % PARTITIONS``, so each key's records keep their order. The job, autoscaled
(``env.autoscaling``, bounds 1..``--max-parallelism``), reads the topic
(``KafkaSource``), counts per key (a ``KeyedProcessFunction`` with a ``ValueState``) and
writes ``head + count`` exactly once (``KafkaSink(delivery="exactly_once")``,
checkpoints every ``--checkpoint-ms``). A consumer process reads the output
``read_committed``.

Each row gives, per phase, the rate sent, the parallelism of the count at the phase's
end, the records' latency (receive time minus send time) p50/p99 over the whole phase
and over its steady part (from 10 s after the phase's last applied rescale, or after its
start, to its end), every rescale (when, from what to what, why, how long), and the
exactness check against the failure-free result: every record sent read once, and each
key's counts 1..n in its records' order (what a run without rescales writes, since a
key's records keep their partition's order). With the core count.

Run (the broker from ``bash scripts/services.sh``)::

    .venv/bin/python bench/autoscale.py [--executor local|spark|both]
        [--phases 20000@60,200000@60,20000@120] [--max-parallelism 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from latency import delete_topics, percentiles

import lockgate as lg

PARTITIONS = 4
KEYS = 1000
#: the value's head: send ns (19) | id (12) | key (4)
HEAD = 37
BOOTSTRAP = "127.0.0.1:9092"


def key_of(value: bytes) -> int:
    return int(value[33:37])


class Count(lg.KeyedProcessFunction):
    """Counts per key; emits the head and the count."""

    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value: bytes, ctx: Any) -> Any:
        n = self.count.value() + 1
        self.count.update(n)
        yield value[:HEAD] + b"|%d" % n


def parse_phases(spec: str) -> list[tuple[int, float]]:
    phases = []
    for part in spec.split(","):
        rate, _, seconds = part.partition("@")
        phases.append((int(rate), float(seconds)))
    return phases


def new_topic(bootstrap: str, tag: str) -> str:
    name = f"lgbench-autoscale-{tag}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)
    return name


def produce(bootstrap: str, topic: str, phases: list[tuple[int, float]], size: int,
            t0: Any, sent: Any) -> None:  # fmt: skip
    """Send each phase's rate for its seconds, paced every millisecond."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": 1,
            "queue.buffering.max.messages": 2_000_000,
        }  # fmt: skip
    )
    pad = b"x" * max(0, size - HEAD)
    t0.value = time.time_ns()
    start = time.perf_counter()
    n = 0
    base_n, base_t = 0, 0.0
    for rate, seconds in phases:
        while True:
            elapsed = time.perf_counter() - start
            if elapsed >= base_t + seconds:
                break
            due = base_n + int((elapsed - base_t) * rate)
            while n < due:
                key = n % KEYS
                value = b"%019d|%012d|%04d" % (time.time_ns(), n, key) + pad
                try:
                    producer.produce(topic, value, partition=key % PARTITIONS)
                except BufferError:
                    producer.poll(0.01)
                    continue
                n += 1
            producer.poll(0)
            time.sleep(0.001)  # pacing, not synchronization
        base_n, base_t = n, base_t + seconds
    producer.flush(60)
    sent.value = n


def consume(bootstrap: str, topic: str, deadline_ns: Any, produced: Any, sent: Any,
            out: Any) -> None:  # fmt: skip
    """Read the output read_committed until every record sent came or the deadline."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lgbench-autoscale-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    rows: list[tuple[int, int, int, int]] = []
    while time.time_ns() < deadline_ns.value or not deadline_ns.value:
        if produced.is_set() and len(rows) >= sent.value:
            break
        first = consumer.poll(0.05)
        if first is None:
            continue
        for m in [first, *consumer.consume(num_messages=5000, timeout=0)]:
            now = time.time_ns()
            if m.error() is not None or m.value() is None:
                continue
            v = m.value()
            rows.append((int(v[:19]), now, int(v[20:32]), int(v[HEAD + 1 :])))
    consumer.close()
    out.put(rows)


def exactness(rows: list[tuple[int, int, int, int]], sent: int) -> dict[str, Any]:
    """Every record sent read once, each key's counts 1..n in id order."""
    ids: dict[int, int] = {}
    for _, _, i, _ in rows:
        ids[i] = ids.get(i, 0) + 1
    duplicated = sum(c - 1 for c in ids.values() if c > 1)
    lost = sum(1 for i in range(sent) if i not in ids)
    by_key: dict[int, list[tuple[int, int]]] = {}
    for _, _, i, n in rows:
        by_key.setdefault(i % KEYS, []).append((i, n))
    wrong_counts = 0
    for pairs in by_key.values():
        pairs.sort()
        wrong_counts += sum(1 for j, (_, n) in enumerate(pairs) if n != j + 1)
    return {
        "sent": sent,
        "read": len(rows),
        "lost": lost,
        "duplicated": duplicated,
        "wrong_counts": wrong_counts,
        "exact": lost == 0 and duplicated == 0 and wrong_counts == 0,
    }


def run(executor_name: str, args: argparse.Namespace) -> dict[str, Any]:
    from lockgate.connectors import KafkaSink, KafkaSource

    phases = parse_phases(args.phases)
    source, output = new_topic(args.bootstrap, "in"), new_topic(args.bootstrap, "out")
    work = Path(tempfile.mkdtemp(prefix="lgbench-autoscale-"))
    env = lg.StreamEnvironment(parallelism=1, max_parallelism=64)
    env.enable_checkpointing(args.checkpoint_ms)
    env.checkpoint_config.storage = str(work / "checkpoints")
    env.autoscaling(
        min_parallelism=1,
        max_parallelism=args.max_parallelism,
        target_utilization=0.7,
        stabilization=timedelta(seconds=args.stabilization),
        scale_down_delay=timedelta(seconds=args.scale_down_delay),
        metrics_window=timedelta(seconds=args.stabilization),
        interval=timedelta(seconds=1),
    )
    (
        env.from_source(KafkaSource(args.bootstrap, source, format="bytes"), name="kafka-in")
        .uid("kafka-in")
        .key_by(key_of)
        .process(Count(), name="count")
        .uid("count")
        .sink_to(
            KafkaSink(
                args.bootstrap,
                output,
                format="bytes",
                delivery="exactly_once",
                transactional_id_prefix=f"lgbench-autoscale-{output}",
            ),
            name="kafka-out",
        )  # fmt: skip
        .uid("kafka-out")
    )
    if executor_name == "local":
        executor: Any = lg.LocalExecutor()
    else:
        from lockgate.executor.spark import SparkExecutor

        executor = SparkExecutor(
            master=f"local[{args.max_parallelism}]", conf={"spark.ui.enabled": "false"}
        )
        executor.warm_up()
    ctx = mp.get_context("spawn")
    t0, sent, deadline = ctx.Value("q", 0), ctx.Value("q", 0), ctx.Value("q", 0)
    produced, out = ctx.Event(), ctx.Queue()
    consumer = ctx.Process(target=consume, args=(args.bootstrap, output, deadline, produced,
                                                 sent, out))  # fmt: skip
    consumer.start()
    client = env.execute_async(f"autoscale-{executor_name}", executor=executor)
    timeline: list[tuple[float, int]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.5):
            p = client.parallelism().get("count")
            if p is not None and (not timeline or timeline[-1][1] != p):
                timeline.append((time.time(), p))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    while not client.running and not client.done():
        time.sleep(0.1)  # bounded by the job's start (or its end)
    producer = ctx.Process(target=produce, args=(args.bootstrap, source, phases, args.size,
                                                 t0, sent))  # fmt: skip
    producer.start()
    producer.join()
    produced.set()
    deadline.value = time.time_ns() + int(args.drain * 1e9)
    rows = out.get(timeout=args.drain + 120)
    consumer.join(30)
    stop.set()
    decisions = client.rescales()
    client.cancel()
    try:
        client.wait(120)
    except Exception as e:  # noqa: BLE001 - the row says so
        print(f"the job ended with {e!r}", file=sys.stderr)
    if executor_name == "spark":
        executor.spark.stop()
    delete_topics(args.bootstrap, {source, output})
    return summarize(executor_name, args, phases, t0.value, sent.value, rows, decisions, timeline)


def summarize(executor_name: str, args: argparse.Namespace, phases: list[tuple[int, float]],
              t0_ns: int, sent: int, rows: list[Any], decisions: list[Any],
              timeline: list[tuple[float, int]]) -> dict[str, Any]:  # fmt: skip
    applied = [d.time for d in decisions if d.status == "applied"]
    out_phases = []
    start_s = t0_ns / 1e9
    for rate, seconds in phases:
        end_s = start_s + seconds
        last = max([t + (d.duration_ms or 0) / 1000 for t, d in zip(applied, [
            d for d in decisions if d.status == "applied"], strict=True) if start_s <= t < end_s],
            default=start_s)  # fmt: skip
        steady_from = last + 10
        whole = [(r - s) / 1e6 for s, r, _, _ in rows if start_s * 1e9 <= s < end_s * 1e9]
        steady = [(r - s) / 1e6 for s, r, _, _ in rows if steady_from * 1e9 <= s < end_s * 1e9]
        p_end = next(
            (p for t, p in reversed(timeline) if t <= end_s), timeline[0][1] if timeline else None
        )
        out_phases.append({
            "rate": rate, "seconds": seconds, "parallelism_at_end": p_end,
            "latency_ms": percentiles(whole), "steady_from_s": round(steady_from - start_s, 1),
            "steady_latency_ms": percentiles(steady), "steady_records": len(steady),
        })  # fmt: skip
        start_s = end_s
    series: dict[int, list[float]] = {}
    for s, r, _, _ in rows:
        series.setdefault(int((s - t0_ns) // 10_000_000_000), []).append((r - s) / 1e6)
    return {
        "bench": "autoscale",
        "executor": executor_name,
        "cores": os.cpu_count(),
        "phases": out_phases,
        # by send time, 10 s windows: start (s), records, p50 and p99 latency (ms)
        "series": [
            {"t_s": w * 10, "n": len(v), **{k: percentiles(v)[k] for k in ("p50", "p99")}}
            for w, v in sorted(series.items())
        ],
        "rescales": [
            {
                "t_s": round(d.time - t0_ns / 1e9, 1),
                "direction": d.direction,
                "status": d.status,
                "count": [d.old.get("count"), d.new.get("count")],
                "duration_ms": d.duration_ms,
                "reason": d.reason,
                "error": d.error,
            }
            for d in decisions
        ],  # fmt: skip
        "exactness": exactness(rows, sent),
        "config": {
            "autoscaling": f"1..{args.max_parallelism}, target 0.7, stabilization and window "
            f"{args.stabilization} s, scale-down delay {args.scale_down_delay} s, interval 1 s",
            "checkpoints": f"exactly-once every {args.checkpoint_ms} ms",
            "record_bytes": args.size,
            "partitions": PARTITIONS,
            "keys": KEYS,
        },
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--executor", default="both", choices=["local", "spark", "both"])
    p.add_argument("--phases", default="20000@60,200000@60,20000@120")
    p.add_argument("--max-parallelism", type=int, default=2)
    p.add_argument("--checkpoint-ms", type=int, default=1000)
    p.add_argument("--stabilization", type=float, default=10.0)
    p.add_argument("--scale-down-delay", type=float, default=30.0)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--drain", type=float, default=120.0)
    p.add_argument("--bootstrap", default=BOOTSTRAP)
    args = p.parse_args(argv)
    for name in ["local", "spark"] if args.executor == "both" else [args.executor]:
        print(json.dumps(run(name, args)), flush=True)


if __name__ == "__main__":
    main()

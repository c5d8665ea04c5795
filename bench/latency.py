"""End-to-end latency through Kafka, after the method of the public latency suite
(databricks-solutions/latency-benchmarks): issue 42, section 1. lockgate, Flink and Spark
Structured Streaming side by side in one run, with the harness floor of the same run.

A producer process sends records of about ``--size`` bytes at a fixed rate (default
10,000/s) into a fresh topic of 2 partitions; each value starts with its send time (epoch
nanoseconds, 19 ASCII digits, then ``|``), so the time travels through any system that
keeps the value's head (every query below keeps it). A consumer process reads the output
topic (``read_committed`` for the exactly-once cases) and takes, for each record, its
receive time minus that send time. Records sent in the first ``--warmup`` seconds are left
out; one JSON line per case gives p50, p90, p95, p99 and max (ms), the counts sent and
received (``not_received``: sent but not read within ``--drain`` after the last send, so
missing from the figures: the system did not keep up), the case's configuration and the
core count, and what the case adds over the floor of the same run at the same rate
(``over_floor_ms``). Producer and consumer run in processes of their own, never in the
job's interpreter; Flink and Spark run in their own virtual environments (``bash
bench/setup_peers.sh flink spark``), as subprocesses (``bench/latency_flink.py``,
``bench/latency_spark.py``). Before a case's measured run
the harness sends probe records (send time 0, never measured or counted) until one comes
out of the job: every system is running and connected when the timing starts.

Queries (every payload is ``"x" * (size - 20)``, as in the public suite, so Query B's key
has a single value, as in the suite):

- A: the payload truncated to 500 KB and base64-encoded: ``head + base64(payload)``.
- B: A plus a keyed count (key = the payload): ``head + count + "|" + base64(payload)``.
- C: a stream-static join: each record gets a random key in [0, 10,000), joined with a
  10,000-row Parquet table ``x -> y = 2x``: ``head + y + "|" + base64(payload)``.

Cases (``--cases``, comma-separated; ``NAME@RATE`` runs a case at another rate, e.g.
``floor@50000,local-A@50000``); the configurations are in ``docs/benchmarks.md``
(Latency) and in each row's ``config``:

=====================  ==============================================================
floor                  the harness alone: the consumer reads the producer's topic
local-{A,B,C}          lockgate, local executor, at-least-once sink, no checkpoints
local-B-eo{100,1000}   lockgate, local executor, Query B, exactly-once sink,
                       checkpoints every 100 ms / 1 s
sparkexec-...          the same on lockgate's Spark executor (``local[2]``)
local-backpressure     local-A with a throttle (a map sleeping every 100 records) at
                       half the input rate for the records of the run's middle third;
                       its row carries per-window p50/p99 (``series``)
flink-{A,B,C}          Flink SQL, at-least-once sink, checkpoints every 1 s
flink-B-eo{100,1000}   Flink SQL Query B, exactly-once sink, checkpoints 100 ms / 1 s
flink-ds-B             PyFlink DataStream Query B (a Python KeyedProcessFunction)
sss-mb-{A,B,C}         Spark Structured Streaming, micro-batch, zero trigger
sss-rtm-{A,C}          Spark Structured Streaming, Real-Time Mode ("5 minutes")
=====================  ==============================================================

A case that cannot run (a peer's environment or jar missing, the job failing, no output
within ``--ready-timeout``) gives a row with ``"error"`` and the run goes on.

Run (the broker from ``bash scripts/services.sh``)::

    .venv/bin/python bench/latency.py [--rate 10000] [--seconds 30] [--warmup 10]
                                      [--cases all|quick-set|floor,local-A,...] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import uuid
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# bench/ holds kafka.py: keep it from shadowing the kafka-python package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def load_bench_module(name: str, by_value: bool = False) -> Any:
    """A module of bench/ by its file (bench/ is off sys.path, see above); ``by_value``:
    cloudpickle ships its functions by value (lockgate's Spark executor's workers cannot
    import it)."""
    import importlib.util

    key = f"lgbench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
        if by_value:
            import cloudpickle

            cloudpickle.register_pickle_by_value(module)
    return sys.modules[key]


LG = load_bench_module("latency_lockgate", by_value=True)
HEAD, TRUNCATE, LOOKUP_ROWS = LG.HEAD, LG.TRUNCATE, LG.LOOKUP_ROWS
query_a, query_b, query_c = LG.query_a, LG.query_b, LG.query_c
payload_key, with_random_key = LG.payload_key, LG.with_random_key
write_lookup_table = LG.write_lookup_table
#: the head of a probe record (send time 0: never measured, never counted)
PROBE_HEAD = b"%019d|" % 0
PARTITIONS = 2

LOCKGATE = {
    f"{ex}-{q}": {"system": "lockgate", "executor": ex, "query": q, "checkpoint_ms": None}
    for ex in ("local", "sparkexec")
    for q in "ABC"
}
for _ex in ("local", "sparkexec"):
    for _ms in (100, 1000):
        LOCKGATE[f"{_ex}-B-eo{_ms}"] = {
            "system": "lockgate", "executor": _ex, "query": "B", "checkpoint_ms": _ms,
        }  # fmt: skip
LOCKGATE["local-backpressure"] = {
    "system": "lockgate", "executor": "local", "query": "A", "checkpoint_ms": None,
    "throttle": True,
}  # fmt: skip
PEERS = {
    "flink-A": {"system": "flink", "query": "A", "checkpoint_ms": 1000, "eo": False},
    "flink-B": {"system": "flink", "query": "B", "checkpoint_ms": 1000, "eo": False},
    "flink-C": {"system": "flink", "query": "C", "checkpoint_ms": 1000, "eo": False},
    "flink-B-eo100": {"system": "flink", "query": "B", "checkpoint_ms": 100, "eo": True},
    "flink-B-eo1000": {"system": "flink", "query": "B", "checkpoint_ms": 1000, "eo": True},
    "flink-ds-B": {
        "system": "flink",
        "query": "B",
        "checkpoint_ms": 1000,
        "eo": False,
        "api": "datastream",
    },  # fmt: skip
    "sss-mb-A": {"system": "spark", "query": "A", "trigger": "microbatch"},
    "sss-mb-B": {"system": "spark", "query": "B", "trigger": "microbatch"},
    "sss-mb-C": {"system": "spark", "query": "C", "trigger": "microbatch"},
    "sss-rtm-A": {"system": "spark", "query": "A", "trigger": "realtime"},
    "sss-rtm-C": {"system": "spark", "query": "C", "trigger": "realtime"},
}
CASES: dict[str, dict[str, Any]] = {"floor": {"system": "harness"}, **LOCKGATE, **PEERS}
#: the full comparison (every case of issue 42 section 1)
ALL = [
    "floor", "local-A", "local-B", "local-C", "sparkexec-A", "sparkexec-B", "sparkexec-C",
    "local-B-eo100", "local-B-eo1000", "sparkexec-B-eo100", "sparkexec-B-eo1000",
    "flink-A", "flink-B", "flink-C", "flink-B-eo100", "flink-B-eo1000", "flink-ds-B",
    "sss-mb-A", "sss-mb-B", "sss-mb-C", "sss-rtm-A", "sss-rtm-C",
    "floor@50000", "local-A@50000", "local-B@50000", "flink-A@50000", "flink-B@50000",
    "sss-rtm-A@50000", "local-backpressure",
]  # fmt: skip


def parse_cases(spec: str, default_rate: int) -> list[tuple[str, int]]:
    """``"floor,local-A@50000"`` -> ``[("floor", default_rate), ("local-A", 50000)]``;
    ``"all"`` is :data:`ALL`. Unknown names and bad rates are refused, naming them."""
    names = ALL if spec.strip() == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ValueError("--cases is empty: give case names, e.g. floor,local-A, or all")
    out = []
    for item in names:
        name, _, rate = item.partition("@")
        if name not in CASES:
            raise ValueError(f"unknown case {name!r}: one of {', '.join(CASES)}")
        if rate and (not rate.isdigit() or int(rate) <= 0):
            raise ValueError(f"case {item!r}: the rate after @ must be a positive integer")
        out.append((name, int(rate) if rate else default_rate))
    return out


# -- measurement --------------------------------------------------------------------------


def percentiles(values: Any) -> dict[str, float]:
    if not len(values):
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


def window_series(
    sent_ns: Any, latency_ms: Any, start_ns: int, width_s: float
) -> list[dict[str, Any]]:
    """Latency over time: the records grouped by send time into windows of ``width_s``
    from ``start_ns``, each window's start (s), count, p50 and p99 (ms)."""
    width_ns = int(width_s * 1e9)
    groups: dict[int, list[float]] = {}
    for s, lat in zip(sent_ns, latency_ms, strict=True):
        groups.setdefault(max(0, (s - start_ns) // width_ns), []).append(lat)
    out = []
    for w in sorted(groups):
        p = percentiles(groups[w])
        out.append({"t_s": round(w * width_s, 3), "n": len(groups[w]), "p50": p["p50"],
                    "p99": p["p99"]})  # fmt: skip
    return out


def over_floor(row: dict[str, Any], floor: dict[str, Any]) -> dict[str, float]:
    return {k: round(row[k] - floor[k], 2) for k in ("p50", "p90", "p95", "p99")}


def new_topic(bootstrap: str, tag: str) -> str:
    name = f"lgbench-latency-{tag}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)
    return name


def delete_topics(bootstrap: str, topics: set[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic, future in admin.delete_topics(sorted(topics), operation_timeout=30).items():
        try:
            future.result(30)
        except Exception as e:  # noqa: BLE001 - a topic left behind is worth a line, not the run
            print(f"could not delete the topic {topic}: {e}", file=sys.stderr)


def produce(
    bootstrap: str, topic: str, rate: int, seconds: float, size: int, t0: Any, sent: Any
) -> None:
    """Send ``rate`` records a second for ``seconds``, each value its send time's head
    and a payload filling it to ``size`` bytes, paced every millisecond; ``t0`` gets the
    start (epoch ns), ``sent`` the count at the end."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "acks": 1,
            "queue.buffering.max.messages": 1_000_000,
        }  # fmt: skip
    )
    payload = b"x" * max(0, size - HEAD)
    t0.value = time.time_ns()
    start = time.perf_counter()
    n = 0
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
        due = int(elapsed * rate)
        while n < due:
            head = b"%019d|" % time.time_ns()
            producer.produce(topic, head + payload, partition=n % PARTITIONS)
            n += 1
        producer.poll(0)
        time.sleep(0.001)  # pacing, not synchronization
    producer.flush(30)
    sent.value = n


def consume(
    bootstrap: str, topic: str, isolation: str, run_s: float, t0: Any,
    ready: Any, produced: Any, sent: Any, out: Any,
) -> None:  # fmt: skip
    """Read ``topic`` from its start until every record sent was received (once the
    producer is done) or ``run_s`` after the producer's start ``t0``; put the count
    received and every record's send time (epoch ns) and latency (ms) on ``out``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lgbench-latency-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    consumer.consume(num_messages=1, timeout=1.0)  # connected and assigned
    ready.set()
    sent_ns, latency = array("q"), array("d")
    received = 0
    while not t0.value or time.time_ns() < t0.value + run_s * 1e9:
        if produced.is_set() and received >= sent.value:
            break
        # poll() returns at the first record; consume(timeout=...) would wait out its
        # timeout unless num_messages came, adding up to that timeout to every latency
        first = consumer.poll(0.05)
        if first is None:
            continue
        for m in [first, *consumer.consume(num_messages=1000, timeout=0)]:
            now = time.time_ns()
            if m.error() is not None or m.value() is None:
                continue
            at = int(m.value()[: HEAD - 1])
            if at == 0:
                continue  # a probe
            received += 1
            sent_ns.append(at)
            latency.append((now - at) / 1e6)
    consumer.close()
    out.put((received, sent_ns, latency))


def await_output(
    bootstrap: str, source: str, output: str, isolation: str, timeout: float,
    alive: Callable[[], str | None],
) -> str | None:  # fmt: skip
    """Send a probe record every half second until one comes out of the job; None when
    one did, else what went wrong (the job's own error from ``alive``, or the timeout)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 4})
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lgbench-probe-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }  # fmt: skip
    )
    consumer.assign([TopicPartition(output, p, 0) for p in range(PARTITIONS)])
    payload = PROBE_HEAD + b"x" * 1180
    deadline = time.monotonic() + timeout
    try:
        n = 0
        while time.monotonic() < deadline:
            problem = alive()
            if problem is not None:
                return problem
            producer.produce(source, payload, partition=n % PARTITIONS)
            producer.flush(5)
            n += 1
            if any(m.error() is None for m in consumer.consume(num_messages=10, timeout=0.5)):
                return None
        return f"no output within {timeout:.0f} s of the job's start (--ready-timeout)"
    finally:
        consumer.close()


# -- one case ---------------------------------------------------------------------------


def run_case(name: str, rate: int, args: argparse.Namespace, tables: dict[str, str]) -> dict:
    spec = CASES[name]
    row: dict[str, Any] = {
        "bench": "latency", "case": name, "system": spec["system"], "query": spec.get("query"),
        "rate": rate, "size": args.size, "seconds": args.seconds, "warmup_s": args.warmup,
        "cores": os.cpu_count(),
    }  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix=f"lgbench-latency-{name}-"))
    source = new_topic(args.bootstrap, "in")
    output = source if name == "floor" else new_topic(args.bootstrap, "out")
    eo = spec.get("checkpoint_ms") is not None and (spec["system"] == "lockgate" or spec["eo"])
    isolation = "read_committed" if eo else "read_uncommitted"
    peer: Any = None
    stop: Callable[[], None] = lambda: None  # noqa: E731
    alive: Callable[[], str | None] = lambda: None  # noqa: E731
    try:
        if spec["system"] == "lockgate":
            client, row["config"] = LG.start_lockgate(
                spec, args, source, output, rate, tables, work
            )

            def stop() -> None:
                client.cancel()
                try:
                    client.wait(60)
                except Exception:  # noqa: BLE001 - canceled: its end is not the point
                    pass

            def alive() -> str | None:
                if not client.done():
                    return None
                try:
                    client.wait(0)
                except Exception as e:  # noqa: BLE001 - the job's own error, as the row's
                    return f"the lockgate job failed: {type(e).__name__}: {e}"
                return f"the lockgate job ended before its output: {client.status()}"

        elif spec["system"] in ("flink", "spark"):
            peer = load_bench_module("latency_peers").start(
                spec, name, args, source, output, tables, work
            )
            stop, alive = peer.stop, peer.problem
        if name != "floor":
            problem = await_output(
                args.bootstrap, source, output, isolation, args.ready_timeout, alive
            )
            if problem is not None:
                raise RuntimeError(problem)
        if spec["system"] in ("flink", "spark"):
            row["config"] = peer.config()
        row.update(measure(args, rate, source, output, isolation, name))
    except Exception as e:  # noqa: BLE001 - one case's failure is its row, not the run's end
        row["error"] = f"{type(e).__name__}: {e}"
        if peer is not None and "exited" not in row["error"]:
            row["error"] += f" (the job's stderr ends: {peer.stderr_tail()})"
    finally:
        stop()
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep_topics:
            delete_topics(args.bootstrap, {source, output})
    row["consumer_isolation"] = isolation
    return row


def measure(args: argparse.Namespace, rate: int, source: str, output: str, isolation: str,
            name: str) -> dict[str, Any]:  # fmt: skip
    ctx = mp.get_context("spawn")
    ready, produced, out = ctx.Event(), ctx.Event(), ctx.Queue()
    sent, t0 = ctx.Value("q", 1 << 62), ctx.Value("q", 0)
    drain = args.drain * (6 if name == "local-backpressure" else 1)
    run_s = args.seconds + drain
    reader = ctx.Process(
        target=consume,
        args=(args.bootstrap, output, isolation, run_s, t0, ready, produced, sent, out),
    )
    reader.start()
    if not ready.wait(60):
        raise RuntimeError("the consumer did not start within 60 s")
    writer = ctx.Process(
        target=produce, args=(args.bootstrap, source, rate, args.seconds, args.size, t0, sent)
    )
    writer.start()
    writer.join()
    if writer.exitcode != 0:
        raise RuntimeError(f"the producer process failed (exit {writer.exitcode})")
    produced.set()
    received, sent_ns, latency = out.get(timeout=run_s + 120)
    reader.join()
    warmup_ns = t0.value + int(args.warmup * 1e9)
    measured = [lat for at, lat in zip(sent_ns, latency, strict=True) if at >= warmup_ns]
    row: dict[str, Any] = {
        "sent": sent.value, "received": received, "measured": len(measured),
        # records not received within the drain: their latencies are missing from the figures
        "not_received": sent.value - received,
        **percentiles(measured),
    }  # fmt: skip
    if name == "local-backpressure":  # the whole run, warm-up included
        row["series"] = window_series(sent_ns, latency, t0.value, args.window)
    return row


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cases = parse_cases(args.cases, args.rate)
    tables_dir = Path(tempfile.mkdtemp(prefix="lgbench-latency-table-"))
    tables = write_lookup_table(tables_dir)
    floors: dict[int, dict[str, Any]] = {}
    try:
        for name, rate in cases:
            row = run_case(name, rate, args, tables)
            if name == "floor" and "p50" in row:
                floors[rate] = row
            elif "p50" in row and rate in floors:
                row["over_floor_ms"] = over_floor(row, floors[rate])
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(tables_dir, ignore_errors=True)
        for ex in LG.SPARK_EXECUTOR:
            ex.spark.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=os.environ.get("LOCKGATE_TEST_KAFKA", "127.0.0.1:9092"))
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--drain", type=float, default=5.0, help="seconds read after the last send")
    ap.add_argument("--size", type=int, default=1200)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--window", type=float, default=5.0, help="the series' window (s)")
    ap.add_argument("--ready-timeout", type=float, default=300.0,
                    help="seconds a job may take to put out its first record")  # fmt: skip
    ap.add_argument("--cases", default="all")
    ap.add_argument("--keep-topics", action="store_true", help="keep each case's topics")
    ap.add_argument("--quick", action="store_true",
                    help="a check that every case runs: 8 s runs, 3 s warm-up, 2-s windows")  # fmt: skip
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup, args.drain, args.window = 8.0, 3.0, 5.0, 2.0
    if args.rate <= 0 or args.seconds <= 0 or args.size <= HEAD:
        ap.error(f"--rate and --seconds must be positive and --size above {HEAD}")
    if not 0 <= args.warmup < args.seconds:
        ap.error("--warmup must be at least 0 and below --seconds")
    return args


if __name__ == "__main__":
    main()

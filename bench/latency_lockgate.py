"""lockgate's side of the latency bench (``bench/latency.py``, issue 42): the three
queries as pure functions, Query B's keyed count, the backpressure throttle, and the
lockgate jobs (local executor or Spark executor, at-least-once or exactly-once sinks).

Loaded by ``bench/latency.py`` by its file and registered with cloudpickle to be pickled
by value, so lockgate's Spark executor ships these functions to its Python workers.
"""

from __future__ import annotations

import argparse
import base64
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lockgate as lg

#: the send time's head: 19 digits of epoch nanoseconds and a separator
HEAD = 20
#: Query A truncates each payload to this many bytes
TRUNCATE = 500 * 1024
#: Query C's table: keys 0 .. LOOKUP_ROWS - 1
LOOKUP_ROWS = 10_000

# -- the queries (pure functions; lockgate runs them, the peers do the same in SQL) -----


def query_a(value: bytes) -> bytes:
    """Query A: the payload truncated to 500 KB and base64-encoded, the head kept."""
    return value[:HEAD] + base64.b64encode(value[HEAD : HEAD + TRUNCATE])


def query_b(value: bytes, count: int) -> bytes:
    """Query B's output for a record whose key (its payload) was seen ``count`` times."""
    return value[:HEAD] + b"%d|" % count + base64.b64encode(value[HEAD : HEAD + TRUNCATE])


def payload_key(value: bytes) -> bytes:
    """Query B's key: the payload truncated to 500 KB (the value without its head)."""
    return value[HEAD : HEAD + TRUNCATE]


def with_random_key(value: bytes) -> dict[str, Any]:
    """Query C's first step: the record and a random key in [0, LOOKUP_ROWS)."""
    return {"key": random.randrange(LOOKUP_ROWS), "value": value}


def query_c(row: dict[str, Any]) -> bytes:
    """Query C's output for a joined row (its table value ``y``)."""
    value = row["value"]
    return value[:HEAD] + b"%d|" % row["y"] + base64.b64encode(value[HEAD : HEAD + TRUNCATE])


def write_lookup_table(folder: Path) -> dict[str, str]:
    """Query C's table ``x -> y = 2x`` (int64), as Parquet and as a CSV copy."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    x = pa.array(range(LOOKUP_ROWS), pa.int64())
    table = pa.table({"x": x, "y": pa.array([2 * i for i in range(LOOKUP_ROWS)], pa.int64())})
    (folder / "parquet").mkdir(parents=True, exist_ok=True)
    (folder / "csv").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "parquet" / "table.parquet")
    pacsv.write_csv(table, folder / "csv" / "table.csv", pacsv.WriteOptions(include_header=False))
    return {"parquet": str(folder / "parquet"), "csv": str(folder / "csv")}


class KeyedCount(lg.KeyedProcessFunction):
    """Query B's keyed count in lockgate: a KeyedProcessFunction with a ValueState."""

    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value: bytes, ctx: Any) -> Any:
        n = self.count.value() + 1
        self.count.update(n)
        yield query_b(value, n)


class Throttle:
    """A map that passes records through and, for this subtask's records ``lo`` to
    ``hi``, sleeps every 100 records as long as 100 records take at ``per_s`` a second:
    a sink slower than the input for a phase of the run, set by record counts."""

    def __init__(
        self, lo: int, hi: int, per_s: float, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.lo, self.hi, self.per_s, self.n, self.sleep = lo, hi, per_s, 0, sleep

    def __call__(self, value: bytes) -> bytes:
        self.n += 1
        if self.lo <= self.n < self.hi and self.n % 100 == 0:
            self.sleep(100 / self.per_s)
        return value


# -- the jobs ------------------------------------------------------------------------------

SPARK_EXECUTOR: list[Any] = []


def lookup_table(path: str) -> Any:
    """Query C's table for ``lookup_join``: the Parquet file as a ``LookupTable``."""
    import lockgate as lg

    return lg.LookupTable.parquet(path)


def start_lockgate(spec: dict[str, Any], args: argparse.Namespace, source: str, output: str,
                   rate: int, tables: dict[str, str], work: Path) -> tuple[Any, dict]:  # fmt: skip
    from lockgate.connectors import KafkaSink, KafkaSource

    p = args.parallelism
    env = lg.StreamEnvironment(parallelism=p)
    eo = spec["checkpoint_ms"] is not None
    if eo:
        env.enable_checkpointing(spec["checkpoint_ms"], mode=lg.CheckpointingMode.EXACTLY_ONCE)
        env.checkpoint_config.storage = str(work / "checkpoints")
    stream = env.from_source(KafkaSource(args.bootstrap, source, format="bytes"), name="kafka-in")
    config: dict[str, Any] = {
        "parallelism": p,
        "source": "KafkaSource(format='bytes'), its defaults (start='earliest', fetch='auto')",
        "checkpoints": f"exactly-once every {spec['checkpoint_ms']} ms" if eo else "none",
    }
    query = spec["query"]
    if spec.get("throttle"):
        per_subtask = rate * args.seconds / 3 / p
        lo, hi, cap = int(per_subtask), int(2 * per_subtask), rate / 2 / p
        stream = stream.map(Throttle(lo, hi, cap), name="throttle")
        config["throttle"] = (
            f"each subtask's records {lo}..{hi} (the middle third of the run) at "
            f"{cap:.0f}/s per subtask: half the input rate"
        )
    if query == "A":
        out = stream.map(query_a, name="query-a")
    elif query == "B":
        out = stream.key_by(payload_key).process(KeyedCount(), name="keyed-count").uid("count")
        config["query"] = "key_by(payload) -> KeyedProcessFunction with a ValueState count"
    else:
        if not hasattr(stream, "lookup_join"):
            raise RuntimeError(
                "DataStream.lookup_join does not exist in this lockgate (issue 42 section 3 "
                "is being built on the branch 'lookup'): Query C cannot run"
            )
        keyed = stream.map(with_random_key, name="random-key")
        joined = keyed.lookup_join(
            lookup_table(tables["parquet"]), on="key", table_key="x", refresh=None, how="inner"
        )
        out = joined.map(query_c, name="query-c")
        config["query"] = "lookup_join(LookupTable.parquet, on='key', table_key='x')"
    delivery = "exactly_once" if eo else "at_least_once"
    out.sink_to(
        KafkaSink(args.bootstrap, output, format="bytes", delivery=delivery,
                  transactional_id_prefix=f"lgbench-latency-{output}" if eo else None),
        name="kafka-out",
    )  # fmt: skip
    config["sink"] = f"KafkaSink(format='bytes', delivery='{delivery}'), its client defaults"
    if spec["executor"] == "local":
        executor: Any = lg.LocalExecutor()
    else:
        if not SPARK_EXECUTOR:
            from lockgate.executor.spark import SparkExecutor

            ex = SparkExecutor(master=f"local[{p}]", conf={"spark.ui.enabled": "false"})
            ex.warm_up()
            SPARK_EXECUTOR.append(ex)
        executor = SPARK_EXECUTOR[0]
        config["executor"] = f"SparkExecutor(local[{p}]), warmed up"
    return env.execute_async(f"latency-{query}", executor=executor), config

"""Throughput of the two Foundation pipelines, one JSON line per case.

(a) sequence -> map_batches (arithmetic) -> filter -> discarding sink
(b) sequence -> row map to {"k": x % 1000, "v": x} -> key_by -> keyed running sum
    in ValueState -> discarding sink

Each case runs at parallelism 1 and 2, with the live metrics on (the default: bytes
and idle / backpressured time counted, the REST server and progress line running)
and off (``metrics_enabled``, ``rest_enabled`` false, no progress line), the two
alternating in both orders, best (and median) of ``--repeat`` each. ``records_per_s`` is the records the
source emitted divided by the job's wall time (start-up included);
``steady_records_per_s`` divides them by the time between the sources' first and
last batch (start-up excluded, the figure the Spark target compares). Usage:

    python bench/throughput.py [--executor local] [--records-a N] [--records-b N]
                               [--cases a,b] [--parallelism 1,2] [--repeat K]
                               [--metrics on,off]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import pyarrow as pa
import pyarrow.compute as pc
from bench_executors import executor_for

import lockgate as lg
from lockgate.connectors import DiscardingSink, SequenceSource


def arithmetic(batch: pa.RecordBatch) -> pa.RecordBatch:
    v = batch.column(0)
    return pa.RecordBatch.from_arrays([pc.add(pc.multiply(v, 3), 7)], names=["value"])


class RunningSum(lg.KeyedProcessFunction):
    def open(self, ctx: lg.RuntimeContext) -> None:
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

    def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
        t = self.total.value() + value["v"]
        self.total.update(t)
        yield {"k": ctx.current_key, "total": t}


def to_row(x: int) -> dict:
    return {"k": x % 100, "v": x}


def key_of(r: dict) -> int:
    return r["k"]


def keyed_running_sums(env: lg.StreamEnvironment, records: int, rate: int, batch_size: int) -> None:
    """The stress and hostile benches' checkpointed job on ``env``: ``records`` numbers at
    ``rate`` rows/s -> {"k": x % 100, "v": x} -> key_by -> :class:`RunningSum` -> discard,
    every operator with a uid."""
    (
        env.from_source(
            SequenceSource(0, records, rows_per_second=rate, batch_size=batch_size),
            name="numbers",
        )
        .uid("numbers")
        .map(to_row, name="to_row")
        .uid("to_row")
        .key_by(key_of)
        .process(RunningSum(), name="sums")
        .uid("sums")
        .sink_to(DiscardingSink(), name="sink")
        .uid("sink")
    )


def build(case: str, records: int, parallelism: int, metrics: bool = True) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=parallelism)
    if not metrics:
        env.config.metrics_enabled = False
        env.config.rest_enabled = False
        env.config.progress_interval_ms = 0
    nums = env.from_source(SequenceSource(0, records), name="numbers")
    if case == "a":
        (
            nums.map_batches(arithmetic, name="arithmetic")
            .filter(pc.field("value") > 3 * (records // 2), name="filter")
            .sink_to(DiscardingSink())
        )
    else:
        (
            nums.map(lambda x: {"k": x % 1000, "v": x}, name="to_row")
            .key_by(lambda r: r["k"])
            .process(RunningSum(), name="running_sum")
            .sink_to(DiscardingSink())
        )
    return env


def run_case(
    case: str, records: int, parallelism: int, executor: object, repeat: int, modes: list[bool]
) -> list[dict]:
    best: dict[bool, tuple[float, float, float]] = {}
    steadies: dict[bool, list[float]] = {m: [] for m in modes}
    for i in range(repeat):
        # alternating, in both orders (whichever runs first in a round was measured up
        # to 4% apart from the other with identical settings)
        for metrics in modes if i % 2 == 0 else modes[::-1]:
            env = build(case, records, parallelism, metrics)
            started = time.perf_counter()
            cpu0 = time.process_time()
            result = env.execute(f"throughput-{case}", executor=executor)
            seconds = time.perf_counter() - started
            cpu = time.process_time() - cpu0
            emitted = result.records_out("numbers")
            assert emitted == records, (emitted, records)
            steady = result.operators["numbers"].emit_rate or records / seconds
            steadies[metrics].append(steady)
            if metrics not in best or steady > best[metrics][2]:
                best[metrics] = (seconds, cpu, steady)
    out = []
    for metrics in modes:
        seconds, cpu, steady = best[metrics]
        out.append(
            {
                "case": case,
                "executor": type(executor).__name__,
                "parallelism": parallelism,
                "metrics": metrics,
                "records": records,
                "seconds": round(seconds, 4),
                "records_per_s": round(records / seconds),
                "steady_records_per_s": round(steady),
                "median_steady_records_per_s": round(statistics.median(steadies[metrics])),
                "driver_cpu_seconds": round(cpu, 3),
                "cores": os.cpu_count(),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--executor", default="local", choices=["local", "spark"])
    ap.add_argument("--records-a", type=int, default=50_000_000)
    ap.add_argument("--records-b", type=int, default=2_000_000)
    ap.add_argument("--cases", default="a,b")
    ap.add_argument("--parallelism", default="1,2")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--metrics", default="on,off", help="on, off or on,off")
    args = ap.parse_args()
    modes = [m.strip() == "on" for m in args.metrics.split(",")]
    executor = executor_for(args.executor)
    for case in args.cases.split(","):
        for p in (int(x) for x in args.parallelism.split(",")):
            n = args.records_a if case == "a" else args.records_b
            for line in run_case(case, n, p, executor, args.repeat, modes):
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

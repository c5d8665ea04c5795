"""Throughput of the built-in (Arrow) window join, one JSON line per case.

The pipeline: sequence (``--records`` numbers in batches of ``--batch-size``) ->
records of two sides (even numbers left, odd right; ``--keys`` keys; event time
advances 1 ms every 20 records, each record up to 500 ms behind) -> bounded
out-of-orderness watermarks after every batch -> ``left.join(right).where("k")
.equal_to("k").window(assigner).apply()`` (no Python per record) -> discarding
sink, exactly-once checkpoints every second, parallelism 2.

Cases (``--cases``): ``tumbling`` (1 s windows), ``session`` (300 ms gap). Many
small batches are the hard part for sessions: every batch merges into the
sessions of its keys, so a store whose per-batch work grows with what it holds
slows down as the job runs (``batches`` says how many came). ``seconds`` is the
job's wall time, start-up included; ``pairs`` the joined records out. Usage:

    python bench/window_join.py [--executor local|spark] [--cases tumbling,session]
                                [--records N] [--batch-size N] [--keys N] [--repeat K]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from bench_executors import executor_for

import lockgate as lg
from lockgate.connectors import DiscardingSink, SequenceSource

DISORDER_MS = 500
ASSIGNERS = {
    "tumbling": lambda: lg.TumblingEventTimeWindows.of(1000),
    "session": lambda: lg.EventTimeSessionWindows.with_gap(300),
}


class Sides:
    """Numbers as records of two sides: ``side``, ``k``, ``ts``, ``id``."""

    def __init__(self, keys: int) -> None:
        self.keys = keys

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        i = batch.column(0).to_numpy()
        j = i // 2
        k = np.where(i % 2 == 0, (j * 7919) % self.keys, (j * 4099) % self.keys)
        ts = i // 20 - (i * 104729) % DISORDER_MS + DISORDER_MS
        return pa.RecordBatch.from_arrays(
            [pa.array(i % 2), pa.array(k), pa.array(ts), pa.array(i)],
            names=["side", "k", "ts", "id"],
        )


class BatchWatermarks:
    """Bounded out-of-orderness, a watermark after every batch."""

    def __init__(self) -> None:
        self.highest = -(2**63)

    def on_events(self, timestamps: np.ndarray, output: object) -> None:
        if len(timestamps):
            self.highest = max(self.highest, int(timestamps.max()) - DISORDER_MS - 1)
            output.emit_watermark(self.highest)  # type: ignore[attr-defined]

    def on_periodic_emit(self, output: object) -> None:
        pass


def build(env: lg.StreamEnvironment, args: argparse.Namespace, case: str) -> None:
    source = SequenceSource(0, args.records, batch_size=args.batch_size)
    events = (
        env.from_source(source, name="numbers")
        .uid("numbers")
        .set_parallelism(1)
        .map_batches(Sides(args.keys), name="sides")
        .uid("sides")
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(
            lg.WatermarkStrategy.for_generator(BatchWatermarks).with_timestamp_assigner("ts")
        )
        .uid("timestamps")
        .set_parallelism(1)
    )
    left = events.filter(pc.field("side") == 0, name="left").uid("left")
    right = events.filter(pc.field("side") == 1, name="right").uid("right")
    joined = (
        left.join(right)
        .where("k")
        .equal_to("k")
        .window(ASSIGNERS[case]())
        .apply(name="join")
        .uid("join")
    )
    joined.sink_to(DiscardingSink(), name="sink").uid("sink")


def run_once(executor: object, args: argparse.Namespace, case: str) -> dict:
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(1000, mode=lg.CheckpointingMode.EXACTLY_ONCE)
    env.checkpoint_config.storage = tempfile.mkdtemp(prefix="lockgate-bench-window-join-")
    build(env, args, case)
    started = time.perf_counter()
    result = env.execute(f"window join {case}", executor=executor)
    seconds = time.perf_counter() - started
    emitted = result.records_out("numbers")
    assert emitted == args.records, (emitted, args.records)
    return {"seconds": seconds, "pairs": result.records_out("join")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--executor", default="local", choices=["local", "spark"])
    ap.add_argument("--cases", default="tumbling,session")
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    executor = executor_for(args.executor)
    for case in args.cases.split(","):
        if case not in ASSIGNERS:
            raise SystemExit(f"unknown case {case!r}: choose from {sorted(ASSIGNERS)}")
        runs = [run_once(executor, args, case) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["seconds"])
        line = {
            "case": case,
            "executor": type(executor).__name__,
            "parallelism": 2,
            "records": args.records,
            "batch_size": args.batch_size,
            "batches": -(-args.records // args.batch_size),
            "keys": args.keys,
            "seconds": round(best["seconds"], 3),
            "events_per_s": round(args.records / best["seconds"]),
            "pairs": best["pairs"],
            "runs": args.repeat,
            "cores": os.cpu_count(),
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

"""Throughput of a keyed event-time window count, one JSON line per case.

The pipeline (issue 7, "Event time", item 4): sequence -> map_batches making
``{"k": key, "ts": event time}`` (1,000 keys; event time advances 10 ms every
100 events, each record up to 500 ms behind it) -> timestamps and bounded
out-of-orderness watermarks of 500 ms -> key_by("k") -> one-second tumbling
event-time windows -> ``aggregate(lg.agg.count())`` -> discarding sink, with
exactly-once checkpoints every second.

Cases (``--cases``):

count      ``--records`` events (default 2,000,000, the size of the test against
           pandas); short enough that few (or no) checkpoints complete;
sustained  ``--sustained-records`` events (default 50,000,000): several seconds,
           so checkpoints every second do happen; ``checkpoints_completed`` says how
           many.
parquet    issue 25's comparison: ``--events`` events (default 20,000,000) read from
           Parquet, the counts written to Parquet, on the systems of ``--systems``
           (default ``local,spark,flink``: lockgate's local executor, lockgate on
           Spark ``local[2]``, Flink SQL) one after another in this run, each in its
           own process; see :mod:`windows_parquet` (bench/windows_parquet.py). Every
           result is checked equal to a pandas groupby of the same events.

``events_per_s`` is the events divided by the job's wall time (start-up
included: the figure the target compares); ``steady_events_per_s`` is the
source's emit rate between its first and last batch (start-up excluded; an
upper bound, since the source finishes while the last batches are still in the
channels); ``windows_fired`` counts the window results. Target: at least 1,000,000
events/s at parallelism 2 on the local executor of a 2-core machine. Usage:

    python bench/windows.py [--executor local|spark] [--cases count,sustained]
                            [--records N] [--sustained-records N] [--parallelism 2]
                            [--repeat K]
    python bench/windows.py --cases parquet [--events N] [--systems local,spark,flink]
                            [--data-dir DIR] [--flink-format auto|parquet|csv]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

import windows_parquet
from bench_executors import executor_for

import lockgate as lg
from lockgate.connectors import DiscardingSink, SequenceSource

KEYS = 1000
DISORDER_MS = 500


def events(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Event ``i``: key ``i * 7919 % 1000``; time ``i // 10`` ms, minus up to 499 ms."""
    i = batch.column(0).to_numpy()
    k = (i * 7919) % KEYS
    ts = i // 10 - (i * 104729) % DISORDER_MS + DISORDER_MS
    return pa.RecordBatch.from_arrays([pa.array(k), pa.array(ts)], names=["k", "ts"])


def build(env: lg.StreamEnvironment, records: int) -> None:
    strategy = lg.WatermarkStrategy.for_bounded_out_of_orderness(
        DISORDER_MS
    ).with_timestamp_assigner("ts")
    (
        env.from_source(SequenceSource(0, records), name="numbers")
        .uid("numbers")
        .map_batches(events, name="events")
        .uid("events")
        .assign_timestamps_and_watermarks(strategy)
        .uid("timestamps")
        .key_by("k")
        .window(lg.TumblingEventTimeWindows.of(1000))
        .aggregate(lg.agg.count(), name="window-count")
        .uid("window-count")
        .sink_to(DiscardingSink())
        .uid("sink")
    )


def run_once(executor: object, records: int, parallelism: int) -> dict:
    env = lg.StreamEnvironment(parallelism=parallelism)
    env.enable_checkpointing(1000, mode=lg.CheckpointingMode.EXACTLY_ONCE)
    env.checkpoint_config.storage = tempfile.mkdtemp(prefix="lockgate-bench-windows-")
    build(env, records)
    started = time.perf_counter()
    client = env.execute_async("window-count", executor=executor)
    result = client.wait()
    seconds = time.perf_counter() - started
    emitted = result.records_out("numbers")
    assert emitted == records, (emitted, records)
    done = [c for c in client.checkpoints() if c.status == "completed"]
    return {
        "seconds": seconds,
        "steady": result.operators["numbers"].emit_rate or 0.0,
        "checkpoints": len(done),
        "fired": result.records_out("window-count"),
    }


def run_case(case: str, records: int, parallelism: int, executor: object, repeat: int) -> dict:
    runs = [run_once(executor, records, parallelism) for _ in range(repeat)]
    best = min(runs, key=lambda r: r["seconds"])
    return {
        "case": case,
        "executor": type(executor).__name__,
        "parallelism": parallelism,
        "records": records,
        "keys": KEYS,
        "disorder_ms": DISORDER_MS,
        "window_ms": 1000,
        "checkpoint_interval_ms": 1000,
        "seconds": round(best["seconds"], 4),
        "events_per_s": round(records / best["seconds"]),
        "steady_events_per_s": round(best["steady"]),
        "checkpoints_completed": best["checkpoints"],
        "windows_fired": best["fired"],
        "runs": repeat,
        "cores": os.cpu_count(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--executor", default="local", choices=["local", "spark"])
    ap.add_argument("--cases", default="count,sustained")
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--sustained-records", type=int, default=50_000_000)
    ap.add_argument("--parallelism", default="2")
    ap.add_argument("--repeat", type=int, default=2)
    windows_parquet.add_arguments(ap)
    args = ap.parse_args()
    cases = args.cases.split(",")
    if "parquet" in cases:
        cases.remove("parquet")
        windows_parquet.run_all(args)
    if not cases:
        return
    executor = executor_for(args.executor)
    for case in cases:
        n = args.records if case == "count" else args.sustained_records
        for p in (int(x) for x in args.parallelism.split(",")):
            print(json.dumps(run_case(case, n, p, executor, args.repeat)), flush=True)


if __name__ == "__main__":
    main()

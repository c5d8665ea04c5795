"""The job and the driver of ``bench/scale_cluster.py`` (issue 43, part 2).

Run as ``__main__`` inside the cluster's driver namespace
(``python scale_cluster_job.py MASTER OPTIONS_JSON``): it starts a SparkSession on the
standalone cluster, warms every executor's Python daemon, runs :func:`build`'s job and
prints ``LOCKGATE-TEST {json}`` lines (``cluster_driver.say``): ``ready``; ``running`` (each attempt, once every slot
registered, with the slots' pids); ``figures`` (per slot, at the first completed
checkpoint: data-plane and TCP connections, descriptors, memory); ``result`` (status,
attempts, checkpoint statistics) or ``failed``; ``bye``.

The job, exactly once from end to end:

* ``orders``: a bounded, read_committed ``KafkaSource`` of ``PARTITIONS`` partitions (one
  per source subtask at p32), paced by ``RateLimitedSource``; each record
  ``{"k", "v", "ts"}`` with ``ts = v`` (ms) and ``k = (v // 2) % KEYS``; per-partition
  monotonous watermarks;
* the even and the odd records joined per key in tumbling one-second event-time windows
  (two keyed edges: each side is shuffled by key into the join);
* one pair in 32 sent over a **broadcast** edge to a map at full parallelism, each copy
  tagged with the subtask it reached;
* the pairs and the copies into one table through an exactly-once ``PostgresSink``.

Every pair ``(2j, 2j+1)`` shares its window and key, and no other record of the window
has that key, so the failure-free output is known in advance (:func:`expected_rows`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import Any

import lockgate as lg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "spark"))
from cluster_driver import report_attempts, say

KEYS = 500
PARTITIONS = 32
WINDOW_MS = 1000
#: one pair in BROADCAST_EVERY goes over the broadcast edge
BROADCAST_EVERY = 32


def is_even(r: dict[str, Any]) -> bool:
    return r["v"] % 2 == 0


def is_odd(r: dict[str, Any]) -> bool:
    return r["v"] % 2 == 1


def pair_row(r: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "pair", "k": r["k"], "a": r["v_l"], "b": r["v_r"], "s": -1}


def sampled(r: dict[str, Any]) -> bool:
    return (r["a"] // 2) % BROADCAST_EVERY == 0


class Tag(lg.MapFunction):
    """A broadcast copy, tagged with the subtask it reached."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.subtask = ctx.subtask_index

    def map(self, r: dict[str, Any]) -> dict[str, Any]:
        return {**r, "kind": "copy", "s": self.subtask}


def expected_rows(n: int, parallelism: int) -> list[tuple[str, int, int, int, int]]:
    """The failure-free output of ``n`` records at ``parallelism``, sorted."""
    rows = []
    for j in range(n // 2):
        k = j % KEYS
        rows.append(("pair", k, 2 * j, 2 * j + 1, -1))
        if j % BROADCAST_EVERY == 0:
            rows += [("copy", k, 2 * j, 2 * j + 1, s) for s in range(parallelism)]
    return sorted(rows)


def build(env: lg.StreamEnvironment, opts: dict[str, Any]) -> None:
    from lockgate.connectors import KafkaSource, PostgresSink, RateLimitedSource

    source = RateLimitedSource(
        KafkaSource(
            opts["bootstrap"],
            opts["topic"],
            bounded=True,
            format="json",
            # small fetches: the pace holds per batch, and a partition's whole share in
            # one batch would run past it (each subtask's share is rate / p)
            fetch="librdkafka",
            properties={"fetch.message.max.bytes": 4096, "queued.min.messages": 100},
        ),
        opts["rate"],
    )
    watermarks = lg.WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts")
    orders = env.from_source(source, name="orders", watermark_strategy=watermarks).uid("orders")
    left = orders.filter(is_even, name="even").uid("even")
    right = orders.filter(is_odd, name="odd").uid("odd")
    pairs = (
        left.join(right)
        .where("k")
        .equal_to("k")
        .window(lg.TumblingEventTimeWindows.of(WINDOW_MS))
        .apply(suffixes=("_l", "_r"), name="join")
        .uid("join")
        .map(pair_row, name="pairs")
        .uid("pairs")
    )
    copies = (
        pairs.filter(sampled, name="sample")
        .uid("sample")
        .broadcast()
        .map(Tag(), name="copies")
        .uid("copies")
    )
    pg = opts["postgres"]
    sink = PostgresSink(pg["dsn"], pg["table"], transaction_prefix=pg["prefix"])
    pairs.union(copies).sink_to(sink, name="postgres").uid("postgres").set_parallelism(
        opts["sink_parallelism"]
    )


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def main(master: str, options: str) -> None:
    import cloudpickle
    import scale_cluster_job

    from lockgate.executor.spark import SparkExecutor

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import scale  # bench/scale.py: the per-slot figures

    cloudpickle.register_pickle_by_value(scale_cluster_job)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    opts = json.loads(options)
    p = int(opts["parallelism"])
    executor = SparkExecutor(
        master=master,
        conf=opts["conf"],
        slot_wait_timeout_s=240,
        heartbeat_timeout_s=float(opts["heartbeat_timeout_s"]),
    )
    executor.spark.sparkContext.setLogLevel("ERROR")
    say("ready", pid=os.getpid())
    executor.warm_up()
    env = lg.StreamEnvironment(parallelism=p)
    env.enable_checkpointing(opts["interval_ms"])
    env.checkpoint_config.storage = opts["storage"]
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=6, delay=0))
    build(env, opts)
    done = threading.Event()
    threading.Thread(target=report_attempts, args=(executor, done), daemon=True).start()
    started = time.monotonic()
    try:
        client = env.execute_async("scale across hosts", executor=executor)
        startup_s = first_checkpoint_s = None
        while not client.done():
            if startup_s is None and executor.running.is_set():
                startup_s = round(time.monotonic() - started, 2)
            if first_checkpoint_s is None and any(
                c.status == "completed" for c in client.checkpoints()
            ):
                first_checkpoint_s = round(time.monotonic() - started, 2)
                say("figures", **scale.slot_figures(executor))
            try:
                client.wait(0.1)
            except TimeoutError:
                pass
        result = client.wait()
    except Exception as e:  # noqa: BLE001 - reported to the harness
        done.set()
        say("failed", error_type=type(e).__name__, message=str(e)[-4000:])
    else:
        done.set()
        completed = [c for c in client.checkpoints() if c.status == "completed"]
        durations = [c.duration_ms for c in completed if c.duration_ms is not None]
        alignments = [
            max((m.alignment_ms for m in c.subtasks.values()), default=0.0) for c in completed
        ]
        say(
            "result",
            status=result.status.name,
            attempts=result.attempts,
            seconds=round(time.monotonic() - started, 1),
            startup_s=startup_s,
            first_checkpoint_s=first_checkpoint_s,
            checkpoints=len(completed),
            checkpoint_ms_p50=_percentile(durations, 0.5),
            checkpoint_ms_p99=_percentile(durations, 0.99),
            alignment_ms_p50=_percentile(alignments, 0.5),
            alignment_ms_p99=_percentile(alignments, 0.99),
        )
    finally:
        executor.spark.stop()
        say("bye")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""The driver of ``bench/soak.py``: runs the soak job on a Spark cluster until told to stop.

``python soak_driver.py MASTER OUT_URL STORAGE_URL RATE KEYS`` (run by ``soak.py`` inside the
cluster's driver namespace). It answers on stdout with lines ``LOCKGATE-SOAK {json}``:

* ``ready`` (``pid``) once the SparkSession is up;
* ``running`` (``attempt``, ``slot_pids``) each time every slot of an attempt registered;
* ``progress`` every 10 s (``checkpoint``: the newest completed checkpoint's id,
  ``checkpoint_ms``: its duration, ``restarts``);
* ``result`` (``status``, ``attempts``, ``savepoint``) or ``failed`` at the end.

It reads one command on stdin: ``stop`` takes a savepoint with ``drain=True`` (every window
fires, the sinks commit their last transactions) and ends the job.

The job: an endless rate-limited sequence of ``0 .. 2 * SPAN``, cut by the source into one
split per subtask (``[0, SPAN)`` and ``[SPAN, 2 * SPAN)`` at parallelism 2). Record ``i`` of
segment ``s = i // SPAN`` is key ``s * KEYS + i % KEYS`` at event time ``i - s * SPAN`` ms, so
both subtasks' event times advance together and the windows' watermark follows them (and a
key's records all come from one segment, so the soak can check each segment's contiguous
prefix); one-second tumbling event-time
windows per key counting the records and summing and maximising ``i``; RocksDB state
(incremental checkpoints every second); the windows into an exactly-once FileSink (JSON
lines) on the shared storage. Its functions are defined here, run as ``__main__``:
cloudpickle ships them by value, so the executors need not import ``bench/``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

import pyarrow as pa

import lockgate as lg
from lockgate.connectors import FileSink, SequenceSource

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "spark"))
from cluster_driver import report_attempts

PREFIX = "LOCKGATE-SOAK "
WINDOW_MS = 1000
#: the length of each subtask's segment of the sequence (parallelism 2)
SPAN = 10**14

#: one 1-core executor per 1-core worker; two cores in all (parallelism 2, a spare worker)
CONF = {
    "spark.ui.enabled": "false",
    "spark.cores.max": "2",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
}


def say(kind: str, **data: Any) -> None:
    sys.stdout.write(PREFIX + json.dumps({"kind": kind, **data}) + "\n")
    sys.stdout.flush()


def make_events(keys: int) -> Any:
    def events(batch: pa.RecordBatch) -> pa.RecordBatch:
        i = batch.column(0).to_numpy()
        segment = i // SPAN
        k, ts = segment * keys + i % keys, i - segment * SPAN
        return pa.RecordBatch.from_arrays(
            [pa.array(k), pa.array(i), pa.array(ts)], names=["k", "v", "ts"]
        )

    return events


def build(env: lg.StreamEnvironment, out: str, rate: float, keys: int) -> None:
    strategy = lg.WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_assigner("ts")
    (
        env.from_source(SequenceSource(0, 2 * SPAN, rows_per_second=rate), name="numbers")
        .uid("numbers")
        .map_batches(make_events(keys), name="events")
        .uid("events")
        .assign_timestamps_and_watermarks(strategy)
        .uid("timestamps")
        .key_by("k")
        .window(lg.TumblingEventTimeWindows.of(WINDOW_MS))
        .aggregate(lg.agg.count(), lg.agg.sum("v"), lg.agg.max("v"), name="windows")
        .uid("windows")
        .sink_to(FileSink(out, format="jsonl"), name="files")
        .uid("files")
    )


def _report_progress(client: Any, done: threading.Event) -> None:
    while not done.wait(10):
        try:
            completed = [c for c in client.checkpoints() if c.status == "completed"]
            restarts = len(client.restart_causes())
        except Exception as e:  # noqa: BLE001 - a report, never the job's end
            say("progress", error=f"{type(e).__name__}: {e}")
            continue
        latest = max(completed, key=lambda c: c.checkpoint_id, default=None)
        say(
            "progress",
            checkpoint=None if latest is None else latest.checkpoint_id,
            checkpoint_ms=None if latest is None else latest.duration_ms,
            restarts=restarts,
        )


def main(master: str, out: str, storage: str, rate: float, keys: int) -> None:
    from lockgate.executor.spark import SparkExecutor

    executor = SparkExecutor(master=master, conf=CONF, slot_wait_timeout_s=120)
    executor.spark.sparkContext.setLogLevel("ERROR")
    say("ready", pid=os.getpid())
    done = threading.Event()
    threading.Thread(target=report_attempts, args=(executor, done, say), daemon=True).start()
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(1000)
    env.checkpoint_config.storage = storage
    env.set_state_backend(lg.RocksDBStateBackend(incremental=True))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=10_000, delay=0))
    build(env, out, rate, keys)
    try:
        client = env.execute_async("soak", executor=executor, fresh=True)
        threading.Thread(target=_report_progress, args=(client, done), daemon=True).start()
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        savepoint = client.stop_with_savepoint(storage.rstrip("/") + "/final-savepoint", drain=True)
        result = client.wait()
    except Exception as e:  # noqa: BLE001 - reported to soak.py
        done.set()
        say("failed", error_type=type(e).__name__, message=str(e)[-4000:])
    else:
        done.set()
        say("result", status=result.status.name, attempts=result.attempts, savepoint=savepoint)
    finally:
        executor.spark.stop()
        say("bye")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))

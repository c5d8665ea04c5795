"""Stall hunt on the Spark executor: many consecutive small jobs on ONE SparkExecutor,
one JSON line per case.

plain         ``--jobs`` jobs (default 300): sequence (``--records`` numbers) -> map ->
              a collecting sink of parallelism 1, so slot 1's output crosses to slot 0
              over the data plane; the collected sum is checked.
checkpointed  ``--checkpointed-jobs`` jobs (default 50): a rate-limited sequence ->
              row map -> key_by (a shuffle: data crosses slots both ways) -> keyed
              running sum -> discarding sink, exactly-once checkpoints every
              ``--interval-ms``; the sink's record count and at least one completed
              checkpoint are checked.
failing       ``--failing-jobs`` (default 0): a checkpointed job whose keyed operator fails
              once; it restarts from its last checkpoint and must finish.
cancelled     ``--cancelled-jobs`` (default 0): an endless job with a shuffle, a slow
              consumer and unaligned checkpoints, cancelled after ``--cancel-after-s``;
              it must end CANCELED.

A *stall* is a job that fails with the executor's heartbeat or start timeout (a
``JobFailedError`` whose reason is ``TASK_LOST`` and whose message says a slot sent no
heartbeat or did not start) or that runs past ``--bound-s`` (it is then cancelled). Any
other failure or a wrong result counts in ``failures``. Every stall's message (with the
silent slot's thread stacks, which the driver puts in it) goes to ``--stall-log``.

All jobs share one ``SparkExecutor(master=--master)`` (default ``local[2]``), warmed up
first (its start is not counted). ``stalls`` must be 0. Usage:

    python bench/stress_spark.py [--jobs N] [--checkpointed-jobs M] [--records R]
                                 [--master local[2]] [--heartbeat-timeout-s S] [--bound-s B]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import cloudpickle
import throughput  # bench/ is on the path when this file runs

import lockgate as lg
from lockgate.connectors import DiscardingSink, SequenceSource
from lockgate.connectors.builtin.collect_sink import CollectSink
from lockgate.executor.spark import SparkExecutor


def double(x: int) -> int:
    return 2 * x


# the keyed running sum of bench/throughput.py; Spark's Python workers cannot import bench
# modules, so its classes travel by value
cloudpickle.register_pickle_by_value(throughput)
RunningSum = throughput.RunningSum


def plain_job(executor: SparkExecutor, records: int) -> tuple[lg.JobClient, Any]:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    (
        env.from_source(SequenceSource(0, records), name="numbers")
        .uid("numbers")
        .map(double, name="double")
        .uid("double")
        .sink_to(CollectSink(), name="collect")
        .uid("collect")
        .set_parallelism(1)
    )
    client = env.execute_async("stress-plain")

    def check(result: lg.JobExecutionResult) -> str | None:
        got = [x for part in result.sink_results.get("collect", []) for x in part]
        want = records * (records - 1)
        if len(got) != records or sum(got) != want:
            return (
                f"collected {len(got)} records summing to {sum(got)}, expected {records} / {want}"
            )
        return None

    return client, check


def checkpointed_job(
    executor: SparkExecutor, records: int, rate: int, interval_ms: int
) -> tuple[lg.JobClient, Any]:
    storage = tempfile.mkdtemp(prefix="lockgate-stress-")
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(interval_ms)
    env.checkpoint_config.storage = storage
    throughput.keyed_running_sums(env, records, rate, batch_size=100)
    client = env.execute_async("stress-checkpointed")

    def check(result: lg.JobExecutionResult) -> str | None:
        try:
            completed = [c for c in client.checkpoints() if c.status == "completed"]
            seen = result.records_in("sink")
            if seen != records:
                return f"the sink saw {seen} records, expected {records}"
            if not completed:
                return "no checkpoint completed"
            return None
        finally:
            shutil.rmtree(storage, ignore_errors=True)

    return client, check


def failing_job(
    executor: SparkExecutor, records: int, rate: int, interval_ms: int, index: int
) -> tuple[lg.JobClient, Any]:
    """A checkpointed job whose keyed operator fails once (subtask ``index % 2``, first
    attempt): the attempt is cancelled and the job restarts from its last checkpoint."""
    from lockgate.testing import FailAtRecord, inject_faults

    storage = tempfile.mkdtemp(prefix="lockgate-stress-")
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(interval_ms)
    env.checkpoint_config.storage = storage
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=1, delay=0))
    throughput.keyed_running_sums(env, records, rate, batch_size=100)
    inject_faults(env, FailAtRecord("sums", record=records // 4, subtask=index % 2))
    client = env.execute_async("stress-failing")

    def check(result: lg.JobExecutionResult) -> str | None:
        shutil.rmtree(storage, ignore_errors=True)
        return None if result.status is lg.JobStatus.FINISHED else f"status {result.status}"

    return client, check


def slow_rows(batch):  # type: ignore[no-untyped-def]
    """A slow consumer: backpressure builds up in front of it."""
    threading.Event().wait(0.002)
    return batch


def cancelled_job(
    executor: SparkExecutor, interval_ms: int, cancel_after_s: float
) -> tuple[lg.JobClient, Any]:
    """An endless job with a shuffle and a slow consumer (backpressure), unaligned
    checkpoints; cancelled once it ran ``cancel_after_s`` (the cancel path: CANCEL to the
    slots, then Spark kills what is left)."""
    storage = tempfile.mkdtemp(prefix="lockgate-stress-")
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(interval_ms)
    env.checkpoint_config.storage = storage
    env.checkpoint_config.unaligned = True
    (
        env.from_source(SequenceSource(0, 10**12, batch_size=200), name="numbers")
        .uid("numbers")
        .map(throughput.to_row, name="to_row")
        .uid("to_row")
        .key_by(throughput.key_of)
        .process(RunningSum(), name="sums")
        .uid("sums")
        .map_batches(slow_rows, name="slow")
        .uid("slow")
        .sink_to(DiscardingSink(), name="sink")
        .uid("sink")
    )
    client = env.execute_async("stress-cancelled")
    timer = threading.Timer(cancel_after_s, client.cancel)
    timer.daemon = True
    timer.start()

    def check(result: lg.JobExecutionResult) -> str | None:
        timer.cancel()
        shutil.rmtree(storage, ignore_errors=True)
        return None if result.status is lg.JobStatus.CANCELED else f"status {result.status}"

    return client, check


def is_stall(error: BaseException) -> bool:
    if not isinstance(error, lg.JobFailedError):
        return False
    text = str(error)
    return error.reason is lg.FailureReason.TASK_LOST and (
        "sent no heartbeat" in text or "slots started within" in text
    )


def run_case(case: str, count: int, start: Any, bound_s: float, stall_log: Any) -> dict:
    stalls: list[dict] = []
    failures: list[dict] = []
    durations: list[float] = []
    began = time.perf_counter()
    for i in range(count):
        t0 = time.perf_counter()
        client, check = start()
        try:
            result = client.wait(bound_s)
        except TimeoutError:
            client.cancel()
            try:
                client.wait(60)
            except BaseException:  # noqa: BLE001 - the stall is what is reported
                pass
            stalls.append({"job": i, "error": f"still running after {bound_s:.0f}s"})
            stall_log.write(f"=== {case} job {i}: exceeded {bound_s:.0f}s\n")
            stall_log.flush()
            continue
        except BaseException as e:  # noqa: BLE001 - counted and reported
            kind = stalls if is_stall(e) else failures
            kind.append({"job": i, "error": str(e).splitlines()[0][:300]})
            stall_log.write(f"=== {case} job {i}: {type(e).__name__}\n{e}\n")
            stall_log.flush()
            continue
        finally:
            durations.append(time.perf_counter() - t0)
        problem = check(result)
        if problem is not None:
            failures.append({"job": i, "error": problem})
        if (i + 1) % 25 == 0:
            print(
                f"{case}: {i + 1}/{count} jobs, {len(stalls)} stalls, {len(failures)} failures",
                file=sys.stderr,
                flush=True,
            )
    total = time.perf_counter() - began
    return {
        "case": case,
        "jobs": count,
        "stalls": len(stalls),
        "failures": len(failures),
        "duration_s": round(total, 1),
        "median_job_s": round(statistics.median(durations), 3) if durations else None,
        "max_job_s": round(max(durations), 3) if durations else None,
        "stall_details": stalls[:10],
        "failure_details": failures[:10],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--jobs", type=int, default=300, help="plain jobs (default 300)")
    ap.add_argument(
        "--checkpointed-jobs", type=int, default=50, help="checkpointed key_by jobs (default 50)"
    )
    ap.add_argument(
        "--failing-jobs",
        type=int,
        default=0,
        help="checkpointed jobs that fail once and restart (default 0)",
    )
    ap.add_argument(
        "--cancelled-jobs",
        type=int,
        default=0,
        help="endless unaligned-checkpoint jobs under backpressure, cancelled "
        "after --cancel-after-s (default 0)",
    )
    ap.add_argument("--cancel-after-s", type=float, default=2.0)
    ap.add_argument("--records", type=int, default=2_000, help="records per plain job")
    ap.add_argument("--checkpointed-records", type=int, default=20_000)
    ap.add_argument(
        "--rate", type=int, default=20_000, help="rows/s of a checkpointed job's source"
    )
    ap.add_argument("--interval-ms", type=int, default=100, help="checkpoint interval")
    ap.add_argument("--master", default=os.environ.get("LOCKGATE_SPARK_MASTER", "local[2]"))
    ap.add_argument("--heartbeat-timeout-s", type=float, default=20.0)
    ap.add_argument(
        "--bound-s",
        type=float,
        default=90.0,
        help="a job running longer than this is a stall (cancelled)",
    )
    ap.add_argument(
        "--stall-log", default=os.path.join(tempfile.gettempdir(), "lockgate-stress-stalls.log")
    )
    args = ap.parse_args()

    executor = SparkExecutor(
        master=args.master,
        conf={"spark.ui.enabled": "false"},
        heartbeat_timeout_s=args.heartbeat_timeout_s,
    )
    executor.spark.sparkContext.setLogLevel("ERROR")
    executor.warm_up(2)
    common = {
        "master": args.master,
        "heartbeat_timeout_s": args.heartbeat_timeout_s,
        "bound_s": args.bound_s,
        "cores": os.cpu_count(),
    }
    lines = []
    with open(args.stall_log, "w") as stall_log:
        if args.jobs:
            line = run_case(
                "plain",
                args.jobs,
                lambda: plain_job(executor, args.records),
                args.bound_s,
                stall_log,
            )
            line.update(common, records=args.records)
            print(json.dumps(line), flush=True)
            lines.append(line)
        if args.checkpointed_jobs:
            line = run_case(
                "checkpointed",
                args.checkpointed_jobs,
                lambda: checkpointed_job(
                    executor, args.checkpointed_records, args.rate, args.interval_ms
                ),
                args.bound_s,
                stall_log,
            )
            line.update(
                common,
                records=args.checkpointed_records,
                rate=args.rate,
                interval_ms=args.interval_ms,
            )
            print(json.dumps(line), flush=True)
            lines.append(line)
        if args.failing_jobs:
            counter = iter(range(args.failing_jobs))
            line = run_case(
                "failing",
                args.failing_jobs,
                lambda: failing_job(
                    executor, args.checkpointed_records, args.rate, args.interval_ms, next(counter)
                ),
                args.bound_s,
                stall_log,
            )
            line.update(
                common,
                records=args.checkpointed_records,
                rate=args.rate,
                interval_ms=args.interval_ms,
            )
            print(json.dumps(line), flush=True)
            lines.append(line)
        if args.cancelled_jobs:
            line = run_case(
                "cancelled",
                args.cancelled_jobs,
                lambda: cancelled_job(executor, args.interval_ms, args.cancel_after_s),
                args.bound_s,
                stall_log,
            )
            line.update(common, interval_ms=args.interval_ms, cancel_after_s=args.cancel_after_s)
            print(json.dumps(line), flush=True)
            lines.append(line)
    total = {
        "case": "total",
        "jobs": sum(x["jobs"] for x in lines),
        "stalls": sum(x["stalls"] for x in lines),
        "failures": sum(x["failures"] for x in lines),
        "duration_s": round(sum(x["duration_s"] for x in lines), 1),
        "stall_log": args.stall_log,
        **common,
    }
    print(json.dumps(total), flush=True)
    executor.spark.stop()
    sys.exit(1 if total["stalls"] or total["failures"] else 0)


if __name__ == "__main__":
    main()

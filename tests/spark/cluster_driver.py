"""The driver of the standalone-cluster tests, run as a subprocess of the test.

A Python process can hold only one SparkContext, and the test process holds the shared
``local[2]`` one, so the cluster's application runs here:
``python cluster_driver.py spark://127.0.0.1:PORT``. It reads one command per line on stdin and
answers with lines ``LOCKGATE-TEST {json}`` on stdout (anything else on stdout is noise):

* ``sums N RATE``: runs :func:`build_sums` at parallelism 2 on the cluster; answers
  ``running`` (with ``slot_pids``) once every slot registered, then ``result`` (``records``)
  or ``failed``.
* ``endless``: runs a job that never ends on its own; answers ``running``, then ``failed``
  (``error_type``, ``reason``, ``message``) when something ends it.
* ``quit``: stops the session and exits.

The job is defined here so the test can import :func:`build_sums` and run the very same job
on the LocalExecutor; run as ``__main__``, cloudpickle ships these functions by value.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

import lockgate as lg
from lockgate.connectors import DiscardingSink, SequenceSource

PREFIX = "LOCKGATE-TEST "

#: the application's settings: one 1-core executor per 1-core worker
CLUSTER_CONF = {
    "spark.ui.enabled": "false",
    "spark.cores.max": "2",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    # the test run's JVM options (tests/conftest.py), for the executors the workers start
    "spark.executor.extraJavaOptions": os.environ.get("LOCKGATE_TEST_JVM_OPTIONS", ""),
}


class SumWithPid(lg.KeyedProcessFunction):
    """Running sum per key; each output keeps its input value ``v`` and names the Python
    process that computed it."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.total = ctx.get_state(lg.ValueStateDescriptor("sum", default=0))

    def process_element(self, value, ctx):
        t = self.total.value() + value
        self.total.update(t)
        yield {"key": ctx.current_key, "v": value, "sum": t, "pid": os.getpid()}


def build_sums(env: lg.StreamEnvironment, n: int, rate: float | None = None) -> lg.DataStream:
    return (
        env.from_source(SequenceSource(0, n, rows_per_second=rate), name="numbers")
        .key_by(lambda x: x % 11)
        .process(SumWithPid(), name="sums")
    )


def final_sums(records: list[dict[str, Any]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in records:
        out[r["key"]] = max(out.get(r["key"], 0), r["sum"])
    return out


def say(kind: str, **data: Any) -> None:
    sys.stdout.write(PREFIX + json.dumps({"kind": kind, **data}) + "\n")
    sys.stdout.flush()


def _report_running(executor: Any, done: threading.Event) -> None:
    while not done.is_set():
        if executor.running.wait(0.05):
            say("running", slot_pids={str(k): v for k, v in executor.slot_pids.items()})
            return


def report_attempts(executor: Any, done: threading.Event, say: Callable[..., None] = say) -> None:
    """``say("running", attempt=..., slot_pids=...)`` each time every slot of an attempt
    registered, until ``done``."""
    attempt = 0
    while not done.is_set():
        if not executor.running.wait(0.05):
            continue
        say(
            "running", attempt=attempt, slot_pids={str(k): v for k, v in executor.slot_pids.items()}
        )
        attempt += 1
        while executor.running.is_set() and not done.is_set():
            done.wait(0.05)


def _run(executor: Any, name: str, job: Any) -> None:
    done = threading.Event()
    watcher = threading.Thread(target=_report_running, args=(executor, done), daemon=True)
    watcher.start()
    try:
        result = job()
    except lg.JobFailedError as e:
        done.set()
        watcher.join(5)
        say("failed", error_type=type(e).__name__, reason=e.reason.name, message=str(e)[:2000])
        return
    except Exception as e:  # noqa: BLE001 - reported to the test
        done.set()
        watcher.join(5)
        say(
            "failed",
            error_type=type(e).__name__,
            reason=None,
            message="".join(traceback.format_exception(e))[-4000:],
        )
        return
    done.set()
    watcher.join(5)
    say("result", job=name, records=result)


def main(master: str) -> None:
    from lockgate.executor.spark import SparkExecutor

    executor = SparkExecutor(master=master, conf=CLUSTER_CONF, slot_wait_timeout_s=120)
    executor.spark.sparkContext.setLogLevel("ERROR")
    say("ready", pid=os.getpid())
    for line in sys.stdin:
        command = line.split()
        if not command:
            continue
        if command[0] == "quit":
            break
        if command[0] == "sums":
            n, rate = int(command[1]), float(command[2])
            env = lg.StreamEnvironment(parallelism=2)
            stream = build_sums(env, n, rate)
            _run(
                executor,
                "sums",
                lambda s=stream: s.execute_and_collect("sums on the cluster", executor=executor),
            )
        elif command[0] == "endless":
            env = lg.StreamEnvironment(parallelism=2)
            build_sums(env, 10**12, 20_000).sink_to(DiscardingSink())
            _run(executor, "endless", lambda e=env: e.execute("endless", executor=executor))
        else:
            say("error", message=f"unknown command {command!r}")
    executor.spark.stop()
    say("bye")


if __name__ == "__main__":
    main(sys.argv[1])

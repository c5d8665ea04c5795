"""A slot that stops heartbeating is diagnosable (issue 17, part 4): the driver's log and
the job's ``JobFailedError`` show every thread's stack of that slot.

Two ways a slot falls silent, one test each through the real pieces:

* its control thread is stuck while the rest of the process runs: the slot's watchdog
  thread sends every thread's stack to the driver on a socket of its own (in-process
  here: a ControlServer and a slot's ControlClient and watchdog in the test process);
* its whole interpreter is frozen (C code holding the GIL): no Python thread runs, and
  faulthandler's C thread writes the stacks into a file the driver reads (on Spark: a
  user function that sleeps in C with the GIL held).

No sleeps: events, bounded polling (``wait_until``) and a manual clock.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

import lockgate as lg
from conftest import BackgroundJob, wait_until
from lockgate.connectors import DiscardingSink, SequenceSource
from lockgate.executor.spark.auth import MessageAuth, new_secret
from lockgate.executor.spark.control import STACKS, ControlClient, ControlReporter, ControlServer
from lockgate.executor.spark.diagnostics import silent_slot_error
from lockgate.executor.spark.watchdog import SlotWatchdog, read_freeze_dump

ENDLESS = 10**12


# -- the watchdog on its own, with a manual clock -------------------------------------------
class ManualClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def blocked_in_a_lock(entered: threading.Event, release: threading.Event) -> None:
    entered.set()
    release.wait(30)


def test_the_watchdog_reports_every_threads_stack_once_per_stall_period_and_rearms() -> None:
    clock = ManualClock()
    beat = [clock.now]
    reports: list[dict[str, Any]] = []
    watchdog = SlotWatchdog(lambda: beat[0], reports.append, stall_after_s=10.0, clock=clock)
    entered, release = threading.Event(), threading.Event()
    worker = threading.Thread(
        target=blocked_in_a_lock, args=(entered, release), name="test worker stuck in a lock"
    )
    worker.start()
    try:
        assert entered.wait(5)
        clock.now += 9.9
        assert watchdog.check() is None, "a heartbeat 9.9 s old is not a silence yet"
        clock.now += 0.2
        report = watchdog.check()
        assert report is not None and report["kind"] == "silent"
        assert report["silent_s"] == pytest.approx(10.1)
        assert report["pid"] == os.getpid()
        assert '"test worker stuck in a lock"' in report["stacks"]
        assert "in blocked_in_a_lock" in report["stacks"]
        assert reports == [report]

        clock.now += 5.0
        assert watchdog.check() is None, "at most one report per stall_after_s"
        clock.now += 5.0
        assert watchdog.check() is not None, "the silence goes on: reported again"

        beat[0] = clock.now  # heartbeats resume
        assert watchdog.check() is None
        clock.now += 10.5
        assert watchdog.check() is not None, "a new silence is reported at once"
        assert len(reports) == 3
    finally:
        release.set()
        worker.join(5)


# -- a stuck control thread, through the control plane ------------------------------------
def wedged_heartbeat_diagnostic(wedged: threading.Event, release: threading.Event) -> Any:
    """Stands for whatever can hold a slot's control thread: it blocks the heartbeat."""
    wedged.set()
    release.wait(30)
    return None


def test_a_slot_whose_control_thread_is_stuck_sends_its_stacks_and_the_driver_error_has_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="lockgate.executor.spark.control")
    secret = new_secret()
    server = ControlServer("127.0.0.1", MessageAuth(secret), 7, num_slots=1)
    client = ControlClient(
        server.endpoint, MessageAuth(secret), 7, 0, lambda type_, payload: None, heartbeat_s=0.05
    )
    reporter = ControlReporter(server.endpoint, MessageAuth(secret), 7, 0)
    # dump_path=None: no faulthandler layer in the test process (the hang guard owns it)
    watchdog = SlotWatchdog(
        lambda: client.last_beat,
        lambda payload: reporter.send(STACKS, payload),
        stall_after_s=0.5,
        check_s=0.05,
        label="slot 0",
        on_stop=reporter.close,
    )
    wedged, release = threading.Event(), threading.Event()
    try:
        watchdog.start()
        wait_until(lambda: 0 in server.last_heartbeat, "the slot's first heartbeat arrived")
        assert not server.stack_reports, "no report while heartbeats flow"
        client.heartbeat_payload = lambda: wedged_heartbeat_diagnostic(wedged, release)
        assert wedged.wait(5)
        silent_from = server.last_heartbeat[0]
        wait_until(
            lambda: 0 in server.stack_reports,
            "the watchdog's STACKS reached the driver",
            timeout_s=10,
        )
        report = server.stack_reports[0]
        assert server.last_heartbeat[0] == silent_from, "a STACKS report is no heartbeat"
        stacks = report.payload["stacks"]
        assert '"lockgate control slot 0"' in stacks
        assert "in wedged_heartbeat_diagnostic" in stacks
        assert "wedged_heartbeat_diagnostic" in caplog.text, "the driver logs the stacks at once"

        error = silent_slot_error("wedged", server, 0, 12.0)
        assert isinstance(error, lg.JobFailedError)
        assert error.reason is lg.FailureReason.TASK_LOST and error.subtask == 0
        text = str(error)
        assert "slot 0 sent no heartbeat for 12.0s" in text
        assert "sent by its watchdog" in text
        assert "in wedged_heartbeat_diagnostic" in text
        assert error.remote_traceback == stacks
    finally:
        release.set()
        watchdog.stop()
        client.close()
        server.close()


def test_the_driver_error_says_when_no_stacks_came_and_why() -> None:
    secret = new_secret()
    server = ControlServer("127.0.0.1", MessageAuth(secret), 1, num_slots=2)
    try:
        text = str(silent_slot_error("quiet", server, 1, 61.0))
        assert "slot 1 sent no heartbeat for 61.0s" in text
        assert "never registered" in text and "no thread dump from slot 1" in text
        server.registrations[1] = {
            "pid": 2**22 + 12345,
            "host": "another-host",
            "stack_dump": "/tmp/x.stacks",
        }
        text = str(silent_slot_error("quiet", server, 1, 61.0))
        assert "faulthandler wrote one to /tmp/x.stacks on another-host" in text
    finally:
        server.close()


# -- a frozen interpreter: the faulthandler layer --------------------------------------------
FROZEN_CHILD = textwrap.dedent("""
    import ctypes, sys, threading, time
    from lockgate.executor.spark.watchdog import SlotWatchdog

    def freeze_the_whole_interpreter():
        ctypes.PyDLL(None).sleep(20)  # libc sleep with the GIL held: every thread stops

    watchdog = SlotWatchdog(time.monotonic, lambda payload: None, stall_after_s=0.5,
                            check_s=0.05, dump_path=sys.argv[1], label="slot 3")
    watchdog.start()
    threading.Event().wait(0.3)  # the watchdog armed faulthandler at least once
    print("freezing", flush=True)
    freeze_the_whole_interpreter()
""")


def test_a_frozen_interpreters_stacks_are_written_by_faulthandler_into_the_dump_file(
    tmp_path: Any,
) -> None:
    dump = tmp_path / "slot-3.stacks"
    child = subprocess.Popen(
        [sys.executable, "-c", FROZEN_CHILD, str(dump)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "freezing\n"
        # faulthandler writes the dump in pieces: a read can see the header before the
        # frozen thread's frame (it failed CI once so); wait for the frame, bounded
        wait_until(
            lambda: "in freeze_the_whole_interpreter" in (read_freeze_dump(str(dump)) or ""),
            "faulthandler wrote the frozen child's stacks, down to the frozen frame",
            timeout_s=15,
        )
        text = read_freeze_dump(str(dump))
        assert text is not None
        assert "lockgate slot 3" in text
        assert 'is "lockgate watchdog slot 3"' in text, "the header names threads by id"
        assert "in freeze_the_whole_interpreter" in text
    finally:
        child.kill()
        child.wait(10)


# -- on Spark: the driver's error carries a frozen slot's stacks ------------------------------
class FreezeOneSlot(lg.MapFunction):
    """Subtask 1 freezes its whole Python worker at its 200th record."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.subtask = ctx.subtask_index
        self.seen = 0

    def map(self, value: Any) -> Any:
        self.seen += 1
        if self.subtask == 1 and self.seen == 200:
            freeze_the_whole_interpreter()
        return value


def freeze_the_whole_interpreter() -> None:
    ctypes.PyDLL(None).sleep(120)  # libc sleep with the GIL held: no Python thread runs


@pytest.mark.spark
@pytest.mark.hang_guard(120)
def test_a_spark_slot_frozen_with_the_gil_held_fails_the_job_with_its_thread_stacks(
    spark_executor: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from lockgate.executor.spark import SparkExecutor

    caplog.set_level(logging.ERROR, logger="lockgate.executor.spark.executor")
    spark_executor.warm_up(2)  # the slots start at once (a short timeout covers the start)
    # the shared session, a short heartbeat timeout: the slot's stacks are due after 4 s
    executor = SparkExecutor(
        spark=spark_executor.spark, heartbeat_timeout_s=8.0, ship_package=False
    )
    env = lg.StreamEnvironment(parallelism=2)
    (
        env.from_source(
            SequenceSource(0, ENDLESS, rows_per_second=2_000, batch_size=10), name="numbers"
        )
        .map(FreezeOneSlot(), name="freeze")
        .sink_to(DiscardingSink(), name="sink")
    )
    job = BackgroundJob(lambda: env.execute("frozen slot", executor=executor))
    try:
        assert job.wait(90), "the frozen slot was not detected"
    finally:
        if not job.done.is_set():
            spark_executor.spark.sparkContext.cancelAllJobs()
            job.wait(30)
    error = job.error
    assert isinstance(error, lg.JobFailedError), f"expected JobFailedError, got {error!r}"
    assert error.reason is lg.FailureReason.TASK_LOST and error.subtask == 1
    text = str(error)
    assert "slot 1 sent no heartbeat" in text
    assert "faulthandler" in text and "in freeze_the_whole_interpreter" in text, text
    assert 'is "lockgate control slot 1"' in text, "thread names come with the dump"
    assert "in freeze_the_whole_interpreter" in caplog.text, "the driver log has the stacks"
    dump = re.search(r"faulthandler's dump of its threads \((\S+\.stacks)\)", text)
    assert dump is not None, text
    assert not os.path.exists(dump.group(1)), "the driver deletes a killed slot's dump file"

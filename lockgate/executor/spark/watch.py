"""The driver's watch over a running attempt on Spark, and the end of a failed or
cancelled one.

:func:`watch_attempt` runs on the driver's thread while the attempt's Spark job runs in
the background. About every 50 ms it checks, in this order: a cancel
(:class:`CancelRequested`), a job failure from the checkpoint coordinator, the Spark job's
outcome, the slots' control events (registrations, FAILED reports), and liveness
(:mod:`.liveness`: every slot registered within ``start_timeout_s``, no registered slot
silent past ``heartbeat_timeout_s``, which raises :class:`SlotLost`). It returns the
slots' reports only when Spark reports the job ended successfully; any failure raises.

When an attempt ends early, :func:`cancel_slots` lets every slot close its operators
(within :data:`CLOSE_GRACE_S`) before the failed slots' Spark tasks fail;
:func:`counters_at_stop` collects the record counts of a cancelled attempt and
:func:`await_workers_gone` waits (bounded) until a loopback cluster's slot workers are
gone.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from ...errors import JobFailedError
from ...graph.execution_plan import ExecutionPlan
from ...job.handle import JobHandle
from ..base import checkpoint_failure
from .control import CANCEL, FAILED, REGISTER, ControlServer
from .diagnostics import (
    reported_failure,
    silent_slot_error,
    slots_not_started_error,
    spark_failure,
    worker_alive,
)
from .gateway import SparkGateway
from .liveness import SlotSilent, SlotsNotStarted, check_liveness
from .session import is_loopback

log = logging.getLogger("lockgate.executor.spark.executor")

#: how long, after a failure, the driver gives the slots that did not fail to close their
#: operators before it lets the failed slot's Spark task fail (which makes Spark kill the
#: rest of the barrier stage, closed or not)
CLOSE_GRACE_S = 5.0


class CancelRequested(Exception):
    """``JobClient.cancel()`` was called."""


class SlotLost(Exception):
    """A slot fell silent past the heartbeat timeout; ``error`` is the attempt's
    ``JobFailedError`` (raised once the attempt is torn down)."""

    def __init__(self, error: JobFailedError) -> None:
        super().__init__(str(error))
        self.error = error


def watch_attempt(
    plan: ExecutionPlan,
    server: ControlServer,
    outcome: queue.Queue[tuple[str, Any]],
    handle: JobHandle,
    run: Any,
    gateway: SparkGateway,
    *,
    running: threading.Event,
    start_timeout_s: float,
    heartbeat_timeout_s: float,
) -> list[dict[str, Any]]:
    """Watch one attempt until its Spark job ends; returns the slots' reports.

    ``outcome`` receives ``("ok", reports)`` or ``("error", exception)`` from the thread
    that runs the Spark job. Once every slot registered, ``running`` and
    ``handle.running`` are set and the checkpoint coordinator (``run``, when the job
    checkpoints) starts. Raises :class:`CancelRequested` when the job is cancelled,
    :class:`SlotLost` when a slot falls silent, and ``JobFailedError`` for every other
    failure (a coordinator's, a slot's report, Spark's error, slots not started)."""
    submitted = time.monotonic()
    while True:
        if handle.stopping:  # a cancel, or a rescale
            raise CancelRequested()
        if gateway.job_error is not None:
            raise checkpoint_failure(plan.job_name, gateway.job_error) from gateway.job_error
        try:
            kind, value = outcome.get(timeout=0.05)
        except queue.Empty:
            pass
        else:
            if kind == "ok":
                result: list[dict[str, Any]] = value
                return result
            raise spark_failure(plan, server, value)
        while True:
            try:
                event = server.events.get_nowait()
            except queue.Empty:
                break
            if event.type == REGISTER and len(server.registrations) == plan.num_slots:
                running.set()
                handle.running.set()
                if run is not None:
                    run.start()  # the tasks report RUNNING once initialized
            if event.type == FAILED:
                raise reported_failure(plan, event.payload)
        verdict = check_liveness(
            now=time.monotonic(),
            submitted=submitted,
            num_slots=plan.num_slots,
            registered=list(server.registrations),
            last_heartbeat=dict(server.last_heartbeat),
            finished=set(server.finished),
            start_timeout_s=start_timeout_s,
            heartbeat_timeout_s=heartbeat_timeout_s,
        )
        if isinstance(verdict, SlotsNotStarted):
            raise slots_not_started_error(plan.job_name, verdict)
        if isinstance(verdict, SlotSilent):
            error = silent_slot_error(plan.job_name, server, verdict.slot, verdict.silent_s)
            log.error("%s", error)
            raise SlotLost(error)


def cancel_slots(server: ControlServer, grace_s: float) -> None:
    """Cancel every slot of a failed or cancelled attempt so that each closes its operators.

    A slot whose subtask failed waits for its CANCEL before its Spark task fails: the
    others get theirs first, and the failed ones only once the others ended (or after
    ``grace_s``), so Spark does not kill a slot that is still closing its operators."""
    failed = set(server.failed) - set(server.ended)
    others = [s for s in list(server.registrations) if s not in failed]
    if not failed or grace_s <= 0:
        server.send(None, CANCEL)
        return
    for s in others:
        server.send(s, CANCEL)
    deadline = time.monotonic() + grace_s
    pause = threading.Event()
    while time.monotonic() < deadline:
        waiting = set(server.registrations) - set(server.ended) - set(server.failed)
        if not waiting:  # every slot closed, or failed and waits for its CANCEL
            break
        pause.wait(0.02)
    server.send(None, CANCEL)


def counters_at_stop(server: ControlServer, timeout_s: float = 1.0) -> list[Any]:
    """The record counters of a cancelled attempt's subtasks: each slot sends its own in
    the report it makes when it stops (waits at most ``timeout_s`` for the reports not
    received yet; a slot killed before it reported counts nothing)."""
    counters: list[Any] = []
    waiting = set(server.registrations)
    deadline = time.monotonic() + timeout_s
    while waiting:
        try:
            event = server.events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if (
            event.type == FAILED
            and event.slot in waiting
            and isinstance(event.payload, dict)
            and "counters" in event.payload
        ):
            waiting.discard(event.slot)
            counters.extend(event.payload["counters"])
    return counters


def await_workers_gone(master: str, server: ControlServer, timeout_s: float = 10) -> None:
    """On a loopback cluster, wait until the attempt's slot workers exited (at most
    ``timeout_s``; those still alive then are logged as a warning). Elsewhere the
    workers are on other hosts: returns at once."""
    if not is_loopback(master):
        return
    pids = [r["pid"] for r in server.registrations.values()]
    deadline = time.monotonic() + timeout_s
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if worker_alive(p)]
        if pids:
            time.sleep(0.05)  # bounded wait for Spark to kill the workers
    if pids:
        log.warning("slot python workers still alive after cancel: %s", pids)

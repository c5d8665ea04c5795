"""Why an attempt on Spark failed: the driver's ``JobFailedError`` for each way a slot
can fail, and the slot files it cleans up afterwards.

* A subtask raised: its slot reports the failure (operator, subtask, traceback, the
  pickled exception where it pickles); :func:`reported_failure` makes the same
  ``JobFailedError`` the local executor raises, its ``__cause__`` the user's exception
  (or a :class:`RemoteError` with its text when it cannot be unpickled here).
* Spark ended the job with an error: :func:`spark_failure` prefers a slot's own report
  when one arrives within a second; otherwise a slot's Python worker died or its
  executor was lost (:func:`~.lost_worker.aborted_job_error`).
* A slot fell silent past the heartbeat timeout: :func:`silent_slot_error` carries what
  is known of its threads. A slot's watchdog sends every thread's stack after
  :func:`stall_after` of silence (half the heartbeat timeout, so they have arrived when
  it fires); when its whole interpreter froze, faulthandler writes them into a file the
  driver reads on a loopback cluster.
* Not every slot started in time: :func:`slots_not_started_error`.

The stack dumps and the recorded exit statuses of an attempt's slots on this host are
deleted once the attempt ended (:func:`discard_stack_dumps`): by then what they held is
in the attempt's error.

Messages are logged by the driver's logger, ``lockgate.executor.spark.executor`` (the
one :mod:`.lost_worker` logs Spark's full error with).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import time
from typing import Any

import cloudpickle

from ...errors import FailureReason, JobFailedError, UserFunctionError
from ...graph.execution_plan import ExecutionPlan
from ..base import failure_error, user_cause
from .control import FAILED, ControlServer
from .liveness import SlotsNotStarted
from .lost_worker import aborted_job_error
from .worker_exits import discard_exit

log = logging.getLogger("lockgate.executor.spark.executor")


class RemoteError(Exception):
    """An error from another process that could not be shipped as itself."""

    def __init__(self, type_name: str, message: str, traceback_text: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.traceback_text = traceback_text


def worker_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie counts as gone; a process this
    user may not signal counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stall_after(heartbeat_timeout_s: float) -> float:
    """When a slot's watchdog reports its thread stacks: half-way to the driver's
    heartbeat timeout, so they are there when it fires."""
    return heartbeat_timeout_s / 2


def reported_failure(plan: ExecutionPlan, info: dict[str, Any]) -> JobFailedError:
    """The same ``JobFailedError`` the local executor raises, from a slot's report; its
    ``__cause__`` is the user's exception (unpickled, or a :class:`RemoteError` with its
    type, message and traceback when it cannot be)."""
    error: BaseException | None = None
    if info.get("exception") is not None:
        try:
            error = cloudpickle.loads(info["exception"])
        except Exception:  # noqa: BLE001 - e.g. the error's class is not importable here
            error = None
    if error is None:
        error = RemoteError(info["error_type"], info["message"], info["traceback"])
        if info.get("operator") and info.get("parallelism"):
            error = UserFunctionError(
                info["operator"], info["operator_subtask"], info["parallelism"], error
            )
    failure = failure_error(
        plan.job_name, info["task"], info["subtask"], error, tb=info["traceback"]
    )
    failure.__cause__ = user_cause(error)
    return failure


def spark_failure(
    plan: ExecutionPlan, server: ControlServer, error: BaseException
) -> JobFailedError:
    """The ``JobFailedError`` of an attempt whose Spark job ended with ``error``.

    A subtask's own report carries the operator and traceback: the first FAILED report
    that arrives within a second wins (:func:`reported_failure`). When none came, a
    slot's worker died (killed, crashed) or its executor was lost: the error names the
    slot, its host and pid, and Spark's reason (:func:`~.lost_worker.aborted_job_error`)."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            event = server.events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if event.type == FAILED:
            return reported_failure(plan, event.payload)
    return aborted_job_error(plan, error, dict(server.registrations), worker_alive)


def slots_not_started_error(job_name: str, verdict: SlotsNotStarted) -> JobFailedError:
    """The ``JobFailedError`` (TASK_LOST) of an attempt whose slots did not all register
    within ``slot_start_timeout_s``: how many started, of how many, after how long."""
    return JobFailedError(
        f"job '{job_name}' failed: only {verdict.started} of "
        f"{verdict.num_slots} slots started within {verdict.waited_s:.0f}s "
        "(slot_start_timeout_s); Spark did not run every task of the barrier "
        "stage (are its executors busy with another job, or still being "
        "launched?)",
        reason=FailureReason.TASK_LOST,
    )


def silent_slot_error(
    job_name: str, server: ControlServer, slot: int, silent_s: float, *, now: float | None = None
) -> JobFailedError:
    """The ``JobFailedError`` (TASK_LOST) of a slot silent for ``silent_s``, with what is
    known of its threads: its watchdog's latest STACKS report; else, on this host, the
    faulthandler dump of a frozen interpreter; else why there is none (its Python worker
    is gone, or the dump is on another host). When the driver's own control thread has
    not run for a while (it receives the heartbeats), its stack is added too."""
    now = time.monotonic() if now is None else now
    reg = server.registrations.get(slot) or {}
    pid, host = reg.get("pid"), reg.get("host")
    where = f"pid {pid} on {host}" if pid is not None else "never registered"
    lines = [
        f"job '{job_name}' failed: slot {slot} sent no heartbeat for {silent_s:.1f}s "
        f"(executor lost or hung; its Python worker: {where})"
    ]
    stacks: str | None = None
    report = server.stack_reports.get(slot)
    if report is not None and isinstance(report.payload, dict):
        p = report.payload
        lines.append(
            f"slot {slot}'s threads, sent by its watchdog {now - report.received_at:.1f}s ago "
            f"({p.get('kind')}: no heartbeat for {p.get('silent_s')}s then):"
        )
        stacks = str(p.get("stacks"))
    dump = reg.get("stack_dump")
    if stacks is None and dump and host == socket.gethostname():
        from .watchdog import read_freeze_dump

        text = read_freeze_dump(dump)
        if text is not None:
            lines.append(
                f"slot {slot}'s whole interpreter froze; faulthandler's dump of its "
                f"threads ({dump}):"
            )
            stacks = text
    if stacks is None:
        if pid is not None and host == socket.gethostname() and not worker_alive(pid):
            lines.append(f"no thread dump from slot {slot}: its Python worker (pid {pid}) is gone")
        elif dump and host != socket.gethostname():
            lines.append(
                f"no thread dump reached the driver from slot {slot}; if its "
                f"interpreter froze, faulthandler wrote one to {dump} on {host}"
            )
        else:
            lines.append(f"no thread dump from slot {slot} (its watchdog did not report)")
    server_silent = now - server.last_loop
    if server_silent > 5.0:
        lines.append(
            f"the driver's control thread (which receives heartbeats) has not run "
            f"for {server_silent:.1f}s; its stack:\n{server.thread_stack()}"
        )
    message = "\n".join(lines) + (f"\n{stacks}" if stacks else "")
    return JobFailedError(
        message, reason=FailureReason.TASK_LOST, subtask=slot, remote_traceback=stacks
    )


def discard_stack_dumps(server: ControlServer) -> None:
    """Delete the faulthandler dump files and recorded exit statuses (.worker_exits) of
    the attempt's slots on this host (any freeze or kill they held is in the attempt's
    error by now). A slot deletes its own when it ends; a
    slot Spark killed (a failed or cancelled attempt) cannot. A slot still running keeps
    writing into its open file, unlinked: nothing is left behind."""
    here = socket.gethostname()
    for reg in list(server.registrations.values()):
        path = reg.get("stack_dump") if isinstance(reg, dict) else None
        if path and reg.get("host") == here:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.debug("could not delete the slot stack dump %s: %s", path, e)
        if isinstance(reg, dict) and reg.get("host") == here and reg.get("pid") is not None:
            discard_exit(reg["pid"])  # how a killed slot ended: in the attempt's error by now

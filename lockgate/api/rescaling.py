"""Carrying out the autoscaler's decisions for a ``JobClient``.

A rescale, in the driver, while the job runs:

1. the job at the new parallelism is planned (:class:`~.replanning.Replanner`): the
   same operators, uids and chains;
2. periodic checkpoints stop and an aligned savepoint is taken into
   ``<checkpoint storage>/rescales/`` (a savepoint holds every operator's state in
   the canonical form, which restores at any parallelism: key groups move, splits are
   reassigned, M-R3); if it fails the job goes on as it was (periodic checkpoints
   resume) and the decision is ``failed``;
3. the savepoint is checked against the new plan, and the running attempt is stopped
   (:meth:`~lockgate.job.handle.JobHandle.request_rescale`); the failover loop starts
   the next attempt at the new parallelism from the savepoint (its exactly-once sinks
   commit the savepoint's transactions when they restore it);
4. the decision is ``applied`` once every subtask of the rescaled attempt runs; if that
   attempt fails before its first checkpoint, the loop goes back to the previous
   parallelism and the decision is ``rolled back``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..autoscaling.decisions import APPLIED, FAILED, ROLLED_BACK, DecisionLog, RescaleDecision
from ..checkpoint.savepoints import new_savepoint_folder
from ..job.handle import JobHandle, RescaleRequest
from .replanning import Replanner
from .resume import record_stop_with_savepoint

log = logging.getLogger(__name__)

#: how long a rescale waits for the rescaled attempt to run before it stops waiting
#: (the decision then stays "in progress" until the failover loop settles it)
RUNNING_WAIT_S = 300.0
#: the pace of that wait (a bounded poll of the job handle)
POLL_S = 0.05

SavepointThen = Callable[[str, Callable[[Any, int, str], None]], str]


class RescaleRefused(Exception):
    """The job could not be stopped for a rescale (see the message)."""


class Rescaler:
    """``rescale(target, decision)`` for one job (see the module docstring).

    ``savepoint_then(folder, then)``: takes a savepoint into ``folder`` with periodic
    checkpoints stopped, calls ``then(location)`` before they could resume, and
    resumes them if either fails (``JobClient._savepoint_then``). ``done``: whether the
    job ended."""

    def __init__(
        self,
        job_name: str,
        handle: JobHandle,
        replanner: Replanner,
        decisions: DecisionLog,
        savepoint_then: SavepointThen,
        done: Callable[[], bool],
    ) -> None:
        self.job_name = job_name
        self._handle = handle
        self._replanner = replanner
        self._decisions = decisions
        self._savepoint_then = savepoint_then
        self._done = done

    def __call__(self, target: dict[int, int], decision: RescaleDecision) -> None:
        started = time.monotonic()
        plan = self._handle.plan
        if plan is None:
            self._failed(decision, "no attempt is running")
            return
        parallelism_of = {
            op.uid: target.get(v.id, v.parallelism) for v in plan.vertices for op in v.operators
        }
        try:
            new_plan = self._replanner.plan_for(parallelism_of)
        except Exception as e:  # noqa: BLE001 - reported with the decision
            self._failed(decision, f"the job cannot run at that parallelism: {e}")
            return
        describe = ", ".join(
            f"'{v.name}' {v.parallelism} -> {target[v.id]}"
            for v in plan.vertices
            if target.get(v.id, v.parallelism) != v.parallelism
        )

        def stop_for_rescale(storage: Any, savepoint_id: int, location: str) -> None:
            spec = self._replanner.restore_spec(new_plan, location)
            self._decisions.update(decision, savepoint=location)

            def begun() -> None:
                # the rescaled attempt restores the savepoint (and commits its
                # transactions): a rerun of the job on this storage resumes there too,
                # until a newer checkpoint completes (M-C8)
                record_stop_with_savepoint(storage, self.job_name, savepoint_id, location)

            request = RescaleRequest(
                new_plan,
                spec,
                describe,
                rolled_back=lambda error: self._decisions.update(
                    decision, status=ROLLED_BACK, error=error
                ),
                dropped=lambda why: self._failed(decision, f"not carried out: {why}"),
                begun=begun,
            )
            if not self._handle.request_rescale(request):
                raise RescaleRefused(
                    "no attempt was running to stop (it ended, restarts, or the job is "
                    "being cancelled or stopped)"
                )

        try:
            self._savepoint_then(rescale_folder(plan, self.job_name), stop_for_rescale)
        except Exception as e:  # noqa: BLE001 - the job goes on as it was
            what = str(e) if isinstance(e, RescaleRefused) else f"the savepoint failed: {e}"
            self._failed(decision, what)
            return
        self._await_running(new_plan, decision, started)

    def _await_running(self, new_plan: Any, decision: RescaleDecision, started: float) -> None:
        deadline = started + RUNNING_WAIT_S
        while time.monotonic() < deadline and not self._done():
            current = self._handle.plan
            if decision.status in (ROLLED_BACK, FAILED):
                return
            if (
                current is not None
                and current.vertices is new_plan.vertices
                and self._handle.running.is_set()
            ):
                self._decisions.update(
                    decision, status=APPLIED, duration_ms=(time.monotonic() - started) * 1000
                )
                log.warning(
                    "autoscaler of job %r: rescale %d applied in %.0f ms",
                    self.job_name,
                    decision.id,
                    decision.duration_ms,
                )
                return
            time.sleep(POLL_S)  # a bounded poll of the handle: the attempt has no event

    def _failed(self, decision: RescaleDecision, error: str) -> None:
        if decision.status == FAILED:
            return
        self._decisions.update(decision, status=FAILED, error=error)
        log.warning(
            "autoscaler of job %r: rescale %d failed, the job goes on as it was: %s",
            self.job_name,
            decision.id,
            error,
        )


def rescale_folder(plan: Any, job_name: str) -> str:
    """A new folder for a rescale's savepoint: ``rescales/`` in the job's checkpoint
    storage (kept after the run, as the job's checkpoints are)."""
    storage = plan.checkpoint.storage
    base = f"{storage.rstrip('/')}/rescales" if "://" in storage else f"{storage}/rescales"
    return new_savepoint_folder(base, job_name)

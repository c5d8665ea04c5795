"""Settling two-phase-commit sinks when a job ends (M-X2, M-X3).

A job that *finished* with checkpoints committed its sinks' transactions in the
tasks: every task waited for its final checkpoint, whose completion notice
committed the last ones (FLIP-147). Nothing is committed here then, so the sink's
storage need not be reachable from the driver; only ``abort_lingering`` runs.

When a run ends otherwise (cancelled, stopped with a savepoint without draining,
failed for good), some of its transactions may still be pre-committed but not
committed: those of the newest completed checkpoint whose completion notice never
reached the sink (a cancellation right after the checkpoint, or
``stop_with_savepoint``: the savepoint is then the newest snapshot), and those
pre-committed for checkpoints that never completed. :func:`settle_two_phase_sinks`
commits the first (they belong to a completed checkpoint; a later restore from it
would commit them anyway, and committing is idempotent) and asks each sink to abort
the rest (``TwoPhaseCommitSink.abort_lingering``), so that a sink keeping
transactions in an external system (PostgreSQL's prepared transactions) leaves none
behind.

It runs on the driver, after every subtask of the last attempt has stopped. Errors
are logged, not raised: the job's outcome is already decided, and what could not be
settled stays pre-committed for a restore from the checkpoint to commit.
"""

from __future__ import annotations

import logging
from typing import Any

from ..checkpoint.coordinator.completed_store import CompletedCheckpoint
from ..checkpoint.savepoints import read_savepoint
from ..checkpoint.storage_url import open_storage
from ..graph.execution_plan import ExecutionPlan
from ..graph.preflight import connectors_of
from ..graph.transformations import Kind
from .restore import operator_states

log = logging.getLogger(__name__)


def two_phase_sinks(plan: ExecutionPlan) -> dict[str, Any]:
    """Sink uid -> the plan's copy of each two-phase-commit sink (never opened)."""
    from ..connectors.two_phase_commit import TwoPhaseCommitSink

    return {
        uid: sink
        for uid, sink in connectors_of(plan, Kind.SINK).items()
        if isinstance(sink, TwoPhaseCommitSink)
    }


def newest_pending(
    plan: ExecutionPlan, uid: str, newer_than: int, savepoint: str | None = None
) -> list[Any]:
    """The pending transactions of sink ``uid`` (every subtask) in the newest snapshot of
    the run: the ``savepoint`` the job was stopped with, else the newest checkpoint this
    run completed (id > ``newer_than``); empty without one."""
    from ..connectors.two_phase_commit import pending_transactions

    if savepoint is not None:
        storage = open_storage(savepoint)
        checkpoint = read_savepoint(storage)
    else:
        if not plan.checkpointing:
            return []
        assert plan.checkpoint is not None and plan.checkpoint.storage is not None
        storage = open_storage(plan.checkpoint.storage)
        ids = [i for i in storage.completed_ids() if i > newer_than]
        if not ids:
            return []
        checkpoint = CompletedCheckpoint.from_metadata(storage.read_metadata(max(ids)))
    return [
        txn
        for state in operator_states(storage, checkpoint, uid)
        for txn in pending_transactions(state)
    ]


def settle_two_phase_sinks(
    plan: ExecutionPlan,
    newer_than: int,
    savepoint: str | None = None,
    *,
    committed_in_tasks: bool = False,
) -> None:
    """Commit the pending transactions of the run's newest completed checkpoint (or of
    ``savepoint``, the one the job was stopped with) and abort every other transaction
    the sinks left behind (see the module docstring). ``committed_in_tasks``: the run
    finished with checkpoints, its tasks committed every transaction of a completed
    checkpoint (FLIP-147): nothing is committed, the rest is aborted."""
    for uid, sink in two_phase_sinks(plan).items():
        name = plan.operator_names.get(uid, uid)
        try:
            keep = [] if committed_in_tasks else newest_pending(plan, uid, newer_than, savepoint)
        except Exception as e:  # noqa: BLE001 - logged with context, see the docstring
            log.warning(
                "job %r: cannot read the newest checkpoint's transactions of sink %r "
                "(%s); they stay pre-committed for a restore to commit",
                plan.job_name,
                name,
                e,
            )
            continue
        try:
            for transaction in keep:
                sink.recover_and_commit(transaction)
            sink.abort_lingering(keep, _driver_context(plan, uid, name), job_ended=True)
        except Exception as e:  # noqa: BLE001 - logged with context, see the docstring
            log.warning(
                "job %r: settling the transactions of sink %r failed (%s: %s); what "
                "was not committed stays pre-committed for a restore from the newest "
                "checkpoint to commit",
                plan.job_name,
                name,
                type(e).__name__,
                e,
            )
        finally:
            sink.close()


def hold_two_phase_runs(plan: ExecutionPlan) -> list[Any]:
    """Each two-phase-commit sink's mark that this run is alive
    (``TwoPhaseCommitSink.hold_run``), held by the driver for the whole run: a run
    restored from one of its checkpoints or savepoints meanwhile (a fork) leaves its
    transactions alone. A mark that cannot be made is logged, not raised: the run then
    counts as alive only while its writers are open."""
    held = []
    for uid, sink in two_phase_sinks(plan).items():
        name = plan.operator_names.get(uid, uid)
        try:
            mark = sink.hold_run(_driver_context(plan, uid, name))
        except Exception as e:  # noqa: BLE001 - logged with context, see the docstring
            log.warning(
                "job %r: sink %r cannot mark the run alive (%s: %s); a run restored from "
                "its checkpoints meanwhile may take it for ended between attempts",
                plan.job_name,
                name,
                type(e).__name__,
                e,
            )
            continue
        if mark is not None:
            held.append(mark)
    return held


def release_two_phase_runs(held: list[Any]) -> None:
    """Drop the marks of :func:`hold_two_phase_runs` once the run was settled."""
    for mark in held:
        try:
            mark.release(forget=True)
        except Exception as e:  # noqa: BLE001 - the run has ended: nothing depends on it
            log.warning("releasing a sink's run mark failed: %s: %s", type(e).__name__, e)


def _driver_context(plan: ExecutionPlan, uid: str, name: str) -> Any:
    from ..runtime.context import RuntimeContext

    return RuntimeContext(
        task_name="driver",
        operator_name=name,
        operator_uid=uid,
        subtask_index=0,
        parallelism=1,
        max_parallelism=1,
        job_name=plan.job_name,
        run_id=plan.run_id,
    )

"""Tasks restored as finished (Flink's FLIP-147).

A checkpoint records, per operator, which subtasks had finished when it was taken
(``CompletedCheckpoint.finished_operators``); an operator with every subtask
finished is *fully finished*. A restore deploys a task whose operators are all
fully finished as finished: it does not run them again (a finished source does
not read its input a second time), sends the maximum watermark, its end of data
and end of partition, and ends. Operators finished in only some subtasks restore
normally: their finished subtasks left no state.

:func:`check_finished_chains` runs on the driver before an attempt starts: a task
whose chain mixes fully finished operators with others (possible only when the
job changed since the checkpoint, e.g. a savepoint restored into a job that chains
a new operator to a finished one) could neither run nor be skipped, so the
restore is refused, as Flink refuses it.
"""

from __future__ import annotations

from ..graph.execution_plan import ExecutionPlan
from .restore import RestoreError, RestoreSpec


def finished_vertices(plan: ExecutionPlan, restore: RestoreSpec) -> set[int]:
    """Ids of the vertices whose tasks ``restore`` deploys as finished."""
    return {
        v.id
        for v in plan.vertices
        if v.operators and all(restore.fully_finished(op.uid) for op in v.operators)
    }


def check_finished_chains(plan: ExecutionPlan, restore: RestoreSpec) -> None:
    """Raise :class:`RestoreError` when a vertex of ``plan`` chains operators that are
    fully finished in ``restore`` with operators that are not."""
    for v in plan.vertices:
        finished = [op.name for op in v.operators if restore.fully_finished(op.uid)]
        if finished and len(finished) != len(v.operators):
            running = [op.name for op in v.operators if not restore.fully_finished(op.uid)]
            raise RestoreError(
                f"restoring {restore.location}: task '{v.name}' chains operators that had "
                f"finished in that checkpoint ({', '.join(finished)}) with operators that had "
                f"not ({', '.join(running)}); a task is restored as finished or runs, not "
                "both. Give the new operators their own task "
                "(.disable_chaining()) or restore the job as it was"
            )

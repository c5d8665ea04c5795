"""Testing jobs and operators: deterministic fault injection for recovery tests, and
:class:`OperatorHarness` to drive one operator by hand (:mod:`.harness`).

Define faults, attach them to a job, run it::

    from lockgate.testing import FailAtRecord, inject_faults

    inject_faults(env, FailAtRecord("plus one", record=500, attempt=0))

Each fault fires in one attempt (``attempt``, 0-based), in one subtask index
(``subtask``, default 0; ``None``: every subtask), at most once there, at a
point given by counts local to that subtask (records, snapshots,
acknowledgements, completion notices of the attempt). Nothing is shared
between processes, so a schedule behaves the same on the local executor and on
Spark. :func:`seeded_faults` draws a reproducible list from a seed.
"""

from .faults import (
    DelayAcknowledgement,
    DelayBarriers,
    DropAcknowledgement,
    FailAtRecord,
    FailCommit,
    FailDuringAlignment,
    FailSnapshot,
    Fault,
    InjectedFault,
    KillWorker,
    seeded_faults,
)
from .harness import OperatorHarness, OperatorSnapshot, OutputBatch, PendingSnapshot
from .schedule import FaultSchedule, inject_faults

__all__ = [
    "DelayAcknowledgement",
    "DelayBarriers",
    "DropAcknowledgement",
    "FailAtRecord",
    "FailCommit",
    "FailDuringAlignment",
    "FailSnapshot",
    "Fault",
    "FaultSchedule",
    "InjectedFault",
    "KillWorker",
    "OperatorHarness",
    "OperatorSnapshot",
    "OutputBatch",
    "PendingSnapshot",
    "inject_faults",
    "seeded_faults",
]

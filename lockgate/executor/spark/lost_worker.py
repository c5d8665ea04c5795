"""The error of an attempt whose Spark job was aborted without a slot's own report: a
slot's Python worker died (killed, crashed, out of memory), its executor was lost.

Spark reports such an end as a ``Py4JJavaError`` of ``collectAndServe`` whose text is
the JVM's stack trace (thousands of characters), with the useful part ("Python worker
exited unexpectedly (crashed)") inside. :func:`aborted_job_error` turns it into an error
that says which slot died, on which host and process, which subtasks it hosted, and
the signal that killed it where this host's worker daemon recorded one
(:mod:`.worker_exits`); the JVM's text goes to the log at DEBUG, not into the error.
"""

from __future__ import annotations

import logging
import re
import socket
from typing import Any

from ...errors import FailureReason, JobFailedError
from ...graph.execution_plan import ExecutionPlan
from .worker_exits import WorkerExit, read_exit

log = logging.getLogger("lockgate.executor.spark.executor")

#: the task Spark names as failed: ``ResultTask(stage, partition)`` (a barrier stage) or
#: ``Lost task 1.0 in stage 3.0``; a slot's number is its partition's
_FAILED_TASK = (
    re.compile(r"barrier task ResultTask\(\d+, (\d+)\)"),
    re.compile(r"Lost task (\d+)\.\d+ in stage"),
)
#: a JVM exception line: ``org.apache.spark.SparkException: message``
_JVM_EXCEPTION = re.compile(r"^(?:Caused by: )?[\w.$]+(?:Exception|Error): (.+)$")


class WorkerLostError(RuntimeError):
    """A slot's Python worker ended without reporting (the ``__cause__`` of the
    attempt's ``JobFailedError``): ``slot``, its worker's ``host`` and ``pid`` (None when
    it never registered), ``signal`` (the number of the signal that killed it, None when
    unknown), ``exit_code`` (when it exited with one), ``operators`` (the operators whose
    subtask it hosted) and ``spark_reason`` (Spark's own one-line reason)."""

    def __init__(
        self,
        slot: int,
        host: str | None,
        pid: int | None,
        exit: WorkerExit | None,
        operators: list[str],
        spark_reason: str,
    ) -> None:
        self.slot = slot
        self.host = host
        self.pid = pid
        self.signal = exit.signal if exit else None
        self.exit_code = exit.exit_code if exit else None
        self.operators = list(operators)
        self.spark_reason = spark_reason
        how = exit.describe() if exit else "died"
        who = f"slot {slot}'s Python worker"
        # the first line names what failed and how, without pid or host: the same failure
        # repeated in later attempts is counted as one restart cause
        super().__init__(f"{who} {how}\n{self.details()}")

    def where(self) -> str:
        """``pid 4242 on host-a`` (or why it is unknown)."""
        if self.pid is None:
            return "which process is unknown: it never registered"
        return f"pid {self.pid} on {self.host}"

    def details(self) -> str:
        """Where it ran, what it hosted, what Spark said."""
        hosted = ", ".join(f"'{name}'" for name in self.operators) or "nothing known"
        return (
            f"({self.where()}; it hosted subtask {self.slot + 1} of {hosted}; "
            f"Spark: {self.spark_reason})"
        )


def spark_reason(text: str) -> str:
    """Spark's own reason in the text of an aborted job: the innermost JVM exception
    message that is not the abort itself (its first sentence, at most 200 characters)."""
    reasons = []
    for line in text.splitlines():
        match = _JVM_EXCEPTION.match(line.strip())
        if match and not match.group(1).startswith("Job aborted due to stage failure"):
            reasons.append(match.group(1).strip())
    if not reasons:
        for line in text.splitlines():
            line = line.strip(" :")
            if line and not line.startswith("An error occurred while calling"):
                reasons.append(line)
                break
    if not reasons:
        return "no reason given"
    reason = reasons[0]
    end = reason.find(". ")
    reason = (reason[:end] if end > 0 else reason).rstrip(".")
    return reason if len(reason) <= 200 else reason[:197] + "..."


def failed_slot(text: str, registrations: dict[int, Any], alive: Any) -> int | None:
    """The slot Spark names as the failed task, else the one registered slot of this host
    whose worker is gone (``alive(pid)``), else None."""
    for pattern in _FAILED_TASK:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    here = socket.gethostname()
    gone = [
        s
        for s, reg in registrations.items()
        if isinstance(reg, dict) and reg.get("host") == here and not alive(reg.get("pid"))
    ]
    return gone[0] if len(gone) == 1 else None


def hosted_operators(plan: ExecutionPlan, slot: int) -> list[str]:
    """The operators slot ``slot`` hosts: subtask ``slot`` of every vertex that many
    subtasks wide, in the plan's order."""
    return [op.name for v in plan.vertices if v.parallelism > slot for op in v.operators]


def aborted_job_error(
    plan: ExecutionPlan,
    error: BaseException,
    registrations: dict[int, Any],
    alive: Any,
    read: Any = read_exit,
) -> JobFailedError:
    """The ``JobFailedError`` (TASK_LOST) of an attempt whose Spark job was aborted
    (``error``, the JVM's error) without a slot's report: it names the slot that died,
    its host and pid, the operators it hosted and the signal that killed it when known
    (``__cause__``: a :class:`WorkerLostError`; ``operator``: the slot's tasks,
    ``subtask``: its number). When Spark names no slot, Spark's one-line reason
    (``__cause__``: a :class:`SparkJobAbortedError`). The JVM's text is logged at
    DEBUG, never in the error."""
    text = str(error)
    log.debug("job %r: the Spark job was aborted; the JVM's error:\n%s", plan.job_name, text)
    reason = spark_reason(text)
    slot = failed_slot(text, registrations, alive)
    if slot is None:
        aborted = SparkJobAbortedError(reason)
        failure = JobFailedError(
            f"job '{plan.job_name}' failed: the Spark job was aborted: {reason} ({_LOGGED})",
            reason=FailureReason.TASK_LOST,
        )
        failure.__cause__ = aborted
        return failure
    reg = registrations.get(slot)
    reg = reg if isinstance(reg, dict) else {}
    pid, host = reg.get("pid"), reg.get("host")
    exit = read(pid) if pid is not None and host == socket.gethostname() else None
    lost = WorkerLostError(slot, host, pid, exit, hosted_operators(plan, slot), reason)
    first, details = str(lost).split("\n", 1)
    tasks = ", ".join(v.name for v in plan.vertices if v.parallelism > slot)
    failure = JobFailedError(
        f"job '{plan.job_name}' failed: {first} {details} ({_LOGGED})",
        reason=FailureReason.TASK_LOST,
        operator=tasks or None,
        subtask=slot,
    )
    failure.__cause__ = lost
    return failure


_LOGGED = "Spark's full error is logged at DEBUG by lockgate.executor.spark.executor"


class SparkJobAbortedError(RuntimeError):
    """Spark aborted an attempt's job for a reason that names no slot (the
    ``__cause__`` of its ``JobFailedError``; Spark's one-line reason as message)."""

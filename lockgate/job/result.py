"""What ``env.execute`` returns."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ..runtime.metrics import OperatorMetrics
from .restart_causes import RestartCause


class JobStatus(enum.Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"


@dataclass(frozen=True)
class AttemptSummary:
    """One attempt of a job run: its number, how it ended (``FAILED``, ``FINISHED`` or
    ``CANCELED``), how long it ran, the first line of its error, its record counts per
    operator uid (``(records_in, records_out)`` summed over subtasks; a failed attempt's
    as last sampled: exact on the local executor, a heartbeat old on Spark) and the
    checkpoints it completed (how many, and the newest id)."""

    attempt: int
    status: JobStatus
    duration_ms: float
    error: str | None = None
    operators: dict[str, tuple[int, int]] = field(default_factory=dict)
    checkpoints_completed: int = 0
    last_checkpoint: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "status": self.status.value,
            "duration_ms": round(self.duration_ms, 1),
            "error": self.error,
            "operators": {uid: list(counts) for uid, counts in self.operators.items()},
            "checkpoints_completed": self.checkpoints_completed,
            "last_checkpoint": self.last_checkpoint,
        }


@dataclass
class JobExecutionResult:
    """The outcome of a finished job.

    ``operators`` maps each operator's name (suffixed with its uid when two
    operators share a name) to its record counts summed over subtasks.
    ``sink_results`` maps a sink's uid to the per-subtask values its writers
    returned (``execute_and_collect`` reads its records from there).
    The figures span the whole run, every attempt: ``duration_ms`` from the start of
    the first attempt to the end of the last (restarts included), and the record counts
    summed over the attempts: a source's ``records_out`` counts every record it emitted
    in any attempt, the ones an attempt emitted again after restoring a checkpoint
    included (Flink's ``numRecordsOut`` of each attempt, added up; so it is at least the
    input a finished job read, and more after a restore), the same for every operator's
    ``records_in`` / ``records_out``. ``attempt_history`` lists the attempts, each with
    its own counts (a failed attempt's as last sampled: exact on the local executor, a
    heartbeat old on Spark). For a job stopped early (cancelled, or stopped with a
    savepoint) the last attempt counts up to the stop.
    ``restart_causes`` lists each distinct failure of the run (operator and error) with
    how many attempts it failed (empty when no attempt failed).
    """

    job_name: str
    status: JobStatus
    duration_ms: float
    operators: dict[str, OperatorMetrics] = field(default_factory=dict)
    sink_results: dict[str, list[Any]] = field(default_factory=dict)
    attempts: int = 1
    #: the savepoint folder when the job was stopped with ``stop_with_savepoint``
    savepoint_path: str | None = None
    restart_causes: list[RestartCause] = field(default_factory=list)
    #: subtasks (``'name (index)'``) that did not stop within the cancellation timeout:
    #: their threads were abandoned (local executor; blocked user code cannot be killed)
    abandoned_tasks: list[str] = field(default_factory=list)
    #: every attempt of the run, oldest first
    attempt_history: list[AttemptSummary] = field(default_factory=list)

    @property
    def record_counts(self) -> dict[str, dict[str, int]]:
        """``{operator name: {"records_in": n, "records_out": m}}``."""
        return {
            name: {"records_in": m.records_in, "records_out": m.records_out}
            for name, m in self.operators.items()
        }

    def records_in(self, operator: str) -> int:
        return self._metrics(operator).records_in

    def records_out(self, operator: str) -> int:
        return self._metrics(operator).records_out

    def records_in_last_attempt(self, operator: str) -> int:
        """``records_in`` of the last attempt alone (the run's, less its earlier
        attempts')."""
        m = self._metrics(operator)
        return m.records_in - m.earlier_attempts_in

    def records_out_last_attempt(self, operator: str) -> int:
        """``records_out`` of the last attempt alone."""
        m = self._metrics(operator)
        return m.records_out - m.earlier_attempts_out

    def _metrics(self, operator: str) -> OperatorMetrics:
        if operator in self.operators:
            return self.operators[operator]
        for m in self.operators.values():
            if m.uid == operator:
                return m
        raise KeyError(
            f"no operator named or with uid {operator!r}; operators: {sorted(self.operators)}"
        )

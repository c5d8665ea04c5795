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


@dataclass
class JobExecutionResult:
    """The outcome of a finished job.

    ``operators`` maps each operator's name (suffixed with its uid when two
    operators share a name) to its record counts summed over subtasks.
    ``sink_results`` maps a sink's uid to the per-subtask values its writers
    returned (``execute_and_collect`` reads its records from there).
    For a job stopped early (cancelled, or stopped with a savepoint) the record counts
    are those of the last attempt up to the stop.
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

    def _metrics(self, operator: str) -> OperatorMetrics:
        if operator in self.operators:
            return self.operators[operator]
        for m in self.operators.values():
            if m.uid == operator:
                return m
        raise KeyError(
            f"no operator named or with uid {operator!r}; operators: {sorted(self.operators)}"
        )

"""The autoscaler's decisions, as ``JobClient.rescales()``, the REST API and the
dashboard show them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

#: a decision's states: taken and being carried out; the job runs at the new
#: parallelism; the rescale failed before it stopped the job (its savepoint failed:
#: the job goes on as it was); the rescaled job failed before its first checkpoint
#: and went back to the previous parallelism
IN_PROGRESS, APPLIED, FAILED, ROLLED_BACK = "in progress", "applied", "failed", "rolled back"


@dataclass
class RescaleDecision:
    """One rescale: when, from what to what per operator uid, why, and how it went."""

    id: int
    #: wall-clock seconds when it was taken
    time: float
    #: operator uid -> parallelism before / after
    old: dict[str, int]
    new: dict[str, int]
    #: one line per vertex that changes
    reason: str
    status: str = IN_PROGRESS
    #: the savepoint the rescaled job restored
    savepoint: str | None = None
    error: str | None = None
    #: milliseconds from the decision to the rescaled job running
    duration_ms: float | None = None
    #: every vertex's evaluation (:meth:`VertexEvaluation.as_dict`)
    evaluation: list[dict[str, Any]] = field(default_factory=list)

    @property
    def direction(self) -> str:
        up = any(self.new[u] > self.old.get(u, 0) for u in self.new)
        down = any(self.new[u] < self.old.get(u, 0) for u in self.new)
        return "up and down" if up and down else "up" if up else "down"

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "time": self.time,
            "direction": self.direction,
            "old": dict(self.old),
            "new": dict(self.new),
            "reason": self.reason,
            "status": self.status,
            "savepoint": self.savepoint,
            "error": self.error,
            "duration_ms": self.duration_ms,
            "evaluation": list(self.evaluation),
        }


class DecisionLog:
    """Every decision of a job, oldest first; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decisions: list[RescaleDecision] = []

    def add(self, decision: RescaleDecision) -> None:
        with self._lock:
            self._decisions.append(decision)

    def update(self, decision: RescaleDecision, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(decision, name, value)

    def next_id(self) -> int:
        with self._lock:
            return len(self._decisions) + 1

    def all(self) -> list[RescaleDecision]:
        """Copies of the decisions (later updates do not change them)."""
        with self._lock:
            return [
                RescaleDecision(**{k: getattr(d, k) for k in d.__dataclass_fields__})
                for d in self._decisions
            ]

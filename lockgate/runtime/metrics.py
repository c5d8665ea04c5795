"""Per-operator and per-channel counters collected by subtasks."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OperatorCounters:
    """Records into and out of one operator in one subtask."""

    records_in: int = 0
    records_out: int = 0
    side_out: dict[str, int] = field(default_factory=dict)


@dataclass
class OperatorMetrics:
    """One operator's counts summed over its subtasks."""

    uid: str
    name: str
    parallelism: int
    records_in: int = 0
    records_out: int = 0
    side_out: dict[str, int] = field(default_factory=dict)

    def add(self, c: OperatorCounters) -> None:
        self.records_in += c.records_in
        self.records_out += c.records_out
        for tag, n in c.side_out.items():
            self.side_out[tag] = self.side_out.get(tag, 0) + n

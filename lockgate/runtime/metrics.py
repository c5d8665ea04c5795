"""Per-operator and per-channel counters collected by subtasks."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OperatorCounters:
    """Records into and out of one operator in one subtask."""

    records_in: int = 0
    records_out: int = 0
    side_out: dict[str, int] = field(default_factory=dict)
    #: wall-clock seconds of the first and last batch a source emitted (throughput)
    first_emit_s: float | None = None
    last_emit_s: float | None = None
    #: the last watermark the operator processed (None: none), M-W1
    watermark: int | None = None


@dataclass
class OperatorMetrics:
    """One operator's counts summed over its subtasks."""

    uid: str
    name: str
    parallelism: int
    records_in: int = 0
    records_out: int = 0
    side_out: dict[str, int] = field(default_factory=dict)

    first_emit_s: float | None = None
    last_emit_s: float | None = None
    #: the operator's event time: the lowest last watermark of its subtasks (None: none)
    watermark: int | None = None
    #: of ``records_in`` / ``records_out``, those of the run's earlier (failed) attempts
    #: (a result's counts are summed over every attempt of the run)
    earlier_attempts_in: int = 0
    earlier_attempts_out: int = 0
    _subtasks_seen: int = field(default=0, repr=False, compare=False)

    @property
    def emit_rate(self) -> float | None:
        """Records emitted per second between the first and the last emitted batch of
        the last attempt (sources; start-up excluded)."""
        if self.first_emit_s is None or self.last_emit_s is None:
            return None
        span = self.last_emit_s - self.first_emit_s
        return (self.records_out - self.earlier_attempts_out) / span if span > 0 else None

    def add_earlier_attempts(self, records_in: int, records_out: int) -> None:
        """Count the records of the run's earlier attempts too."""
        self.records_in += records_in
        self.records_out += records_out
        self.earlier_attempts_in += records_in
        self.earlier_attempts_out += records_out

    def add(self, c: OperatorCounters) -> None:
        if self._subtasks_seen == 0:
            self.watermark = c.watermark
        elif self.watermark is not None and c.watermark is not None:
            self.watermark = min(self.watermark, c.watermark)
        else:  # a subtask without event time holds the operator back
            self.watermark = None
        self._subtasks_seen += 1
        self.records_in += c.records_in
        self.records_out += c.records_out
        if c.first_emit_s is not None:
            self.first_emit_s = (
                c.first_emit_s
                if self.first_emit_s is None
                else min(self.first_emit_s, c.first_emit_s)
            )
        if c.last_emit_s is not None:
            self.last_emit_s = (
                c.last_emit_s if self.last_emit_s is None else max(self.last_emit_s, c.last_emit_s)
            )
        for tag, n in c.side_out.items():
            self.side_out[tag] = self.side_out.get(tag, 0) + n

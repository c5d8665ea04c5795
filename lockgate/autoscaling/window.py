"""From a running job to the policy's inputs: the plan's shape, and its live metrics
averaged over the metrics window.

:func:`shapes_of` reads an ``ExecutionPlan``; :func:`reading_of` one ``metrics()``
answer (see :class:`lockgate.job.observer.JobObserver`); :class:`MetricsWindow`
keeps the readings of the last window and averages them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .policy import VertexRates, VertexShape


@dataclass(frozen=True)
class VertexReading:
    """One reading of a vertex: rates of about the last second."""

    rate_in: float
    rate_out: float
    busy: float | None
    backlog: float | None


def shapes_of(plan: Any, upper_bound: Callable[[Any], int]) -> list[VertexShape]:
    """The vertices of ``plan`` in its order (inputs first), each with its inputs,
    its pointwise peers and its upper bound (``upper_bound(vertex)``)."""
    inputs: dict[int, list[int]] = {v.id: [] for v in plan.vertices}
    peers: dict[int, set[int]] = {v.id: set() for v in plan.vertices}
    for e in plan.edges.values():
        inputs[e.target_vertex].append(e.source_vertex)
        if getattr(e.partitioning, "pointwise", False):
            peers[e.source_vertex].add(e.target_vertex)
            peers[e.target_vertex].add(e.source_vertex)
    # a plan lists its vertices inputs first (the job graph chains in topological order)
    return [
        VertexShape(
            id=v.id,
            name=v.name,
            parallelism=v.parallelism,
            is_source=bool(v.is_source),
            inputs=tuple(inputs[v.id]),
            forward_peers=tuple(sorted(peers[v.id])),
            upper_bound=upper_bound(v),
        )
        for v in plan.vertices
    ]


def reading_of(metrics: dict[str, Any], plan: Any) -> dict[int, VertexReading] | None:
    """Each vertex's reading from one ``metrics()`` answer, or None while a vertex of
    ``plan`` has no subtask with rates yet (an attempt starting, or another attempt's
    numbers)."""
    ops = metrics.get("operators", [])
    out: dict[int, VertexReading] = {}
    by_id = {v["id"]: v for v in metrics.get("vertices", [])}
    for pv in plan.vertices:
        v = by_id.get(pv.id)
        if v is None or v.get("parallelism") != pv.parallelism:
            return None
        subtasks = v.get("subtasks", [])
        busy_values = [s["busy_ms_per_s"] for s in subtasks if s.get("busy_ms_per_s") is not None]
        if not busy_values:  # no subtask with rates yet (one that finished has none)
            return None
        head = pv.operators[0].uid
        heads = [o for o in ops if o["vertex"] == pv.id and o["uid"] == head]
        if pv.is_source:
            rate_in = sum(float(o.get("records_out_per_s") or 0.0) for o in heads)
            lags = [o.get("source_lag") for o in heads]
            backlog = float(sum(lags)) if lags and all(x is not None for x in lags) else None
        else:
            rate_in = float(v.get("records_in_per_s") or 0.0)
            backlog = None
        out[pv.id] = VertexReading(
            rate_in=rate_in,
            rate_out=float(v.get("records_out_per_s") or 0.0),
            busy=max(busy_values) / 1000.0,  # the busiest subtask (Flink's MAX aggregator)
            backlog=backlog,
        )
    return out


class MetricsWindow:
    """The readings of the last ``window_ms`` (by the autoscaler's clock), and the one
    just before it."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self._readings: deque[tuple[float, dict[int, VertexReading]]] = deque()

    def clear(self) -> None:
        self._readings.clear()

    def add(self, now_ms: float, reading: dict[int, VertexReading]) -> None:
        self._readings.append((now_ms, reading))
        # keep the newest reading at or before the window's start: the readings then
        # span the whole window, whatever the pace of the readings
        while len(self._readings) > 1 and now_ms - self._readings[1][0] >= self.window_ms:
            self._readings.popleft()

    def full(self, since_ms: float) -> bool:
        """Whether the readings span the window (and began after ``since_ms``)."""
        if len(self._readings) < 2:
            return False
        first, last = self._readings[0][0], self._readings[-1][0]
        return first >= since_ms and last - first >= self.window_ms

    def averages(self) -> dict[int, VertexRates]:
        """Per vertex: the mean rates and busy share, the newest backlog and its growth."""
        if not self._readings:
            return {}
        (t0, first), (t1, last) = self._readings[0], self._readings[-1]
        seconds = max(1e-3, (t1 - t0) / 1000.0)
        out: dict[int, VertexRates] = {}
        for v in last:
            values = [r[v] for _, r in self._readings if v in r]
            busy = [x.busy for x in values if x.busy is not None]
            growth = 0.0
            start, end = first.get(v), last[v]
            if start is not None and start.backlog is not None and end.backlog is not None:
                growth = (end.backlog - start.backlog) / seconds
            out[v] = VertexRates(
                rate_in=sum(x.rate_in for x in values) / len(values),
                rate_out=sum(x.rate_out for x in values) / len(values),
                busy=sum(busy) / len(busy) if busy else None,
                backlog=end.backlog,
                backlog_growth=growth,
            )
        return out

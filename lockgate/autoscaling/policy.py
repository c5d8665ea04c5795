"""How much parallelism each vertex needs: the rule of Flink's Kubernetes autoscaler.

Pure functions of a job's shape (:class:`VertexShape`) and its averaged metrics
(:class:`VertexRates`); no clock, no threads, so every number can be checked.

For each vertex, in topological order:

* **the rate it must take** (records/s into its head operator): for a source, the
  rate its input grows at (records read per second plus the growth of its backlog,
  where the source knows it: Kafka's lag) plus ``backlog / catch_up``; for any other
  vertex, what its upstream vertices must take, times their observed output/input
  ratios, summed over its inputs;
* **what one subtask can process**: the records/s it takes while busy, i.e. its input
  rate over the busy share of its busiest subtask (Flink's default busy-time
  aggregator, MAX: a hot key is not averaged away; busy excludes idle and backpressured
  time; a share under 5 % is taken as 5 %, which errs towards more parallelism);
* **its utilization** at that rate: the rate it must take over what its subtasks can
  process. Within ``target ± boundary`` the vertex keeps its parallelism; outside,
  it wants ``ceil((rate / target + catch-up rate) / per-subtask capacity)``: the
  steady rate at the target utilization, plus a source backlog's catch-up at full
  speed (as Flink's autoscaler adds it), within its bounds.

Vertices joined by a pointwise (forward) edge must keep equal parallelism: each such
group takes the largest its members want, at most the smallest of their bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .config import AutoscalingConfig

#: a busy share below this is taken as this (few samples of an idle task are noise)
MIN_BUSY = 0.05


@dataclass(frozen=True)
class VertexShape:
    """A vertex of the running plan, as the policy sees it."""

    id: int
    name: str
    parallelism: int
    is_source: bool
    #: upstream vertex ids, one per input edge
    inputs: tuple[int, ...] = ()
    #: vertices it must share its parallelism with (pointwise edges), itself excluded
    forward_peers: tuple[int, ...] = ()
    #: the highest parallelism it may get (key groups, source limit, slots)
    upper_bound: int = 1 << 15


@dataclass(frozen=True)
class VertexRates:
    """A vertex's metrics averaged over the metrics window."""

    #: records/s into its head operator (a source: records/s it reads)
    rate_in: float
    #: records/s out of its tail operator
    rate_out: float
    #: the busy share of its busiest subtask, 0..1 (averaged over the window; None:
    #: unknown)
    busy: float | None
    #: records behind the end of its input now, for a source that knows (else None)
    backlog: float | None = None
    #: how fast that backlog grew over the window (records/s; negative: shrank)
    backlog_growth: float = 0.0


@dataclass
class VertexEvaluation:
    """What the policy concluded for one vertex (shown with every decision)."""

    vertex: int
    name: str
    current: int
    wanted: int
    target_rate: float
    rate_in: float
    busy: float | None
    capacity_per_subtask: float | None
    utilization: float | None
    backlog: float | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "vertex": self.vertex,
            "name": self.name,
            "current": self.current,
            "wanted": self.wanted,
            "target_rate": round(self.target_rate, 1),
            "rate_in": round(self.rate_in, 1),
            "busy": None if self.busy is None else round(self.busy, 3),
            "capacity_per_subtask": (
                None if self.capacity_per_subtask is None else round(self.capacity_per_subtask, 1)
            ),
            "utilization": None if self.utilization is None else round(self.utilization, 3),
            "backlog": self.backlog,
            "reason": self.reason,
        }


@dataclass
class Evaluation:
    """Every vertex's evaluation, and the parallelism each should have."""

    vertices: dict[int, VertexEvaluation] = field(default_factory=dict)

    def wanted(self) -> dict[int, int]:
        return {v: e.wanted for v, e in self.vertices.items()}

    def changes(self) -> dict[int, int]:
        return {v: e.wanted for v, e in self.vertices.items() if e.wanted != e.current}


def evaluate(
    shapes: list[VertexShape], rates: dict[int, VertexRates], config: AutoscalingConfig
) -> Evaluation | None:
    """The evaluation of every vertex, or None when a vertex has no metrics yet.
    ``shapes`` are in topological order (inputs first)."""
    if any(s.id not in rates for s in shapes):
        return None
    target: dict[int, float] = {}
    catch_up: dict[int, float] = {}
    out = Evaluation()
    for shape in shapes:
        r = rates[shape.id]
        if shape.is_source:
            rate = max(0.0, r.rate_in + r.backlog_growth)
            extra = r.backlog / (config.catch_up_ms / 1000.0) if r.backlog else 0.0
        else:
            rate = extra = 0.0
            for up in shape.inputs:
                ur = rates[up]
                ratio = ur.rate_out / ur.rate_in if ur.rate_in > 0 else 0.0
                rate += target[up] * ratio
                extra += catch_up[up] * ratio
        target[shape.id], catch_up[shape.id] = rate, extra
        out.vertices[shape.id] = _vertex(shape, r, rate, extra, config)
    _align_forward_groups(shapes, out, config)
    return out


def _bounds(shape: VertexShape, config: AutoscalingConfig) -> tuple[int, int]:
    high = shape.upper_bound
    if config.max_parallelism is not None:
        high = min(high, config.max_parallelism)
    high = max(1, high)
    return min(config.min_parallelism, high), high


def _vertex(
    shape: VertexShape, r: VertexRates, steady: float, extra: float, config: AutoscalingConfig
) -> VertexEvaluation:
    low, high = _bounds(shape, config)
    current = shape.parallelism
    rate = steady + extra
    ev = VertexEvaluation(
        vertex=shape.id,
        name=shape.name,
        current=current,
        wanted=current,
        target_rate=rate,
        rate_in=r.rate_in,
        busy=r.busy,
        capacity_per_subtask=None,
        utilization=None,
        backlog=r.backlog,
    )
    if rate <= 0 or r.rate_in <= 0:
        ev.wanted = low if rate <= 0 else current
        ev.reason = (
            "no input: the lowest parallelism"
            if rate <= 0
            else "input wanted but none taken yet: unchanged"
        )
        return _clamped(ev, low, high)
    if r.busy is None:
        ev.reason = "busy time unknown: unchanged"
        return _clamped(ev, low, high)
    busy = max(MIN_BUSY, r.busy)
    capacity = r.rate_in / (busy * current)
    utilization = rate / (capacity * current)
    ev.capacity_per_subtask = capacity
    ev.utilization = utilization
    lo_band = config.target_utilization - config.utilization_boundary
    hi_band = config.target_utilization + config.utilization_boundary
    if lo_band <= utilization <= hi_band:
        ev.reason = f"utilization {utilization:.2f} within {max(0.0, lo_band):.2f}..{hi_band:.2f}: unchanged"
        return _clamped(ev, low, high)
    needed = steady / config.target_utilization + extra
    ev.wanted = max(1, math.ceil(needed / capacity - 1e-9))
    backlog = f" ({extra:,.0f}/s of it to catch up a backlog)" if extra else ""
    ev.reason = (
        f"takes {rate:,.0f} records/s{backlog}, a subtask processes {capacity:,.0f}/s when "
        f"busy: utilization {utilization:.2f} at {current}, "
        f"{config.target_utilization:g} at {ev.wanted}"
    )
    return _clamped(ev, low, high)


def _clamped(ev: VertexEvaluation, low: int, high: int) -> VertexEvaluation:
    bounded = min(high, max(low, ev.wanted))
    if bounded != ev.wanted:
        ev.reason += f" (bounded to {low}..{high})"
        ev.wanted = bounded
    return ev


def forward_groups(shapes: list[VertexShape]) -> list[set[int]]:
    """The groups of vertices joined by pointwise (forward) edges, each vertex in one
    (a vertex without such an edge alone)."""
    peers = {s.id: set(s.forward_peers) for s in shapes}
    seen: set[int] = set()
    groups: list[set[int]] = []
    for s in shapes:
        if s.id in seen:
            continue
        group: set[int] = set()
        todo = [s.id]
        while todo:
            v = todo.pop()
            if v not in group:
                group.add(v)
                todo.extend(peers.get(v, ()))
        seen |= group
        groups.append(group)
    return groups


def _align_forward_groups(
    shapes: list[VertexShape], out: Evaluation, config: AutoscalingConfig
) -> None:
    """Give every vertex of a forward-connected group the largest parallelism wanted,
    at most the smallest bound of the group."""
    by_id = {s.id: s for s in shapes}
    for group in forward_groups(shapes):
        if len(group) == 1:
            continue
        top = min(
            max(out.vertices[v].wanted for v in group),
            min(_bounds(by_id[v], config)[1] for v in group),
        )
        for v in group:
            ev = out.vertices[v]
            if ev.wanted != top:
                ev.wanted = top
                ev.reason += f" (forward-connected to another vertex that wants {top})"

"""The autoscaler's loop: read a running job's metrics, evaluate, decide, rescale.

It runs in the driver, in a thread of the job's ``JobClient``, every
``config.interval``, on an injectable clock. Each step:

1. while no attempt runs, or within ``stabilization`` of an attempt's start (the
   job's start, a rescale, a restart after a failure), nothing is collected;
2. then a reading of each vertex is kept, until the readings span the
   ``metrics_window``;
3. :func:`~.policy.evaluate` gives the parallelism each vertex wants; a vertex
   wanting more gets it at once, a vertex wanting less only once it wanted less for
   ``scale_down_delay`` without a break (then the largest it wanted meanwhile);
4. a change is a :class:`~.decisions.RescaleDecision`, logged and handed to
   ``rescale``, which carries it out (``JobClient``: savepoint, stop, restore at the
   new parallelism; see :mod:`lockgate.api.rescaling`) and sets its status.

A rescale that failed or was rolled back is not tried again with the same
parallelism for ``scale_down_delay`` (at least the metrics window).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core.clock import Clock, SystemClock
from .config import AutoscalingConfig
from .decisions import FAILED, ROLLED_BACK, DecisionLog, RescaleDecision
from .policy import Evaluation, VertexShape, evaluate, forward_groups
from .window import MetricsWindow, reading_of, shapes_of

log = logging.getLogger(__name__)

Rescale = Callable[[dict[int, int], RescaleDecision], None]


class Autoscaler:
    """Sizes a running job's vertices (see the module docstring).

    ``read_metrics``: the job's ``metrics()``; ``current_plan``: the plan the running
    attempt runs (None: none runs); ``upper_bound(vertex)``: the highest parallelism a
    vertex may get (key groups, source limit, slots); ``rescale(target, decision)``:
    carries a decision out (``target``: vertex id -> parallelism) and sets its status."""

    def __init__(
        self,
        job_name: str,
        config: AutoscalingConfig,
        *,
        read_metrics: Callable[[], dict[str, Any]],
        current_plan: Callable[[], Any],
        upper_bound: Callable[[Any], int],
        rescale: Rescale,
        decisions: DecisionLog | None = None,
        clock: Clock | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.job_name = job_name
        self.config = config
        self._read_metrics = read_metrics
        self._current_plan = current_plan
        self._upper_bound = upper_bound
        self._rescale = rescale
        self.decisions = decisions or DecisionLog()
        self.clock = clock or SystemClock()
        self._wall = wall_clock
        self._window = MetricsWindow(config.metrics_window_ms)
        self._plan: Any = None
        self._since: float | None = None
        #: vertex id -> (when it began to want less, the most it wanted since)
        self._pending_down: dict[int, tuple[float, int]] = {}
        #: target -> (when it was decided, the decision): one that failed or was rolled
        #: back is not tried again for a while
        self._tried: dict[frozenset[tuple[int, int]], tuple[float, RescaleDecision]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: the last evaluation (for tests and the log)
        self.last_evaluation: Evaluation | None = None

    # -- the thread -----------------------------------------------------------------
    def start(self) -> Autoscaler:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name=f"lockgate autoscaler {self.job_name}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)

    def _loop(self) -> None:
        while not self.clock.wait(self._stop, self.config.interval_ms):
            try:
                self.step()
            except Exception:  # the job goes on; the next step tries again
                log.exception("autoscaler of job %r: a step failed", self.job_name)

    # -- one step ---------------------------------------------------------------------
    def step(self) -> RescaleDecision | None:
        """Read, evaluate and maybe rescale once; the decision taken, if any."""
        now = self.clock.monotonic_ms()
        plan = self._current_plan()
        if plan is None:
            self._reset(None)
            return None
        if plan is not self._plan or self._since is None:
            self._reset(plan, now)
        assert self._since is not None
        settled_at = self._since + self.config.stabilization_ms
        if now < settled_at:
            return None
        reading = reading_of(self._read_metrics(), plan)
        if reading is None:
            return None
        self._window.add(now, reading)
        if not self._window.full(settled_at):
            return None
        shapes = shapes_of(plan, self._upper_bound)
        evaluation = evaluate(shapes, self._window.averages(), self.config)
        self.last_evaluation = evaluation
        if evaluation is None:
            return None
        target = self._target(shapes, evaluation, now)
        if target is None:
            return None
        return self._decide(plan, shapes, evaluation, target, now)

    def _reset(self, plan: Any, now: float | None = None) -> None:
        self._plan = plan
        self._since = now
        self._window.clear()
        self._pending_down.clear()

    def _target(
        self, shapes: list[VertexShape], ev: Evaluation, now: float
    ) -> dict[int, int] | None:
        """The parallelism to go to now (vertex id -> parallelism), or None to stay."""
        target: dict[int, int] = {}
        for shape in shapes:
            e = ev.vertices[shape.id]
            if e.wanted >= e.current:
                self._pending_down.pop(shape.id, None)
                target[shape.id] = e.wanted
                continue
            since, most = self._pending_down.get(shape.id, (now, e.wanted))
            most = max(most, e.wanted)
            self._pending_down[shape.id] = (since, most)
            ready = now - since >= self.config.scale_down_delay_ms
            target[shape.id] = most if ready else e.current
        _align(shapes, target)
        if all(target[s.id] == s.parallelism for s in shapes):
            return None
        tried = self._tried.get(frozenset(target.items()))
        hold = max(self.config.scale_down_delay_ms, self.config.metrics_window_ms)
        failed = tried is not None and tried[1].status in (FAILED, ROLLED_BACK)
        if failed and tried is not None and now - tried[0] < hold:
            return None
        return target

    def _decide(
        self,
        plan: Any,
        shapes: list[VertexShape],
        ev: Evaluation,
        target: dict[int, int],
        now: float,
    ) -> RescaleDecision:
        old: dict[str, int] = {}
        new: dict[str, int] = {}
        for v in plan.vertices:
            for op in v.operators:
                old[op.uid] = v.parallelism
                new[op.uid] = target[v.id]
        lines = [
            f"'{ev.vertices[s.id].name}' {s.parallelism} -> {target[s.id]}: "
            f"{ev.vertices[s.id].reason}"
            for s in shapes
            if target[s.id] != s.parallelism
        ]
        decision = RescaleDecision(
            id=self.decisions.next_id(),
            time=self._wall(),
            old=old,
            new=new,
            reason="; ".join(lines),
            evaluation=[ev.vertices[s.id].as_dict() for s in shapes],
        )
        self.decisions.add(decision)
        self._tried[frozenset(target.items())] = (now, decision)
        log.warning(
            "autoscaler of job %r: rescale %d (%s): %s",
            self.job_name,
            decision.id,
            decision.direction,
            decision.reason,
        )
        try:
            self._rescale(target, decision)
        finally:
            self._reset(None)
        return decision


def _align(shapes: list[VertexShape], target: dict[int, int]) -> None:
    """Forward-connected vertices get the largest target of their group, at most the
    smallest upper bound of the group."""
    bound = {s.id: s.upper_bound for s in shapes}
    for group in forward_groups(shapes):
        top = min(max(target[v] for v in group), min(bound[v] for v in group))
        for v in group:
            target[v] = top

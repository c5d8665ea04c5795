"""The autoscaler's loop on a manual clock (issue 43 part 4): stabilization, the metrics
window, scale-up at once, scale-down after its delay, no retry of a failed target, and
a new attempt starting over."""

from __future__ import annotations

from typing import Any

import lockgate as lg
from lockgate.autoscaling.autoscaler import Autoscaler
from lockgate.autoscaling.config import AutoscalingConfig
from lockgate.autoscaling.decisions import APPLIED, FAILED, RescaleDecision

CONFIG = AutoscalingConfig(
    min_parallelism=1,
    max_parallelism=8,
    target_utilization=0.5,
    utilization_boundary=0.2,
    stabilization_ms=10_000,
    metrics_window_ms=5_000,
    scale_down_delay_ms=30_000,
    interval_ms=1_000,
)


def plan_at(work: int) -> Any:
    env = lg.StreamEnvironment(parallelism=1)
    (
        env.from_sequence(0, 10)
        .uid("numbers")
        .key_by(lambda v: v % 4)
        .map(lambda v: v)
        .uid("work")
        .set_parallelism(work)
        .print()
        .uid("out")
    )
    return env.get_execution_plan("autoscaled")


def is_work(vertex: Any) -> bool:
    return bool(vertex.operators[0].uid == "work")


class Job:
    """A running job as the autoscaler sees it: a plan and metrics the test sets."""

    def __init__(self, work: int) -> None:
        self.plan: Any = plan_at(work)
        self.rate = 1000.0
        self.busy = 0.5
        self.outcome = APPLIED
        self.targets: list[dict[int, int]] = []

    def metrics(self) -> dict[str, Any]:
        vertices, operators = [], []
        for v in self.plan.vertices:
            busy = self.busy if is_work(v) else 0.05
            vertices.append(
                {
                    "id": v.id,
                    "parallelism": v.parallelism,
                    "records_in_per_s": self.rate,
                    "records_out_per_s": self.rate,
                    "subtasks": [{"busy_ms_per_s": busy * 1000}] * v.parallelism,
                }
            )
            head = v.operators[0].uid
            operators.append(
                {"vertex": v.id, "uid": head, "records_out_per_s": self.rate, "source_lag": None}
            )
        return {"vertices": vertices, "operators": operators}

    def rescale(self, target: dict[int, int], decision: RescaleDecision) -> None:
        self.targets.append(target)
        decision.status = self.outcome
        if self.outcome == APPLIED:
            (work,) = (p for v, p in target.items() if is_work(self.plan.vertex(v)))
            self.plan = plan_at(work)

    def work_parallelism(self) -> int:
        return next(v.parallelism for v in self.plan.vertices if is_work(v))


def scaler(job: Job, clock: lg.ManualClock) -> Autoscaler:
    return Autoscaler(
        "autoscaled",
        CONFIG,
        read_metrics=job.metrics,
        current_plan=lambda: job.plan,
        upper_bound=lambda v: 1 if v.is_source else 128,
        rescale=job.rescale,
        clock=clock,
        wall_clock=lambda: 0.0,
    )


def run(a: Autoscaler, clock: lg.ManualClock, seconds: int) -> list[RescaleDecision]:
    decided = []
    for _ in range(seconds):
        clock.advance(1000)
        d = a.step()
        if d is not None:
            decided.append(d)
    return decided


def test_no_decision_within_the_stabilization_and_the_window_then_a_scale_up() -> None:
    clock = lg.ManualClock()
    job = Job(work=2)
    job.busy = 1.0  # utilization 1.0 at 2: 4 wanted at 0.5
    first = job.plan
    a = scaler(job, clock)
    a.step()
    assert run(a, clock, 14) == [], "10 s stabilization + 5 s window not over"
    (decision,) = run(a, clock, 2)
    assert job.targets[-1] == {v.id: (4 if is_work(v) else 1) for v in first.vertices}
    assert decision.old["work"] == 2 and decision.new["work"] == 4
    assert decision.direction == "up" and "4" in decision.reason
    assert [d.id for d in a.decisions.all()] == [1]


def test_a_new_plan_starts_the_stabilization_over() -> None:
    clock = lg.ManualClock()
    job = Job(work=2)
    job.busy = 1.0
    a = scaler(job, clock)
    a.step()
    run(a, clock, 16)
    assert job.work_parallelism() == 4
    job.busy = 1.0  # still too slow at 4: the next decision waits for its own window
    assert run(a, clock, 14) == []
    assert len(run(a, clock, 2)) == 1 and job.work_parallelism() == 8


def test_a_scale_down_waits_for_its_delay_and_takes_the_most_wanted_meanwhile() -> None:
    clock = lg.ManualClock()
    job = Job(work=8)
    job.busy = 0.05  # utilization 0.05 at 8: 1 wanted
    a = scaler(job, clock)
    a.step()
    assert run(a, clock, 16) == []
    job.busy = 0.1  # 0.1 at 8 = 0.8 subtask-busy: 2 wanted
    assert run(a, clock, 25) == [], "wanted less for under 30 s"
    (decision,) = run(a, clock, 10)
    assert decision.direction == "down"
    assert job.work_parallelism() == 2, "the largest wanted during the delay"


def test_a_break_in_wanting_less_restarts_the_delay() -> None:
    clock = lg.ManualClock()
    job = Job(work=8)
    job.busy = 0.05
    a = scaler(job, clock)
    a.step()
    run(a, clock, 30)
    job.busy = 0.6  # back in the band (0.6 at 8): no longer wants less
    run(a, clock, 6)
    job.busy = 0.05
    assert run(a, clock, 20) == [], "the delay began again"
    assert len(run(a, clock, 15)) == 1


def test_a_failed_target_is_not_tried_again_before_the_hold() -> None:
    clock = lg.ManualClock()
    job = Job(work=2)
    job.busy = 1.0
    job.outcome = FAILED
    a = scaler(job, clock)
    a.step()
    (first,) = run(a, clock, 16)
    assert first.status == FAILED and job.work_parallelism() == 2
    assert run(a, clock, 25) == [], "not again within the 30 s hold"
    job.outcome = APPLIED
    assert len(run(a, clock, 10)) == 1 and job.work_parallelism() == 4


def test_no_running_attempt_collects_nothing() -> None:
    clock = lg.ManualClock()
    job = Job(work=2)
    job.busy = 1.0
    running = [False]
    a = scaler(job, clock)
    a._current_plan = lambda: job.plan if running[0] else None  # type: ignore[method-assign]
    assert run(a, clock, 30) == []
    running[0] = True
    assert run(a, clock, 15) == [], "the stabilization counts from the attempt's start"
    assert len(run(a, clock, 2)) == 1

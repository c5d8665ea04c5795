"""What a rescale relies on besides the rule (issue 43 part 4): the job rebuilt at another
parallelism keeps its chains and edges, and the job handle takes a rescale request
only from a running attempt (M-R3)."""

from __future__ import annotations

from typing import Any

import pytest

import lockgate as lg
from lockgate.core.partitioners import RebalancePartitioning
from lockgate.errors import ConfigurationError
from lockgate.job.handle import JobHandle, RescaleRequest


def env_and_plan() -> tuple[lg.StreamEnvironment, Any]:
    env = lg.StreamEnvironment(parallelism=8)
    (
        env.from_sequence(0, 100)
        .uid("numbers")
        .set_parallelism(4)
        .map(lambda v: v, name="work")  # 8: rebalanced from the 4 sources
        .uid("work")
        .print()
        .uid("out")
    )
    return env, env.get_execution_plan("replan")


def test_a_rescaled_plan_keeps_its_chains_and_edges() -> None:
    env, plan = env_and_plan()
    replanned = env._replanner(plan).plan_for({"work": 4, "out": 4})
    assert [v.id for v in replanned.vertices] == [v.id for v in plan.vertices]
    assert {v.id: v.parallelism for v in replanned.vertices} == {v.id: 4 for v in plan.vertices}
    (edge,) = [e for e in replanned.edges.values() if e.source_vertex == plan.vertices[0].id]
    assert isinstance(edge.partitioning, RebalancePartitioning), (
        "equal parallelism would have made it a forward edge and chained the source "
        "with the map: a vertex bounded by the source's limit from then on"
    )
    assert replanned.run_id == plan.run_id and replanned.job_name == plan.job_name


def test_a_rescaled_plan_respects_the_source_limit() -> None:
    env = lg.StreamEnvironment(parallelism=2)
    source = lg.connectors.SequenceSource(0, 10)
    source.max_parallelism = lambda: 2  # type: ignore[method-assign]
    env.from_source(source).uid("numbers").print().uid("out")
    plan = env.get_execution_plan("limited")
    with pytest.raises(ConfigurationError, match="at most 2 subtasks"):
        env._replanner(plan).plan_for({"numbers": 3})


def request(dropped: list[str]) -> RescaleRequest:
    return RescaleRequest(plan=None, restore=None, describe="x", dropped=dropped.append)


def test_a_rescale_needs_a_running_attempt_and_a_restart_drops_a_stale_one() -> None:
    handle = JobHandle()
    dropped: list[str] = []
    assert not handle.request_rescale(request(dropped)), "no attempt runs"
    stopped: list[bool] = []
    handle.attach(None, lambda: stopped.append(True))
    assert handle.request_rescale(request(dropped)) and stopped == [True]
    assert handle.stopping
    handle.detach()
    handle.attach(None, lambda: None)  # a restart, not the rescaled attempt
    assert handle.take_rescale() is None and len(dropped) == 1
    handle.cancel()
    assert not handle.request_rescale(request(dropped)), "the job is being cancelled"

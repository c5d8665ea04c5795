"""The autoscaler's rule (issue 43 part 4): the parallelism each vertex needs, from its
shape and averaged metrics, as Flink's Kubernetes autoscaler computes it."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

import lockgate as lg
from lockgate.autoscaling.config import AutoscalingConfig
from lockgate.autoscaling.policy import VertexRates, VertexShape, evaluate

CONFIG = AutoscalingConfig(min_parallelism=1, max_parallelism=16, target_utilization=0.5)


def chain(source_p: int = 1, work_p: int = 2, **work: object) -> list[VertexShape]:
    return [
        VertexShape(1, "source", source_p, True),
        VertexShape(2, "work", work_p, False, inputs=(1,), **work),  # type: ignore[arg-type]
    ]


def test_a_busy_vertex_gets_the_parallelism_its_rate_needs_at_the_target() -> None:
    # 2 subtasks take 1,000 records/s at 90% busy: one processes 555/s when busy
    ev = evaluate(
        chain(),
        {1: VertexRates(1000, 1000, 0.1), 2: VertexRates(1000, 1000, 0.9)},
        CONFIG,
    )
    assert ev is not None
    work = ev.vertices[2]
    assert work.capacity_per_subtask == pytest.approx(1000 / 1.8)
    assert work.utilization == pytest.approx(0.9), "outside 0.5 ± 0.3"
    assert work.wanted == math.ceil(1000 / (1000 / 1.8 * 0.5)) == 4
    assert "1,000 records/s" in work.reason


def test_a_source_backlog_adds_its_growth_and_its_catch_up_rate() -> None:
    config = AutoscalingConfig(target_utilization=0.5, catch_up_ms=10_000)
    rates = {
        # reads 1,000/s while its backlog grows 500/s and stands at 20,000 records
        1: VertexRates(1000, 1000, 0.2, backlog=20_000, backlog_growth=500),
        2: VertexRates(1000, 2000, 1.0),  # emits 2 records per record taken
    }
    ev = evaluate(chain(work_p=1), rates, config)
    assert ev is not None
    steady, catch_up = 1000 + 500, 20_000 / 10
    assert ev.vertices[1].target_rate == pytest.approx(steady + catch_up)
    assert ev.vertices[2].target_rate == pytest.approx(steady + catch_up)  # ratio 1:1
    # the steady rate at the target utilization, the catch-up at full speed (Flink's)
    assert ev.vertices[2].wanted == math.ceil((steady / 0.5 + catch_up) / 1000) == 5
    assert "2,000/s of it to catch up a backlog" in ev.vertices[2].reason


def test_the_rate_downstream_follows_each_vertex_output_ratio() -> None:
    shapes = chain() + [VertexShape(3, "sink", 1, False, inputs=(2,))]
    rates = {
        1: VertexRates(100, 100, 0.1),
        2: VertexRates(100, 300, 0.3),  # a flat map: 3 out per record in
        3: VertexRates(300, 0, 0.3),
    }
    ev = evaluate(shapes, rates, CONFIG)
    assert ev is not None
    assert ev.vertices[3].target_rate == pytest.approx(300)


def test_within_the_utilization_band_nothing_changes() -> None:
    ev = evaluate(
        chain(), {1: VertexRates(1000, 1000, 0.1), 2: VertexRates(1000, 1000, 0.6)}, CONFIG
    )
    assert ev is not None and ev.vertices[2].wanted == 2
    assert "within" in ev.vertices[2].reason
    assert ev.changes() == {}


def test_no_input_means_the_lowest_parallelism_and_bounds_hold() -> None:
    ev = evaluate(chain(work_p=4), {1: VertexRates(0, 0, 0.0), 2: VertexRates(0, 0, 0.0)}, CONFIG)
    assert ev is not None and ev.vertices[2].wanted == 1
    config = AutoscalingConfig(min_parallelism=1, max_parallelism=3, target_utilization=0.5)
    ev = evaluate(
        chain(upper_bound=2),
        {1: VertexRates(10_000, 10_000, 0.1), 2: VertexRates(1000, 1000, 1.0)},
        config,
    )
    assert ev is not None and ev.vertices[2].wanted == 2, "the vertex's own bound (slots)"
    assert "bounded to 1..2" in ev.vertices[2].reason


def test_forward_connected_vertices_take_the_largest_wanted() -> None:
    shapes = [
        VertexShape(1, "source", 2, True, forward_peers=(2,)),
        VertexShape(2, "work", 2, False, inputs=(1,), forward_peers=(1,)),
    ]
    ev = evaluate(
        shapes, {1: VertexRates(1000, 1000, 0.1), 2: VertexRates(1000, 1000, 1.0)}, CONFIG
    )
    assert ev is not None
    assert ev.vertices[1].wanted == ev.vertices[2].wanted == 4


def test_a_vertex_without_metrics_means_no_evaluation() -> None:
    assert evaluate(chain(), {1: VertexRates(1, 1, 0.1)}, CONFIG) is None


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"min_parallelism": 0}, "min_parallelism must be an int >= 1"),
        ({"min_parallelism": 4, "max_parallelism": 2}, "below min_parallelism"),
        ({"max_parallelism": 500}, "above the job's max parallelism"),
        ({"target_utilization": 0}, "target_utilization must be a number in (0, 1]"),
        ({"target_utilization": 1.5}, "target_utilization"),
        ({"utilization_boundary": -0.1}, "utilization_boundary"),
        ({"stabilization": -1}, "stabilization must be zero or more"),
        ({"scale_down_delay": "5m"}, "scale_down_delay must be a datetime.timedelta"),
        ({"interval": timedelta(0)}, "interval must be positive"),
    ],
)
def test_bad_settings_are_refused_with_what_is_wrong(kwargs: dict, words: str) -> None:
    env = lg.StreamEnvironment(parallelism=1, max_parallelism=128)
    with pytest.raises(lg.ConfigurationError, match=None) as e:
        env.autoscaling(**kwargs)
    assert words in str(e.value)
    assert env.autoscaling_config is None, "a refused call changes nothing"


def test_autoscaling_needs_checkpointing() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    env.autoscaling()
    env.from_sequence(0, 10).uid("n").print()
    with pytest.raises(lg.ConfigurationError, match="enable_checkpointing"):
        env.get_execution_plan("no checkpoints")

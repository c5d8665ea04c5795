"""Settings that would silently misbehave are caught when the job is built (issue 18):

* an exactly-once sink (two-phase commit, M-X2) in an unbounded job without
  checkpointing would never publish anything: the job is refused (item 13);
* ``enable_checkpointing(5)`` is 5 ms, which is almost never meant: it warns (item 15).
"""

from __future__ import annotations

import warnings
from datetime import timedelta
from pathlib import Path

import pytest

import lockgate as lg
from conftest import lockgate_threads
from lockgate.connectors import DiscardingSink, FileSink, PostgresSink, SequenceSource
from pg_fixtures import SHARED_DSN as DSN  # a string only: nothing here connects


def unbounded_job(
    sink: lg.connectors.base.Sink, *, bounded: bool = False, checkpointing: bool = False
) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=1)
    if checkpointing:
        env.enable_checkpointing(timedelta(seconds=1))
    (
        env.from_source(SequenceSource(0, 10, bounded=bounded), name="numbers").sink_to(
            sink, name="out"
        )
    )
    return env


def refusal(env: lg.StreamEnvironment) -> str:
    """The InvalidGraphError of building ``env``: from get_job_graph and from execute
    (before anything runs)."""
    with pytest.raises(lg.InvalidGraphError) as from_graph:
        env.get_job_graph()
    with pytest.raises(lg.InvalidGraphError) as from_execute:
        env.execute("never runs", executor=lg.LocalExecutor())
    assert str(from_graph.value) == str(from_execute.value)
    assert not lockgate_threads(), "a refused job must fail before any subtask starts"
    return str(from_graph.value)


@pytest.mark.parametrize(
    "sink",
    [
        pytest.param(lambda tmp: FileSink(str(tmp / "out")), id="FileSink"),
        pytest.param(lambda tmp: PostgresSink(DSN, "never_written"), id="PostgresSink"),
        pytest.param(  # applies a changelog in its two-phase-commit transactions
            lambda tmp: PostgresSink(DSN, "never_written", mode="upsert", key="k"),
            id="PostgresSink-upsert",
        ),
    ],
)
def test_m_x2_an_exactly_once_sink_in_an_unbounded_job_without_checkpoints_is_refused(
    sink, tmp_path: Path
) -> None:
    msg = refusal(unbounded_job(sink(tmp_path)))
    assert "'out'" in msg and "exactly-once sink" in msg
    assert "'numbers'" in msg, "the message names the unbounded source"
    assert "never publish" in msg
    assert "enable_checkpointing" in msg and "at-least-once" in msg
    assert not (tmp_path / "out").exists(), "nothing ran"


@pytest.mark.parametrize(
    "sink",
    [
        pytest.param(
            lambda tmp: FileSink(str(tmp / "out"), exactly_once=False), id="FileSink-at-least-once"
        ),
        pytest.param(lambda tmp: PostgresSink(DSN, "t", mode="append"), id="PostgresSink-append"),
        pytest.param(lambda tmp: DiscardingSink(), id="DiscardingSink"),
    ],
)
def test_an_at_least_once_sink_in_an_unbounded_job_without_checkpoints_is_accepted(
    sink, tmp_path: Path
) -> None:
    unbounded_job(sink(tmp_path)).get_job_graph()


def test_m_x2_an_exactly_once_sink_is_accepted_with_checkpoints_or_a_bounded_job(
    tmp_path: Path,
) -> None:
    unbounded_job(FileSink(str(tmp_path / "a")), checkpointing=True).get_job_graph()
    unbounded_job(FileSink(str(tmp_path / "b")), bounded=True).get_job_graph()


def test_a_bounded_exactly_once_sink_beside_an_unbounded_source_is_refused(tmp_path: Path) -> None:
    """The driver commits a bounded sink's last transaction only when the whole job has
    ended, which an unbounded job without checkpoints never does."""
    env = lg.StreamEnvironment(parallelism=1)
    env.from_source(SequenceSource(0, 10), name="bounded").sink_to(
        FileSink(str(tmp_path / "out")), name="files"
    )
    env.from_source(SequenceSource(0, 10, bounded=False), name="forever").sink_to(
        DiscardingSink(), name="discard"
    )
    msg = refusal(env)
    assert "'files'" in msg and "'forever'" in msg


@pytest.mark.parametrize("interval", [5, 1, 99])
def test_a_bare_int_checkpoint_interval_under_100_warns_that_it_is_milliseconds(
    interval: int,
) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    with pytest.warns(UserWarning, match=rf"every {interval} ms.*timedelta\(seconds={interval}\)"):
        env.enable_checkpointing(interval)
    assert env.checkpoint_config.interval == interval, "the value itself is kept (ms)"


@pytest.mark.parametrize("interval", [100, 5000, timedelta(milliseconds=5), timedelta(seconds=5)])
def test_an_interval_of_100_ms_or_more_or_a_timedelta_does_not_warn(interval: object) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.enable_checkpointing(interval)  # type: ignore[arg-type]

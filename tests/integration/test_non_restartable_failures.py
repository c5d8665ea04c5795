"""Failures no restart can fix, and failures that repeat (issue 18 item 9, M-R2), on
both executors.

* An attempt failing with a ``NonRestartableError`` (a ``ConfigurationError``, a
  PostgreSQL transaction someone else rolled back) ends the job at once, whatever the
  restart strategy allows.
* A record that fails deterministically in user code keeps restarting (Flink's
  default), but each restart line says how often the same error at the same operator
  repeated, and ``JobClient.restart_causes()`` shows it while the job runs.
"""

from __future__ import annotations

import logging
import os

import pytest

import lockgate as lg
from conftest import wait_until
from lockgate.connectors import CollectSink, SequenceSource
from lockgate.connectors.postgres.transactions import TransactionLostError

NOT_RESTARTABLE = {
    "configuration": lambda: lg.ConfigurationError("table 'totals' has no column 'v'"),
    "transaction-lost": lambda: TransactionLostError(
        "PostgresSink: prepared transaction 'p:1' is gone and was never committed"
    ),
}


class FailOn(lg.MapFunction):
    """Raises ``make()`` on the value ``at``, in every attempt."""

    def __init__(self, at: int, make) -> None:
        self.at = at
        self.make = make

    def map(self, x):
        if x == self.at:
            raise self.make()
        return x


def failing_job(executor, at: int, make, strategy: lg.RestartStrategy) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.set_restart_strategy(strategy)
    (
        env.from_source(SequenceSource(0, 2_000, batch_size=100))
        .uid("numbers")
        .map(FailOn(at, make), name="poison")
        .uid("poison")
        .sink_to(CollectSink(), name="collect")
        .uid("collect")
    )
    return env


@pytest.mark.parametrize("kind", sorted(NOT_RESTARTABLE))
def test_m_r2_a_non_restartable_error_ends_the_job_at_once_whatever_the_strategy(
    executor, kind
) -> None:
    make = NOT_RESTARTABLE[kind]
    env = failing_job(executor, 700, make, lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    with pytest.raises(lg.JobFailedError) as info:
        env.execute(f"not restartable {kind}")
    error = info.value
    expected = type(make())
    assert error.attempts == 1, f"restarted {error.attempts - 1} times: {error}"
    assert error.restartable is False
    assert f"{expected.__name__} is not restartable" in str(error)
    assert error.operator == "poison"
    assert isinstance(error.__cause__, expected)


def test_m_r2_a_deterministic_failure_restarts_saying_how_often_it_repeated(
    executor, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="lockgate.recovery.failover")
    # unlimited, like the default, with short waits
    strategy = lg.RestartStrategy.exponential_delay(initial=1, max=20, jitter=0.0)
    env = failing_job(executor, 500, lambda: ValueError("poison record 500"), strategy)
    client = env.execute_async("poison forever")
    try:
        wait_until(
            lambda: any(c.count >= 3 for c in client.restart_causes()) or client.done(),
            "the poison record failed three attempts",
            timeout_s=90,
        )
    finally:
        client.cancel()
        result = client.wait(60)
    assert result.status is lg.JobStatus.CANCELED
    causes = client.restart_causes()
    assert len(causes) == 1, causes
    cause = causes[0]
    assert (cause.operator, cause.error) == ("poison", "ValueError: poison record 500")
    assert cause.count >= 3 and cause.consecutive == cause.count
    assert result.restart_causes == causes
    lines = [r.getMessage() for r in caplog.records if "restarting in" in r.getMessage()]
    assert len(lines) >= 3, lines
    for n, line in enumerate(lines[:3], start=1):
        times = "1 time" if n == 1 else f"{n} times"
        assert (
            f"the same error at operator 'poison' repeated {times} in a row ({n} in this run)"
        ) in line, line


class FailOnceCancelled(lg.MapFunction):
    """On the value ``at``: writes ``reached``, waits (bounded) until ``cancelled``
    exists, then raises: an attempt that fails after its job was cancelled."""

    def __init__(self, at: int, reached: str, cancelled: str) -> None:
        self.at, self.reached, self.cancelled = at, reached, cancelled

    def map(self, x):
        if x == self.at:
            import os
            import threading

            open(self.reached, "w").close()
            pause = threading.Event()
            for _ in range(6_000):  # at most a minute: the test creates the file at once
                if os.path.exists(self.cancelled):
                    break
                pause.wait(0.01)
            raise ValueError(f"record {x} failed after the cancel")
        return x


def test_m_r2_an_attempt_failing_while_the_job_is_cancelled_ends_it_canceled(
    executor, tmp_path
) -> None:
    """Cancel wins, as in Flink: a failure racing the cancel (here: raised after it) ends
    the job CANCELED, not FAILED, and no attempt restarts; the failure stays in the
    attempt's history. (It ended FAILED, in a test cancelling a job failing in a loop.)"""
    reached, cancelled = str(tmp_path / "reached"), str(tmp_path / "cancelled")
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=5, delay=0))
    (
        env.from_source(SequenceSource(0, 2_000, batch_size=100))
        .uid("numbers")
        .map(FailOnceCancelled(500, reached, cancelled), name="late failure")
        .uid("late-failure")
        .sink_to(CollectSink(), name="collect")
        .uid("collect")
    )
    client = env.execute_async("cancelled while failing")
    try:
        wait_until(lambda: os.path.exists(reached), "the map reached its record", 120)
    finally:
        client.cancel()
        open(cancelled, "w").close()
    result = client.wait(60)
    assert result.status is lg.JobStatus.CANCELED
    assert result.attempts == 1, "a cancelled job restarted"

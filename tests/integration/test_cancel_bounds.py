"""Cancellation and failure end a local job in bounded time, even with hung user code
(issue 18 item 10; M-R1: on failure, stop the dataflow).

Python threads cannot be killed: a task that does not stop within the executor's
``cancel_timeout_s`` is abandoned (a daemon thread, named in a warning with its stack and
in the cancelled result's ``abandoned_tasks``) and the job ends. A task running a
function operator checks for cancellation between records, so a cancel takes about one
record's time, not one batch's. Local executor only: on Spark the slot's Python worker
is killed (tests/spark/test_hung_cancel.py)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

import lockgate as lg
from lockgate.connectors import DiscardingSink, SequenceSource
from lockgate.job.result import JobStatus

ENDLESS = 10**15  # a source that would run for hours: only a cancel or failure ends it
_GATES: dict[str, Gate] = {}


def _gate(name: str) -> Gate:
    return _GATES[name]


class Gate:
    """Events shared between the test and the job's functions (pickled by name, so the
    job's copy is this object). The test sets ``release`` in its teardown, so the
    abandoned thread ends before the test does."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.entered = threading.Event()
        self.release = threading.Event()
        _GATES[name] = self

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_gate, (self.name,))


class BlockForever:
    """A map that blocks on its first record until the test releases it."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def map(self, value: int) -> int:
        self.gate.entered.set()
        self.gate.release.wait()
        return value


class TwentyMsPerRecord:
    """A function costing 20 ms of work per record (the cost of the record, not a wait),
    as a map, flat_map, filter or process function."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def map(self, value: int) -> int:
        self.gate.entered.set()
        time.sleep(0.02)
        return value

    def flat_map(self, value: int) -> list[int]:
        return [self.map(value)]

    def filter(self, value: int) -> bool:
        return self.map(value) >= 0

    def process_element(self, value: int, ctx: Any) -> list[int]:
        return [self.map(value)]


#: how each kind of function operator is applied to the stream
SLOW_OPERATORS = {
    "map": lambda s, f: s.map(f, name="slow map"),
    "flat_map": lambda s, f: s.flat_map(f, name="slow flat_map"),
    "filter": lambda s, f: s.filter(f, name="slow filter"),
    "process": lambda s, f: s.process(f, name="slow process"),
    "keyed process": lambda s, f: s.key_by(lambda v: v % 7).process(f, name="slow keyed"),
}


@pytest.fixture
def gate(request: pytest.FixtureRequest) -> Any:
    g = Gate(f"gate-{request.node.name}")
    yield g
    g.release.set()
    _GATES.pop(g.name, None)


def abandoned_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if "did not stop within" in r.getMessage() and r.levelno == logging.WARNING
    ]


def test_m_r1_cancel_of_a_job_whose_map_blocks_forever_ends_within_the_cancel_timeout(
    gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    """``client.cancel()`` of a job whose map never returns: ``wait()`` returns a CANCELED
    result within the cancellation timeout, naming the stuck task (result and a warning
    with its thread's stack). Before, ``wait()`` never returned."""
    caplog.set_level(logging.WARNING, logger="lockgate")
    env = lg.StreamEnvironment(parallelism=1)
    (
        env.from_source(SequenceSource(0, ENDLESS, batch_size=100))
        .map(BlockForever(gate), name="stuck map")
        .sink_to(DiscardingSink(), name="sink")
    )
    client = env.execute_async("stuck map job", executor=lg.LocalExecutor(cancel_timeout_s=1.0))
    assert gate.entered.wait(30), "the map never got a record"
    started = time.monotonic()
    client.cancel()
    try:
        result = client.wait(10)
    except TimeoutError:
        pytest.fail("cancel() of a job with a blocked map did not end it within 10 s")
    elapsed = time.monotonic() - started
    assert result.status is JobStatus.CANCELED
    assert elapsed < 1.0 + 2.0, f"the cancel took {elapsed:.2f} s (timeout 1 s)"
    [stuck] = result.abandoned_tasks
    assert "stuck map" in stuck and "(0)" in stuck
    [warning] = abandoned_warnings(caplog)
    assert stuck in warning and "abandoned" in warning
    assert "in map" in warning and "self.gate.release.wait()" in warning, (
        "the warning shows where the thread is stuck"
    )


def test_m_r1_m_c6_a_failing_job_whose_other_task_hangs_ends_and_is_failed_once(
    gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    """With checkpoints, a map that blocks forever (its own task) makes checkpoint 1
    expire; with no failure tolerated the coordinator fails the job: the source task
    stops, the map task is abandoned after the timeout, and ``execute`` raises a
    checkpoint ``JobFailedError``. The coordinator stops triggering once it failed the
    job, so "failing job" is logged once. Before, every later checkpoint expired too
    and the job was failed (and logged) again until the wait for the threads gave up."""
    caplog.set_level(logging.WARNING, logger="lockgate")
    env = lg.StreamEnvironment(parallelism=1)
    env.enable_checkpointing(100)
    env.checkpoint_config.timeout = 300
    env.checkpoint_config.tolerable_failures = 0
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=0, delay=0))
    (
        env.from_source(SequenceSource(0, ENDLESS, batch_size=100), name="numbers")
        .rebalance()
        .map(BlockForever(gate), name="stuck map")
        .sink_to(DiscardingSink(), name="sink")
    )
    client = env.execute_async(
        "failing with a stuck task", executor=lg.LocalExecutor(cancel_timeout_s=2.0)
    )
    assert gate.entered.wait(30), "the map never got a record"
    started = time.monotonic()
    with pytest.raises(lg.JobFailedError) as err:
        client.wait(15)
    elapsed = time.monotonic() - started
    assert err.value.reason is lg.FailureReason.CHECKPOINT
    # checkpoint 1 expires 300 ms after its trigger, then the map gets 2 s to stop
    assert elapsed < 0.1 + 0.3 + 2.0 + 2.0, f"the failing job took {elapsed:.2f} s to end"
    failing = [r.getMessage() for r in caplog.records if r.getMessage().startswith("failing job")]
    assert len(failing) == 1, f"'failing job' logged {len(failing)} times: {failing}"
    [warning] = abandoned_warnings(caplog)
    assert "'stuck map -> sink (0)'" in warning and "self.gate.release.wait()" in warning


@pytest.mark.parametrize("kind", list(SLOW_OPERATORS))
def test_m_r1_cancel_latency_is_one_record_not_one_batch(gate: Gate, kind: str) -> None:
    """A map (flat_map, filter, process, keyed process) taking 20 ms per record over
    batches of 1,000 records (20 s a batch) is cancelled within one record's time plus a
    buffer timeout: the cancel is measured well under 1 s, with a 5 s cancellation
    timeout it does not need (nothing is abandoned). Before, the batch under way was
    processed to its end."""
    env = lg.StreamEnvironment(parallelism=1)
    numbers = env.from_source(SequenceSource(0, ENDLESS, batch_size=1000))
    SLOW_OPERATORS[kind](numbers, TwentyMsPerRecord(gate)).sink_to(DiscardingSink(), name="sink")
    client = env.execute_async("slow map job", executor=lg.LocalExecutor(cancel_timeout_s=5.0))
    assert gate.entered.wait(30), "the map never got a record"
    started = time.monotonic()
    client.cancel()
    try:
        result = client.wait(10)
    except TimeoutError:
        pytest.fail("the cancel waited for the whole batch of 1,000 records (20 s)")
    elapsed = time.monotonic() - started
    assert result.status is JobStatus.CANCELED
    assert result.abandoned_tasks == []
    assert elapsed < 1.0, f"the cancel took {elapsed:.2f} s; one record takes 0.02 s"


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), "5", True, None])
def test_a_cancel_timeout_that_is_not_a_positive_number_of_seconds_is_refused(bad: Any) -> None:
    with pytest.raises(lg.ConfigurationError, match="cancel_timeout_s must be a finite number"):
        lg.LocalExecutor(cancel_timeout_s=bad)

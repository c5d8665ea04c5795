"""A failure in user code fails the job fast and cleanly: lg.JobFailedError naming the operator
and subtask, the user's exception as __cause__, its traceback in the message, and no thread left;
on the local executor and on Spark (local[2])."""

from __future__ import annotations

import time

import pytest

import lockgate as lg
from conftest import is_spark, lockgate_threads, on_executors, wait_until
from lockgate.connectors import DiscardingSink, SequenceSource, Sink, SinkWriter

ENDLESS = 10**15  # a source that would run for hours: only the failure can end the job


class BoomError(Exception):
    pass


def explode_at_1000(x):
    if x == 1000:
        raise BoomError(f"boom at {x}")
    return x


#: how long a failing job may take from execute() to JobFailedError: on Spark this includes
#: submitting the barrier stage, starting the slots' Python workers and letting the slots
#: that did not fail close their operators; well below the 60 s a silent slot takes to be
#: declared lost and the 15 s a failed slot waits for the driver, which a failure that
#: surfaced by a timeout would take (on a loaded 2-core machine a prompt failure still
#: takes several seconds)
FAILURE_BUDGET_S = {"local": 1.0, "spark": 12.0}


def run_failing(
    env: lg.StreamEnvironment, executor, name: str = "failing job"
) -> lg.JobFailedError:
    budget = FAILURE_BUDGET_S["spark" if is_spark(executor) else "local"]
    started = time.monotonic()
    with pytest.raises(lg.JobFailedError) as err:
        env.execute(name, executor=executor)
    elapsed = time.monotonic() - started
    assert elapsed < budget, f"the failure took {elapsed:.2f}s to surface"
    assert not lockgate_threads(), f"threads left: {[t.name for t in lockgate_threads()]}"
    return err.value


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(1, 2), indirect=["executor"])
def test_a_user_exception_fails_the_job_naming_operator_and_subtask_fast(
    make_env, executor, parallelism
) -> None:
    env = make_env(parallelism=parallelism)
    (
        env.from_source(SequenceSource(0, ENDLESS))
        .map(explode_at_1000)
        .name("explosive")
        .rebalance()
        .sink_to(DiscardingSink(), name="sink")
    )
    error = run_failing(env, executor)
    text = str(error)
    assert "explosive" in text
    assert f"subtask 1/{parallelism}" in text
    assert error.operator == "explosive"
    assert error.subtask == 0, "value 1000 is in subtask 0's split"
    assert error.reason is lg.FailureReason.USER_CODE
    assert isinstance(error.__cause__, BoomError)
    assert str(error.__cause__) == "boom at 1000"
    assert "Traceback" in text and "explode_at_1000" in text and "BoomError: boom at 1000" in text
    assert "explode_at_1000" in (error.remote_traceback or "")


def test_the_failing_subtask_is_named_when_it_is_not_the_first(make_env, executor) -> None:
    def explode_in_upper_half(x):
        if x == ENDLESS // 2 + 10:
            raise BoomError("upper half")
        return x

    env = make_env(parallelism=2)
    env.from_source(SequenceSource(0, ENDLESS)).map(explode_in_upper_half, name="m").sink_to(
        DiscardingSink()
    )
    error = run_failing(env, executor)
    assert error.subtask == 1
    assert "subtask 2/2" in str(error)


def test_an_exception_in_open_fails_the_job_naming_the_operator(make_env, executor) -> None:
    class BadOpen(lg.MapFunction):
        def open(self, ctx):
            raise BoomError("cannot open")

        def map(self, value):
            return value

    env = make_env(parallelism=2)
    env.from_source(SequenceSource(0, ENDLESS)).map(BadOpen(), name="opener").sink_to(
        DiscardingSink()
    )
    error = run_failing(env, executor)
    assert error.operator == "opener"
    assert isinstance(error.__cause__, BoomError)
    assert "cannot open" in str(error)


class FailingWriter(SinkWriter):
    def write(self, batch):
        raise BoomError("disk full")


class FailingSink(Sink):
    def create_writer(self, ctx):
        return FailingWriter()


def test_an_exception_in_a_sink_writer_fails_the_job_naming_the_sink(make_env, executor) -> None:
    env = make_env(parallelism=2)
    env.from_source(SequenceSource(0, ENDLESS)).rebalance().sink_to(FailingSink(), name="bad sink")
    error = run_failing(env, executor)
    assert error.operator == "bad sink"
    assert isinstance(error.__cause__, BoomError)
    assert "disk full" in str(error)


def test_an_exception_in_a_key_selector_fails_the_job_naming_the_keyed_operator(
    make_env, executor
) -> None:
    def bad_key(x):
        if x == 3:
            raise BoomError("no key")
        return x

    env = make_env(parallelism=1)
    env.from_source(SequenceSource(0, ENDLESS)).map(lambda x: x, name="pre").key_by(
        bad_key
    ).process(lambda v, c: [v], name="keyed").sink_to(DiscardingSink())
    error = run_failing(env, executor)
    assert isinstance(error.__cause__, BoomError)
    assert "no key" in str(error)


def test_a_failure_downstream_of_a_blocked_producer_still_stops_every_thread(
    make_env, probe
) -> None:
    """The producer is blocked on a full channel when the consumer fails; cancelling must wake it.
    Local only: it watches the LocalExecutor's channels from inside the job."""
    executor = lg.LocalExecutor()
    probe.executor = executor

    def fail_once_the_producer_blocks(batch):
        channels = probe.executor.last_channels.values()
        deadline = time.monotonic() + 2.0
        while not any(c.backpressured for c in channels):
            if time.monotonic() > deadline:
                raise AssertionError("the producer never blocked on a full channel")
            time.sleep(0.001)
        raise BoomError("consumer gives up")

    env = make_env(parallelism=1, channel_capacity_bytes=4096, buffer_max_bytes=1024)
    (
        env.from_source(SequenceSource(0, ENDLESS))
        .rebalance()
        .map_batches(fail_once_the_producer_blocks, name="slow consumer")
        .sink_to(DiscardingSink())
    )
    started = time.monotonic()
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("blocked producer", executor=executor)
    assert time.monotonic() - started < 2.0
    assert isinstance(err.value.__cause__, BoomError), err.value
    assert err.value.operator == "slow consumer"
    assert not lockgate_threads()


def test_job_failed_error_is_a_lockgate_error_and_a_runtime_error() -> None:
    assert issubclass(lg.JobFailedError, lg.LockgateError)
    assert issubclass(lg.JobFailedError, RuntimeError)


def test_the_executor_can_run_another_job_after_a_failure(make_env, executor) -> None:
    env = make_env(parallelism=2)
    env.from_source(SequenceSource(0, ENDLESS)).map(explode_at_1000).sink_to(DiscardingSink())
    with pytest.raises(lg.JobFailedError):
        env.execute("fails", executor=executor)
    ok = make_env(parallelism=2)
    ok.from_source(SequenceSource(0, 100)).sink_to(DiscardingSink(), name="sink")
    assert ok.execute("works", executor=executor).records_in("sink") == 100


class Lifecycle(lg.MapFunction):
    """Records open / close per subtask into a probe, and counts records per subtask."""

    def __init__(self, probe, fail_at: int | None = None) -> None:
        self.probe = probe
        self.fail_at = fail_at

    def open(self, ctx):
        self.subtask = ctx.subtask_index
        self.probe.add((self.subtask, "open"))

        self.mapped = 0

    def map(self, value):
        if value == self.fail_at:
            raise BoomError(f"fail at {value}")
        self.mapped += 1
        return value

    def close(self):
        self.probe.add((self.subtask, "mapped", self.mapped))
        self.probe.add((self.subtask, "close"))


def test_close_runs_on_every_subtask_after_a_failure_too(make_env, file_probe, executor) -> None:
    probe = file_probe
    env = make_env(parallelism=2)
    (
        env.from_source(SequenceSource(0, ENDLESS))
        .map(Lifecycle(probe, fail_at=1000), name="life")
        .rebalance()
        .sink_to(DiscardingSink())
    )
    error = run_failing(env, executor)

    def events() -> list:
        return sorted(e for e in probe.items if e[1] != "mapped")

    # on Spark a slot that did not fail reports its close() in its own worker process,
    # which may finish just after the failed job has returned: poll, bounded
    want = [(0, "close"), (0, "open"), (1, "close"), (1, "open")]
    wait_until(lambda: len(events()) >= len(want), "every subtask's close() ran", 10)
    assert events() == want
    assert isinstance(error.__cause__, BoomError)


def test_a_function_is_opened_before_its_first_record_and_closed_after_its_last(
    make_env, file_probe, executor
) -> None:
    probe = file_probe
    env = make_env(parallelism=2)
    (
        env.from_source(SequenceSource(0, 10_000))
        .map(Lifecycle(probe), name="life")
        .sink_to(DiscardingSink())
    )
    env.execute("lifecycle", executor=executor)
    for s in (0, 1):
        assert [e[1] for e in probe.items if e[0] == s] == ["open", "mapped", "close"]
    assert sum(e[2] for e in probe.items if e[1] == "mapped") == 10_000

"""The output buffer timeout bounds latency: a slow, rate-limited source still delivers its
records one by one instead of holding them until a buffer fills (DESIGN §2); and with the
idle flush (the default) a task sends its part-filled buffers as soon as its input runs dry,
so a record alone in a quiet stream does not wait for the timeout at all. The manual-clock
tests drive the LocalExecutor's clock, so they run locally; the real-clock one on both
executors."""

from __future__ import annotations

import threading

import pytest

import lockgate as lg
from conftest import wait_until
from lockgate.connectors import SequenceSource, Sink, SinkWriter
from lockgate.core.batch import to_rows


class ProbeWriter(SinkWriter):
    def __init__(self, probe) -> None:
        self.probe = probe

    def write(self, batch) -> None:
        self.probe.extend(to_rows(batch))


class ProbeSink(Sink):
    """Reports every record to the probe the moment the sink receives it."""

    def __init__(self, probe) -> None:
        self.probe = probe

    def create_writer(self, ctx):
        return ProbeWriter(self.probe)


def _run_in_thread(env, executor, outcome, done) -> threading.Thread:
    def run() -> None:
        try:
            outcome["result"] = env.execute("buffer timeout", executor=executor)
        except BaseException as e:  # noqa: BLE001
            outcome["error"] = e
        finally:
            done.set()

    job = threading.Thread(target=run, name="test job driver")
    job.start()
    return job


def test_a_rate_limited_source_delivers_each_record_after_the_buffer_timeout_on_a_manual_clock(
    make_env, probe
) -> None:
    clock = lg.ManualClock()
    executor = lg.LocalExecutor(clock=clock)
    # without the idle flush, only the buffer timeout sends a part-filled buffer
    env = make_env(parallelism=1, buffer_timeout_ms=100).set_flush_when_idle(False)
    (
        env.from_source(SequenceSource(0, 3, rows_per_second=1))
        .map(lambda x: (probe.bump("emitted"), x)[1], name="emitted")
        .sink_to(ProbeSink(probe), name="sink")
        .disable_chaining()
    )

    outcome: dict[str, object] = {}
    done = threading.Event()
    job = _run_in_thread(env, executor, outcome, done)
    try:
        for i in range(3):
            wait_until(
                lambda i=i: probe.count("emitted") == i + 1,
                f"the source emits record {i} once its rate allows it",
            )
            clock.advance(100)
            wait_until(
                lambda i=i: len(probe) == i + 1,
                f"record {i} reaches the sink once the 100 ms buffer timeout passed",
            )
            assert probe.items == list(range(i + 1))
            clock.advance(900)  # the source may emit one record per second
        assert done.wait(10), "the job ends after the last record"
    finally:
        clock.advance(10_000)
        job.join(10)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"].status is lg.JobStatus.FINISHED


def test_a_record_alone_in_a_quiet_stream_reaches_the_sink_without_the_clock_moving(
    make_env, probe
) -> None:
    """The idle flush: the buffer timeout is an hour and the manual clock never reaches
    it, yet each record reaches the sink (across a network-style edge: chaining is off)
    while the clock stands still, because the tasks flush as soon as their input runs dry.
    The bound is therefore zero clock time, whatever the buffer timeout."""
    clock = lg.ManualClock()
    executor = lg.LocalExecutor(clock=clock)
    env = make_env(parallelism=1, buffer_timeout_ms=3_600_000)
    (
        env.from_source(SequenceSource(0, 3, rows_per_second=1))
        .map(lambda x: (probe.bump("emitted"), x)[1], name="emitted")
        .rebalance()
        .map(lambda x: x, name="between")
        .sink_to(ProbeSink(probe), name="sink")
        .disable_chaining()
    )
    outcome: dict[str, object] = {}
    done = threading.Event()
    job = _run_in_thread(env, executor, outcome, done)
    try:
        for i in range(3):
            stopped_at = clock.monotonic_ms()
            wait_until(
                lambda i=i: len(probe) == i + 1,
                f"record {i} reaches the sink with the clock standing at {stopped_at} ms "
                "(the idle flush; the buffer timeout is an hour)",
            )
            assert clock.monotonic_ms() == stopped_at
            assert probe.items == list(range(i + 1))
            clock.advance(1000)  # the source may emit one record per second
        assert done.wait(10), "the job ends after the last record"
    finally:
        clock.advance(10_000)
        job.join(10)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"].status is lg.JobStatus.FINISHED


def test_set_flush_when_idle_rejects_what_is_not_a_bool() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    with pytest.raises(lg.ConfigurationError, match="set_flush_when_idle takes True or False"):
        env.set_flush_when_idle("yes")  # type: ignore[arg-type]
    env.config.flush_when_idle = 1  # type: ignore[assignment]
    with pytest.raises(lg.ConfigurationError, match="flush_when_idle must be a bool"):
        env.config.validate()


def test_a_rate_limited_source_on_the_real_clock_reaches_the_sink_before_it_ends(
    make_env, file_probe, executor
) -> None:
    """The first record reaches the sink while the source is still emitting: without the buffer
    timeout everything would wait in the output buffer until the source ended."""
    env = make_env(parallelism=1, buffer_timeout_ms=5)
    # the source emits for 1.5 s: longer than the gap between the start of the source's and
    # the sink's Spark slots, so only the buffer timeout can explain an early arrival
    n = 60
    probe = file_probe

    class FirstArrival(SinkWriter):
        def write(self, batch) -> None:
            rows = to_rows(batch)
            if not len(probe):
                probe.add(("emitted when the first record arrived", probe.count("emitted")))
            probe.extend(rows)

    class FirstArrivalSink(Sink):
        def create_writer(self, ctx):
            return FirstArrival()

    (
        env.from_source(SequenceSource(0, n, rows_per_second=40))
        .map(lambda x: (probe.bump("emitted"), x)[1])
        .sink_to(FirstArrivalSink())
        .disable_chaining()
    )
    result = env.execute("real clock", executor=executor)
    assert result.status is lg.JobStatus.FINISHED
    [(_, emitted_then), *records] = probe.items
    assert records == list(range(n))
    assert emitted_then < n, (
        "the first record waited in the buffer until the source had emitted everything"
    )

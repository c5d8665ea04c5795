"""Backpressure (DESIGN §1 Channels): behind a slow sink the producer blocks, and the data queued
in every channel stays under the channel capacity. The channel bounds are read from the
LocalExecutor's channels; that no record is lost or duplicated is checked on both executors."""

from __future__ import annotations

import time

import pytest

import lockgate as lg
from conftest import on_executors
from lockgate.connectors import SequenceSource, Sink, SinkWriter
from lockgate.core.batch import to_rows


class SlowWriter(SinkWriter):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.values: list[int] = []

    def write(self, batch) -> None:
        time.sleep(self.delay_s)  # the slow user code under test, not a wait
        self.values.extend(to_rows(batch))

    def result(self):
        return self.values


class SlowSink(Sink):
    default_name = "slow"

    def __init__(self, delay_s: float = 0.001) -> None:
        self.delay_s = delay_s

    def create_writer(self, ctx):
        return SlowWriter(self.delay_s)


CAPACITY = 5000  # not a multiple of the batch size, so a put can find the channel nearly full
BUFFER = 1000


@pytest.mark.parametrize("parallelism", [1, 2])
def test_behind_a_slow_sink_the_producer_blocks_and_queued_data_stays_under_the_bound(
    make_env, parallelism
) -> None:
    env = make_env(
        parallelism=parallelism, channel_capacity_bytes=CAPACITY, buffer_max_bytes=BUFFER
    )
    n = 40_000
    (
        env.from_source(SequenceSource(0, n, batch_size=500), name="numbers")
        .rebalance()
        .sink_to(SlowSink(), name="slow sink")
    )
    executor = lg.LocalExecutor()
    result = env.execute("backpressure", executor=executor)

    assert result.status is lg.JobStatus.FINISHED
    assert result.records_in("slow sink") == n
    written = sorted(v for part in result.sink_results[_sink_uid(result)] for v in part)
    assert written == list(range(n)), "backpressure must not lose or duplicate records"

    channels = executor.last_channels
    assert len(channels) == parallelism * parallelism
    for key, ch in channels.items():
        assert ch.capacity_bytes == CAPACITY
        assert ch.peak_bytes <= ch.capacity_bytes, f"channel {key} held {ch.peak_bytes} bytes"
    assert sum(ch.backpressured for ch in channels.values()) > 0, "the producer never waited"
    assert max(ch.peak_bytes for ch in channels.values()) > CAPACITY // 2, (
        "the channels filled up, so the bound was what held the producer back"
    )


def test_a_slow_sink_behind_a_key_by_bounds_every_channel_too(make_env) -> None:
    env = make_env(parallelism=2, channel_capacity_bytes=CAPACITY, buffer_max_bytes=BUFFER)
    n = 20_000
    (
        env.from_source(SequenceSource(0, n, batch_size=250))
        .key_by(lambda x: x % 101)
        .process(lambda v, ctx: [v])
        .disable_chaining()
        .sink_to(SlowSink(), name="slow sink")
    )
    executor = lg.LocalExecutor()
    result = env.execute("keyed backpressure", executor=executor)
    assert result.records_in("slow sink") == n
    for key, ch in executor.last_channels.items():
        assert ch.peak_bytes <= ch.capacity_bytes, f"channel {key} held {ch.peak_bytes} bytes"
    assert sum(ch.backpressured for ch in executor.last_channels.values()) > 0


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(1, 2), indirect=["executor"])
@pytest.mark.parametrize("keyed", [False, True], ids=["rebalance", "key_by"])
def test_behind_a_slow_sink_every_record_arrives_exactly_once(
    make_env, executor, parallelism, keyed
) -> None:
    env = make_env(
        parallelism=parallelism, channel_capacity_bytes=CAPACITY, buffer_max_bytes=BUFFER
    )
    n = 20_000
    numbers = env.from_source(SequenceSource(0, n, batch_size=250), name="numbers")
    routed = (
        numbers.key_by(lambda x: x % 101).process(lambda v, ctx: [v])
        if keyed
        else numbers.rebalance()
    )
    routed.sink_to(SlowSink(), name="slow sink")
    result = env.execute("backpressure", executor=executor)
    assert result.records_in("slow sink") == n
    written = sorted(v for part in result.sink_results[_sink_uid(result)] for v in part)
    assert written == list(range(n)), "backpressure must not lose or duplicate records"


def _sink_uid(result: lg.JobExecutionResult) -> str:
    return result.operators["slow sink"].uid

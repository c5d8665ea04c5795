"""The driver's liveness decision over an attempt's slots (issue 22 part 3: a cut network):
a slot silent past the heartbeat timeout is lost; slots not all started within the start
timeout fail the attempt; the two timeouts are separate, so a short heartbeat timeout (to
find a cut host early) does not fail attempts whose executors Spark is still launching.

Pure: every time is given; no clock, no sleep."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.executor.spark import SparkExecutor
from lockgate.executor.spark.liveness import (
    SlotSilent,
    SlotsNotStarted,
    check_liveness,
    start_timeout,
)


def verdict(**facts: Any) -> Any:
    base: dict[str, Any] = {
        "now": 100.0,
        "submitted": 0.0,
        "num_slots": 2,
        "registered": [0, 1],
        "last_heartbeat": {0: 99.0, 1: 99.0},
        "finished": set(),
        "start_timeout_s": 90.0,
        "heartbeat_timeout_s": 10.0,
    }
    base.update(facts)
    return check_liveness(**base)


def test_slots_that_heartbeat_are_alive() -> None:
    assert verdict() is None


def test_a_slot_silent_past_the_heartbeat_timeout_is_lost_and_not_before() -> None:
    assert verdict(last_heartbeat={0: 90.0, 1: 99.0}) is None, "exactly the timeout: not yet"
    assert verdict(last_heartbeat={0: 89.9, 1: 99.0}) == SlotSilent(0, pytest.approx(10.1))


def test_the_lowest_silent_slot_is_named() -> None:
    found = verdict(last_heartbeat={1: 50.0, 0: 60.0})
    assert isinstance(found, SlotSilent) and found.slot == 0


def test_a_finished_slot_is_never_silent() -> None:
    assert verdict(last_heartbeat={0: 1.0, 1: 99.0}, finished={0}) is None


def test_slow_starting_slots_wait_for_the_start_timeout_not_the_heartbeat_timeout() -> None:
    # 60 s after submission, one slot registered (Spark still launching an executor in
    # place of a lost one): far past the 10 s heartbeat timeout, within the start timeout
    waiting = {"now": 60.0, "registered": [0], "last_heartbeat": {0: 59.5}}
    assert verdict(**waiting) is None
    late = verdict(**{**waiting, "now": 90.5, "last_heartbeat": {0: 90.0}})
    assert late == SlotsNotStarted(started=1, num_slots=2, waited_s=90.5)


def test_the_start_check_comes_before_the_silence_check() -> None:
    found = verdict(now=95.0, registered=[0], last_heartbeat={0: 1.0})
    assert isinstance(found, SlotsNotStarted)


def test_the_start_timeout_defaults_to_the_longer_of_heartbeat_and_slot_wait() -> None:
    assert start_timeout(None, 10.0, 90.0) == 90.0
    assert start_timeout(None, 60.0, 60.0) == 60.0
    assert start_timeout(None, 120.0, 60.0) == 120.0
    assert start_timeout(5.0, 10.0, 90.0) == 5.0


def test_the_spark_executor_uses_its_start_timeout() -> None:
    executor = SparkExecutor(master="local[2]", heartbeat_timeout_s=10, slot_wait_timeout_s=90)
    assert executor.slot_start_timeout_s == 90.0
    assert SparkExecutor(master="local[2]", slot_start_timeout_s=30).slot_start_timeout_s == 30

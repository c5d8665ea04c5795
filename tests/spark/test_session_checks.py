"""A session that cannot host the job is refused at once, with an error naming the setting to
change (SPARK_NOTES.md, Costs and configuration): too few task slots for the plan, dynamic
allocation, speculation."""

from __future__ import annotations

import time
from typing import Any

import pytest

import lockgate as lg
from conftest import lockgate_threads
from lockgate.connectors import DiscardingSink, SequenceSource
from lockgate.executor.spark import SparkExecutor
from lockgate.executor.spark.session import check_session


class FakeConf:
    def __init__(self, settings: dict[str, str]) -> None:
        self.settings = settings

    def get(self, key: str, default: Any = None) -> Any:
        return self.settings.get(key, default)


class FakeContext:
    """Just enough of a SparkContext for ``check_session``."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.conf = FakeConf(settings)
        self.master = "local[2]"

    def getConf(self) -> FakeConf:
        return self.conf


class FakeSession:
    def __init__(self, settings: dict[str, str]) -> None:
        self.sparkContext = FakeContext(settings)


def test_a_session_with_dynamic_allocation_is_refused_naming_the_setting() -> None:
    with pytest.raises(lg.ConfigurationError) as err:
        check_session(FakeContext({"spark.dynamicAllocation.enabled": "true"}))
    assert "spark.dynamicAllocation.enabled=false" in str(err.value)


def test_the_dynamic_allocation_setting_is_read_case_insensitively() -> None:
    with pytest.raises(lg.ConfigurationError, match="spark.dynamicAllocation.enabled"):
        check_session(FakeContext({"spark.dynamicAllocation.enabled": "TRUE"}))


def test_a_session_with_speculation_is_refused_naming_the_setting() -> None:
    with pytest.raises(lg.ConfigurationError) as err:
        check_session(FakeContext({"spark.speculation": "true"}))
    assert "spark.speculation=false" in str(err.value)


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"spark.dynamicAllocation.enabled": "false", "spark.speculation": "false"},
    ],
    ids=["defaults", "explicitly off"],
)
def test_a_session_without_dynamic_allocation_or_speculation_is_accepted(settings) -> None:
    check_session(FakeContext(settings))


def test_execute_refuses_a_dynamic_allocation_session_before_submitting_anything() -> None:
    executor = SparkExecutor(spark=FakeSession({"spark.dynamicAllocation.enabled": "true"}))
    env = lg.StreamEnvironment(parallelism=1)
    env.from_source(SequenceSource(0, 10)).sink_to(DiscardingSink())
    with pytest.raises(lg.ConfigurationError, match="spark.dynamicAllocation.enabled=false"):
        env.execute("refused", executor=executor)
    assert executor.control is None and not lockgate_threads()


@pytest.mark.spark
def test_a_plan_needing_more_slots_than_the_session_offers_is_refused_at_once(
    spark_executor,
) -> None:
    executor = SparkExecutor(spark=spark_executor.spark, slot_wait_timeout_s=1)
    env = lg.StreamEnvironment(parallelism=3)
    env.from_source(SequenceSource(0, 10)).rebalance().sink_to(DiscardingSink())
    started = time.monotonic()
    with pytest.raises(lg.ConfigurationError) as err:
        env.execute("too wide", executor=executor)
    elapsed = time.monotonic() - started
    assert elapsed < 5, f"refusing took {elapsed:.1f}s"
    text = str(err.value)
    assert "3 task slots" in text and "offers 2" in text, text
    assert "lower the parallelism" in text and "local[N]" in text, "the message names the fix"
    assert executor.control is None and not lockgate_threads()


@pytest.mark.spark
def test_a_second_executor_on_the_shared_session_runs_jobs_too(spark_executor) -> None:
    """Two SparkExecutors on one session (e.g. a user's and the default one) both work."""
    other = SparkExecutor(spark=spark_executor.spark)
    env = lg.StreamEnvironment(parallelism=2)
    out = (
        env.from_source(SequenceSource(0, 50))
        .map(lambda x: x + 1)
        .execute_and_collect(executor=other)
    )
    assert sorted(out) == list(range(1, 51))
    env2 = lg.StreamEnvironment(parallelism=2)
    out2 = env2.from_source(SequenceSource(0, 50)).execute_and_collect(executor=spark_executor)
    assert sorted(out2) == list(range(50))

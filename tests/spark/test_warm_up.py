"""Slots start fast: on a loopback cluster Spark's Python worker daemon imports lockgate
before it forks workers (``lockgate.executor.spark.daemon``), and
``SparkExecutor.warm_up`` starts the session and that daemon before the first job (the
Spark counterpart of a Flink session cluster that is up before jobs are submitted)."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

import lockgate as lg
from lockgate.connectors import SequenceSource

pytestmark = pytest.mark.spark


def test_warm_up_starts_one_python_worker_per_slot_and_jobs_run_after_it(
    spark_executor: Any,
) -> None:
    pids = spark_executor.warm_up(2)
    assert len(set(pids)) == 2
    assert os.getpid() not in pids
    env = lg.StreamEnvironment(parallelism=2)
    out = (
        env.from_source(SequenceSource(0, 100))
        .map(lambda x: x + 1)
        .execute_and_collect(executor=spark_executor)
    )
    assert sorted(out) == list(range(1, 101))


def test_python_workers_start_with_lockgate_imported_by_their_daemon(spark_executor: Any) -> None:
    sc = spark_executor.spark.sparkContext
    assert sc.getConf().get("spark.python.daemon.module") == "lockgate.executor.spark.daemon"
    imported = (
        sc.parallelize(range(2), 2)
        .map(lambda _: "lockgate.executor.task_builder" in sys.modules)
        .collect()
    )
    assert imported == [True, True]


@pytest.mark.parametrize("slots", [0, -1, "2", 2.0, True])
def test_warm_up_refuses_a_slot_count_that_is_not_a_positive_int(
    spark_executor: Any, slots: Any
) -> None:
    with pytest.raises(lg.ConfigurationError, match="warm_up slots must be an int >= 1"):
        spark_executor.warm_up(slots)

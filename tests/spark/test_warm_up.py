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


def _worker_imports(_: object) -> tuple[str, list[str], list[str], bool]:
    import zipimport

    import pyspark

    zips = [k for k, v in sys.path_importer_cache.items() if isinstance(v, zipimport.zipimporter)]
    return pyspark.__file__ or "", list(sys.path), zips, "pyspark.worker" in sys.modules


def test_python_workers_import_pyspark_from_the_installed_package_not_from_spark_archives(
    spark_executor: Any,
) -> None:
    """The daemon drops Spark's bundled pyspark.zip and the spark-core jar from its path
    before it forks (``worker_path``): a task's ``importlib.invalidate_caches()`` would
    make their importers re-read 7,000 archive entries, 0.3 s of every slot's start."""
    sc = spark_executor.spark.sparkContext
    for pyspark_file, path, zips, has_worker in (
        sc.parallelize(range(2), 2).map(_worker_imports).collect()
    ):
        assert ".zip" not in pyspark_file, pyspark_file
        assert not [p for p in path if p.endswith(("pyspark.zip", ".jar"))], path
        assert not [z for z in zips if "pyspark.zip" in z or ".jar" in z], zips
        assert has_worker


@pytest.mark.parametrize("setting", [None, "0"])
def test_the_daemon_compiles_the_kafka_kernels_before_forking_unless_told_not_to(
    setting: str | None,
) -> None:
    """The daemon compiles (or loads from numba's cache) the Kafka source's kernels when
    imported, before it forks: a slot's first poll would otherwise spend a second there.
    ``LOCKGATE_DAEMON_KERNELS=0`` skips it."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_DAEMON_KERNELS"}
    if setting is not None:
        env["LOCKGATE_DAEMON_KERNELS"] = setting
    code = (
        "import lockgate.executor.spark.daemon, sys\n"
        "from lockgate.connectors.kafka import framing as kafka_framing\n"
        "from lockgate.connectors.formats import flat_json\n"
        "print(len(flat_json._parse.signatures), len(kafka_framing._frame.signatures))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == (["1", "1"] if setting is None else ["0", "0"])


@pytest.mark.parametrize("slots", [0, -1, "2", 2.0, True])
def test_warm_up_refuses_a_slot_count_that_is_not_a_positive_int(
    spark_executor: Any, slots: Any
) -> None:
    with pytest.raises(lg.ConfigurationError, match="warm_up slots must be an int >= 1"):
        spark_executor.warm_up(slots)

"""The Spark session a SparkExecutor uses: creation, required settings, capacity checks."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from ...errors import ConfigurationError

#: settings a barrier-mode streaming job needs (SPARK_NOTES.md)
REQUIRED_CONF = {
    "spark.dynamicAllocation.enabled": "false",
    "spark.speculation": "false",
    "spark.python.task.killTimeout": "100ms",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "3",
    "spark.python.worker.reuse": "false",
}

#: defaults a user's conf may override
DEFAULT_CONF = {
    "spark.ui.showConsoleProgress": "false",
}

LOOPBACK_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    # executors run this interpreter: their worker daemon can pre-import lockgate
    "spark.python.daemon.module": "lockgate.executor.spark.daemon",
}


def is_loopback(master: str) -> bool:
    return master.startswith("local") or "127.0.0.1" in master or "localhost" in master


def create_session(master: str | None, conf: dict[str, str] | None) -> Any:
    """A SparkSession for ``master`` (default ``local[*]``) with the required settings."""
    from pyspark.sql import SparkSession

    master = master or os.environ.get("LOCKGATE_SPARK_MASTER") or _submitted_master() or "local[*]"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("lockgate")
    settings = dict(DEFAULT_CONF)
    settings.update(REQUIRED_CONF)
    if is_loopback(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.update(LOOPBACK_CONF)
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def _submitted_master() -> str | None:
    """The master ``spark-submit --master`` configured, if this process was submitted."""
    if "PYSPARK_SUBMIT_ARGS" not in os.environ and "SPARK_SUBMIT_OPTS" not in os.environ \
            and not os.environ.get("SPARK_ENV_LOADED"):
        return None
    from pyspark import SparkConf

    value = SparkConf().get("spark.master")
    return str(value) if value else None


def check_session(sc: Any) -> None:
    """Refuse a session whose settings cannot host a barrier-mode job."""
    conf = sc.getConf()
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        raise ConfigurationError(
            "the Spark session has spark.dynamicAllocation.enabled=true, which barrier-mode jobs "
            "cannot use: set spark.dynamicAllocation.enabled=false"
        )
    if conf.get("spark.speculation", "false").lower() == "true":
        raise ConfigurationError(
            "the Spark session has spark.speculation=true; speculative copies of a streaming "
            "slot would duplicate it: set spark.speculation=false"
        )


def task_slots(sc: Any) -> int:
    """How many tasks the application can run at once."""
    jsc = sc._jsc.sc()
    try:
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile))
    except Exception:  # noqa: BLE001 - private API; fall back to a public estimate
        return int(sc.defaultParallelism)


def wait_for_slots(sc: Any, needed: int, timeout_s: float) -> int:
    """Wait (bounded) until executors offer ``needed`` task slots; refuse otherwise."""
    deadline = time.monotonic() + timeout_s
    available = task_slots(sc)
    while available < needed and time.monotonic() < deadline:
        time.sleep(0.25)  # polling the cluster manager's registrations, bounded by timeout_s
        available = task_slots(sc)
    if available < needed:
        raise ConfigurationError(
            f"the job needs {needed} task slots (its largest parallelism) but the Spark "
            f"application offers {available} after waiting {timeout_s:.0f}s: lower the "
            "parallelism, or give Spark more cores (local[N], spark.cores.max, "
            "spark.executor.cores, more executors)"
        )
    return available

"""The Spark session a SparkExecutor uses: creation, required settings, capacity checks."""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
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

#: the oldest Java the Spark driver may run on
MIN_JAVA_VERSION = 17

_NO_JAVA_HINT = (
    "Spark (lockgate's default executor) runs its driver on a Java virtual machine. "
    "Install Java {min}+ (e.g. apt-get install openjdk-{min}-jre-headless) and put it on "
    "PATH or set JAVA_HOME, or run without Spark: 'lockgate run --executor local JOB.py', "
    "LOCKGATE_EXECUTOR=local, or env.execute(..., executor=lockgate.LocalExecutor())"
)

LOOPBACK_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    # executors run this interpreter: their worker daemon can pre-import lockgate
    "spark.python.daemon.module": "lockgate.executor.spark.daemon",
}


#: Spark loggers that report events lockgate expects and reports itself in one line (a
#: task that failed and is restarted, a cancelled job group, a killed worker), with
#: the level they keep unless lockgate's logger is at DEBUG
QUIET_SPARK_LOGGERS = {
    # "Exception in task": the failure lockgate reports as the attempt's error
    "org.apache.spark.executor.Executor": "FATAL",
    # "Lost task ...": the same failure again, seen from the driver
    "org.apache.spark.scheduler.TaskSetManager": "ERROR",
    # "Failed to cancel job group ...": an attempt that had ended already
    "org.apache.spark.scheduler.DAGScheduler": "ERROR",
    # "Python worker exited unexpectedly": a killed worker, restarted by lockgate
    "org.apache.spark.api.python.PythonRunner": "ERROR",
}


def quiet_expected_spark_logs(sc: Any) -> bool:
    """Lower Spark's loggers of :data:`QUIET_SPARK_LOGGERS` so that an expected event
    gives lockgate's one line, not a Java stack trace; the traces stay available with
    lockgate's logger at DEBUG (``lockgate run --log-level DEBUG``). Also keeps py4j's
    per-connection INFO lines out of an unconfigured log. Returns whether it applied."""
    if logging.getLogger("lockgate").isEnabledFor(logging.DEBUG):
        return False
    py4j = logging.getLogger("py4j")
    if py4j.level == logging.NOTSET:
        py4j.setLevel(logging.WARNING)
    try:
        jvm = sc._jvm
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        levels = jvm.org.apache.logging.log4j.Level
        for name, level in QUIET_SPARK_LOGGERS.items():
            configurator.setLevel(name, levels.toLevel(level))
    except Exception:
        logging.getLogger(__name__).debug("could not lower Spark's log levels", exc_info=True)
        return False
    return True


def is_loopback(master: str) -> bool:
    return master.startswith("local") or "127.0.0.1" in master or "localhost" in master


def create_session(master: str | None, conf: dict[str, str] | None) -> Any:
    """A SparkSession for ``master`` (default ``local[*]``) with the required settings.

    When no Spark context runs in this process yet (a new JVM must start), Java is checked
    first (``check_java``): a missing or too old Java raises ``ConfigurationError`` saying
    so and suggesting the local executor, instead of Spark's launcher error."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        check_java()  # a new JVM is about to start: say plainly when it cannot
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
    port = ui_port(settings)
    if port is not None:
        settings["spark.ui.port"] = str(port)
    for k, v in settings.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


#: the port Spark's UI tries first
SPARK_UI_PORT = 4040


def ui_port(settings: dict[str, str]) -> int | None:
    """The port for Spark's UI when ``settings`` leave it to Spark and its first choice
    (4040) is taken, e.g. by another Spark application on this machine: a free one, so
    a healthy start does not log Spark's "Service 'SparkUI' could not bind on port 4040.
    Attempting port 4041" warning. None: Spark's own choice (its UI is off, the user set
    its port, or 4040 is free)."""
    if settings.get("spark.ui.enabled", "true").strip().lower() == "false":
        return None
    if "spark.ui.port" in settings:
        return None
    if _free(SPARK_UI_PORT):
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        port: int = s.getsockname()[1]
    return port


def _free(port: int) -> bool:
    """Whether ``port`` can be bound on every interface (as Spark's UI binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def check_java() -> int:
    """The major version of the Java that Spark would start (``$JAVA_HOME/bin/java`` when
    ``JAVA_HOME`` is set, else ``java`` on ``PATH``, as Spark's launcher chooses).

    Raises ``ConfigurationError`` naming what is wrong (no Java, a ``JAVA_HOME`` without
    ``bin/java``, a Java that does not run, or one older than ``MIN_JAVA_VERSION``) and
    suggesting the local executor. A version it cannot parse is accepted (Spark then
    reports what it finds); a successful check is remembered for the process."""
    global _java_checked
    if _java_checked is not None:
        return _java_checked
    hint = _NO_JAVA_HINT.format(min=MIN_JAVA_VERSION)
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = os.path.join(java_home, "bin", "java")
        if not os.path.isfile(java) or not os.access(java, os.X_OK):
            raise ConfigurationError(
                f"JAVA_HOME={java_home} has no executable bin/java, so Spark cannot start. "
                f"Point JAVA_HOME at a Java {MIN_JAVA_VERSION}+ installation or unset it. " + hint
            )
        where = f"{java} (from JAVA_HOME)"
    else:
        found = shutil.which("java")
        if found is None:
            raise ConfigurationError(
                "Java was not found: no 'java' on PATH and JAVA_HOME "
                "is not set, so Spark cannot start. " + hint
            )
        java, where = found, f"{found} (from PATH)"
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigurationError(f"Java at {where} does not run ({e}). " + hint) from e
    text = (out.stderr or "") + (out.stdout or "")
    if out.returncode != 0:
        raise ConfigurationError(
            f"Java at {where} does not run ('java -version' exited with {out.returncode}: "
            f"{text.strip()[:200]}). " + hint
        )
    major = java_major_version(text)
    if major is None:
        return 0  # unknown format: let Spark decide
    if major < MIN_JAVA_VERSION:
        raise ConfigurationError(
            f"Java at {where} is version {major}; Spark needs Java {MIN_JAVA_VERSION} or "
            "newer. " + hint
        )
    _java_checked = major
    return major


_java_checked: int | None = None


def java_major_version(version_output: str) -> int | None:
    """The major version in ``java -version`` output (``"1.8.0_351"`` -> 8,
    ``"17.0.15"`` -> 17, ``"21"`` -> 21), or None when there is none."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if m is None:
        return None
    first = int(m.group(1))
    if first == 1 and m.group(2) is not None:
        return int(m.group(2))
    return first


def _submitted_master() -> str | None:
    """The master ``spark-submit --master`` configured, if this process was submitted."""
    if (
        "PYSPARK_SUBMIT_ARGS" not in os.environ
        and "SPARK_SUBMIT_OPTS" not in os.environ
        and not os.environ.get("SPARK_ENV_LOADED")
    ):
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

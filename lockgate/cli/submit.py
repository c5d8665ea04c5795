"""``lockgate submit``: run a job's driver on a worker of a Spark standalone cluster.

Spark's ``spark-submit --deploy-mode cluster`` starts the driver on a worker of the cluster
(and with ``--supervise`` starts it again when it dies), but refuses Python applications on a
standalone master ("Cluster deploy mode is currently not supported for python applications on
standalone clusters"). Spark runs Python drivers itself through its JVM class
``org.apache.spark.deploy.PythonRunner`` (what client mode uses): submitted as the main class
of a JVM application (the ``spark-core`` jar every Spark installation has), it runs
``python lockgate/submitted_driver.py run JOB ...`` on the worker, with the py4j gateway the
job's SparkSession attaches to. That is all this command does:

    lockgate submit --master spark://HOST:7077 [--supervise] [--conf K=V ...]
                    [--python PATH] [--rest-bind ADDR] [--rest-port PORT]
                    [--rest-token-file FILE] [--fresh | --restore PATH] JOB [JOB_ARGS]

runs ``spark-submit --master M --deploy-mode cluster [--supervise] --class
org.apache.spark.deploy.PythonRunner SPARK_CORE_JAR SUBMITTED_DRIVER "" run --master M ...
JOB -- JOB_ARGS`` and prints the driver's submission id. The worker must see the job file,
lockgate and the Python (``--python``, default this one) at the same paths as this machine (a
shared mount or the same installation on every host), as Spark's Python workers already
must. With ``--supervise`` a driver that dies is started again and, finding its own
checkpoints, resumes from the newest (M-C8).

To reach the job from outside, give it an address, a port and a token known in advance:
``--rest-bind 0.0.0.0 --rest-port 8081 --rest-token-file FILE`` (FILE private, chmod 600,
on a path the worker sees); then ``lockgate status JOB --url http://WORKER:8081`` with
``LOCKGATE_TOKEN``. The master's page (or ``/json/``) says which worker runs the driver.

On YARN and Kubernetes, Spark runs Python drivers in cluster mode by itself: use
``spark-submit --deploy-mode cluster`` with lockgate's ``submitted_driver.py`` as the
application (``python -c "import lockgate.submitted_driver as m; print(m.__file__)"``).
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

from ..core.rest_settings import parse_port, read_token_file
from ..errors import ConfigurationError, LockgateError
from .control import UsageError

PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"
#: how long spark-submit may take to hand the driver to the master
SUBMIT_TIMEOUT_S = 300.0
_SUBMITTED = re.compile(r"Driver successfully submitted as (\S+)")


class SubmitError(LockgateError):
    """spark-submit could not hand the driver to the cluster; the message says why."""


@dataclass
class Submission:
    """What ``lockgate submit`` was asked to do."""

    master: str
    job: str
    job_args: list[str] = field(default_factory=list)
    supervise: bool = False
    conf: list[str] = field(default_factory=list)
    python: str = sys.executable
    rest_bind: str | None = None
    rest_port: str | None = None
    rest_token_file: str | None = None
    fresh: bool = False
    restore: str | None = None
    log_level: str | None = None


def spark_home() -> str:
    """The Spark installation spark-submit comes from: ``$SPARK_HOME``, else pyspark's."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return home
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def spark_core_jar(home: str) -> str:
    """The ``spark-core`` jar of the installation at ``home`` (it holds PythonRunner)."""
    jars = sorted(glob.glob(os.path.join(home, "jars", "spark-core_*.jar")))
    if not jars:
        raise SubmitError(
            f"no spark-core jar under {home}/jars: set SPARK_HOME to a Spark installation"
        )
    return jars[-1]


def submitted_driver_path() -> str:
    """The script the worker runs as the driver (``lockgate/submitted_driver.py``),
    found in the package folder, not imported: it is a script that imports the CLI."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(package, "submitted_driver.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"the driver script {path} is missing from this lockgate installation: "
            "reinstall lockgate"
        )
    return path


def check(sub: Submission) -> None:
    """Refuse what cannot work, before anything is submitted; raises ``UsageError``."""
    if not sub.master.startswith("spark://"):
        raise UsageError(
            f"--master {sub.master}: lockgate submit runs drivers on a Spark standalone "
            "cluster (spark://HOST:PORT); on YARN or Kubernetes use spark-submit "
            "--deploy-mode cluster with lockgate's submitted_driver.py (see docs/cli.md)"
        )
    if not os.path.isfile(sub.job):
        raise UsageError(f"job file not found: {sub.job}")
    if not os.path.isfile(sub.python) or not os.access(sub.python, os.X_OK):
        raise UsageError(f"--python {sub.python}: not an executable file")
    if sub.fresh and sub.restore is not None:
        raise UsageError("--fresh starts from empty state, --restore from a checkpoint: give one")
    for item in sub.conf:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise UsageError(f"--conf {item!r}: expected KEY=VALUE, e.g. spark.executor.memory=2g")
        if item.split("=", 1)[0].strip() in ("spark.submit.deployMode", "spark.master"):
            raise UsageError(f"--conf {item!r}: set by lockgate submit itself (--master)")
    try:
        if sub.rest_port is not None:
            parse_port(sub.rest_port, "--rest-port")
        if sub.rest_token_file is not None:
            read_token_file(sub.rest_token_file, "--rest-token-file")
    except ConfigurationError as e:
        raise UsageError(str(e)) from None


def command(sub: Submission) -> list[str]:
    """The spark-submit command line of ``sub`` (checked with :func:`check` first)."""
    home = spark_home()
    cmd = [
        os.path.join(home, "bin", "spark-submit"),
        "--master",
        sub.master,
        "--deploy-mode",
        "cluster",
        "--class",
        PYTHON_RUNNER,
        "--conf",
        f"spark.pyspark.python={sub.python}",
        "--conf",
        f"spark.pyspark.driver.python={sub.python}",
    ]
    if sub.supervise:
        cmd.append("--supervise")
    for item in sub.conf:
        cmd += ["--conf", item]
    run = ["run", "--executor", "spark", "--master", sub.master]
    for flag, value in (
        ("--rest-bind", sub.rest_bind),
        ("--rest-port", sub.rest_port),
        (
            "--rest-token-file",
            None if sub.rest_token_file is None else os.path.abspath(sub.rest_token_file),
        ),
        (
            "--restore",
            None
            if sub.restore is None
            else sub.restore
            if "://" in sub.restore
            else os.path.abspath(sub.restore),
        ),
        ("--log-level", sub.log_level),
    ):
        if value is not None:
            run += [flag, value]
    if sub.fresh:
        run.append("--fresh")
    # PythonRunner's arguments: the script, its extra python files (none), the script's args
    return [
        *cmd,
        spark_core_jar(home),
        submitted_driver_path(),
        "",
        *run,
        os.path.abspath(sub.job),
        "--",
        *sub.job_args,
    ]


def submit(sub: Submission, out: object = sys.stdout) -> str:
    """Submit ``sub``'s driver to the cluster; return its submission id (``driver-...``).
    Raises ``UsageError`` (bad arguments) or :class:`SubmitError` (spark-submit failed)."""
    check(sub)
    cmd = command(sub)
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise SubmitError(
            f"spark-submit did not hand the driver to {sub.master} within "
            f"{SUBMIT_TIMEOUT_S:.0f} s: is the master reachable from here?"
        ) from None
    except OSError as e:
        raise SubmitError(f"cannot run {cmd[0]}: {e.strerror}; set SPARK_HOME") from None
    found = _SUBMITTED.search(done.stderr + done.stdout)
    if done.returncode != 0 or found is None:
        tail = "\n".join((done.stderr + done.stdout).strip().splitlines()[-15:])
        raise SubmitError(f"spark-submit to {sub.master} failed (exit {done.returncode}):\n{tail}")
    return found.group(1)


def submit_command(sub: Submission) -> int:
    """``lockgate submit``: print the driver's submission id; return the exit code."""
    driver_id = submit(sub)
    print(driver_id)
    print(
        f"lockgate: submitted {sub.job} to {sub.master} as {driver_id}; the master's page "
        "says which worker runs it (its output is in that worker's work folder)",
        file=sys.stderr,
    )
    return 0

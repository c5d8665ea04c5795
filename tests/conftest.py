"""Shared fixtures and helpers of the lockgate test suite.

* A hang guard: a test that runs longer than ``HANG_GUARD_S`` dumps every
  thread's stack and ends the run (there is no pytest-timeout here), so a
  deadlock shows up as a traceback instead of a stuck CI job; the guard names
  the test it stopped, in a parallel run and in a run of one process alike.
* A leak guard: every test must leave no ``lockgate ...`` thread running.
* :class:`Probe`: a thread-safe recorder that user functions inside a job can
  reach. Jobs pickle their functions; a probe pickles as its registry name, so
  the copy a subtask unpickles is the very object the test holds.
* :class:`FileProbe`: the same idea across processes (a Spark slot runs in a
  Python worker of its own): items are appended to a file under ``tmp_path``.
* :func:`wait_until`: bounded polling with a clear failure message (tests
  never sleep to wait for something).
* Executors: ``executor`` runs a test on the LocalExecutor and on the shared
  ``local[2]`` SparkExecutor (marked ``spark``; ``-m "not spark"`` skips it);
  :func:`on_executors` pairs executors with parallelisms (Spark only up to
  ``SPARK_SLOTS``). One SparkSession serves the whole test run.
"""

from __future__ import annotations

import base64
import faulthandler
import itertools
import os
import pickle
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import lockgate as lg

#: PostgreSQL and Kafka fixtures of the connector tests (pg_table, pg_without_prepared_transactions,
#: kafka_topic)
pytest_plugins = ["pg_fixtures", "kafka_fixtures"]

HANG_GUARD_S = 60.0

#: task slots of the shared Spark session (``local[2]``): the largest parallelism it can run
SPARK_SLOTS = 2
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

#: this process's name among the parallel workers of a pytest-xdist run (``gw0``,
#: ``gw1``...; scripts/test.sh starts them), "" in a run without workers
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")

#: the JVM options of the run's short-lived JVMs (see pytest_configure)
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: the modules that take longest (minutes of clusters, brokers and seeded failures), the
#: slowest first. A parallel run hands whole modules to its workers (``--dist loadfile``)
#: in collection order; these come first, so that the short modules fill the gaps at the
#: end instead of one worker running a long module alone while the others have finished.
SLOW_MODULES = (
    "tests/spark/test_multi_host_cluster.py",
    "tests/integration/test_wheel_install.py",
    "tests/connectors/test_exactly_once_pipelines.py",
    "tests/connectors/test_kafka_end_to_end.py",
    "tests/integration/test_recovery.py",
    "tests/integration/test_driver_restart.py",
    "tests/integration/test_unaligned_restore.py",
    "tests/integration/test_connected_streams.py",
    "tests/integration/test_window_join.py",
    "tests/integration/test_interval_join.py",
    "tests/spark/test_standalone_cluster.py",
    "tests/connectors/test_sink_forks.py",
    "tests/connectors/test_kafka_hostile_batches.py",
    "tests/integration/test_distinct_counts.py",
    "tests/integration/test_newcomer_job.py",
)

# --------------------------------------------------------------------------- helpers


def lockgate_threads() -> list[threading.Thread]:
    """Threads the executor started (their names start with ``"lockgate "``)."""
    return [t for t in threading.enumerate() if t.name.startswith("lockgate ") and t.is_alive()]


def wait_until(
    predicate: Callable[[], bool],
    what: str | Callable[[], str],
    timeout_s: float = 5.0,
    *,
    every_s: float | None = None,
) -> None:
    """Poll ``predicate`` until it is true; fail with ``what`` (or what ``what()`` says
    then, for a message that shows the last state seen) after ``timeout_s``.

    The pause between two polls starts at 2 ms and doubles up to 50 ms, so a quick
    condition is seen at once and a long wait does not spin; ``every_s`` fixes it
    instead. Give a predicate that asks another process (an HTTP request, a command) a
    ``every_s`` of a tenth of a second or more: a tight loop of requests keeps the other
    process busy answering instead of doing what the test waits for."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    step = 0.002 if every_s is None else every_s
    while not predicate():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            pytest.fail(f"timed out after {timeout_s}s waiting until {said}")
        pause.wait(step)
        if every_s is None:
            step = min(step * 2, 0.05)


def wait_for_checkpoints(client: lg.JobClient, count: int, timeout_s: float = 60.0) -> None:
    """Wait until ``count`` checkpoints of ``client``'s job have completed, or the job ended."""
    wait_until(
        lambda: (
            sum(1 for c in client.checkpoints() if c.status == "completed") >= count
            or client.done()
        ),
        f"{count} checkpoints complete",
        timeout_s=timeout_s,
    )


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a zombie has stopped running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


_PROBES: dict[str, Probe] = {}
_probe_ids = itertools.count()


def _lookup_probe(name: str) -> Probe:
    return _PROBES[name]


class Probe:
    """Records items from inside a running job; the test thread reads them.

    Picklable by name (``__reduce__``), so a lambda or function object that
    captures a probe can be shipped to subtasks and still reports here.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._items: list[Any] = []
        self.counters: dict[str, int] = {}

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_lookup_probe, (self.name,))

    def add(self, item: Any) -> None:
        with self._lock:
            self._items.append(item)

    def extend(self, items: list[Any]) -> None:
        with self._lock:
            self._items.extend(items)

    def bump(self, counter: str, n: int = 1) -> int:
        with self._lock:
            value = self.counters.get(counter, 0) + n
            self.counters[counter] = value
            return value

    def count(self, counter: str) -> int:
        with self._lock:
            return self.counters.get(counter, 0)

    @property
    def items(self) -> list[Any]:
        with self._lock:
            return list(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class FileProbe:
    """A :class:`Probe` that works across processes: each item is one line appended
    (``O_APPEND``, one ``write``) to a file, so user code in a Spark Python worker
    reports to the test as well as a thread of the local executor does.

    Pickles by value (its path). Items must pickle; ``bump`` adds a counter line.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        open(self.path, "ab").close()

    def _append(self, entry: Any) -> None:
        line = base64.b64encode(pickle.dumps(entry)) + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def _entries(self) -> list[tuple[str, Any]]:
        """The entries written whole: a line without its newline yet is being written by
        another process (a reader can see a write half done) and is left for next time."""
        with open(self.path, "rb") as f:
            return [
                pickle.loads(base64.b64decode(line))
                for line in f
                if line.endswith(b"\n") and line.strip()
            ]

    def add(self, item: Any) -> None:
        self._append(("item", item))

    def extend(self, items: list[Any]) -> None:
        for item in items:
            self.add(item)

    def bump(self, counter: str, n: int = 1) -> None:
        for _ in range(n):
            self._append(("count", counter))

    def count(self, counter: str) -> int:
        return sum(1 for kind, v in self._entries() if kind == "count" and v == counter)

    @property
    def items(self) -> list[Any]:
        return [v for kind, v in self._entries() if kind == "item"]

    def __len__(self) -> int:
        return len(self.items)


class BackgroundJob:
    """Runs ``run()`` (e.g. ``lambda: env.execute(...)``) in a thread so the test can act
    while the job runs; ``wait(timeout_s)`` says whether it ended, then ``result`` or
    ``error`` holds its outcome."""

    def __init__(self, run: Callable[[], Any], name: str = "test job driver") -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.ended_at: float | None = None
        self.done = threading.Event()
        self._run = run
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            self.result = self._run()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.error = e
        finally:
            self.ended_at = time.monotonic()
            self.done.set()

    def wait(self, timeout_s: float) -> bool:
        ended = self.done.wait(timeout_s)
        if ended:
            self.thread.join(5)
        return ended


def on_executors(*parallelisms: int) -> list[Any]:
    """Parameters for ``@pytest.mark.parametrize(("executor", "parallelism"), ...,
    indirect=["executor"])``: every parallelism on the local executor, those up to
    ``SPARK_SLOTS`` on Spark too."""
    params: list[Any] = []
    for p in parallelisms:
        params.append(pytest.param("local", p, id=f"local-p{p}"))
        if p <= SPARK_SLOTS:
            params.append(pytest.param("spark", p, id=f"spark-p{p}", marks=pytest.mark.spark))
    return params


def is_spark(executor: Any) -> bool:
    return type(executor).__name__ == "SparkExecutor"


# --------------------------------------------------------------------------- fixtures


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "hang_guard(seconds): a longer hang guard for a test that needs one"
    )
    _keep_real_stderr(config)
    # Spark's Python workers must import the test modules (whose functions and classes jobs
    # ship by reference); set before any code of the run can start a JVM
    os.environ["PYTHONPATH"] = _test_module_path()
    # the run's JVMs (Spark's drivers; a standalone cluster's master, workers and, through
    # cluster_driver.CLUSTER_CONF, executors) live seconds to minutes, and the run is
    # CPU-bound while its Spark modules run: C1 only and the serial collector spend about
    # a third less CPU than the defaults getting them going (tests/spark/test_equivalence.py
    # alone: 37 instead of 53 CPU seconds). The user's own settings win.
    os.environ.setdefault("LOCKGATE_TEST_JVM_OPTIONS", TEST_JVM_OPTIONS)
    for var in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        os.environ.setdefault(var, os.environ["LOCKGATE_TEST_JVM_OPTIONS"])
    # compile the Kafka source's kernels once, here, before any worker or Spark daemon
    # starts: on a fresh clone numba's cache is empty, and every process compiling them
    # at once (about 20 s each on a small machine) inside timed tests made them miss
    # their bounds; from the cache each later process loads them in a moment
    if not WORKER:
        from lockgate.connectors.kafka.warm_up import warm_up

        warm_up()
    # every job registers for command-line control (lockgate list/savepoint/stop): keep
    # the test run's registrations out of the user's ~/.lockgate, and each parallel
    # worker's out of the others' (a worker inherits the environment of the pytest
    # process that started it: it makes a home of its own if that one made the first)
    if "LOCKGATE_HOME" not in os.environ or (
        WORKER and os.environ["LOCKGATE_HOME"] == os.environ.get("LOCKGATE_TEST_RUN_HOME")
    ):
        os.environ["LOCKGATE_HOME"] = tempfile.mkdtemp(prefix=f"lockgate-test-home-{WORKER}")
        os.environ["LOCKGATE_TEST_RUN_HOME"] = os.environ["LOCKGATE_HOME"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a parallel run, the modules of :data:`SLOW_MODULES` first (stable: the others
    keep their order)."""
    if not WORKER:
        return
    rank = {module: i for i, module in enumerate(SLOW_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


_hang_dump: Any = None
#: the terminal's stderr, outside pytest's capture (set in pytest_configure of a run in one
#: process): where the hang guard writes when no LOCKGATE_HANG_DUMP file is set
_real_stderr: Any = None


def _hang_dump_file() -> Any:
    """``$LOCKGATE_HANG_DUMP`` (set by scripts/test.sh) opened for the hang guard's
    traceback, or None."""
    global _hang_dump
    path = os.environ.get("LOCKGATE_HANG_DUMP")
    if path and WORKER:  # one file per parallel worker: each guards its own tests
        path = f"{path}.{WORKER}"
    if path and _hang_dump is None:
        _hang_dump = open(path, "w")  # noqa: SIM115 - kept open for faulthandler
    return _hang_dump


def _keep_real_stderr(config: pytest.Config) -> None:
    """Keep a copy of the terminal's stderr: during a test pytest captures file
    descriptor 2 into a file that a killed run never prints, so a hang guard writing
    there would end the run without a word. (In a parallel worker the coordinator
    names the test of a crashed worker, and scripts/test.sh sets LOCKGATE_HANG_DUMP.)"""
    global _real_stderr
    capture = config.pluginmanager.getplugin("capturemanager")
    if WORKER or _real_stderr is not None:
        return
    if capture is None:
        _real_stderr = os.fdopen(os.dup(2), "w", buffering=1)
        return
    # suspends the capture only if it runs, and resumes only what it suspended
    with capture.global_and_fixture_disabled():
        _real_stderr = os.fdopen(os.dup(2), "w", buffering=1)


def pytest_unconfigure(config: pytest.Config) -> None:
    faulthandler.cancel_dump_traceback_later()
    for f in (_hang_dump, _real_stderr):
        if f is not None:
            f.close()


class _HangGuard:
    """Ends a test run stuck in one test: at ``limit`` seconds faulthandler writes every
    thread's stack and exits the process (it works even if a thread holds the GIL). The
    test's name comes first: written when the test starts into the dump file (which
    outlives the run), or, with no dump file, by a timer thread a moment before the
    stacks."""

    def __init__(self) -> None:
        self.limit: float | None = None
        self.nodeid = ""
        self._timer: threading.Timer | None = None

    def arm(self, limit: float, nodeid: str) -> None:
        self.cancel()
        self.limit, self.nodeid = limit, nodeid
        dump = _hang_dump_file()
        target = dump or _real_stderr or sys.stderr
        if dump is not None:  # outlives the captured stderr of a run the guard kills
            dump.seek(0)
            dump.truncate()
            dump.write(self.message() + "\n")
            dump.flush()
        else:
            self._timer = threading.Timer(max(limit - 1.0, limit * 0.9), self._name, (target,))
            self._timer.daemon = True
            self._timer.name = "hang guard"
            self._timer.start()
        faulthandler.dump_traceback_later(limit, exit=True, file=target)

    def rearm(self) -> None:
        if self.limit is not None:
            self.arm(self.limit, self.nodeid)

    def cancel(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.limit = None

    def message(self) -> str:
        return (
            f"the hang guard ({self.limit:g}s) killed the test run in {self.nodeid}; its threads:"
        )

    def _name(self, target: Any) -> None:
        target.write(f"\n{self.message()}\n")
        target.flush()


_guard = _HangGuard()


@pytest.fixture(autouse=True)
def _hang_guard(request: pytest.FixtureRequest) -> Any:
    marker = request.node.get_closest_marker("hang_guard")
    _guard.arm(float(marker.args[0]) if marker else HANG_GUARD_S, request.node.nodeid)
    yield
    _guard.cancel()


def _restart_hang_guard() -> None:
    """Give the running test its whole hang guard limit again from now: for the one-off
    start of the shared SparkSession inside whichever test needs it first (in a parallel
    run, each worker's first Spark test, which can be any)."""
    _guard.rearm()


@pytest.fixture(autouse=True)
def _no_lockgate_thread_left_running() -> Any:
    """Every test (in particular every failing job) leaves no executor thread behind."""
    before = set(lockgate_threads())
    yield
    deadline = time.monotonic() + 2.0
    pause = threading.Event()
    while True:
        leaked = [t for t in lockgate_threads() if t not in before]
        if not leaked or time.monotonic() > deadline:
            break
        pause.wait(0.005)
    assert not leaked, f"lockgate threads still running after the test: {[t.name for t in leaked]}"


@pytest.fixture
def probe() -> Any:
    """A fresh :class:`Probe`; a second one via ``probe_factory``."""
    p = Probe(f"probe-{next(_probe_ids)}")
    _PROBES[p.name] = p
    yield p
    _PROBES.pop(p.name, None)


@pytest.fixture
def probe_factory() -> Any:
    made: list[Probe] = []

    def make() -> Probe:
        p = Probe(f"probe-{next(_probe_ids)}")
        _PROBES[p.name] = p
        made.append(p)
        return p

    yield make
    for p in made:
        _PROBES.pop(p.name, None)


@pytest.fixture
def make_env() -> Callable[..., lg.StreamEnvironment]:
    """``make_env(parallelism=2, max_parallelism=128, **config)``: a StreamEnvironment
    whose ExecutionConfig fields are set from ``config``."""

    def make(
        parallelism: int = 2, max_parallelism: int = 128, **config: Any
    ) -> lg.StreamEnvironment:
        env = lg.StreamEnvironment(parallelism=parallelism, max_parallelism=max_parallelism)
        for key, value in config.items():
            if not hasattr(env.config, key):
                raise AttributeError(f"ExecutionConfig has no field {key!r}")
            setattr(env.config, key, value)
        return env

    return make


@pytest.fixture
def file_probe(tmp_path: Any) -> FileProbe:
    """A fresh :class:`FileProbe` under ``tmp_path``."""
    return FileProbe(tmp_path / "probe.lines")


def _test_module_path() -> str:
    """The folders pytest imports test modules from (rootdir-relative "prepend" mode imports
    ``tests/integration/test_x.py`` as ``test_x``): Spark's Python workers need them to
    unpickle the functions and classes a test module defines, as a user's job needs its own
    modules importable on the executors."""
    folders = [TESTS_DIR] + sorted(
        os.path.join(TESTS_DIR, d)
        for d in os.listdir(TESTS_DIR)
        if os.path.isdir(os.path.join(TESTS_DIR, d)) and not d.startswith((".", "_"))
    )
    existing = [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in folders
    ]
    return os.pathsep.join(folders + existing)


@pytest.fixture(scope="session")
def spark_executor() -> Any:
    """The one SparkExecutor (``local[2]``, no UI) every Spark test of the run shares."""
    from lockgate.executor.spark import SparkExecutor

    # a stalled job fails with "no heartbeat" (visible) before the hang guard kills the run
    executor = SparkExecutor(
        master="local[2]", conf={"spark.ui.enabled": "false"}, heartbeat_timeout_s=30.0
    )
    spark = executor.spark
    spark.sparkContext.setLogLevel("ERROR")
    # start the Python worker daemon too: the first job of a cold session waits seconds
    # for it, and in a parallel run that first job can be any test's, also one that times
    # how fast a failure surfaces (tests/integration/test_job_failure.py)
    executor.warm_up(SPARK_SLOTS)
    _restart_hang_guard()  # the JVM's start does not count against the test that paid it
    yield executor
    spark.stop()


@pytest.fixture(params=["local", pytest.param("spark", marks=pytest.mark.spark)])
def executor(request: pytest.FixtureRequest) -> Any:
    """A fresh LocalExecutor, or the shared local[2] SparkExecutor (``spark`` marker)."""
    if request.param == "local":
        return lg.LocalExecutor()
    if request.param == "spark":
        return request.getfixturevalue("spark_executor")
    raise ValueError(f"unknown executor {request.param!r}")

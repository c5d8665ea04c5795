"""Shared fixtures and helpers of the lockgate test suite.

* A hang guard: a test that runs longer than ``HANG_GUARD_S`` dumps every
  thread's stack and ends the run (there is no pytest-timeout here), so a
  deadlock shows up as a traceback instead of a stuck CI job.
* A leak guard: every test must leave no ``lockgate ...`` thread running.
* :class:`Probe`: a thread-safe recorder that user functions inside a job can
  reach. Jobs pickle their functions; a probe pickles as its registry name, so
  the copy a subtask unpickles is the very object the test holds.
* :func:`wait_until`: bounded polling with a clear failure message (tests
  never sleep to wait for something).
"""

from __future__ import annotations

import faulthandler
import itertools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import lockgate as lg

HANG_GUARD_S = 60.0

# --------------------------------------------------------------------------- helpers


def lockgate_threads() -> list[threading.Thread]:
    """Threads the executor started (their names start with ``"lockgate "``)."""
    return [t for t in threading.enumerate() if t.name.startswith("lockgate ") and t.is_alive()]


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    """Poll ``predicate`` until it is true; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting until {what}")
        pause.wait(0.002)


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


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def _hang_guard() -> Any:
    faulthandler.dump_traceback_later(HANG_GUARD_S, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()


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

    def make(parallelism: int = 2, max_parallelism: int = 128, **config: Any) -> lg.StreamEnvironment:
        env = lg.StreamEnvironment(parallelism=parallelism, max_parallelism=max_parallelism)
        for key, value in config.items():
            if not hasattr(env.config, key):
                raise AttributeError(f"ExecutionConfig has no field {key!r}")
            setattr(env.config, key, value)
        return env

    return make

"""What made a job restart: each distinct failure (operator and error) and how often.

Flink's default restarts a job forever; a record that fails deterministically in
user code then fails attempt after attempt. :class:`RestartCauses` counts, per
operator and error, the failed attempts of one run, so the restart log line says how
often the same error repeated, and the job's metrics show it
(``JobClient.restart_causes()`` while it runs, ``JobExecutionResult.restart_causes``
at its end).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from ..errors import JobFailedError


@dataclass(frozen=True)
class RestartCause:
    """One distinct failure of a job run: where it happened and how often.

    ``operator``: the operator that failed (None when no single operator did, e.g.
    failed checkpoints or a lost slot); ``error``: the error's type and the first line
    of its message (``"ValueError: bad record 17"``); ``count``: the failed attempts with
    this error at this operator during the run; ``consecutive``: how many of them came
    in a row up to the latest failure of the job (0 once another failure came since);
    ``last_attempt``: the number of the latest attempt it failed.
    """

    operator: str | None
    error: str
    count: int
    consecutive: int
    last_attempt: int

    def describe(self) -> str:
        """E.g. ``the same error at operator 'parse' repeated 3 times in a row (4 in
        this run)``."""
        where = f"operator '{self.operator}'" if self.operator else "the job"
        return (
            f"the same error at {where} repeated {_times(self.consecutive)} in a row "
            f"({self.count} in this run)"
        )


def _times(n: int) -> str:
    return "1 time" if n == 1 else f"{n} times"


def error_text(failure: JobFailedError) -> str:
    """The type and first message line of the error behind ``failure``."""
    cause = failure.__cause__
    if cause is None:
        text = str(failure).strip()
        _, sep, rest = text.partition(" failed: ")
        text = rest if sep else text
    elif getattr(cause, "type_name", None):  # an error shipped as text (RemoteError)
        text = str(cause)
    else:
        text = f"{type(cause).__name__}: {cause}"
    lines = text.strip().splitlines()
    return lines[0] if lines else type(failure).__name__


def failure_location(failure: BaseException) -> dict[str, Any]:
    """Where a lost process ran, for an exceptions entry: ``slot``, ``host``, ``pid``,
    ``signal`` (the number of the signal that killed it) and ``exit_code`` when the
    failure's cause knows them (a Spark slot's worker that died), else None each."""
    cause = failure.__cause__
    return {
        name: getattr(cause, name, None) for name in ("slot", "host", "pid", "signal", "exit_code")
    }


#: failures kept with their tracebacks (``RestartCauses.history``)
HISTORY = 50
#: the longest traceback kept, in characters (its end is kept: the innermost frames)
TRACEBACK_CHARS = 20_000


class RestartCauses:
    """The failures of one job run, by operator and error (thread-safe: the failover
    loop records, clients read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self._causes: dict[tuple[str | None, str], RestartCause] = {}
        self._last: tuple[str | None, str] | None = None

    def record(self, failure: JobFailedError, attempt: int) -> RestartCause:
        """Count ``failure``, the error attempt number ``attempt`` failed with; return
        its entry (counts included)."""
        key = (failure.operator, error_text(failure))
        text = "".join(traceback.format_exception(failure))
        if len(text) > TRACEBACK_CHARS:
            text = "...\n" + text[-TRACEBACK_CHARS:]
        entry = {
            "time": time.time(),
            "attempt": attempt,
            "operator": key[0],
            "error": key[1],
            "traceback": text,
            **failure_location(failure),
        }
        with self._lock:
            self._history.append(entry)
            if self._last is not None and self._last != key:
                previous = self._causes[self._last]
                self._causes[self._last] = replace(previous, consecutive=0)
            old = self._causes.get(key)
            cause = RestartCause(
                operator=key[0],
                error=key[1],
                count=1 if old is None else old.count + 1,
                consecutive=1 if old is None else old.consecutive + 1,
                last_attempt=attempt,
            )
            self._causes[key] = cause
            self._last = key
            return cause

    def history(self) -> list[dict[str, Any]]:
        """The latest failures (at most :data:`HISTORY`), oldest first: when, which
        attempt, operator, error and traceback."""
        with self._lock:
            return [dict(e) for e in self._history]

    def snapshot(self) -> list[RestartCause]:
        """Every cause so far, in the order they first happened."""
        with self._lock:
            return list(self._causes.values())

    @property
    def failures(self) -> int:
        """Failed attempts recorded so far."""
        with self._lock:
            return sum(c.count for c in self._causes.values())

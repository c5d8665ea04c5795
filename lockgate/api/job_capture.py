"""Building a job from its file without running it: while :func:`capturing_jobs` is
active, ``env.execute(...)`` and ``env.execute_async(...)`` raise :class:`JobCaptured`
carrying the environment, instead of running the job (``lockgate savepoint check``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_state = threading.local()


class JobCaptured(BaseException):
    """Raised by ``execute``/``execute_async`` while jobs are captured. A BaseException,
    so that a job's ``except Exception`` does not swallow it."""

    def __init__(self, env: Any, job_name: str) -> None:
        super().__init__(f"job {job_name!r} captured before it ran")
        self.env = env
        self.job_name = job_name


@contextmanager
def capturing_jobs() -> Iterator[None]:
    """Within the block, a job's ``execute`` raises :class:`JobCaptured` (this thread)."""
    before = getattr(_state, "active", False)
    _state.active = True
    try:
        yield
    finally:
        _state.active = before


def capture_if_asked(env: Any, job_name: str) -> None:
    """Raise :class:`JobCaptured` when jobs are being captured (called by execute)."""
    if getattr(_state, "active", False):
        raise JobCaptured(env, job_name)

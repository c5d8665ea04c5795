"""Which failures no restart can fix (see :class:`~lockgate.errors.NonRestartableError`).

:func:`non_restartable_cause` looks through a failed attempt's error for a
``NonRestartableError``; :func:`not_restartable_failure` is the error that then ends
the job at once, whatever its restart strategy.
"""

from __future__ import annotations

from ..errors import JobFailedError, LockgateError, NonRestartableError, UserFunctionError

#: how deep the cause chain is followed (a cycle or an absurdly long chain stops here)
_MAX_DEPTH = 32


def non_restartable_cause(error: BaseException) -> NonRestartableError | None:
    """The :class:`~lockgate.errors.NonRestartableError` that makes ``error`` not
    restartable, or None.

    Follows explicit causes (``__cause__``, never the implicit ``__context__`` of an
    error handled on the way) and the user's error inside a ``UserFunctionError``. A
    ``NonRestartableError`` raised ``from`` an error that is not a ``LockgateError``
    reports an environment failure that may pass, so it is restartable.
    """
    current: BaseException | None = error
    for _ in range(_MAX_DEPTH):
        if current is None:
            return None
        if isinstance(current, NonRestartableError):
            inner = current.__cause__
            return current if inner is None or isinstance(inner, LockgateError) else None
        current = current.error if isinstance(current, UserFunctionError) else current.__cause__
    return None


def not_restartable_failure(
    job_name: str, failure: JobFailedError, cause: BaseException, attempts: int
) -> JobFailedError:
    """The ``JobFailedError`` ending the job at once because ``failure`` (an attempt's
    error) comes from ``cause``, a ``NonRestartableError``."""
    text = str(failure)
    prefix = f"job '{job_name}' failed: "
    body = text.removeprefix(prefix)
    return JobFailedError(
        f"job '{job_name}' failed and is not restarted: {type(cause).__name__} is not "
        f"restartable (no new attempt can fix it; fix the cause and run the job again): "
        f"{body}",
        reason=failure.reason,
        operator=failure.operator,
        subtask=failure.subtask,
        remote_traceback=failure.remote_traceback,
        attempts=attempts,
        restartable=False,
    )

"""The error tree of lockgate.

Every error raised to a user derives from :class:`LockgateError`, so one
``except lg.LockgateError`` catches them all; each also derives from the
builtin it refines (``ValueError``, ``TypeError``, ``RuntimeError``) so
generic handlers keep working. Messages name what is wrong and how to fix it.
"""

from __future__ import annotations

import enum
from typing import Any


def _rebuild(
    cls: type, args: tuple[Any, ...], kwargs: dict[str, Any], state: dict[str, Any]
) -> BaseException:
    error = cls(*args, **kwargs)
    error.__dict__.update(state)
    return error


class LockgateError(Exception):
    """Base class of every error lockgate raises."""


class NonRestartableError(LockgateError):
    """An error no restart can fix: a wrong setting, an invalid uid, output lost for good.

    Like Flink's non-recoverable errors (``SuppressRestartsException``), an attempt that
    fails with one ends the job at once, whatever its restart strategy: the
    :class:`JobFailedError` says the error is not restartable. An attempt fails with it
    when it is the failing error itself, or its explicit cause (``raise ... from``)
    seen through lockgate's wrappers (:class:`UserFunctionError`, a commit's error).
    User code may raise subclasses of it to stop restarts on purpose.

    One exception keeps restarts: a ``NonRestartableError`` raised ``from`` an error
    that is not a :class:`LockgateError` (e.g. ``ConfigurationError("cannot reach
    Redis") from ConnectionError``) reports the environment as it was (a server down, a
    stream not created yet), which may change before the next attempt.
    """


class ConfigurationError(NonRestartableError, ValueError):
    """A setting or argument has a value lockgate cannot use (not restartable, see
    :class:`NonRestartableError`)."""


class InvalidGraphError(NonRestartableError, ValueError):
    """The dataflow graph cannot be turned into a job (raised when the job is built)."""


class MalformedRecordError(LockgateError, ValueError):
    """A source met input it cannot parse; the message gives its location."""

    def __init__(self, message: str, *, location: str, raw: object = None) -> None:
        super().__init__(message)
        self.location = location
        self.raw = raw

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (type(self), (str(self),), {"location": self.location, "raw": self.raw}, self.__dict__),
        )


class ChangelogError(NonRestartableError, ValueError):
    """A changelog (updates, deletes) reached an operator or sink that takes only
    inserts, or a change could not be applied; a restart would meet it again."""


class UnsupportedKeyError(LockgateError, TypeError):
    """A key_by key has a type lockgate cannot hash stably across processes."""


class CorruptStreamError(LockgateError, RuntimeError):
    """A channel delivered elements in an order the protocol forbids."""


class TaskCancelledError(LockgateError, RuntimeError):
    """Raised inside a subtask when the job cancels it; never reaches users."""


class CheckpointFailedError(LockgateError, RuntimeError):
    """Checkpoints failed more often in a row than ``tolerable_failures`` allows (M-C6)."""


class FailureReason(enum.Enum):
    """Why a job or an attempt failed."""

    USER_CODE = "user code raised an exception"
    MALFORMED_INPUT = "a source met malformed input"
    TASK_LOST = "a task stopped without reporting"
    CANCELLED = "the job was cancelled"
    CHECKPOINT = "checkpoints failed more often than tolerated"
    INTERNAL = "an internal error"


class JobFailedError(LockgateError, RuntimeError):
    """The job failed; ``cause`` holds the first failure, ``operator`` and
    ``subtask`` say where it happened, ``remote_traceback`` the formatted
    traceback of the failing code (also for failures in other processes);
    ``restartable`` is False when the job ended at once on a
    :class:`NonRestartableError`, without restarting."""

    def __init__(
        self,
        message: str,
        *,
        reason: FailureReason = FailureReason.INTERNAL,
        operator: str | None = None,
        subtask: int | None = None,
        remote_traceback: str | None = None,
        attempts: int = 1,
        restartable: bool = True,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.operator = operator
        self.subtask = subtask
        self.remote_traceback = remote_traceback
        self.attempts = attempts
        self.restartable = restartable

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), (str(self),), {}, self.__dict__))


class UserFunctionError(LockgateError, RuntimeError):
    """Wraps an exception raised by user code with the operator and subtask it ran in."""

    def __init__(self, operator: str, subtask: int, parallelism: int, error: BaseException) -> None:
        super().__init__(
            f"operator '{operator}' (subtask {subtask + 1}/{parallelism}) raised "
            f"{type(error).__name__}: {error}"
        )
        self.operator = operator
        self.subtask = subtask
        self.parallelism = parallelism
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.operator, self.subtask, self.parallelism, self.error))

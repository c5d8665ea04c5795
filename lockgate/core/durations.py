"""Duration arguments: ``timedelta`` or an int of milliseconds."""

from __future__ import annotations

from datetime import timedelta
from typing import Union

from ..errors import ConfigurationError

Duration = Union[timedelta, int]  # noqa: UP007 (runtime alias kept as typing.Union)


def to_millis(value: Duration, what: str, *, allow_zero: bool = True) -> int:
    """Return ``value`` in whole milliseconds, rejecting negatives and other types.

    ``what`` names the setting in the error message.
    """
    if isinstance(value, bool) or not isinstance(value, (timedelta, int)):
        raise ConfigurationError(
            f"{what} must be a datetime.timedelta or an int of milliseconds, got {value!r}"
        )
    ms = int(value.total_seconds() * 1000) if isinstance(value, timedelta) else value
    if ms < 0 or (ms == 0 and not allow_zero):
        bound = "positive" if not allow_zero else "zero or more"
        raise ConfigurationError(f"{what} must be {bound}, got {value!r}")
    return ms

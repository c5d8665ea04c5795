"""Restart strategies (M-R2): whether and when a failed job restarts.

A :class:`RestartStrategy` is immutable, picklable configuration (it travels
with the job). Each job run asks it for a fresh :class:`RestartBackoff` with
:meth:`RestartStrategy.create_backoff`; the driver then reports every failure
to that backoff and asks whether to restart and how long to wait first::

    backoff = strategy.create_backoff(clock)
    ...                                  # the job fails
    backoff.notify_failure()
    if not backoff.can_restart():
        raise JobFailedError(backoff.give_up_reason())
    wait backoff.backoff_ms() on the clock, restart, then backoff.notify_restarted()

Four strategies, with Flink's semantics:

* ``fixed_delay(attempts=N, delay=D)``: restarts while the number of failures
  so far is at most ``N``, waiting ``D`` before each restart.
* ``failure_rate(max_failures=M, interval=I, delay=D)``: restarts while at most
  ``M`` failures happened within the last ``I`` (a failure exactly ``I`` ago
  still counts), waiting ``D`` before each restart.
* ``exponential_delay(...)``: the wait starts at ``initial`` and is multiplied
  by ``multiplier`` after each failure, capped at ``max``, with random jitter;
  it resets to ``initial`` after ``reset_after`` without failures. Optionally
  gives up after ``attempts`` restarts since the last reset.
* ``none()``: never restarts.

All time is read from an injected :class:`~lockgate.core.clock.Clock`
(``monotonic_ms``), so nothing here sleeps and tests drive a ``ManualClock``.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from ..core.clock import Clock
from ..core.durations import Duration, to_millis
from ..errors import ConfigurationError

__all__ = ["RestartBackoff", "RestartStrategy"]

StrategyKind = Literal["fixed_delay", "failure_rate", "exponential_delay", "none"]


def _check_int(value: object, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{what} must be an int >= {minimum}, got {value!r}")
    return value


def _check_number(value: object, what: str, requirement: str, low: float, high: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise ConfigurationError(f"{what} must be {requirement}, got {value!r}")
    return float(value)


def _times(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass(frozen=True, repr=False)
class RestartStrategy:
    """How a failed job restarts (M-R2). Build one with the static factories.

    Instances are immutable, hashable, comparable by value and picklable; the
    fields hold the validated configuration in milliseconds and are not meant
    to be set directly (the factories check every argument).
    """

    kind: StrategyKind
    attempts: int | None = None
    delay_ms: int = 0
    max_failures: int = 0
    interval_ms: int = 0
    initial_ms: int = 0
    max_ms: int = 0
    multiplier: float = 1.0
    jitter: float = 0.0
    reset_after_ms: int = 0

    # -- factories ------------------------------------------------------------------------------

    @staticmethod
    def fixed_delay(attempts: int, delay: Duration) -> RestartStrategy:
        """Restart up to ``attempts`` times, waiting ``delay`` before each restart.

        The job restarts while the number of failures so far is ``<= attempts``
        and fails for good on failure ``attempts + 1``; ``attempts=0`` never
        restarts. ``delay`` is a ``timedelta`` or an int of milliseconds (``0``
        restarts at once).
        """
        name = "RestartStrategy.fixed_delay"
        return RestartStrategy(
            kind="fixed_delay",
            attempts=_check_int(attempts, f"{name} attempts", 0),
            delay_ms=to_millis(delay, f"{name} delay"),
        )

    @staticmethod
    def failure_rate(max_failures: int, interval: Duration, delay: Duration) -> RestartStrategy:
        """Restart while at most ``max_failures`` failures fall within ``interval``.

        After each failure, failures older than ``now - interval`` are forgotten
        (one exactly ``interval`` ago still counts); the job restarts, after
        ``delay``, while the remaining count is ``<= max_failures`` and fails for
        good otherwise. ``max_failures >= 1``; ``interval`` must be positive.
        """
        name = "RestartStrategy.failure_rate"
        return RestartStrategy(
            kind="failure_rate",
            max_failures=_check_int(max_failures, f"{name} max_failures", 1),
            interval_ms=to_millis(interval, f"{name} interval", allow_zero=False),
            delay_ms=to_millis(delay, f"{name} delay"),
        )

    @staticmethod
    def exponential_delay(
        initial: Duration = timedelta(seconds=1),
        max: Duration = timedelta(minutes=1),  # shadows the builtin: public argument name
        multiplier: float = 2.0,
        jitter: float = 0.1,
        reset_after: Duration = timedelta(hours=1),
        attempts: int | None = None,
    ) -> RestartStrategy:
        """Restart with a wait that grows exponentially, capped at ``max``.

        The first failure waits ``initial``; each further failure multiplies the
        wait by ``multiplier`` (``>= 1``) up to ``max`` (``>= initial``). The wait
        returned is the base wait ``b`` plus a uniform random offset in
        ``[-jitter * b, +jitter * b]`` (``jitter`` in ``[0, 1]``), clamped to
        ``[0, max]``. When ``reset_after`` passed without a failure (counted from
        the previous failure, or from the restart if the driver reported it with
        :meth:`RestartBackoff.notify_restarted`), the wait and the attempt count
        reset before the new failure is counted. ``attempts=None`` restarts
        forever; an int ``N >= 0`` fails the job on failure ``N + 1`` since the
        last reset. ``initial`` and ``reset_after`` must be positive.
        """
        name = "RestartStrategy.exponential_delay"
        initial_ms = to_millis(initial, f"{name} initial", allow_zero=False)
        max_ms = to_millis(max, f"{name} max", allow_zero=False)
        if max_ms < initial_ms:
            raise ConfigurationError(
                f"{name} max must be >= initial ({initial_ms} ms), got {max!r} ({max_ms} ms)"
            )
        return RestartStrategy(
            kind="exponential_delay",
            initial_ms=initial_ms,
            max_ms=max_ms,
            multiplier=_check_number(
                multiplier, f"{name} multiplier", "a number >= 1.0", 1.0, math.inf
            ),
            jitter=_check_number(
                jitter, f"{name} jitter", "a number between 0.0 and 1.0", 0.0, 1.0
            ),
            reset_after_ms=to_millis(reset_after, f"{name} reset_after", allow_zero=False),
            attempts=None
            if attempts is None
            else _check_int(attempts, f"{name} attempts (None for unlimited, or an int)", 0),
        )

    @staticmethod
    def none() -> RestartStrategy:
        """Never restart: the first failure fails the job."""
        return RestartStrategy(kind="none")

    # -- use ------------------------------------------------------------------------------------

    def create_backoff(self, clock: Clock, rng: random.Random | None = None) -> RestartBackoff:
        """A fresh :class:`RestartBackoff` for one job run, reading time from ``clock``.

        ``rng`` draws the jitter of ``exponential_delay`` (pass a seeded
        ``random.Random`` for reproducible waits); other strategies ignore it.
        """
        if not callable(getattr(clock, "monotonic_ms", None)):
            raise ConfigurationError(
                f"create_backoff needs a lockgate.core.clock.Clock (with monotonic_ms()), "
                f"got {clock!r}"
            )
        if rng is not None and not isinstance(rng, random.Random):
            raise ConfigurationError(
                f"create_backoff rng must be a random.Random or None, got {rng!r}"
            )
        if self.kind == "fixed_delay":
            return _FixedDelayBackoff(self, clock)
        if self.kind == "failure_rate":
            return _FailureRateBackoff(self, clock)
        if self.kind == "exponential_delay":
            return _ExponentialDelayBackoff(
                self, clock, rng if rng is not None else random.Random()
            )
        if self.kind == "none":
            return _NoRestartBackoff(self, clock)
        raise ConfigurationError(
            f"unknown restart strategy kind {self.kind!r}; build strategies with "
            f"RestartStrategy.fixed_delay/failure_rate/exponential_delay/none"
        )

    def describe(self) -> str:
        """Short human text, e.g. ``fixed_delay(attempts=3, delay=1000 ms)``."""
        if self.kind == "fixed_delay":
            return f"fixed_delay(attempts={self.attempts}, delay={self.delay_ms} ms)"
        if self.kind == "failure_rate":
            return (
                f"failure_rate(max_failures={self.max_failures}, "
                f"interval={self.interval_ms} ms, delay={self.delay_ms} ms)"
            )
        if self.kind == "exponential_delay":
            attempts = "unlimited" if self.attempts is None else str(self.attempts)
            return (
                f"exponential_delay(initial={self.initial_ms} ms, max={self.max_ms} ms, "
                f"multiplier={self.multiplier}, jitter={self.jitter}, "
                f"reset_after={self.reset_after_ms} ms, attempts={attempts})"
            )
        return f"{self.kind}()"

    def __repr__(self) -> str:
        return self.describe()


class RestartBackoff:
    """The restart state of one job run; made by :meth:`RestartStrategy.create_backoff`.

    Protocol: call :meth:`notify_failure` when the job fails, then
    :meth:`can_restart`; if it is True wait :meth:`backoff_ms` before
    restarting (and optionally call :meth:`notify_restarted` once the new
    attempt runs), otherwise fail the job with :meth:`give_up_reason`.
    ``can_restart``, ``backoff_ms`` and ``give_up_reason`` only read state, so
    calling them repeatedly returns the same answer until the next failure.
    Not thread-safe: one driver thread uses it.
    """

    def __init__(self, strategy: RestartStrategy, clock: Clock) -> None:
        self._strategy = strategy
        self._clock = clock
        self._failures = 0

    @property
    def strategy(self) -> RestartStrategy:
        """The strategy this backoff follows."""
        return self._strategy

    @property
    def failures(self) -> int:
        """Failures notified so far (over the whole run, resets included)."""
        return self._failures

    def notify_failure(self) -> None:
        """Record that the job failed now (``clock.monotonic_ms()``)."""
        self._failures += 1
        self._on_failure(self._clock.monotonic_ms())

    def can_restart(self) -> bool:
        """Whether the job may restart after the failures notified so far."""
        raise NotImplementedError

    def backoff_ms(self) -> float:
        """Milliseconds to wait before the restart (>= 0).

        Valid after :meth:`notify_failure` while :meth:`can_restart` is True;
        raises ``RuntimeError`` otherwise.
        """
        if self._failures == 0:
            raise RuntimeError(
                f"backoff_ms() of {self._strategy.describe()} was called before any "
                f"notify_failure(); report the failure first"
            )
        if not self.can_restart():
            raise RuntimeError(
                f"backoff_ms() was called although the job may not restart: {self.give_up_reason()}"
            )
        return self._backoff_ms()

    def notify_restarted(self) -> None:
        """Record that the new attempt started running now. No-op by default;
        ``exponential_delay`` measures its ``reset_after`` quiet period from here."""

    def give_up_reason(self) -> str:
        """Why the job may not restart. Valid only when :meth:`can_restart` is
        False; raises ``RuntimeError`` otherwise."""
        if self.can_restart():
            raise RuntimeError(
                f"give_up_reason() was called although {self._strategy.describe()} still "
                f"allows a restart after {_times(self._failures, 'failure')}"
            )
        return self._give_up_reason()

    # -- for subclasses -------------------------------------------------------------------------

    def _on_failure(self, now_ms: float) -> None:
        """Update state for a failure at ``now_ms`` (``failures`` already counts it)."""

    def _backoff_ms(self) -> float:
        raise NotImplementedError

    def _give_up_reason(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._strategy.describe()} failures={self._failures}>"


class _FixedDelayBackoff(RestartBackoff):
    def can_restart(self) -> bool:
        assert self._strategy.attempts is not None
        return self._failures <= self._strategy.attempts

    def _backoff_ms(self) -> float:
        return float(self._strategy.delay_ms)

    def _give_up_reason(self) -> str:
        return (
            f"fixed_delay allows {_times(self._strategy.attempts or 0, 'restart')} and the "
            f"job failed {_times(self._failures, 'time')}"
        )


class _FailureRateBackoff(RestartBackoff):
    def __init__(self, strategy: RestartStrategy, clock: Clock) -> None:
        super().__init__(strategy, clock)
        # Only whether the count exceeds max_failures matters, so at most
        # max_failures + 1 timestamps are kept.
        self._window: deque[float] = deque(maxlen=strategy.max_failures + 1)

    def _on_failure(self, now_ms: float) -> None:
        self._window.append(now_ms)
        horizon = now_ms - self._strategy.interval_ms
        while self._window and self._window[0] < horizon:
            self._window.popleft()

    def can_restart(self) -> bool:
        return len(self._window) <= self._strategy.max_failures

    def _backoff_ms(self) -> float:
        return float(self._strategy.delay_ms)

    def _give_up_reason(self) -> str:
        s = self._strategy
        return (
            f"failure_rate allows {_times(s.max_failures, 'failure')} within "
            f"{s.interval_ms} ms and the job failed {_times(len(self._window), 'time')} "
            f"within the last {s.interval_ms} ms"
        )


class _ExponentialDelayBackoff(RestartBackoff):
    def __init__(self, strategy: RestartStrategy, clock: Clock, rng: random.Random) -> None:
        super().__init__(strategy, clock)
        self._rng = rng
        self._base_ms = float(strategy.initial_ms)  # the un-jittered wait of the next failure
        self._since_reset = 0  # failures since the last reset
        self._quiet_since_ms: float | None = None  # last failure or restart
        self._current_ms = 0.0  # the jittered wait of the last failure

    def _on_failure(self, now_ms: float) -> None:
        s = self._strategy
        if self._quiet_since_ms is not None and now_ms - self._quiet_since_ms >= s.reset_after_ms:
            self._base_ms = float(s.initial_ms)
            self._since_reset = 0
        self._since_reset += 1
        self._quiet_since_ms = now_ms
        base = self._base_ms
        self._base_ms = min(base * s.multiplier, float(s.max_ms))
        if s.jitter > 0.0:
            spread = s.jitter * base
            base += self._rng.uniform(-spread, spread)
        self._current_ms = min(max(base, 0.0), float(s.max_ms))

    def notify_restarted(self) -> None:
        self._quiet_since_ms = self._clock.monotonic_ms()

    def can_restart(self) -> bool:
        attempts = self._strategy.attempts
        return attempts is None or self._since_reset <= attempts

    def _backoff_ms(self) -> float:
        return self._current_ms

    def _give_up_reason(self) -> str:
        s = self._strategy
        return (
            f"exponential_delay allows {_times(s.attempts or 0, 'restart')} between "
            f"resets (a reset follows {s.reset_after_ms} ms without failure) and the job "
            f"failed {_times(self._since_reset, 'time')} since the last reset"
        )


class _NoRestartBackoff(RestartBackoff):
    def can_restart(self) -> bool:
        return False

    def _backoff_ms(self) -> float:  # pragma: no cover - can_restart() is always False
        raise AssertionError("unreachable")

    def _give_up_reason(self) -> str:
        return (
            f"restarts are disabled (RestartStrategy.none()) and the job failed "
            f"{_times(self._failures, 'time')}"
        )

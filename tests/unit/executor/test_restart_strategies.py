"""Restart strategies (M-R2): fixed delay, failure rate, exponential delay and none,
driven by a ManualClock (no sleeps)."""

from __future__ import annotations

import pickle
import random
from datetime import timedelta
from typing import Any

import pytest

from lockgate.core.clock import ManualClock
from lockgate.errors import ConfigurationError
from lockgate.recovery.restart_strategy import RestartBackoff, RestartStrategy


def fail(backoff: RestartBackoff) -> bool:
    backoff.notify_failure()
    return backoff.can_restart()


# -- fixed delay ------------------------------------------------------------------------------


def test_m_r2_fixed_delay_restarts_exactly_attempts_times_then_gives_up() -> None:
    clock = ManualClock()
    backoff = RestartStrategy.fixed_delay(attempts=3, delay=timedelta(seconds=1)).create_backoff(
        clock
    )
    for n in range(1, 4):
        clock.advance(10)
        assert fail(backoff)
        assert backoff.failures == n
        assert backoff.backoff_ms() == 1000.0
    assert not fail(backoff)
    assert backoff.failures == 4
    assert backoff.give_up_reason() == "fixed_delay allows 3 restarts and the job failed 4 times"


def test_m_r2_fixed_delay_accepts_int_milliseconds_and_zero_delay() -> None:
    backoff = RestartStrategy.fixed_delay(attempts=1, delay=250).create_backoff(ManualClock())
    assert fail(backoff) and backoff.backoff_ms() == 250.0
    backoff = RestartStrategy.fixed_delay(attempts=1, delay=0).create_backoff(ManualClock())
    assert fail(backoff) and backoff.backoff_ms() == 0.0


def test_m_r2_fixed_delay_zero_attempts_never_restarts() -> None:
    backoff = RestartStrategy.fixed_delay(attempts=0, delay=10).create_backoff(ManualClock())
    assert not fail(backoff)
    assert backoff.give_up_reason() == "fixed_delay allows 0 restarts and the job failed 1 time"


def test_m_r2_fixed_delay_ignores_time_between_failures() -> None:
    clock = ManualClock()
    backoff = RestartStrategy.fixed_delay(attempts=1, delay=10).create_backoff(clock)
    assert fail(backoff)
    clock.advance(10**9)
    assert not fail(backoff)


def test_m_r2_backoff_misuse_raises_runtime_error() -> None:
    backoff = RestartStrategy.fixed_delay(attempts=1, delay=10).create_backoff(ManualClock())
    with pytest.raises(RuntimeError, match="before any notify_failure"):
        backoff.backoff_ms()
    assert fail(backoff)
    with pytest.raises(RuntimeError, match="still allows a restart"):
        backoff.give_up_reason()
    assert not fail(backoff)
    with pytest.raises(RuntimeError, match="may not restart: fixed_delay allows 1 restart "):
        backoff.backoff_ms()


def test_m_r2_each_backoff_is_independent_state() -> None:
    strategy = RestartStrategy.fixed_delay(attempts=1, delay=10)
    first, second = strategy.create_backoff(ManualClock()), strategy.create_backoff(ManualClock())
    assert fail(first) and not fail(first)
    assert fail(second) and second.failures == 1


# -- failure rate -----------------------------------------------------------------------------


def test_m_r2_failure_rate_keeps_restarting_when_failures_are_spread_out() -> None:
    clock = ManualClock()
    backoff = RestartStrategy.failure_rate(
        max_failures=2, interval=timedelta(seconds=10), delay=timedelta(milliseconds=500)
    ).create_backoff(clock)
    for _ in range(20):
        assert fail(backoff)
        assert backoff.backoff_ms() == 500.0
        clock.advance(6_000)  # at most 2 failures in any 10 s window
    assert backoff.failures == 20


def test_m_r2_failure_rate_gives_up_on_max_failures_plus_one_within_the_interval() -> None:
    clock = ManualClock()
    backoff = RestartStrategy.failure_rate(
        max_failures=3, interval=10_000, delay=100
    ).create_backoff(clock)
    for _ in range(3):
        assert fail(backoff)
        clock.advance(1_000)
    assert not fail(backoff)
    assert backoff.give_up_reason() == (
        "failure_rate allows 3 failures within 10000 ms and the job failed 4 times "
        "within the last 10000 ms"
    )


def test_m_r2_failure_rate_old_failures_slide_out_of_the_window() -> None:
    clock = ManualClock()
    backoff = RestartStrategy.failure_rate(max_failures=2, interval=1_000, delay=0).create_backoff(
        clock
    )
    assert fail(backoff)  # t=0
    clock.advance(500)
    assert fail(backoff)  # t=500
    clock.advance(501)
    assert fail(backoff)  # t=1001: t=0 slid out, window {500, 1001}
    clock.advance(499)
    assert not fail(backoff)  # t=1500: t=500 exactly 1000 ago still counts: 3 in window


def test_m_r2_failure_rate_failure_exactly_interval_ago_counts_and_one_ms_later_does_not() -> None:
    clock = ManualClock()
    backoff = RestartStrategy.failure_rate(max_failures=1, interval=1_000, delay=0).create_backoff(
        clock
    )
    assert fail(backoff)
    clock.advance(1_001)
    assert fail(backoff)
    clock.advance(1_000)
    assert not fail(backoff)


# -- exponential delay ------------------------------------------------------------------------


def exponential(**kwargs: object) -> RestartStrategy:
    args: dict[str, object] = {
        "initial": 100,
        "max": 1_000,
        "multiplier": 2.0,
        "jitter": 0.0,
        "reset_after": 60_000,
    }
    args.update(kwargs)
    return RestartStrategy.exponential_delay(**args)  # type: ignore[arg-type]


def backoffs(backoff: RestartBackoff, clock: ManualClock, n: int, gap_ms: float = 1) -> list[float]:
    out = []
    for _ in range(n):
        clock.advance(gap_ms)
        assert fail(backoff)
        out.append(backoff.backoff_ms())
    return out


def test_m_r2_exponential_delay_grows_by_the_multiplier_and_caps_at_max() -> None:
    clock = ManualClock()
    backoff = exponential().create_backoff(clock)
    assert backoffs(backoff, clock, 7) == [100, 200, 400, 800, 1000, 1000, 1000]
    clock2 = ManualClock()
    backoff = exponential(multiplier=1.5, max=10_000).create_backoff(clock2)
    assert backoffs(backoff, clock2, 3) == [100, 150, 225]


def test_m_r2_exponential_delay_multiplier_one_is_a_constant_delay() -> None:
    clock = ManualClock()
    assert backoffs(exponential(multiplier=1).create_backoff(clock), clock, 4) == [100] * 4


def test_m_r2_exponential_delay_default_arguments() -> None:
    strategy = RestartStrategy.exponential_delay()
    assert (
        strategy.initial_ms,
        strategy.max_ms,
        strategy.multiplier,
        strategy.jitter,
        strategy.reset_after_ms,
        strategy.attempts,
    ) == (1_000, 60_000, 2.0, 0.1, 3_600_000, None)


def test_m_r2_exponential_delay_jitter_stays_within_bounds() -> None:
    clock = ManualClock()
    backoff = exponential(initial=1_000, max=100_000, multiplier=1.0, jitter=0.25).create_backoff(
        clock, random.Random(7)
    )
    values = backoffs(backoff, clock, 500)
    assert all(750 <= v <= 1_250 for v in values)
    assert len(set(values)) > 400  # it really is random
    assert min(values) < 800 and max(values) > 1_200


def test_m_r2_exponential_delay_jitter_never_exceeds_max_or_goes_below_zero() -> None:
    clock = ManualClock()
    backoff = exponential(initial=1_000, max=1_000, multiplier=1.0, jitter=1.0).create_backoff(
        clock, random.Random(1)
    )
    values = backoffs(backoff, clock, 500)
    assert all(0 <= v <= 1_000 for v in values)
    assert min(values) < 100


def test_m_r2_exponential_delay_jitter_is_deterministic_for_the_same_seed() -> None:
    strategy = exponential(jitter=0.5, max=100_000)
    runs = []
    for seed in (42, 42, 43):
        clock = ManualClock()
        runs.append(backoffs(strategy.create_backoff(clock, random.Random(seed)), clock, 10))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_m_r2_exponential_delay_backoff_ms_is_stable_between_failures() -> None:
    clock = ManualClock()
    backoff = exponential(jitter=0.5).create_backoff(clock, random.Random(3))
    assert fail(backoff)
    assert backoff.backoff_ms() == backoff.backoff_ms()


def test_m_r2_exponential_delay_resets_after_reset_after_without_failures() -> None:
    clock = ManualClock()
    backoff = exponential(reset_after=10_000).create_backoff(clock)
    assert backoffs(backoff, clock, 4) == [100, 200, 400, 800]
    clock.advance(9_999)  # not quiet long enough
    assert fail(backoff) and backoff.backoff_ms() == 1_000
    clock.advance(10_000)  # quiet for reset_after: reset
    assert fail(backoff) and backoff.backoff_ms() == 100
    assert backoffs(backoff, clock, 2) == [200, 400]
    assert backoff.failures == 8


def test_m_r2_exponential_delay_reset_counts_quiet_time_from_the_restart() -> None:
    clock = ManualClock()
    backoff = exponential(reset_after=10_000).create_backoff(clock)
    assert backoffs(backoff, clock, 2) == [100, 200]
    clock.advance(5_000)
    backoff.notify_restarted()  # running since t=5002
    clock.advance(9_000)  # 14 s after the failure, 9 s of running
    assert fail(backoff) and backoff.backoff_ms() == 400
    backoff.notify_restarted()
    clock.advance(10_000)
    assert fail(backoff) and backoff.backoff_ms() == 100


def test_m_r2_exponential_delay_attempts_limit_gives_up() -> None:
    clock = ManualClock()
    backoff = exponential(attempts=3).create_backoff(clock)
    assert backoffs(backoff, clock, 3) == [100, 200, 400]
    assert not fail(backoff)
    assert backoff.give_up_reason() == (
        "exponential_delay allows 3 restarts between resets (a reset follows 60000 ms without "
        "failure) and the job failed 4 times since the last reset"
    )


def test_m_r2_exponential_delay_attempts_count_since_the_last_reset() -> None:
    clock = ManualClock()
    backoff = exponential(attempts=2, reset_after=1_000).create_backoff(clock)
    assert backoffs(backoff, clock, 2) == [100, 200]
    clock.advance(1_000)
    assert backoffs(backoff, clock, 2) == [100, 200]  # reset: two more restarts allowed
    assert not fail(backoff)
    assert backoff.failures == 5


def test_m_r2_exponential_delay_unlimited_attempts_by_default() -> None:
    clock = ManualClock()
    backoff = exponential().create_backoff(clock)
    for _ in range(1_000):
        assert fail(backoff)
    assert backoff.backoff_ms() == 1_000


def test_m_r2_exponential_delay_zero_attempts_never_restarts() -> None:
    backoff = exponential(attempts=0).create_backoff(ManualClock())
    assert not fail(backoff)
    assert "allows 0 restarts" in backoff.give_up_reason()


# -- none -------------------------------------------------------------------------------------


def test_m_r2_none_gives_up_at_the_first_failure() -> None:
    backoff = RestartStrategy.none().create_backoff(ManualClock())
    assert not fail(backoff)
    assert backoff.failures == 1
    reason = backoff.give_up_reason()
    assert "restarts are disabled" in reason and "RestartStrategy.none()" in reason
    backoff.notify_restarted()  # the default hook is a no-op


# -- description, equality, pickling ----------------------------------------------------------


def test_m_r2_describe_and_repr() -> None:
    fixed = RestartStrategy.fixed_delay(attempts=3, delay=timedelta(seconds=1))
    assert fixed.describe() == repr(fixed) == "fixed_delay(attempts=3, delay=1000 ms)"
    assert repr(RestartStrategy.failure_rate(2, timedelta(minutes=1), 500)) == (
        "failure_rate(max_failures=2, interval=60000 ms, delay=500 ms)"
    )
    assert repr(RestartStrategy.exponential_delay()) == (
        "exponential_delay(initial=1000 ms, max=60000 ms, multiplier=2.0, jitter=0.1, "
        "reset_after=3600000 ms, attempts=unlimited)"
    )
    assert "attempts=5)" in repr(RestartStrategy.exponential_delay(attempts=5))
    assert repr(RestartStrategy.none()) == "none()"


STRATEGIES = [
    RestartStrategy.fixed_delay(attempts=3, delay=timedelta(seconds=1)),
    RestartStrategy.failure_rate(max_failures=2, interval=timedelta(minutes=1), delay=10),
    RestartStrategy.exponential_delay(
        initial=50,
        max=5_000,
        multiplier=3,
        jitter=0.2,
        reset_after=timedelta(minutes=5),
        attempts=4,
    ),
    RestartStrategy.exponential_delay(),
    RestartStrategy.none(),
]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
def test_m_r2_strategies_survive_a_pickle_round_trip(strategy: RestartStrategy) -> None:
    copy = pickle.loads(pickle.dumps(strategy))
    assert copy == strategy and hash(copy) == hash(strategy)
    assert repr(copy) == repr(strategy)
    a, b = ManualClock(), ManualClock()
    original, restored = (
        strategy.create_backoff(a, random.Random(5)),
        copy.create_backoff(b, random.Random(5)),
    )
    for _ in range(6):
        a.advance(1)
        b.advance(1)
        assert fail(original) == fail(restored)
        if original.can_restart():
            assert original.backoff_ms() == restored.backoff_ms()


@pytest.mark.parametrize("strategy", STRATEGIES, ids=repr)
def test_m_r2_strategies_are_immutable(strategy: RestartStrategy) -> None:
    with pytest.raises(AttributeError):
        strategy.attempts = 99  # type: ignore[misc]


# -- argument validation ----------------------------------------------------------------------

#: RestartStrategy without static types, so the wrong-type calls below type-check
loose: Any = RestartStrategy


@pytest.mark.parametrize(
    "call, pattern",
    [
        (
            lambda: loose.fixed_delay(-1, 10),
            r"RestartStrategy\.fixed_delay attempts must be an int >= 0, got -1",
        ),
        (lambda: loose.fixed_delay(1.5, 10), r"fixed_delay attempts .*got 1\.5"),
        (lambda: loose.fixed_delay(True, 10), r"fixed_delay attempts .*got True"),
        (lambda: loose.fixed_delay("3", 10), r"fixed_delay attempts .*got '3'"),
        (lambda: loose.fixed_delay(3, -5), r"fixed_delay delay must be zero or more, got -5"),
        (
            lambda: loose.fixed_delay(3, 1.0),
            r"fixed_delay delay must be a datetime\.timedelta or an int of milliseconds, got 1\.0",
        ),
        (lambda: loose.fixed_delay(3, timedelta(seconds=-1)), r"fixed_delay delay"),
        (
            lambda: loose.failure_rate(0, 1_000, 10),
            r"RestartStrategy\.failure_rate max_failures must be an int >= 1, got 0",
        ),
        (lambda: loose.failure_rate(None, 1_000, 10), r"failure_rate max_failures"),
        (
            lambda: loose.failure_rate(1, 0, 10),
            r"RestartStrategy\.failure_rate interval must be positive, got 0",
        ),
        (lambda: loose.failure_rate(1, timedelta(0), 10), r"failure_rate interval"),
        (lambda: loose.failure_rate(1, "1s", 10), r"failure_rate interval .*got '1s'"),
        (lambda: loose.failure_rate(1, 1_000, -1), r"failure_rate delay .*got -1"),
        (
            lambda: loose.exponential_delay(initial=0),
            r"RestartStrategy\.exponential_delay initial must be positive, got 0",
        ),
        (lambda: loose.exponential_delay(initial=-1), r"exponential_delay initial"),
        (
            lambda: loose.exponential_delay(initial=2_000, max=1_000),
            r"exponential_delay max must be >= initial \(2000 ms\), got 1000",
        ),
        (lambda: loose.exponential_delay(max=None), r"exponential_delay max .*got None"),
        (
            lambda: loose.exponential_delay(multiplier=0.5),
            r"RestartStrategy\.exponential_delay multiplier must be a number >= 1\.0, got 0\.5",
        ),
        (
            lambda: loose.exponential_delay(multiplier=float("inf")),
            r"exponential_delay multiplier .*got inf",
        ),
        (
            lambda: loose.exponential_delay(multiplier="2"),
            r"exponential_delay multiplier .*got '2'",
        ),
        (
            lambda: loose.exponential_delay(jitter=-0.1),
            (
                r"RestartStrategy\.exponential_delay jitter must be a number between 0\.0 and 1\.0, "
                r"got -0\.1"
            ),
        ),
        (lambda: loose.exponential_delay(jitter=1.5), r"exponential_delay jitter .*got 1\.5"),
        (
            lambda: loose.exponential_delay(jitter=float("nan")),
            r"exponential_delay jitter .*got nan",
        ),
        (
            lambda: loose.exponential_delay(reset_after=0),
            r"exponential_delay reset_after must be positive, got 0",
        ),
        (
            lambda: loose.exponential_delay(attempts=-1),
            r"exponential_delay attempts \(None for unlimited, or an int\) must be an int >= 0, got -1",
        ),
        (lambda: loose.exponential_delay(attempts=2.0), r"exponential_delay attempts"),
        (
            lambda: loose.none().create_backoff(object()),
            r"create_backoff needs a lockgate\.core\.clock\.Clock",
        ),
        (
            lambda: loose.none().create_backoff(ManualClock(), rng=7),
            r"create_backoff rng must be a random\.Random or None, got 7",
        ),
    ],
)
def test_m_r2_invalid_arguments_raise_configuration_error_naming_the_argument(
    call, pattern
) -> None:
    with pytest.raises(ConfigurationError, match=pattern):
        call()


def test_m_r2_configuration_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        RestartStrategy.fixed_delay(-1, 0)

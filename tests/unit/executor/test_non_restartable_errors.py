"""Errors no restart can fix (issue 18 item 9, M-R2): uids are checked where they are
set, and the failover loop recognises non-restartable errors through lockgate's
wrappers; restart causes count repeats per operator and error."""

from __future__ import annotations

import pytest

import lockgate as lg
from lockgate.connectors.postgres.transactions import TransactionLostError
from lockgate.connectors.two_phase_commit import CommitFailedError
from lockgate.errors import NonRestartableError
from lockgate.job.restart_causes import RestartCause, RestartCauses
from lockgate.recovery.non_restartable import non_restartable_cause


@pytest.mark.parametrize(
    "uid, problem",
    [
        ("../../escape", "contains '/'"),
        ("a\\b", "contains '\\\\\\\\'"),
        ("..", "relative folder name"),
        ("a\x00b", "contains '\\\\x00'"),
        ("x" * 129, "at most 128 bytes"),
    ],
)
def test_m_r2_a_uid_that_cannot_name_a_state_file_is_refused_where_it_is_set(
    uid: str, problem: str
) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    stream = env.from_sequence(0, 10).map(lambda x: x, name="same")
    with pytest.raises(lg.ConfigurationError, match=problem) as info:
        stream.uid(uid)
    assert "state files in checkpoints" in str(info.value)
    with pytest.raises(lg.ConfigurationError):
        stream.sink_to(lg.connectors.DiscardingSink()).uid(uid)


def test_m_r2_plain_uids_are_accepted() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    for uid in ("sums", "parse.orders-v2", "état 3", "x" * 128):
        env.from_sequence(0, 10).map(lambda x: x).uid(uid)


def user_failure(error: BaseException) -> lg.JobFailedError:
    """A failed attempt's error as the executors make it: the user's error as cause."""
    wrapped = lg.UserFunctionError("op", 0, 1, error)
    failure = lg.JobFailedError(f"job 'j' failed: {wrapped}", operator="op", subtask=0)
    failure.__cause__ = error
    return failure


def test_m_r2_configuration_errors_and_lost_transactions_are_not_restartable() -> None:
    lost = TransactionLostError("prepared transaction 'x' is gone")
    assert isinstance(lost, NonRestartableError) and isinstance(lost, RuntimeError)
    assert issubclass(lg.ConfigurationError, NonRestartableError)
    assert issubclass(lg.ConfigurationError, ValueError)
    config = lg.ConfigurationError("bad setting")
    assert non_restartable_cause(user_failure(config)) is config
    assert non_restartable_cause(user_failure(lost)) is lost
    # through a UserFunctionError, and a driver commit's CommitFailedError
    assert non_restartable_cause(lg.UserFunctionError("op", 0, 1, lost)) is lost
    try:
        try:
            raise lost
        except TransactionLostError as e:
            raise CommitFailedError("could not commit") from e
    except CommitFailedError as commit_error:
        assert non_restartable_cause(commit_error) is lost


def test_m_r2_an_environment_failure_wrapped_in_a_configuration_error_stays_restartable() -> None:
    try:
        try:
            raise ConnectionRefusedError("connection refused")
        except OSError as e:
            raise lg.ConfigurationError("cannot reach Redis at redis://x") from e
    except lg.ConfigurationError as error:
        assert non_restartable_cause(user_failure(error)) is None
    assert non_restartable_cause(user_failure(ValueError("bad record"))) is None
    # an error handled on the way (implicit __context__) does not count
    try:
        try:
            raise lg.ConfigurationError("handled")
        except lg.ConfigurationError:
            raise RuntimeError("another failure")  # noqa: B904 (the implicit __context__ is the point)
    except RuntimeError as error:
        assert non_restartable_cause(user_failure(error)) is None


def test_m_r2_restart_causes_count_repeats_per_operator_and_error_in_a_row() -> None:
    causes = RestartCauses()
    poison = user_failure(ValueError("poison record 500\nmore lines"))
    other = user_failure(KeyError("k"))
    other.operator = "lookup"
    assert causes.record(poison, 0) == RestartCause("op", "ValueError: poison record 500", 1, 1, 0)
    assert causes.record(poison, 1).describe() == (
        "the same error at operator 'op' repeated 2 times in a row (2 in this run)"
    )
    causes.record(other, 2)
    third = causes.record(poison, 3)
    assert (third.count, third.consecutive, third.last_attempt) == (3, 1, 3)
    assert [(c.operator, c.error, c.count, c.consecutive) for c in causes.snapshot()] == [
        ("op", "ValueError: poison record 500", 3, 1),
        ("lookup", "KeyError: 'k'", 1, 0),
    ]
    assert causes.failures == 4

"""The executor ``env.execute`` uses when none is given: Spark by default, one shared
SparkExecutor per process (so the session starts once), the local one on request, and a
clear error for anything else. No Spark session is started here (sessions start lazily)."""

from __future__ import annotations

import pytest

import lockgate as lg
from lockgate.api.environment import default_executor
from lockgate.executor.spark import SparkExecutor


@pytest.mark.parametrize("value", [None, "spark", " Spark "])
def test_the_default_executor_is_one_shared_spark_executor(monkeypatch, value) -> None:
    if value is None:
        monkeypatch.delenv("LOCKGATE_EXECUTOR", raising=False)
    else:
        monkeypatch.setenv("LOCKGATE_EXECUTOR", value)
    first = default_executor()
    assert isinstance(first, SparkExecutor)
    assert default_executor() is first, "every job of the process shares one session"


def test_lockgate_executor_local_selects_a_local_executor(monkeypatch) -> None:
    monkeypatch.setenv("LOCKGATE_EXECUTOR", "local")
    assert isinstance(default_executor(), lg.LocalExecutor)


def test_an_unknown_executor_name_is_refused_naming_the_choices(monkeypatch) -> None:
    monkeypatch.setenv("LOCKGATE_EXECUTOR", "flink")
    with pytest.raises(lg.ConfigurationError) as err:
        default_executor()
    assert "'local' or 'spark'" in str(err.value)

"""A slot's Python worker killed on Spark is named (issue 37 item 11): the attempt's
error says which slot died, on which host and process, which operators it hosted and the
signal that killed it; Spark's JVM trace goes to the log at DEBUG, never into the error,
the restart log line, the REST exceptions or the result's restart causes (M-R1).

Spark only: the local executor refuses ``KillWorker`` (its tasks are threads of the
test's own process)."""

from __future__ import annotations

import logging
import socket

import pytest

import lockgate as lg
from lockgate.connectors import CollectSink, SequenceSource
from lockgate.testing import KillWorker, inject_faults

pytestmark = pytest.mark.spark

ENDLESS = 10**15


def killed_job(spark_executor, tmp_path, *, n: int, strategy) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=spark_executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(strategy)
    (
        env.from_source(SequenceSource(0, n, rows_per_second=10_000, batch_size=200))
        .uid("numbers")
        .map(lambda x: x, name="identity")
        .uid("identity")
        .rebalance()
        .sink_to(CollectSink(), name="collect")
        .uid("collect")
    )
    # slot 1 hosts subtask 2 of every operator; its worker is SIGKILLed once a
    # checkpoint of attempt 0 completed
    inject_faults(
        env, KillWorker("identity", record=100, attempt=0, subtask=1, after_checkpoints=1)
    )
    return env


def assert_names_the_killed_slot(text: str) -> None:
    assert "slot 1's Python worker was killed by signal 9 (SIGKILL)" in text, text
    assert f"on {socket.gethostname()}" in text, text
    assert "'identity'" in text and "'collect'" in text, text
    assert "subtask 2 of" in text, text
    assert "Python worker exited unexpectedly" in text, "Spark's own reason, one line"
    assert "at org.apache" not in text and "collectAndServe" not in text, text
    assert "Py4J" not in text, text


@pytest.mark.hang_guard(120)
def test_a_killed_python_worker_fails_the_job_naming_slot_host_pid_operators_and_signal_M_R1(
    spark_executor, tmp_path, caplog
) -> None:
    caplog.set_level(logging.DEBUG, logger="lockgate.executor.spark.executor")
    env = killed_job(spark_executor, tmp_path, n=ENDLESS, strategy=lg.RestartStrategy.none())
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("page-counts")
    error = err.value
    text = str(error)
    assert_names_the_killed_slot(text)
    assert "pid " in text
    assert len(text) < 700, f"a short error, not the JVM's trace ({len(text)} characters)"
    assert error.reason is lg.FailureReason.TASK_LOST
    assert error.subtask == 1
    assert error.operator is not None and "identity" in error.operator
    cause = error.__cause__
    assert cause is not None and type(cause).__name__ == "WorkerLostError"
    assert (cause.slot, cause.signal, cause.host) == (1, 9, socket.gethostname())
    assert isinstance(cause.pid, int) and f"pid {cause.pid} on" in text
    jvm = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("at org.apache.spark" in m for m in jvm), "the JVM's trace is logged at DEBUG"


@pytest.mark.hang_guard(120)
def test_a_killed_worker_is_named_in_the_restart_log_rest_exceptions_and_result_M_R1(
    spark_executor, tmp_path, caplog
) -> None:
    caplog.set_level(logging.INFO)
    env = killed_job(
        spark_executor,
        tmp_path,
        n=20_000,
        strategy=lg.RestartStrategy.fixed_delay(attempts=3, delay=0),
    )
    client = env.execute_async("page-counts")
    result = client.wait(100)
    assert result.status is lg.JobStatus.FINISHED
    assert result.attempts == 2
    [cause] = result.restart_causes
    assert cause.operator is not None and "identity" in cause.operator
    assert cause.error == (
        "WorkerLostError: slot 1's Python worker was killed by signal 9 (SIGKILL)"
    )
    restart_lines = [r.getMessage() for r in caplog.records if "attempt 0 failed" in r.getMessage()]
    assert len(restart_lines) == 1, restart_lines
    assert_names_the_killed_slot(restart_lines[0])
    # what the REST API's /exceptions and the dashboard show
    [entry] = client.exceptions()
    assert entry["operator"] == cause.operator
    assert entry["error"] == cause.error
    assert entry["slot"] == 1 and entry["signal"] == 9
    assert entry["host"] == socket.gethostname() and isinstance(entry["pid"], int)
    assert "at org.apache" not in entry["traceback"], entry["traceback"][:2000]
    assert "slot 1's Python worker" in entry["traceback"]

"""An expected event on Spark (a task that failed and is restarted, a cancelled job
group) gives lockgate's one line, not Spark's Java stack traces (issue 21, item 5); the
traces come back with lockgate's logger at DEBUG."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

from lockgate.executor.spark.session import quiet_expected_spark_logs

JOB = textwrap.dedent(
    """
    import logging, sys
    import lockgate as lg
    from lockgate.connectors.builtin.sequence import SequenceSource
    from lockgate.connectors.builtin.discarding_sink import DiscardingSink
    from lockgate.executor.spark import SparkExecutor
    from lockgate.testing import FailAtRecord, inject_faults

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    env = lg.StreamEnvironment(parallelism=2, executor=SparkExecutor(master="local[2]"))
    env.config.progress_interval_ms = 0
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = sys.argv[1]
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    (
        env.from_source(SequenceSource(0, 20_000, rows_per_second=20_000), name="n").uid("n")
        .map(lambda v: v, name="copy").uid("copy")
        .sink_to(DiscardingSink(), name="out").uid("out")
    )
    inject_faults(env, FailAtRecord("copy", record=3000, attempt=0))
    print(env.execute("quiet").status)
    """
)


@pytest.mark.spark
@pytest.mark.hang_guard(320)  # a fresh Spark JVM in a subprocess
def test_a_restarted_failure_on_spark_logs_one_line_and_no_java_stack_trace(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {**os.environ, "LOCKGATE_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, str(job), str(tmp_path / "cp")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "JobStatus.FINISHED" in done.stdout
    log = done.stderr
    assert "job 'quiet' attempt 0 failed" in log
    assert "runs on Spark, master local[2]" in log
    for noise in ("at org.apache.spark", "Exception in task", "Lost task", "py4j.clientserver"):
        assert noise not in log, f"{noise!r} in the log:\n{log[-3000:]}"


def test_with_lockgate_at_debug_spark_keeps_its_own_levels():
    logger = logging.getLogger("lockgate")
    old = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        assert quiet_expected_spark_logs(object()) is False  # never touches the context
    finally:
        logger.setLevel(old)

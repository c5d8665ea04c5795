"""Flink's INITIALIZING state, on both executors (M-C1, M-T2): a task reports RUNNING
only once its operators are open, their state restored and its restored in-flight
data replayed, and the coordinator triggers no checkpoint before every unfinished
task runs. A task that takes longer to initialize than the checkpoint timeout must
therefore not make the first checkpoint expire (with ``tolerable_failures = 0`` that
failed the job, and after a restore every attempt failed the same way)."""

from __future__ import annotations

import time

import lockgate as lg
from lockgate.checkpoint.types import CheckpointFailureReason
from lockgate.connectors import CollectSink, SequenceSource

#: the map's open takes this long: more than the checkpoint timeout below
OPEN_S = 2.0
TIMEOUT_MS = 1_000


class SlowToOpen(lg.MapFunction):
    """Stands for a sink recovering its transactions or an operator loading a model: its
    ``open`` takes longer than the checkpoint timeout (user code, not a test wait)."""

    def open(self, ctx) -> None:
        time.sleep(OPEN_S)

    def map(self, value):
        return value + 1


def test_m_c1_a_task_slower_to_initialize_than_the_checkpoint_timeout_expires_no_checkpoint(
    executor,
) -> None:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(100)
    env.checkpoint_config.timeout = TIMEOUT_MS
    env.checkpoint_config.tolerable_failures = 0
    env.set_restart_strategy(lg.RestartStrategy.none())
    (
        env.from_source(SequenceSource(0, 4_000, rows_per_second=4_000))
        .uid("numbers")
        .rebalance()
        .map(SlowToOpen(), name="slow to open")
        .uid("slow")
        .sink_to(CollectSink(), name="collect")
        .uid("collect")
    )
    client = env.execute_async("slow to initialize")
    result = client.wait(180)
    assert result.status is lg.JobStatus.FINISHED and result.attempts == 1, (
        "a checkpoint triggered while a task was still initializing expired"
    )
    stats = client.checkpoints()
    expired = [
        c
        for c in stats
        if c.status == "failed" and c.failure_reason == CheckpointFailureReason.TIMEOUT.value
    ]
    assert not expired, f"checkpoints expired: {expired}"
    assert any(c.status == "completed" for c in stats), (
        f"no checkpoint completed once every task ran: {stats}"
    )
    records = sorted(x for part in result.sink_results["collect"] for x in part)
    assert records == list(range(1, 4_001)), "every record exactly once"

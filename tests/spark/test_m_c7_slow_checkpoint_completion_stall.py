"""The Spark stall (issue 17, part 4): a slow checkpoint completion on the driver made
healthy slots look silent ("slot N sent no heartbeat").

The driver's control-server thread received the slots' heartbeats and also handed each
acknowledgement to the checkpoint coordinator inline. The last acknowledgement completes
the checkpoint (M-C5, M-C7): under the coordinator's lock it writes and fsyncs the
metadata, and adds it to the store (durable pointer, retention: M-C8). While that
write waited on a busy disk, no heartbeat was received; past ``heartbeat_timeout_s``
the driver failed the attempt as TASK_LOST and restarted it (M-R1), although every slot
was heartbeating. Now the socket thread only receives and records; events reach the
coordinator on a dispatch thread of their own, in arrival order.

Both tests hold a completion up (an event, with a bounded wait) and require heartbeats
to be heard meanwhile; on the old code the thread that hears them is the one held up.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import lockgate as lg
from conftest import wait_until
from lockgate.checkpoint import fs_storage
from lockgate.connectors import DiscardingSink, SequenceSource
from lockgate.executor.spark.auth import MessageAuth, new_secret
from lockgate.executor.spark.control import (
    ACK,
    FAILED,
    ControlClient,
    ControlEvent,
    ControlServer,
)
from lockgate.job.result import JobStatus


def test_m_c5_m_c7_a_blocked_acknowledgement_does_not_stop_the_driver_hearing_heartbeats() -> None:
    """In-process (no Spark): a ControlServer whose dispatch (the coordinator) blocks on an
    acknowledgement keeps receiving the slot's heartbeats; the events after it still
    arrive, in order, once it returns."""
    secret = new_secret()
    server = ControlServer("127.0.0.1", MessageAuth(secret), 5, num_slots=1)
    entered, release = threading.Event(), threading.Event()
    dispatched: list[str] = []

    def dispatch(event: ControlEvent) -> bool:
        if event.type != ACK:
            return False
        entered.set()  # the coordinator completing the checkpoint: writing its metadata
        release.wait(30)
        dispatched.append(event.payload)
        return True

    server.dispatch = dispatch
    client = ControlClient(
        server.endpoint, MessageAuth(secret), 5, 0, lambda type_, payload: None, heartbeat_s=0.02
    )
    try:
        wait_until(lambda: 0 in server.last_heartbeat, "the first heartbeat arrived")
        client.send(ACK, "checkpoint 1")
        client.send(FAILED, "after the ack")
        assert entered.wait(5), "the acknowledgement never reached the dispatch"
        blocked_at = time.monotonic()
        wait_until(
            lambda: server.last_heartbeat[0] > blocked_at + 0.1,
            "heartbeats were received while the acknowledgement's dispatch was blocked",
        )
        assert server.events.empty(), "an event overtook the blocked acknowledgement"
        release.set()
        wait_until(lambda: not server.events.empty(), "the event after the ack arrived")
        assert dispatched == ["checkpoint 1"]
        event = server.events.get_nowait()
        assert (event.type, event.payload) == (FAILED, "after the ack")
    finally:
        release.set()
        client.close()
        server.close()


@pytest.mark.spark
def test_m_c7_m_c8_a_slow_metadata_write_on_the_driver_is_no_silent_slot(
    spark_executor: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Spark: one checkpoint's metadata write on the driver takes longer than the
    heartbeat timeout (as an fsync behind a busy disk does). The job finishes in its first
    attempt, and the slots' heartbeats were heard during the write."""
    timeout_s = 4.0
    original = fs_storage.FileSystemCheckpointStorage.write_metadata
    writes = {"n": 0}
    heard: dict[str, Any] = {}

    def slow_write_metadata(self: Any, checkpoint_id: int, metadata: dict[str, Any]) -> str:
        writes["n"] += 1
        if writes["n"] == 2:  # the second completion: hold it past the heartbeat timeout
            server = spark_executor.control
            start = time.monotonic()
            wanted = start + timeout_s + 1.0
            deadline = wanted + 5.0
            pause = threading.Event()

            def all_heard() -> bool:
                beats = dict(server.last_heartbeat)
                live = [s for s in beats if s not in server.finished]
                return bool(live) and all(beats[s] >= wanted for s in live)

            while not all_heard() and time.monotonic() < deadline:
                pause.wait(0.05)
            heard["checkpoint"] = checkpoint_id
            heard["during_write"] = all_heard()
            heard["held_s"] = time.monotonic() - start
        return original(self, checkpoint_id, metadata)

    monkeypatch.setattr(
        fs_storage.FileSystemCheckpointStorage, "write_metadata", slow_write_metadata
    )
    monkeypatch.setattr(spark_executor, "heartbeat_timeout_s", timeout_s)
    env = lg.StreamEnvironment(parallelism=2, executor=spark_executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.none())
    (
        env.from_source(
            SequenceSource(0, 10**12, rows_per_second=2_000, batch_size=100), name="numbers"
        )
        .uid("numbers")
        .sink_to(DiscardingSink(), name="sink")
        .uid("sink")
    )
    client = env.execute_async("slow-metadata-write")
    try:
        wait_until(lambda: "during_write" in heard, "the slow metadata write ended", 60.0)
        assert heard["during_write"], (
            f"no heartbeat from every slot reached the driver during the {heard['held_s']:.1f}s "
            "metadata write (the driver then fails healthy slots as silent)"
        )
        slow = heard["checkpoint"]
        wait_until(
            lambda: any(
                c.status == "completed" and c.checkpoint_id > slow for c in client.checkpoints()
            ),
            "a checkpoint completed after the slow one",
            30.0,
        )
        assert not client.done(), "the job ended"
    finally:
        client.cancel()
        result = client.wait(60)
    assert result.status is JobStatus.CANCELED
    assert result.attempts == 1, f"the job restarted: {result.restart_causes}"

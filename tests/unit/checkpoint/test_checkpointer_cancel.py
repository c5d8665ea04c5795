"""A cancelled subtask's checkpointer (issue 18 item 10, M-T3): closing it is bounded even
when an asynchronous write hangs, and a task cancelled but not stopped (user code that
blocks, abandoned by the executor) writes and acknowledges no state afterwards."""

from __future__ import annotations

import threading
import time

from test_subtask_checkpointer import BARRIER, drain, make, wait_for

from conftest import wait_until
from lockgate.core import elements as el


class HungView:
    """A snapshot view whose materialization (the asynchronous write) hangs until ``go``."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()

    def materialize(self) -> dict[str, bool]:
        self.entered.set()
        self.go.wait()
        return {"late": True}


def test_m_t3_close_is_bounded_while_an_async_write_hangs_and_the_late_write_is_dropped() -> None:
    view = HungView()
    cp, op, writer, [channel], storage, responder, log = make(view=view)
    try:
        cp.trigger_source(BARRIER)
        wait_for(view.entered, "the asynchronous part started")
        closer = threading.Thread(
            target=cp.close, kwargs={"timeout_s": 0.3}, daemon=True, name="test closer"
        )
        started = time.monotonic()
        closer.start()
        closer.join(5)
        assert not closer.is_alive(), "close() waited for the hung asynchronous write"
        assert time.monotonic() - started < 2.0
    finally:
        view.go.set()
    # released late: cancelled, it deletes what it wrote and acknowledges nothing
    wait_until(lambda: not cp.in_progress, "the late asynchronous part ended")
    assert responder.acks == [] and responder.declines == []
    assert [p for p in storage.files if p.startswith("chk-1/")] == []


def test_m_t3_a_cancelled_task_snapshots_nothing_more_and_its_write_in_progress_is_dropped() -> (
    None
):
    view = HungView()
    cp, op, writer, [channel], storage, responder, log = make(view=view)
    try:
        cp.trigger_source(BARRIER)
        wait_for(view.entered, "the asynchronous part of checkpoint 1 started")
        cp.cancel_all()  # the task was cancelled (its thread may never stop)
        view.go.set()
        wait_until(lambda: not cp.in_progress, "checkpoint 1's asynchronous part ended")
        drain(channel)
        cp.trigger_source(el.CheckpointBarrier(2, 0))  # the abandoned thread goes on
        assert drain(channel) == [], "a cancelled task forwards no barrier"
        assert cp.in_progress == []
        assert responder.acks == [] and responder.declines == []
        assert not list(storage.files), "a cancelled task writes no state"
    finally:
        view.go.set()
        cp.close()

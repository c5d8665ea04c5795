"""Unaligned barriers over a network channel (M-B7): the barrier goes ahead of the data in
flight on a priority socket; the consumer returns it ahead of that data (which it then
delivers, and which the task persists), and never returns data sent after the barrier
before it (M-E1 for everything else). Real ZeroMQ sockets on 127.0.0.1."""

from __future__ import annotations

import time

import pytest
import zmq

from lockgate.core import elements as el
from lockgate.core.batch import RowBatch, to_rows
from lockgate.executor.spark.auth import MessageAuth, new_secret
from lockgate.executor.spark.data_plane import (
    ZmqInputChannel,
    ZmqOutputChannel,
    bind_pull,
    connect_push,
)

UNALIGNED = el.CheckpointBarrier(1, 0, el.CheckpointOptions(unaligned=True))


@pytest.fixture
def pair():
    context = zmq.Context.instance()
    auth = MessageAuth(new_secret())
    data, data_ep = bind_pull(context, "127.0.0.1")
    prio, prio_ep = bind_pull(context, "127.0.0.1")
    out = ZmqOutputChannel(
        connect_push(context, data_ep),
        auth,
        1,
        "edge 1 0->1",
        priority_socket=connect_push(context, prio_ep),
    )
    inp = ZmqInputChannel(data, auth, 1, "edge 1 0->1", priority_socket=prio)
    yield out, inp
    out.close(False)
    inp.close(False)


def collect(inp: ZmqInputChannel, until, timeout_s: float = 5.0) -> list:
    """Poll (bounded) until ``until(elements)`` holds."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while not until(got):
        assert time.monotonic() < deadline, f"timed out; got {got}"
        e = inp.poll()
        if e is not None:
            got.append(e)
        else:
            inp.socket.poll(10)
    return got


def rows_of(elements) -> list:
    return [r for e in elements if isinstance(e, RowBatch) for r in to_rows(e)]


@pytest.mark.parametrize("consumed_before", [0, 1, 3])
def test_m_b7_the_barrier_overtakes_data_in_flight_and_nothing_sent_after_it_comes_first(
    pair, consumed_before
) -> None:
    out, inp = pair
    for i in range(3):
        out.put(RowBatch([i]))
    early = collect(inp, lambda g: len(g) >= consumed_before)
    out.put_priority(UNALIGNED)
    out.put(RowBatch(["after"]))
    got = early + collect(inp, lambda g: "after" in rows_of(g))
    arrived = [e for e in got if isinstance(e, el.PriorityBarrier) and e.overtaken is not None]
    assert len(arrived) == 1, got
    barrier_at = got.index(arrived[0])
    overtaken_rows = rows_of(arrived[0].overtaken)
    before = rows_of(got[:barrier_at])
    # every record sent before the barrier is processed before it, or overtaken by it
    assert sorted(before + overtaken_rows) == [0, 1, 2]
    # the overtaken records are still delivered, right after the barrier, in order
    after = rows_of(got[barrier_at + 1 :])
    assert after == overtaken_rows + ["after"]


def test_m_e1_without_priority_barriers_the_channel_keeps_its_order(pair) -> None:
    out, inp = pair
    for i in range(5):
        out.put(RowBatch([i]))
    out.put(el.Watermark(3))
    got = collect(inp, lambda g: len(g) == 6)
    assert rows_of(got) == [0, 1, 2, 3, 4] and got[-1] == el.Watermark(3)

"""Unaligned barriers over a network channel (M-B7): the barrier goes ahead of the data in
flight, past the channel's credit; the consumer returns it ahead of that data (which it
then delivers, and which the task persists), and never returns data sent after the
barrier before it (M-E1 for everything else). Two slots' real data planes on 127.0.0.1."""

from __future__ import annotations

import pytest

from lockgate.core import elements as el
from lockgate.core.batch import RowBatch, to_rows
from mux_slots import TwoSlots, collect

UNALIGNED = el.CheckpointBarrier(1, 0, el.CheckpointOptions(unaligned=True))


@pytest.fixture
def pair():
    slots = TwoSlots()
    yield slots.channel()
    slots.close()


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


def test_m_b7_the_barrier_goes_out_while_the_channel_has_no_credit() -> None:
    slots = TwoSlots()
    try:
        out, inp = slots.channel(capacity=1024)
        out.put(RowBatch(["x" * 2000]))  # alone: admitted, and the credit is spent
        assert not out.has_capacity()
        assert out.put_priority(UNALIGNED) == [], "sent at once, without credit"
        big = "x" * 2000
        got = collect(
            inp,
            lambda g: any(isinstance(e, el.PriorityBarrier) for e in g) and big in rows_of(g),
        )
        (barrier,) = [e for e in got if isinstance(e, el.PriorityBarrier)]
        at = got.index(barrier)
        overtaken = rows_of(barrier.overtaken) if barrier.overtaken is not None else []
        # the consumer took the batch before the barrier came, or the barrier overtook it
        # (both were waiting): either way it is delivered once, after any overtaking
        assert sorted(rows_of(got[:at]) + overtaken) == [big]
        assert rows_of(got[at + 1 :]) == overtaken
    finally:
        slots.close()


def test_m_e1_without_priority_barriers_the_channel_keeps_its_order(pair) -> None:
    out, inp = pair
    for i in range(5):
        out.put(RowBatch([i]))
    out.put(el.Watermark(3))
    got = collect(inp, lambda g: len(g) == 6)
    assert rows_of(got) == [0, 1, 2, 3, 4] and got[-1] == el.Watermark(3)

"""RecordWriter: output buffering with a buffer timeout (Flink's network buffers), driven by a
ManualClock. Small writes are held until the timeout, big ones go straight through, control
elements flush first (M-E1), and no element exceeds the buffer's byte bound."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import lockgate as lg
from lockgate.core import elements as el
from lockgate.core.batch import RowBatch, nbytes, scalar_batch, to_rows
from lockgate.core.partitioners import (
    BroadcastPartitioning,
    ForwardPartitioning,
    KeyGroupPartitioning,
    KeySelector,
    RebalancePartitioning,
)
from lockgate.runtime.channels import LocalChannel
from lockgate.runtime.record_writer import RecordWriter


def ints(start: int, n: int):
    return scalar_batch(np.arange(start, start + n, dtype=np.int64))


def drain(channel: LocalChannel) -> list[object]:
    out = []
    while (e := channel.poll()) is not None:
        out.append(e)
    return out


def writer(
    n_channels: int = 1,
    *,
    partitioning=None,
    timeout_ms: float = 100,
    max_rows: int = 1000,
    max_bytes: int = 1 << 20,
    clock=None,
):
    clock = clock or lg.ManualClock()
    channels = [LocalChannel(1 << 24, name=f"out{i}") for i in range(n_channels)]
    spec = partitioning or (ForwardPartitioning() if n_channels == 1 else RebalancePartitioning())
    w = RecordWriter(
        channels,
        spec.create(n_channels, 0),
        clock,
        timeout_ms=timeout_ms,
        max_rows=max_rows,
        max_bytes=max_bytes,
    )
    return w, channels, clock


def test_small_writes_are_held_until_the_buffer_timeout_passes_then_flushed_together() -> None:
    w, [ch], clock = writer(timeout_ms=100)
    w.write(ints(0, 3))
    clock.advance(40)
    w.write(ints(3, 3))
    assert len(ch) == 0, "small batches wait in the buffer"
    clock.advance(59)
    assert w.flush_due(clock.monotonic_ms()) == 100, "the deadline is the oldest part + timeout"
    assert len(ch) == 0
    clock.advance(1)
    assert w.flush_due(clock.monotonic_ms()) is None
    [batch] = drain(ch)
    assert to_rows(batch) == list(range(6)), "one batch holding every buffered record in order"


def test_the_timeout_counts_from_the_oldest_buffered_part_not_the_newest() -> None:
    w, [ch], clock = writer(timeout_ms=100)
    w.write(ints(0, 1))
    for _ in range(9):
        clock.advance(10)
        w.write(ints(0, 1))
    clock.advance(10)
    w.flush_due(clock.monotonic_ms())
    assert len(ch) == 1


def test_a_batch_of_at_least_max_rows_goes_straight_through() -> None:
    w, [ch], _ = writer(max_rows=100)
    big = ints(0, 100)
    w.write(big)
    assert drain(ch) == [big]


def test_buffered_rows_reaching_max_rows_are_flushed_at_once() -> None:
    w, [ch], _ = writer(max_rows=10)
    w.write(ints(0, 6))
    assert len(ch) == 0
    w.write(ints(6, 6))
    [batch] = drain(ch)
    assert to_rows(batch) == list(range(12))


def test_a_full_batch_after_buffered_rows_does_not_overtake_them() -> None:
    w, [ch], _ = writer(max_rows=100)
    w.write(ints(0, 5))
    w.write(ints(5, 200))
    rows = [r for b in drain(ch) for r in to_rows(b)]
    assert rows == list(range(205))


def test_control_elements_flush_buffered_records_first_M_E1() -> None:
    w, [ch], _ = writer()
    w.write(ints(0, 3))
    w.broadcast_event(el.CheckpointBarrier(1, 0))
    w.write(ints(3, 2))
    w.broadcast_event(el.END_OF_PARTITION)
    out = drain(ch)
    assert [to_rows(out[0]), out[1], to_rows(out[2]), out[3]] == [
        [0, 1, 2],
        el.CheckpointBarrier(1, 0),
        [3, 4],
        el.END_OF_PARTITION,
    ]


def test_a_control_element_goes_to_every_channel_after_that_channels_buffer() -> None:
    w, chans, _ = writer(3, partitioning=RebalancePartitioning())
    for i in range(3):
        w.write(ints(i, 1))
    w.broadcast_event(el.Watermark(9))
    for i, ch in enumerate(chans):
        out = drain(ch)
        assert len(out) == 2 and out[1] == el.Watermark(9)
        assert to_rows(out[0]) == [i]


def test_a_zero_timeout_sends_every_batch_at_once() -> None:
    w, [ch], _ = writer(timeout_ms=0)
    w.write(ints(0, 1))
    w.write(ints(1, 1))
    assert [to_rows(b) for b in drain(ch)] == [[0], [1]]


def test_a_batch_above_max_bytes_is_cut_into_pieces_within_the_bound_in_order() -> None:
    max_bytes = 1000
    w, [ch], _ = writer(max_bytes=max_bytes, max_rows=1 << 20)
    w.write(ints(0, 3))
    w.write(ints(3, 1000))  # 8000 bytes
    out = drain(ch)
    assert len(out) > 2
    assert all(nbytes(b) <= max_bytes for b in out), [nbytes(b) for b in out]
    assert [r for b in out for r in to_rows(b)] == list(range(1003))


def test_a_row_batch_above_max_bytes_is_cut_too() -> None:
    max_bytes = 2000
    w, [ch], _ = writer(max_bytes=max_bytes)
    w.write(RowBatch([{"word": f"w{i}", "n": i} for i in range(200)]))
    out = drain(ch)
    assert len(out) > 1
    assert all(nbytes(b) <= max_bytes for b in out)
    assert [r["n"] for b in out for r in to_rows(b)] == list(range(200))


def test_buffered_data_beyond_max_bytes_is_sent_before_it_grows_past_the_bound() -> None:
    w, [ch], _ = writer(max_bytes=1000, max_rows=1 << 20)
    assert nbytes(ints(0, 50)) == 400
    for i in range(5):
        w.write(ints(50 * i, 50))
    w.flush_all()
    out = drain(ch)
    assert all(nbytes(b) <= 1000 for b in out), [nbytes(b) for b in out]
    assert len(out) >= 3
    assert [r for b in out for r in to_rows(b)] == list(range(250))


def test_empty_batches_are_not_sent() -> None:
    w, [ch], clock = writer(timeout_ms=0)
    w.write(ints(0, 0))
    w.write(RowBatch([]))
    w.flush_all()
    assert drain(ch) == []
    assert w.flush_due(clock.monotonic_ms()) is None


def test_key_group_partitioning_routes_each_record_to_the_owner_of_its_key_group() -> None:
    n, mp = 4, 128
    spec = KeyGroupPartitioning(KeySelector(lambda r: r["k"]), mp)
    w, chans, _ = writer(n, partitioning=spec, timeout_ms=0)
    rows = [{"k": f"key-{i % 37}", "i": i} for i in range(500)]
    w.write(RowBatch(rows))
    seen = []
    for idx, ch in enumerate(chans):
        for b in drain(ch):
            for r in to_rows(b):
                assert lg.subtask_for_key(r["k"], n, mp) == idx, r
                seen.append(r)
    assert sorted(seen, key=lambda r: r["i"]) == rows
    per_key_order = {}
    for r in seen:
        per_key_order.setdefault(r["k"], []).append(r["i"])
    assert all(v == sorted(v) for v in per_key_order.values()), "order per key is kept"


def test_broadcast_sends_every_batch_to_every_channel_and_rebalance_to_one_in_turn() -> None:
    wb, bchans, _ = writer(3, partitioning=BroadcastPartitioning(), timeout_ms=0)
    wb.write(ints(0, 2))
    assert [[to_rows(b) for b in drain(c)] for c in bchans] == [[[0, 1]]] * 3
    wr, rchans, _ = writer(3, partitioning=RebalancePartitioning(), timeout_ms=0)
    for i in range(6):
        wr.write(ints(i, 1))
    assert [[r for b in drain(c) for r in to_rows(b)] for c in rchans] == [[0, 3], [1, 4], [2, 5]]


def test_is_available_is_false_while_any_output_channel_is_full() -> None:
    clock = lg.ManualClock()
    full, free = LocalChannel(100), LocalChannel(100)
    full.put(ints(0, 100))
    w = RecordWriter(
        [full, free],
        RebalancePartitioning().create(2, 0),
        clock,
        timeout_ms=0,
        max_rows=10,
        max_bytes=100,
    )
    assert not w.is_available()
    full.poll()
    assert w.is_available()


def test_manual_clock_advances_only_when_told_and_rejects_going_back() -> None:
    clock = lg.ManualClock(start_ms=1000)
    assert clock.monotonic_ms() == 1000 and clock.time_ms() == 1000
    clock.advance(5)
    assert clock.monotonic_ms() == 1005
    with pytest.raises(ValueError):
        clock.advance(-1)


# -- a full channel never blocks the writer (the task keeps running its mailbox) -------------
def test_m_t1_writing_into_a_full_channel_returns_at_once_and_the_data_waits_in_order() -> None:
    """A due buffer that its channel cannot take now waits in the writer: ``write`` and
    ``flush_due`` return at once (a blocked task thread could not run the checkpoint
    trigger in its mailbox, M-T1, M-B7), ``is_available`` is False until the channel
    took it, and nothing is lost, reordered or sent twice."""
    clock = lg.ManualClock()
    ch = LocalChannel(nbytes(ints(0, 100)) * 2, name="small")
    w = RecordWriter(
        [ch],
        ForwardPartitioning().create(1, 0),
        clock,
        timeout_ms=0,
        max_rows=100,
        max_bytes=1 << 20,
    )
    for i in range(5):  # five batches into a channel that holds two: no call blocks
        w.write(ints(i * 100, 100))
    assert len(ch) == 2
    assert not w.is_available(), "the task must not take more input"
    assert ch.backpressured > 0
    got: list[int] = []
    while len(got) < 500:
        element = ch.poll()
        assert element is not None, f"only {len(got)} records arrived"
        got.extend(to_rows(element))
        w.flush_due(clock.monotonic_ms())  # the task's next turn sends what now fits
    assert got == list(range(500))
    assert w.is_available()
    assert ch.blocked_puts == 0, "the task thread never waited inside a put"


def test_an_unaligned_barrier_overtakes_the_batches_waiting_in_the_writer_M_B7() -> None:
    clock = lg.ManualClock()
    ch = LocalChannel(nbytes(ints(0, 100)), name="small")
    w = RecordWriter(
        [ch],
        ForwardPartitioning().create(1, 0),
        clock,
        timeout_ms=0,
        max_rows=100,
        max_bytes=1 << 20,
    )
    for i in range(3):
        w.write(ints(i * 100, 100))
    barrier = el.CheckpointBarrier(7, 0, el.CheckpointOptions(unaligned=True))
    overtaken = w.broadcast_priority(barrier)
    assert [to_rows(b) for _, b in overtaken] == [
        list(range(100)),
        list(range(100, 200)),
        list(range(200, 300)),
    ]
    assert ch.poll() == barrier
    got: list[int] = []  # the overtaken data still follows the barrier, once, in order
    while (element := ch.poll()) is not None:
        got.extend(to_rows(element))
        w.flush_due(clock.monotonic_ms())
    assert got == list(range(300))


def test_buffered_arrow_batches_of_different_schemas_stay_arrow_in_order() -> None:
    """A column that changes type between batches (pandas turns an int column with a
    null into float64) is buffered as it came: Arrow batches of one schema are joined,
    a change of schema starts a new batch, never a fall back to Python rows (which
    re-inferred one type for both: int64 IDs above 2**53 next to floats failed to
    convert at the receiver, on every attempt, and smaller ones became floats)."""
    import pyarrow as pa

    big = 2**53 + 1
    ints = pa.record_batch({"u": pa.array([big, big + 2], pa.int64())})
    floats = pa.record_batch({"u": pa.array([1.5], pa.float64())})
    w, [ch], clock = writer(timeout_ms=100)
    for b in (ints, ints, floats, ints):
        w.write(b)
    clock.advance(100)
    assert w.flush_due(clock.monotonic_ms()) is None
    out = drain(ch)
    assert all(isinstance(b, pa.RecordBatch) for b in out), [type(b) for b in out]
    assert [b.schema.field("u").type for b in out] == [pa.int64(), pa.float64(), pa.int64()]
    assert [v for b in out for v in b.column("u").to_pylist()] == [
        big,
        big + 2,
        big,
        big + 2,
        1.5,
        big,
        big + 2,
    ]


# -- the idle flush: the task's input ran dry ----------------------------------------------
def test_flush_idle_sends_every_part_filled_buffer_before_its_timeout() -> None:
    """``flush_idle`` (the task is about to wait for input) cuts each buffer at once, with
    the clock standing still; buffers keep their order and nothing is sent twice."""
    w, channels, clock = writer(2, timeout_ms=3_600_000, max_rows=1000)
    w.write(ints(0, 4))  # rebalance: one batch to each channel in turn
    w.write(ints(4, 4))
    assert [drain(c) for c in channels] == [[], []], "held: the timeout is an hour"
    w.flush_idle()
    assert [[r for b in drain(c) for r in to_rows(b)] for c in channels] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
    ]
    assert clock.monotonic_ms() == 0
    assert w.flush_due(clock.monotonic_ms()) is None, "no buffer left with a deadline"
    w.flush_idle()
    assert [drain(c) for c in channels] == [[], []], "nothing sent twice"


def test_flush_idle_follows_nagles_rule_and_never_blocks_on_a_full_channel_M_T1() -> None:
    """A partial buffer goes to an in-process channel on an idle flush only when the
    consumer has taken everything before it; the consumer's take wakes the producer
    (its signal), whose next idle flush sends it. Never blocks on a full channel."""
    import threading

    clock = lg.ManualClock()
    ch = LocalChannel(nbytes(ints(0, 10)), name="small")
    woken = threading.Event()
    ch.set_producer_signal(woken)
    ch.put(ints(100, 10))  # the channel is full: its consumer has not taken this yet
    w = RecordWriter(
        [ch],
        ForwardPartitioning().create(1, 0),
        clock,
        timeout_ms=3_600_000,
        max_rows=1000,
        max_bytes=1 << 20,
    )
    w.write(ints(0, 10))
    w.write(ints(10, 5))
    w.flush_idle()  # returns at once; the buffer stays (Nagle's rule)
    assert ch.blocked_puts == 0 and len(ch) == 1
    assert not w.is_available(), "the channel is full"
    assert to_rows(ch.poll()) == list(range(100, 110))
    assert woken.is_set(), "the consumer's take wakes the producer"
    assert w.is_available()
    w.flush_idle()  # the producer's next turn: the channel is empty, the buffer goes
    assert to_rows(ch.poll()) == list(range(15)), "one batch: what waited was joined"
    assert ch.poll() is None and w.is_available()


def test_flush_idle_sends_to_a_channel_without_nagles_rule_at_once() -> None:
    """A channel with no ``takes_idle_flush`` (a test double, a sink's queue) gets every
    idle flush; a network channel's rule (its peer on this host) decides for it."""

    class Plain:
        def __init__(self) -> None:
            self.got: list[Any] = []

        def put(self, element: Any) -> None:
            self.got.append(element)

        def has_capacity(self) -> bool:
            return True

        def set_producer_signal(self, signal: Any) -> None:
            pass

    class Remote(Plain):
        same_host = False

        def takes_idle_flush(self) -> bool:
            return self.same_host

    plain, remote = Plain(), Remote()
    for ch in (plain, remote):
        w = RecordWriter(
            [ch],  # type: ignore[list-item]
            ForwardPartitioning().create(1, 0),
            lg.ManualClock(),
            timeout_ms=100,
            max_rows=1000,
            max_bytes=1 << 20,
        )
        w.write(ints(0, 3))
        w.flush_idle()
        if ch is remote:
            assert remote.got == [], "another host's peer: the buffer timeout rules"
            remote.same_host = True
            w.flush_idle()
    assert [to_rows(b) for b in plain.got] == [[0, 1, 2]]
    assert [to_rows(b) for b in remote.got] == [[0, 1, 2]]

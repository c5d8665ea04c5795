"""LocalChannel: an ordered (M-E1), bounded queue of stream elements between two subtasks."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from conftest import wait_until
from lockgate.core import elements as el
from lockgate.core.batch import RowBatch, nbytes, scalar_batch, to_rows
from lockgate.errors import TaskCancelledError
from lockgate.runtime.channels import LocalChannel


def batch_of(n_ints: int, start: int = 0):
    return scalar_batch(np.arange(start, start + n_ints, dtype=np.int64))


def drain(channel: LocalChannel) -> list[object]:
    out = []
    while (e := channel.poll()) is not None:
        out.append(e)
    return out


def test_a_barrier_never_overtakes_the_records_in_front_of_it_M_E1() -> None:
    ch = LocalChannel(1 << 20)
    sequence = [
        batch_of(3, 0),
        el.Watermark(5),
        batch_of(3, 3),
        el.CheckpointBarrier(1, 10),
        batch_of(3, 6),
        el.StreamStatus.IDLE,
        el.StreamStatus.ACTIVE,
        el.CancellationMarker(2),
        RowBatch(["x"]),
        el.END_OF_PARTITION,
    ]
    for e in sequence:
        ch.put(e)
    assert drain(ch) == sequence
    assert ch.poll() is None


def test_poll_on_an_empty_channel_returns_none_without_blocking() -> None:
    assert LocalChannel(100).poll() is None


def test_queued_bytes_count_data_only_and_return_to_zero_when_drained() -> None:
    ch = LocalChannel(1 << 20)
    b = batch_of(100)
    ch.put(b)
    ch.put(el.Watermark(1))
    assert ch.queued_bytes == nbytes(b)
    assert len(ch) == 2
    drain(ch)
    assert ch.queued_bytes == 0


def test_a_producer_blocks_when_the_next_batch_would_exceed_the_capacity() -> None:
    b = batch_of(100)  # 800 bytes
    ch = LocalChannel(capacity_bytes=nbytes(b) + nbytes(b) // 2)
    ch.put(b)
    done = threading.Event()

    def produce() -> None:
        ch.put(batch_of(100, 100))
        done.set()

    t = threading.Thread(target=produce, name="test producer")
    t.start()
    wait_until(lambda: ch.blocked_puts == 1, "the second put blocks on the full channel")
    assert not done.is_set()
    assert ch.queued_bytes == nbytes(b), "the blocked batch is not queued yet"
    first = ch.poll()
    assert to_rows(first) == list(range(100))
    assert done.wait(5), "taking data must wake the blocked producer"
    t.join(5)
    assert to_rows(ch.poll()) == list(range(100, 200))
    assert ch.peak_bytes <= ch.capacity_bytes


def test_the_queued_data_never_exceeds_the_capacity_under_a_concurrent_producer() -> None:
    ch = LocalChannel(capacity_bytes=4000)
    n_batches = 300

    def produce() -> None:
        for i in range(n_batches):
            ch.put(batch_of(60, i * 60))  # 480 bytes each
        ch.put(el.END_OF_PARTITION)

    t = threading.Thread(target=produce, name="test producer")
    t.start()
    received: list[int] = []
    signal = threading.Event()
    ch.set_consumer_signal(signal)
    while True:
        e = ch.poll()
        if e is None:
            signal.wait(1)
            signal.clear()
            continue
        if e is el.END_OF_PARTITION:
            break
        received.extend(to_rows(e))
    t.join(5)
    assert received == list(range(n_batches * 60)), "order and completeness (M-E1)"
    assert 0 < ch.peak_bytes <= ch.capacity_bytes


def test_control_elements_are_admitted_into_a_full_channel_without_blocking() -> None:
    b = batch_of(100)
    ch = LocalChannel(capacity_bytes=nbytes(b))
    ch.put(b)
    assert not ch.has_capacity()
    ch.put(el.CheckpointBarrier(1, 1))  # would hang the test if it blocked
    ch.put(el.Watermark(3))
    ch.put(el.END_OF_PARTITION)
    assert ch.blocked_puts == 0
    assert drain(ch)[1:] == [el.CheckpointBarrier(1, 1), el.Watermark(3), el.END_OF_PARTITION]


def test_a_batch_larger_than_the_capacity_is_admitted_into_an_empty_channel() -> None:
    big = batch_of(1000)
    ch = LocalChannel(capacity_bytes=100)
    ch.put(big)
    assert ch.poll() is big


def test_has_capacity_reports_whether_data_may_be_put_without_waiting() -> None:
    b = batch_of(10)
    ch = LocalChannel(capacity_bytes=2 * nbytes(b))
    assert ch.has_capacity()
    ch.put(b)
    assert ch.has_capacity()
    ch.put(b)
    assert not ch.has_capacity()
    ch.poll()
    assert ch.has_capacity()


def test_cancel_wakes_a_blocked_producer_with_task_cancelled_error() -> None:
    b = batch_of(100)
    ch = LocalChannel(capacity_bytes=nbytes(b))
    ch.put(b)
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            ch.put(batch_of(100))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=produce, name="test producer")
    t.start()
    wait_until(lambda: ch.blocked_puts == 1, "the producer blocks")
    ch.cancel()
    t.join(5)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], TaskCancelledError)


def test_a_put_after_cancel_raises() -> None:
    ch = LocalChannel(100)
    ch.cancel()
    with pytest.raises(TaskCancelledError):
        ch.put(el.Watermark(1))


def test_the_consumer_signal_is_set_on_every_put_and_the_producer_signal_when_data_leaves() -> None:
    ch = LocalChannel(1 << 20)
    consumer, producer = threading.Event(), threading.Event()
    ch.set_consumer_signal(consumer)
    ch.set_producer_signal(producer)
    ch.put(el.Watermark(1))
    assert consumer.is_set()
    consumer.clear()
    ch.put(batch_of(2))
    assert consumer.is_set()
    ch.poll()  # the watermark frees no space
    assert not producer.is_set()
    ch.poll()
    assert producer.is_set()


def test_cancel_sets_both_signals_so_waiting_tasks_notice() -> None:
    ch = LocalChannel(100)
    consumer, producer = threading.Event(), threading.Event()
    ch.set_consumer_signal(consumer)
    ch.set_producer_signal(producer)
    ch.cancel()
    assert consumer.is_set() and producer.is_set()


def test_a_channel_needs_a_positive_capacity() -> None:
    with pytest.raises(ValueError, match="positive"):
        LocalChannel(0)

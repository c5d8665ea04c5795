"""The multiplexed data plane (issue 43 part 1): one connection per slot pair and
direction, shared by every edge, with credit-based flow control per channel: each
channel stays ordered and bounded (M-E1) and one blocked channel never stalls another.
Unaligned barriers over it: tests/unit/checkpoint/test_network_priority_barrier.py
(M-B7). Real ZeroMQ sockets and receiver threads on 127.0.0.1."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import zmq

from conftest import wait_until
from lockgate.connectors import DiscardingSink
from lockgate.core import elements as el
from lockgate.core.batch import RowBatch
from lockgate.executor.spark.auth import MessageAuth, new_secret
from lockgate.executor.spark.mux import PeerLink, connection_buffer_bytes
from lockgate.executor.spark.mux.link import MAX_CONNECTION_BUFFER, MIN_CONNECTION_BUFFER
from lockgate.executor.spark.mux.output_channel import MAX_BATCHES_IN_FLIGHT
from lockgate.executor.spark.slot_channels import SlotChannels, slot_key
from lockgate.executor.wiring import wire_subtask
from lockgate.runtime.channels import LocalChannel
from mux_slots import TwoSlots, collect


def big(tag: str) -> RowBatch:
    return RowBatch([tag * 600])


def test_a_producer_without_credit_waits_until_the_consumer_takes_data() -> None:
    slots = TwoSlots()
    try:
        out, inp = slots.channel(capacity=1000)
        signal = threading.Event()
        out.set_producer_signal(signal)
        out.put(big("a"))  # about 700 bytes in flight
        assert not out.can_accept(700) and out.refused_puts == 1
        second = threading.Thread(target=out.put, args=(big("b"),))
        second.start()
        wait_until(lambda: out.blocked_puts == 1, "the second put waits for credit")
        assert out.sent == 1 and second.is_alive()
        got = collect(inp, lambda g: len(g) == 1)  # the consumer takes the first batch
        second.join(timeout=10)
        assert not second.is_alive(), "the returned credit did not admit the waiting batch"
        assert signal.is_set(), "the returned credit wakes the producer's task"
        got += collect(inp, lambda g: len(g) == 1)
        assert [b.rows[0][0] for b in got] == ["a", "b"]
        assert out.peak_in_flight <= 1000
    finally:
        slots.close()


def test_the_data_in_flight_of_a_channel_never_exceeds_its_capacity() -> None:
    slots = TwoSlots()
    try:
        out, inp = slots.channel(capacity=4000)
        received: list[Any] = []
        producer = threading.Thread(target=lambda: [out.put(big(str(i % 10))) for i in range(200)])
        producer.start()
        while producer.is_alive() or len(received) < 200:
            received += collect(inp, lambda g: len(g) >= 1, timeout_s=10)
            assert inp.peak_bytes <= 4000
        producer.join()
        assert len(received) == 200
        assert out.peak_in_flight <= 4000 and out.blocked_puts > 0, "the bound was exercised"
    finally:
        slots.close()


def test_a_steady_stream_returns_credit_for_half_the_batches_in_flight_at_a_time() -> None:
    slots = TwoSlots()
    try:
        out, inp = slots.channel()
        for i in range(100):  # small batches, each taken before the next is sent
            out.put(big(str(i % 10)))
            collect(inp, lambda g: len(g) == 1)
        assert out.blocked_puts == 0 and out.asks == 0
        assert inp.credits_sent == 100 // (MAX_BATCHES_IN_FLIGHT // 2)
    finally:
        slots.close()


def test_a_channel_has_at_most_its_batch_credit_in_flight() -> None:
    slots = TwoSlots()
    try:
        out, inp = slots.channel()  # 4 MiB: the bytes never limit here
        for i in range(MAX_BATCHES_IN_FLIGHT):
            assert out.can_accept(700)
            out.put(big(str(i)))
        assert not out.has_capacity() and not out.can_accept(700)
        got = collect(inp, lambda g: len(g) == MAX_BATCHES_IN_FLIGHT)
        assert len(got) == MAX_BATCHES_IN_FLIGHT
        wait_until(out.has_capacity, "the batches' credit comes back once they were taken")
    finally:
        slots.close()


def test_one_blocked_channel_does_not_stall_another_on_the_same_connection() -> None:
    slots = TwoSlots()
    try:
        blocked, _ = slots.channel((1, 0, 1), capacity=1000)  # its consumer never reads
        flowing, inp = slots.channel((2, 0, 1), capacity=1000)
        blocked.put(big("x"))
        assert not blocked.can_accept(700)
        for i in range(20):  # twenty times the capacity, through the same link
            flowing.put(big(str(i % 10)))
            collect(inp, lambda g: len(g) == 1)
        assert flowing.sent == 20
    finally:
        slots.close()


def test_the_consumers_slot_acknowledges_a_channels_last_message() -> None:
    slots = TwoSlots()
    try:
        out, inp = slots.channel()
        out.put(RowBatch([1]))
        assert not out.final_sent
        out.put(el.END_OF_PARTITION)
        assert out.final_sent
        assert out.final_acknowledged.wait(10), "the last message was not acknowledged"
        got = collect(inp, lambda g: len(g) == 2)
        assert got[-1] is el.END_OF_PARTITION
    finally:
        slots.close()


def test_a_message_of_another_attempt_is_dropped() -> None:
    auth = MessageAuth(new_secret())
    old, new = TwoSlots(auth, generation=1), TwoSlots(auth, generation=2)
    try:
        out, _ = old.channel()
        _, inp = new.channel()
        # the old attempt's producer is pointed at the new attempt's slot
        old.forward.close(0)
        out.link = PeerLink(zmq.Context.instance(), new.receivers[1].endpoint, 64 * 1024)
        out.put(RowBatch([1]))
        wait_until(lambda: new.receivers[1].dropped["stale"] == 1, "the stale message is dropped")
        assert inp.poll() is None
        out.link.close(0)
    finally:
        old.close()
        new.close()


@pytest.mark.parametrize(
    ("peers", "expected"),
    [
        (1, MAX_CONNECTION_BUFFER),
        (15, MAX_CONNECTION_BUFFER),
        (63, MAX_CONNECTION_BUFFER),
        (255, 32 * 1024 * 1024 // 510),
        (1023, 32 * 1024 * 1024 // 2046),
        (4000, MIN_CONNECTION_BUFFER),
    ],
)
def test_kernel_buffers_of_a_slot_follow_its_budget_not_its_peers(peers, expected) -> None:
    assert connection_buffer_bytes(peers) == max(MIN_CONNECTION_BUFFER, expected)


def test_a_slot_has_one_socket_and_a_link_per_peer_whatever_the_number_of_edges(
    make_env,
) -> None:
    """p = 8 with three keyed edges and a broadcast: every slot binds one socket and links
    to each of its 7 peers once; the per-channel design opened four sockets per channel
    (data and priority, each end): 4 x 4 x 7 = 112 per slot."""
    p = 8
    env = make_env(parallelism=p)
    s = env.from_collection(list(range(100)))
    keyed = s.key_by(lambda x: x % 7).map(lambda x: x).key_by(lambda x: x % 5)
    keyed = keyed.map(lambda x: x).key_by(lambda x: x % 3).map(lambda x: x)
    keyed.broadcast().map(lambda x: x).sink_to(DiscardingSink())
    plan = env.get_execution_plan("connections")
    network_channels = sum(1 for e in plan.edges.values() for a, b in e.channel_pairs() if a != b)
    assert network_channels == 4 * p * (p - 1)
    auth = MessageAuth(new_secret())
    context: Any = zmq.Context.instance()
    slots = [SlotChannels(plan, i, context, auth, 1) for i in range(p)]
    try:
        addresses: dict[Any, str] = {}
        for sc in slots:
            addresses.update(sc.bind_inputs("127.0.0.1"))
        assert set(addresses) == {slot_key(i) for i in range(p)}, "one address per slot"
        for sc in slots:
            sc.connect(addresses)
            for vertex_id, i in plan.slot_subtasks(sc.slot):
                wire_subtask(plan, plan.vertex(vertex_id), i, sc.out_channel, sc.in_channel)
        for sc in slots:
            assert sorted(sc.links) == [i for i in range(p) if i != sc.slot]
            assert len(sc.receiver.inputs) == 4 * (p - 1)
            assert all(isinstance(c, LocalChannel) for c in sc.local.values())
    finally:
        for sc in slots:
            sc.close(delivered=False)

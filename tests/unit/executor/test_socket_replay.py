"""Issue 18 item 5: an authenticated message captured on the network cannot be
replayed. Every sender numbers its messages under the MAC and receivers drop numbers
they passed; a data message is bound to its channel; a slot's control connection is
the one of its first REGISTER; a registry request runs once.

The captures are real: :class:`zmq_tap.RouterTap` (or a ROUTER in place of a slot) forwards
the traffic of a well-behaved sender and keeps a copy, which an attacker's socket then
sends again."""

from __future__ import annotations

import json
import os
import pickle
import time
from typing import Any

import pytest
import zmq
from test_job_registry import FakeControl

from conftest import wait_until
from lockgate.core.batch import RowBatch
from lockgate.executor import job_registry
from lockgate.executor.job_registry import find_job, register_job, send_command
from lockgate.executor.spark.auth import MessageAuth, new_secret
from lockgate.executor.spark.control import (
    HEARTBEAT,
    REGISTER,
    TRIGGER,
    ControlClient,
    ControlServer,
)
from lockgate.executor.spark.mux import ChannelBrokenError, MuxOutputChannel, PeerLink
from lockgate.executor.spark.mux.frames import DATA, mux_header
from mux_slots import TwoSlots
from zmq_tap import RouterTap


def socket_to(endpoint: str, kind: int) -> Any:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def capture_data(
    auth: MessageAuth, key: tuple[int, int, int], batches: list[RowBatch]
) -> list[Any]:
    """The messages a producer of channel ``key`` sends for ``batches``, captured on the way
    (a ROUTER in place of the consumer's slot)."""
    context: Any = zmq.Context.instance()
    tap = context.socket(zmq.ROUTER)
    tap.setsockopt(zmq.LINGER, 0)
    port = tap.bind_to_random_port("tcp://127.0.0.1")
    link = PeerLink(context, f"tcp://127.0.0.1:{port}", 64 * 1024)
    producer = MuxOutputChannel(key, link, auth, 1, 4 * 1024 * 1024, 16 * 1024 * 1024)
    try:
        messages = []
        for batch in batches:
            producer.put(batch)
            assert tap.poll(10_000), "the producer's message did not reach the tap"
            messages.append(tap.recv_multipart()[1:])  # without the routing id
        return messages
    finally:
        link.close(0)
        tap.close(linger=0)


def drain(slots: TwoSlots, consumer: Any, expected_drops: int) -> list[Any]:
    """Everything the consumer delivers until its slot dropped ``expected_drops`` messages
    and it has nothing more (replays are processed in order after the original)."""
    got: list[Any] = []
    receiver = slots.receivers[1]

    def done() -> bool:
        element = consumer.poll()
        if element is not None:
            got.append(element)
        return element is None and sum(receiver.dropped.values()) >= expected_drops

    wait_until(
        done,
        lambda: (
            f"the consumer's slot drops {expected_drops} messages "
            f"(dropped {dict(receiver.dropped)}, delivered {len(got)})"
        ),
    )
    return got


def test_item5_a_replayed_data_message_is_delivered_once() -> None:
    slots = TwoSlots()
    [frames] = capture_data(slots.auth, (1, 0, 1), [RowBatch([1, 2, 3])])
    _, consumer = slots.channel((1, 0, 1))
    sender = socket_to(slots.receivers[1].endpoint, zmq.DEALER)
    try:
        for _ in range(3):  # the original, then two replays
            sender.send_multipart(frames)
        got = drain(slots, consumer, expected_drops=2)
        assert [g.rows for g in got] == [[1, 2, 3]]
        assert slots.receivers[1].dropped == {"replayed": 2}
    finally:
        sender.close(linger=0)
        slots.close()


def test_item5_a_data_message_of_one_channel_is_refused_on_another() -> None:
    slots = TwoSlots()
    [frames] = capture_data(slots.auth, (1, 0, 1), [RowBatch(["for channel a"])])
    _, consumer = slots.channel((1, 2, 1))
    # the channel is named in the first frame, under the MAC: naming another is tampering
    tampered = [mux_header(DATA, 0, (1, 2, 1), 0), *frames[1:]]
    sender = socket_to(slots.receivers[1].endpoint, zmq.DEALER)
    try:
        sender.send_multipart(frames)  # a channel the slot does not have
        sender.send_multipart(tampered)
        assert drain(slots, consumer, expected_drops=2) == []
        assert slots.receivers[1].dropped == {"unknown channel": 1, "unauthenticated": 1}
    finally:
        sender.close(linger=0)
        slots.close()


def test_a_lost_data_message_breaks_its_channel_instead_of_being_skipped() -> None:
    slots = TwoSlots()
    first, second = capture_data(slots.auth, (1, 0, 1), [RowBatch([1]), RowBatch([2])])
    _, consumer = slots.channel((1, 0, 1))
    sender = socket_to(slots.receivers[1].endpoint, zmq.DEALER)
    try:
        sender.send_multipart(second)  # the first never arrives
        wait_until(lambda: consumer._broken is not None, "the gap breaks the channel")
        with pytest.raises(ChannelBrokenError, match=r"message 1 of its sequence never arrived"):
            consumer.poll()
    finally:
        sender.close(linger=0)
        slots.close()


class Slot:
    """A slot's control client behind a tap, recording what it receives."""

    def __init__(self, server: ControlServer, secret: bytes) -> None:
        self.tap = RouterTap(server.endpoint)
        self.received: list[tuple[str, Any]] = []
        self.client = ControlClient(
            self.tap.endpoint,
            MessageAuth(secret),
            server.generation,
            0,
            on_message=lambda t, p: self.received.append((t, p)),
            heartbeat_s=3600,
        )

    def close(self) -> None:
        self.client.close()
        self.tap.close()


def registered(server: ControlServer, secret: bytes) -> Slot:
    slot = Slot(server, secret)
    slot.client.send(REGISTER, {"endpoints": {}})
    wait_until(lambda: 0 in server.registrations, "the slot registers", timeout_s=10)
    return slot


def captured(slot: Slot, type_: str) -> list[bytes]:
    return next(b for b in slot.tap.to_server if json.loads(b[0])["type"] == type_)


def test_item5_a_replayed_register_is_dropped_and_triggers_still_reach_the_slot() -> None:
    secret = new_secret()
    server = ControlServer("127.0.0.1", MessageAuth(secret), 1, num_slots=1)
    slot = registered(server, secret)
    attacker = socket_to(server.endpoint, zmq.DEALER)
    try:
        attacker.send_multipart(captured(slot, REGISTER))
        # dropped as a replay, or (checked first) as coming from another connection
        wait_until(
            lambda: server.rejected["replayed"] + server.rejected["impersonation"] == 1,
            f"the replayed REGISTER is dropped (rejected: {dict(server.rejected)})",
        )
        assert server.registrations[0] == {"endpoints": {}}
        server.send(0, TRIGGER, "checkpoint 1")
        wait_until(
            lambda: (TRIGGER, "checkpoint 1") in slot.received,
            "the TRIGGER reaches the slot that registered",
            timeout_s=10,
        )
        assert not attacker.poll(0), "the attacker received the slot's TRIGGER"
    finally:
        attacker.close(linger=0)
        slot.close()
        server.close()


def test_item5_a_slot_stays_bound_to_the_connection_of_its_first_register() -> None:
    """Even a message that is not a replay (the test holds the secret) does not move a
    registered slot to another connection."""
    secret = new_secret()
    auth = MessageAuth(secret)
    server = ControlServer("127.0.0.1", auth, 1, num_slots=1)
    slot = registered(server, secret)
    other = socket_to(server.endpoint, zmq.DEALER)
    try:
        header = {"type": HEARTBEAT, "gen": 1, "slot": 0, "chan": "slot", "seq": 1_000_000}
        other.send_multipart(auth.seal(json.dumps(header).encode(), pickle.dumps(None)))
        wait_until(
            lambda: server.rejected["impersonation"] == 1,
            f"the message from another connection is dropped (rejected: {dict(server.rejected)})",
        )
        server.send(0, TRIGGER, "checkpoint 2")
        wait_until(
            lambda: (TRIGGER, "checkpoint 2") in slot.received,
            "the TRIGGER reaches the registered connection",
            timeout_s=10,
        )
        assert not other.poll(0), "the other connection received the slot's TRIGGER"
    finally:
        other.close(linger=0)
        slot.close()
        server.close()


def test_item5_a_replayed_driver_message_reaches_the_slot_once() -> None:
    secret = new_secret()
    server = ControlServer("127.0.0.1", MessageAuth(secret), 1, num_slots=1)
    slot = registered(server, secret)
    try:
        server.send(0, TRIGGER, "checkpoint 3")
        wait_until(lambda: (TRIGGER, "checkpoint 3") in slot.received, "the TRIGGER arrives")
        trigger = next(b for b in slot.tap.to_client if json.loads(b[0])["type"] == TRIGGER)
        slot.tap.replay_to_client(trigger)
        slot.tap.replay_to_client(trigger)
        server.send(0, TRIGGER, "checkpoint 4")  # after the replays on the same connection
        wait_until(lambda: (TRIGGER, "checkpoint 4") in slot.received, "the next TRIGGER arrives")
        assert [p for t, p in slot.received if t == TRIGGER] == ["checkpoint 3", "checkpoint 4"]
    finally:
        slot.close()
        server.close()


def test_item5_a_replayed_registry_command_runs_once(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(job_registry.HOME_ENV, str(tmp_path / "home"))
    control = FakeControl()
    with register_job("job", control) as registration:
        job = find_job("job")
        tap = RouterTap(job.endpoint)
        attacker = socket_to(job.endpoint, zmq.DEALER)
        try:
            via_tap = job_registry.JobInfo(**{**job.__dict__, "endpoint": tap.endpoint})
            assert send_command(via_tap, "savepoint", path=str(tmp_path)) == os.path.join(
                str(tmp_path), "savepoint-1"
            )
            for _ in range(2):
                attacker.send_multipart(tap.to_server[0])
            wait_until(
                lambda: registration.rejected["replayed"] == 2,
                f"both replays are dropped (rejected: {registration.rejected}, "
                f"calls: {control.calls})",
            )
            assert len(control.calls) == 1
        finally:
            attacker.close(linger=0)
            tap.close()


def test_item5_a_registry_request_older_than_the_window_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(job_registry.HOME_ENV, str(tmp_path / "home"))
    control = FakeControl()
    with register_job("job", control) as registration:
        job = find_job("job")
        auth = MessageAuth(job.secret)
        request = {
            "id": "old-request",
            "job": job.job_id,
            "command": "cancel",
            "args": {},
            "sent_at": time.time() - 2 * job_registry.REQUEST_WINDOW_S,
        }
        client = socket_to(job.endpoint, zmq.DEALER)
        try:
            client.send_multipart(auth.seal(json.dumps(request).encode()))
            assert client.poll(10_000), "no reply to the stale request"
            (payload,) = auth.open(client.recv_multipart(), 1)
            reply = json.loads(bytes(payload))
            assert reply["ok"] is False and "not sent within 60s" in reply["error"]
            assert control.calls == [] and registration.rejected["stale"] == 1
        finally:
            client.close(linger=0)

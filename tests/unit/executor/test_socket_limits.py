"""Issue 18 item 4: every socket lockgate receives on bounds the size of a frame
(``ZMQ_MAXMSGSIZE``), so an unauthenticated peer cannot make a process allocate what
it likes; a legitimate sender checks the bound itself and fails loudly instead.

The proof that a bound holds: a frame over it never reaches lockgate (ZeroMQ drops the
connection before storing it), so the receiver does not even count it as a rejected
message, and the socket goes on serving well-behaved peers."""

from __future__ import annotations

import os
from typing import Any

import pytest
import zmq
from test_job_registry import FakeControl

from conftest import wait_until
from lockgate.core.batch import RowBatch
from lockgate.core.execution_config import ExecutionConfig, MiB
from lockgate.executor import job_registry
from lockgate.executor.job_registry import find_job, register_job, send_command
from lockgate.executor.spark import limits
from lockgate.executor.spark.auth import MessageAuth, new_secret
from lockgate.executor.spark.control import REGISTER, ControlClient, ControlServer
from mux_slots import TwoSlots, collect

#: a frame far over every bound under test (the issue's attack used 300 MB)
BIG = 8 * MiB


def big_message() -> list[bytes]:
    return [b"h" * 25, b"x" * BIG, b"m" * 16]


def push(endpoint: str, frames: list[bytes], kind: int = zmq.PUSH) -> Any:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send_multipart(frames)
    return sock


def test_data_message_limit_follows_the_channel_capacity() -> None:
    small = ExecutionConfig(buffer_max_bytes=MiB, channel_capacity_bytes=2 * MiB)
    large = ExecutionConfig(buffer_max_bytes=MiB, channel_capacity_bytes=32 * MiB)
    assert limits.data_message_limit(small) == 4 * 2 * MiB + MiB
    assert limits.data_message_limit(large) == 4 * 32 * MiB + MiB
    assert limits.data_message_limit() == limits.data_message_limit(ExecutionConfig())


def test_item4_a_slot_socket_disconnects_an_oversize_frame_and_keeps_delivering() -> None:
    slots = TwoSlots(max_message_bytes=64 * 1024)
    receiver = slots.receivers[1]
    assert receiver._socket.getsockopt(zmq.MAXMSGSIZE) == 64 * 1024
    attacker = push(receiver.endpoint, big_message(), zmq.DEALER)
    try:
        wait_until(
            lambda: receiver.disconnects.disconnects >= 1,
            "the slot's socket disconnects the oversize sender",
            timeout_s=10,
        )
        producer, consumer = slots.channel()
        producer.put(RowBatch([1, 2, 3]))
        got = collect(consumer, lambda g: len(g) == 1)
        assert [g.rows for g in got] == [[1, 2, 3]]
        assert not slots.receivers[1].dropped, "the oversize frame reached the receiver"
    finally:
        attacker.close(linger=0)
        slots.close()


def test_item4_a_producer_refuses_to_send_a_message_over_the_consumers_bound() -> None:
    slots = TwoSlots(max_message_bytes=4096)
    producer, _ = slots.channel((3, 0, 1))
    try:
        with pytest.raises(
            limits.MessageTooLargeError, match=r"channel \(3, 0, 1\) is .*channel_capacity_bytes"
        ):
            producer.put(RowBatch(["y" * 10_000]))
        assert producer.sent == 0
    finally:
        slots.close()


def test_item4_the_control_server_disconnects_an_oversize_frame_and_keeps_serving(
    monkeypatch,
) -> None:
    monkeypatch.setattr("lockgate.executor.spark.control.CONTROL_MESSAGE_LIMIT", 1 * MiB)
    secret = new_secret()
    server = ControlServer("127.0.0.1", MessageAuth(secret), 1, num_slots=1)
    client = None
    attacker = push(server.endpoint, big_message(), zmq.DEALER)
    try:
        wait_until(
            lambda: server._disconnects.disconnects >= 1,
            "the control server disconnects the oversize sender",
            timeout_s=10,
        )
        client = ControlClient(
            server.endpoint, MessageAuth(secret), 1, 0, on_message=lambda t, p: None
        )
        client.send(REGISTER, {"endpoints": {}})
        wait_until(lambda: 0 in server.registrations, "the slot registers")
        assert server.rejected == {}, "the oversize frame reached the control server"
    finally:
        attacker.close(linger=0)
        if client is not None:
            client.close()
        server.close()


def test_item4_the_job_registry_disconnects_an_oversize_request_and_keeps_serving(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv(job_registry.HOME_ENV, str(tmp_path / "home"))
    control = FakeControl()
    with register_job("job", control) as registration:
        job = find_job("job")
        attacker = push(job.endpoint, [b"x" * BIG, b"m" * 16], zmq.DEALER)
        try:
            server: Any = registration._server
            wait_until(
                lambda: server._disconnects.disconnects >= 1,
                "the job's control server disconnects the oversize sender",
                timeout_s=10,
            )
            assert send_command(job, "savepoint", path=str(tmp_path)) == os.path.join(
                str(tmp_path), "savepoint-1"
            )
            assert registration.rejected == {}, "the oversize request reached the job"
        finally:
            attacker.close(linger=0)

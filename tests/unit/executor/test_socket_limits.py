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
from lockgate.executor.spark.data_plane import (
    ZmqInputChannel,
    ZmqOutputChannel,
    bind_pull,
    connect_push,
)

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


def test_item4_a_data_pull_disconnects_an_oversize_frame_and_keeps_delivering() -> None:
    context: Any = zmq.Context.instance()
    auth = MessageAuth(new_secret())
    pull, endpoint = bind_pull(context, "127.0.0.1", 64 * 1024)
    assert pull.getsockopt(zmq.MAXMSGSIZE) == 64 * 1024
    consumer = ZmqInputChannel(pull, auth, 1, "ch")
    monitor = pull.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    attacker = push(endpoint, big_message())
    producer = None
    try:
        assert monitor.poll(10_000), "the PULL socket did not disconnect the oversize sender"
        producer = ZmqOutputChannel(
            connect_push(context, endpoint), auth, 1, "ch", max_message_bytes=64 * 1024
        )
        producer.put(RowBatch([1, 2, 3]))
        got: list[Any] = []
        wait_until(
            lambda: bool(got.append(consumer.poll()) or [g for g in got if g]),
            "the well-behaved producer's batch arrives after the oversize frame",
        )
        assert [g.rows for g in got if g] == [[1, 2, 3]]
        assert consumer.dropped == 0, "the oversize frame reached the channel"
    finally:
        attacker.close(linger=0)
        pull.disable_monitor()
        monitor.close(linger=0)
        if producer is not None:
            producer.close(False)
        consumer.close(False)


def test_item4_a_producer_refuses_to_send_a_message_over_the_consumers_bound() -> None:
    context: Any = zmq.Context.instance()
    pull, endpoint = bind_pull(context, "127.0.0.1", 4096)
    producer = ZmqOutputChannel(
        connect_push(context, endpoint),
        MessageAuth(new_secret()),
        1,
        "edge 3 0->1",
        max_message_bytes=4096,
    )
    try:
        with pytest.raises(
            limits.MessageTooLargeError, match=r"channel edge 3 0->1 is .*channel_capacity_bytes"
        ):
            producer.put(RowBatch(["y" * 10_000]))
        assert producer.sent == 0
    finally:
        producer.close(False)
        pull.close(linger=0)


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

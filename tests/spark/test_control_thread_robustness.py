"""A slot's control thread keeps heartbeating whatever it is asked to send, and its
wake-up pipe is safe against late wakers (issue 17, part 4: what could silence a slot).

In-process: a driver's ControlServer and a slot's ControlClient in the test process; no
Spark, no sleeps (bounded polling)."""

from __future__ import annotations

import os
import threading
from typing import Any

from conftest import wait_until
from lockgate.executor.spark.auth import MessageAuth, new_secret
from lockgate.executor.spark.control import ACK, ControlClient, ControlServer
from lockgate.executor.spark.signals import PipeWaker


def test_a_message_that_cannot_be_pickled_is_dropped_and_the_heartbeats_go_on() -> None:
    secret = new_secret()
    server = ControlServer("127.0.0.1", MessageAuth(secret), 3, num_slots=1)
    client = ControlClient(
        server.endpoint, MessageAuth(secret), 3, 0, lambda type_, payload: None, heartbeat_s=0.02
    )
    try:
        wait_until(lambda: 0 in server.last_heartbeat, "the first heartbeat arrived")
        lock = threading.Lock()  # pickle refuses a lock
        client.send(ACK, {"unpicklable": lock})
        wait_until(lambda: client.send_errors == 1, "the bad message was dropped")
        after = server.last_heartbeat[0]
        wait_until(
            lambda: server.last_heartbeat[0] > after, "a heartbeat arrived after the bad message"
        )
        client.send(ACK, "fine")
        wait_until(
            lambda: any(True for _ in iter_events(server, ACK)),
            "a good message after the bad one arrived",
        )
    finally:
        client.close()
        server.close()


def iter_events(server: ControlServer, type_: str) -> Any:
    drained = []
    while not server.events.empty():
        drained.append(server.events.get_nowait())
    for e in drained:
        server.events.put(e)
    return (e for e in drained if e.type == type_)


def test_waking_a_closed_pipe_waker_writes_nowhere_even_when_its_fd_numbers_are_reused() -> None:
    waker = PipeWaker()
    old = (waker.fd, waker._w)
    waker.close()
    r, w = os.pipe()  # the lowest free numbers: most likely the waker's old ones
    try:
        os.set_blocking(r, False)
        waker.wake()  # a late waker: must not write into the new pipe
        waker.close()  # idempotent
        try:
            data = os.read(r, 16)
        except BlockingIOError:
            data = b""
        assert data == b"", f"a closed waker wrote into fd {w} (its old fds were {old})"
    finally:
        os.close(r)
        os.close(w)

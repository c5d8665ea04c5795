"""SocketArrivalWatch: a reader's sockets wake the task when data arrives, instead of the
task polling on an interval (issue 42's "wake on arrival"). Real socket pairs; every wait
is bounded, none is a sleep."""

from __future__ import annotations

import socket
import threading

import pytest

from lockgate.connectors import arrival_watch
from lockgate.connectors.arrival_watch import SocketArrivalWatch


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def watch():
    w = SocketArrivalWatch("test-arrival")
    yield w
    w.close()


def test_an_armed_watch_wakes_once_when_data_arrives(pair, watch) -> None:
    reader, writer = pair
    woke = threading.Event()
    assert watch.arm([reader], woke.set)
    assert not woke.wait(0.05), "nothing arrived yet: no wake"
    writer.send(b"x")
    assert woke.wait(10), "the watch did not wake the task within 10 s of data arriving"
    assert watch.wakes == 1
    woke.clear()
    writer.send(b"y")  # unread data, but the arming was used up: no second wake
    assert not woke.wait(0.05)
    assert watch.wakes == 1


def test_arming_with_data_already_there_wakes_at_once_and_rearming_wakes_again(pair, watch) -> None:
    reader, writer = pair
    writer.send(b"x")
    woke = threading.Event()
    assert watch.arm([reader], woke.set)
    assert woke.wait(10)
    reader.recv(10)  # the task reads what arrived
    woke.clear()
    assert watch.arm([reader], woke.set)
    writer.send(b"z")
    assert woke.wait(10), "the second arming was not woken"
    assert watch.wakes == 2


def test_a_disarmed_watch_does_not_wake(pair, watch) -> None:
    reader, writer = pair
    woke = threading.Event()
    watch.arm([reader], woke.set)
    watch.disarm()
    writer.send(b"x")
    assert not woke.wait(0.1)
    assert watch.wakes == 0


def test_arming_other_sockets_watches_them_at_once(watch, monkeypatch) -> None:
    """A new socket set interrupts the select in progress: with the select's bound an
    hour, only the interruption can make the second socket's data wake within 10 s."""
    monkeypatch.setattr(arrival_watch, "SELECT_BOUND_S", 3600.0)
    a1, b1 = socket.socketpair()
    a2, b2 = socket.socketpair()
    try:
        woke = threading.Event()
        watch.arm([a1], woke.set)
        watch.arm([a2], woke.set)
        b2.send(b"x")
        assert woke.wait(10)
    finally:
        for s in (a1, b1, a2, b2):
            s.close()


def test_a_socket_closed_while_watched_counts_as_readable(watch) -> None:
    a, b = socket.socketpair()
    woke = threading.Event()
    watch.arm([a], woke.set)
    a.close()
    b.close()
    watch.arm([a], woke.set)  # the reader armed it again before seeing it closed
    assert woke.wait(10), "a closed socket must wake the reader, which then finds out"


def test_nothing_to_watch_or_a_closed_watch_arms_nothing(pair) -> None:
    w = SocketArrivalWatch("test-arrival")
    assert not w.arm([], lambda: None)
    w.close()
    assert not w.arm([pair[0]], lambda: None)

"""Network channels between slots: one ZeroMQ PUSH/PULL pair per channel.

The consumer binds a PULL socket, the producer connects a PUSH socket. Both
ends have a small high-water mark (``HWM`` messages, each at most the output
buffer size), so a slow consumer blocks its producer after a few MiB instead
of queueing gigabytes (SPARK_NOTES.md). Elements keep their order (one
socket per channel). Every message is authenticated and carries the
attempt's generation; messages failing either check are dropped and logged.
Sockets are used by one thread at a time: created in the slot's main thread,
then handed to the task thread that owns the channel end.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import zmq

from ...errors import TaskCancelledError
from ...runtime.elements import StreamElement
from .auth import AuthenticationError, MalformedMessageError, MessageAuth
from .wire import StaleMessageError, decode, encode

log = logging.getLogger(__name__)

HWM = 4
#: how often a blocked producer re-checks for cancellation (ms)
_SEND_POLL_MS = 100


class ZmqOutputChannel:
    """Producer end of a network channel."""

    #: the task re-checks availability this often while this channel is full (ms)
    wake_interval_ms = 2.0

    def __init__(self, socket: Any, auth: MessageAuth, generation: int, name: str) -> None:
        self.socket = socket
        self.auth = auth
        self.generation = generation
        self.name = name
        self._cancelled = False
        self.blocked_puts = 0

    def put(self, element: StreamElement) -> None:
        header, body = encode(element, self.generation)
        frames = self.auth.seal(header, body)
        while True:
            if self._cancelled:
                raise TaskCancelledError(f"{self.name} was cancelled")
            try:
                self.socket.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                return
            except zmq.Again:
                self.blocked_puts += 1
                self.socket.poll(_SEND_POLL_MS, zmq.POLLOUT)

    def put_priority(self, element: StreamElement) -> list[StreamElement]:
        """Messages already handed to ZeroMQ cannot be overtaken: send in order."""
        self.put(element)
        return []

    def has_capacity(self) -> bool:
        return bool(self.socket.poll(0, zmq.POLLOUT))

    def set_producer_signal(self, signal: threading.Event) -> None:
        pass

    def cancel(self) -> None:
        self._cancelled = True

    def close(self, delivered: bool) -> None:
        """Close the socket; after a normal end wait (bounded) until queued messages left."""
        self.socket.close(linger=10_000 if delivered else 0)


class ZmqInputChannel:
    """Consumer end of a network channel."""

    def __init__(self, socket: Any, auth: MessageAuth, generation: int, name: str) -> None:
        self.socket = socket
        self.auth = auth
        self.generation = generation
        self.name = name
        self.dropped = 0
        self._signal: Any = None

    def poll(self) -> StreamElement | None:
        while True:
            try:
                frames = self.socket.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return None
            try:
                header, body = self.auth.open([f.buffer for f in frames], 2)
                return decode(header, body, self.generation)
            except (AuthenticationError, MalformedMessageError, StaleMessageError, ValueError) as e:
                self.dropped += 1
                log.warning("%s: dropped a data message: %s", self.name, e)

    def set_consumer_signal(self, signal: threading.Event) -> None:
        self._signal = signal  # a SocketSignal polling this channel's socket

    def pause(self) -> None:
        """The channel is blocked (alignment): stop waking the task for its messages,
        which wait in the socket (bounded by the high-water mark)."""
        if hasattr(self._signal, "unwatch"):
            self._signal.unwatch(self.socket)

    def resume(self) -> None:
        if hasattr(self._signal, "watch"):
            self._signal.watch(self.socket)

    def cancel(self) -> None:
        pass

    def close(self, delivered: bool) -> None:
        self.socket.close(linger=0)


def bind_pull(context: Any, host: str) -> tuple[Any, str]:
    sock = context.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port(f"tcp://{host}")
    return sock, f"tcp://{host}:{port}"


def connect_push(context: Any, endpoint: str) -> Any:
    sock = context.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IMMEDIATE, 1)
    sock.connect(endpoint)
    return sock

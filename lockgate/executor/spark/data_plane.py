"""Network channels between slots: one ZeroMQ PUSH/PULL pair per channel.

The consumer binds a PULL socket, the producer connects a PUSH socket. Both
ends have a small high-water mark (``HWM`` messages, each at most the output
buffer size), so a slow consumer blocks its producer after a few MiB instead
of queueing gigabytes (SPARK_NOTES.md). Elements keep their order (one
socket per channel). Every message is authenticated (under the channel's
name too: a message of one channel does not verify on another), carries the
attempt's generation and a per-socket sequence number; messages failing a check,
and replays (a number not above the last one received), are dropped and logged.
PULL sockets disconnect a peer sending a frame over ``limits.data_message_limit``
(from the channel capacity); a producer fails its task rather than send one.
Sockets are used by one thread at a time: created in the slot's main thread,
then handed to the task thread that owns the channel end.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

import zmq

from ...core.elements import PriorityBarrier, StreamElement
from ...errors import TaskCancelledError
from .auth import (
    AuthenticationError,
    MalformedMessageError,
    MessageAuth,
    ReplayedMessageError,
    SequenceGuard,
)
from .limits import bound, check_size, data_message_limit
from .wire import StaleMessageError, decode_marked, encode, sequence_number

log = logging.getLogger(__name__)

HWM = 4
#: kernel socket buffer of each end (bytes). The HWM counts messages, and Linux grows
#: TCP buffers to several MiB on its own: a barrier behind them would wait for every
#: small batch in flight. Fixed buffers keep the bytes in flight bounded.
SOCKET_BUFFER = int(os.environ.get("LOCKGATE_SOCKET_BUFFER", 256 * 1024))
#: how often a blocked producer re-checks for cancellation (ms)
_SEND_POLL_MS = 100


class ZmqOutputChannel:
    """Producer end of a network channel."""

    #: the task re-checks availability this often while this channel is full (ms)
    wake_interval_ms = 2.0

    def __init__(
        self,
        socket: Any,
        auth: MessageAuth,
        generation: int,
        name: str,
        priority_socket: Any = None,
        max_message_bytes: int | None = None,
        same_host: bool = False,
    ) -> None:
        self.socket = socket
        #: the consumer runs on this host (an idle flush is sent at once, see
        #: :meth:`takes_idle_flush`)
        self.same_host = same_host
        self.priority_socket = priority_socket
        self.auth = auth
        self.generation = generation
        self.name = name
        #: the consumer's bound on one frame (its PULL sockets disconnect larger ones)
        self.max_message_bytes = (
            data_message_limit() if max_message_bytes is None else max_message_bytes
        )
        self._context = channel_context(name, priority=False)
        self._priority_context = channel_context(name, priority=True)
        #: the sequence number of the last message sent on each socket
        self._seq = 0
        self._priority_seq = 0
        self._cancelled = False
        self.blocked_puts = 0
        #: messages handed to the data socket so far
        self.sent = 0
        #: checkpoint id of an unaligned barrier the next data message must follow
        self._mark = 0

    def put(self, element: StreamElement) -> None:
        header, body = encode(element, self.generation, self._mark, self._seq + 1)
        self._check(body)
        frames = self.auth.seal(header, body, context=self._context)
        self._send(self.socket, frames)
        self._seq += 1
        self._mark = 0
        self.sent += 1

    def _send(self, socket: Any, frames: list[Any]) -> None:
        while True:
            if self._cancelled:
                raise TaskCancelledError(f"{self.name} was cancelled")
            try:
                socket.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                return
            except zmq.Again:
                self.blocked_puts += 1
                socket.poll(_SEND_POLL_MS, zmq.POLLOUT)

    def put_priority(self, element: StreamElement) -> list[StreamElement]:
        """Send an unaligned barrier ahead of the data in flight (M-B7): on the channel's
        priority socket, with the number of data messages sent before it. The consumer
        announces it at once and delivers it in order after that many messages; the
        data in between is persisted by the consumer (input channel state), so nothing
        is overtaken here."""
        if self.priority_socket is None:
            self.put(element)
            return []
        header, body = encode(
            Prioritized(element, self.sent), self.generation, 0, self._priority_seq + 1
        )
        self._check(body)
        self._send(
            self.priority_socket, self.auth.seal(header, body, context=self._priority_context)
        )
        self._priority_seq += 1
        # sockets do not order against each other: the next data message says that it
        # comes after this barrier, so the consumer never processes it before the barrier
        self._mark = getattr(element, "checkpoint_id", 0)
        return []

    def _check(self, body: Any) -> None:
        check_size(
            f"a data message of channel {self.name}",
            memoryview(body).nbytes,
            self.max_message_bytes,
            "raise ExecutionConfig.channel_capacity_bytes (the bound is "
            "limits.DATA_HEADROOM times it) or emit smaller records",
        )

    def has_capacity(self) -> bool:
        return bool(self.socket.poll(0, zmq.POLLOUT))

    def takes_idle_flush(self) -> bool:
        """Whether the producer's idle flush sends this channel a partial buffer: only
        when the consumer is on this host. Nothing tells a producer when its peer took a
        message (Nagle's rule needs that), and over a slow link between hosts one small
        message per pause of the producer costs more bandwidth than the latency it saves
        (a 256 kbit/s link stopped checkpoints); there the buffer timeout rules."""
        return self.same_host

    def set_producer_signal(self, signal: threading.Event) -> None:
        pass

    def cancel(self) -> None:
        self._cancelled = True

    def close(self, delivered: bool) -> None:
        """Close the socket; after a normal end wait (bounded) until queued messages left."""
        self.socket.close(linger=10_000 if delivered else 0)
        if self.priority_socket is not None:
            self.priority_socket.close(linger=10_000 if delivered else 0)


@dataclass(frozen=True)
class Prioritized:
    """An element sent on a channel's priority socket: it belongs after the first
    ``after`` messages of the data socket."""

    element: Any
    after: int


class ZmqInputChannel:
    """Consumer end of a network channel.

    Unaligned barriers (M-B7) come on the channel's priority socket, with the number
    of data messages sent before them. The channel then reads those messages ahead
    (they are in flight: bounded by the high-water marks and socket buffers) and
    returns ``PriorityBarrier(barrier, overtaken)``: the barrier, ahead of the data it
    overtook, which the channel delivers next and which the task persists as input
    channel state. While some of that data is still on its way the channel returns an
    announcement, ``PriorityBarrier(barrier)``, first. A data message marked as
    following a priority barrier is held back until that barrier was returned, so
    nothing sent after a barrier is ever processed before it."""

    def __init__(
        self,
        socket: Any,
        auth: MessageAuth,
        generation: int,
        name: str,
        priority_socket: Any = None,
    ) -> None:
        self.socket = socket
        self.priority_socket = priority_socket
        self.auth = auth
        self.generation = generation
        self.name = name
        self.dropped = 0
        #: replayed messages dropped (also counted in ``dropped``)
        self.replayed = 0
        self._contexts = {id(socket): channel_context(name, priority=False)}
        if priority_socket is not None:
            self._contexts[id(priority_socket)] = channel_context(name, priority=True)
        self._sequences = SequenceGuard()
        self._signal: Any = None
        #: data messages read from the socket so far (delivered or read ahead)
        self.read = 0
        self._ahead: deque[Any] = deque()
        self._held: Prioritized | None = None
        self._announced = False
        #: a data message that must wait for the priority barrier it is marked with
        self._waiting: tuple[Any, int] | None = None
        self._last_priority = 0

    def poll(self) -> StreamElement | None:
        if self._held is None and self.priority_socket is not None:
            received = self._recv(self.priority_socket)
            if isinstance(received, Prioritized):
                self._held = received
                self._announced = False
        if self._held is not None:
            result = self._advance_held()
            if result is not None:
                return result
            if self._held is not None:
                return None  # in-flight data of the held barrier is still on its way
        if self._ahead:
            element: StreamElement = self._ahead.popleft()
            return element
        if self._waiting is not None:
            return self._deliver_waiting()
        received_data = self._recv_marked(self.socket)
        if received_data is None:
            return None
        element, mark = received_data
        self.read += 1
        if mark and mark > self._last_priority:
            self._waiting = (element, mark)
            return self._deliver_waiting()
        return element

    def _advance_held(self) -> StreamElement | None:
        """Read ahead toward the held barrier; return it when everything in front of it
        was read (or its announcement, once)."""
        held = self._held
        assert held is not None
        while self.read < held.after:
            received = self._recv_marked(self.socket)
            if received is None:
                break
            self._ahead.append(received[0])
            self.read += 1
        if self.read >= held.after:
            self._held = None
            self._last_priority = max(self._last_priority, held.element.checkpoint_id)
            overtaken = tuple(self._ahead)
            return PriorityBarrier(held.element, overtaken)
        if not self._announced:
            self._announced = True
            return PriorityBarrier(held.element)
        return None

    def _deliver_waiting(self) -> StreamElement | None:
        """A data message marked as following priority barrier ``mark``: that barrier was
        sent before it, so it is (about to be) on the priority socket."""
        assert self._waiting is not None
        element, mark = self._waiting
        if mark <= self._last_priority:
            self._waiting = None
            return element
        if self._held is None and self.priority_socket is not None:
            received = self._recv(self.priority_socket)
            if isinstance(received, Prioritized):
                self._held = received
                self._announced = False
                return self._advance_held()  # the barrier, or its announcement
        return None

    def _recv(self, socket: Any) -> Any:
        received = self._recv_marked(socket)
        return None if received is None else received[0]

    def _recv_marked(self, socket: Any) -> tuple[Any, int] | None:
        while True:
            try:
                frames = socket.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return None
            context = self._contexts[id(socket)]
            try:
                header, body = self.auth.open([f.buffer for f in frames], 2, context=context)
                self._sequences.check(context, sequence_number(header))
                return decode_marked(header, body, self.generation)
            except ReplayedMessageError as e:
                self.dropped += 1
                self.replayed += 1
                log.warning("%s: dropped a replayed data message: %s", self.name, e)
            except (AuthenticationError, MalformedMessageError, StaleMessageError, ValueError) as e:
                self.dropped += 1
                log.warning("%s: dropped a data message: %s", self.name, e)

    def set_consumer_signal(self, signal: threading.Event) -> None:
        self._signal = signal  # a SocketSignal polling this channel's socket

    def pause(self) -> None:
        """The channel is blocked (alignment): stop waking the task for its messages,
        which wait in the socket (bounded by the high-water mark)."""
        if hasattr(self._signal, "unwatch"):
            for socket in self._sockets():
                self._signal.unwatch(socket)

    def resume(self) -> None:
        if hasattr(self._signal, "watch"):
            for socket in self._sockets():
                self._signal.watch(socket)

    def _sockets(self) -> list[Any]:
        return [s for s in (self.socket, self.priority_socket) if s is not None]

    def cancel(self) -> None:
        pass

    def close(self, delivered: bool) -> None:
        self.socket.close(linger=0)
        if self.priority_socket is not None:
            self.priority_socket.close(linger=0)


def channel_context(name: str, priority: bool) -> bytes:
    """What a channel's MACs cover besides the message: its name and socket."""
    return f"data|{name}|{'priority' if priority else 'data'}".encode()


def bind_pull(context: Any, host: str, max_message_bytes: int | None = None) -> tuple[Any, str]:
    """A PULL socket bound to a random port of ``host`` and its endpoint; a peer sending
    a frame over ``max_message_bytes`` (default: ``data_message_limit()``) is
    disconnected before the frame is stored."""
    sock = context.socket(zmq.PULL)
    bound(sock, data_message_limit() if max_message_bytes is None else max_message_bytes)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.RCVBUF, SOCKET_BUFFER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port(f"tcp://{host}")
    return sock, f"tcp://{host}:{port}"


def connect_push(context: Any, endpoint: str) -> Any:
    sock = context.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.SNDBUF, SOCKET_BUFFER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IMMEDIATE, 1)
    sock.connect(endpoint)
    return sock

"""A slot's connection to one peer slot: a DEALER socket shared by the slot's threads.

Every message this slot sends to the peer goes through its link: the data of every
channel from here to there and the credits returned for every channel from there to
here. The DEALER queues without a high-water mark because credits bound what is queued
(the data of a channel never exceeds its credit; a credit message goes out only for data
taken), and it does not wait for the connection (no ``IMMEDIATE``): what is sent before
the peer accepted is queued and sent on connect, never dropped. Sends are serialized by a
lock and never block.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import zmq

from ..limits import bound

#: kernel socket buffer of a connection when a slot has few peers (bytes)
MAX_CONNECTION_BUFFER = int(os.environ.get("LOCKGATE_SOCKET_BUFFER", 256 * 1024))
#: the smallest kernel socket buffer a connection gets (bytes)
MIN_CONNECTION_BUFFER = 8 * 1024
#: the buffer of a connection's other direction (a link receives nothing, a slot's
#: socket sends nothing)
REVERSE_BUFFER = 4 * 1024
#: the kernel socket buffer memory one slot asks for across all its connections (bytes)
BUFFER_BUDGET = int(os.environ.get("LOCKGATE_NETWORK_BUFFER_BUDGET", 32 * 1024 * 1024))
#: the most a DEALER accepts from its peer (the peer's ROUTER never sends)
_LINK_RECEIVE_LIMIT = 4096


def connection_buffer_bytes(peers: int, budget: int = BUFFER_BUDGET) -> int:
    """The send and receive buffer of each connection of a slot with ``peers`` peer
    slots: the budget shared by its ``2 × peers`` connections, between
    :data:`MIN_CONNECTION_BUFFER` and :data:`MAX_CONNECTION_BUFFER`. Credits, not these
    buffers, bound the bytes in flight of a channel."""
    if peers < 0:
        raise ValueError(f"a slot's peer count must be at least 0, got {peers}")
    share = budget // max(1, 2 * peers)
    return max(MIN_CONNECTION_BUFFER, min(MAX_CONNECTION_BUFFER, share))


class PeerLink:
    """The DEALER socket from this slot to the ROUTER of the slot at ``endpoint``."""

    def __init__(self, context: Any, endpoint: str, buffer_bytes: int) -> None:
        self.endpoint = endpoint
        sock = context.socket(zmq.DEALER)
        bound(sock, _LINK_RECEIVE_LIMIT)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.SNDBUF, buffer_bytes)
        sock.setsockopt(zmq.RCVBUF, REVERSE_BUFFER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        self._socket = sock
        self._lock = threading.Lock()
        #: messages sent so far
        self.sent = 0

    def send(self, frames: list[Any]) -> None:
        """Queue one message (never blocks: the socket has no high-water mark)."""
        with self._lock:
            if self._socket is None:
                raise RuntimeError(f"the data-plane link to {self.endpoint} is closed")
            self._socket.send_multipart(frames, copy=False)
            self.sent += 1

    def close(self, linger_ms: int) -> None:
        """Close the socket; queued messages may still leave for ``linger_ms``."""
        with self._lock:
            if self._socket is not None:
                self._socket.close(linger=linger_ms)
                self._socket = None

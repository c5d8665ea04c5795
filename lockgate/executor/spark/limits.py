"""Bounds on what a lockgate socket accepts from the network.

ZeroMQ allocates a whole frame before anyone can check it, so without a bound an
unauthenticated peer can make a process allocate as much as it likes. Every socket
lockgate receives on sets ``MAXMSGSIZE`` (per frame): a peer sending a larger frame
is disconnected by ZeroMQ before the frame is stored (nothing else is affected; the
frame never reaches lockgate). The bounds come from what legitimate senders send:

* data plane: a data message holds at most one output buffer, which the record
  writer cuts to ``buffer_max_bytes`` (<= ``channel_capacity_bytes``); a single row
  may be larger, so the bound is ``DATA_HEADROOM`` times the channel capacity plus
  ``DATA_SLACK`` for serialization. Senders check the bound themselves and fail the
  task with :class:`MessageTooLargeError` (ZeroMQ would drop the message silently).
* control plane: acknowledgements, failures and diagnostics, bounded by
  ``CONTROL_MESSAGE_LIMIT`` (``$LOCKGATE_CONTROL_MAX_MESSAGE_BYTES``, 64 MiB).
* job registry: small JSON requests, bounded by ``REGISTRY_REQUEST_LIMIT``.

:class:`DisconnectLog` logs the disconnections of a bound socket's peers, where
oversize frames show (ZeroMQ reports them as nothing more specific).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import zmq

from ...core.execution_config import ExecutionConfig, MiB
from ...errors import LockgateError

log = logging.getLogger(__name__)

#: a data frame may be this many channel capacities (a single large row)
DATA_HEADROOM = 4
#: plus this many bytes (Arrow IPC / pickle framing)
DATA_SLACK = 1 * MiB
#: the largest control-plane frame (either direction)
CONTROL_MESSAGE_LIMIT = int(os.environ.get("LOCKGATE_CONTROL_MAX_MESSAGE_BYTES") or 64 * MiB)
#: the largest job-registry request frame (a JSON command with a savepoint path)
REGISTRY_REQUEST_LIMIT = 64 * 1024
#: the largest job-registry reply frame (a JSON result or error message)
REGISTRY_REPLY_LIMIT = 1 * MiB


class MessageTooLargeError(LockgateError, RuntimeError):
    """A message exceeds the bound its receiver enforces (it would be dropped)."""


def data_message_limit(config: ExecutionConfig | None = None) -> int:
    """The largest data-plane frame (bytes) under ``config`` (default settings if None)."""
    cfg = config if config is not None else ExecutionConfig()
    return DATA_HEADROOM * max(cfg.channel_capacity_bytes, cfg.buffer_max_bytes) + DATA_SLACK


def bound(socket: Any, limit: int) -> None:
    """Make ``socket`` disconnect peers sending a frame over ``limit`` bytes. Call it
    before ``bind``/``connect``: ZeroMQ copies the option into each new connection."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise ValueError(f"a message size limit must be a positive int, got {limit!r}")
    socket.setsockopt(zmq.MAXMSGSIZE, limit)


def check_size(what: str, nbytes: int, limit: int, fix: str) -> None:
    """Raise :class:`MessageTooLargeError` when a frame of ``nbytes`` exceeds ``limit``."""
    if nbytes > limit:
        raise MessageTooLargeError(
            f"{what} is {nbytes} bytes, over the {limit}-byte limit its receiver enforces "
            f"(it would drop the connection); {fix}"
        )


class DisconnectLog:
    """Logs the peers of ``socket`` that disconnect, a frame over the limit among the
    reasons. Poll :attr:`monitor` with the socket and call :meth:`drain` when it is
    readable; :meth:`close` before closing the socket. Used by one thread."""

    def __init__(self, socket: Any, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.disconnects = 0
        self._socket = socket
        self.monitor: Any = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)

    def drain(self) -> None:
        from zmq.utils.monitor import recv_monitor_message

        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event.get("event") == zmq.EVENT_DISCONNECTED:
                self.disconnects += 1
                log.debug(
                    "%s: a peer disconnected (or was disconnected for sending a frame "
                    "over %d bytes)",
                    self.name,
                    self.limit,
                )

    def close(self) -> None:
        try:
            self._socket.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close(linger=0)

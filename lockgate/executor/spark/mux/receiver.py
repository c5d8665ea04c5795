"""A slot's ROUTER socket and the I/O thread that reads it.

Every data-plane message for this slot arrives here, from any peer: data, unaligned
barriers and asks for credit for the channels it consumes, credits for the channels it
produces. The thread
checks each message before anything in it is used (the MAC over every frame, the
attempt's generation, the channel's sequence number) and hands it to its channel; it
never blocks on a channel (an inbox holds at most the channel's credit), so one slow
consumer never holds up another channel on the same connection. A message that fails a
check, names a channel this slot does not have or repeats a sequence number (a replay)
is dropped and counted in :attr:`SlotReceiver.dropped`; one that skips a number breaks
its channel (:meth:`.input_channel.MuxInputChannel.break_`).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

import zmq

from ..auth import AuthenticationError, MalformedMessageError, MessageAuth
from ..limits import DisconnectLog, bound
from ..signals import PipeWaker
from ..wire import parse_header
from .frames import (
    ASK,
    CREDIT,
    FINAL,
    MUX_CONTEXT,
    PRIORITY,
    SHORT,
    ChannelKey,
    parse_credit,
    parse_mux,
)
from .input_channel import MuxInputChannel
from .link import REVERSE_BUFFER
from .output_channel import MuxOutputChannel

log = logging.getLogger(__name__)

#: messages queued per incoming connection before ZeroMQ stops reading it (the thread
#: drains the socket at once, so this only holds while the thread waits for the GIL)
_RECEIVE_HWM = 1024
#: messages read per turn before the thread checks for its stop
_BURST = 256


class SlotReceiver:
    """The ROUTER socket of a slot, bound to a random port of ``host``."""

    def __init__(
        self,
        context: Any,
        host: str,
        auth: MessageAuth,
        generation: int,
        max_message_bytes: int,
        buffer_bytes: int,
        name: str = "slot",
    ) -> None:
        sock = context.socket(zmq.ROUTER)
        bound(sock, max_message_bytes)
        sock.setsockopt(zmq.RCVHWM, _RECEIVE_HWM)
        sock.setsockopt(zmq.RCVBUF, buffer_bytes)
        sock.setsockopt(zmq.SNDBUF, REVERSE_BUFFER)
        sock.setsockopt(zmq.LINGER, 0)
        port = sock.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{host}:{port}"
        self.name = name
        self._socket = sock
        self._auth = auth
        self._generation = generation
        self.inputs: dict[ChannelKey, MuxInputChannel] = {}
        self.outputs: dict[ChannelKey, MuxOutputChannel] = {}
        #: the last sequence number accepted per (kind group, channel)
        self._last: dict[tuple[bool, ChannelKey], int] = {}
        #: messages dropped, by reason
        self.dropped: Counter[str] = Counter()
        #: peers disconnected (a frame over ``max_message_bytes`` among the reasons)
        self.disconnects = DisconnectLog(sock, f"{name} data plane", max_message_bytes)
        self._waker = PipeWaker()
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name=f"lockgate {name} receiver", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (it closes the socket) and wait for it."""
        self._stopping = True
        self._waker.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        elif self._socket is not None:
            self._close()

    # the I/O thread ---------------------------------------------------------------
    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._waker.fd, zmq.POLLIN)
        poller.register(self.disconnects.monitor, zmq.POLLIN)
        try:
            while not self._stopping:
                events = dict(poller.poll())
                self._waker.drain()
                if self.disconnects.monitor in events:
                    self.disconnects.drain()
                for _ in range(_BURST):
                    try:
                        frames = self._socket.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._handle([f.buffer for f in frames[1:]])  # frames[0]: routing id
        except Exception:  # a bug here must not leave the slot's channels silent
            log.exception("%s: the data-plane receiver failed", self.name)
            channels: list[MuxInputChannel | MuxOutputChannel] = [
                *self.inputs.values(),
                *self.outputs.values(),
            ]
            for ch in channels:
                ch.break_("the slot's data-plane receiver failed (see the log)")
        finally:
            self._close()

    def _close(self) -> None:
        if self._socket is not None:
            self.disconnects.close()
            self._socket.close(linger=0)
            self._socket = None
        self._waker.close()

    def _handle(self, parts: list[Any]) -> None:
        try:
            if not parts:
                raise MalformedMessageError("an empty message")
            kind, flags, key, charged = parse_mux(parts[0])
            opened = self._auth.open(parts, 2 if kind in SHORT else 3, context=MUX_CONTEXT)
        except (AuthenticationError, MalformedMessageError) as e:
            self._drop("unauthenticated", "%s: dropped a data-plane message: %s", e)
            return
        try:
            if kind == CREDIT:
                self._credit(key, flags, opened[1])
            else:
                self._downstream(kind, flags, key, charged, opened)
        except (MalformedMessageError, ValueError) as e:
            self._drop("malformed", "%s: dropped a data-plane message: %s", e)

    def _credit(self, key: ChannelKey, flags: int, body: Any) -> None:
        output = self.outputs.get(key)
        if output is None:
            self._drop("unknown channel", "%s: dropped a credit for channel %s", key)
            return
        generation, seq, returned, batches = parse_credit(body)
        if self._accepted(generation, (False, key), seq, output):
            output.credit(returned, batches, bool(flags & FINAL))

    def _downstream(
        self, kind: int, flags: int, key: ChannelKey, charged: int, opened: list[Any]
    ) -> None:
        """A message of a channel this slot consumes: data, a priority barrier, an ask."""
        channel = self.inputs.get(key)
        if channel is None:
            self._drop("unknown channel", "%s: dropped a message for channel %s", key)
            return
        if kind == ASK:
            # not numbered: a repeated ask only brings credit back sooner
            generation = parse_credit(opened[1])[0]
            if generation != self._generation:
                self._drop("stale", "%s: dropped an ask of generation %s", generation)
            else:
                channel.ask()
            return
        header, body = opened[1], opened[2]
        generation, seq = parse_header(header)
        if self._accepted(generation, (True, key), seq, channel):
            channel.deliver(
                kind, bool(flags & FINAL), header, body, charged if kind != PRIORITY else 0
            )

    def _accepted(
        self, generation: int, sender: tuple[bool, ChannelKey], seq: int, channel: Any
    ) -> bool:
        """Whether a message is of this attempt and next in its channel's sequence."""
        if generation != self._generation:
            self._drop("stale", "%s: dropped a message of generation %s", generation)
            return False
        last = self._last.get(sender, 0)
        if seq <= last:
            self._drop("replayed", "%s: dropped a replayed message (number %s)", seq)
            return False
        if seq != last + 1:
            reason = f"message {last + 1} of its sequence never arrived (next came {seq})"
            log.error("%s: channel %s: %s", self.name, sender[1], reason)
            if channel is not None:
                channel.break_(reason)
            self._last[sender] = seq
            return False
        self._last[sender] = seq
        return True

    def _drop(self, reason: str, message: str, detail: Any) -> None:
        self.dropped[reason] += 1
        log.warning(message, self.name, detail)

"""The consumer end of a multiplexed network channel.

The slot's I/O thread (:class:`.receiver.SlotReceiver`) checks every message (MAC,
generation, sequence number) and appends it to its channel's inbox here, in the order
the producer sent it; the task thread decodes and takes it with :meth:`poll`. The inbox
holds at most the channel's credit of data (the producer sends no more), so it is the
channel's bound on bytes in flight.

Credit goes back to the producer as the task takes batches: once a quarter of the
capacity or half the batches in flight were taken, and, after the producer asked (it waits for credit, or for its data
to be taken before it flushes a part-filled buffer), at once and after every take until
the inbox is empty. So a producer waiting for credit always gets it once its data was
taken, and a steady stream costs one credit message per quarter of the capacity. After
the channel's last message arrived the producer needs no credit, and the I/O thread
acknowledges that message instead; both go out under the channel's lock, so no credit
follows the acknowledgement.

Unaligned barriers (M-B7) arrive in sequence behind the data sent before them; the
channel returns ``PriorityBarrier(barrier, overtaken)`` with the data between the task's
position and the barrier, and delivers that data next (it is the checkpoint's in-flight
input). A message missing from the sequence (a connection that lost data) breaks the
channel: the task fails and the job restores from its last checkpoint.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from ....core.elements import CheckpointBarrier, PriorityBarrier, StreamElement
from ..auth import MessageAuth
from ..wire import decode
from .errors import ChannelBrokenError
from .frames import CREDIT, FINAL, MUX_CONTEXT, PRIORITY, ChannelKey, credit_body, mux_header
from .link import PeerLink
from .output_channel import MAX_BATCHES_IN_FLIGHT


class MuxInputChannel:
    """Consumer end of channel ``key``; credits go to the producer's slot by ``link``
    (set once the slot knows every slot's address)."""

    def __init__(
        self,
        key: ChannelKey,
        auth: MessageAuth,
        generation: int,
        capacity_bytes: int,
    ) -> None:
        self.key = key
        self.name = str(key)
        self.auth = auth
        self.generation = generation
        self.capacity_bytes = capacity_bytes
        self._return_at = max(1, capacity_bytes // 4)
        self._lock = threading.Lock()
        #: (kind, header, body, charged) in the order sent
        self._inbox: deque[tuple[int, Any, Any, int]] = deque()
        self._priorities = 0
        #: decoded elements overtaken by a priority barrier, delivered next
        self._ahead: deque[tuple[StreamElement, int]] = deque()
        self._link: PeerLink | None = None
        self._credit_seq = 0
        self._unreturned = 0
        self._unreturned_batches = 0
        #: the producer asked for credit, and the inbox was not empty since
        self._asked = False
        self._final_arrived = False
        self._final_acknowledged = False
        self._broken: str | None = None
        self._signal: threading.Event | None = None
        self._paused = False
        #: the most data bytes queued in the inbox at once
        self.peak_bytes = 0
        self._queued_bytes = 0
        #: credit messages sent
        self.credits_sent = 0

    # the slot's main thread ----------------------------------------------------
    def connect(self, link: PeerLink) -> None:
        """The producer's slot is reachable by ``link``; acknowledge a last message that
        arrived before."""
        with self._lock:
            self._link = link
            if self._final_arrived and not self._final_acknowledged:
                self._send_credit(0, 0, final=True)

    # the slot's I/O thread -----------------------------------------------------
    def deliver(self, kind: int, final: bool, header: Any, body: Any, charged: int) -> None:
        """Append an authenticated, in-sequence message (called by the I/O thread)."""
        with self._lock:
            self._inbox.append((kind, header, body, charged))
            self._queued_bytes += charged
            self.peak_bytes = max(self.peak_bytes, self._queued_bytes)
            if kind == PRIORITY:
                self._priorities += 1
            if final:
                self._final_arrived = True
                if self._link is not None:
                    self._send_credit(0, 0, final=True)
        self._wake()

    def ask(self) -> None:
        """The producer asked for credit (called by the I/O thread)."""
        with self._lock:
            self._asked = True
            self._return_credit()

    def break_(self, reason: str) -> None:
        """The channel lost a message: the next poll raises :class:`ChannelBrokenError`."""
        with self._lock:
            if self._broken is None:
                self._broken = reason
        signal = self._signal
        if signal is not None:
            signal.set()

    def _wake(self) -> None:
        signal = self._signal
        if signal is not None and not self._paused:
            signal.set()

    # the task thread -------------------------------------------------------------
    def poll(self) -> StreamElement | None:
        if self._ahead:
            element, charged = self._ahead.popleft()
            self._taken(charged)
            return element
        with self._lock:
            if self._broken is not None:
                raise ChannelBrokenError(f"network channel {self.name}: {self._broken}")
            if not self._inbox:
                return None
            if not self._priorities:
                kind, header, body, charged = self._inbox.popleft()
                self._queued_bytes -= charged
                entries = None
            else:
                entries = []
                while self._inbox[0][0] != PRIORITY:
                    entries.append(self._inbox.popleft())
                kind, header, body, charged = self._inbox.popleft()
                self._priorities -= 1
        if entries is None:
            element = decode(header, body, self.generation)
            self._taken(charged)
            return element
        barrier = decode(header, body, self.generation)
        if not isinstance(barrier, CheckpointBarrier):
            raise ChannelBrokenError(
                f"network channel {self.name}: a priority message carried {barrier!r}, "
                "not a checkpoint barrier"
            )
        for _, h, b, c in entries:
            self._ahead.append((decode(h, b, self.generation), c))
        with self._lock:
            self._queued_bytes -= sum(c for _, _, _, c in entries)
        return PriorityBarrier(barrier, tuple(e for e, _ in self._ahead))

    def _taken(self, charged: int) -> None:
        """Return credit for ``charged`` bytes when due (see the module's docstring)."""
        if not charged and not self._asked:
            return
        with self._lock:
            if charged:
                self._unreturned += charged
                self._unreturned_batches += 1
            if (
                self._asked
                or self._unreturned >= self._return_at
                or self._unreturned_batches >= MAX_BATCHES_IN_FLIGHT // 2
            ):
                self._return_credit()

    def _return_credit(self) -> None:
        """Send the credit taken and not returned yet (holding the lock); the producer's
        ask is answered once the inbox is empty."""
        if self._unreturned and not self._final_arrived and self._link is not None:
            self._send_credit(self._unreturned, self._unreturned_batches, final=False)
            self._unreturned = 0
            self._unreturned_batches = 0
        if not self._inbox and not self._ahead:
            self._asked = False

    def _send_credit(self, returned: int, batches: int, final: bool) -> None:
        """Send a credit message (holding the channel's lock)."""
        assert self._link is not None
        self._credit_seq += 1
        self._link.send(
            self.auth.seal(
                mux_header(CREDIT, FINAL if final else 0, self.key, 0),
                credit_body(self.generation, self._credit_seq, returned, batches),
                context=MUX_CONTEXT,
            )
        )
        self.credits_sent += 1
        if final:
            self._final_acknowledged = True

    def set_consumer_signal(self, signal: threading.Event) -> None:
        self._signal = signal

    def pause(self) -> None:
        """The channel is blocked (alignment): its arrivals stop waking the task."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        signal = self._signal
        if signal is not None and (self._inbox or self._ahead):
            signal.set()

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def cancel(self) -> None:
        pass

    def close(self, delivered: bool) -> None:
        """Nothing to close: the receiver and links belong to the slot."""

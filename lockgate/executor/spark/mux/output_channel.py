"""The producer end of a multiplexed network channel.

Credit-based flow control, as in a local channel but across the network: the producer
may have at most ``capacity_bytes`` of data batches (their in-memory size, as a local
channel counts them) and :data:`MAX_BATCHES_IN_FLIGHT` batches in flight (sent and not
yet taken by the consumer), or one batch of any size when nothing is in flight. The
batch count keeps what an aligned barrier waits behind small when batches are small
(slow or sparse input), as the per-channel sockets' high-water marks did. The consumer returns
credit as it takes batches (:class:`.input_channel.MuxInputChannel`): a quarter of the
capacity at a time, and at once when the producer asks (an ``ASK`` message, sent when it
would have to wait, and when it would flush a part-filled buffer to another host once
its data was taken: Nagle's rule). The slot's I/O thread hands credit to
:meth:`MuxOutputChannel.credit`, which wakes the producer. Control
elements are always admitted (a checkpoint barrier never waits behind a full channel)
and unaligned barriers go ahead of the credit (M-B7). One blocked channel never stalls
another on the same connection: nothing waits in a socket, only in its producer.
"""

from __future__ import annotations

import threading

from ....core.batch import is_batch, nbytes
from ....core.elements import END_OF_PARTITION, StreamElement
from ....errors import TaskCancelledError
from ..auth import MessageAuth
from ..limits import check_size
from ..wire import encode
from .errors import ChannelBrokenError
from .frames import (
    ASK,
    DATA,
    FINAL,
    MUX_CONTEXT,
    PRIORITY,
    ChannelKey,
    credit_body,
    mux_header,
)
from .link import PeerLink

#: the most batches a channel has in flight (the high-water marks of the per-channel
#: sockets this replaced: 4 at each end)
MAX_BATCHES_IN_FLIGHT = 8
#: how often a producer waiting for credit re-checks for cancellation (s)
_CANCEL_CHECK_S = 0.1


class MuxOutputChannel:
    """Producer end of channel ``key`` over ``link`` (to the consumer's slot)."""

    def __init__(
        self,
        key: ChannelKey,
        link: PeerLink,
        auth: MessageAuth,
        generation: int,
        capacity_bytes: int,
        max_message_bytes: int,
        same_host: bool = False,
    ) -> None:
        if capacity_bytes <= 0:
            raise ValueError(f"channel capacity must be positive, got {capacity_bytes}")
        self.key = key
        self.name = str(key)
        self.link = link
        self.auth = auth
        self.generation = generation
        self.capacity_bytes = capacity_bytes
        self.max_message_bytes = max_message_bytes
        #: the consumer runs on this host (an idle flush is sent at once)
        self.same_host = same_host
        self._lock = threading.Lock()
        self._credit_returned = threading.Condition(self._lock)
        self._in_flight = 0
        self._batches = 0
        self._seq = 0
        self._cancelled = False
        self._broken: str | None = None
        #: an ASK went out and no credit came back since
        self._asked = False
        #: ASK messages sent
        self.asks = 0
        self._signal: threading.Event | None = None
        #: the consumer's slot received the channel's last message
        self.final_acknowledged = threading.Event()
        #: the channel's last message (its end of partition) was sent
        self.final_sent = False
        self.blocked_puts = 0
        self.refused_puts = 0
        #: messages sent so far
        self.sent = 0
        #: the most data bytes in flight at once
        self.peak_in_flight = 0

    # producer side (the task thread) -------------------------------------------
    def put(self, element: StreamElement) -> None:
        header, body = encode(element, self.generation, 0, self._seq + 1)
        size = memoryview(body).nbytes
        check_size(
            f"a data message of channel {self.name}",
            size,
            self.max_message_bytes,
            "raise ExecutionConfig.channel_capacity_bytes (the bound is "
            "limits.DATA_HEADROOM times it) or emit smaller records",
        )
        # a batch is charged its in-memory size (at least 1: a charge marks a batch), the
        # size the record writer asks can_accept about
        charged = max(1, nbytes(element)) if is_batch(element) else 0
        final = element is END_OF_PARTITION
        with self._lock:
            if charged and not self._admits(charged):
                self.blocked_puts += 1
                self._ask()
                while not self._stopped() and not self._admits(charged):
                    self._credit_returned.wait(_CANCEL_CHECK_S)
            self._check_usable()
            self._seq += 1
            self._in_flight += charged
            self._batches += 1 if charged else 0
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
            frames = self.auth.seal(
                mux_header(DATA, FINAL if final else 0, self.key, charged),
                header,
                body,
                context=MUX_CONTEXT,
            )
            # under the lock: the sequence numbers go out in order
            self.link.send(frames)
            self.sent += 1
            self.final_sent = self.final_sent or final

    def put_priority(self, element: StreamElement) -> list[StreamElement]:
        """Send an unaligned barrier at once, whatever the credit (M-B7). It follows the
        data sent before it on the same connection, so the consumer finds that data in
        front of it and hands it over as overtaken (in-flight state); nothing stays
        behind here, so nothing is returned."""
        with self._lock:
            self._check_usable()
            self._seq += 1
            header, body = encode(element, self.generation, 0, self._seq)
            self.link.send(
                self.auth.seal(
                    mux_header(PRIORITY, 0, self.key, 0), header, body, context=MUX_CONTEXT
                )
            )
            self.sent += 1
        return []

    def _ask(self) -> None:
        """Ask the consumer for its credit (holding the lock; once until credit comes)."""
        if self._asked or self._stopped():
            return
        self._asked = True
        self.asks += 1
        self.link.send(
            self.auth.seal(
                mux_header(ASK, 0, self.key, 0),
                credit_body(self.generation, 0, 0),
                context=MUX_CONTEXT,
            )
        )

    def _stopped(self) -> bool:
        return self._cancelled or self._broken is not None

    def _check_usable(self) -> None:
        if self._cancelled:
            raise TaskCancelledError(f"{self.name} was cancelled")
        if self._broken is not None:
            raise ChannelBrokenError(f"network channel {self.name}: {self._broken}")

    def _admits(self, size: int) -> bool:
        return self._in_flight == 0 or (
            self._in_flight + size <= self.capacity_bytes and self._batches < MAX_BATCHES_IN_FLIGHT
        )

    def has_capacity(self) -> bool:
        # a broken channel takes the next put, which raises
        if self._broken is not None or (
            self._in_flight < self.capacity_bytes and self._batches < MAX_BATCHES_IN_FLIGHT
        ):
            return True
        with self._lock:
            self._ask()
        return False

    def can_accept(self, size: int) -> bool:
        """Whether a batch of about ``size`` bytes would be admitted at once; a refusal
        counts in :attr:`refused_puts` (the producer then holds the batch)."""
        if self._broken is not None or self._admits(size):
            return True
        self.refused_puts += 1
        with self._lock:
            self._ask()
        return False

    def takes_idle_flush(self) -> bool:
        """Nagle's rule for the producer's idle flush: a partial buffer goes out at once
        when the consumer runs on this host, or when it has taken every batch sent before
        (its credit came back); otherwise the buffer waits for that credit (which wakes
        the producer), the buffer to fill or its timeout. Over a slow link between hosts
        this sends fewer, larger messages instead of one per pause of the producer."""
        if self.same_host or self._in_flight == 0:
            return True
        with self._lock:
            self._ask()
        return False

    @property
    def in_flight_bytes(self) -> int:
        return self._in_flight

    @property
    def backpressured(self) -> int:
        return self.blocked_puts + self.refused_puts

    def set_producer_signal(self, signal: threading.Event) -> None:
        self._signal = signal

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            self._credit_returned.notify_all()

    def close(self, delivered: bool) -> None:
        """Nothing to close: the link belongs to the slot (see ``SlotChannels.close``)."""

    # the slot's I/O thread -------------------------------------------------------
    def break_(self, reason: str) -> None:
        """The channel's credit was lost: the next put raises :class:`ChannelBrokenError`
        (a producer waiting for credit wakes and raises)."""
        with self._lock:
            if self._broken is None:
                self._broken = reason
            self._credit_returned.notify_all()
        signal = self._signal
        if signal is not None:
            signal.set()

    def credit(self, returned: int, batches: int, final: bool) -> None:
        """The consumer took ``batches`` batches charged ``returned`` bytes (and, with
        ``final``, received the channel's last message)."""
        with self._lock:
            self._in_flight = max(0, self._in_flight - returned)
            self._batches = max(0, self._batches - batches)
            self._asked = False
            self._credit_returned.notify_all()
        if final:
            self.final_acknowledged.set()
        signal = self._signal
        if signal is not None:
            signal.set()

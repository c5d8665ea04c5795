"""The channel ends of one slot: local queues between its own subtasks, the multiplexed
data plane (:mod:`.mux`) to and from the other slots.

A slot first binds its one ROUTER socket and starts the I/O thread reading it
(:meth:`SlotChannels.bind_inputs`; the inboxes of every network channel it consumes
exist from then on, so nothing a fast peer sends is lost), the driver hands every slot
all addresses (:meth:`SlotChannels.connect`: one link per peer slot), and then the
subtasks are wired (:func:`lockgate.executor.wiring.wire_subtask` with
:meth:`SlotChannels.out_channel` and :meth:`SlotChannels.in_channel`). At the end
(:meth:`SlotChannels.close`) a slot whose subtasks finished waits (bounded) until every
channel it produced had its last message acknowledged by the consumer's slot, then stops
its receiver and closes its links.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ...graph.execution_plan import ExecutionPlan
from ...runtime.channels import InputChannel, LocalChannel, OutputChannel
from ..wiring import ChannelKey
from .auth import MessageAuth
from .limits import data_message_limit
from .mux import MuxInputChannel, MuxOutputChannel, PeerLink, SlotReceiver, connection_buffer_bytes

log = logging.getLogger(__name__)

#: how long a finished slot waits for its consumers to acknowledge the last messages (s)
ACK_TIMEOUT_S = 10.0
#: how long a finished slot's links may still send queued credits after closing (ms)
_LINK_LINGER_MS = 2_000


def slot_key(slot: int) -> tuple[str, int]:
    """The address key of slot ``slot``'s data-plane socket in the driver's START."""
    return ("slot", slot)


class SlotChannels:
    """Makes and closes the channel ends of slot ``slot``."""

    def __init__(
        self, plan: ExecutionPlan, slot: int, context: Any, auth: MessageAuth, generation: int
    ) -> None:
        self.plan = plan
        self.slot = slot
        self.context = context
        self.auth = auth
        self.generation = generation
        self.local: dict[ChannelKey, LocalChannel] = {}
        self.addresses: dict[Any, str] = {}
        self.links: dict[int, PeerLink] = {}
        self.receiver: SlotReceiver | None = None
        self.buffer_bytes = connection_buffer_bytes(max(0, plan.num_slots - 1))
        #: the address this slot's socket is bound to (set by bind_inputs)
        self.host: str | None = None

    def bind_inputs(self, host: str) -> dict[Any, str]:
        """Bind the slot's socket, make the inbox of every network channel it consumes
        and start reading; return the socket's endpoint (by :func:`slot_key`), for the
        driver."""
        self.host = host
        receiver = SlotReceiver(
            self.context,
            host,
            self.auth,
            self.generation,
            data_message_limit(self.plan.config),
            self.buffer_bytes,
            name=f"slot {self.slot}",
        )
        capacity = self.plan.config.channel_capacity_bytes
        for edge in self.plan.edges.values():
            for p, c in edge.channel_pairs():
                if c == self.slot and p != self.slot:
                    key = (edge.id, p, c)
                    receiver.inputs[key] = MuxInputChannel(
                        key, self.auth, self.generation, capacity
                    )
        self.receiver = receiver
        receiver.start()
        return {slot_key(self.slot): receiver.endpoint}

    def connect(self, addresses: dict[Any, str]) -> None:
        """Every slot's address, as the driver's START message gave them: link the
        inboxes to their producers' slots (for credit)."""
        self.addresses = addresses
        assert self.receiver is not None, "bind_inputs comes first"
        for key, channel in self.receiver.inputs.items():
            channel.connect(self._link(key[1]))

    def _link(self, peer: int) -> PeerLink:
        link = self.links.get(peer)
        if link is None:
            link = self.links[peer] = PeerLink(
                self.context, self.addresses[slot_key(peer)], self.buffer_bytes
            )
        return link

    def _local_channel(self, key: ChannelKey) -> LocalChannel:
        ch = self.local.get(key)
        if ch is None:
            ch = self.local[key] = LocalChannel(self.plan.config.channel_capacity_bytes, str(key))
        return ch

    def out_channel(self, key: ChannelKey) -> OutputChannel:
        if key[2] == self.slot:
            return self._local_channel(key)
        assert self.receiver is not None, "bind_inputs comes first"
        endpoint = self.addresses[slot_key(key[2])]
        channel = MuxOutputChannel(
            key,
            self._link(key[2]),
            self.auth,
            self.generation,
            self.plan.config.channel_capacity_bytes,
            data_message_limit(self.plan.config),
            same_host=same_host(endpoint, self.host),
        )
        self.receiver.outputs[key] = channel
        return channel

    def in_channel(self, key: ChannelKey) -> InputChannel:
        if key[1] == self.slot:
            return self._local_channel(key)
        assert self.receiver is not None, "bind_inputs comes first"
        return self.receiver.inputs[key]

    def close(self, delivered: bool) -> None:
        """Close the data plane. ``delivered``: the slot's subtasks ended normally, so
        first wait (bounded) until their last messages reached the consumers' slots."""
        if delivered and self.receiver is not None:
            self._await_final_acknowledgements()
        if self.receiver is not None:
            self.receiver.stop()
        for link in self.links.values():
            link.close(_LINK_LINGER_MS if delivered else 0)

    def _await_final_acknowledgements(self) -> None:
        assert self.receiver is not None
        deadline = time.monotonic() + ACK_TIMEOUT_S
        for channel in self.receiver.outputs.values():
            if not channel.final_sent:
                continue
            if not channel.final_acknowledged.wait(max(0.0, deadline - time.monotonic())):
                log.warning(
                    "slot %s: channel %s: the consumer's slot did not acknowledge the last "
                    "message within %.0fs",
                    self.slot,
                    channel.name,
                    ACK_TIMEOUT_S,
                )
                return


def same_host(endpoint: str, own_host: str | None) -> bool:
    """Whether the ZeroMQ ``endpoint`` (``tcp://host:port``) is on this host: its address
    is the one this slot bound to (``own_host``) or a loopback address."""
    rest = endpoint.split("://", 1)[-1]
    host = rest.rsplit(":", 1)[0].strip("[]")
    return host == own_host or host == "localhost" or host.startswith("127.") or host == "::1"

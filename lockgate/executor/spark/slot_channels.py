"""The channel ends of one slot: local queues between its own subtasks, zmq sockets to
and from the other slots.

A slot first binds a PULL socket (and a priority PULL socket, for unaligned barriers,
M-B7) for every network channel it consumes (:meth:`SlotChannels.bind_inputs`), the
driver hands every slot all addresses (:meth:`SlotChannels.connect`), and then the
subtasks are wired (:func:`lockgate.executor.wiring.wire_subtask` with
:meth:`SlotChannels.out_channel` and :meth:`SlotChannels.in_channel`). The sockets are
created here, used by the subtask thread owning each channel end, and closed here
(:meth:`SlotChannels.close`) after those threads ended.
"""

from __future__ import annotations

from typing import Any

from ...graph.execution_plan import ExecutionPlan
from ...runtime.channels import InputChannel, LocalChannel, OutputChannel
from ..wiring import ChannelKey
from .auth import MessageAuth
from .data_plane import ZmqInputChannel, ZmqOutputChannel, bind_pull, connect_push
from .limits import data_message_limit


def priority_key(key: ChannelKey) -> Any:
    """The address key of a channel's priority socket (unaligned barriers, M-B7)."""
    return (*key, "priority")


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
        self.pulls: dict[Any, Any] = {}
        self.local: dict[ChannelKey, LocalChannel] = {}
        self.network: list[Any] = []
        self.addresses: dict[Any, str] = {}
        #: the address this slot's PULL sockets are bound to (set by bind_inputs)
        self.host: str | None = None

    def bind_inputs(self, host: str) -> dict[Any, str]:
        """Bind the PULL sockets of every network channel this slot consumes; return
        their endpoints by channel key (and priority key), for the driver."""
        self.host = host
        endpoints: dict[Any, str] = {}
        for edge in self.plan.edges.values():
            for p, c in edge.channel_pairs():
                if c == self.slot and p != self.slot:
                    for key in ((edge.id, p, c), priority_key((edge.id, p, c))):
                        sock, endpoint = bind_pull(
                            self.context, host, data_message_limit(self.plan.config)
                        )
                        self.pulls[key] = sock
                        endpoints[key] = endpoint
        return endpoints

    def connect(self, addresses: dict[Any, str]) -> None:
        """Every slot's PULL addresses, as the driver's START message gave them."""
        self.addresses = addresses

    def _local_channel(self, key: ChannelKey) -> LocalChannel:
        ch = self.local.get(key)
        if ch is None:
            ch = self.local[key] = LocalChannel(self.plan.config.channel_capacity_bytes, str(key))
        return ch

    def out_channel(self, key: ChannelKey) -> OutputChannel:
        if key[2] == self.slot:
            return self._local_channel(key)
        z = ZmqOutputChannel(
            connect_push(self.context, self.addresses[key]),
            self.auth,
            self.generation,
            str(key),
            priority_socket=connect_push(self.context, self.addresses[priority_key(key)]),
            max_message_bytes=data_message_limit(self.plan.config),
            same_host=same_host(self.addresses[key], self.host),
        )
        self.network.append(z)
        return z

    def in_channel(self, key: ChannelKey) -> InputChannel:
        if key[1] == self.slot:
            return self._local_channel(key)
        z = ZmqInputChannel(
            self.pulls[key],
            self.auth,
            self.generation,
            str(key),
            priority_socket=self.pulls[priority_key(key)],
        )
        self.network.append(z)
        return z

    def close(self, delivered: bool) -> None:
        """Close the network channels (``delivered``: the slot's subtasks ended normally,
        so their last messages are worth waiting for) and the PULL sockets."""
        for ch in self.network:
            ch.close(delivered)
        for sock in self.pulls.values():
            if not sock.closed:
                sock.close(linger=0)


def same_host(endpoint: str, own_host: str | None) -> bool:
    """Whether the ZeroMQ ``endpoint`` (``tcp://host:port``) is on this host: its address
    is the one this slot bound to (``own_host``) or a loopback address."""
    rest = endpoint.split("://", 1)[-1]
    host = rest.rsplit(":", 1)[0].strip("[]")
    return host == own_host or host == "localhost" or host.startswith("127.") or host == "::1"

"""The multiplexed data plane: every network channel between two slots shares one
connection per direction, with credit-based flow control per channel.

A slot binds one ROUTER socket (:class:`.receiver.SlotReceiver`, read by an I/O thread
of its own) and connects one DEALER (:class:`.link.PeerLink`) to each slot it sends to.
Data of every edge from slot ``a`` to slot ``b`` travels on ``a``'s link to ``b``; the
credits ``b`` returns for it travel on ``b``'s link to ``a``. A slot therefore holds at
most ``2 × (slots - 1)`` data-plane connections whatever the number of edges, where the
per-channel PUSH/PULL design held four per channel. See docs/architecture.md, "The data
plane".
"""

from .errors import ChannelBrokenError
from .frames import CREDIT, DATA, PRIORITY
from .input_channel import MuxInputChannel
from .link import PeerLink, connection_buffer_bytes
from .output_channel import MuxOutputChannel
from .receiver import SlotReceiver

__all__ = [
    "CREDIT",
    "DATA",
    "PRIORITY",
    "ChannelBrokenError",
    "MuxInputChannel",
    "MuxOutputChannel",
    "PeerLink",
    "SlotReceiver",
    "connection_buffer_bytes",
]

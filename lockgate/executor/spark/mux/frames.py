"""The frames of a multiplexed data-plane message.

Every message starts with a mux header naming what it is and which channel it belongs
to: ``(kind, flags, edge id, producer subtask, consumer subtask, charged bytes)``. The
MAC (:mod:`..auth`) covers that header with the rest, so a message cannot be moved to
another channel or kind. Kinds:

- ``DATA``: a stream element on its channel (wire header and body, :mod:`..wire`);
  ``charged`` is what it takes of the channel's credit (a batch's encoded size; 0 for a
  control element, which is always admitted, as in a local channel).
- ``PRIORITY``: an unaligned barrier sent ahead of its channel's credit (M-B7).
- ``CREDIT``: the consumer took batches of the channel (its body: how many, and the
  bytes they were charged); with ``FINAL`` it acknowledges the channel's last message (its end of partition).
- ``ASK``: the producer waits for credit (or for its data to be taken, to flush a part-
  filled buffer): the consumer returns what it took at once, and then after every take
  until its inbox is empty. Without it credit goes back a quarter of the capacity at a
  time.

``FINAL`` on a ``DATA`` message marks the channel's last message.
"""

from __future__ import annotations

import struct
from typing import Any

from ..auth import MalformedMessageError

DATA = 1
PRIORITY = 2
CREDIT = 3
ASK = 4
KINDS = frozenset({DATA, PRIORITY, CREDIT, ASK})
#: kinds without a body of their own (a credit body: generation, 0, 0)
SHORT = frozenset({CREDIT, ASK})

#: the channel's last message (DATA), or its acknowledgement (CREDIT)
FINAL = 1

_MUX = struct.Struct("<BBqqqq")
#: a credit message's body: generation, sequence number, bytes and batches returned
_CREDIT = struct.Struct("<qqqq")

ChannelKey = tuple[int, int, int]


def mux_header(kind: int, flags: int, key: ChannelKey, charged: int) -> bytes:
    return _MUX.pack(kind, flags, key[0], key[1], key[2], charged)


def parse_mux(frame: Any) -> tuple[int, int, ChannelKey, int]:
    """(kind, flags, channel key, charged) of an authenticated mux header."""
    view = memoryview(frame)
    if view.nbytes != _MUX.size:
        raise MalformedMessageError(f"bad mux header of {view.nbytes} bytes")
    kind, flags, edge, producer, consumer, charged = _MUX.unpack(view)
    if kind not in KINDS or charged < 0:
        raise MalformedMessageError(f"bad mux header: kind {kind}, charged {charged}")
    return kind, flags, (edge, producer, consumer), charged


def credit_body(generation: int, seq: int, returned: int = 0, batches: int = 0) -> bytes:
    return _CREDIT.pack(generation, seq, returned, batches)


def parse_credit(frame: Any) -> tuple[int, int, int, int]:
    """(generation, sequence number, bytes returned, batches returned) of an
    authenticated credit body."""
    view = memoryview(frame)
    if view.nbytes != _CREDIT.size:
        raise MalformedMessageError(f"bad credit body of {view.nbytes} bytes")
    generation, seq, returned, batches = _CREDIT.unpack(view)
    if returned < 0 or batches < 0:
        raise MalformedMessageError(f"bad credit: {returned} bytes, {batches} batches")
    return generation, seq, returned, batches


#: what every data-plane MAC covers besides the frames (a message sealed for the
#: control plane does not verify here)
MUX_CONTEXT = b"mux-data-plane"

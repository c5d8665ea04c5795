"""Message authentication shared by the control and data planes.

Every message is sealed with an HMAC-SHA256 (truncated to 16 bytes) under a
secret generated per job; ``open`` checks the MAC before anything in the
message is parsed or unpickled, so an unauthenticated sender can never make
a process unpickle its bytes.

A MAC proves who sent a message, not that it is new: a captured message stays valid.
Every sender therefore numbers its messages (1, 2, ...) inside what the MAC covers,
and the receiver keeps the last number per sender (:class:`SequenceGuard`) and drops
any message whose number is not larger: a replay. ``seal``/``open`` take an optional
``context`` covered by the MAC but not sent (a data channel's name): a message
captured on one channel does not verify on another.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from typing import Any

MAC_SIZE = 16


class AuthenticationError(Exception):
    """A message whose MAC does not verify (wrong secret or tampered)."""


class MalformedMessageError(Exception):
    """A message that does not have the expected frames."""


def new_secret() -> bytes:
    return secrets.token_bytes(32)


class MessageAuth:
    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("a job secret needs at least 16 bytes")
        self._secret = secret

    def mac(self, *parts: Any, context: bytes = b"") -> bytes:
        h = hmac.new(self._secret, digestmod=hashlib.sha256)
        if context:
            h.update(b"context")
            h.update(struct.pack("<Q", len(context)))
            h.update(context)
        for p in parts:
            view = memoryview(p)
            h.update(struct.pack("<Q", view.nbytes))
            h.update(view)
        return h.digest()[:MAC_SIZE]

    def seal(self, *parts: Any, context: bytes = b"") -> list[Any]:
        """``parts`` followed by their MAC (over ``context`` too, which is not sent), as
        frames of one multipart message."""
        return [*parts, self.mac(*parts, context=context)]

    def open(
        self, frames: list[Any], expected_parts: int, context: bytes = b""
    ) -> list[memoryview]:
        """Verify ``frames`` (``expected_parts`` parts + MAC, sealed with ``context``);
        return the parts."""
        if len(frames) != expected_parts + 1:
            raise MalformedMessageError(f"expected {expected_parts + 1} frames, got {len(frames)}")
        parts = [memoryview(f) for f in frames[:-1]]
        given = bytes(memoryview(frames[-1]))
        if len(given) != MAC_SIZE or not hmac.compare_digest(
            given, self.mac(*parts, context=context)
        ):
            raise AuthenticationError("message authentication failed")
        return parts


class ReplayedMessageError(Exception):
    """An authenticated message whose sequence number was already seen (a replay)."""


class SequenceGuard:
    """The last sequence number accepted from each sender: a message is accepted only
    when its number is larger (senders count from 1; messages of one sender arrive in
    order on one connection, so a smaller or equal number is a replay)."""

    def __init__(self) -> None:
        self._last: dict[Any, int] = {}

    def check(self, sender: Any, seq: int) -> None:
        """Accept ``seq`` from ``sender`` or raise :class:`ReplayedMessageError`."""
        last = self._last.get(sender, 0)
        if seq <= last:
            raise ReplayedMessageError(
                f"sequence number {seq} of {sender!r} is not above {last}: a replay"
            )
        self._last[sender] = seq

    def last(self, sender: Any) -> int:
        return self._last.get(sender, 0)

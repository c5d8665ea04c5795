"""Message authentication shared by the control and data planes.

Every message is sealed with an HMAC-SHA256 (truncated to 16 bytes) under a
secret generated per job; ``open`` checks the MAC before anything in the
message is parsed or unpickled, so an unauthenticated sender can never make
a process unpickle its bytes.
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

    def mac(self, *parts: Any) -> bytes:
        h = hmac.new(self._secret, digestmod=hashlib.sha256)
        for p in parts:
            view = memoryview(p)
            h.update(struct.pack("<Q", view.nbytes))
            h.update(view)
        return h.digest()[:MAC_SIZE]

    def seal(self, *parts: Any) -> list[Any]:
        """``parts`` followed by their MAC, as frames of one multipart message."""
        return [*parts, self.mac(*parts)]

    def open(self, frames: list[Any], expected_parts: int) -> list[memoryview]:
        """Verify ``frames`` (``expected_parts`` parts + MAC); return the parts."""
        if len(frames) != expected_parts + 1:
            raise MalformedMessageError(
                f"expected {expected_parts + 1} frames, got {len(frames)}"
            )
        parts = [memoryview(f) for f in frames[:-1]]
        given = bytes(memoryview(frames[-1]))
        if len(given) != MAC_SIZE or not hmac.compare_digest(given, self.mac(*parts)):
            raise AuthenticationError("message authentication failed")
        return parts

"""MVCC snapshots as transaction ids (``pg_current_snapshot()``): which committed
transactions a snapshot sees.

The initial snapshot reads each chunk of a table in its own snapshot and keeps its
``xmin:xmax:xip`` text. A committed transaction is visible to the snapshot when its id
is below ``xmin``, or below ``xmax`` and not in ``xip`` (PostgreSQL's
``XidInMVCCSnapshot``, for top-level ids, the ones pgoutput's ``Begin`` carries). So the
stream knows, for every change it reads, whether the chunk holding its key already shows
it: exactly, with no window of doubt to replay.
"""

from __future__ import annotations

from dataclasses import dataclass

_EPOCH = 1 << 32


@dataclass(frozen=True)
class XidSnapshot:
    """A snapshot's ``xmin``, ``xmax`` (64-bit ids, with their epoch) and the ids in
    progress when it was taken."""

    xmin: int
    xmax: int
    xip: frozenset[int]

    @classmethod
    def parse(cls, text: str) -> XidSnapshot:
        """From ``pg_current_snapshot()::text``: ``xmin:xmax:xip,xip,...``."""
        parts = text.split(":")
        if len(parts) != 3:
            raise ValueError(f"not a pg_snapshot: {text!r}")
        xip = frozenset(int(x) for x in parts[2].split(",") if x)
        return cls(int(parts[0]), int(parts[1]), xip)

    def __str__(self) -> str:
        return f"{self.xmin}:{self.xmax}:{','.join(str(x) for x in sorted(self.xip))}"

    def full_xid(self, xid32: int) -> int:
        """A 32-bit transaction id (as pgoutput sends it) widened with the epoch that puts
        it nearest to ``xmax`` (ids in use are within 2**31 of each other)."""
        full = (self.xmax & ~(_EPOCH - 1)) | xid32
        if full > self.xmax + (_EPOCH >> 1):
            full -= _EPOCH
        elif full < self.xmax - (_EPOCH >> 1):
            full += _EPOCH
        return full

    def sees(self, xid32: int) -> bool:
        """Whether the committed transaction ``xid32`` is visible to this snapshot."""
        xid = self.full_xid(xid32)
        return xid < self.xmin or (xid < self.xmax and xid not in self.xip)

    def sees_full(self, xid: int) -> bool:
        return xid < self.xmin or (xid < self.xmax and xid not in self.xip)

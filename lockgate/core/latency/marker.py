"""The latency marker: a small stream element a source sends after a batch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyMarker:
    """Sent by source subtask ``subtask`` of operator ``source`` right behind a batch it
    emitted, at most every ``ExecutionConfig.latency_tracking_interval_ms``.

    ``emitted_ms`` is the wall-clock time (epoch ms, the subtask's clock) at which the
    source *started* emitting that batch, so when a sink takes the marker, every record
    of that batch that went the marker's way has been written, and
    ``now - emitted_ms`` is that batch's latency on this path. ``seq`` numbers the
    markers of one source subtask (1, 2, ...): a task forwards each marker once even
    when copies arrive through several input channels.

    Like every control element it is immutable, picklable and never overtakes a record
    of its channel (M-E1).
    """

    emitted_ms: int
    source: str
    subtask: int
    seq: int

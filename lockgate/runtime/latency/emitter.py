"""The source side of latency tracking: one clock read per emitted batch."""

from __future__ import annotations

from collections.abc import Callable

from ...core.clock import Clock
from ...core.latency.marker import LatencyMarker
from ...errors import ConfigurationError


class MarkerEmitter:
    """Decides, per batch a source subtask emits, whether a latency marker follows it.

    The source calls :meth:`due_stamp` before it emits a batch (one wall-clock read
    and a comparison: the whole cost on the hot path) and, when that returned a
    stamp, :meth:`emit_after` once the batch went through its chain and into the
    output buffers. So at most one marker per ``interval_ms`` follows a batch, carrying
    the time that batch started on its way; an idle source sends none (the metric is
    the latency of records, not of an empty pipeline).
    """

    __slots__ = ("_clock", "_interval_ms", "_next_ms", "_source", "_subtask", "_seq", "_emit")

    def __init__(
        self,
        clock: Clock,
        interval_ms: int,
        source: str,
        subtask: int,
        emit: Callable[[LatencyMarker], None],
    ) -> None:
        if isinstance(interval_ms, bool) or not isinstance(interval_ms, int) or interval_ms <= 0:
            raise ConfigurationError(
                f"a latency marker emitter of source {source!r} needs a positive interval "
                f"in ms, got {interval_ms!r}"
            )
        self._clock = clock
        self._interval_ms = interval_ms
        self._next_ms = -(2**63)
        self._source = source
        self._subtask = subtask
        self._seq = 0
        self._emit = emit

    def due_stamp(self) -> int | None:
        """The wall-clock ms now when a marker is due behind the next batch, else None."""
        now = self._clock.time_ms()
        if now < self._next_ms:
            return None
        self._next_ms = now + self._interval_ms
        return now

    def emit_after(self, stamp: int) -> None:
        """Send the marker of the batch that started at ``stamp`` (behind it)."""
        self._seq += 1
        self._emit(LatencyMarker(stamp, self._source, self._subtask, self._seq))

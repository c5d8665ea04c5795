"""Watermark generators: they turn the event times of a stream into watermarks (M-W1, M-W2).

A :class:`WatermarkGenerator` sees event times a **batch at a time** -
:meth:`~WatermarkGenerator.on_events` gets the int64 timestamps (epoch ms) of one batch, in
record order - which is Flink's per-record ``onEvent`` applied to every record of the batch,
without a Python call per record. :meth:`~WatermarkGenerator.on_periodic_emit` is called
every periodic emission interval (``WatermarkStrategy.periodic_emit_interval_ms``).
A periodic generator emits from ``on_periodic_emit``; a punctuated one may emit from
``on_events``. Both write to a :class:`WatermarkOutput`.

Calling order a driver guarantees (and generators may rely on): ``on_events`` for a batch is
called **before** the batch is emitted downstream, so a generator that was idle can mark
itself active ahead of the records (M-W2: no record between IDLE and ACTIVE).

Generators are used by one thread (the task thread) and hold no locks. They are created per
split by ``WatermarkStrategy.create_generator`` and are not checkpointed: after a restore
they start again from nothing, as Flink's do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from ..core.clock import Clock, SystemClock
from ..core.durations import Duration, to_millis
from ..core.elements import MAX_WATERMARK, MIN_WATERMARK
from ..errors import ConfigurationError


class WatermarkOutput(Protocol):
    """Where watermarks and idleness go."""

    def emit_watermark(self, timestamp: int) -> None:
        """Event time has reached ``timestamp`` (ms). Also marks the output active."""

    def mark_idle(self) -> None:
        """No events are expected for a while; do not hold back event time for this output."""

    def mark_active(self) -> None:
        """Events flow again (called before they are emitted)."""


class WatermarkGenerator(Protocol):
    """Generates watermarks from the event times it is shown."""

    def on_events(self, timestamps: np.ndarray, output: WatermarkOutput) -> None:
        """``timestamps`` (int64 epoch ms, record order, possibly empty) of one batch."""

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        """Called every periodic emission interval; may emit a watermark."""


def _clamp(value: int) -> int:
    return max(MIN_WATERMARK, min(value, MAX_WATERMARK))


class NoWatermarks:
    """Emits nothing: event time of the stream stays at ``MIN_WATERMARK``."""

    def on_events(self, timestamps: np.ndarray, output: WatermarkOutput) -> None:
        pass

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        pass

    def __repr__(self) -> str:
        return "NoWatermarks()"


class BoundedOutOfOrdernessWatermarks:
    """Periodic watermark ``max seen timestamp - max_out_of_orderness - 1``.

    Guarantees: a record whose timestamp is at least ``max seen - max_out_of_orderness`` is
    never late with respect to the watermarks of this generator; the emitted watermark never
    goes back (it follows the maximum). Before the first non-empty batch nothing is emitted
    (event time stays at ``MIN_WATERMARK``). The watermark is clamped to the int64 range.
    """

    def __init__(self, max_out_of_orderness: Duration) -> None:
        self.max_out_of_orderness_ms = to_millis(max_out_of_orderness, "max_out_of_orderness")
        self._max_seen: int | None = None

    @property
    def current_watermark(self) -> int:
        """The watermark the next periodic emission carries (``MIN_WATERMARK`` before events)."""
        if self._max_seen is None:
            return MIN_WATERMARK
        return _clamp(self._max_seen - self.max_out_of_orderness_ms - 1)

    def on_events(self, timestamps: np.ndarray, output: WatermarkOutput) -> None:
        if len(timestamps):
            batch_max = int(timestamps.max())
            if self._max_seen is None or batch_max > self._max_seen:
                self._max_seen = batch_max

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        if self._max_seen is not None:
            output.emit_watermark(self.current_watermark)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_out_of_orderness={self.max_out_of_orderness_ms} ms)"


class AscendingTimestampsWatermarks(BoundedOutOfOrdernessWatermarks):
    """For timestamps that never decrease: watermark ``max seen - 1``.

    (``- 1`` because a later record may still carry the maximum timestamp itself.)
    """

    def __init__(self) -> None:
        super().__init__(0)

    def __repr__(self) -> str:
        return "AscendingTimestampsWatermarks()"


PunctuationFunction = Callable[[np.ndarray], "int | None"]


class PunctuatedWatermarks:
    """Emits while events arrive: ``fn(timestamps)`` of each non-empty batch decides.

    ``fn`` gets the batch's int64 timestamps and returns the watermark to emit right away
    (an int) or ``None`` for none. Nothing is emitted periodically. A return value that is
    neither an int nor ``None`` raises :class:`~lockgate.errors.ConfigurationError`.
    """

    def __init__(self, fn: PunctuationFunction) -> None:
        if not callable(fn):
            raise ConfigurationError(
                f"PunctuatedWatermarks needs a function of the batch's timestamps returning a "
                f"watermark (int) or None, got {fn!r}"
            )
        self.fn = fn

    def on_events(self, timestamps: np.ndarray, output: WatermarkOutput) -> None:
        if not len(timestamps):
            return
        mark = self.fn(timestamps)
        if mark is None:
            return
        if isinstance(mark, bool) or not isinstance(mark, (int, np.integer)):
            raise ConfigurationError(
                f"the punctuation function {self.fn!r} returned {mark!r} "
                f"({type(mark).__name__}); it must return a watermark as an int of "
                "epoch milliseconds, or None to emit nothing"
            )
        output.emit_watermark(_clamp(int(mark)))

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        pass

    def __repr__(self) -> str:
        return f"PunctuatedWatermarks({self.fn!r})"


class WatermarksWithIdleness:
    """Wraps ``generator`` and marks the output idle when events stop (M-W2).

    Guarantees, with ``now`` read from ``clock.monotonic_ms()``:

    * at a periodic emission, if no non-empty batch arrived for ``timeout`` ms (counted from
      the last one, or from the creation of this generator), the output is marked idle once,
      and ``generator`` is not asked to emit while idle;
    * the next non-empty batch marks the output active - before ``generator`` sees it, hence
      before its records are emitted - and periodic emission resumes.

    Empty batches are not activity.
    """

    def __init__(
        self, generator: WatermarkGenerator, timeout: Duration, clock: Clock | None = None
    ) -> None:
        self.timeout_ms = to_millis(timeout, "idleness timeout", allow_zero=False)
        self.generator = generator
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._last_activity_ms = self.clock.monotonic_ms()
        self._idle = False

    @property
    def is_idle(self) -> bool:
        return self._idle

    def on_events(self, timestamps: np.ndarray, output: WatermarkOutput) -> None:
        if not len(timestamps):
            return
        self._last_activity_ms = self.clock.monotonic_ms()
        if self._idle:
            self._idle = False
            output.mark_active()
        self.generator.on_events(timestamps, output)

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        if self._idle:
            return
        if self.clock.monotonic_ms() - self._last_activity_ms >= self.timeout_ms:
            self._idle = True
            output.mark_idle()
            return
        self.generator.on_periodic_emit(output)

    def __repr__(self) -> str:
        return f"WatermarksWithIdleness({self.generator!r}, timeout={self.timeout_ms} ms)"

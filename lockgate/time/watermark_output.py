"""Per-split watermarks of a source, combined into the source's watermark (M-W1, M-W2).

A source subtask reads several splits at once; each has its own generator and its own
:class:`~lockgate.time.watermark_generators.WatermarkOutput`, handed out by a
:class:`WatermarkOutputMultiplexer`. The subtask's (combined) watermark is the minimum over
the splits that are not idle, so a lagging split holds back only that minimum, and an idle
split holds back nothing. :class:`PerSplitWatermarks` puts a strategy, its generators and the
multiplexer together for a source reader.

Per split there are two outputs, as in Flink:

* the **immediate** output recomputes the combined watermark on every call - for what
  generators emit while seeing events (punctuated watermarks);
* the **deferred** output only records the split's state; the combined watermark is
  recomputed at :meth:`WatermarkOutputMultiplexer.on_periodic_emit` (called once after every
  split's generator had its periodic emission), so N splits cost one recomputation.

Either way, a split that becomes active makes an idle combined output active **at once**, so
ACTIVE always precedes the records that follow (M-W2).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from ..core.batch import Batch, num_rows, timestamps_of
from ..core.clock import Clock, SystemClock
from ..core.elements import MAX_WATERMARK, MIN_WATERMARK
from ..errors import ConfigurationError
from .watermark_generators import WatermarkGenerator, WatermarkOutput
from .watermark_strategy import WatermarkStrategy


class _SplitState:
    __slots__ = ("idle", "registered", "watermark")

    def __init__(self) -> None:
        self.watermark = MIN_WATERMARK
        self.idle = False
        self.registered = True


class _SplitOutput:
    """The WatermarkOutput of one split; calls after the split was unregistered are ignored."""

    __slots__ = ("_activated", "_changed", "_immediate", "_state")

    def __init__(
        self,
        state: _SplitState,
        immediate: bool,
        changed: Callable[[], None],
        activated: Callable[[], None],
    ) -> None:
        self._state = state
        self._immediate = immediate
        self._changed = changed
        self._activated = activated

    def emit_watermark(self, timestamp: int) -> None:
        state = self._state
        if not state.registered:
            return
        state.watermark = max(state.watermark, int(timestamp))
        self._activate(state)

    def mark_idle(self) -> None:
        state = self._state
        if not state.registered or state.idle:
            return
        state.idle = True
        if self._immediate:
            self._changed()

    def mark_active(self) -> None:
        state = self._state
        if state.registered:
            self._activate(state)

    def _activate(self, state: _SplitState) -> None:
        was_idle, state.idle = state.idle, False
        if self._immediate:
            self._changed()
        elif was_idle:
            self._activated()


class WatermarkOutputMultiplexer:
    """Combines per-split watermark outputs into ``output`` (M-W1, M-W2).

    Guarantees on ``output``:

    * a watermark is emitted only when it advances; it is the minimum of the watermarks of
      the registered splits that are not idle (a split's watermark is the largest it
      emitted; a new split starts at ``MIN_WATERMARK``);
    * when no registered split is active (all idle, or none registered) ``output`` is marked
      idle; it is marked active again before anything else is emitted. Idle and active
      alternate; no watermark is emitted while idle;
    * :meth:`finish` (the source ended) emits ``MAX_WATERMARK`` - after marking active if it
      was idle - never IDLE (M-W2); afterwards nothing more is emitted.

    Not thread-safe: use it from the task thread.
    """

    def __init__(self, output: WatermarkOutput) -> None:
        self._output = output
        self._splits: dict[Hashable, _SplitState] = {}
        self._outputs: dict[Hashable, tuple[_SplitOutput, _SplitOutput]] = {}
        self._combined = MIN_WATERMARK
        self._idle = False
        self._finished = False

    # -- splits ------------------------------------------------------------------------------

    def register(self, split_id: Hashable) -> None:
        """Adds a split (active, at ``MIN_WATERMARK``); an idle combined output turns active."""
        if self._finished:
            raise ConfigurationError(
                f"cannot register split {split_id!r}: the source has finished (finish() was "
                "called); register every split before finishing"
            )
        if split_id in self._splits:
            raise ConfigurationError(
                f"split {split_id!r} is already registered; unregister it before registering "
                "it again"
            )
        state = _SplitState()
        self._splits[split_id] = state
        self._outputs[split_id] = (
            _SplitOutput(state, True, self._update, self._activate),
            _SplitOutput(state, False, self._update, self._activate),
        )
        self._update()

    def unregister(self, split_id: Hashable) -> bool:
        """Removes a finished split (it stops holding back the combined watermark, which is
        recomputed at once). Returns whether the split was registered."""
        state = self._splits.pop(split_id, None)
        if state is None:
            return False
        state.registered = False
        del self._outputs[split_id]
        self._update()
        return True

    def immediate_output(self, split_id: Hashable) -> WatermarkOutput:
        """The split's output that updates the combined watermark on every call."""
        return self._outputs_of(split_id)[0]

    def deferred_output(self, split_id: Hashable) -> WatermarkOutput:
        """The split's output whose watermarks and idleness take effect at the next
        :meth:`on_periodic_emit` (activation takes effect at once)."""
        return self._outputs_of(split_id)[1]

    def _outputs_of(self, split_id: Hashable) -> tuple[_SplitOutput, _SplitOutput]:
        try:
            return self._outputs[split_id]
        except KeyError:
            raise ConfigurationError(
                f"split {split_id!r} is not registered; register(split_id) it first "
                f"(registered: {list(self._splits)!r})"
            ) from None

    # -- combined output ---------------------------------------------------------------------

    def on_periodic_emit(self) -> None:
        """Applies the deferred updates of all splits: recomputes the combined output."""
        self._update()

    def finish(self) -> None:
        """The source ended: emit ``MAX_WATERMARK`` (marking active first if idle), not IDLE."""
        if self._finished:
            return
        self._finished = True
        if self._idle:
            self._idle = False
            self._output.mark_active()
        if self._combined < MAX_WATERMARK:
            self._combined = MAX_WATERMARK
            self._output.emit_watermark(MAX_WATERMARK)

    @property
    def current_watermark(self) -> int:
        """The last combined watermark emitted (``MIN_WATERMARK`` before any) (M-W1 metric)."""
        return self._combined

    @property
    def is_idle(self) -> bool:
        """Whether the combined output is idle."""
        return self._idle

    @property
    def is_finished(self) -> bool:
        return self._finished

    @property
    def split_ids(self) -> list[Hashable]:
        return list(self._splits)

    def split_watermark(self, split_id: Hashable) -> int:
        """The largest watermark the split emitted so far (``MIN_WATERMARK`` before any)."""
        self._outputs_of(split_id)
        return self._splits[split_id].watermark

    def split_is_idle(self, split_id: Hashable) -> bool:
        self._outputs_of(split_id)
        return self._splits[split_id].idle

    def _activate(self) -> None:
        if self._idle and not self._finished:
            self._idle = False
            self._output.mark_active()

    def _update(self) -> None:
        if self._finished:
            return
        minimum: int | None = None
        for state in self._splits.values():
            if not state.idle and (minimum is None or state.watermark < minimum):
                minimum = state.watermark
        if minimum is None:
            if not self._idle:
                self._idle = True
                self._output.mark_idle()
            return
        if self._idle:
            self._idle = False
            self._output.mark_active()
        if minimum > self._combined:
            self._combined = minimum
            self._output.emit_watermark(minimum)


class PerSplitWatermarks:
    """The watermarks of one source subtask: a generator per split from ``strategy``,
    combined by a :class:`WatermarkOutputMultiplexer` into ``output`` (M-W1, M-W2).

    The reader calls :meth:`add_split` for each split it starts, :meth:`on_batch` with each
    batch **before** emitting it, :meth:`emit_periodic_if_due` from its loop (its
    :meth:`ms_until_periodic_emit` bounds how long the loop may wait), :meth:`finish_split`
    when a split is exhausted and :meth:`finish` when the source ends.
    """

    def __init__(
        self, strategy: WatermarkStrategy, output: WatermarkOutput, clock: Clock | None = None
    ) -> None:
        self.strategy = strategy
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.multiplexer = WatermarkOutputMultiplexer(output)
        self._generators: dict[Hashable, WatermarkGenerator] = {}
        self._interval_ms = strategy.periodic_emit_interval_ms
        self._next_emit_ms = self.clock.monotonic_ms() + self._interval_ms

    def add_split(self, split_id: Hashable) -> None:
        self.multiplexer.register(split_id)
        self._generators[split_id] = self.strategy.create_generator(self.clock)

    def on_batch(self, split_id: Hashable, batch: Batch) -> np.ndarray | None:
        """Shows ``batch`` of split ``split_id`` to its generator; returns its event times
        (None for a strategy without watermarks and without an assigner). Without an
        assigner, a strategy that generates watermarks uses the timestamps the records
        already carry (assigned upstream, as Flink does); records without any are an
        error saying how to assign them."""
        if self.strategy.timestamp_assigner is None:
            existing = timestamps_of(batch)
            if existing is not None and self.strategy.generates_watermarks:
                self.on_timestamps(split_id, existing)
                return existing
            if self.strategy.generates_watermarks and num_rows(batch):
                raise ConfigurationError(
                    f"{self.strategy!r} generates watermarks, but it has no timestamp "
                    "assigner and the records carry no event timestamps: call "
                    ".with_timestamp_assigner(column_name or fn(record) -> int ms) on it"
                )
            # no watermarks and no event times: only activity matters (idleness)
            self.on_timestamps(split_id, np.zeros(min(num_rows(batch), 1), dtype=np.int64))
            return None
        timestamps = self.strategy.timestamps_of(batch)
        self.on_timestamps(split_id, timestamps)
        return timestamps

    def on_timestamps(self, split_id: Hashable, timestamps: np.ndarray) -> None:
        """Like :meth:`on_batch`, for event times the reader already has."""
        generator = self._generators.get(split_id)
        if generator is None:
            self.multiplexer.immediate_output(split_id)  # raises: not registered
            return
        generator.on_events(timestamps, self.multiplexer.immediate_output(split_id))

    def on_periodic_emit(self) -> None:
        """Every split's periodic emission, then one recomputation of the combined output."""
        for split_id, generator in self._generators.items():
            generator.on_periodic_emit(self.multiplexer.deferred_output(split_id))
        self.multiplexer.on_periodic_emit()

    def emit_periodic_if_due(self) -> bool:
        """Runs :meth:`on_periodic_emit` if the periodic interval has passed; returns whether."""
        now = self.clock.monotonic_ms()
        if now < self._next_emit_ms:
            return False
        self._next_emit_ms = now + self._interval_ms
        self.on_periodic_emit()
        return True

    def ms_until_periodic_emit(self) -> float:
        return max(0.0, self._next_emit_ms - self.clock.monotonic_ms())

    def finish_split(self, split_id: Hashable) -> None:
        """The split is exhausted: its generator goes, and it no longer holds back the
        combined watermark."""
        self._generators.pop(split_id, None)
        self.multiplexer.unregister(split_id)

    def finish(self) -> None:
        """The source ended: ``MAX_WATERMARK`` (not IDLE) (M-W2)."""
        self._generators.clear()
        self.multiplexer.finish()

    @property
    def current_watermark(self) -> int:
        return self.multiplexer.current_watermark

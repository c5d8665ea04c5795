"""Watermark progress at a task's inputs: the status/watermark valve (M-W3, M-W4) and the
combiner of a multi-input operator (M-W5).

Both are pure, single-threaded state machines: they are fed elements and return what to
emit; they neither read channels nor call operators. Watermarks are not checkpointed
(as in Flink), so neither has a snapshot: after a restore both start afresh.

:class:`StatusWatermarkValve` merges the watermarks and stream statuses of the channels of
one logical input into one watermark and one status. Its guarantees:

* the watermarks it emits strictly increase, and each is the watermark of some channel
  (a finished channel's is ``MAX_WATERMARK``);
* it emits no watermark while it is idle, and its statuses alternate, IDLE first;
* an idle channel, and an active one whose watermark is behind the last output, do not
  hold the output back (M-W3, M-W4).

:class:`MultiInputWatermark` merges the output watermarks of an operator's logical inputs
(each usually the output of one valve): it yields the minimum over its non-idle inputs
whenever that minimum advances (M-W5).

Decisions the rule text leaves open (documented again where they apply):

* A channel that ends (end of partition) counts as a channel that sent
  ``MAX_WATERMARK``, as Flink treats a finished input (M-W2: a source that ends sends
  MAX, not IDLE): :meth:`StatusWatermarkValve.channel_finished`.
* When the last active channel goes idle, the valve flushes the maximum watermark over
  all channels whenever that advances the output. M-W4 notes the flush is "only needed"
  when that channel held the minimum; this is an optimisation Flink applies, and it misses
  one case (a channel that resumed ahead of the output and goes idle again before any
  further watermark), so the valve checks the maximum unconditionally.
* A channel going ACTIVE never emits a watermark by itself (exactly M-W4, as in Flink):
  the output moves with the next watermark or status change that recomputes it.
* When all inputs of a :class:`MultiInputWatermark` are idle, its watermark holds (no
  flush to the maximum, as Flink's combined watermark status does): each input's valve
  already flushed its own channels before reporting IDLE.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

from ..core.elements import MAX_WATERMARK, MIN_WATERMARK, StreamStatus, Watermark
from ..errors import ConfigurationError, CorruptStreamError

ValveOutput = Watermark | StreamStatus
"""An element a valve or a combiner asks its caller to emit."""

_IDLE = StreamStatus.IDLE
_ACTIVE = StreamStatus.ACTIVE


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < 1:
        raise ConfigurationError(f"{what} must be an int of 1 or more, got {value!r}")
    return int(value)


def _index(value: object, size: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or not 0 <= int(value) < size:
        raise ConfigurationError(f"{what} must be an int from 0 to {size - 1}, got {value!r}")
    return int(value)


def _timestamp(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigurationError(
            f"a watermark timestamp must be an int of milliseconds, got {value!r}"
        )
    ts = int(value)
    if not MIN_WATERMARK <= ts <= MAX_WATERMARK:
        raise ConfigurationError(
            f"a watermark timestamp must lie in [MIN_WATERMARK, MAX_WATERMARK], got {ts}"
        )
    return ts


def _status(value: object) -> StreamStatus:
    if not isinstance(value, StreamStatus):
        raise ConfigurationError(
            f"a stream status must be StreamStatus.IDLE or StreamStatus.ACTIVE, got {value!r}"
        )
    return value


@dataclass
class _Channel:
    watermark: int = MIN_WATERMARK
    status: StreamStatus = _ACTIVE
    aligned: bool = True
    finished: bool = False


class StatusWatermarkValve:
    """Merges the watermarks and statuses of ``num_channels`` channels (M-W3, M-W4).

    Every channel starts ACTIVE, aligned, at ``MIN_WATERMARK``; so does the output.
    ``input_watermark``, ``input_status`` and ``channel_finished`` return the elements to
    emit downstream, in order (possibly none). The valve is idle exactly when every
    channel is idle. Bad arguments raise :class:`~lockgate.errors.ConfigurationError`;
    an element for a channel that already finished raises
    :class:`~lockgate.errors.CorruptStreamError`.
    """

    def __init__(self, num_channels: int) -> None:
        n = _count(num_channels, "num_channels of a StatusWatermarkValve")
        self._channels = [_Channel() for _ in range(n)]
        self._active = n
        self._last_output = MIN_WATERMARK

    # -- accessors -----------------------------------------------------------------

    @property
    def num_channels(self) -> int:
        return len(self._channels)

    @property
    def last_output_watermark(self) -> int:
        """The last watermark the valve emitted (``MIN_WATERMARK`` before the first)."""
        return self._last_output

    @property
    def is_idle(self) -> bool:
        """Whether the last status the valve emitted is IDLE (every channel is idle)."""
        return self._active == 0

    def channel_watermark(self, channel: int) -> int:
        """The highest watermark ``channel`` sent that the valve accepted."""
        return self._channel(channel).watermark

    def channel_status(self, channel: int) -> StreamStatus:
        return self._channel(channel).status

    def is_channel_aligned(self, channel: int) -> bool:
        """Whether ``channel`` takes part in the minimum (M-W3)."""
        return self._channel(channel).aligned

    def is_channel_finished(self, channel: int) -> bool:
        return self._channel(channel).finished

    def holding_back(self) -> int | None:
        """The channel the output watermark waits for: the aligned channel with the lowest
        watermark (the lowest index among equals). ``None`` when no channel is aligned
        (all idle, or all active ones behind the output) or every aligned channel is at
        ``MAX_WATERMARK`` (event time has ended there)."""
        best: int | None = None
        for i, c in enumerate(self._channels):
            if c.aligned and (best is None or c.watermark < self._channels[best].watermark):
                best = i
        if best is None or self._channels[best].watermark == MAX_WATERMARK:
            return None
        return best

    # -- input ----------------------------------------------------------------------

    def input_watermark(self, watermark_ts: int, channel: int) -> list[ValveOutput]:
        """Feed a watermark of ``channel`` (M-W3).

        Ignored when the channel (hence possibly the valve) is idle or when it does not
        advance the channel. Otherwise the channel's watermark moves; an unaligned channel
        that reached the last output is aligned again; the output becomes the minimum over
        aligned channels if that advances it.
        """
        ts = _timestamp(watermark_ts)
        c = self._open(channel)
        if c.status is _IDLE or ts <= c.watermark:
            return []
        c.watermark = ts
        if not c.aligned and ts >= self._last_output:
            c.aligned = True
        return self._emit_min_of_aligned()

    def input_status(self, status: StreamStatus, channel: int) -> list[ValveOutput]:
        """Feed a stream status of ``channel`` (M-W4); a status the channel has is ignored.

        ACTIVE -> IDLE: the channel is unaligned. If it was the last active channel, the
        valve emits the maximum watermark over all channels (when that advances) and then
        IDLE. Otherwise, if the channel held the output (its watermark equals the last
        output), the output becomes the minimum over the aligned channels left, if that
        advances it.

        IDLE -> ACTIVE: the channel is aligned again if its watermark is at least the last
        output; if the valve was idle it emits ACTIVE. No watermark is emitted.
        """
        st = _status(status)
        c = self._open(channel)
        if st is c.status:
            return []
        if st is _ACTIVE:
            return self._activate(c)
        c.status = _IDLE
        c.aligned = False
        self._active -= 1
        if self._active == 0:
            out = self._emit_if_advances(max(ch.watermark for ch in self._channels))
            out.append(_IDLE)
            return out
        if c.watermark == self._last_output:
            return self._emit_min_of_aligned()
        return []

    def channel_finished(self, channel: int) -> list[ValveOutput]:
        """``channel`` ended (end of partition): it counts as having sent
        ``MAX_WATERMARK``, as Flink treats a finished input.

        An idle channel becomes ACTIVE first (M-W2: an ending source sends MAX, not IDLE),
        so an idle valve emits ACTIVE. The channel is then at ``MAX_WATERMARK`` and aligned,
        and the output becomes the minimum over aligned channels if that advances it. As
        idle channels never hold the output back, the output reaches ``MAX_WATERMARK`` once
        every channel has finished or is idle. The channel accepts nothing afterwards.
        """
        c = self._open(channel)
        out = self._activate(c) if c.status is _IDLE else []
        c.watermark = MAX_WATERMARK
        c.aligned = True
        c.finished = True
        out.extend(self._emit_min_of_aligned())
        return out

    # -- internals ------------------------------------------------------------------

    def _channel(self, channel: int) -> _Channel:
        return self._channels[_index(channel, len(self._channels), "a valve channel index")]

    def _open(self, channel: int) -> _Channel:
        c = self._channel(channel)
        if c.finished:
            raise CorruptStreamError(
                f"channel {channel} of the watermark valve already finished; it cannot carry "
                "more watermarks or statuses"
            )
        return c

    def _activate(self, c: _Channel) -> list[ValveOutput]:
        was_idle = self._active == 0
        c.status = _ACTIVE
        self._active += 1
        if c.watermark >= self._last_output:
            c.aligned = True
        return [_ACTIVE] if was_idle else []

    def _emit_min_of_aligned(self) -> list[ValveOutput]:
        aligned = [c.watermark for c in self._channels if c.aligned]
        return self._emit_if_advances(min(aligned)) if aligned else []

    def _emit_if_advances(self, ts: int) -> list[ValveOutput]:
        if ts <= self._last_output:
            return []
        self._last_output = ts
        return [Watermark(ts)]


class MultiInputWatermark:
    """The watermark of an operator with ``num_inputs`` logical inputs (M-W5).

    Each input has a watermark (starts at ``MIN_WATERMARK``) and a status (starts ACTIVE).
    The combined watermark is the minimum over the non-idle inputs; the operator processes
    it (fires timers, forwards it) only when it advances, so the values handed out strictly
    increase. Idle inputs are excluded from the minimum, as Flink does for idle inputs of
    multi-input operators. When every input is idle the combined watermark holds (no flush
    to the maximum) and the combiner is idle; it resumes with the first input that turns
    ACTIVE. A watermark arriving on an idle input is recorded and counts once the input is
    active again. A watermark that does not advance its input is ignored. Bad arguments
    raise :class:`~lockgate.errors.ConfigurationError`.
    """

    def __init__(self, num_inputs: int) -> None:
        n = _count(num_inputs, "num_inputs of a MultiInputWatermark")
        self._watermarks = [MIN_WATERMARK] * n
        self._idle = [False] * n
        self._combined = MIN_WATERMARK

    @property
    def num_inputs(self) -> int:
        return len(self._watermarks)

    @property
    def combined_watermark(self) -> int:
        """The last watermark handed out for processing (``MIN_WATERMARK`` before the first)."""
        return self._combined

    @property
    def is_idle(self) -> bool:
        """Whether every input is idle."""
        return all(self._idle)

    def input_watermark_of(self, input_index: int) -> int:
        return self._watermarks[self._input(input_index)]

    def is_input_idle(self, input_index: int) -> bool:
        return self._idle[self._input(input_index)]

    def holding_back(self) -> int | None:
        """The non-idle input with the lowest watermark (lowest index among equals);
        ``None`` when all inputs are idle or every active one is at ``MAX_WATERMARK``."""
        active = [i for i, idle in enumerate(self._idle) if not idle]
        if not active:
            return None
        best = min(active, key=lambda i: self._watermarks[i])
        return None if self._watermarks[best] == MAX_WATERMARK else best

    def input_watermark(self, watermark_ts: int, input_index: int) -> int | None:
        """Feed the watermark of an input; return the combined watermark to process, or
        ``None`` when it does not advance."""
        ts = _timestamp(watermark_ts)
        i = self._input(input_index)
        if ts <= self._watermarks[i]:
            return None
        self._watermarks[i] = ts
        return None if self._idle[i] else self._advance()

    def input_status(self, status: StreamStatus, input_index: int) -> list[ValveOutput]:
        """Feed the status of an input; return what to do, in order: a ``Watermark`` to
        process (fire timers, then forward) and/or the combiner's new ``StreamStatus`` to
        forward. IDLE of the last active input yields ``[IDLE]``; IDLE of another input
        may yield a watermark (the input no longer holds the minimum back); ACTIVE of the
        first input of an idle combiner yields ``[ACTIVE]`` possibly followed by a
        watermark. A status the input already has is ignored."""
        st = _status(status)
        i = self._input(input_index)
        if (st is _IDLE) == self._idle[i]:
            return []
        was_idle = self.is_idle
        self._idle[i] = st is _IDLE
        out: list[ValveOutput] = []
        if was_idle:
            out.append(_ACTIVE)
        ts = None if self.is_idle else self._advance()
        if ts is not None:
            out.append(Watermark(ts))
        if self.is_idle:
            out.append(_IDLE)
        return out

    def _input(self, input_index: int) -> int:
        return _index(input_index, len(self._watermarks), "an operator input index")

    def _advance(self) -> int | None:
        low = min(wm for wm, idle in zip(self._watermarks, self._idle) if not idle)
        if low <= self._combined:
            return None
        self._combined = low
        return low

"""Time windows and the assigners that put records into them.

A :class:`TimeWindow` is the half-open interval ``[start, end)`` of epoch
milliseconds. A window assigner maps each record's timestamp to the windows it
belongs to, a whole batch at a time::

    rows, starts, ends = TumblingEventTimeWindows.of(timedelta(seconds=1)).assign(ts)

``assign`` returns a :class:`WindowAssignment`: one row per (record, window)
pair, ``rows`` indexing the input. Rows are ordered by record, then by window
start, so a record's windows are contiguous and records keep their order.
Tumbling and session assigners give exactly one row per record (``rows`` is
``arange(n)``); sliding assigners give ``ceil(size / slide)`` or
``floor(size / slide)`` rows per record, and none for a record that falls in a
gap when ``slide > size``.

Window starts are aligned to the epoch plus ``offset``: a tumbling window of
size ``s`` starts at ``k * s + offset`` for an integer ``k`` (floor semantics,
also for negative timestamps). Session assigners give each record the window
``[t, t + gap)``; windows of one key that overlap *or touch* are merged into
one session (:mod:`lockgate.windowing.session_merge`), so records at most ``gap``
apart share a session.

Processing-time assigners compute the same windows from the processing time
the operator passes in (typically one value for a whole batch); only
``is_event_time`` tells them apart, and with it which clock fires the windows.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, NamedTuple, TypeVar

import numpy as np

from ..core.durations import Duration, to_millis
from ..errors import ConfigurationError

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

_T = TypeVar("_T", bound="_Tumbling")
_S = TypeVar("_S", bound="_Sliding")
_G = TypeVar("_G", bound="_Session")


@dataclass(frozen=True, order=True)
class TimeWindow:
    """The half-open interval ``[start, end)`` of epoch milliseconds.

    Immutable, hashable and ordered by ``(start, end)``. ``end`` must be greater
    than ``start``.
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ConfigurationError(
                    f"TimeWindow {name} must be an int of epoch milliseconds, got {value!r}"
                )
            object.__setattr__(self, name, int(value))
        if self.end <= self.start:
            raise ConfigurationError(
                f"TimeWindow end must be greater than start, got [{self.start}, {self.end}); "
                "a window holds the timestamps start <= t < end"
            )

    def max_timestamp(self) -> int:
        """The largest timestamp the window holds: ``end - 1``. An event-time
        window is complete once the watermark reaches it."""
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        """Whether the two windows overlap or touch (``[0, 5)`` and ``[5, 9)`` do):
        the condition under which session windows merge."""
        return self.start <= other.end and other.start <= self.end

    def cover(self, other: TimeWindow) -> TimeWindow:
        """The smallest window holding both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    def __contains__(self, timestamp: object) -> bool:
        return isinstance(timestamp, (int, np.integer)) and bool(self.start <= timestamp < self.end)

    def __repr__(self) -> str:
        return f"TimeWindow({self.start}, {self.end})"


class WindowAssignment(NamedTuple):
    """The windows of a batch of records: row ``i`` puts record ``row_index[i]``
    into ``[window_start[i], window_end[i])``. All three are int64 arrays of one
    length, ordered by record, then by window start."""

    row_index: np.ndarray
    window_start: np.ndarray
    window_end: np.ndarray


def window_start(timestamps: np.ndarray, size: int, offset: int = 0) -> np.ndarray:
    """The start of the size-``size`` window (aligned to ``offset``) holding each
    timestamp: the largest ``k * size + offset <= t``. Works on negative timestamps."""
    return timestamps - np.mod(timestamps - offset, size)


def as_timestamps(timestamps: object, what: str = "timestamps") -> np.ndarray:
    """``timestamps`` as a 1-D int64 array of epoch milliseconds.

    Accepts integer arrays (and sequences) and ``datetime64`` arrays (converted
    to milliseconds). Rejects anything else with a :class:`ConfigurationError`.
    """
    array = np.asarray(timestamps)
    if array.ndim != 1:
        raise ConfigurationError(
            f"{what} must be a 1-D array of epoch milliseconds, got shape {array.shape}"
        )
    kind = array.dtype.kind
    if kind == "M":
        return array.astype("datetime64[ms]").view(np.int64)
    if kind == "u" and array.size and int(array.max()) > _INT64_MAX:
        raise ConfigurationError(f"{what} hold values beyond int64; pass epoch milliseconds")
    if kind in "iu" or (kind in "f" and array.size == 0) or (kind == "O" and array.size == 0):
        return array.astype(np.int64, copy=False)
    raise ConfigurationError(
        f"{what} must be integers (epoch milliseconds) or datetime64, got dtype {array.dtype}; "
        "convert floats or strings to int64 milliseconds first"
    )


def _offset_millis(value: Duration, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (timedelta, int)):
        raise ConfigurationError(
            f"{what} must be a datetime.timedelta or an int of milliseconds, got {value!r}"
        )
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    return value


def _check_int(value: object, what: str, *, positive: bool) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{what} must be an int of milliseconds, got {value!r}")
    if positive and value <= 0:
        raise ConfigurationError(f"{what} must be positive, got {value!r}")
    return value


class WindowAssigner(abc.ABC):
    """Maps record timestamps to time windows, a batch at a time."""

    #: whether windows are measured (and fired) in event time; else processing time
    is_event_time: ClassVar[bool]
    #: whether windows of one key merge (session windows)
    is_merging: ClassVar[bool] = False

    @abc.abstractmethod
    def assign(self, timestamps: np.ndarray) -> WindowAssignment:
        """The windows of each timestamp (see the module docstring for the order).

        Raises :class:`ConfigurationError` for timestamps that are not integers
        or so close to the int64 limits that a window bound would overflow.
        """

    def _timestamps(self, timestamps: np.ndarray, below: int, above: int) -> np.ndarray:
        """Validated timestamps; window bounds reach ``below`` ms under and
        ``above`` ms over a timestamp and must stay in int64."""
        ts = as_timestamps(timestamps)
        if ts.size:
            lo, hi = int(ts.min()), int(ts.max())
            if lo - below < _INT64_MIN or hi + above > _INT64_MAX:
                bad = lo if lo - below < _INT64_MIN else hi
                hint = (
                    " (the minimum int64 marks a record without a timestamp: assign "
                    "timestamps and watermarks before an event-time window)"
                    if self.is_event_time and bad == _INT64_MIN
                    else ""
                )
                raise ConfigurationError(
                    f"{type(self).__name__} cannot window timestamp {bad}: its window "
                    f"would leave the int64 range{hint}"
                )
        return ts


def _single(ts: np.ndarray, start: np.ndarray, end: np.ndarray) -> WindowAssignment:
    return WindowAssignment(np.arange(len(ts), dtype=np.int64), start, end)


@dataclass(frozen=True)
class _Tumbling(WindowAssigner):
    size: int
    offset: int = 0

    def __post_init__(self) -> None:
        name = type(self).__name__
        _check_int(self.size, f"{name} size", positive=True)
        _check_int(self.offset, f"{name} offset", positive=False)
        if abs(self.offset) >= self.size:
            raise ConfigurationError(
                f"{name} offset must lie strictly between -size and size, got offset "
                f"{self.offset} ms for size {self.size} ms"
            )

    @classmethod
    def of(cls: type[_T], size: Duration, offset: Duration = 0) -> _T:
        """Windows of ``size`` (a timedelta or int ms) starting at ``k * size + offset``;
        ``offset`` (may be negative, ``|offset| < size``) shifts them, e.g. to a time zone."""
        name = cls.__name__
        return cls(
            to_millis(size, f"{name} size", allow_zero=False),
            _offset_millis(offset, f"{name} offset"),
        )

    def assign(self, timestamps: np.ndarray) -> WindowAssignment:
        ts = self._timestamps(timestamps, self.size, self.size)
        start = window_start(ts, self.size, self.offset)
        return _single(ts, start, start + self.size)


@dataclass(frozen=True)
class _Sliding(WindowAssigner):
    size: int
    slide: int
    offset: int = 0

    def __post_init__(self) -> None:
        name = type(self).__name__
        _check_int(self.size, f"{name} size", positive=True)
        _check_int(self.slide, f"{name} slide", positive=True)
        _check_int(self.offset, f"{name} offset", positive=False)
        if abs(self.offset) >= self.slide:
            raise ConfigurationError(
                f"{name} offset must lie strictly between -slide and slide, got offset "
                f"{self.offset} ms for slide {self.slide} ms"
            )

    @classmethod
    def of(cls: type[_S], size: Duration, slide: Duration, offset: Duration = 0) -> _S:
        """Windows of ``size`` starting every ``slide`` (at ``k * slide + offset``);
        a record is in every window that holds its timestamp. ``slide > size``
        leaves gaps no window covers."""
        name = cls.__name__
        return cls(
            to_millis(size, f"{name} size", allow_zero=False),
            to_millis(slide, f"{name} slide", allow_zero=False),
            _offset_millis(offset, f"{name} offset"),
        )

    @property
    def windows_per_record(self) -> int:
        """The most windows one record can fall in: ``ceil(size / slide)``."""
        return -(-self.size // self.slide)

    def assign(self, timestamps: np.ndarray) -> WindowAssignment:
        ts = self._timestamps(timestamps, self.size + self.slide, self.size + self.slide)
        last = window_start(ts, self.slide, self.offset)
        k = self.windows_per_record
        if k == 1 and self.size == self.slide:
            return _single(ts, last, last + self.size)
        # column j holds the j-th window of each record, oldest first
        steps = np.arange(k - 1, -1, -1, dtype=np.int64) * self.slide
        starts = last[:, None] - steps[None, :]
        rows = np.repeat(np.arange(len(ts), dtype=np.int64), k)
        flat = starts.ravel()
        if self.size % self.slide:
            keep = (starts > (ts - self.size)[:, None]).ravel()
            rows, flat = rows[keep], flat[keep]
        return WindowAssignment(rows, flat, flat + self.size)


@dataclass(frozen=True)
class _Session(WindowAssigner):
    gap: int
    is_merging: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_int(self.gap, f"{type(self).__name__} gap", positive=True)

    @classmethod
    def with_gap(cls: type[_G], gap: Duration) -> _G:
        """Sessions closed by ``gap`` (a timedelta or int ms) of inactivity: each
        record gets ``[t, t + gap)`` and a key's overlapping or touching windows merge."""
        return cls(to_millis(gap, f"{cls.__name__} gap", allow_zero=False))

    def assign(self, timestamps: np.ndarray) -> WindowAssignment:
        ts = self._timestamps(timestamps, 0, self.gap)
        return _single(ts, ts.copy(), ts + self.gap)


@dataclass(frozen=True)
class TumblingEventTimeWindows(_Tumbling):
    """Fixed-size, non-overlapping event-time windows."""

    is_event_time: ClassVar[bool] = True


@dataclass(frozen=True)
class TumblingProcessingTimeWindows(_Tumbling):
    """Fixed-size, non-overlapping processing-time windows."""

    is_event_time: ClassVar[bool] = False


@dataclass(frozen=True)
class SlidingEventTimeWindows(_Sliding):
    """Fixed-size event-time windows starting every ``slide``."""

    is_event_time: ClassVar[bool] = True


@dataclass(frozen=True)
class SlidingProcessingTimeWindows(_Sliding):
    """Fixed-size processing-time windows starting every ``slide``."""

    is_event_time: ClassVar[bool] = False


@dataclass(frozen=True)
class EventTimeSessionWindows(_Session):
    """Event-time sessions: a key's records at most ``gap`` apart share a window."""

    is_event_time: ClassVar[bool] = True


@dataclass(frozen=True)
class ProcessingTimeSessionWindows(_Session):
    """Processing-time sessions: ``[now, now + gap)`` per record, merged per key."""

    is_event_time: ClassVar[bool] = False


__all__ = [
    "EventTimeSessionWindows",
    "ProcessingTimeSessionWindows",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "TimeWindow",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "WindowAssigner",
    "WindowAssignment",
    "as_timestamps",
    "window_start",
]

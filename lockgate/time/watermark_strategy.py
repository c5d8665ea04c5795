"""Watermark strategies: how a stream gets event times and watermarks (M-W1, M-W2).

A :class:`WatermarkStrategy` is an immutable, picklable description - which generator, which
timestamp assigner, idleness, the periodic emission interval - from which every split (or
subtask) creates its own generator with :meth:`WatermarkStrategy.create_generator`::

    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=5))
                .with_timestamp_assigner("event_time")
                .with_idleness(timedelta(minutes=1)))

The timestamp assigner is either a column name (read vectorized from Arrow batches; integer
columns are epoch ms, Arrow ``timestamp`` columns of any unit and ``date`` columns are
converted to epoch ms) or a function ``fn(record) -> int`` of epoch ms applied to each record
as row functions see it (a dict, or the bare value of a scalar batch).
:func:`timestamps_of` extracts a batch's event times with either.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.batch import Batch, RowBatch, is_scalar_schema, to_rows
from ..core.clock import Clock
from ..core.durations import Duration, to_millis
from ..core.elements import MAX_WATERMARK, MIN_WATERMARK
from ..errors import ConfigurationError, MalformedRecordError
from .watermark_generators import (
    AscendingTimestampsWatermarks,
    BoundedOutOfOrdernessWatermarks,
    NoWatermarks,
    WatermarkGenerator,
    WatermarksWithIdleness,
)

TimestampAssigner = str | Callable[[Any], int]
GeneratorFactory = Callable[[], WatermarkGenerator]

#: Flink's default auto-watermark interval.
DEFAULT_PERIODIC_EMIT_INTERVAL_MS = 200

_BOUNDED = "bounded_out_of_orderness"
_MONOTONOUS = "monotonous_timestamps"
_CUSTOM = "custom_generator"
_NONE = "no_watermarks"


class InvalidTimestampError(MalformedRecordError):
    """A record has no usable event time (null, or not an int of epoch ms).

    ``position`` is the record's index in its batch; ``location`` says the same in words
    (a source may replace it with a file and line).
    """

    def __init__(
        self, message: str, *, location: str, raw: object = None, position: int = -1
    ) -> None:
        super().__init__(message, location=location, raw=raw)
        self.position = position


@dataclass(frozen=True)
class WatermarkStrategy:
    """How to assign event times and generate watermarks; build one with a ``for_*`` factory.

    Immutable: every ``with_*`` returns a new strategy. Picklable with ``cloudpickle`` (the
    assigner and generator factory may be lambdas); with ``pickle`` when they are
    module-level functions.
    """

    kind: str
    max_out_of_orderness_ms: int = 0
    generator_factory: GeneratorFactory | None = None
    timestamp_assigner: TimestampAssigner | None = None
    idle_timeout_ms: int | None = None
    periodic_emit_interval_ms: int = DEFAULT_PERIODIC_EMIT_INTERVAL_MS

    def __post_init__(self) -> None:
        if self.kind not in (_BOUNDED, _MONOTONOUS, _CUSTOM, _NONE):
            raise ConfigurationError(
                f"unknown watermark strategy kind {self.kind!r}; build strategies with "
                "WatermarkStrategy.for_bounded_out_of_orderness, for_monotonous_timestamps, "
                "for_generator or no_watermarks"
            )
        if self.kind == _CUSTOM and not callable(self.generator_factory):
            raise ConfigurationError(
                "WatermarkStrategy.for_generator needs a factory: a callable taking no "
                f"arguments and returning a new WatermarkGenerator, got {self.generator_factory!r}"
            )

    # -- factories ---------------------------------------------------------------------------

    @classmethod
    def for_bounded_out_of_orderness(cls, max_out_of_orderness: Duration) -> WatermarkStrategy:
        """Records may arrive up to ``max_out_of_orderness`` (timedelta or int ms) late.

        Watermark: the largest timestamp seen minus ``max_out_of_orderness`` minus 1 ms.
        """
        ms = to_millis(max_out_of_orderness, "max_out_of_orderness")
        return cls(kind=_BOUNDED, max_out_of_orderness_ms=ms)

    @classmethod
    def for_monotonous_timestamps(cls) -> WatermarkStrategy:
        """Timestamps never decrease within a split: watermark = largest seen - 1 ms."""
        return cls(kind=_MONOTONOUS)

    @classmethod
    def for_generator(cls, factory: GeneratorFactory) -> WatermarkStrategy:
        """A custom generator: ``factory()`` returns a new :class:`WatermarkGenerator`
        (periodic, punctuated, or both) each time a split needs one."""
        return cls(kind=_CUSTOM, generator_factory=factory)

    @classmethod
    def no_watermarks(cls) -> WatermarkStrategy:
        """No watermarks: event time stays at ``MIN_WATERMARK`` until the source ends."""
        return cls(kind=_NONE)

    # -- options -----------------------------------------------------------------------------

    def with_timestamp_assigner(self, assigner: TimestampAssigner) -> WatermarkStrategy:
        """Event time of each record: a column name, or ``fn(record) -> int`` epoch ms."""
        if isinstance(assigner, str):
            if not assigner:
                raise ConfigurationError(
                    "with_timestamp_assigner got an empty column name; pass the name of the "
                    "event-time column, or a function fn(record) -> int epoch milliseconds"
                )
        elif not callable(assigner):
            raise ConfigurationError(
                f"with_timestamp_assigner needs a column name (str) or a function "
                f"fn(record) -> int epoch milliseconds, got {assigner!r} "
                f"({type(assigner).__name__})"
            )
        return dataclasses.replace(self, timestamp_assigner=assigner)

    def with_idleness(self, timeout: Duration) -> WatermarkStrategy:
        """Mark a split idle after ``timeout`` (timedelta or int ms, > 0) without events, so
        it stops holding back event time; it becomes active with its next events (M-W2)."""
        ms = to_millis(timeout, "with_idleness timeout", allow_zero=False)
        return dataclasses.replace(self, idle_timeout_ms=ms)

    def with_periodic_emit_interval(self, interval: Duration) -> WatermarkStrategy:
        """How often (timedelta or int ms, > 0) periodic generators are asked to emit
        (default 200 ms)."""
        ms = to_millis(interval, "periodic emit interval", allow_zero=False)
        return dataclasses.replace(self, periodic_emit_interval_ms=ms)

    # -- use ---------------------------------------------------------------------------------

    @property
    def generates_watermarks(self) -> bool:
        return self.kind != _NONE

    def create_generator(self, clock: Clock | None = None) -> WatermarkGenerator:
        """A new generator for one split; ``clock`` measures idleness (default: system)."""
        generator: WatermarkGenerator
        if self.kind == _BOUNDED:
            generator = BoundedOutOfOrdernessWatermarks(self.max_out_of_orderness_ms)
        elif self.kind == _MONOTONOUS:
            generator = AscendingTimestampsWatermarks()
        elif self.kind == _NONE:
            generator = NoWatermarks()
        else:
            assert self.generator_factory is not None
            generator = self.generator_factory()
            if not (
                callable(getattr(generator, "on_events", None))
                and callable(getattr(generator, "on_periodic_emit", None))
            ):
                raise ConfigurationError(
                    f"the generator factory {self.generator_factory!r} returned {generator!r}, "
                    "which is not a WatermarkGenerator; it must have on_events(timestamps, "
                    "output) and on_periodic_emit(output) methods"
                )
        if self.idle_timeout_ms is not None:
            generator = WatermarksWithIdleness(generator, self.idle_timeout_ms, clock)
        return generator

    def timestamps_of(self, batch: Batch) -> np.ndarray:
        """The event times of ``batch`` by this strategy's assigner (see :func:`timestamps_of`)."""
        if self.timestamp_assigner is None:
            raise ConfigurationError(
                "this WatermarkStrategy has no timestamp assigner, so records have no event "
                "time; call .with_timestamp_assigner(column_name or fn(record) -> int ms)"
            )
        return timestamps_of(batch, self.timestamp_assigner)

    def __repr__(self) -> str:
        parts = [self.kind]
        if self.kind == _BOUNDED:
            parts.append(f"max_out_of_orderness={self.max_out_of_orderness_ms} ms")
        if self.kind == _CUSTOM:
            parts.append(f"factory={self.generator_factory!r}")
        if self.timestamp_assigner is not None:
            parts.append(f"assigner={self.timestamp_assigner!r}")
        if self.idle_timeout_ms is not None:
            parts.append(f"idleness={self.idle_timeout_ms} ms")
        parts.append(f"interval={self.periodic_emit_interval_ms} ms")
        return f"WatermarkStrategy({', '.join(parts)})"


# -- timestamp extraction ----------------------------------------------------------------------

_UNIT_PER_MS = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}
_MS_PER_DAY = 86_400_000
_EPOCH = _dt.datetime(1970, 1, 1)


def timestamps_of(batch: Batch, assigner: TimestampAssigner) -> np.ndarray:
    """The event times (int64 epoch ms, record order) of ``batch``.

    ``assigner`` is a column name - read vectorized from an Arrow batch (integer, ``timestamp``
    of any unit, ``date32``/``date64`` columns), or per record from the dicts of a
    :class:`RowBatch` (ints, or ``datetime`` as Arrow timestamps become) - or a function
    ``fn(record) -> int`` applied to each record of ``to_rows(batch)``.

    Raises :class:`InvalidTimestampError` naming the first record (its position in the
    batch) whose event time is null, not an int, or outside int64; ``ConfigurationError``
    when the column is missing or has a type that holds no event time.
    """
    if isinstance(assigner, str):
        if isinstance(batch, pa.RecordBatch):
            return _column_timestamps(batch, assigner)
        return _row_field_timestamps(batch, assigner)
    if not callable(assigner):
        raise ConfigurationError(
            f"a timestamp assigner is a column name (str) or a function fn(record) -> int "
            f"epoch milliseconds, got {assigner!r}"
        )
    rows = to_rows(batch)
    values = [assigner(row) for row in rows]
    return _ints_to_array(values, rows, f"the timestamp assigner {assigner!r}", datetimes=False)


def _column_timestamps(batch: pa.RecordBatch, column: str) -> np.ndarray:
    index = batch.schema.get_field_index(column)
    if index < 0:
        hint = (
            " (its records are bare values of a scalar batch: use a function assigner such "
            "as lambda v: v)"
            if is_scalar_schema(batch.schema)
            else ""
        )
        raise ConfigurationError(
            f"the event-time column {column!r} is not in the batch; its columns are "
            f"{batch.schema.names}{hint}. Pass an existing column to with_timestamp_assigner"
        )
    array = batch.column(index)
    kind = array.type
    if array.null_count:
        position = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise _invalid(position, f"its event-time column {column!r} is null", None)
    if pa.types.is_integer(kind):
        if pa.types.is_uint64(kind) and len(array):
            raw = array.to_numpy(zero_copy_only=False)
            too_big = np.flatnonzero(raw > np.uint64(MAX_WATERMARK))
            if len(too_big):
                p = int(too_big[0])
                raise _invalid(p, f"its event time {int(raw[p])} is beyond int64", int(raw[p]))
        return np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.int64)
    if pa.types.is_timestamp(kind):
        raw = np.asarray(array.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
        per_ms = _UNIT_PER_MS[kind.unit]
        return raw // per_ms if per_ms is not None else _scale(raw, 1000, column)
    if pa.types.is_date64(kind):
        return np.asarray(array.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
    if pa.types.is_date32(kind):
        days = np.asarray(array.cast(pa.int32()).to_numpy(zero_copy_only=False), dtype=np.int64)
        return days * _MS_PER_DAY
    raise ConfigurationError(
        f"the event-time column {column!r} has type {kind}, which holds no event time; use an "
        "integer column of epoch milliseconds, an Arrow timestamp or date column, or a "
        "function assigner that converts the value"
    )


def _scale(raw: np.ndarray, factor: int, column: str) -> np.ndarray:
    bound = MAX_WATERMARK // factor
    out_of_range = np.flatnonzero((raw > bound) | (raw < -bound))
    if len(out_of_range):
        p = int(out_of_range[0])
        raise _invalid(
            p, f"its event time in column {column!r} overflows int64 milliseconds", int(raw[p])
        )
    return raw * factor


def _row_field_timestamps(batch: RowBatch, column: str) -> np.ndarray:
    rows = batch.rows
    values: list[Any] = []
    for position, row in enumerate(rows):
        if not isinstance(row, dict):
            raise _invalid(
                position,
                f"it is a {type(row).__name__}, not a dict with the event-time field {column!r}; "
                "use a function assigner for such records",
                row,
            )
        if column not in row:
            raise _invalid(position, f"it has no event-time field {column!r}", row)
        values.append(row[column])
    return _ints_to_array(values, rows, f"the event-time field {column!r}", datetimes=True)


def _ints_to_array(
    values: list[Any], rows: list[Any], source: str, *, datetimes: bool
) -> np.ndarray:
    """``values`` as int64, or the error naming the first record with an unusable one."""
    if set(map(type, values)) <= {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    converted: list[int] = []
    for position, value in enumerate(values):
        ms = _as_millis(value, datetimes)
        if ms is None or not MIN_WATERMARK <= ms <= MAX_WATERMARK:
            expected = "an int of epoch milliseconds" + (" or a datetime" if datetimes else "")
            problem = (
                "beyond int64" if ms is not None else f"{type(value).__name__}, not {expected}"
            )
            raise _invalid(position, f"{source} gave {value!r} ({problem})", rows[position])
        converted.append(ms)
    return np.array(converted, dtype=np.int64)


def _as_millis(value: Any, datetimes: bool) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if datetimes and isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return None


def _invalid(position: int, problem: str, raw: object) -> InvalidTimestampError:
    return InvalidTimestampError(
        f"record {position} of the batch has no valid event time: {problem}. Fix the "
        "timestamp assigner or the input so every record has an int of epoch milliseconds",
        location=f"record {position} of the batch",
        raw=raw,
        position=position,
    )


def check_watermark_strategy(strategy: Any) -> WatermarkStrategy:
    """``strategy`` if it is a ``WatermarkStrategy``; else a ``ConfigurationError`` saying
    how to make one. (A strategy without a timestamp assigner uses the timestamps the
    records already carry; records without any fail with how to assign them.)"""
    if not isinstance(strategy, WatermarkStrategy):
        raise ConfigurationError(
            "a watermark strategy must be an lg.WatermarkStrategy, e.g. "
            "lg.WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=1))"
            f".with_timestamp_assigner('ts'), got {strategy!r}"
        )
    return strategy

"""Rolling aggregates of a keyed stream: ``keyed.sum(field)``, ``keyed.min(field)`` and
``keyed.max(field)`` (Flink's ``KeyedStream.sum/min/max``).

For each record, the operator emits that record with ``field`` replaced by its key's
running sum / minimum / maximum of ``field`` over every record of the key so far,
including this one, in the order the records arrive. (Flink's ``sum`` keeps the *first*
record's other fields; here every record keeps its own, the more useful reading.) The
running value is keyed state (one ``ValueState`` per key named ``sum(field)``,
``min(field)`` or ``max(field)``), so it is part of every checkpoint and savepoint,
moves with its key group when the job rescales (M-T4), and lives in the job's state
backend (heap or RocksDB).

A batch at a time: the batch's distinct keys' running values are read with one
``values_of`` and written with one ``update_all`` (on RocksDB: the column mode of
:mod:`lockgate.state.rocksdb.columns`), and the running values of the batch's records are
folded by :func:`~.rolling_kernel.running_fold`, with no Python step per record for Arrow
input (records that are dicts are copied with the new field value, one per record).

Values: ints (exactly; a sum past int64 stays exact for dict records, and fails the job
for an Arrow int column, which cannot hold it) or floats (IEEE-754: a running sum rounds
as ``a + b`` one record at a time does; ``min``/``max`` propagate NaN as
``numpy.minimum``/``numpy.maximum`` do). A record whose field is missing, null or not a
number fails the job naming the record (M-bad-input: never dropped silently).
"""

from __future__ import annotations

from itertools import repeat
from operator import is_not
from typing import Any

import numpy as np
import pyarrow as pa

from ...core.batch import Batch, RowBatch, is_scalar_schema, num_rows, to_rows
from ...core.excerpt import excerpt
from ...core.partitioners import KeySelector
from ...errors import ConfigurationError
from ...state.descriptors import ValueStateDescriptor
from ...state.rocksdb import int64_keys
from .keyed import KeyedProcessOperator
from .rolling_kernel import (
    COMBINE,
    as_column,
    combine_one,
    group_order,
    running_fold,
    sum_fits_int64,
)

_NUMBERS = (int, float)


def check_rolling_field(field: Any, kind: str) -> str:
    """``field`` (a record field name) or a ConfigurationError saying how to fix it."""
    if not isinstance(field, str) or not field:
        raise ConfigurationError(
            f"keyed.{kind}(field) needs the name of a numeric field of the records (a "
            f"non-empty str), got {field!r}"
        )
    return field


class RollingAggregate:
    """The per-key state and the one-record semantics of a rolling ``kind`` of ``field``
    (the operator runs the same fold a batch at a time)."""

    def __init__(self, kind: str, field: str) -> None:
        if kind not in COMBINE:
            raise ConfigurationError(
                f"a rolling aggregate is one of {sorted(COMBINE)}, got {kind!r}"
            )
        self.kind = kind
        self.field = check_rolling_field(field, kind)
        self.descriptor: ValueStateDescriptor[Any] = ValueStateDescriptor(f"{kind}({field})")
        self.state: Any = None

    def open(self, ctx: Any) -> None:
        self.state = ctx.get_state(self.descriptor)

    def number_of(self, record: Any, where: str) -> int | float:
        """``record``'s field, or a TypeError naming the record and what to do."""
        try:
            value = record[self.field]
        except (KeyError, TypeError, IndexError):
            raise TypeError(
                f"{self.kind}({self.field!r}) needs records with the field {self.field!r}, "
                f"got the {type(record).__name__} record {excerpt(record)} {where}"
            ) from None
        if type(value) not in _NUMBERS:
            raise TypeError(
                f"{self.kind}({self.field!r}) needs an int or float in field {self.field!r}, "
                f"got {excerpt(value)} ({type(value).__name__}) in the record "
                f"{excerpt(record)} {where}; convert or filter such records before key_by"
            )
        return value

    def process_element(self, value: Any, ctx: Any) -> list[Any]:
        """The one-record form: ``value`` with the field replaced by the running result."""
        number = self.number_of(value, "")
        before = self.state.value()
        result = number if before is None else combine_one(self.kind, before, number)
        self.state.update(result)
        return [{**value, self.field: result}]


class RollingAggregateOperator(KeyedProcessOperator):
    """Runs a :class:`RollingAggregate` a batch at a time (see the module docstring)."""

    accepts_changes = False  # a running sum of a changelog needs retractions

    def __init__(self, fn: RollingAggregate, key_selector: KeySelector) -> None:
        super().__init__(fn, key_selector)
        self.rolling = fn

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        n = num_rows(batch)
        self.counters.records_in += n
        if not n:
            return
        arrow = isinstance(batch, pa.RecordBatch) and not is_scalar_schema(batch.schema)
        rows = None if arrow else to_rows(batch)
        try:
            keys: Any = self._int_key_column(batch) if arrow else None
            if keys is None:
                keys = self.key_selector.state_keys(batch, rows)
        except Exception as e:
            raise self.user_error(e) from e
        try:
            if arrow:
                out: Batch = self._fold_arrow(batch, keys)
            else:
                assert rows is not None
                out = self._fold_rows(batch, rows, keys)
        except Exception as e:
            raise self.user_error(e) from e
        self.emit(out)

    # -- the fold -----------------------------------------------------------------------
    def _int_key_column(self, batch: pa.RecordBatch) -> np.ndarray | None:
        """The keys of an Arrow batch keyed by one int column without nulls, as int64 (the
        ints the key selector would give, without a Python object each), else None."""
        columns = self.key_selector.columns
        if columns is None or len(columns) != 1:
            return None
        i = batch.schema.get_field_index(columns[0])
        if i < 0:
            return None
        column = batch.column(i)
        if not pa.types.is_signed_integer(column.type) or column.null_count:
            return None
        return column.to_numpy().astype(np.int64, copy=False)

    def _codes(self, keys: list[Any] | np.ndarray) -> tuple[Any, np.ndarray, np.ndarray]:
        """The batch's distinct keys (a list, or an int64 array), each record's code (index
        into them) and the records grouped by code (:func:`group_order`)."""
        ints = int64_keys(keys)
        if ints is not None:
            order = group_order(ints)  # one sort: the codes and the grouping
            ordered = ints[order]
            fresh = np.empty(len(ordered), dtype=bool)
            fresh[:1] = True
            np.not_equal(ordered[1:], ordered[:-1], out=fresh[1:])
            codes = np.empty(len(ordered), dtype=np.int64)
            codes[order] = np.cumsum(fresh) - 1
            return ordered[fresh], codes, order
        index: dict[Any, int] = {}
        codes_list = [index.setdefault(k, len(index)) for k in keys]
        codes = np.array(codes_list, dtype=np.int64)
        return list(index), codes, group_order(codes)

    def _fold(self, keys: list[Any] | np.ndarray, values: np.ndarray | list[Any]) -> np.ndarray:
        """Each record's running value, the keys' new values stored."""
        rolling = self.rolling
        distinct, codes, order = self._codes(keys)
        previous = rolling.state.values_of(distinct)
        known = np.fromiter(map(is_not, previous, repeat(None)), dtype=bool, count=len(previous))
        if isinstance(values, list):
            column = as_column(values + [v for v in previous if v is not None])
            values_arr, seen = column[: len(values)], column[len(values) :]
        else:
            values_arr = values
            seen_list = [v for v in previous if v is not None]
            seen = as_column(seen_list) if seen_list else values_arr[:0]
            if seen.dtype != values_arr.dtype:  # e.g. an int column over float state
                both = as_column(values_arr.tolist() + seen_list)
                values_arr, seen = both[: len(values_arr)], both[len(values_arr) :]
        before = np.empty(len(distinct), dtype=values_arr.dtype)
        before[known] = seen
        if (
            rolling.kind == "sum"
            and values_arr.dtype == np.int64
            and not sum_fits_int64(values_arr, before, known)
        ):
            as_objects = np.empty(len(values_arr), dtype=object)
            as_objects[:] = values_arr.tolist()
            values_arr = as_objects
            before = before.astype(object)
            before[known] = [v for v in previous if v is not None]
        out = running_fold(rolling.kind, codes, values_arr, before, known, order)
        # each key's new state: its last record's running value (the last of its group)
        last = order[np.r_[np.flatnonzero(np.diff(codes[order])), len(order) - 1]]
        rolling.state.update_all(distinct, out[last].tolist())
        return out

    def _fold_rows(self, batch: Batch, rows: list[Any], keys: list[Any]) -> RowBatch:
        rolling = self.rolling
        field = rolling.field
        try:
            values = [r[field] for r in rows]
            kinds = set(map(type, values))
        except (KeyError, TypeError, IndexError):
            kinds = {type(None)}
        if not kinds <= {int, float}:
            for i, r in enumerate(rows):
                rolling.number_of(r, f"(record {i} of its batch)")
        if not all(isinstance(r, dict) for r in rows):
            bad = next(r for r in rows if not isinstance(r, dict))
            raise TypeError(
                f"{rolling.kind}({field!r}) emits each record with its field replaced: it "
                f"needs dict records (or Arrow batches), got the {type(bad).__name__} record "
                f"{excerpt(bad)}; map records to dicts before key_by"
            )
        out = self._fold(keys, values).tolist()
        timestamps = batch.timestamps if isinstance(batch, RowBatch) else None
        return RowBatch([{**r, field: v} for r, v in zip(rows, out)], timestamps)

    def _fold_arrow(self, batch: pa.RecordBatch, keys: list[Any] | np.ndarray) -> pa.RecordBatch:
        rolling = self.rolling
        field = rolling.field
        i = batch.schema.get_field_index(field)
        if i < 0:
            raise TypeError(
                f"{rolling.kind}({field!r}) needs records with the field {field!r}; the "
                f"batch's fields are {batch.schema.names}"
            )
        column = batch.column(i)
        kind = column.type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise TypeError(
                f"{rolling.kind}({field!r}) needs a numeric field, but {field!r} is {kind}; "
                "cast it to an int or float before key_by"
            )
        if column.null_count:
            at = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise TypeError(
                f"{rolling.kind}({field!r}): record {at} of its batch has no value (null) in "
                f"{field!r}: {excerpt(batch.slice(at, 1).to_pylist()[0])}; fill or filter "
                "nulls before key_by"
            )
        floating = pa.types.is_floating(kind)
        raw = column.to_numpy(zero_copy_only=False)
        values: np.ndarray | list[Any]
        if pa.types.is_unsigned_integer(kind) and len(raw) and int(raw.max()) >= 2**63:
            values = raw.tolist()  # beyond int64: Python ints
        else:
            values = raw.astype(np.float64 if floating else np.int64, copy=False)
        out = self._fold(keys, values)
        if out.dtype == object:
            listed = out.tolist()
            if float in set(map(type, listed)):  # the key's state held floats
                target = pa.float64()
            else:
                target = kind if rolling.kind != "sum" else pa.int64()
            try:
                result = pa.array(listed, type=target)
            except (OverflowError, pa.ArrowInvalid) as e:
                raise OverflowError(
                    f"{rolling.kind}({field!r}) of an Arrow int column went past int64 "
                    f"({e}); cast {field!r} to float64 before key_by"
                ) from None
        else:
            result = pa.array(out)
        if (
            rolling.kind != "sum"
            and result.type != kind
            and pa.types.is_floating(result.type) == floating
        ):
            result = result.cast(kind)  # min/max keep the column's own type
        return batch.set_column(i, pa.field(field, result.type), result)

"""The built-in aggregate kinds at work: how each kind (count, sum, mean, min, max,
first, last, the exact and the approximate distinct count) lifts a column's values into
numpy accumulator fields, reduces them per group, merges two rows and gives its result
(:func:`kind_of` finds the kind of a :class:`~.aggregate_specs.WindowAggregate`), and how
an aggregate's Arrow column is read and checked (:func:`column_of`, :func:`read_values`,
:func:`promote_types`). What they compute (the SQL semantics) is in the docstring of
:mod:`.aggregates`, which holds the accumulators built of these fields."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigurationError
from . import distinct_values as dv
from .aggregate_specs import WindowAggregate

_I64_MIN = np.iinfo(np.int64).min
_I64_MAX = np.iinfo(np.int64).max

Fields = tuple[np.ndarray, ...]


# --- the aggregate kinds ----------------------------------------------------------------
#
# Each kind keeps a tuple of numpy fields per row. Kinds with a value keep it in
# field 0 (its dtype follows the column); the other fields are counts (int64),
# timestamps (int64) or presence flags (bool).


def _identity(dtype: np.dtype, smallest: bool) -> Any:
    """The neutral element of min (``smallest=False``: the dtype's top) or max."""
    if dtype.kind == "f":
        return np.inf if not smallest else -np.inf
    if dtype.kind == "b":
        return not smallest
    info = np.iinfo(dtype)
    return info.max if not smallest else info.min


def _scatter_presence(group: np.ndarray, has: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=bool)
    out[group[has]] = True
    return out


class _Kind:
    """How one aggregate kind lifts, reduces, merges and finishes its fields."""

    value_fields = 1  # how many leading fields hold values of the column's type

    def empty(self, n: int, dtype: np.dtype) -> Fields:
        raise NotImplementedError

    def lift(self, values: np.ndarray, valid: np.ndarray, ts: np.ndarray) -> Fields:
        """One accumulator per row."""
        raise NotImplementedError

    def reduce(self, fields: Fields, group: np.ndarray, size: int) -> Fields:
        """Combine rows per group; rows are in arrival order."""
        raise NotImplementedError

    def merge(self, a: Fields, b: Fields) -> Fields:
        """Row-wise combination; ``a`` counts as the earlier arrival."""
        raise NotImplementedError

    def result(self, fields: Fields, type_: pa.DataType | None) -> pa.Array:
        raise NotImplementedError

    def from_column(
        self, column: pa.Array, picks: np.ndarray | None, group: np.ndarray, size: int
    ) -> Fields | None:
        """Kinds that read the Arrow column themselves: the partial rows (record
        ``picks[i]``, default ``i``, in group ``group[i]``); None: use lift/reduce."""
        return None

    def dump(self, fields: Fields) -> Any:
        """The fields as plain picklable data (checkpoints)."""
        return fields

    def load(self, data: Any) -> Fields:
        """Fields from :meth:`dump`'s data."""
        return tuple(data)


class _Count(_Kind):
    value_fields = 0

    def empty(self, n: int, dtype: np.dtype) -> Fields:
        return (np.zeros(n, np.int64),)

    def lift(self, values: np.ndarray, valid: np.ndarray, ts: np.ndarray) -> Fields:
        return (valid.astype(np.int64),)

    def reduce(self, fields: Fields, group: np.ndarray, size: int) -> Fields:
        out = np.zeros(size, np.int64)
        np.add.at(out, group, fields[0])
        return (out,)

    def merge(self, a: Fields, b: Fields) -> Fields:
        return (a[0] + b[0],)

    def result(self, fields: Fields, type_: pa.DataType | None) -> pa.Array:
        return pa.array(fields[0], type=pa.int64())


def _sum_dtype(dtype: np.dtype) -> np.dtype:
    if dtype.kind == "u":
        return np.dtype(np.uint64)
    if dtype.kind in "ib":
        return np.dtype(np.int64)
    return np.dtype(np.float64)


class _Sum(_Kind):
    def empty(self, n: int, dtype: np.dtype) -> Fields:
        return (np.zeros(n, _sum_dtype(dtype)), np.zeros(n, np.int64))

    def lift(self, values: np.ndarray, valid: np.ndarray, ts: np.ndarray) -> Fields:
        s = values.astype(_sum_dtype(values.dtype), copy=True)
        s[~valid] = 0
        return (s, valid.astype(np.int64))

    def reduce(self, fields: Fields, group: np.ndarray, size: int) -> Fields:
        s = np.zeros(size, fields[0].dtype)
        n = np.zeros(size, np.int64)
        np.add.at(s, group, fields[0])
        np.add.at(n, group, fields[1])
        return (s, n)

    def merge(self, a: Fields, b: Fields) -> Fields:
        return (a[0] + b[0], a[1] + b[1])

    def result(self, fields: Fields, type_: pa.DataType | None) -> pa.Array:
        s, n = fields
        if type_ is None:
            return pa.nulls(len(s), pa.int64())
        return pa.array(s, mask=n == 0)


class _Mean(_Sum):
    def result(self, fields: Fields, type_: pa.DataType | None) -> pa.Array:
        s, n = fields
        out = np.zeros(len(s), np.float64)
        np.divide(s, n, out=out, where=n > 0, casting="unsafe")
        return pa.array(out, mask=n == 0, type=pa.float64())


def _typed_result(values: np.ndarray, has: np.ndarray, type_: pa.DataType | None) -> pa.Array:
    if type_ is None:
        return pa.nulls(len(values))
    mask = ~has
    if _is_temporal(type_):
        storage = _storage_type(type_)
        return pa.array(values.astype(storage.to_pandas_dtype()), type=storage, mask=mask).view(
            type_
        )
    if values.dtype.kind == "O":
        return pa.array(values, type=type_, mask=mask)
    return pa.array(values, mask=mask)


class _Extreme(_Kind):
    def __init__(self, smallest: bool) -> None:
        self.smallest = smallest
        self.op = np.minimum if smallest else np.maximum

    def empty(self, n: int, dtype: np.dtype) -> Fields:
        return (np.zeros(n, dtype), np.zeros(n, bool))

    def lift(self, values: np.ndarray, valid: np.ndarray, ts: np.ndarray) -> Fields:
        return (values, valid)

    def reduce(self, fields: Fields, group: np.ndarray, size: int) -> Fields:
        v, has = fields
        out = np.full(size, _identity(v.dtype, not self.smallest), dtype=v.dtype)
        with np.errstate(invalid="ignore"):  # NaN propagates, as documented
            if bool(has.all()):
                self.op.at(out, group, v)
            else:
                self.op.at(out, group[has], v[has])
        found = _scatter_presence(group, has, size)
        out[~found] = 0  # empty rows hold zeros, whatever the dtype
        return (out, found)

    def merge(self, a: Fields, b: Fields) -> Fields:
        av, ah = a
        bv, bh = b
        with np.errstate(invalid="ignore"):
            both = self.op(av, bv)
        v = np.where(ah & bh, both, np.where(bh, bv, av))
        return (v, ah | bh)

    def result(self, fields: Fields, type_: pa.DataType | None) -> pa.Array:
        return _typed_result(fields[0], fields[1], type_)


class _Ordered(_Kind):
    """first (``earliest=True``) or last: the value at the extreme timestamp."""

    def __init__(self, earliest: bool) -> None:
        self.earliest = earliest

    def empty(self, n: int, dtype: np.dtype) -> Fields:
        return (np.zeros(n, dtype), np.zeros(n, np.int64), np.zeros(n, bool))

    def lift(self, values: np.ndarray, valid: np.ndarray, ts: np.ndarray) -> Fields:
        return (values, ts, valid)

    def reduce(self, fields: Fields, group: np.ndarray, size: int) -> Fields:
        v, ts, has = fields
        rows = np.arange(len(v), dtype=np.int64)
        if self.earliest:
            best = np.full(size, _I64_MAX, np.int64)
            np.minimum.at(best, group[has], ts[has])
            pick = np.full(size, len(v), np.int64)
            cand = has & (ts == best[group])
            np.minimum.at(pick, group[cand], rows[cand])
        else:
            best = np.full(size, _I64_MIN, np.int64)
            np.maximum.at(best, group[has], ts[has])
            pick = np.full(size, -1, np.int64)
            cand = has & (ts == best[group])
            np.maximum.at(pick, group[cand], rows[cand])
        found = _scatter_presence(group, has, size)
        out_v = np.zeros(size, v.dtype)
        out_ts = np.zeros(size, np.int64)
        out_v[found] = v[pick[found]]
        out_ts[found] = ts[pick[found]]
        return (out_v, out_ts, found)

    def merge(self, a: Fields, b: Fields) -> Fields:
        av, ats, ah = a
        bv, bts, bh = b
        later = (bts < ats) if self.earliest else (bts >= ats)
        take_b = bh & (~ah | later)
        return (np.where(take_b, bv, av), np.where(take_b, bts, ats), ah | bh)

    def result(self, fields: Fields, type_: pa.DataType | None) -> pa.Array:
        return _typed_result(fields[0], fields[2], type_)


class _CountDistinct(_Kind):
    """Exact distinct values: one field, an object array of each row's distinct
    values (an Arrow array, None for none; see :mod:`.distinct_values`)."""

    value_fields = 0

    def empty(self, n: int, dtype: np.dtype) -> Fields:
        return (dv.exact_empty(n),)

    def from_column(
        self, column: pa.Array, picks: np.ndarray | None, group: np.ndarray, size: int
    ) -> Fields:
        return (dv.exact_partial(column, picks, group, size),)

    def reduce(self, fields: Fields, group: np.ndarray, size: int) -> Fields:
        return (dv.exact_reduce(fields[0], group, size),)

    def merge(self, a: Fields, b: Fields) -> Fields:
        return (dv.exact_merge(a[0], b[0]),)

    def result(self, fields: Fields, type_: pa.DataType | None) -> pa.Array:
        return pa.array(dv.exact_counts(fields[0]), type=pa.int64())

    def dump(self, fields: Fields) -> Any:
        return dv.dump_exact(fields[0])

    def load(self, data: Any) -> Fields:
        return (dv.load_exact(data),)


class _ApproxCountDistinct(_Kind):
    """HyperLogLog sketches of ``2**lg_k`` registers: one field, an object array of
    each row's sketch (None for none)."""

    value_fields = 0

    def __init__(self, lg_k: int) -> None:
        self.lg_k = lg_k

    def empty(self, n: int, dtype: np.dtype) -> Fields:
        return (dv.exact_empty(n),)

    def from_column(
        self, column: pa.Array, picks: np.ndarray | None, group: np.ndarray, size: int
    ) -> Fields:
        return (dv.sketch_partial(column, picks, group, size, self.lg_k),)

    def reduce(self, fields: Fields, group: np.ndarray, size: int) -> Fields:
        return (dv.sketch_reduce(fields[0], group, size, self.lg_k),)

    def merge(self, a: Fields, b: Fields) -> Fields:
        return (dv.sketch_merge(a[0], b[0], self.lg_k),)

    def result(self, fields: Fields, type_: pa.DataType | None) -> pa.Array:
        return pa.array(dv.sketch_estimates(fields[0]), type=pa.int64())

    def dump(self, fields: Fields) -> Any:
        return dv.dump_sketches(fields[0])

    def load(self, data: Any) -> Fields:
        return (dv.load_sketches(data),)


_KIND: dict[str, _Kind] = {
    "count": _Count(),
    "sum": _Sum(),
    "mean": _Mean(),
    "min": _Extreme(smallest=True),
    "max": _Extreme(smallest=False),
    "first": _Ordered(earliest=True),
    "last": _Ordered(earliest=False),
    "count_distinct": _CountDistinct(),
}
_SKETCH_KINDS: dict[int, _Kind] = {}


def kind_of(spec: WindowAggregate) -> _Kind:
    """How ``spec``'s kind computes (sketches: one per ``lg_k``)."""
    lg_k = spec.lg_k
    if lg_k is None:
        return _KIND[spec.kind]
    kind = _SKETCH_KINDS.get(lg_k)
    if kind is None:
        kind = _SKETCH_KINDS[lg_k] = _ApproxCountDistinct(lg_k)
    return kind


# --- reading columns ------------------------------------------------------------------


def _is_temporal(t: pa.DataType) -> bool:
    return (
        pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_duration(t)
    )


def _storage_type(t: pa.DataType) -> pa.DataType:
    return pa.int32() if t.bit_width == 32 else pa.int64()


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def column_of(data: pa.RecordBatch | pa.Table, spec: WindowAggregate) -> pa.Array:
    assert spec.column is not None
    names = data.schema.names
    if spec.column not in names:
        raise ConfigurationError(
            f"{spec!r}: the records have no column {spec.column!r}; their columns are "
            f"{names}. Aggregate an existing column (scalar records: 'value')"
        )
    col = data.column(spec.column)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def decoded(col: pa.Array) -> pa.Array:
    return col.dictionary_decode() if pa.types.is_dictionary(col.type) else col


def read_values(
    spec: WindowAggregate, col: pa.Array
) -> tuple[np.ndarray, np.ndarray, pa.DataType | None]:
    """Values (nulls filled), validity and value type of ``col`` for ``spec``."""
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    t = col.type
    valid = (
        np.ones(len(col), bool)
        if col.null_count == 0
        else col.is_valid().to_numpy(zero_copy_only=False)
    )
    if spec.kind == "count":
        return np.zeros(0, np.int8), valid, None
    if pa.types.is_null(t):
        return np.zeros(len(col), np.float64), valid, None
    numeric = _is_numeric(t)
    temporal = _is_temporal(t)
    allowed = {
        "sum": numeric,
        "mean": numeric,
        "min": numeric or temporal,
        "max": numeric or temporal,
        "first": True,
        "last": True,
    }[spec.kind]
    if not allowed:
        needs = "numeric or bool" if spec.kind in ("sum", "mean") else "numeric, bool or temporal"
        raise ConfigurationError(
            f"{spec!r} needs a {needs} column, but {spec.column!r} is {t}; use "
            "first/last, or a user AggregateFunction"
        )
    if temporal:
        col = col.view(_storage_type(t))
    if numeric or temporal:
        if col.null_count:
            col = pc.fill_null(col, pa.scalar(False if pa.types.is_boolean(t) else 0, col.type))
        return col.to_numpy(zero_copy_only=False), valid, t
    return col.to_numpy(zero_copy_only=False), valid, t


def promote_types(
    a: pa.DataType | None, b: pa.DataType | None, spec: WindowAggregate
) -> pa.DataType | None:
    if a is None or (b is not None and a.equals(b)):
        return b if a is None else a
    if b is None:
        return a
    if _is_numeric(a) and _is_numeric(b):
        return pa.from_numpy_dtype(np.result_type(a.to_pandas_dtype(), b.to_pandas_dtype()))
    raise ConfigurationError(
        f"{spec!r}: column {spec.column!r} changed type from {a} to {b} between batches; "
        "cast it to one type upstream"
    )


__all__ = ["Fields", "column_of", "decoded", "kind_of", "promote_types", "read_values"]

"""Built-in window aggregates, computed a batch at a time.

Aggregates are declared with the ``agg`` builders (exported as ``lg.agg``)::

    lg.agg.count()                 # records            -> column "count"
    lg.agg.count("v")              # non-null values    -> "count_v"
    lg.agg.sum("v")                # -> "sum_v"; also min, max, mean, first, last
    lg.agg.mean("v", name="avg")   # any output column name
    lg.agg.count_distinct("user")  # distinct non-null values, exact -> "count_distinct_user"
    lg.agg.approx_count_distinct("user", relative_error=0.02)  # HyperLogLog estimate

Each is a :class:`WindowAggregate`; a :class:`WindowAggregation` holds the
aggregates of one window operator (unique output names). Computation has
three steps, all vectorized (numpy):

1. **partial** - the records of an Arrow batch, grouped by (key, window), are
   reduced to one accumulator row per group (:meth:`WindowAggregation.partial`,
   or :meth:`WindowAggregation.aggregate_batch` which also does the grouping);
2. **merge** - partial rows are merged into running rows kept per (key,
   window) (:meth:`Accumulators.merge_into`); session windows merge running
   rows with each other the same way (:meth:`Accumulators.reduce`);
3. **result** - :meth:`Accumulators.results` gives one Arrow column per aggregate.

:class:`Accumulators` is columnar (one numpy array per accumulator field, one
row per (key, window)), picklable, and sliceable (``take``/``concat``) so an
operator can snapshot it whole or split it by key group.

Semantics (the SQL ones):

* nulls are skipped; ``count()`` counts records, ``count(col)`` non-null values;
* ``sum``, ``min``, ``max``, ``mean``, ``first`` and ``last`` of a window
  without non-null values are null;
* ``sum`` is int64 for signed ints and bools, uint64 for unsigned, float64 for
  floats (integer sums wrap on overflow, as numpy's and Arrow's do); ``mean``
  is float64; ``min``/``max``/``first``/``last`` keep the column's type;
* NaN is a value, not a null: it propagates through sum, mean, min and max;
* ``first``/``last`` is the value of the record with the smallest/largest
  *timestamp* (event time, or processing time in processing-time windows), so
  results do not depend on arrival order; ties go to the record that arrived
  first (for ``first``) or last (for ``last``): within a batch that is row
  order, and when merging, the running side (``self``) counts as earlier.

Distinct counts (int64, 0 for a window without values; nulls are skipped):

* ``count_distinct`` is exact: each (key, window) row keeps its distinct values
  (memory grows with them; :mod:`.distinct_values` says how values compare);
* ``approx_count_distinct`` keeps an Apache DataSketches HyperLogLog sketch
  (``datasketches``, the ``lockgate[sketches]`` extra) of ``2**lg_k`` registers:
  ``relative_error`` (from 0.001 to 0.25, default 0.02) is the estimate's relative
  standard error, and ``lg_k`` is the smallest with ``1.04 / sqrt(2**lg_k) <=
  relative_error`` (0.02 -> 12, 0.05 -> 9, 0.01 -> 14, 0.001 -> 21). About 68% of
  estimates fall within ``relative_error`` of the true count, 99.7% within three
  times it; counts far below ``2**lg_k / 4`` are nearly exact. Sketches merge
  (session windows, partials) without losing accuracy.

Both are checkpointed as plain data (Arrow IPC and the sketches' compact
serialization), never as pickled objects.

Types: ``sum``/``mean`` take numeric or bool columns; ``min``/``max`` also
temporal ones; ``first``/``last`` and ``count(col)`` any type. Batches of one
column may disagree on numeric width (int32 then float64): results take the
common numpy type. An unsupported type raises :class:`ConfigurationError`
naming the aggregate and column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.batch import RowBatch, to_arrow
from ..core.state_records import state_record
from ..errors import ConfigurationError
from . import distinct_values as dv
from .assigners import WindowAssignment

KINDS = (
    "count",
    "sum",
    "min",
    "max",
    "mean",
    "first",
    "last",
    "count_distinct",
    "approx_count_distinct",
)
"""The built-in aggregate kinds."""

DISTINCT_KINDS = ("count_distinct", "approx_count_distinct")
"""Kinds that keep each row's distinct values (or a sketch of them)."""

WINDOW_START = "window_start"
WINDOW_END = "window_end"

_I64_MIN = np.iinfo(np.int64).min
_I64_MAX = np.iinfo(np.int64).max

Fields = tuple[np.ndarray, ...]
ArrowData: TypeAlias = "pa.RecordBatch | pa.Table | RowBatch"


# --- declaring aggregates -------------------------------------------------------------


@state_record("window.aggregate")
@dataclass(frozen=True)
class WindowAggregate:
    """One built-in aggregate: ``kind`` of ``column`` (None: ``count()`` of records),
    written to the output column ``name``."""

    kind: str
    column: str | None
    name: str
    #: ``approx_count_distinct`` only: the relative standard error asked for
    relative_error: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(
                f"unknown window aggregate {self.kind!r}; use one of {', '.join(KINDS)}"
            )
        if self.kind == "approx_count_distinct":
            error = dv.check_relative_error(
                self.relative_error, f"lg.agg.approx_count_distinct({self.column!r})"
            )
            object.__setattr__(self, "relative_error", error)
            dv.datasketches()  # missing: say which extra installs it, now
        elif self.relative_error is not None:
            raise ConfigurationError(
                f"lg.agg.{self.kind} takes no relative_error (only "
                "lg.agg.approx_count_distinct does)"
            )
        if self.column is None and self.kind != "count":
            raise ConfigurationError(
                f"lg.agg.{self.kind} needs a column name, e.g. lg.agg.{self.kind}('v')"
            )
        if self.column is not None and not (isinstance(self.column, str) and self.column):
            raise ConfigurationError(
                f"lg.agg.{self.kind}: the column must be a non-empty string, got {self.column!r}"
            )
        if not (isinstance(self.name, str) and self.name):
            raise ConfigurationError(
                f"lg.agg.{self.kind}: name must be a non-empty string, got {self.name!r}"
            )

    @property
    def lg_k(self) -> int | None:
        """``approx_count_distinct``: the HLL sketch's ``lg_k`` for ``relative_error``."""
        return None if self.relative_error is None else dv.lg_k_for(self.relative_error)

    def __repr__(self) -> str:
        arg = "" if self.column is None else repr(self.column)
        if self.relative_error is not None:
            arg += f", relative_error={self.relative_error!r}"
        return f"lg.agg.{self.kind}({arg}) as {self.name!r}"


def _make(
    kind: str, column: str | None, name: str | None, relative_error: float | None = None
) -> WindowAggregate:
    if name is None:
        name = kind if column is None else f"{kind}_{column}"
    return WindowAggregate(kind, column, name, relative_error)


class AggregateBuilders:
    """The ``lg.agg`` namespace: builders of :class:`WindowAggregate`. The output
    column is ``name`` or, by default, ``"<kind>_<column>"`` (``"count"`` for ``count()``)."""

    @staticmethod
    def count(column: str | None = None, *, name: str | None = None) -> WindowAggregate:
        """Records in the window; with ``column``, its non-null values. int64."""
        return _make("count", column, name)

    @staticmethod
    def sum(column: str, *, name: str | None = None) -> WindowAggregate:
        """Sum of the non-null values; null if none."""
        return _make("sum", column, name)

    @staticmethod
    def min(column: str, *, name: str | None = None) -> WindowAggregate:
        """Smallest non-null value; null if none."""
        return _make("min", column, name)

    @staticmethod
    def max(column: str, *, name: str | None = None) -> WindowAggregate:
        """Largest non-null value; null if none."""
        return _make("max", column, name)

    @staticmethod
    def mean(column: str, *, name: str | None = None) -> WindowAggregate:
        """Mean of the non-null values (float64); null if none."""
        return _make("mean", column, name)

    @staticmethod
    def first(column: str, *, name: str | None = None) -> WindowAggregate:
        """Non-null value with the smallest timestamp (ties: earliest arrival)."""
        return _make("first", column, name)

    @staticmethod
    def last(column: str, *, name: str | None = None) -> WindowAggregate:
        """Non-null value with the largest timestamp (ties: latest arrival)."""
        return _make("last", column, name)

    @staticmethod
    def count_distinct(column: str, *, name: str | None = None) -> WindowAggregate:
        """Exact number of distinct non-null values (int64, 0 if none). Each window
        keeps its distinct values: for very many per window, use
        :meth:`approx_count_distinct`."""
        return _make("count_distinct", column, name)

    @staticmethod
    def approx_count_distinct(
        column: str, *, relative_error: float = 0.02, name: str | None = None
    ) -> WindowAggregate:
        """Estimated number of distinct non-null values (int64, 0 if none): a
        mergeable HyperLogLog sketch (Apache DataSketches; ``pip install
        'lockgate[sketches]'``) of fixed size per window. ``relative_error``, from
        0.001 to 0.25, is the estimate's relative standard error; it sets the
        sketch's ``lg_k`` (``1.04 / sqrt(2**lg_k) <= relative_error``: 0.02 -> 12,
        4 KiB per window at most)."""
        return _make("approx_count_distinct", column, name, relative_error)


agg = AggregateBuilders()


# --- grouping rows by (key, window) -----------------------------------------------------


class WindowGroups(NamedTuple):
    """Rows grouped by (key, window start): ``group_ids[i]`` in ``[0, num_groups)``;
    ``first_row[g]`` is the first row of group ``g``. Groups are ordered by window
    start, then key code (so each window's groups are one contiguous run)."""

    group_ids: np.ndarray
    first_row: np.ndarray

    @property
    def num_groups(self) -> int:
        return len(self.first_row)


def group_keys_and_windows(key_codes: np.ndarray, window_start: np.ndarray) -> WindowGroups:
    """Group rows by ``(key_codes[i], window_start[i])`` (two int arrays of one length).

    Dense arithmetic when keys and window starts span a small range (the usual
    case: a batch covers a few windows), hashing-free sorting otherwise.
    """
    keys = np.asarray(key_codes)
    starts = np.asarray(window_start)
    if (
        keys.ndim != 1
        or starts.ndim != 1
        or len(keys) != len(starts)
        or (len(keys) and (keys.dtype.kind not in "iu" or starts.dtype.kind not in "iu"))
    ):
        raise ConfigurationError(
            "group_keys_and_windows needs two 1-D integer arrays of one length (int key "
            f"codes and window starts), got {keys.dtype}{keys.shape} and "
            f"{starts.dtype}{starts.shape}"
        )
    n = len(keys)
    if n == 0:
        return WindowGroups(np.empty(0, np.int64), np.empty(0, np.int64))
    keys = keys.astype(np.int64, copy=False)
    starts = starts.astype(np.int64, copy=False)
    kmin, kmax = int(keys.min()), int(keys.max())
    smin, smax = int(starts.min()), int(starts.max())
    limit = max(4 * n, 1 << 16)
    kspan = kmax - kmin + 1
    offsets = starts - smin
    step = 1
    if kspan * (smax - smin + 1) > limit and smax > smin:
        step = int(np.gcd.reduce(offsets))
    wspan = (smax - smin) // step + 1
    if kspan * wspan <= _I64_MAX // 2:
        wcode = offsets // step if step > 1 else offsets
        combined = wcode * kspan + (keys - kmin)
        if kspan * wspan <= limit:
            present = np.zeros(kspan * wspan, dtype=bool)
            present[combined] = True
            code = np.cumsum(present, dtype=np.int64) - 1
            group_ids = code[combined]
            num = int(code[-1]) + 1
        else:
            uniq, inverse = np.unique(combined, return_inverse=True)
            group_ids, num = inverse.astype(np.int64, copy=False), len(uniq)
    else:
        order = np.lexsort((keys, starts))
        ks, ss = keys[order], starts[order]
        opens = np.ones(n, dtype=bool)
        opens[1:] = (ks[1:] != ks[:-1]) | (ss[1:] != ss[:-1])
        group_ids = np.empty(n, dtype=np.int64)
        group_ids[order] = np.cumsum(opens) - 1
        num = int(opens.sum())
    first_row = np.full(num, n, dtype=np.int64)
    np.minimum.at(first_row, group_ids, np.arange(n, dtype=np.int64))
    return WindowGroups(group_ids, first_row)


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


def _kind_of(spec: WindowAggregate) -> _Kind:
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


def _column(data: pa.RecordBatch | pa.Table, spec: WindowAggregate) -> pa.Array:
    assert spec.column is not None
    names = data.schema.names
    if spec.column not in names:
        raise ConfigurationError(
            f"{spec!r}: the records have no column {spec.column!r}; their columns are "
            f"{names}. Aggregate an existing column (scalar records: 'value')"
        )
    col = data.column(spec.column)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _decoded(col: pa.Array) -> pa.Array:
    return col.dictionary_decode() if pa.types.is_dictionary(col.type) else col


def _read(
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


def _promote(
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


# --- accumulators -----------------------------------------------------------------------


@state_record("window.accumulators")
class Accumulators:
    """Running (or partial) accumulators: one row per (key, window), columnar.

    ``fields[i]`` holds the numpy fields of aggregate ``i`` (see the module
    docstring); ``types[i]`` the Arrow type of its column (None until a
    non-null-typed column was seen, and for ``count`` and the distinct counts, whose
    rows keep their values' own types). Methods that return an
    ``Accumulators`` leave their inputs untouched; :meth:`merge_into` updates
    in place. Picklable.
    """

    __slots__ = ("aggregation", "fields", "types")

    def __init__(
        self,
        aggregation: WindowAggregation,
        fields: Sequence[Fields],
        types: Sequence[pa.DataType | None],
    ) -> None:
        self.aggregation = aggregation
        self.fields: tuple[Fields, ...] = tuple(fields)
        self.types: tuple[pa.DataType | None, ...] = tuple(types)

    def __len__(self) -> int:
        return len(self.fields[0][0])

    def __getstate__(self) -> tuple[Any, ...]:
        # distinct values and sketches go as plain data (Arrow IPC, compact sketches)
        fields = tuple(
            _kind_of(s).dump(fs) for s, fs in zip(self.aggregation.aggregates, self.fields)
        )
        return (self.aggregation, fields, self.types)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        aggregation, fields, types = state
        self.aggregation = aggregation
        self.fields = tuple(_kind_of(s).load(f) for s, f in zip(aggregation.aggregates, fields))
        self.types = tuple(types)

    def __state_fields__(self) -> dict[str, Any]:
        aggregation, fields, types = self.__getstate__()
        return {"aggregation": aggregation, "fields": fields, "types": types}

    @classmethod
    def __from_state_fields__(cls, fields: dict[str, Any]) -> Accumulators:
        out = cls.__new__(cls)
        out.__setstate__((fields["aggregation"], fields["fields"], fields["types"]))
        return out

    def __repr__(self) -> str:
        return f"Accumulators({len(self)} rows of {list(self.aggregation.names)})"

    def _map(self, fn: Callable[[np.ndarray], np.ndarray]) -> Accumulators:
        return Accumulators(
            self.aggregation, [tuple(fn(f) for f in fs) for fs in self.fields], self.types
        )

    def take(self, indices: np.ndarray | Sequence[int]) -> Accumulators:
        """The rows at ``indices``, in that order."""
        idx = np.asarray(indices, dtype=np.int64)
        return self._map(lambda f: f[idx])

    def slice(self, start: int, stop: int) -> Accumulators:
        """The rows ``[start, stop)`` as views of these (read them, do not write)."""
        out = Accumulators.__new__(Accumulators)
        out.aggregation = self.aggregation
        out.fields = tuple(tuple([f[start:stop] for f in fs]) for fs in self.fields)
        out.types = self.types
        return out

    def _aligned(self, other: Accumulators) -> tuple[Accumulators, Accumulators]:
        """Both sides with one value type per aggregate (fields of an unseen type
        adopt the other side's dtype; numeric types widen)."""
        if other.aggregation != self.aggregation:
            raise ConfigurationError(
                f"cannot combine accumulators of {list(self.aggregation.names)} with "
                f"accumulators of {list(other.aggregation.names)}"
            )
        a_fields, b_fields, types = [], [], []
        for spec, af, bf, at, bt in zip(
            self.aggregation.aggregates, self.fields, other.fields, self.types, other.types
        ):
            # distinct counts: each row keeps its values' own type (rows of other keys
            # need no common type; one row's values unify exactly, dv._unify)
            t = None if spec.kind in DISTINCT_KINDS else _promote(at, bt, spec)
            k = _kind_of(spec).value_fields
            if k and af[0].dtype != bf[0].dtype:
                dtype = (
                    bf[0].dtype
                    if at is None
                    else af[0].dtype
                    if bt is None
                    else np.result_type(af[0].dtype, bf[0].dtype)
                )
                af = (af[0].astype(dtype),) + af[1:]
                bf = (bf[0].astype(dtype),) + bf[1:]
            a_fields.append(af)
            b_fields.append(bf)
            types.append(t)
        return (
            Accumulators(self.aggregation, a_fields, types),
            Accumulators(self.aggregation, b_fields, types),
        )

    def merge(self, other: Accumulators) -> Accumulators:
        """Row ``i`` of the result combines row ``i`` of both (``self`` counts as
        the earlier arrival). Associative: ``a.merge(b).merge(c)`` equals
        ``a.merge(b.merge(c))`` (exactly, up to float rounding of sums)."""
        if len(other) != len(self):
            raise ConfigurationError(
                f"merge needs accumulators of one length, got {len(self)} and {len(other)}"
            )
        a, b = self._aligned(other)
        fields = [
            _naming_columns(s, _kind_of(s).merge, af, bf)
            for s, af, bf in zip(self.aggregation.aggregates, a.fields, b.fields)
        ]
        return Accumulators(self.aggregation, fields, a.types)

    def reduce(self, group_ids: np.ndarray, num_groups: int) -> Accumulators:
        """Combine the rows of each group (row order is arrival order); e.g. the
        running rows of session windows that merged. Groups without rows are empty."""
        group = np.asarray(group_ids, dtype=np.int64)
        if len(group) != len(self):
            raise ConfigurationError(
                f"reduce needs one group id per row: {len(group)} ids for {len(self)} rows"
            )
        fields = [
            _naming_columns(s, _kind_of(s).reduce, fs, group, num_groups)
            for s, fs in zip(self.aggregation.aggregates, self.fields)
        ]
        return Accumulators(self.aggregation, fields, self.types)

    def merge_into(
        self, rows: np.ndarray | Sequence[int], other: Accumulators, *, distinct: bool = False
    ) -> None:
        """In place: row ``rows[i]`` of ``self`` absorbs row ``i`` of ``other``.

        ``rows`` may repeat (other's rows for one target combine in their order).
        ``distinct=True`` is the caller's promise that ``rows`` has no repeats (a
        batch's partials, one per (key, window)); it skips the search for them.
        """
        target = np.asarray(rows, dtype=np.int64)
        if len(target) != len(other):
            raise ConfigurationError(
                f"merge_into needs one target row per row: {len(target)} for {len(other)}"
            )
        if not distinct:
            uniq, inverse = np.unique(target, return_inverse=True)
            if len(uniq) != len(target):
                other = other.reduce(inverse, len(uniq))
                target = uniq
        merged = self.take(target).merge(other)
        fields = []
        for own, new in zip(self.fields, merged.fields):
            updated = []
            for f, g in zip(own, new):
                if f.dtype != g.dtype:
                    f = f.astype(g.dtype)
                f[target] = g
                updated.append(f)
            fields.append(tuple(updated))
        self.fields = tuple(fields)
        self.types = merged.types

    @staticmethod
    def concat(parts: Sequence[Accumulators]) -> Accumulators:
        """The rows of ``parts`` one after the other (one aggregation)."""
        if not parts:
            raise ConfigurationError("Accumulators.concat needs at least one part")
        first = parts[0]
        aligned = list(parts)
        if not _one_form(aligned):
            for _ in range(2):  # a second pass spreads a type the first pass met late
                ref = aligned[0]
                for i in range(1, len(aligned)):
                    ref, aligned[i] = ref._aligned(aligned[i])
                aligned[0] = ref
        fields = [
            tuple(
                np.concatenate([p.fields[a][f] for p in aligned])
                for f in range(len(first.fields[a]))
            )
            for a in range(len(first.fields))
        ]
        return Accumulators(first.aggregation, fields, aligned[0].types)

    def results(self) -> dict[str, pa.Array]:
        """One Arrow array per aggregate, by output name, in declaration order."""
        return {
            s.name: _kind_of(s).result(fs, t)
            for s, fs, t in zip(self.aggregation.aggregates, self.fields, self.types)
        }


def _naming_columns(spec: WindowAggregate, fn: Callable[..., Fields], *args: Any) -> Fields:
    """``fn(*args)``, with a distinct count's IncomparableValues naming the column."""
    try:
        return fn(*args)
    except dv.IncomparableValues as e:
        raise ConfigurationError(f"{spec!r}: column {spec.column!r} {e}") from e


def _one_form(parts: Sequence[Accumulators]) -> bool:
    """Whether ``parts`` share one aggregation, Arrow types and field dtypes (then
    they concatenate as they are, without aligning types pairwise)."""
    first = parts[0]
    dtypes = [f.dtype for fs in first.fields for f in fs]
    for p in parts[1:]:
        if p.aggregation is not first.aggregation and p.aggregation != first.aggregation:
            return False
        if p.types != first.types:
            return False
        if [f.dtype for fs in p.fields for f in fs] != dtypes:
            return False
    return True


# --- the aggregation of one operator ------------------------------------------------------


class WindowPartials(NamedTuple):
    """The partial aggregates of a batch: group ``g`` is the window
    ``[window_start[g], window_end[g])`` of key code ``key_code[g]``, its
    accumulators row ``g`` of ``accumulators``. Ordered by window start, then key
    code: each window's partials are one contiguous run."""

    key_code: np.ndarray
    window_start: np.ndarray
    window_end: np.ndarray
    accumulators: Accumulators


@state_record("window.aggregation")
@dataclass(frozen=True)
class WindowAggregation:
    """The built-in aggregates of one window operator, in output order."""

    aggregates: tuple[WindowAggregate, ...]

    def __post_init__(self) -> None:
        aggs = tuple(self.aggregates)
        object.__setattr__(self, "aggregates", aggs)
        if not aggs:
            raise ConfigurationError(
                "aggregate(...) needs at least one aggregate, e.g. lg.agg.count()"
            )
        for a in aggs:
            if not isinstance(a, WindowAggregate):
                raise ConfigurationError(
                    f"aggregate(...) takes lg.agg.* aggregates, got {a!r}; "
                    "pass e.g. lg.agg.sum('v'), or a single AggregateFunction"
                )
        seen: set[str] = set()
        for a in aggs:
            if a.name in seen:
                raise ConfigurationError(
                    f"two aggregates write the output column {a.name!r}; give one "
                    "another name, e.g. lg.agg.sum('v', name='total')"
                )
            seen.add(a.name)
        for a in aggs:
            if a.name in (WINDOW_START, WINDOW_END):
                raise ConfigurationError(
                    f"{a!r}: {a.name!r} is the window bound column of window results; "
                    "choose another name"
                )

    @classmethod
    def of(cls, *aggregates: WindowAggregate) -> WindowAggregation:
        return cls(tuple(aggregates))

    @property
    def names(self) -> tuple[str, ...]:
        """The output column names."""
        return tuple(a.name for a in self.aggregates)

    @property
    def needs_timestamps(self) -> bool:
        """Whether a first/last aggregate needs record timestamps."""
        return any(a.kind in ("first", "last") for a in self.aggregates)

    def empty(self, n: int = 0) -> Accumulators:
        """``n`` rows of empty accumulators (count 0, every other aggregate null)."""
        float64 = np.dtype(np.float64)
        fields = [_kind_of(a).empty(n, float64) for a in self.aggregates]
        return Accumulators(self, fields, [None] * len(self.aggregates))

    def partial(
        self,
        data: ArrowData,
        group_ids: np.ndarray,
        num_groups: int,
        *,
        rows: np.ndarray | None = None,
        timestamps: np.ndarray | None = None,
    ) -> Accumulators:
        """Reduce the records of ``data`` to one accumulator row per group.

        Row ``i`` of the grouping is record ``rows[i]`` (default: record ``i``)
        in group ``group_ids[i]``; a record may appear in several groups
        (sliding windows). ``timestamps`` (one per record, int ms) are needed
        by first/last. Rows in a group combine in their order (arrival order).
        """
        table = (
            to_arrow(data, operator="a window aggregate") if isinstance(data, RowBatch) else data
        )
        n_records = table.num_rows
        group = np.asarray(group_ids, dtype=np.int64)
        picks = None if rows is None else np.asarray(rows, dtype=np.int64)
        if len(group) != (n_records if picks is None else len(picks)):
            raise ConfigurationError(
                f"partial: {len(group)} group ids for "
                f"{n_records if picks is None else len(picks)} rows; pass one per row"
            )
        if len(group) and (int(group.min()) < 0 or int(group.max()) >= num_groups):
            raise ConfigurationError(
                f"partial: group ids must lie in [0, {num_groups}), got "
                f"[{int(group.min())}, {int(group.max())}]"
            )
        ts = np.zeros(0, np.int64)
        if self.needs_timestamps:
            if timestamps is None:
                raise ConfigurationError("first/last aggregates need the records' timestamps")
            ts = np.asarray(timestamps, dtype=np.int64)
            if len(ts) != n_records:
                raise ConfigurationError(
                    f"partial: {len(ts)} timestamps for {n_records} records; pass one per record"
                )
            if picks is not None:
                ts = ts[picks]
        fields: list[Fields] = []
        types: list[pa.DataType | None] = []
        cache: dict[str, pa.Array] = {}
        for spec in self.aggregates:
            kind = _kind_of(spec)
            if spec.column is None:
                fields.append((np.bincount(group, minlength=num_groups).astype(np.int64),))
                types.append(None)
                continue
            if spec.column not in cache:
                cache[spec.column] = _column(table, spec)
            if spec.kind in DISTINCT_KINDS:
                col = _decoded(cache[spec.column])
                dv.check_value_type(repr(spec), col.type)
                made = kind.from_column(col, picks, group, num_groups)
                assert made is not None
                fields.append(made)
                types.append(None)  # per row, in the values (see _aligned)
                continue
            values, valid, t = _read(spec, cache[spec.column])
            if picks is not None:
                valid = valid[picks]
                values = values[picks] if len(values) else values
            if spec.kind == "count":
                counts = np.bincount(group, weights=valid, minlength=num_groups)
                fields.append((counts.astype(np.int64),))
            else:
                fields.append(kind.reduce(kind.lift(values, valid, ts), group, num_groups))
            types.append(t)
        return Accumulators(self, fields, types)

    def aggregate_batch(
        self,
        data: ArrowData,
        key_codes: np.ndarray,
        assignment: WindowAssignment,
        timestamps: np.ndarray | None = None,
    ) -> WindowPartials:
        """Group ``data``'s records by (key, window) and reduce each group.

        ``key_codes`` are int codes of the records' keys (one per record);
        ``assignment`` is the window assigner's output for the records.
        """
        rows, starts, ends = assignment
        codes = np.asarray(key_codes)
        picked = codes[rows]
        groups = group_keys_and_windows(picked, starts)
        acc = self.partial(
            data, groups.group_ids, groups.num_groups, rows=rows, timestamps=timestamps
        )
        first = groups.first_row
        return WindowPartials(
            picked[first].astype(np.int64, copy=False), starts[first], ends[first], acc
        )


def window_result_batch(
    keys: dict[str, pa.Array] | Iterable[tuple[str, pa.Array]],
    window_start: np.ndarray,
    window_end: np.ndarray,
    accumulators: Accumulators,
) -> pa.RecordBatch:
    """The output of fired windows: the key column(s), ``window_start`` and
    ``window_end`` (int64 ms) and one column per aggregate, one row per window."""
    columns = dict(keys)
    clash = set(columns) & (set(accumulators.aggregation.names) | {WINDOW_START, WINDOW_END})
    if clash:
        raise ConfigurationError(
            f"the key column(s) {sorted(clash)} collide with window result columns; "
            "rename the aggregate (name=...) or the key column"
        )
    columns[WINDOW_START] = pa.array(np.asarray(window_start, dtype=np.int64))
    columns[WINDOW_END] = pa.array(np.asarray(window_end, dtype=np.int64))
    columns.update(accumulators.results())
    return pa.RecordBatch.from_pydict(columns)


__all__ = [
    "KINDS",
    "WINDOW_END",
    "WINDOW_START",
    "Accumulators",
    "AggregateBuilders",
    "WindowAggregate",
    "WindowAggregation",
    "WindowGroups",
    "WindowPartials",
    "agg",
    "group_keys_and_windows",
    "window_result_batch",
]

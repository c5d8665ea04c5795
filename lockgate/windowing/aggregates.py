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

The code: :mod:`.aggregate_specs` declares aggregates (``WindowAggregate``,
``lg.agg``), :mod:`.window_groups` groups a batch's rows by (key, window),
:mod:`.aggregate_kinds` computes each kind's fields and reads columns, and this module
holds the accumulators, the aggregation of one window operator and its result batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import pyarrow as pa

from ..core.batch import RowBatch, to_arrow
from ..core.state_records import state_record
from ..errors import ConfigurationError
from . import distinct_values as dv
from .aggregate_kinds import (
    Fields,
    column_of,
    decoded,
    kind_of,
    promote_types,
    read_values,
)
from .aggregate_specs import DISTINCT_KINDS, WINDOW_END, WINDOW_START, WindowAggregate
from .assigners import WindowAssignment
from .window_groups import group_keys_and_windows

ArrowData: TypeAlias = "pa.RecordBatch | pa.Table | RowBatch"


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
            kind_of(s).dump(fs) for s, fs in zip(self.aggregation.aggregates, self.fields)
        )
        return (self.aggregation, fields, self.types)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        aggregation, fields, types = state
        self.aggregation = aggregation
        self.fields = tuple(kind_of(s).load(f) for s, f in zip(aggregation.aggregates, fields))
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
            t = None if spec.kind in DISTINCT_KINDS else promote_types(at, bt, spec)
            k = kind_of(spec).value_fields
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
            _naming_columns(s, kind_of(s).merge, af, bf)
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
            _naming_columns(s, kind_of(s).reduce, fs, group, num_groups)
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
            s.name: kind_of(s).result(fs, t)
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
        fields = [kind_of(a).empty(n, float64) for a in self.aggregates]
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
            kind = kind_of(spec)
            if spec.column is None:
                fields.append((np.bincount(group, minlength=num_groups).astype(np.int64),))
                types.append(None)
                continue
            if spec.column not in cache:
                cache[spec.column] = column_of(table, spec)
            if spec.kind in DISTINCT_KINDS:
                col = decoded(cache[spec.column])
                dv.check_value_type(repr(spec), col.type)
                made = kind.from_column(col, picks, group, num_groups)
                assert made is not None
                fields.append(made)
                types.append(None)  # per row, in the values (see _aligned)
                continue
            values, valid, t = read_values(spec, cache[spec.column])
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
    "Accumulators",
    "WindowAggregation",
    "WindowPartials",
    "window_result_batch",
]

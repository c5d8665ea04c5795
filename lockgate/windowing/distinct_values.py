"""Distinct values per accumulator row, exact or sketched, a batch at a time.

The two distinct-count aggregates (``lg.agg.count_distinct`` and
``lg.agg.approx_count_distinct``, see :mod:`.aggregates`) keep, per (key,
window) row, an immutable value: a row's distinct values as one Arrow array (exact),
or an Apache DataSketches HyperLogLog sketch (approximate); ``None`` for a row
without values. Rows are never changed in place: merging builds new arrays or
sketches, so copies of a row array share them safely (copy-on-write snapshots).

Grouping is vectorized: a column is dictionary-encoded once (Arrow's hash table),
and (row, value code) pairs are deduplicated with one numpy ``unique``; only the
distinct pairs of a batch are then touched one by one, and only by the sketch (the
DataSketches Python API updates a sketch one value at a time).

Equality is the column's, after normalisation: integers of any width are int64
(uint64 stays uint64), floats float64 with ``-0.0`` taken as ``0.0`` and every NaN
one value. A row's values have one type; rows of different types (a column whose
type changed between batches) are united exactly, never rounded (:func:`_unify`):
numbers as int64 (or uint64) when every float among them is integral and in range,
so ``1`` and ``1.0`` are one value and ``2**53 + 1`` stays apart from ``2**53``, else
as float64 when every int is within +-2**53; strings as large_string, binary as
large_binary; values with no exact common type raise :class:`IncomparableValues`
(a ConfigurationError). Only the rows of one (key, window) are ever unified. Sketches
hash integral floats as integers for the same equality.

Rows own their values: a row that is a small part of the array a batch or merge
built gets a compact copy (:func:`_split`), so a row no longer updated does not keep
the other rows' values alive.

Checkpoints hold no Python objects of either: exact rows are written as one Arrow
IPC stream per value type plus each row's length and stream, sketches with DataSketches'
own compact serialization (:func:`dump_exact`, :func:`dump_sketches`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigurationError

#: the allowed range of ``relative_error`` (lg_k 21 and 5 of the HLL sketch)
RELATIVE_ERROR_MIN = 0.001
RELATIVE_ERROR_MAX = 0.25
#: the relative standard error of a merged HLL sketch of k = 2**lg_k registers is
#: about HLL_RSE_FACTOR / sqrt(k) (DataSketches' HLL accuracy documentation)
HLL_RSE_FACTOR = 1.04
LG_K_MIN, LG_K_MAX = 4, 21
SKETCHES_EXTRA = "sketches"

Rows = np.ndarray  # object array, one entry per row: pa.Array, sketch or None


# --- validation ---------------------------------------------------------------------------


def lg_k_for(relative_error: float) -> int:
    """The HLL ``lg_k`` for a relative standard error: the smallest ``lg_k`` with
    ``1.04 / sqrt(2**lg_k) <= relative_error``. 0.02 -> 12, 0.05 -> 9, 0.01 -> 14,
    0.001 -> 21."""
    need = math.ceil(2 * math.log2(HLL_RSE_FACTOR / relative_error) - 1e-12)
    return max(LG_K_MIN, min(LG_K_MAX, need))


def check_relative_error(relative_error: Any, what: str) -> float:
    """``relative_error`` as a float, or a ConfigurationError naming the allowed range."""
    ok = isinstance(relative_error, (int, float)) and not isinstance(relative_error, bool)
    if not ok or not (RELATIVE_ERROR_MIN <= float(relative_error) <= RELATIVE_ERROR_MAX):
        raise ConfigurationError(
            f"{what}: relative_error must be a number from {RELATIVE_ERROR_MIN} to "
            f"{RELATIVE_ERROR_MAX} (the estimate's relative standard error; 0.02 is the "
            f"default), got {relative_error!r}; for exact counts use lg.agg.count_distinct"
        )
    return float(relative_error)


def datasketches() -> Any:
    """The ``datasketches`` module, or a ConfigurationError saying which extra installs it."""
    try:
        import datasketches as module
    except ImportError as e:
        raise ConfigurationError(
            "lg.agg.approx_count_distinct needs the datasketches package (Apache "
            f"DataSketches): pip install 'lockgate[{SKETCHES_EXTRA}]' (or pip install "
            f"datasketches) in the driver's and the workers' environment ({e})"
        ) from e
    return module


def check_value_type(what: str, t: pa.DataType) -> None:
    """Distinct counts take numeric, bool, temporal, string and binary columns."""
    if (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_temporal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_decimal(t)
        or pa.types.is_null(t)
    ):
        return
    raise ConfigurationError(
        f"{what} counts values of numeric, bool, temporal, decimal, string or binary "
        f"columns, but the column is {t}; count a derived scalar column (e.g. a string "
        "made with map_batches), or use a user AggregateFunction"
    )


# --- normalising and grouping values --------------------------------------------------------


def _normalize(values: pa.Array) -> pa.Array:
    """One canonical type per kind of value (see the module docstring)."""
    t = values.type
    if pa.types.is_floating(t):
        return pc.add(values.cast(pa.float64()), pa.scalar(0.0))  # -0.0 + 0.0 is 0.0
    if pa.types.is_integer(t) and t != pa.uint64() and t != pa.int64():
        return values.cast(pa.int64())
    return values


class IncomparableValues(ConfigurationError):
    """Distinct values of one row came with types that have no exact common type
    (the window aggregate adds its column's name to the message)."""

    def __init__(self, types: list[pa.DataType], reason: str) -> None:
        self.types = sorted({_type_name(t) for t in types})
        super().__init__(
            f"holds values of types {' and '.join(self.types)} in one (key, window) that "
            f"cannot be compared exactly ({reason}); cast the column to one type upstream "
            "(e.g. keep an ID column int64 with nulls instead of letting pandas turn it "
            "into float64, or make it a string)"
        )


def _type_name(t: pa.DataType) -> str:
    """Arrow's name of ``t``, floats by their width as numpy and pandas name them."""
    return {"double": "float64", "float": "float32", "halffloat": "float16"}.get(str(t), str(t))


def _family(t: pa.DataType) -> str:
    """Kinds of value that can be equal across types; no value of one family equals a
    value of another (the int ``1`` is not the string ``"1"``)."""
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.tz}]"
    for name in ("date", "time", "duration", "decimal"):
        if getattr(pa.types, f"is_{name}")(t):
            return name
    return str(t)


def _candidates(types: list[pa.DataType]) -> list[pa.DataType]:
    """The types to try, in order, as the exact common type of ``types``' values."""
    family = _family(types[0])
    if family == "number":
        # integers first: an integral float equals the int it is exactly, and ints are
        # never rounded to floats (int64 above 2**53 into float64 fails the safe cast)
        return [pa.int64(), pa.uint64(), pa.float64()]
    if family == "string":
        return [pa.large_string()]
    if family == "binary":
        return [pa.large_binary()]
    return sorted(types, key=str)  # temporal, decimal: whichever holds all exactly


def _unify(arrays: list[pa.Array]) -> list[pa.Array]:
    """``arrays`` in one type holding every value exactly (safe casts only: a cast that
    would round, truncate or overflow a value is not taken), or IncomparableValues."""
    types = list({a.type for a in arrays})
    if len(types) == 1:
        return arrays
    if len({_family(t) for t in types}) > 1:
        raise IncomparableValues(types, "values of different kinds are never equal")
    for target in _candidates(types):
        try:
            return [a if a.type == target else _normalize(a.cast(target)) for a in arrays]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    numbers = _family(types[0]) == "number"
    raise IncomparableValues(
        types,
        "no type holds them all exactly: int64 above 2**53 or uint64 above 2**63 - 1 next "
        "to non-integral floats, NaN or negative ints"
        if numbers
        else "no type among them holds them all exactly",
    )


def _factorize(values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Int64 codes of ``values`` (-1 for nulls) and their dictionary (no duplicates)."""
    if pa.types.is_null(values.type):
        return np.full(len(values), -1, np.int64), pa.array([], pa.int64())
    encoded = _normalize(values).dictionary_encode()
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    return codes.astype(np.int64, copy=False), encoded.dictionary


def _distinct_pairs(
    groups: np.ndarray, codes: np.ndarray, ncodes: int
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (group, code) pairs, sorted by group then code."""
    if not len(codes):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    span = max(ncodes, 1)
    if int(groups.max()) < (np.iinfo(np.int64).max // span) - 1:
        # a sort, not np.unique: numpy 2's hashing unique is ten times slower here
        joined = np.sort(groups * span + codes)
        keep = np.ones(len(joined), bool)
        np.not_equal(joined[1:], joined[:-1], out=keep[1:])
        joined = joined[keep]
        return joined // span, joined % span
    order = np.lexsort((codes, groups))
    g, c = groups[order], codes[order]
    keep = np.ones(len(g), bool)
    keep[1:] = (g[1:] != g[:-1]) | (c[1:] != c[:-1])
    return g[keep], c[keep]


def _batch_pairs(
    column: pa.Array, picks: np.ndarray | None, group: np.ndarray
) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """The distinct (group, value code) pairs of a batch's non-null values (record
    ``picks[i]``, default ``i``, in group ``group[i]``) and the codes' dictionary."""
    codes, dictionary = _factorize(column)
    if picks is not None:
        codes = codes[picks]
    keep = codes >= 0
    if not bool(keep.all()):
        codes, group = codes[keep], group[keep]
    pair_groups, pair_codes = _distinct_pairs(group, codes, len(dictionary))
    return pair_groups, pair_codes, dictionary


def _bounds(pair_groups: np.ndarray, size: int) -> np.ndarray:
    return np.searchsorted(pair_groups, np.arange(size + 1, dtype=np.int64))


def _exact_rows(pair_groups: np.ndarray, values: pa.Array, size: int) -> Rows:
    """Row ``g``: the values of ``values`` (sorted by group) of group ``g``, or None."""
    return _split(values, _bounds(pair_groups, size), size)


def _split(values: pa.Array, bounds: np.ndarray, size: int) -> Rows:
    """Row ``g``: ``values[bounds[g]:bounds[g + 1]]`` (None if empty), each row its own
    compact copy unless it holds at least half of ``values``' bytes.

    A zero-copy slice keeps its whole buffer alive: a row not updated again would keep
    the values of every row it was built with (a whole batch or merge) for as long as
    its window lives. A row's copy costs one concatenation; a row that is most of the
    buffer keeps the slice (at most twice its own size held).
    """
    out = np.full(size, None, dtype=object)
    runs = _runs(bounds)
    if not runs:
        return out
    row_bytes, total = _row_bytes(values, bounds)
    whole = len(runs) == 1 and runs[0][1] == 0 and runs[0][2] == len(values)
    for g, lo, hi in runs:
        row = values.slice(lo, hi - lo)
        out[g] = row if whole or 2 * int(row_bytes[g]) >= total else pa.concat_arrays([row])
    return out


def _row_bytes(values: pa.Array, bounds: np.ndarray) -> tuple[np.ndarray, int]:
    """The bytes of each row's values (``bounds`` as in :func:`_split`) and of all."""
    counts = np.diff(bounds)
    t = values.type
    variable = {pa.string(): np.int32, pa.binary(): np.int32}.get(t) or (
        np.int64 if t in (pa.large_string(), pa.large_binary()) else None
    )
    if variable is None:
        width = max(t.bit_width // 8, 1) if t != pa.bool_() else 1
        sizes = counts * width
        return sizes, int(len(values) * width)
    offsets = np.frombuffer(values.buffers()[1], dtype=variable)[
        values.offset : values.offset + len(values) + 1
    ].astype(np.int64)
    data = offsets[bounds[1:]] - offsets[bounds[:-1]]
    width = np.dtype(variable).itemsize
    sizes = data + counts * width
    return sizes, int(offsets[-1] - offsets[0]) + len(values) * width


def _runs(bounds: np.ndarray) -> list[tuple[int, int, int]]:
    """(group, lo, hi) of each group with pairs, from :func:`_bounds`."""
    groups = np.flatnonzero(bounds[1:] > bounds[:-1])
    return list(zip(groups.tolist(), bounds[groups].tolist(), bounds[groups + 1].tolist()))


def _present(rows: Rows) -> np.ndarray:
    return np.fromiter((r is not None for r in rows), dtype=bool, count=len(rows))


# --- exact --------------------------------------------------------------------------------


def exact_empty(n: int) -> Rows:
    return np.full(n, None, dtype=object)


def exact_partial(column: pa.Array, picks: np.ndarray | None, group: np.ndarray, size: int) -> Rows:
    """The distinct non-null values of ``column`` per group: record ``picks[i]``
    (default ``i``) belongs to group ``group[i]``."""
    pair_groups, pair_codes, dictionary = _batch_pairs(column, picks, group)
    return _exact_rows(pair_groups, dictionary.take(pa.array(pair_codes)), size)


def exact_reduce(rows: Rows, group: np.ndarray, size: int) -> Rows:
    """Row ``g``: the union of the rows in group ``g``.

    Only rows of one group are ever compared: groups whose rows share a type (the
    usual case) reduce together in one vectorized pass, groups mixing types are
    reduced per mix of types (:func:`_reduce_mix`), each group in the exact common
    type of its own values (:func:`_unify`): rows of other groups never need a common
    type with them.
    """
    present = np.flatnonzero(_present(rows))
    if not len(present):
        return exact_empty(size)
    arrays = [rows[i] for i in present.tolist()]
    groups = group[present]
    codes: dict[pa.DataType, int] = {}
    type_code = np.fromiter(
        (codes.setdefault(a.type, len(codes)) for a in arrays), dtype=np.int64, count=len(arrays)
    )
    if len(codes) == 1:
        return _reduce_one(arrays, groups, size)
    # each group's mix of types, as a bit set of type codes (object ints: any number)
    mixes = np.zeros(size, dtype=object)
    bits = np.array([1 << c for c in type_code.tolist()], dtype=object)
    np.bitwise_or.at(mixes, groups, bits)
    out = exact_empty(size)
    row_mix = mixes[groups]
    for mix in set(row_mix.tolist()):
        mine = np.flatnonzero(row_mix == mix)
        part = _reduce_mix([arrays[i] for i in mine.tolist()], groups[mine], size)
        targets = np.unique(groups[mine])
        out[targets] = part[targets]
    return out


def _reduce_mix(arrays: list[pa.Array], groups: np.ndarray, size: int) -> Rows:
    """:func:`_reduce_one` of groups that mix the same types: all at once when one type
    holds all their values exactly, else each group in the first candidate type
    (:func:`_candidates`) that holds its own values (groups of one candidate reduce
    together); a group no type holds raises IncomparableValues."""
    try:
        return _reduce_one(arrays, groups, size)
    except IncomparableValues:
        present = np.unique(groups)
        if len(present) == 1:
            raise
    candidates = _candidates(list({a.type for a in arrays}))
    chosen = np.full(size, -1, np.int64)
    for c, target in enumerate(candidates):
        fits = np.fromiter(
            (_holds_exactly(a, target) for a in arrays), dtype=bool, count=len(arrays)
        )
        group_fits = np.ones(size, bool)
        np.logical_and.at(group_fits, groups, fits)
        chosen[group_fits & (chosen < 0)] = c
    lost = present[chosen[present] < 0]
    if len(lost):
        first = np.flatnonzero(groups == lost[0])
        _unify([arrays[i] for i in first.tolist()])  # raises, naming the group's types
    out = exact_empty(size)
    row_choice = chosen[groups]
    for c in np.unique(row_choice).tolist():
        mine = np.flatnonzero(row_choice == c)
        part = _reduce_one([arrays[i] for i in mine.tolist()], groups[mine], size)
        targets = np.unique(groups[mine])
        out[targets] = part[targets]
    return out


def _holds_exactly(values: pa.Array, target: pa.DataType) -> bool:
    """Whether ``target`` holds every value of ``values`` exactly (a safe cast)."""
    if values.type == target:
        return True
    try:
        values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def _reduce_one(arrays: list[pa.Array], groups: np.ndarray, size: int) -> Rows:
    """Row ``g``: the distinct values of the arrays of group ``g`` (``groups[i]`` is
    the group of ``arrays[i]``), which must have an exact common type."""
    arrays = _unify(arrays)
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    flat = pa.concat_arrays(arrays)
    codes, dictionary = _factorize(flat)
    pair_groups, pair_codes = _distinct_pairs(np.repeat(groups, lengths), codes, len(dictionary))
    return _exact_rows(pair_groups, dictionary.take(pa.array(pair_codes)), size)


def exact_merge(a: Rows, b: Rows) -> Rows:
    """Row ``i``: the union of ``a[i]`` and ``b[i]``."""
    return _merge_rows(a, b, lambda both_a, both_b: _exact_union(both_a, both_b))


def _exact_union(a: Rows, b: Rows) -> Rows:
    n = len(a)
    ids = np.arange(n, dtype=np.int64)
    return exact_reduce(np.concatenate([a, b]), np.concatenate([ids, ids]), n)


def exact_counts(rows: Rows) -> np.ndarray:
    return np.fromiter((0 if r is None else len(r) for r in rows), dtype=np.int64, count=len(rows))


#: the form of :func:`dump_exact`'s data
EXACT_FORM = "arrow-by-type"


def dump_exact(rows: Rows) -> tuple[str, np.ndarray, np.ndarray, tuple[bytes, ...]]:
    """Rows as plain data: ``("arrow-by-type", lengths, type index, streams)``: row
    ``i`` holds ``lengths[i]`` values of ``streams[index[i]]`` (-1: no values), one
    Arrow IPC stream per value type with its rows' values in row order. Rows of
    different types never need a common type (keys may differ in type)."""
    n = len(rows)
    lengths = np.zeros(n, np.int64)
    index = np.full(n, -1, np.int64)
    by_type: dict[pa.DataType, list[int]] = {}
    for i in np.flatnonzero(_present(rows)).tolist():
        by_type.setdefault(rows[i].type, []).append(i)
    streams = []
    for k, members in enumerate(by_type.values()):
        arrays = [rows[i] for i in members]
        lengths[members] = [len(a) for a in arrays]
        index[members] = k
        batch = pa.record_batch([pa.concat_arrays(arrays)], names=["values"])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        streams.append(sink.getvalue().to_pybytes())
    return (EXACT_FORM, lengths, index, tuple(streams))


def load_exact(state: Any) -> Rows:
    """Rows from :func:`dump_exact`'s data (each row its own compact copy)."""
    if not (
        isinstance(state, tuple)
        and len(state) == 4
        and state[0] == EXACT_FORM
        and isinstance(state[3], tuple)
    ):
        raise ConfigurationError(
            "the checkpointed state of lg.agg.count_distinct is not in the expected form "
            f"(({EXACT_FORM!r}, lengths, type index, streams)); was it written by another "
            "version? Restore it with the version that wrote it, or start without it"
        )
    _, lengths, index, streams = state
    lengths = np.asarray(lengths, dtype=np.int64)
    index = np.asarray(index, dtype=np.int64)
    out = exact_empty(len(lengths))
    if len(index) != len(lengths) or int(index.max(initial=-1)) >= len(streams):
        raise ConfigurationError(
            "the checkpointed state of lg.agg.count_distinct has rows of streams it "
            "does not hold: the checkpoint is damaged"
        )
    for k, data in enumerate(streams):
        members = np.flatnonzero(index == k)
        flat = pa.ipc.open_stream(pa.py_buffer(data)).read_all().column(0).combine_chunks()
        mine = lengths[members]
        if int(mine.sum()) != len(flat):
            raise ConfigurationError(
                f"the checkpointed state of lg.agg.count_distinct holds {len(flat)} values "
                f"of {flat.type} for rows of {int(mine.sum())}: the checkpoint is damaged"
            )
        bounds = np.concatenate([[0], np.cumsum(mine)]).astype(np.int64)
        part = _split(flat, bounds, len(members))
        out[members] = part
    return out


# --- approximate (HyperLogLog) ------------------------------------------------------------------


def _hash_inputs(dictionary: pa.Array) -> list[Any]:
    """Python values to give the sketch's ``update`` (int, float or str): integers and
    temporal values as int64, integral floats as ints, binary as latin-1 text."""
    t = dictionary.type
    if pa.types.is_boolean(t):
        return dictionary.cast(pa.int64()).to_pylist()
    if pa.types.is_integer(t):
        if t == pa.uint64():
            return dictionary.view(pa.int64()).to_pylist()
        return dictionary.cast(pa.int64()).to_pylist()
    if pa.types.is_temporal(t):
        storage = pa.int32() if t.bit_width == 32 else pa.int64()
        return dictionary.view(storage).cast(pa.int64()).to_pylist()
    if pa.types.is_floating(t):
        v = dictionary.to_numpy(zero_copy_only=False).astype(np.float64)
        with np.errstate(invalid="ignore"):
            integral = np.isfinite(v) & (v == np.floor(v)) & (np.abs(v) < 2.0**63)
        ints = np.where(integral, v, 0).astype(np.int64).tolist()
        floats = v.tolist()
        return [i if ok else f for i, f, ok in zip(ints, floats, integral.tolist())]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return [b.decode("latin-1") for b in dictionary.to_pylist()]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return dictionary.to_pylist()
    return [str(v) for v in dictionary.to_pylist()]  # decimals: their exact text


def _target() -> Any:
    """HLL_8: a byte per register, the fastest to update and merge (the compact
    serialization of a sketch with few values stays a short list of them)."""
    return datasketches().tgt_hll_type.HLL_8


def sketch_partial(
    column: pa.Array, picks: np.ndarray | None, group: np.ndarray, size: int, lg_k: int
) -> Rows:
    """A new HLL sketch per group holding that group's distinct non-null values."""
    ds = datasketches()
    pair_groups, pair_codes, dictionary = _batch_pairs(column, picks, group)
    out = np.full(size, None, dtype=object)
    if not len(pair_groups):
        return out
    inputs = _hash_inputs(dictionary)
    codes_list = pair_codes.tolist()
    target = _target()
    for g, lo, hi in _runs(_bounds(pair_groups, size)):
        sketch = ds.hll_sketch(lg_k, target)
        update = sketch.update
        for c in codes_list[lo:hi]:
            update(inputs[c])
        out[g] = sketch
    return out


def sketch_reduce(rows: Rows, group: np.ndarray, size: int, lg_k: int) -> Rows:
    """Row ``g``: the union of the sketches in group ``g`` (new sketches)."""
    out = np.full(size, None, dtype=object)
    present = np.flatnonzero(_present(rows))
    if not len(present):
        return out
    members: dict[int, list[Any]] = {}
    for i, g in zip(present.tolist(), group[present].tolist()):
        members.setdefault(g, []).append(rows[i])
    for g, sketches in members.items():
        out[g] = sketches[0] if len(sketches) == 1 else _union(sketches, lg_k)
    return out


def _union(sketches: list[Any], lg_k: int) -> Any:
    union = datasketches().hll_union(lg_k)
    for s in sketches:
        union.update(s)
    return union.get_result(_target())


def sketch_merge(a: Rows, b: Rows, lg_k: int) -> Rows:
    return _merge_rows(
        a,
        b,
        lambda both_a, both_b: np.array(
            [_union([x, y], lg_k) for x, y in zip(both_a, both_b)] + [None], dtype=object
        )[:-1],
    )


def sketch_estimates(rows: Rows) -> np.ndarray:
    """Each row's estimate, rounded to an integer (0 for a row without values)."""
    return np.fromiter(
        (0 if r is None else int(round(r.get_estimate())) for r in rows),
        dtype=np.int64,
        count=len(rows),
    )


def dump_sketches(rows: Rows) -> np.ndarray:
    """Each sketch as DataSketches' compact serialization (bytes), None kept."""
    out = np.full(len(rows), None, dtype=object)
    for i in np.flatnonzero(_present(rows)).tolist():
        out[i] = bytes(rows[i].serialize_compact())
    return out


def load_sketches(data: Any) -> Rows:
    """Sketches from :func:`dump_sketches`' bytes."""
    ds = datasketches()
    rows = np.asarray(data, dtype=object)
    out = np.full(len(rows), None, dtype=object)
    for i, b in enumerate(rows.tolist()):
        if b is None:
            continue
        if not isinstance(b, bytes):
            raise ConfigurationError(
                "the checkpointed state of lg.agg.approx_count_distinct holds a "
                f"{type(b).__name__} where a serialized sketch (bytes) belongs"
            )
        out[i] = ds.hll_sketch.deserialize(b)
    return out


# --- shared ---------------------------------------------------------------------------------


def _merge_rows(a: Rows, b: Rows, union: Any) -> Rows:
    """Row-wise: ``a[i]`` if ``b[i]`` is None, ``b[i]`` if ``a[i]`` is None, else
    ``union`` of both (called once, on the rows where both hold values)."""
    has_a, has_b = _present(a), _present(b)
    out = a.copy()
    only_b = has_b & ~has_a
    out[only_b] = b[only_b]
    both = np.flatnonzero(has_a & has_b)
    if len(both):
        out[both] = union(a[both], b[both])
    return out


__all__ = [
    "RELATIVE_ERROR_MAX",
    "RELATIVE_ERROR_MIN",
    "SKETCHES_EXTRA",
    "check_relative_error",
    "check_value_type",
    "datasketches",
    "dump_exact",
    "dump_sketches",
    "exact_counts",
    "exact_empty",
    "exact_merge",
    "exact_partial",
    "exact_reduce",
    "IncomparableValues",
    "lg_k_for",
    "load_exact",
    "load_sketches",
    "sketch_estimates",
    "sketch_merge",
    "sketch_partial",
    "sketch_reduce",
]

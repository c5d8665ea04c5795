"""The running fold of a batch, per key, without a Python step per record: the kernel of
the rolling aggregates (``KeyedStream.sum/min/max``, :mod:`.rolling`).

Given each record's key code (``0..k-1``, the batch's distinct keys), its value, and each
key's value before the batch (or none), :func:`running_fold` gives each record the fold of
its key's values up to and including it, in record order:
``out[i] = combine(out[previous record of the same key], value[i])``, starting from the
key's value before the batch (a key without one starts at its first record's value).

Exactness: every ``out[i]`` is computed as that sequential left fold computes it (the
same float roundings as ``a + b`` one record at a time, never a reassociated sum):
records are grouped by key (one stable sort), then the fold advances one record per key
per numpy step (*round*); a key with more than :data:`ROUNDS` records in the batch finishes
with one ``ufunc.accumulate`` of its own (sequential too). Object arrays (Python ints
beyond int64, mixed ints and floats) fold with the Python operators.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: rounds of one record per key before the remaining records of a hot key fold on their own
ROUNDS = 32

#: kind -> the binary ufunc that folds two values
COMBINE: dict[str, np.ufunc] = {"sum": np.add, "min": np.minimum, "max": np.maximum}


def combine_one(kind: str, a: Any, b: Any) -> Any:
    """The fold of two values: ``a + b``, or the smaller / larger of the two, NaN if either
    is NaN (as ``numpy.minimum`` / ``numpy.maximum`` on floats)."""
    if kind == "sum":
        return a + b
    if a != a:
        return a
    if b != b:
        return b
    return (b if b < a else a) if kind == "min" else (b if b > a else a)


#: the folds of object arrays (Python ints beyond int64, ints mixed with floats): numpy's
#: minimum / maximum compare objects with < and would drop a NaN, these carry it
_OBJECT_COMBINE: dict[str, np.ufunc] = {
    "sum": np.add,
    "min": np.frompyfunc(lambda a, b: combine_one("min", a, b), 2, 1),
    "max": np.frompyfunc(lambda a, b: combine_one("max", a, b), 2, 1),
}


def group_order(codes: np.ndarray) -> np.ndarray:
    """The record indices grouped by code, each group in record order (a stable sort)."""
    return np.argsort(codes, kind="stable")


def running_fold(
    kind: str,
    codes: np.ndarray,
    values: np.ndarray,
    before: np.ndarray,
    known: np.ndarray,
    order: np.ndarray | None = None,
) -> np.ndarray:
    """Each record's running ``kind`` (``sum``/``min``/``max``) of its key; ``codes``: int
    key code per record; ``values``: per record; ``before`` / ``known``: per key code, its
    value before the batch and whether it has one; ``order``: :func:`group_order` of
    ``codes`` when the caller has it. ``values`` and ``before`` share a dtype, which the
    result has."""
    combine = (_OBJECT_COMBINE if values.dtype == object else COMBINE)[kind]
    n = len(codes)
    out = np.empty(n, dtype=values.dtype)
    if not n:
        return out
    if order is None:
        order = group_order(codes)
    grouped = codes[order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    counts = np.diff(np.r_[starts, n])
    # round 0: each key's first record, from the key's value before the batch
    first = order[starts]
    first_codes = grouped[starts]
    start_from = known[first_codes]
    out[first] = values[first]
    if start_from.any():
        at = first[start_from]
        out[at] = combine(before[first_codes[start_from]], values[at])
    rounds = min(int(counts.max()), ROUNDS)
    for r in range(1, rounds):
        live = starts[counts > r] + r
        at = order[live]
        out[at] = combine(out[order[live - 1]], values[at])
    for s, c in zip(starts[counts > ROUNDS].tolist(), counts[counts > ROUNDS].tolist()):
        rest = order[s + ROUNDS - 1 : s + c]  # the last folded record, then the rest
        seq = values[rest].copy()
        seq[0] = out[rest[0]]
        out[rest[1:]] = combine.accumulate(seq)[1:]
    return out


def as_column(values: list[Any]) -> np.ndarray:
    """``values`` (ints, floats, or a mix) as the array the fold runs on: int64 when all
    are ints within int64, float64 when all are floats, objects otherwise (Python's own
    arithmetic: an int key stays int, a sum past int64 stays exact)."""
    kinds = set(map(type, values))
    if kinds <= {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    elif kinds == {float}:
        return np.array(values, dtype=np.float64)
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def sum_fits_int64(values: np.ndarray, before: np.ndarray, known: np.ndarray) -> bool:
    """Whether every running sum of int64 ``values`` from int64 ``before`` stays within
    int64 (bounded by the largest magnitude before plus the sum of magnitudes)."""
    bound = float(np.abs(values.astype(np.float64)).sum())
    if known.any():
        bound += float(np.abs(before[known].astype(np.float64)).max())
    return bound < 2.0**62

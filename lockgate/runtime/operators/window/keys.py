"""The keys of a window operator as dense int codes.

Window state is columnar: every (key, window) row names its key by an int *code*
handed out by a :class:`KeyDictionary`. The dictionary maps a batch's keys to
codes a batch at a time (for column keys: one ``dictionary_encode`` of the
column and one Python lookup per *distinct* key of the batch, never per record),
remembers each code's Python key value and key group, and turns codes back into
output key columns.

Key groups are computed exactly as the key-group partitioner computes them
(:mod:`lockgate.core.key_groups`), so a row's key group is the one its records
were routed by; snapshots group rows by it and restores filter by it (rescaling).

Codes are never reused while the dictionary lives; :meth:`KeyDictionary.compact`
rebuilds it with only the codes still referenced (monotonically: a sorted code
array stays sorted after remapping).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....core.batch import Batch
from ....core.key_groups import key_groups_of_column, key_groups_of_keys
from ....core.partitioners import KeySelector

#: the result column holding the key of a window keyed by a function
KEY_FIELD = "key"


class KeyDictionary:
    """Key value <-> dense int code, with each code's key group (task thread only).

    ``values`` (a list) and ``key_groups`` (an int64 array) are indexed by code. Both
    only grow, in place beyond their current length, so a snapshot may keep a
    reference to the list and a view of the array and read the codes it saw
    (compaction installs new objects).
    """

    def __init__(self, selector: KeySelector, max_parallelism: int) -> None:
        self.selector = selector
        self.max_parallelism = max_parallelism
        self.values: list[Any] = []
        self._groups = np.zeros(64, dtype=np.int64)
        self._lookup: dict[Any, int] = {}
        #: the Arrow type of each key column as first seen (keeps int32 keys int32)
        self._types: list[pa.DataType | None] = [None] * len(self.field_names)
        #: the key columns of codes [0, n) as Arrow chunks, built as codes appear, so
        #: output key columns are a ``take``, not a Python list per fired row
        self._arrow = _ArrowKeys()

    # -- naming -----------------------------------------------------------------------
    @property
    def field_names(self) -> tuple[str, ...]:
        """The result columns/fields holding the key: the key columns, or ``"key"``."""
        cols = self.selector.columns
        return cols if cols is not None else (KEY_FIELD,)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def key_groups(self) -> np.ndarray:
        """The key group of each code (a view: later growth never changes it)."""
        return self._groups[: len(self.values)]

    # -- encoding -----------------------------------------------------------------------
    def codes_of(self, batch: Batch, rows: list[Any] | None = None) -> np.ndarray:
        """The code of each record's key (int64, one per record); new keys get new codes.

        Column keys of an Arrow batch are encoded vectorized; function keys (and
        records that are Python objects) key by key."""
        cols = self.selector.columns
        if cols is not None and isinstance(batch, pa.RecordBatch):
            return self._codes_of_columns(batch, cols)
        keys = self.selector.keys(batch, rows)
        return self.codes_of_keys(keys)

    def codes_of_keys(self, keys: Sequence[Any]) -> np.ndarray:
        """The codes of Python key values (new keys get new codes). Every float NaN is
        one key (as the key-group hash has it)."""
        if any(_is_nan(k) for k in keys):
            keys = [_NAN if _is_nan(k) else k for k in keys]
        lookup = self._lookup
        get = lookup.get
        codes = np.fromiter((get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
        missing = np.flatnonzero(codes < 0)
        if len(missing):
            fresh: list[Any] = []
            for i in missing.tolist():
                k = keys[i]
                c = get(k, -1)
                if c < 0:
                    c = len(self.values) + len(fresh)
                    lookup[k] = c
                    fresh.append(k)
                codes[i] = c
            if fresh:
                self._grow(fresh, key_groups_of_keys(fresh, self.max_parallelism))
        return codes

    def _codes_of_columns(self, batch: pa.RecordBatch, cols: tuple[str, ...]) -> np.ndarray:
        arrays = [_key_column(batch, c, self.selector) for c in cols]
        if len(arrays) == 1:
            encoded = pc.dictionary_encode(arrays[0], null_encoding="encode")
            uniq = encoded.dictionary
            index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            self._note_types([uniq.type])
            values = _canonical_nan(uniq)
            codes = self._codes_of_distinct(
                values,
                lambda new: key_groups_of_column(
                    uniq.take(pa.array(new, type=pa.int64())), self.max_parallelism
                ),
            )
            return codes[index]
        # several columns: a tuple key; distinct combinations first
        combined = np.zeros(batch.num_rows, dtype=np.int64)
        dictionaries = []
        for a in arrays:
            encoded = pc.dictionary_encode(a, null_encoding="encode")
            index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            size = max(1, len(encoded.dictionary))
            if len(combined) and int(combined.max()) >= (2**62) // size:
                _, combined = np.unique(combined, return_inverse=True)
            combined = combined * size + index
            dictionaries.append((encoded.dictionary, index))
        self._note_types([d.type for d, _ in dictionaries])
        _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
        columns = [
            _canonical_nan(d.take(pa.array(idx[first], type=pa.int64()))) for d, idx in dictionaries
        ]
        values = list(zip(*columns))
        codes = self._codes_of_distinct(
            values, lambda new: key_groups_of_keys([values[i] for i in new], self.max_parallelism)
        )
        return codes[inverse.reshape(-1)]

    def _codes_of_distinct(self, values: list[Any], groups_of_new: Any) -> np.ndarray:
        """Codes of distinct key values; ``groups_of_new(positions)`` gives the key
        groups of the new ones (computed the way the partitioner computes them)."""
        get = self._lookup.get
        codes = np.fromiter((get(v, -1) for v in values), dtype=np.int64, count=len(values))
        new = np.flatnonzero(codes < 0)
        if len(new):
            start = len(self.values)
            fresh = [values[i] for i in new.tolist()]
            for j, v in enumerate(fresh):
                self._lookup[v] = start + j
            codes[new] = np.arange(start, start + len(new), dtype=np.int64)
            self._grow(fresh, np.asarray(groups_of_new(new.tolist()), dtype=np.int64))
        return codes

    def _grow(self, fresh: list[Any], groups: np.ndarray) -> None:
        n = len(self.values)
        need = n + len(fresh)
        if need > len(self._groups):
            bigger = np.zeros(max(need, 2 * len(self._groups)), dtype=np.int64)
            bigger[:n] = self._groups[:n]
            self._groups = bigger
        self._groups[n:need] = groups
        self.values.extend(fresh)

    def _note_types(self, types: list[pa.DataType]) -> None:
        for i, t in enumerate(types):
            if self._types[i] is None and not pa.types.is_null(t):
                self._types[i] = t

    # -- decoding -----------------------------------------------------------------------
    def keys_of(self, codes: np.ndarray) -> list[Any]:
        """The Python key values of ``codes``."""
        values = self.values
        return [values[c] for c in codes.tolist()]

    def key_columns(self, codes: np.ndarray) -> dict[str, pa.Array] | None:
        """One Arrow array per key field for the rows ``codes``, or None when the keys
        cannot be held by Arrow (e.g. a function key returning arbitrary objects)."""
        columns = self._arrow.columns(self)
        if columns is not None:
            index = pa.array(np.asarray(codes, dtype=np.int64))
            return {
                name: col.take(index).combine_chunks()
                for name, col in zip(self.field_names, columns)
            }
        return self._key_columns_of(self.keys_of(codes))

    def _key_columns_of(self, keys: list[Any]) -> dict[str, pa.Array] | None:
        """:meth:`key_columns` of the key values ``keys``."""
        names = self.field_names
        columns: list[list[Any]] = (
            [keys]
            if len(names) == 1
            else [list(c) for c in zip(*keys)]
            if keys
            else [[] for _ in names]
        )
        out: dict[str, pa.Array] = {}
        for name, values, t in zip(names, columns, self._types):
            try:
                out[name] = pa.array(values, type=t) if t is not None else pa.array(values)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                try:
                    out[name] = pa.array(values)
                except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                    return None
        return out

    def key_fields(self, key: Any) -> dict[str, Any]:
        """The key as the fields of a result record."""
        names = self.field_names
        if len(names) == 1:
            return {names[0]: key}
        return dict(zip(names, key))

    # -- maintenance --------------------------------------------------------------------
    def compact(self, live: np.ndarray) -> np.ndarray:
        """Keep only the codes in ``live``; return ``remap`` (old code -> new code, -1 for
        dropped ones). Remapping is monotonic."""
        keep = np.zeros(len(self.values), dtype=bool)
        keep[live] = True
        kept = np.flatnonzero(keep)
        remap = np.full(len(self.values), -1, dtype=np.int64)
        remap[kept] = np.arange(len(kept), dtype=np.int64)
        values = [self.values[i] for i in kept.tolist()]
        groups = self._groups[kept]
        self._arrow = _ArrowKeys()
        self.values = values
        self._groups = groups if len(groups) else np.zeros(64, dtype=np.int64)
        self._lookup = {v: i for i, v in enumerate(values)}
        return remap

    @property
    def types(self) -> list[pa.DataType | None]:
        """The Arrow type of each key column as first seen (None: not seen yet)."""
        return list(self._types)

    def restore_types(self, types: list[pa.DataType | None]) -> None:
        """Adopt recorded key column types where none was seen yet."""
        if len(types) == len(self._types):
            self._types = [t if t is not None else r for t, r in zip(self._types, types)]

    def restore_keys(self, keys: list[Any], key_groups: np.ndarray) -> np.ndarray:
        """Codes for restored keys, with their recorded key groups."""
        keys = [_NAN if _is_nan(k) else k for k in keys]
        lookup = self._lookup
        codes = np.empty(len(keys), dtype=np.int64)
        fresh: list[Any] = []
        groups: list[int] = []
        for i, (k, g) in enumerate(zip(keys, key_groups.tolist())):
            c = lookup.get(k, -1)
            if c < 0:
                c = len(self.values) + len(fresh)
                lookup[k] = c
                fresh.append(k)
                groups.append(g)
            codes[i] = c
        if fresh:
            self._grow(fresh, np.asarray(groups, dtype=np.int64))
        return codes


class _ArrowKeys:
    """The key columns of a :class:`KeyDictionary`'s codes ``[0, n)`` as chunked Arrow
    arrays, extended by the codes added since the last call (amortized: a few chunks,
    merged when they pile up). Given up for good (None) once keys Arrow cannot hold
    appear; rebuilt when a key column's type becomes known."""

    __slots__ = ("chunks", "failed", "size", "types")

    #: merge the chunks into one when there are more than this many
    MAX_CHUNKS = 16

    def __init__(self) -> None:
        self.chunks: list[list[pa.Array]] = []  # per key field
        self.size = 0
        self.types: list[pa.DataType | None] | None = None
        self.failed = False

    def columns(self, keys: KeyDictionary) -> list[pa.ChunkedArray] | None:
        if self.failed:
            return None
        if self.types != keys._types:
            self.chunks, self.size, self.types = [], 0, list(keys._types)
        n = len(keys.values)
        if n > self.size or not self.chunks:
            tail = keys._key_columns_of(keys.values[self.size : n])
            if tail is None:
                self.failed = True
                return None
            arrays = list(tail.values())
            if not self.chunks:
                self.chunks = [[a] for a in arrays]
            else:
                if any(a.type != c[0].type for a, c in zip(arrays, self.chunks)):
                    self.chunks, self.size = [], 0  # inferred types moved: start again
                    return self.columns(keys)
                for field, a in zip(self.chunks, arrays):
                    field.append(a)
                    if len(field) > self.MAX_CHUNKS:
                        field[:] = [pa.concat_arrays(field)]
            self.size = n
        return [pa.chunked_array(field, type=field[0].type) for field in self.chunks]


#: the one NaN every NaN key becomes (NaN != NaN would make each a key of its own)
_NAN = float("nan")


def _is_nan(value: Any) -> bool:
    return type(value) is float and math.isnan(value)


def _canonical_nan(values: pa.Array) -> list[Any]:
    """``values.to_pylist()``, with every NaN the same object."""
    out = values.to_pylist()
    if pa.types.is_floating(values.type):
        out = [_NAN if _is_nan(v) else v for v in out]
    return out


def _key_column(batch: pa.RecordBatch, name: str, selector: KeySelector) -> pa.Array:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        raise KeyError(
            f"key_by({selector.describe()}): the records have no field {name!r}; their "
            f"fields are {batch.schema.names}"
        )
    col = batch.column(idx)
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return col

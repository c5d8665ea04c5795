"""The hash index of a lookup table: key -> its rows, built once per load, probed with
a whole column of keys per batch (numpy and Arrow kernels, no Python loop per record).

Built from the table's key column: every row with a non-null key, ordered by
(stable 64-bit key hash, key) with a stable sort, so the rows of one key lie together
in table order. A probe hashes the batch's keys (:func:`~lockgate.core.key_hash.hash_array`),
finds each hash by binary search among the groups' hashes and confirms the match by
comparing the keys themselves; two keys whose hashes collide are two groups next to
each other, and a probe steps from one to the next (in practice never more than once).

Join semantics (Flink's lookup join): a record matches every row of its key (one output
row per match, in table order); a null key matches nothing; NaN matches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....core.key_hash import hash_array
from ....core.key_types import arrow_kind, canonical_key_column
from ....errors import ConfigurationError


@dataclass(frozen=True)
class Matches:
    """The pairs a probe found: output row ``i`` is stream row ``stream[i]`` with table
    row ``table[i]`` (``-1``: no table row, a left join's unmatched record)."""

    stream: np.ndarray
    table: np.ndarray

    @property
    def matched(self) -> np.ndarray:
        return self.table >= 0


class LookupIndex:
    """An index over ``table``'s column ``key`` (see the module docstring). ``what``
    names the join in errors. Immutable once built: a refresh builds a new one."""

    def __init__(self, table: pa.Table, key: str, what: str) -> None:
        if key not in table.column_names:
            raise ConfigurationError(
                f"{what}: the table has no key column {key!r} (its columns: "
                f"{table.column_names}); give table_key= one of them"
            )
        self.table = table.combine_chunks()
        self.key = key
        self.what = what
        column = canonical_key_column(self.table.column(key))
        keys = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        self.key_type: pa.DataType = keys.type
        rows = np.flatnonzero(keys.is_valid().to_numpy(zero_copy_only=False))
        valid = keys.take(pa.array(rows, type=pa.int64()))
        hashes = hash_array(valid)
        order = pc.sort_indices(
            pa.table({"h": pa.array(hashes, type=pa.uint64()), "k": valid}),
            sort_keys=[("h", "ascending"), ("k", "ascending")],
        ).to_numpy()
        sorted_hashes = hashes[order]
        sorted_keys = valid.take(pa.array(order, type=pa.int64()))
        #: table rows in group order
        self.rows: np.ndarray = rows[order]
        n = len(order)
        if n:
            new_hash = sorted_hashes[1:] != sorted_hashes[:-1]
            new_key = pc.fill_null(
                pc.not_equal(sorted_keys.slice(1), sorted_keys.slice(0, n - 1)), True
            ).to_numpy(zero_copy_only=False)
            starts = np.concatenate(([0], np.flatnonzero(new_hash | new_key) + 1))
        else:
            starts = np.zeros(0, dtype=np.int64)
        #: per group: its first position in :attr:`rows`, its row count, hash and key
        self.starts: np.ndarray = starts.astype(np.int64)
        self.counts: np.ndarray = np.diff(np.append(self.starts, n)).astype(np.int64)
        self.hashes: np.ndarray = sorted_hashes[self.starts]
        self.keys: pa.Array = sorted_keys.take(pa.array(self.starts, type=pa.int64()))
        #: the keys as numpy values when they are numbers: compared without Arrow calls
        self.key_values: np.ndarray | None = None
        if pa.types.is_int64(self.keys.type) or pa.types.is_float64(self.keys.type):
            self.key_values = self.keys.to_numpy(zero_copy_only=False)
        #: every key has one row: a probe needs no expansion
        self.unique = bool(len(self.counts) == 0 or self.counts.max() == 1)

    def __len__(self) -> int:
        return self.table.num_rows

    def check_key_type(self, probe_type: pa.DataType, on: str) -> None:
        """Raise :class:`ConfigurationError` when keys of ``probe_type`` can never equal
        the table's (an integer and a string, an integer and a float, ...)."""
        if pa.types.is_null(probe_type) or pa.types.is_null(self.key_type):
            return
        mine, theirs = arrow_kind(self.key_type), arrow_kind(probe_type)
        if mine is not None and mine == theirs:
            return
        if mine is None and theirs is None and probe_type == self.key_type:
            return
        raise ConfigurationError(
            f"{self.what}: the stream's key {on!r} is {probe_type} but the table's key "
            f"{self.key!r} is {self.table.schema.field(self.key).type}; keys of different "
            "kinds never match. Convert one side first (e.g. .map(...) on the stream, or a "
            "CAST in the table's query)"
        )

    def groups_of(self, probe: pa.Array) -> np.ndarray:
        """The group of each key of ``probe`` (-1: not in the table, or null)."""
        probe = canonical_key_column(probe)
        if isinstance(probe, pa.ChunkedArray):
            probe = probe.combine_chunks()
        b = len(probe)
        found = np.full(b, -1, dtype=np.int64)
        n = len(self.hashes)
        if b == 0 or n == 0:
            return found
        hashes = hash_array(probe)
        at = np.searchsorted(self.hashes, hashes)
        inside = at < n
        if probe.null_count:
            inside &= probe.is_valid().to_numpy(zero_copy_only=False)
        pending = np.flatnonzero(inside)
        values = None
        if self.key_values is not None and probe.type == self.keys.type:
            values = probe.fill_null(0).to_numpy(zero_copy_only=False)
        pending = pending[self.hashes[at[pending]] == hashes[pending]]
        while len(pending):
            groups = at[pending]
            same = self._same(probe, values, pending, groups)
            found[pending[same]] = groups[same]
            # a different key of the same hash: try the next group, if it has that hash
            rest, nxt = pending[~same], groups[~same] + 1
            go_on = nxt < n
            rest, nxt = rest[go_on], nxt[go_on]
            go_on = self.hashes[nxt] == hashes[rest]
            pending = rest[go_on]
            at[pending] = nxt[go_on]
        return found

    def _same(
        self, probe: pa.Array, values: np.ndarray | None, rows: np.ndarray, groups: np.ndarray
    ) -> np.ndarray:
        """Whether the key of each probe row in ``rows`` equals its group's key (numbers:
        numpy, where NaN equals nothing; other types: Arrow's equal)."""
        if values is not None:
            assert self.key_values is not None
            return np.asarray(values[rows] == self.key_values[groups])
        return pc.fill_null(
            pc.equal(
                probe.take(pa.array(rows, type=pa.int64())),
                self.keys.take(pa.array(groups, type=pa.int64())),
            ),
            False,
        ).to_numpy(zero_copy_only=False)

    def probe(self, keys: pa.Array, *, keep_unmatched: bool) -> Matches:
        """The (stream row, table row) pairs for ``keys``, in stream order and, for one
        key, in table order; with ``keep_unmatched`` a key without rows gives one pair
        with table row -1 (a left join)."""
        groups = self.groups_of(keys)
        hit = groups >= 0
        if not len(self.starts):  # an empty table (or only null keys): nothing matches
            stream = np.arange(len(groups) if keep_unmatched else 0, dtype=np.int64)
            return Matches(stream, np.full(len(stream), -1, dtype=np.int64))
        if self.unique:
            stream = (
                np.arange(len(groups), dtype=np.int64) if keep_unmatched else np.flatnonzero(hit)
            )
            g = groups[stream]
            table = np.where(g >= 0, self.rows[self.starts[np.maximum(g, 0)]], -1)
            return Matches(stream, table.astype(np.int64))
        counts = np.where(hit, self.counts[np.maximum(groups, 0)], 0)
        repeat = np.maximum(counts, 1) if keep_unmatched else counts
        stream = np.repeat(np.arange(len(groups), dtype=np.int64), repeat)
        # position of each output row within its record's matches
        firsts = np.cumsum(repeat) - repeat
        within = np.arange(len(stream), dtype=np.int64) - np.repeat(firsts, repeat)
        g = groups[stream]
        table = np.where(
            g >= 0, self.rows[np.where(g >= 0, self.starts[np.maximum(g, 0)] + within, 0)], -1
        )
        return Matches(stream, table.astype(np.int64))

"""The lookup join's output rows: a record's fields followed by its table row's columns.

Names: a table column keeps its name unless the stream's records have a field of that
name; then it gets ``suffix`` (default ``"_table"``: ``name`` -> ``name_table``). A name
that still clashes fails the join, saying which. For dict records the fields are those
of each batch's first record. Tuple records get the table row's values appended, in the
table's column order. An unmatched record of a left join gets nulls (None) for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from ....core.batch import RowBatch, timestamps_of, user_view, with_kinds, with_timestamps
from ....core.batch import kinds_of as batch_kinds
from ....errors import ConfigurationError
from .index import LookupIndex, Matches


def output_names(
    stream_fields: Iterable[str], table_columns: list[str], suffix: str, what: str
) -> list[str]:
    """The output names of ``table_columns`` next to ``stream_fields`` (see the module)."""
    fields = set(stream_fields)
    names = [f"{c}{suffix}" if c in fields else c for c in table_columns]
    clash = sorted(n for n in names if n in fields)
    if clash or len(set(names)) != len(names):
        raise ConfigurationError(
            f"{what}: the table's columns {table_columns} cannot be named next to the "
            f"stream's fields {sorted(fields)} with suffix {suffix!r} ({clash or names} "
            "clash); give another table_suffix= or rename a column"
        )
    return names


def join_arrow(
    batch: pa.RecordBatch, matches: Matches, index: LookupIndex, suffix: str
) -> pa.RecordBatch:
    """The output of an Arrow ``batch`` (event timestamps and row kinds carried)."""
    indices = pa.array(matches.stream, type=pa.int64())
    view = user_view(batch)
    assert isinstance(view, pa.RecordBatch)
    left = view.take(indices)
    table = index.table
    names = output_names(view.schema.names, table.column_names, suffix, index.what)
    mask = None if matches.matched.all() else ~matches.matched
    picks = pa.array(np.maximum(matches.table, 0), type=pa.int64(), mask=mask)
    arrays = list(left.columns)
    fields = list(left.schema)
    for name, column in zip(names, table.columns):
        taken = column.take(picks)
        arrays.append(taken.combine_chunks() if isinstance(taken, pa.ChunkedArray) else taken)
        fields.append(pa.field(name, column.type))
    out: Any = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
    stamps = timestamps_of(batch)
    if stamps is not None:
        out = with_timestamps(out, stamps[matches.stream])
    kinds = batch_kinds(batch)
    if kinds is not None:
        out = with_kinds(out, kinds[matches.stream])
    return out


class TableRows:
    """The table's rows as Python values, for row batches (made once per loaded table,
    when the first row batch needs them)."""

    def __init__(self, index: LookupIndex) -> None:
        self.index = index
        self.tuples: list[tuple[Any, ...]] = (
            list(zip(*(c.to_pylist() for c in index.table.columns)))
            if index.table.num_columns
            else [()] * index.table.num_rows
        )
        self.nulls: tuple[Any, ...] = (None,) * index.table.num_columns
        self._dicts: tuple[list[str], list[dict[str, Any]], dict[str, Any]] | None = None

    def dicts(self, names: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The rows as dicts of the output ``names``, and the row of nulls (made once per
        set of names)."""
        if self._dicts is None or self._dicts[0] != names:
            rows = [dict(zip(names, t)) for t in self.tuples]
            self._dicts = (names, rows, dict(zip(names, self.nulls)))
        return self._dicts[1], self._dicts[2]


def record_keys(rows: list[Any], on: str | int, what: str) -> list[Any]:
    """The key of each record of a row batch: field ``on`` of dicts, item ``on`` of
    tuples."""
    first = rows[0]
    try:
        if isinstance(first, dict) and isinstance(on, str):
            return [r[on] for r in rows]
        if isinstance(first, tuple) and isinstance(on, int):
            return [r[on] for r in rows]
    except (KeyError, IndexError, TypeError) as e:
        raise ConfigurationError(
            f"{what}: a record has no key {on!r} ({type(e).__name__}: {e}); every record "
            "needs the join key"
        ) from e
    raise ConfigurationError(
        f"{what}: on={on!r} cannot take the key of records like {first!r} "
        f"({type(first).__name__}): give dict records with on= a field name, or tuple "
        "records with on= the key's position (an int)"
    )


def join_rows(batch: RowBatch, matches: Matches, rows: TableRows, suffix: str) -> RowBatch:
    """The output of a row batch: dicts stay dicts (table columns named as for Arrow),
    tuples get the table row's values appended."""
    records = batch.rows
    picks = matches.table.tolist()
    table = rows.tuples
    nulls = rows.nulls
    out: list[Any]
    if isinstance(records[0], dict):
        names = output_names(
            records[0].keys(), rows.index.table.column_names, suffix, rows.index.what
        )
        dicts, null_dict = rows.dicts(names)
        out = [
            {**records[i], **(dicts[j] if j >= 0 else null_dict)}
            for i, j in zip(matches.stream.tolist(), picks)
        ]
    else:
        out = [
            tuple(records[i]) + (table[j] if j >= 0 else nulls)
            for i, j in zip(matches.stream.tolist(), picks)
        ]
    stamps = batch.timestamps
    kinds = batch.kinds
    return RowBatch(
        out,
        None if stamps is None else stamps[matches.stream],
        None if kinds is None else kinds[matches.stream],
    )

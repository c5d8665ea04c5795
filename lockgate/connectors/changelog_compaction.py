"""One checkpoint interval of a changelog, compacted per key (last change wins), for the
sinks that apply changes (``PostgresSink(mode="upsert")``, ``DeltaSink(mode="merge")``).

Semantics (Flink's upsert sinks): in order, ``+I`` and ``+U`` put the row under its key
(insert or update), ``-D`` and ``-U`` remove the row with that key. A primary-key change
arrives as ``-U`` (old key) then ``+U`` (new key): two keys, one removed, one put. Since
each change replaces whatever its key held, only the last change of each key within an
interval matters, and applying just those leaves the table as applying every change in
order would. :class:`ChangeBuffer` collects an interval's batches; :meth:`ChangeBuffer.compact`
returns, for every key changed, its last change, split into the rows to put
(:attr:`Compacted.upserts`) and the keys to remove (:attr:`Compacted.deletes`).

Arrow batches are compacted with Arrow (a hash group-by on the key columns for the last
position of each key, then one ``take``); batches of Python records (``RowBatch``), and
Arrow keys Arrow cannot group, with a dict. A key column missing from a record, or a null
in one, is an error naming the record: a key identifies one row of the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.batch import Batch, RowBatch, is_scalar_schema, kinds_of, num_rows, to_rows, user_view
from ..core.row_kind import RowKind

#: the kinds after which the key's row is in the table
_ADDITIONS = (int(RowKind.INSERT), int(RowKind.UPDATE_AFTER))
_POSITION = "__lockgate_position"


class ChangeKeyError(TypeError):
    """A change has no usable key (a key field missing, null, or not hashable)."""


@dataclass
class Compacted:
    """The last change of every key of an interval. ``upserts``: the rows to put (their
    last change is ``+I``/``+U``), in the order of their last change; ``deletes``: the
    records whose key to remove (last change ``-D``/``-U``; only their key fields
    matter). No key is in both, nor twice in one."""

    upserts: Batch
    deletes: Batch

    @property
    def num_keys(self) -> int:
        return num_rows(self.upserts) + num_rows(self.deletes)

    def __repr__(self) -> str:
        return f"Compacted({num_rows(self.upserts)} upserts, {num_rows(self.deletes)} deletes)"


class ChangeBuffer:
    """The changes of one interval, in arrival order, until :meth:`compact`.

    ``key``: the key column names; ``where`` names the sink in errors."""

    def __init__(self, key: Sequence[str], where: str) -> None:
        if not key:
            raise ValueError("ChangeBuffer needs at least one key column")
        self.key = tuple(key)
        self.where = where
        self._batches: list[tuple[Batch, np.ndarray | None]] = []
        self._count = 0

    def __len__(self) -> int:
        """The number of changes collected."""
        return self._count

    def add(self, batch: Batch) -> None:
        """Collect ``batch`` (with its row kinds; none: all inserts)."""
        n = num_rows(batch)
        if n == 0:
            return
        kinds = kinds_of(batch)
        self._batches.append((user_view(batch), None if kinds is None else np.asarray(kinds)))
        self._count += n

    def clear(self) -> None:
        self._batches = []
        self._count = 0

    def compact(self) -> Compacted:
        """The last change of each key (see the module docstring); the buffer is kept."""
        return compact(self._batches, self.key, self.where)


def compact(
    batches: Sequence[tuple[Batch, np.ndarray | None]], key: tuple[str, ...], where: str
) -> Compacted:
    """The last change per ``key`` of ``batches`` (each a user-view batch with its kinds,
    None for all inserts), in order."""
    sizes = [num_rows(b) for b, _ in batches]
    kinds = (
        np.concatenate(
            [
                np.zeros(n, np.int8) if k is None else k.astype(np.int8)
                for (_, k), n in zip(batches, sizes)
            ]
        )
        if batches
        else np.zeros(0, np.int8)
    )
    arrow = _as_arrow_table([b for b, _ in batches])
    if arrow is not None:
        result = _compact_arrow(arrow, kinds, key, where)
        if result is not None:
            return result
    rows: list[Any] = []
    for b, _ in batches:
        rows.extend(to_rows(b))
    return _compact_rows(rows, kinds, key, where)


# ---------------------------------------------------------------------------- Arrow


def _as_arrow_table(batches: list[Batch]) -> pa.Table | None:
    """``batches`` as one Arrow table when all are multi-column Arrow batches whose
    schemas unify; None otherwise (compacted as Python records)."""
    if not batches or not all(
        isinstance(b, pa.RecordBatch) and not is_scalar_schema(b.schema) for b in batches
    ):
        return None
    tables = [pa.Table.from_batches([b]) for b in batches if isinstance(b, pa.RecordBatch)]
    try:
        return pa.concat_tables(
            [t.replace_schema_metadata(None) for t in tables], promote_options="permissive"
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None


def _compact_arrow(
    table: pa.Table, kinds: np.ndarray, key: tuple[str, ...], where: str
) -> Compacted | None:
    missing = [k for k in key if k not in table.column_names]
    if missing:
        raise ChangeKeyError(
            f"{where}: changes lack the key field(s) {missing} (their fields: "
            f"{table.column_names}); every change needs {list(key)}"
        )
    for k in key:
        column = table.column(k)
        if column.null_count:
            first = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            _null_key(where, key, k, table.slice(first, 1).to_pylist()[0], int(kinds[first]))
    positioned = table.select(list(key)).append_column(
        _POSITION, pa.array(np.arange(table.num_rows, dtype=np.int64))
    )
    try:
        last = positioned.group_by(list(key), use_threads=False).aggregate([(_POSITION, "max")])
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return None  # a key type Arrow cannot group by: compact as Python records
    positions = np.sort(last.column(f"{_POSITION}_max").to_numpy())
    adds = np.isin(kinds[positions], _ADDITIONS)
    return Compacted(_batch(table.take(positions[adds])), _batch(table.take(positions[~adds])))


def _batch(table: pa.Table) -> pa.RecordBatch:
    table = table.combine_chunks()
    return pa.RecordBatch.from_arrays(
        [c.chunk(0) if c.num_chunks else pa.array([], c.type) for c in table.columns],
        schema=table.schema,
    )


# ------------------------------------------------------------------------ Python records


def _compact_rows(
    rows: list[Any], kinds: np.ndarray, key: tuple[str, ...], where: str
) -> Compacted:
    last: dict[tuple[Any, ...], int] = {}
    for i, record in enumerate(rows):
        if not isinstance(record, dict):
            raise ChangeKeyError(
                f"{where}: change #{i} is {type(record).__name__} ({record!r:.120}), not a "
                f"dict of column values; map changes to dicts with the key fields {list(key)}"
            )
        try:
            values = tuple(record[k] for k in key)
        except KeyError as e:
            raise ChangeKeyError(
                f"{where}: change {record!r:.200} ({RowKind(int(kinds[i])).short}) lacks the "
                f"key field {e.args[0]!r}; every change needs {list(key)}"
            ) from None
        for k, v in zip(key, values):
            if v is None:
                _null_key(where, key, k, record, int(kinds[i]))
        try:
            last[values] = i
        except TypeError as e:
            raise ChangeKeyError(
                f"{where}: the key {values!r:.200} of change {record!r:.200} cannot be a key "
                f"({e}); key fields must hold plain values (numbers, strings, dates, bytes)"
            ) from None
    positions = sorted(last.values())
    upserts = [rows[i] for i in positions if int(kinds[i]) in _ADDITIONS]
    deletes = [rows[i] for i in positions if int(kinds[i]) not in _ADDITIONS]
    return Compacted(RowBatch(upserts), RowBatch(deletes))


def _null_key(where: str, key: tuple[str, ...], field: str, record: Any, kind: int) -> None:
    raise ChangeKeyError(
        f"{where}: change {record!r:.200} ({RowKind(kind).short}) has a null key field "
        f"{field!r}; the key {list(key)} must identify one row, so none of its fields may "
        f"be null (filter such changes out, or key by non-null columns)"
    )

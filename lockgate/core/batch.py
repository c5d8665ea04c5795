"""The data unit: batches of records.

Records travel in batches of one of two representations:

* ``pyarrow.RecordBatch`` - columnar; built-in operators work on it whole. A
  batch whose schema carries the metadata ``lockgate.scalar`` holds bare values
  (its single column ``value``): its records are those values, not dicts.
* :class:`RowBatch` - a list of Python objects, produced by row functions
  (``map``, ``flat_map``, ``process``). It is converted to Arrow only when
  something needs columns (``map_batches``, ``key_by`` on a column, the
  network), so a chain of row functions never pays for conversions, and
  objects Arrow cannot hold still flow.

Row functions see a record of an Arrow batch as a dict (or as the bare value
for scalar batches).

Event time
----------
A record's event timestamp (int64 ms, assigned by a ``WatermarkStrategy``) travels
with it invisibly: a ``RowBatch`` holds a ``timestamps`` array next to its rows, an
Arrow batch a reserved column :data:`TS_COLUMN`. Users never see either:
:func:`to_rows`, :func:`user_view` (what ``map_batches`` functions and sinks get) and
the scalar check leave the column out. Operators carry timestamps from input to
output (``map`` keeps them, ``filter`` selects them, ``flat_map``/``process`` repeat
a record's timestamp for each of its outputs). :data:`NO_TIMESTAMP` marks a record
without one.

Row kinds
---------
A changelog's records carry their kind (:mod:`lockgate.core.row_kind`) the same way: a
``RowBatch`` holds a ``kinds`` int8 array, an Arrow batch the reserved column
:data:`~lockgate.core.row_kind.KIND_COLUMN`; a batch with neither is all inserts.
:func:`user_view` and :func:`to_rows` leave it out; operators carry it as they carry
timestamps (:func:`kinds_of`, :func:`with_kinds`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Union, cast

import numpy as np
import pyarrow as pa

from .row_kind import KIND_COLUMN
from .state_records import state_record

SCALAR_METADATA_KEY = b"lockgate.scalar"
SCALAR_COLUMN = "value"
_SCALAR_METADATA = {SCALAR_METADATA_KEY: b"1"}
#: the reserved column holding the event timestamps of an Arrow batch's records
TS_COLUMN = "__lockgate_event_time"
#: the timestamp of a record that has none
NO_TIMESTAMP = -(2**63)
#: the reserved columns: never part of what users see
_RESERVED = frozenset({TS_COLUMN, KIND_COLUMN})


@state_record("batch.rows")
class RowBatch:
    """A batch of Python records (dicts, values or arbitrary picklable objects), with
    their event timestamps when they have some (an int64 array, one per row) and their
    row kinds when they are a changelog's (an int8 array; None: all inserts)."""

    __slots__ = ("rows", "timestamps", "kinds")

    def __init__(
        self,
        rows: list[Any],
        timestamps: np.ndarray | None = None,
        kinds: np.ndarray | None = None,
    ) -> None:
        self.rows = rows
        self.timestamps = timestamps
        self.kinds = kinds

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"RowBatch({len(self.rows)} rows)"

    def __state_fields__(self) -> dict[str, Any]:
        return {"rows": self.rows, "timestamps": self.timestamps, "kinds": self.kinds}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowBatch) and other.rows == self.rows


Batch = Union[pa.RecordBatch, RowBatch]  # noqa: UP007 (runtime alias kept as typing.Union)


def is_batch(element: object) -> bool:
    return isinstance(element, (pa.RecordBatch, RowBatch))


def num_rows(batch: Batch) -> int:
    return batch.num_rows if isinstance(batch, pa.RecordBatch) else len(batch.rows)


def is_scalar_schema(schema: pa.Schema) -> bool:
    md = schema.metadata
    if not md or md.get(SCALAR_METADATA_KEY) != b"1":
        return False
    return all(name in _RESERVED for name in schema.names[1:])


def timestamps_of(batch: Batch) -> np.ndarray | None:
    """The event timestamps of ``batch``'s records (int64 ms), or None if it has none."""
    if isinstance(batch, RowBatch):
        return batch.timestamps
    i = batch.schema.get_field_index(TS_COLUMN)
    if i < 0:
        return None
    return batch.column(i).to_numpy(zero_copy_only=False)


def with_timestamps(batch: Batch, timestamps: np.ndarray | None) -> Batch:
    """``batch`` with its records' event timestamps set to ``timestamps`` (None: none)."""
    if isinstance(batch, RowBatch):
        return RowBatch(batch.rows, timestamps, batch.kinds)
    i = batch.schema.get_field_index(TS_COLUMN)
    if i >= 0:
        batch = batch.remove_column(i)
    if timestamps is None:
        return batch
    column = pa.array(np.asarray(timestamps, dtype=np.int64), type=pa.int64())
    return batch.append_column(pa.field(TS_COLUMN, pa.int64()), column)


def kinds_of(batch: Batch) -> np.ndarray | None:
    """The row kinds of ``batch``'s records (int8 :class:`~lockgate.core.row_kind.RowKind`
    values), or None when it carries none (all inserts)."""
    if isinstance(batch, RowBatch):
        return batch.kinds
    if not isinstance(batch, pa.RecordBatch):
        return None  # not a batch (a test's stand-in): nothing carried
    i = batch.schema.get_field_index(KIND_COLUMN)
    if i < 0:
        return None
    return batch.column(i).to_numpy(zero_copy_only=False)


def with_kinds(batch: Batch, kinds: np.ndarray | None) -> Batch:
    """``batch`` with its records' row kinds set to ``kinds`` (None: all inserts, and
    nothing carried)."""
    if isinstance(batch, RowBatch):
        return RowBatch(batch.rows, batch.timestamps, kinds)
    i = batch.schema.get_field_index(KIND_COLUMN)
    if i >= 0:
        batch = batch.remove_column(i)
    if kinds is None:
        return batch
    column = pa.array(np.asarray(kinds, dtype=np.int8), type=pa.int8())
    return batch.append_column(pa.field(KIND_COLUMN, pa.int8()), column)


def has_changes(batch: Batch) -> bool:
    """True when a record of ``batch`` is not an insert (an update or a delete)."""
    kinds = kinds_of(batch)
    return kinds is not None and bool(np.any(kinds))


def user_view(batch: Batch) -> Batch:
    """``batch`` as users see it: without event timestamps and row kinds (no reserved
    column)."""
    if isinstance(batch, pa.RecordBatch):
        names = batch.schema.names
        if TS_COLUMN in names or KIND_COLUMN in names:
            keep = [i for i, n in enumerate(names) if n not in _RESERVED]
            return batch.select(keep)
        return batch
    if batch.timestamps is None and batch.kinds is None:
        return batch
    return RowBatch(batch.rows)


def scalar_batch(values: pa.Array | np.ndarray | list[Any]) -> pa.RecordBatch:
    """A columnar batch whose records are the bare ``values``."""
    array = values if isinstance(values, pa.Array) else pa.array(values)
    schema = pa.schema([pa.field(SCALAR_COLUMN, array.type)], metadata=_SCALAR_METADATA)
    return pa.RecordBatch.from_arrays([array], schema=schema)


def to_rows(batch: Batch) -> list[Any]:
    """The records of ``batch`` as Python objects (dicts for multi-column Arrow batches)."""
    if isinstance(batch, RowBatch):
        return batch.rows
    if is_scalar_schema(batch.schema):
        return batch.column(0).to_pylist()
    return cast(pa.RecordBatch, user_view(batch)).to_pylist()


def to_arrow(batch: Batch, *, operator: str = "an operator") -> pa.RecordBatch:
    """``batch`` as a ``pyarrow.RecordBatch``.

    Raises ``TypeError`` naming ``operator`` when the records cannot be held
    by Arrow (arbitrary objects, or dicts whose fields disagree in type).
    """
    if isinstance(batch, pa.RecordBatch):
        return batch
    rows = batch.rows
    if not rows:
        return pa.RecordBatch.from_pylist([])
    try:
        if isinstance(rows[0], dict):
            arrow = pa.RecordBatch.from_pylist(rows)
        else:
            arrow = scalar_batch(pa.array(rows))
        if batch.timestamps is not None:
            arrow = with_timestamps(arrow, batch.timestamps)
        return arrow if batch.kinds is None else with_kinds(arrow, batch.kinds)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
        sample = rows[0]
        raise TypeError(
            f"{operator} needs columnar records, but records like {sample!r} "
            f"(type {type(sample).__name__}) cannot be converted to Arrow: {e}. "
            "Emit dicts of consistently typed fields (or plain numbers/strings) upstream, "
            "or use a row function instead."
        ) from e


def from_rows(rows: list[Any]) -> RowBatch:
    return RowBatch(rows)


def take(batch: Batch, indices: np.ndarray) -> Batch:
    """The records at ``indices`` (in that order), with their timestamps."""
    if isinstance(batch, pa.RecordBatch):
        return batch.take(pa.array(indices, type=pa.int64()))
    rows = batch.rows
    ts = batch.timestamps
    kinds = batch.kinds
    return RowBatch(
        [rows[i] for i in indices.tolist()],
        None if ts is None else ts[indices],
        None if kinds is None else kinds[indices],
    )


def slice_batch(batch: Batch, start: int, length: int) -> Batch:
    if isinstance(batch, pa.RecordBatch):
        return batch.slice(start, length)
    ts = batch.timestamps
    kinds = batch.kinds
    end = start + length
    return RowBatch(
        batch.rows[start:end],
        None if ts is None else ts[start:end],
        None if kinds is None else kinds[start:end],
    )


def concat(batches: list[Batch]) -> Batch:
    """One batch holding ``batches`` in order; Arrow when all are Arrow with one schema."""
    if len(batches) == 1:
        return batches[0]
    arrow = [b for b in batches if isinstance(b, pa.RecordBatch)]
    if len(arrow) == len(batches):
        first = arrow[0].schema
        if all(b.schema.equals(first, check_metadata=True) for b in arrow):
            return pa.concat_batches(arrow)
    rows: list[Any] = []
    stamps = [timestamps_of(b) for b in batches]
    kinds = [kinds_of(b) for b in batches]
    for b in batches:
        rows.extend(to_rows(b))
    timestamps = None
    if any(t is not None for t in stamps):
        timestamps = np.concatenate(
            [
                np.full(num_rows(b), NO_TIMESTAMP, dtype=np.int64) if t is None else t
                for b, t in zip(batches, stamps)
            ]
        )
    all_kinds = None
    if any(k is not None for k in kinds):
        all_kinds = np.concatenate(
            [
                np.zeros(num_rows(b), dtype=np.int8) if k is None else k
                for b, k in zip(batches, kinds)
            ]
        )
    return RowBatch(rows, timestamps, all_kinds)


def _row_size(obj: Any) -> int:
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        for k, v in obj.items():
            size += sys.getsizeof(k) + sys.getsizeof(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj[:16]:
            size += sys.getsizeof(v)
    return size


def nbytes(batch: Batch) -> int:
    """Memory held by ``batch``: exact for Arrow, estimated from a sample of rows otherwise."""
    if isinstance(batch, pa.RecordBatch):
        return batch.nbytes
    rows = batch.rows
    n = len(rows)
    if n == 0:
        return 0
    step = max(1, n // 8)
    sample = rows[::step][:8]
    per_row = sum(_row_size(r) for r in sample) / len(sample)
    return int(per_row * n) + 56 + 8 * n


def rows_of(batches: Iterable[Batch]) -> list[Any]:
    out: list[Any] = []
    for b in batches:
        out.extend(to_rows(b))
    return out

"""Stateless changelog conversions (:mod:`lockgate.core.row_kind`).

* :class:`KindsFromFieldOperator` - ``stream.kinds_from_field("op")``: each record's
  kind read from one of its fields (``+I``/``-U``/``+U``/``-D``, the kinds' names, their
  byte values, or any codes the user maps, e.g. Debezium's ``c``/``r``/``u``/``d``), the
  field removed: an append-only stream of changes becomes a changelog (Flink 2.3's
  ``FROM_CHANGELOG``).
* :class:`KindsToFieldOperator` - ``stream.kinds_to_field("op")``: the reverse; every
  record is then an insert carrying its kind's short string (``TO_CHANGELOG``).
* :class:`ToUpsertsOperator` - ``changelog.to_upserts(key)``: an upsert stream (Flink's
  "upsert" changelog mode: ``+I``, ``+U`` and ``-D`` only). An ``-U`` immediately followed
  by a ``+U`` of the same key in the same batch is dropped (the ``+U`` replaces the row);
  any other ``-U`` (a key changed, or its ``+U`` is in the next batch) becomes a ``-D`` of
  its key, so the upsert stream never leaves a row behind.

Arrow batches are converted column-wise; row batches record by record (dict records).
A record whose kind field is missing or unknown fails the job naming the record and
the accepted values (never dropped).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...core.batch import Batch, RowBatch, kinds_of, num_rows, to_rows, with_kinds
from ...core.excerpt import excerpt
from ...core.row_kind import RowKind
from ...errors import ConfigurationError, MalformedRecordError
from .base import StreamOperator

_SHORTS = pa.array([k.short for k in RowKind])


def kind_codes(codes: Mapping[Any, Any] | None) -> dict[Any, int]:
    """The value → kind byte table of ``kinds_from_field``: the kinds' short strings,
    names (any case) and byte values, plus ``codes`` (value → kind, checked)."""
    table: dict[Any, int] = {}
    for k in RowKind:
        table[k.short] = int(k)
        table[k.name] = int(k)
        table[k.name.lower()] = int(k)
        table[int(k)] = int(k)
    for value, kind in (codes or {}).items():
        try:
            table[value] = int(RowKind.parse(kind))
        except ValueError as e:
            raise ConfigurationError(f"kinds_from_field codes: {value!r} -> {e}") from None
    return table


class KindsFromFieldOperator(StreamOperator):
    """Each record's row kind from its field ``field`` (removed); see the module."""

    accepts_changes = True

    def __init__(self, field: str, codes: Mapping[Any, Any] | None = None) -> None:
        super().__init__()
        self.field = field
        self.table = kind_codes(codes)

    def _bad(self, record: Any, value: Any) -> MalformedRecordError:
        shown = sorted(map(str, self.table))
        return MalformedRecordError(
            f"operator '{self.name}': record {excerpt(record)} has {self.field}="
            f"{value!r}, not a row kind; accepted: {', '.join(shown)} (map other codes "
            "with kinds_from_field(field, codes={...}))",
            location=f"operator '{self.name}'",
            raw=record,
        )

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        self.counters.records_in += num_rows(batch)
        if isinstance(batch, pa.RecordBatch):
            self.emit(self._arrow(batch))
            return
        kinds = np.zeros(len(batch.rows), dtype=np.int8)
        rows: list[Any] = []
        table = self.table
        field = self.field
        for i, r in enumerate(batch.rows):
            if not isinstance(r, dict) or field not in r:
                raise self._bad(r, None)
            value = r[field]
            kind = table.get(value) if isinstance(value, (str, int)) else None
            if kind is None:
                raise self._bad(r, value)
            kinds[i] = kind
            rows.append({k: v for k, v in r.items() if k != field})
        self.emit(RowBatch(rows, batch.timestamps, kinds))

    def _arrow(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        i = batch.schema.get_field_index(self.field)
        if i < 0:
            raise self._bad(batch.slice(0, 1).to_pylist()[0] if batch.num_rows else {}, None)
        column = batch.column(i)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            labels: list[Any] = [v for v in self.table if isinstance(v, str)]
        elif pa.types.is_integer(column.type):
            labels = [v for v in self.table if isinstance(v, int)]
        else:
            raise self._bad(batch.slice(0, 1).to_pylist()[0], column[0].as_py())
        found = pc.index_in(column, value_set=pa.array(labels, type=column.type))
        if found.null_count:
            at = int(np.flatnonzero(found.is_null().to_numpy(zero_copy_only=False))[0])
            raise self._bad(batch.slice(at, 1).to_pylist()[0], column[at].as_py())
        codes = np.array([self.table[v] for v in labels], dtype=np.int8)
        kinds = codes[found.to_numpy(zero_copy_only=False)]
        return with_kinds(batch.remove_column(i), kinds)


class KindsToFieldOperator(StreamOperator):
    """Each record's row kind as the short string in field ``field``; every record is
    then an insert (see the module)."""

    accepts_changes = True

    def __init__(self, field: str) -> None:
        super().__init__()
        self.field = field

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        kinds = kinds_of(batch)
        n = num_rows(batch)
        self.counters.records_in += n
        codes = np.zeros(n, dtype=np.int8) if kinds is None else kinds
        if isinstance(batch, pa.RecordBatch):
            plain = cast(pa.RecordBatch, with_kinds(batch, None))
            if plain.schema.get_field_index(self.field) >= 0:
                raise ConfigurationError(
                    f"kinds_to_field: the records already have a field {self.field!r}; "
                    "choose another name"
                )
            column = _SHORTS.take(pa.array(codes.astype(np.int64)))
            self.emit(plain.append_column(pa.field(self.field, pa.string()), column))
            return
        shorts = [k.short for k in RowKind]
        rows = []
        for r, code in zip(batch.rows, codes.tolist()):
            if not isinstance(r, dict):
                raise ConfigurationError(
                    f"kinds_to_field: records must be dicts to get a field, got "
                    f"{type(r).__name__} {excerpt(r)}"
                )
            rows.append({**r, self.field: shorts[code]})
        self.emit(RowBatch(rows, batch.timestamps))


def key_reader(key: str | Sequence[str]) -> Any:
    """A function giving a dict record's key (a value, or a tuple for several fields)."""
    fields = [key] if isinstance(key, str) else list(key)
    if not fields or not all(isinstance(f, str) and f for f in fields):
        raise ConfigurationError(
            f"a changelog key is a field name or a list of field names, got {key!r}"
        )
    if len(fields) == 1:
        (only,) = fields
        return lambda r: r.get(only) if isinstance(r, dict) else r
    return lambda r: tuple(r.get(f) for f in fields)


class ToUpsertsOperator(StreamOperator):
    """A changelog as an upsert stream (``+I``, ``+U``, ``-D``); see the module."""

    accepts_changes = True

    def __init__(self, key: str | Sequence[str]) -> None:
        super().__init__()
        self.key = key
        self.key_of = key_reader(key)

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        kinds = kinds_of(batch)
        n = num_rows(batch)
        self.counters.records_in += n
        before = int(RowKind.UPDATE_BEFORE)
        if kinds is None or not bool(np.any(kinds == before)):
            self.emit(batch)
            return
        rows = to_rows(batch)
        key_of = self.key_of
        new_kinds = kinds.copy()
        keep = np.ones(n, dtype=bool)
        after = int(RowKind.UPDATE_AFTER)
        for i in np.flatnonzero(kinds == before).tolist():
            nxt = i + 1
            if nxt < n and kinds[nxt] == after and key_of(rows[nxt]) == key_of(rows[i]):
                keep[i] = False
            else:
                new_kinds[i] = RowKind.DELETE
        at = np.flatnonzero(keep)
        if isinstance(batch, pa.RecordBatch):
            out: Batch = with_kinds(batch.take(pa.array(at)), new_kinds[at])
        else:
            ts = batch.timestamps
            out = RowBatch(
                [rows[i] for i in at.tolist()], None if ts is None else ts[at], new_kinds[at]
            )
        self.emit(out)

"""The lookup join operator (``DataStream.lookup_join``): each record joined with the
rows of a bounded table that share its key, the table held in memory as a hash index.

Guarantees:

* each subtask loads the table once when it opens and again every ``refresh_ms`` of
  processing time (the task's processing-time service, so a test moves it with a manual
  clock); a refresh runs in the task thread between two batches and swaps the index in
  one assignment, so every batch is joined against exactly one version of the table;
* a refresh that finds the same version of a versioned table keeps the index it has;
* the checkpointed state is the version joined against and the processing time left
  until the next refresh: a restore loads that version again where the table keeps
  versions (Delta, Iceberg; M-R1) and refreshes after the time that was left; a table
  without versions (files, a query) is loaded as it is at the restore;
* a load that fails (table gone, database down, bad key column) fails the task with an
  error naming the table, and the restart strategy decides what follows.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from ....connectors.lookup_source import LoadedTable, LookupSource
from ....core.batch import Batch, RowBatch, is_scalar_schema, num_rows, user_view
from ....errors import ConfigurationError
from ..base import RestoredState, StreamOperator
from .index import LookupIndex
from .output import TableRows, join_arrow, join_rows, record_keys

log = logging.getLogger(__name__)

HOWS = ("inner", "left")


class LookupJoinOperator(StreamOperator):
    """See the module docstring. ``on``: the stream's key field (dict and Arrow records)
    or position (tuple records); ``table_key``: the table's key column; ``how``:
    ``"inner"`` or ``"left"``; ``refresh_ms``: None for never; ``suffix``: appended to
    a table column named like a stream field."""

    def __init__(
        self,
        table: LookupSource,
        on: str | int,
        table_key: str,
        how: str,
        refresh_ms: int | None,
        suffix: str,
    ) -> None:
        super().__init__()
        self.source = table
        self.on = on
        self.table_key = table_key
        self.how = how
        self.refresh_ms = refresh_ms
        self.suffix = suffix
        self.what = f"lookup_join(on={on!r}, table_key={table_key!r}) with {table.describe()}"
        self.index: LookupIndex | None = None
        self.version: int | None = None
        self._rows: TableRows | None = None
        self._checked: pa.DataType | None = None
        self._pinned: int | None = None
        self._refresh_in_ms: int | None = None
        self._refresh_due: int | None = None

    # -- loading --------------------------------------------------------------------
    def initialize_state(self, restored: RestoredState | None) -> None:
        if restored is None:
            return
        state = restored.own()
        if state is None:
            states = [s for s in restored.all() if s is not None]
            state = states[0] if states else None
        if state is None:
            return
        self._pinned = state.get("version") if self.source.versioned else None
        self._refresh_in_ms = state.get("refresh_in_ms")

    def open(self) -> None:
        self._install(self._load(self._pinned))
        if self.refresh_ms is not None:
            delay = self.refresh_ms if self._refresh_in_ms is None else self._refresh_in_ms
            self._schedule(delay)

    def _load(self, version: int | None) -> LoadedTable:
        try:
            return self.source.load(version)
        except ConfigurationError:
            raise
        except Exception as e:
            raise ConfigurationError(
                f"{self.what}: loading the table failed: {type(e).__name__}: {e}"
            ) from e

    def _install(self, loaded: LoadedTable) -> None:
        index = LookupIndex(loaded.table, self.table_key, self.what)
        # one assignment each, in the task thread: no batch sees a mix
        self.index, self.version, self._rows, self._checked = index, loaded.version, None, None
        log.info(
            "%s: loaded %d rows (version %s) in subtask %d",
            self.what,
            len(index),
            loaded.version,
            self.ctx.subtask_index,
        )

    def _schedule(self, delay_ms: int) -> None:
        service = self.ctx.processing_time_service
        if service is None:
            return
        self._refresh_due = service.current_time() + max(0, int(delay_ms))
        service.schedule(self._refresh_due, self._refresh)

    def _refresh(self, _: int) -> None:
        loaded = self._load(None)
        if not (self.source.versioned and loaded.version == self.version):
            self._install(loaded)
        assert self.refresh_ms is not None
        self._schedule(self.refresh_ms)

    # -- joining --------------------------------------------------------------------
    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        n = num_rows(batch)
        self.counters.records_in += n
        if n == 0:
            return
        index = self.index
        assert index is not None, "process_batch before open"
        keep = self.how == "left"
        if isinstance(batch, RowBatch):
            keys = self._row_keys(batch)
            self._check(keys.type, index)
            matches = index.probe(keys, keep_unmatched=keep)
            if self._rows is None:
                self._rows = TableRows(index)
            self.emit(join_rows(batch, matches, self._rows, self.suffix))
            return
        keys = self._column(batch)
        self._check(keys.type, index)
        self.emit(join_arrow(batch, index.probe(keys, keep_unmatched=keep), index, self.suffix))

    def _column(self, batch: pa.RecordBatch) -> pa.Array:
        view = user_view(batch)
        assert isinstance(view, pa.RecordBatch)
        if is_scalar_schema(batch.schema):
            raise ConfigurationError(
                f"{self.what}: the records are bare values, not records with fields; map "
                "them to dicts first, e.g. .map(lambda v: {'key': v})"
            )
        if not isinstance(self.on, str) or self.on not in view.schema.names:
            raise ConfigurationError(
                f"{self.what}: the records have no field {self.on!r}; their fields are "
                f"{view.schema.names}: give on= one of them"
            )
        return view.column(self.on)

    def _row_keys(self, batch: RowBatch) -> pa.Array:
        keys = record_keys(batch.rows, self.on, self.what)
        try:
            return pa.array(keys)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
            raise ConfigurationError(
                f"{self.what}: the keys {self.on!r} of one batch are of mixed or "
                f"unsupported types (e.g. {keys[0]!r}): {e}; give every record a key of "
                "one type"
            ) from e

    def _check(self, key_type: pa.DataType, index: LookupIndex) -> None:
        if key_type != self._checked:
            index.check_key_type(key_type, str(self.on))
            self._checked = key_type

    # -- checkpoints ------------------------------------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> Any:
        """The version joined against and the time left until the next refresh."""
        left = None
        service = self.ctx.processing_time_service
        if self._refresh_due is not None and service is not None:
            left = max(0, self._refresh_due - service.current_time())
        return {"version": self.version, "refresh_in_ms": left}

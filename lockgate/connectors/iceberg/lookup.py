"""An Iceberg table as a lookup join's table (:class:`IcebergLookup`): read whole
through pyiceberg at its current snapshot, or at a snapshot pinned by a restore."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from ...errors import ConfigurationError
from ..lookup_source import LoadedTable, LookupSource
from .sink import PYARROW_FILE_IO, _catalog_config, _pyiceberg, _redacted, split_identifier

WHAT = "LookupTable.iceberg"


class IcebergLookup(LookupSource):
    """The Iceberg table ``table`` (``"namespace.table"``) of ``catalog`` (a dict of
    pyiceberg catalog properties, or a pyiceberg Catalog), all columns or ``columns``.
    Versioned: each load reports the snapshot id it read, and ``load(snapshot_id)``
    reads that snapshot again (until snapshot expiry removed it; then the load fails
    saying so). A table without any snapshot yet loads as empty."""

    versioned = True

    def __init__(
        self,
        catalog: Mapping[str, str] | Any,
        table: str,
        *,
        columns: Sequence[str] | None = None,
    ) -> None:
        _pyiceberg()
        self.catalog_name, self.catalog_properties = _catalog_config(catalog, WHAT)
        self.catalog_properties.setdefault("py-io-impl", PYARROW_FILE_IO)
        self.identifier = split_identifier(table, WHAT)
        self.table = table
        if columns is not None and (
            isinstance(columns, str) or not all(isinstance(c, str) and c for c in columns)
        ):
            raise ConfigurationError(
                f"{WHAT} columns must be a list of column names, got {columns!r}"
            )
        self.columns = list(columns) if columns is not None else None
        self._load_table()  # a missing table fails here, on the driver, before the job runs

    def _load_table(self) -> Any:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchTableError

        try:
            catalog = load_catalog(self.catalog_name, **self.catalog_properties)
        except Exception as e:
            raise ConfigurationError(
                f"{WHAT} cannot open catalog {self.catalog_name!r} "
                f"({_redacted(self.catalog_properties)}): {type(e).__name__}: {e}"
            ) from e
        try:
            return catalog.load_table(self.identifier)
        except NoSuchTableError as e:
            raise ConfigurationError(
                f"{WHAT}: catalog {self.catalog_name!r} has no table {self.table!r}; create "
                "it first, or fix the name"
            ) from e

    def load(self, version: int | None = None) -> LoadedTable:
        table = self._load_table()
        if version is None:
            snapshot = table.current_snapshot()
        else:
            snapshot = table.snapshot_by_id(version)
            if snapshot is None:
                raise ConfigurationError(
                    f"{WHAT}: table {self.table!r} has no snapshot {version} any more, which "
                    "the checkpoint being restored pinned (expired?): restore from a newer "
                    "checkpoint, or start the job without restoring"
                )
        selected = tuple(self.columns) if self.columns is not None else ("*",)
        if snapshot is None:
            schema = table.schema().as_arrow()
            if self.columns is not None:
                schema = pa.schema([schema.field(c) for c in self.columns])
            return LoadedTable(schema.empty_table(), None)
        rows = table.scan(snapshot_id=snapshot.snapshot_id, selected_fields=selected).to_arrow()
        return LoadedTable(rows, int(snapshot.snapshot_id))

    def describe(self) -> str:
        return f"Iceberg table {self.table} of catalog {self.catalog_name}"

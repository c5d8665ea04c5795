"""A Delta table as a lookup join's table (:class:`DeltaLookup`): read whole through
delta-rs at its newest version, or at a version pinned by a restore."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ...errors import ConfigurationError
from ..lookup_source import LoadedTable, LookupSource
from .log import deltalake
from .sink import _table_uri

WHAT = "LookupTable.delta"


class DeltaLookup(LookupSource):
    """The Delta table at ``uri`` (a local folder or an object-store URL delta-rs opens,
    with its ``storage_options``), all columns or ``columns``. Versioned: each load
    reports the Delta version it read, and ``load(version)`` reads that version again
    (until a ``VACUUM`` removed its files; then the load fails saying so)."""

    versioned = True

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        storage_options: dict[str, str] | None = None,
        columns: Sequence[str] | None = None,
    ) -> None:
        deltalake()  # fails early, saying how to install it
        self.uri = _table_uri(uri, f"{WHAT} uri")
        if storage_options is not None and not (
            isinstance(storage_options, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in storage_options.items())
        ):
            raise ConfigurationError(
                f"{WHAT} storage_options must be a dict of str to str (delta-rs's object "
                f"store options), got {type(storage_options).__name__}"
            )
        self.storage_options = dict(storage_options) if storage_options else None
        if columns is not None and (
            isinstance(columns, str) or not all(isinstance(c, str) and c for c in columns)
        ):
            raise ConfigurationError(
                f"{WHAT} columns must be a list of column names, got {columns!r}"
            )
        self.columns = list(columns) if columns is not None else None
        self._open(None)  # a missing table fails here, on the driver, before the job runs

    def _open(self, version: int | None) -> object:
        dl = deltalake()
        try:
            table = dl.DeltaTable(self.uri, storage_options=self.storage_options, version=version)
        except dl.exceptions.TableNotFoundError as e:
            raise ConfigurationError(
                f"{WHAT}: there is no Delta table at {self.uri!r}; create it first, or fix the uri"
            ) from e
        except Exception as e:
            if version is None:
                raise
            raise ConfigurationError(
                f"{WHAT}: cannot read version {version} of the Delta table at {self.uri!r}, "
                f"which the checkpoint being restored pinned ({type(e).__name__}: {e}); a "
                "VACUUM or log cleanup removed it: restore from a newer checkpoint, or start "
                "the job without restoring"
            ) from e
        return table

    def load(self, version: int | None = None) -> LoadedTable:
        table = self._open(version)
        rows = table.to_pyarrow_table(columns=self.columns)  # type: ignore[attr-defined]
        return LoadedTable(rows, int(table.version()))  # type: ignore[attr-defined]

    def describe(self) -> str:
        return f"Delta table {self.uri}"

"""``LookupTable``: the bounded table of a stream–table lookup join
(``DataStream.lookup_join``), made from files, a Delta or Iceberg table, a PostgreSQL
query or any bounded lockgate source.

Each constructor checks its arguments (and, where that is cheap, that the table exists)
on the driver, when the job is built, and raises
:class:`~lockgate.errors.ConfigurationError` saying what is wrong and how to fix it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..connectors.base import Source
from ..connectors.bounded_read import SourceLookup
from ..connectors.files.source import FileSource
from ..connectors.lookup_source import LookupSource
from ..errors import ConfigurationError


class LookupTable:
    """A bounded table for ``stream.lookup_join(table, ...)``. Build one with a
    constructor:

    * :meth:`parquet`, :meth:`csv`, :meth:`json` - files (a file, or every visible file of
      a folder; local or any URL ``pyarrow.fs`` opens), read by ``FileSource``'s readers;
    * :meth:`delta` - a Delta table (versioned: a restore joins against the version the
      checkpoint recorded);
    * :meth:`iceberg` - an Iceberg table (versioned by snapshot id, likewise);
    * :meth:`postgres` - the rows of a PostgreSQL query;
    * :meth:`from_source` - any bounded lockgate ``Source``.

    Or wrap your own :class:`~lockgate.connectors.lookup_source.LookupSource`:
    ``LookupTable(my_source)``. Files, queries and sources keep no versions: a refresh
    and a restore read their contents as they are then.
    """

    def __init__(self, source: LookupSource) -> None:
        if not isinstance(source, LookupSource):
            raise ConfigurationError(
                f"LookupTable wraps a LookupSource, got {source!r}: build a table with "
                "LookupTable.parquet(path), .csv(path), .json(path), .delta(uri), "
                ".iceberg(catalog, table), .postgres(dsn, query) or .from_source(source)"
            )
        #: what the table is read from
        self.source = source

    @property
    def versioned(self) -> bool:
        """Whether the table keeps versions (a restore then pins the one it recorded)."""
        return self.source.versioned

    def __repr__(self) -> str:
        return f"LookupTable({self.source.describe()})"

    # -- files --------------------------------------------------------------------------
    @classmethod
    def parquet(
        cls, path: str | os.PathLike[str], *, columns: Sequence[str] | None = None
    ) -> LookupTable:
        """Parquet files at ``path``; ``columns``: read only these (projection)."""
        return cls._files(path, "parquet", columns=columns)

    @classmethod
    def csv(
        cls,
        path: str | os.PathLike[str],
        *,
        csv_types: dict[str, Callable[[str], Any]] | None = None,
    ) -> LookupTable:
        """CSV files with a header line at ``path``; values become int, float or str,
        empty fields None, unless ``csv_types`` maps a column to a converter (``str``
        keeps e.g. zip codes as text)."""
        return cls._files(path, "csv", csv_types=csv_types)

    @classmethod
    def json(cls, path: str | os.PathLike[str]) -> LookupTable:
        """JSON-lines files at ``path`` (one JSON object per line)."""
        return cls._files(path, "jsonl")

    @classmethod
    def _files(cls, path: str | os.PathLike[str], format: str, **options: Any) -> LookupTable:
        try:
            source = FileSource(path, format, **options)
        except ConfigurationError as e:
            raise ConfigurationError(f"LookupTable.{format}: {e}") from e
        return cls(SourceLookup(source, f"LookupTable.{format} {source.location.shown}"))

    # -- tables with versions ---------------------------------------------------------
    @classmethod
    def delta(
        cls,
        uri: str | os.PathLike[str],
        *,
        storage_options: dict[str, str] | None = None,
        columns: Sequence[str] | None = None,
    ) -> LookupTable:
        """The Delta table at ``uri`` (needs ``lockgate[delta]``). The table must exist."""
        from ..connectors.delta.lookup import DeltaLookup

        return cls(DeltaLookup(uri, storage_options=storage_options, columns=columns))

    @classmethod
    def iceberg(
        cls,
        catalog: Mapping[str, str] | Any,
        table: str,
        *,
        columns: Sequence[str] | None = None,
    ) -> LookupTable:
        """The Iceberg table ``table`` (``"namespace.table"``) of ``catalog`` (pyiceberg
        catalog properties, or a pyiceberg Catalog; needs ``lockgate[iceberg]``). The
        table must exist."""
        from ..connectors.iceberg.lookup import IcebergLookup

        return cls(IcebergLookup(catalog, table, columns=columns))

    # -- a query, any source --------------------------------------------------------------
    @classmethod
    def postgres(
        cls,
        dsn: str,
        query: str,
        *,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        connect_timeout_s: float = 10.0,
    ) -> LookupTable:
        """The rows of ``query`` (psycopg placeholders filled from ``params``) on the
        PostgreSQL database ``dsn`` names, run in one read-only transaction (needs
        ``lockgate[postgres]``). The dsn's password never appears in a message."""
        from ..connectors.postgres.lookup import PostgresLookup

        return cls(PostgresLookup(dsn, query, params=params, connect_timeout_s=connect_timeout_s))

    @classmethod
    def from_source(cls, source: Source) -> LookupTable:
        """Every record of the bounded ``source`` (e.g. ``FileSource`` with options of
        its own, ``CollectionSource``), read by its own reader."""
        return cls(SourceLookup(source, f"LookupTable.from_source({type(source).__name__})"))

"""A PostgreSQL query as a lookup join's table (:class:`PostgresLookup`): run in one
read-only transaction, so a load sees one consistent snapshot of the database."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from ...errors import ConfigurationError
from ..lookup_source import LoadedTable, LookupSource
from .table import connect, psycopg_module, redacted

WHAT = "LookupTable.postgres"

#: the Arrow type of a result column of a few common PostgreSQL types (by type oid),
#: used when the query returns no rows (with rows, Arrow infers them from the values)
_EMPTY_TYPES: dict[int, pa.DataType] = {
    16: pa.bool_(),
    20: pa.int64(),
    21: pa.int64(),
    23: pa.int64(),
    700: pa.float64(),
    701: pa.float64(),
    25: pa.string(),
    1042: pa.string(),
    1043: pa.string(),
}


class PostgresLookup(LookupSource):
    """The rows of ``query`` (with ``params``, psycopg placeholders) on the database
    ``dsn`` names. Not versioned: a reload, and a restore, run the query again and join
    against what it returns then. The password of ``dsn`` never appears in a message."""

    versioned = False

    def __init__(
        self,
        dsn: str,
        query: str,
        *,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        connect_timeout_s: float = 10.0,
    ) -> None:
        psycopg_module()  # fails early, saying how to install it
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigurationError(
                f"{WHAT} dsn must be a connection string such as "
                "'postgresql://user@127.0.0.1:5432/db'"
            )
        if not isinstance(query, str) or not query.strip():
            raise ConfigurationError(
                f"{WHAT} query must be a SELECT statement, e.g. 'SELECT id, name FROM "
                f"customers', got {query!r}"
            )
        if not isinstance(connect_timeout_s, (int, float)) or connect_timeout_s <= 0:
            raise ConfigurationError(
                f"{WHAT} connect_timeout_s must be a positive number, got {connect_timeout_s!r}"
            )
        self.dsn = dsn
        self.query = query
        self.params = params
        self.connect_timeout_s = float(connect_timeout_s)

    def load(self, version: int | None = None) -> LoadedTable:
        psycopg = psycopg_module()
        conn = connect(self.dsn, autocommit=False, timeout_s=self.connect_timeout_s, what=WHAT)
        try:
            conn.read_only = True
            with conn.cursor() as cur:
                try:
                    cur.execute(self.query, self.params)
                except psycopg.Error as e:
                    raise ConfigurationError(
                        f"{WHAT}: the query {self.query!r} failed on {redacted(self.dsn)}: "
                        f"{' '.join(str(e).split())}; fix the query (does its table exist?)"
                    ) from e
                if cur.description is None:
                    raise ConfigurationError(
                        f"{WHAT}: the query {self.query!r} returns no rows (not a SELECT?)"
                    )
                names = [d.name for d in cur.description]
                oids = [d.type_code for d in cur.description]
                rows = cur.fetchall()
            conn.rollback()
        finally:
            conn.close()
        if len(set(names)) != len(names):
            raise ConfigurationError(
                f"{WHAT}: the query {self.query!r} returns the columns {names}, some twice; "
                "give each its own name (AS ...)"
            )
        columns = [
            pa.array([r[i] for r in rows], type=None if rows else _EMPTY_TYPES.get(oid, pa.null()))
            for i, oid in enumerate(oids)
        ]
        return LoadedTable(pa.table(columns, names=names))

    def describe(self) -> str:
        return f"PostgreSQL query {self.query!r} on {redacted(self.dsn)}"

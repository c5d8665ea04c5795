"""Writing records into one PostgreSQL table: what the table looks like, and the two
ways rows go in (``COPY`` for appends, one ``INSERT ... SELECT FROM unnest(...) ON
CONFLICT`` statement per batch for upserts). Used by :class:`PostgresSink`; nothing
here commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa

from ...core.batch import Batch, is_scalar_schema, to_rows, user_view
from ...errors import ConfigurationError


def psycopg_module() -> Any:
    """psycopg, or an error saying how to install it."""
    try:
        import psycopg
    except ImportError as e:  # pragma: no cover - the test extra installs it
        raise ConfigurationError(
            "PostgresSink needs psycopg 3: pip install 'lockgate[postgres]' "
            "(or pip install 'psycopg[binary]')"
        ) from e
    return psycopg


def redacted(dsn: str) -> str:
    """``dsn`` without its password, for messages."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - an unparsable dsn is shown as the server would see it
        return "<unparsable dsn>"
    parts.pop("password", None)
    return " ".join(f"{k}={v}" for k, v in parts.items())


def connect(dsn: str, *, autocommit: bool, timeout_s: float, what: str) -> Any:
    """A psycopg connection to ``dsn``; a failure says where and what to do."""
    psycopg = psycopg_module()
    try:
        return psycopg.connect(dsn, autocommit=autocommit, connect_timeout=max(1, int(timeout_s)))
    except psycopg.Error as e:
        raise ConfigurationError(
            f"{what}: cannot connect to PostgreSQL ({redacted(dsn)}): "
            f"{' '.join(str(e).split())}; start the server or fix the dsn"
        ) from e


def split_table_name(table: str) -> tuple[str, ...]:
    """``"schema.table"`` or ``"table"`` as identifier parts (no quoting inside)."""
    if not isinstance(table, str) or not table.strip():
        raise ConfigurationError(
            f"PostgresSink table must be a table name such as 'events' or 'public.events', "
            f"got {table!r}"
        )
    parts = tuple(table.split("."))
    if len(parts) > 2 or not all(parts):
        raise ConfigurationError(f"PostgresSink table {table!r} must be 'table' or 'schema.table'")
    return parts


@dataclass(frozen=True)
class TableShape:
    """A table's columns (in order) with their SQL types, and its unique keys."""

    name: str
    columns: tuple[str, ...]
    types: dict[str, str]
    unique_keys: tuple[frozenset[str], ...]


def describe(conn: Any, table: str) -> TableShape:
    """The shape of ``table``; a missing table is a ConfigurationError."""
    psycopg = psycopg_module()
    parts = split_table_name(table)
    regclass = ".".join(psycopg.sql.Identifier(p).as_string(conn) for p in parts)
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s)::oid", (regclass,))
        row = cur.fetchone()
        if row is None or row[0] is None:
            raise ConfigurationError(
                f"PostgresSink: table {table!r} does not exist in database "
                f"{conn.info.dbname!r}; create it first (CREATE TABLE {table} (...))"
            )
        oid = row[0]
        cur.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (oid,),
        )
        cols = cur.fetchall()
        cur.execute(
            "SELECT array_agg(a.attname::text) FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            # arbiters of ON CONFLICT (columns): unique, immediate, whole-table, on columns
            "WHERE i.indrelid = %s AND i.indisunique AND i.indimmediate "
            "AND i.indpred IS NULL AND i.indexprs IS NULL GROUP BY i.indexrelid",
            (oid,),
        )
        keys = tuple(frozenset(r[0]) for r in cur.fetchall())
    return TableShape(table, tuple(c for c, _ in cols), dict(cols), keys)


def check_key(shape: TableShape, key: tuple[str, ...]) -> None:
    """``key`` names columns of ``shape`` that a unique index or primary key covers."""
    missing = [k for k in key if k not in shape.types]
    if missing:
        raise ConfigurationError(
            f"PostgresSink key {list(key)} names columns {missing} that table "
            f"{shape.name!r} does not have; its columns are {list(shape.columns)}"
        )
    if frozenset(key) not in shape.unique_keys:
        raise ConfigurationError(
            f"PostgresSink key {list(key)}: table {shape.name!r} has no primary key or "
            f"unique index on exactly these columns, which upserts need (ON CONFLICT); add "
            f"one, e.g. ALTER TABLE {shape.name} ADD PRIMARY KEY ({', '.join(key)})"
        )


class RowWriter:
    """Turns batches into rows of ``shape`` and writes them on a connection, inside
    whatever transaction the caller has open. Every record must be a dict (or an Arrow
    row) whose fields are columns of the table; missing fields are NULL."""

    def __init__(self, shape: TableShape, key: tuple[str, ...], where: str) -> None:
        self.shape = shape
        self.key = key
        self.where = where

    def rows(self, batch: Batch) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The columns the records fill (in table order) and one tuple per record."""
        if isinstance(batch, pa.RecordBatch) and not is_scalar_schema(batch.schema):
            # columns come from the schema, once per batch
            arrow = cast(pa.RecordBatch, user_view(batch))
            self._check_fields(list(arrow.schema.names))
            columns = [c for c in self.shape.columns if c in arrow.schema.names]
            values = [arrow.column(c).to_pylist() for c in columns]
            return columns, list(zip(*values))
        records = to_rows(batch)
        fields: dict[str, None] = {}
        for i, record in enumerate(records):
            if not isinstance(record, dict):
                raise TypeError(
                    f"{self.where}: record {i} of a batch is {type(record).__name__} "
                    f"({record!r:.120}), not a dict of column values; map records to dicts "
                    f"with fields among {list(self.shape.columns)}"
                )
            for name in record:
                fields.setdefault(name)
        self._check_fields(list(fields))
        columns = [c for c in self.shape.columns if c in fields]
        return columns, [tuple(r.get(c) for c in columns) for r in records]

    def _check_fields(self, fields: list[str]) -> None:
        unknown = [f for f in fields if f not in self.shape.types]
        if unknown:
            raise TypeError(
                f"{self.where}: records have fields {unknown} that table {self.shape.name!r} "
                f"has no columns for; its columns are {list(self.shape.columns)}"
            )

    def append(self, conn: Any, batch: Batch) -> int:
        """COPY the records of ``batch`` into the table; returns the row count."""
        columns, rows = self.rows(batch)
        if not rows:
            return 0
        sql = psycopg_module().sql
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            sql.Identifier(*split_table_name(self.shape.name)),
            sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        )
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
        return len(rows)

    def _key_positions(self, columns: list[str], what: str) -> list[int]:
        """Where the key fields are among ``columns``; a TypeError naming the missing
        ones (``what``: the records or deletes lacking them)."""
        missing = [k for k in self.key if k not in columns]
        if missing:
            raise TypeError(
                f"{self.where}: {what} lack the key fields {missing}; every record needs "
                f"{list(self.key)}"
            )
        return [columns.index(k) for k in self.key]

    def upsert(self, conn: Any, batch: Batch) -> int:
        """Insert or update the records of ``batch`` by key, in one statement; within a
        batch the last record of a key wins. Returns the row count written."""
        columns, rows = self.rows(batch)
        if not rows:
            return 0
        positions = self._key_positions(columns, "records")
        latest = {tuple(row[p] for p in positions): row for row in rows}
        # one lock order for every writer: concurrent upserts of one key set never deadlock
        unique = [latest[k] for k in sorted(latest, key=repr)]
        sql = psycopg_module().sql
        arrays = [list(col) for col in zip(*unique)]
        others = [c for c in columns if c not in self.key]
        action = (
            sql.SQL("DO UPDATE SET {}").format(
                sql.SQL(", ").join(
                    sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                    for c in others
                )
            )
            if others
            else sql.SQL("DO NOTHING")
        )
        statement = sql.SQL(
            "INSERT INTO {table} ({cols}) SELECT * FROM unnest({arrays}) "
            "ON CONFLICT ({key}) {action}"
        ).format(
            table=sql.Identifier(*split_table_name(self.shape.name)),
            cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
            arrays=sql.SQL(", ").join(
                sql.SQL("%s::{}[]").format(sql.SQL(self.shape.types[c])) for c in columns
            ),
            key=sql.SQL(", ").join(sql.Identifier(k) for k in self.key),
            action=action,
        )
        with conn.cursor() as cur:
            cur.execute(statement, arrays)
        return len(unique)

    def delete(self, conn: Any, batch: Batch) -> int:
        """Delete the rows whose key the records of ``batch`` hold (their other fields are
        ignored), in one statement, in key order (so concurrent writers never deadlock).
        Returns the number of keys given."""
        columns, rows = self.rows(batch)
        if not rows:
            return 0
        positions = self._key_positions(columns, "deletes")
        keys = sorted({tuple(row[p] for p in positions) for row in rows}, key=repr)
        sql = psycopg_module().sql
        arrays = [list(col) for col in zip(*keys)]
        names = [sql.Identifier(k) for k in self.key]
        statement = sql.SQL(
            "DELETE FROM {table} AS t USING (SELECT * FROM unnest({arrays})) AS d ({names}) "
            "WHERE {match}"
        ).format(
            table=sql.Identifier(*split_table_name(self.shape.name)),
            arrays=sql.SQL(", ").join(
                sql.SQL("%s::{}[]").format(sql.SQL(self.shape.types[k])) for k in self.key
            ),
            names=sql.SQL(", ").join(names),
            match=sql.SQL(" AND ").join(sql.SQL("t.{} = d.{}").format(n, n) for n in names),
        )
        with conn.cursor() as cur:
            cur.execute(statement, arrays)
        return len(keys)

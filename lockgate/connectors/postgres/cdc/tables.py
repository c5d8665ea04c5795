"""What the source knows about a replicated table: its columns (in the order pgoutput
sends them: not dropped, not generated), its primary key and its replica identity."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ....errors import ConfigurationError
from .connection import OWNER
from .types import INTEGER_TYPES, Column


@dataclass(frozen=True)
class TableInfo:
    """A table: ``qualified`` is ``schema.table`` as the source names it in ``_table``."""

    schema: str
    name: str
    oid: int
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    #: 'd' default (the primary key), 'f' full, 'i' an index, 'n' nothing
    replica_identity: str

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def sql_name(self) -> str:
        """The table as a quoted SQL identifier."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.name)}"

    @property
    def integer_key(self) -> Column | None:
        """The primary key's column when it is one integer column (the snapshot splits
        such tables into key ranges), else None."""
        if len(self.primary_key) != 1:
            return None
        column = next(c for c in self.columns if c.name == self.primary_key[0])
        return column if column.type_oid in INTEGER_TYPES else None

    def column_index(self, name: str) -> int:
        return next(i for i, c in enumerate(self.columns) if c.name == name)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def parse_table_name(table: object) -> tuple[str, str]:
    """``"schema.table"`` or ``"table"`` (schema ``public``) as ``(schema, table)``.
    Names are taken as written (case-sensitive, no quotes): ``"Sales.Orders"`` is the
    table ``"Orders"`` of the schema ``"Sales"``."""
    if not isinstance(table, str) or not table.strip() or table.count(".") > 1:
        raise ConfigurationError(
            f"{OWNER} tables must be table names such as 'orders' or 'public.orders', got {table!r}"
        )
    schema, _, name = table.rpartition(".")
    if not name or (_ and not schema):
        raise ConfigurationError(f"{OWNER}: {table!r} is not a table name")
    return schema or "public", name


def describe_tables(conn: Any, tables: Sequence[tuple[str, str]]) -> list[TableInfo]:
    """The tables as they are now; a missing one fails naming it."""
    out = []
    for schema, name in tables:
        row = conn.execute(
            "SELECT c.oid, c.relreplident, c.relkind FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s",
            (schema, name),
        ).fetchone()
        if row is None or row[2] not in ("r", "p"):
            raise ConfigurationError(
                f"{OWNER}: table {schema}.{name} does not exist in the database (names are "
                "case-sensitive, as stored: create it, or fix tables=)"
            )
        oid, identity = int(row[0]), str(row[1])
        key = [
            r[0]
            for r in conn.execute(
                "SELECT a.attname FROM pg_index i "
                "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, n) ON true "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
                "WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.n",
                (oid,),
            ).fetchall()
        ]
        columns = tuple(
            Column(
                str(r[0]),
                int(r[1]),
                int(r[2]),
                key=str(r[0]) in key,
                element_oid=int(r[3]) if r[4] == "A" else 0,
            )
            for r in conn.execute(
                "SELECT a.attname, a.atttypid, a.atttypmod, t.typelem, t.typcategory "
                "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped "
                "AND a.attgenerated = '' ORDER BY a.attnum",
                (oid,),
            ).fetchall()
        )
        out.append(TableInfo(schema, name, oid, columns, tuple(key), identity))
    return out


def check_replica_identity(table: TableInfo) -> None:
    """Updates and deletes of ``table`` can be replicated: it has a replica identity."""
    if table.replica_identity == "n" or (table.replica_identity == "d" and not table.primary_key):
        raise ConfigurationError(
            f"{OWNER}: table {table.qualified} has no replica identity, so PostgreSQL would "
            "refuse its updates and deletes once it is published (and they could not be "
            "replicated): add a primary key, or run ALTER TABLE "
            f"{table.sql_name} REPLICA IDENTITY FULL"
        )


def check_metadata_names(table: TableInfo, reserved: Sequence[str]) -> None:
    clash = [c.name for c in table.columns if c.name in reserved]
    if clash:
        raise ConfigurationError(
            f"{OWNER}: table {table.qualified} has columns named {clash}, which the source "
            f"uses for its metadata ({', '.join(reserved)}); rename them, or pass "
            "metadata_prefix= to name the metadata columns otherwise"
        )

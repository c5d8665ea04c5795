"""The PostgreSQL with wal_level=logical of scripts/services.sh (127.0.0.1:5433) for the
PostgresCdcSource tests: unique table, slot and publication names per test, all dropped
at teardown (only the test's own: its slots' walsenders are ended first)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from lockgate.connectors.postgres_cdc.pgoutput import parse_lsn

CDC_DSN = os.environ.get(
    "LOCKGATE_TEST_CDC_DSN", "host=127.0.0.1 port=5433 user=postgres dbname=test"
)


class Cdc:
    def __init__(self) -> None:
        try:
            self.conn = psycopg.connect(CDC_DSN, autocommit=True)
        except psycopg.OperationalError as e:
            pytest.fail(
                f"no PostgreSQL with wal_level=logical at {CDC_DSN!r} ({e}); run "
                "bash scripts/services.sh"
            )
        self.tag = uuid.uuid4().hex[:10]
        self.tables: list[str] = []
        self.slots: list[str] = []
        self.publications: list[str] = []

    def sql(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(query, params)
        return cur.fetchall() if cur.description else []

    def table(self, columns: str, identity: str | None = None) -> str:
        name = f"cdc_t{len(self.tables)}_{self.tag}"
        self.tables.append(name)
        self.sql(f"CREATE TABLE {name} ({columns})")
        if identity:
            self.sql(f"ALTER TABLE {name} REPLICA IDENTITY {identity}")
        return name

    def slot(self) -> str:
        name = f"lg_slot{len(self.slots)}_{self.tag}"
        self.slots.append(name)
        return name

    def publication(self) -> str:
        name = f"lg_pub{len(self.publications)}_{self.tag}"
        self.publications.append(name)
        return name

    def lsn(self) -> int:
        return parse_lsn(self.sql("SELECT pg_current_wal_flush_lsn()::text")[0][0])

    def confirmed(self, slot: str) -> int | None:
        rows = self.sql(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        )
        return parse_lsn(rows[0][0]) if rows and rows[0][0] else None

    def transaction(self, *statements: str) -> None:
        with self.conn.transaction():
            for s in statements:
                self.conn.execute(s)

    def rows(self, table: str, key: str = "id") -> dict[Any, dict[str, Any]]:
        cur = self.conn.execute(f"SELECT * FROM {table}")
        names = [d.name for d in cur.description or ()]
        return {r[names.index(key)]: dict(zip(names, r)) for r in cur.fetchall()}

    def close(self) -> None:
        for slot in self.slots:
            self.sql(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name = %s AND active_pid IS NOT NULL",
                (slot,),
            )
        for slot in self.slots:
            for _ in range(200):  # a terminated walsender releases its slot shortly
                try:
                    self.sql(
                        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = %s",
                        (slot,),
                    )
                    break
                except psycopg.errors.ObjectInUse:
                    self.conn.execute("SELECT pg_sleep(0.05)")
        for pub in self.publications:
            self.sql(f"DROP PUBLICATION IF EXISTS {pub}")
        for table in self.tables:
            self.sql(f"DROP TABLE IF EXISTS {table}")
        self.conn.close()


def open_cdc() -> Iterator[Cdc]:
    """The body of a test module's ``cdc`` fixture: ``yield from open_cdc()``."""
    c = Cdc()
    yield c
    c.close()

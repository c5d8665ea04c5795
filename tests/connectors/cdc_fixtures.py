"""The PostgreSQL with wal_level=logical of scripts/services.sh (127.0.0.1:5433) for the
PostgresCdcSource tests: unique table, slot and publication names per test, all dropped
at teardown (only the test's own: its slots' walsenders are ended first)."""

from __future__ import annotations

import os
import random
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from lockgate.connectors.base import InputStatus, ReaderOutput, Source, SourceReader
from lockgate.connectors.postgres.cdc.pgoutput import parse_lsn
from lockgate.connectors.postgres.cdc.reader import CdcReader
from lockgate.connectors.postgres.cdc.source import PostgresCdcSource
from lockgate.runtime.context import RuntimeContext

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


class EndAt(Source):
    """The CDC source, ended once the LSN written into ``target_file`` (by the test, after
    its writer's last commit) is read and every chunk of the subtask is announced: a
    test's way to end an unbounded CDC job at a known point of the WAL."""

    def __init__(self, source: PostgresCdcSource, target_file: str) -> None:
        self.source = source
        self.target_file = target_file
        self.bounded = True
        self.default_name = source.default_name

    def create_splits(self, parallelism: int) -> list[Any]:
        return self.source.create_splits(parallelism)

    def restore_splits(self, splits: list[Any], ctx: RuntimeContext) -> list[Any]:
        return self.source.restore_splits(splits, ctx)

    def prepare_run(self) -> bool:
        return self.source.prepare_run()

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        inner = self.source.create_reader(ctx)
        assert isinstance(inner, CdcReader)
        return _EndAtReader(inner, self.target_file)


class _EndAtReader(SourceReader):
    restores_every_split = True

    def __init__(self, inner: CdcReader, target_file: str) -> None:
        self.inner = inner
        self.target_file = target_file

    def add_splits(self, splits: list[Any]) -> None:
        self.inner.add_splits(splits)

    def _target(self) -> int | None:
        if not os.path.exists(self.target_file):
            return None
        with open(self.target_file) as f:
            text = f.read().strip()
        return parse_lsn(text) if text else None

    def poll(self, output: ReaderOutput) -> InputStatus:
        status = self.inner.poll(output)
        target = self._target()
        if target is None or status is InputStatus.MORE_AVAILABLE:
            return status
        r = self.inner
        chunks_done = all(c.snapshot is not None for c in r.chunks) and not r._unmarked
        stream = r.stream
        stream_done = stream is None or (
            stream.snapshots is not None and stream.position >= target and r._txn is None
        )
        return InputStatus.END_OF_INPUT if chunks_done and stream_done else status

    def wait_hint_ms(self) -> float | None:
        return self.inner.wait_hint_ms()

    def snapshot_positions(self) -> list[Any]:
        return self.inner.snapshot_positions()

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[Any]) -> None:
        self.inner.notify_checkpoint_complete(checkpoint_id, positions)

    def close(self) -> None:
        self.inner.close()


def write_concurrently(
    dsn: str,
    table: str,
    transactions: int,
    seed: int,
    done: threading.Event,
    keys: int = 3_000,
    first_new_id: int = 100_000,
) -> None:
    """Random inserts (of new keys from ``first_new_id``), updates and deletes (of keys
    ``1..keys``) into ``table (id, v, s)``, 1 to 4 statements per transaction (some touch
    one key twice); ``done`` is set at the end, also on failure."""
    rng = random.Random(seed)
    next_id = first_new_id
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(transactions):
                with conn.transaction():
                    for _ in range(rng.randint(1, 4)):
                        op = rng.random()
                        key = rng.randint(1, keys)
                        if op < 0.3:
                            next_id += 1
                            conn.execute(
                                f"INSERT INTO {table} VALUES (%s, %s, 'new')", (next_id, next_id)
                            )
                        elif op < 0.8:
                            conn.execute(
                                f"UPDATE {table} SET v = v + 1, s = md5(v::text) WHERE id = %s",
                                (key,),
                            )
                        else:
                            conn.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
    finally:
        done.set()

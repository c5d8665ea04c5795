"""The server side the source needs: ``wal_level = logical``, a publication of the
tables, and a logical replication slot with the ``pgoutput`` plugin.

The source creates what is missing (a publication ``FOR TABLE`` the tables, a slot) and
checks what exists; it never alters or drops a publication, and drops a slot only when
asked to (``drop_slot_on_finish``). A slot it creates returns its consistent point and
an exported snapshot; the source keeps that snapshot's transaction ids (not the snapshot
itself, which dies with the session that exported it) to check the initial snapshot's
chunks against it (:mod:`.snapshot`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ....errors import ConfigurationError
from ..table import redacted
from .connection import OWNER, connect_replication, conninfo
from .pgoutput import parse_lsn
from .tables import TableInfo, quote_ident
from .xids import XidSnapshot

#: slot names PostgreSQL accepts
SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")


def check_wal_level(conn: Any, dsn: str) -> None:
    level = conn.execute("SHOW wal_level").fetchone()[0]
    if level != "logical":
        raise ConfigurationError(
            f"{OWNER}: the server ({redacted(dsn)}) has wal_level = {level}; logical "
            "replication needs wal_level = logical: set it in postgresql.conf (or ALTER "
            "SYSTEM SET wal_level = logical) and restart the server; max_replication_slots "
            "and max_wal_senders must be at least 1 more than in use"
        )


def ensure_publication(conn: Any, publication: str, tables: Sequence[TableInfo]) -> bool:
    """The publication exists and publishes inserts, updates, deletes and truncates of
    every table; created ``FOR TABLE`` them when missing (returns True then). An existing
    one that lacks a table or an operation fails saying how to fix it (the source never
    alters a publication: others may use it)."""
    row = conn.execute(
        "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, puballtables "
        "FROM pg_publication WHERE pubname = %s",
        (publication,),
    ).fetchone()
    if row is None:
        names = ", ".join(t.sql_name for t in tables)
        conn.execute(f"CREATE PUBLICATION {quote_ident(publication)} FOR TABLE {names}")
        return True
    missing_ops = [op for op, on in zip(("insert", "update", "delete", "truncate"), row) if not on]
    if missing_ops:
        raise ConfigurationError(
            f"{OWNER}: publication {publication!r} does not publish {', '.join(missing_ops)}; "
            f"ALTER PUBLICATION {quote_ident(publication)} SET (publish = 'insert, update, "
            "delete, truncate'), or name another publication (a missing one is created)"
        )
    published = {
        (r[0], r[1])
        for r in conn.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
            (publication,),
        ).fetchall()
    }
    absent = [t for t in tables if (t.schema, t.name) not in published]
    if absent:
        raise ConfigurationError(
            f"{OWNER}: publication {publication!r} does not include "
            f"{', '.join(t.qualified for t in absent)}: ALTER PUBLICATION "
            f"{quote_ident(publication)} ADD TABLE {', '.join(t.sql_name for t in absent)}"
        )
    return False


@dataclass(frozen=True)
class SlotInfo:
    plugin: str | None
    database: str | None
    confirmed_flush_lsn: int | None
    active_pid: int | None
    wal_status: str | None
    temporary: bool


def slot_info(conn: Any, slot: str) -> SlotInfo | None:
    row = conn.execute(
        "SELECT plugin, database, confirmed_flush_lsn::text, active_pid, wal_status, "
        "temporary FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    return SlotInfo(
        row[0], row[1], parse_lsn(row[2]) if row[2] else None, row[3], row[4], bool(row[5])
    )


def check_slot(info: SlotInfo, slot: str, database: str) -> None:
    """An existing slot is one the source can read."""
    if info.plugin != "pgoutput" or info.database != database:
        raise ConfigurationError(
            f"{OWNER}: replication slot {slot!r} exists but is for plugin {info.plugin!r} in "
            f"database {info.database!r}; the source needs a pgoutput slot in {database!r}: "
            "name another slot (a missing one is created)"
        )
    if info.wal_status == "lost":
        raise ConfigurationError(
            f"{OWNER}: replication slot {slot!r} is lost (wal_status = lost: the server "
            "removed WAL it still needed, max_slot_wal_keep_size): its changes cannot be "
            "read any more; drop it (SELECT pg_drop_replication_slot(...)) and start a "
            "fresh job, which takes a new snapshot"
        )


def create_slot(dsn: str, slot: str, timeout_s: float) -> tuple[int, XidSnapshot]:
    """Create the pgoutput slot ``slot`` on a replication connection; its consistent
    point and the transaction ids of the snapshot it exported (read through
    ``SET TRANSACTION SNAPSHOT`` while the exporting session is still open)."""
    import psycopg
    from psycopg import pq

    repl = connect_replication(dsn, timeout_s, ConfigurationError)
    try:
        result = repl.exec_(
            f"CREATE_REPLICATION_SLOT \"{slot}\" LOGICAL pgoutput (SNAPSHOT 'export')".encode()
        )
        if result.status != pq.ExecStatus.TUPLES_OK:
            raise ConfigurationError(
                f"{OWNER}: cannot create replication slot {slot!r}: "
                f"{' '.join(repl.get_error_message().split())}"
            )
        consistent = parse_lsn(bytes(result.get_value(0, 1) or b"").decode())
        snapshot_name = bytes(result.get_value(0, 2) or b"").decode()
        with psycopg.connect(conninfo(dsn)) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(f"SET TRANSACTION SNAPSHOT '{snapshot_name}'")
            row = conn.execute("SELECT pg_current_snapshot()::text").fetchone()
            assert row is not None
            text = row[0]
            conn.rollback()
        return consistent, XidSnapshot.parse(text)
    finally:
        repl.finish()


def drop_slot(conn: Any, slot: str) -> None:
    conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    )

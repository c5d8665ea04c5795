"""Applying one compacted interval of a changelog to a PostgreSQL table, for
``PostgresSink(mode="upsert")`` (M-X2, M-X3).

:func:`apply_changes` writes the interval inside whatever transaction the caller has
open (the sink's, which it then prepares): the removed keys first (``DELETE ... USING
unnest(...)``), then the rows put (``INSERT ... ON CONFLICT (key) DO UPDATE``), each in
one statement and in key order. Deletes go first so that a row moved to a new key (``-U``
old, ``+U`` new) never meets its old self on another unique column.

:func:`apply_deferred` applies an interval *as a commit*: in one transaction of its own
that first inserts the interval's commit marker (``lockgate_commits``), so it happens
exactly once however often it is called, also concurrently (the second caller waits for
the first and finds the marker). The sink defers an interval this way when an earlier
interval of the same subtask is prepared but not committed yet: a prepared transaction
keeps its rows locked, and writing the same keys would wait for a commit that only the
waiting task can make.
"""

from __future__ import annotations

from typing import Any

from ..changelog_compaction import Compacted
from .table import RowWriter, psycopg_module
from .transactions import insert_marker, marker_exists


def apply_changes(conn: Any, rows: RowWriter, changes: Compacted) -> int:
    """Delete the removed keys, then upsert the rows put, on ``conn``'s open transaction.
    Returns the number of keys changed."""
    return rows.delete(conn, changes.deletes) + rows.upsert(conn, changes.upserts)


def apply_deferred(conn: Any, table: str, rows: RowWriter, name: str, changes: Compacted) -> bool:
    """Apply ``changes`` with the commit marker ``name`` in one transaction on ``conn``
    (an autocommit connection). Returns False, changing nothing, when ``name``'s marker is
    there already (applied before)."""
    psycopg = psycopg_module()
    if marker_exists(conn, table, name):
        return False
    try:
        with conn.transaction():
            # the marker first: a concurrent caller blocks here, then fails on its key
            insert_marker(conn, table, name, changes.num_keys)
            apply_changes(conn, rows, changes)
    except psycopg.errors.UniqueViolation as e:
        if marker_exists(conn, table, name):
            return False  # applied meanwhile by another caller (a zombie or the driver)
        raise e
    return True

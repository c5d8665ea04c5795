"""The initial snapshot: tables read in chunks of primary-key ranges, each in its own
MVCC snapshot, whose transaction ids say which later changes it already shows.

Why not the slot's exported snapshot for every chunk (as the issue first suggested)? An
exported snapshot lives only as long as the session that exported it stays idle: a
failure during the snapshot (or a restart on other machines) loses it, and the chunks
still to read could then not be read as of the same point. Instead each chunk is read in
a ``REPEATABLE READ`` transaction that first records ``pg_current_snapshot()``; the
stream later skips exactly the changes of the key's chunk that snapshot already saw
(:class:`~.xids.XidSnapshot.sees`) and emits the rest. A chunk read again after a
failure simply gets a new snapshot; nothing needs the old one. (Flink CDC's incremental
snapshot, after Netflix's DBLog, reaches the same end with low and high LSN watermarks
around each chunk and a replay of the WAL between them; transaction ids make the
boundary exact without reading the WAL twice per chunk.)

One exception needs the slot's own snapshot: a transaction whose commit record precedes
the slot's consistent point is never streamed, so every chunk must see it. A chunk
snapshot taken while such a transaction is still finishing (committed in the WAL, not yet
visible) is refused and the chunk read again (:func:`read_chunk`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ....core.state_records import state_record
from ....errors import ConfigurationError
from .connection import OWNER
from .tables import TableInfo, quote_ident
from .xids import XidSnapshot

#: how many times a chunk is read again when its snapshot misses a transaction that
#: committed before the slot's consistent point (a race of microseconds)
MAX_CHUNK_RETRIES = 100


@state_record("postgres_cdc.chunk_range")
@dataclass(frozen=True)
class ChunkRange:
    """Keys ``lo <= key < hi`` of a table (None: unbounded on that side)."""

    table: str
    lo: int | None
    hi: int | None

    def holds(self, key: int) -> bool:
        return (self.lo is None or key >= self.lo) and (self.hi is None or key < self.hi)


def plan_chunks(conn: Any, table: TableInfo, chunk_size: int) -> list[ChunkRange]:
    """``table`` cut into ranges of about ``chunk_size`` rows by its integer primary key
    (one pass over its key index); a table whose key is not one integer column is one
    chunk. The ranges cover every key, also ones inserted later."""
    key = table.integer_key
    if key is None:
        return [ChunkRange(table.qualified, None, None)]
    column = quote_ident(key.name)
    bounds = [
        int(r[0])
        for r in conn.execute(
            f"SELECT k FROM (SELECT {column} AS k, row_number() OVER (ORDER BY {column}) AS n "
            f"FROM {table.sql_name}) s WHERE n %% %s = 1 ORDER BY k",
            (chunk_size,),
        ).fetchall()
    ][1:]
    edges: list[int | None] = [None, *bounds, None]
    return [ChunkRange(table.qualified, lo, hi) for lo, hi in zip(edges, edges[1:])]


def read_chunk(
    conn: Any, table: TableInfo, chunk: ChunkRange, start: XidSnapshot | None
) -> tuple[XidSnapshot, list[tuple[str | None, ...]]]:
    """The rows of ``chunk`` (each value as its text output) and the snapshot that read
    them. With ``start`` (the slot's exported snapshot, when the source created the
    slot): a snapshot missing a transaction ``start`` sees is refused and the chunk read
    again, so every chunk shows what the stream will never send."""
    columns = ", ".join(quote_ident(c.name) for c in table.columns)
    where = _range_condition(table, chunk)
    query = f"SELECT {columns} FROM {table.sql_name}{where}"
    for _ in range(MAX_CHUNK_RETRIES):
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            snapshot = XidSnapshot.parse(
                conn.execute("SELECT pg_current_snapshot()::text").fetchone()[0]
            )
            if start is not None and any(start.sees_full(x) for x in snapshot.xip):
                continue  # a transaction committed before the slot began is still finishing
            return snapshot, text_rows(conn, query)
        finally:
            conn.execute("COMMIT")
    raise ConfigurationError(
        f"{OWNER}: could not read a chunk of {table.qualified} in a snapshot that shows every "
        f"transaction committed before the slot began ({MAX_CHUNK_RETRIES} tries)"
    )


def text_rows(conn: Any, query: str) -> list[tuple[str | None, ...]]:
    """The rows of ``query`` with every value as its type's text output function writes
    it, as pgoutput sends it (not a ``::text`` cast: that writes booleans as ``true`` and
    trims ``char(n)``), through the connection's libpq handle."""
    from psycopg import pq

    result = conn.pgconn.exec_(query.encode())
    if result.status != pq.ExecStatus.TUPLES_OK:
        message = result.error_message.decode(errors="replace")
        raise ConnectionError(f"{OWNER}: reading a snapshot chunk failed: {message.strip()}")
    width = result.nfields
    return [
        tuple(
            None if (v := result.get_value(i, j)) is None else bytes(v).decode()
            for j in range(width)
        )
        for i in range(result.ntuples)
    ]


def _range_condition(table: TableInfo, chunk: ChunkRange) -> str:
    key = table.integer_key
    if key is None:
        return ""
    column = quote_ident(key.name)
    parts = []
    if chunk.lo is not None:
        parts.append(f"{column} >= {int(chunk.lo)}")
    if chunk.hi is not None:
        parts.append(f"{column} < {int(chunk.hi)}")
    return " WHERE " + " AND ".join(parts) if parts else ""


# -- chunk-done markers -----------------------------------------------------------------
def marker_prefix(slot: str) -> str:
    """The prefix of the logical decoding messages that announce finished chunks."""
    return f"lockgate-cdc:{slot}"


def write_marker(conn: Any, slot: str, run: str, chunk: int, snapshot: XidSnapshot) -> None:
    """Announce in the WAL (a non-transactional ``pg_logical_emit_message``, no table
    written) that chunk ``chunk`` of run ``run`` is read with ``snapshot`` and its rows
    are in a completed checkpoint: the stream reader waits for these."""
    content = json.dumps({"run": run, "chunk": chunk, "snapshot": str(snapshot)})
    conn.execute("SELECT pg_logical_emit_message(false, %s, %s)", (marker_prefix(slot), content))


def parse_marker(content: bytes) -> tuple[str, int, XidSnapshot] | None:
    try:
        data = json.loads(content)
        return str(data["run"]), int(data["chunk"]), XidSnapshot.parse(data["snapshot"])
    except (ValueError, KeyError, TypeError):
        return None


def chunk_of(chunks: Sequence[ChunkRange], key: int) -> int:
    """The index in ``chunks`` (one table's, in key order) of the chunk holding ``key``."""
    import bisect

    los = [c.lo if c.lo is not None else -(1 << 63) - 1 for c in chunks]
    return bisect.bisect_right(los, key) - 1

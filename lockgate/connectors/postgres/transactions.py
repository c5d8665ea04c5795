"""The prepared transactions of :class:`~lockgate.connectors.PostgresSink`: their ids,
their commit markers, and the locks that say which runs are alive (M-X1, M-X2, M-X3).

* **Ids** (:func:`transaction_id`, :func:`parse_transaction_id`):
  ``<prefix>:<run>:<attempt>:<subtask>:<checkpoint or end>``. A prefix may not contain
  ``:``, so the prefix of an id is exactly what comes before its first ``:``: prefixes
  such as ``sales`` and ``sales-eu`` (or ``lockgate`` and ``lockgate-<hash>``) never
  overlap. ``<run>`` is the run id of the job (new for every ``execute``), so two runs
  sharing a prefix never produce, nor recognise, each other's ids.
* **Commit markers** (:func:`ensure_marker_table`, :func:`insert_marker`,
  :func:`marker_exists`): each prepared transaction also inserts its id into the table
  ``lockgate_commits`` (in the sink table's schema, created when missing). The row
  becomes visible exactly when the transaction commits, so a ``COMMIT PREPARED`` that
  finds no transaction can tell "committed before" (the row is there) from "rolled back
  by something else" (it is not: the rows are lost, an error).
* **Run locks** (:func:`hold_run_lock`, :func:`run_is_alive`, :func:`other_live_runs`):
  every writer session of a run holds a shared advisory lock on (prefix, run) for as
  long as it is connected. A run none of whose writers is connected any more can take
  it exclusively: only then may a later run that restored its checkpoint roll back what
  it left prepared.

PostgreSQL limits ids to 199 bytes; :func:`check_prefix` refuses, when the sink is
built, a prefix that could make a longer one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigurationError, NonRestartableError
from .table import psycopg_module, split_table_name

#: separates the parts of an id; never part of a prefix
DELIMITER = ":"
#: PostgreSQL's limit on a prepared transaction's id (``GIDSIZE`` 200, with its NUL)
MAX_ID_BYTES = 199
#: the longest run id, attempt, subtask and checkpoint parts an id may carry
MAX_RUN_BYTES = 32
_MAX_SUFFIX_BYTES = 4 * len(DELIMITER) + MAX_RUN_BYTES + 10 + 10 + 20
#: the longest prefix: any id made from it fits PostgreSQL's limit
MAX_PREFIX_BYTES = MAX_ID_BYTES - _MAX_SUFFIX_BYTES
#: the name of the commit-marker table
MARKER_TABLE = "lockgate_commits"
END = "end"


class TransactionLostError(NonRestartableError, RuntimeError):
    """A prepared transaction to commit is gone and was never committed: something else
    rolled it back, and its rows are lost. Not restartable: no attempt can bring the
    transaction back, so the job fails at once (see
    :class:`~lockgate.errors.NonRestartableError`)."""


def check_prefix(prefix: object) -> None:
    """Refuse a ``transaction_prefix`` that is not a non-empty string, contains the
    delimiter ``:`` or a quote, or is too long for PostgreSQL's id limit."""
    if not isinstance(prefix, str) or not prefix:
        raise ConfigurationError(
            f"PostgresSink transaction_prefix must be a non-empty string, got {prefix!r}"
        )
    bad = [c for c in (DELIMITER, "'", "\\") if c in prefix] + [
        c for c in prefix if not c.isprintable()
    ]
    if bad:
        raise ConfigurationError(
            f"PostgresSink transaction_prefix must be a name without {DELIMITER!r} (it "
            f"separates the parts of a transaction id), quotes, backslashes or unprintable "
            f"characters, got {prefix!r} (contains {bad[0]!r}); use e.g. letters, digits, "
            f"'-' and '_'"
        )
    size = len(prefix.encode("utf-8"))
    if size > MAX_PREFIX_BYTES:
        raise ConfigurationError(
            f"PostgresSink transaction_prefix must be at most {MAX_PREFIX_BYTES} bytes in "
            f"UTF-8, got {size} bytes ({prefix[:20]!r}...): PostgreSQL limits a prepared "
            f"transaction's id to {MAX_ID_BYTES} bytes and the sink appends up to "
            f"{_MAX_SUFFIX_BYTES} "
            f"(run, attempt, subtask, checkpoint); shorten it"
        )


@dataclass(frozen=True)
class TransactionId:
    """The parts of an id made by :func:`transaction_id`."""

    prefix: str
    run: str
    attempt: int
    subtask: int
    checkpoint: int | None  # None: the end of a bounded input


def transaction_id(
    prefix: str, run: str, attempt: int, subtask: int, checkpoint: int | None
) -> str:
    """The id of the transaction a subtask prepares for ``checkpoint`` (None: at the end
    of its bounded input)."""
    if DELIMITER in run or not run or len(run.encode("utf-8")) > MAX_RUN_BYTES:
        raise ConfigurationError(
            f"PostgresSink: the run id {run!r} cannot be part of a transaction id (it must "
            f"be 1 to {MAX_RUN_BYTES} bytes without {DELIMITER!r})"
        )
    last = END if checkpoint is None else str(int(checkpoint))
    gid = DELIMITER.join((prefix, run, str(int(attempt)), str(int(subtask)), last))
    if len(gid.encode("utf-8")) > MAX_ID_BYTES:  # pragma: no cover - check_prefix prevents it
        raise ConfigurationError(
            f"PostgresSink: transaction id {gid!r} is longer than PostgreSQL's "
            f"{MAX_ID_BYTES} bytes; shorten transaction_prefix"
        )
    return gid


def parse_transaction_id(prefix: str, gid: str) -> TransactionId | None:
    """The parts of ``gid`` when it is exactly an id of ``prefix`` (None otherwise: an id
    of another prefix, of another program, or of an older grammar)."""
    head, sep, rest = gid.partition(DELIMITER)
    if head != prefix or not sep:
        return None
    parts = rest.split(DELIMITER)
    if len(parts) != 4:
        return None
    run, attempt, subtask, last = parts
    if not run or not attempt.isdecimal() or not subtask.isdecimal():
        return None
    if last != END and not last.isdecimal():
        return None
    return TransactionId(
        prefix, run, int(attempt), int(subtask), None if last == END else int(last)
    )


# ------------------------------------------------------------------------ commit markers


def marker_table(table: str) -> Any:
    """The commit-marker table beside ``table`` (same schema) as an SQL identifier."""
    sql = psycopg_module().sql
    parts = split_table_name(table)
    return sql.Identifier(*parts[:-1], MARKER_TABLE)


def ensure_marker_table(conn: Any, table: str) -> None:
    """Create the commit-marker table beside ``table`` if it is missing (concurrent callers
    wait for each other). Without autocommit, ``conn``'s transaction is committed."""
    psycopg = psycopg_module()
    name = marker_table(table)
    regclass = name.as_string(conn)
    create = psycopg.sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (gid text PRIMARY KEY, rows bigint NOT NULL, "
        "committed_at timestamptz NOT NULL DEFAULT now())"
    ).format(name)
    try:
        with conn.transaction():
            if conn.execute("SELECT to_regclass(%s)", (regclass,)).fetchone()[0] is None:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_key(MARKER_TABLE),))
                conn.execute(create)
        if not conn.autocommit:
            conn.commit()
    except psycopg.Error as e:
        if not conn.autocommit:
            conn.rollback()
        raise ConfigurationError(
            f"PostgresSink(mode='exactly_once') keeps one row per committed transaction in "
            f"{regclass} and cannot create it: {' '.join(str(e).split())}; create it "
            f"({create.as_string(conn)}) and grant the sink's user INSERT and SELECT on "
            f"it"
        ) from e


def insert_marker(conn: Any, table: str, gid: str, rows: int) -> None:
    """Insert the marker of ``gid`` inside the transaction open on ``conn``."""
    sql = psycopg_module().sql
    conn.execute(
        sql.SQL("INSERT INTO {} (gid, rows) VALUES (%s, %s)").format(marker_table(table)),
        (gid, rows),
    )


def marker_exists(conn: Any, table: str, gid: str) -> bool:
    """Whether the transaction ``gid`` committed (its marker is visible)."""
    sql = psycopg_module().sql
    row = conn.execute(
        sql.SQL("SELECT 1 FROM {} WHERE gid = %s").format(marker_table(table)), (gid,)
    ).fetchone()
    return row is not None


# ---------------------------------------------------------------------------- run locks


def _key(text: str) -> int:
    """A non-negative 31-bit advisory lock key for ``text``."""
    return int.from_bytes(hashlib.sha1(text.encode()).digest()[:4], "big") & 0x7FFFFFFF


def hold_run_lock(conn: Any, prefix: str, run: str) -> None:
    """Take the shared lock of (``prefix``, ``run``) for the session of ``conn`` (held
    until it closes); ends the transaction the statement began when not autocommit."""
    conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", (_key(prefix), _key(run)))
    if not conn.autocommit:
        conn.commit()


def run_is_alive(conn: Any, prefix: str, run: str) -> bool:
    """Whether a session of ``run`` (with ``prefix``) still holds its lock; ``conn`` is an
    autocommit connection of another run."""
    keys = (_key(prefix), _key(run))
    if conn.execute("SELECT pg_try_advisory_lock(%s, %s)", keys).fetchone()[0]:
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", keys)
        return False
    return True


def other_live_runs(conn: Any, prefix: str, run: str) -> int:
    """How many other runs with ``prefix`` hold their lock in this database now."""
    row = conn.execute(
        "SELECT count(DISTINCT objid) FROM pg_locks WHERE locktype = 'advisory' "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND classid = %s::bigint::oid AND objsubid = 2 AND objid <> %s::bigint::oid "
        "AND granted",
        (_key(prefix), _key(run)),
    ).fetchone()
    return int(row[0])

"""PostgresSink: records into a PostgreSQL table, exactly-once with two-phase commit.

Modes:

* ``"exactly_once"`` (default, M-X1, M-X2): each subtask writes the rows of one
  checkpoint interval in one database transaction. On the checkpoint barrier the
  transaction ends with ``PREPARE TRANSACTION`` (durable, invisible to readers,
  surviving a crash of the writer); when the checkpoint completes it is finished
  with ``COMMIT PREPARED``. Rows go in with ``COPY``; every record becomes one
  row (a keyed aggregation's updates form a changelog). Transaction ids are
  ``<prefix>-<run>-<attempt>-<subtask>-<checkpoint>``: a restarted job commits
  those in the checkpoint it restores (committing is idempotent) and rolls back
  every other one it left (begun or prepared after that checkpoint). At the end of
  a bounded input the last transaction is prepared and the task's final checkpoint
  commits it, in the task (FLIP-147). When the job is cancelled or fails for good,
  the driver commits the prepared transactions of the newest completed checkpoint;
  however it ends, the driver rolls back the rest, so none stay in
  ``pg_prepared_xacts``. The server must allow prepared transactions
  (``max_prepared_transactions`` > 0): the job is refused at start otherwise.
* ``"upsert"``: each batch is inserted or updated by ``key`` (a primary key or
  unique index on exactly those columns) in its own transaction. Replays after a
  failure write the same values again, so the table ends as with exactly-once
  (idempotent, at-least-once delivery).
* ``"append"``: each batch is appended with ``COPY`` in its own transaction:
  at-least-once (a replay after a failure appends its rows again).

Records are dicts (or Arrow rows) whose fields are columns of the table; a field
the table has no column for fails the job naming it. The table must exist.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ..runtime.batch import Batch
from ..runtime.context import RuntimeContext
from .base import SinkWriter
from .postgres_table import (
    RowWriter,
    TableShape,
    check_key,
    connect,
    describe,
    psycopg_module,
    redacted,
    split_table_name,
)
from .two_phase_commit import TwoPhaseCommitSink

MODES = ("exactly_once", "upsert", "append")

log = logging.getLogger(__name__)


@dataclass
class PgTransaction:
    """One subtask's rows of one checkpoint interval. ``gid`` is set when it is prepared
    (None: nothing was written, so there is nothing to prepare or commit)."""

    gid: str | None = None
    rows: int = 0


class PostgresSink(TwoPhaseCommitSink[PgTransaction]):
    """Writes records into ``table`` of the PostgreSQL database ``dsn`` (a libpq
    connection string or URI); see the module docstring for the ``mode``s.

    ``key``: column name(s) to upsert on (``"upsert"`` only). Batches are upserted in
    key order, so concurrent subtasks never deadlock on each other's rows.
    ``transaction_prefix``: the start of the prepared transactions' ids; by default
    derived from the job's name and the sink's uid. Two jobs running at the same
    time must not share it (each rolls back what it does not know of the other).
    """

    default_name = "postgres"

    def __init__(self, dsn: str, table: str, mode: str = "exactly_once",
                 key: str | Sequence[str] | None = None, *,
                 transaction_prefix: str | None = None,
                 connect_timeout_s: float = 10.0) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigurationError(
                f"PostgresSink dsn must be a connection string such as "
                f"'postgresql://user@127.0.0.1:5432/db', got {dsn!r}")
        split_table_name(table)
        if mode not in MODES:
            raise ConfigurationError(
                f"PostgresSink mode must be one of {', '.join(MODES)}, got {mode!r}")
        keys = (key,) if isinstance(key, str) else tuple(key or ())
        if not all(isinstance(k, str) and k for k in keys):
            raise ConfigurationError(
                f"PostgresSink key must be a column name or a list of them, got {key!r}")
        if mode == "upsert" and not keys:
            raise ConfigurationError(
                "PostgresSink mode='upsert' needs key=<column or columns> (a primary key or "
                "unique index of the table) to update rows by")
        if mode != "upsert" and keys:
            raise ConfigurationError(
                f"PostgresSink key={key!r} is for mode='upsert'; mode={mode!r} appends each "
                "record as a row. (exactly_once cannot upsert: a prepared transaction keeps "
                "its rows locked until its checkpoint completes, so updating the same key "
                "in the next interval would wait for it.)")
        if transaction_prefix is not None and (
                not isinstance(transaction_prefix, str) or not transaction_prefix
                or len(transaction_prefix) > 100 or "'" in transaction_prefix):
            raise ConfigurationError(
                f"PostgresSink transaction_prefix must be a non-empty string of at most 100 "
                f"characters without quotes, got {transaction_prefix!r}")
        if not isinstance(connect_timeout_s, (int, float)) or connect_timeout_s <= 0:
            raise ConfigurationError(
                f"PostgresSink connect_timeout_s must be > 0, got {connect_timeout_s!r}")
        self.dsn = dsn
        self.table = table
        self.mode = mode
        self.key = keys
        self.transaction_prefix = transaction_prefix
        self.connect_timeout_s = float(connect_timeout_s)
        self._reset()

    def _reset(self) -> None:
        self._conn: Any = None  # the writer's connection (holds the open transaction)
        self._control: Any = None  # autocommit: COMMIT/ROLLBACK PREPARED
        self._rows: RowWriter | None = None
        self._ctx: RuntimeContext | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_conn", "_control", "_rows", "_ctx"):
            state[name] = None
        return state

    # -- checks -----------------------------------------------------------------------
    def check_before_run(self) -> None:
        """On the driver, before the job starts: the table exists (and has a unique key
        on ``key``), and for exactly-once the server allows prepared transactions."""
        with connect(self.dsn, autocommit=True, timeout_s=self.connect_timeout_s,
                     what="PostgresSink") as conn:
            self._check(conn)

    def _check(self, conn: Any) -> TableShape:
        shape = describe(conn, self.table)
        if self.key:
            check_key(shape, self.key)
        if self.mode == "exactly_once":
            limit = int(conn.execute("SHOW max_prepared_transactions").fetchone()[0])
            if limit <= 0:
                raise ConfigurationError(
                    f"PostgresSink(mode='exactly_once') needs prepared transactions, but the "
                    f"server ({redacted(self.dsn)}) has max_prepared_transactions = {limit}; "
                    f"set it above the sink's parallelism (e.g. ALTER SYSTEM SET "
                    f"max_prepared_transactions = 64) and restart PostgreSQL")
        return shape

    # -- lifecycle ---------------------------------------------------------------------
    def open(self, ctx: RuntimeContext) -> None:
        self._ctx = ctx
        where = (f"PostgresSink '{ctx.operator_name}' (subtask {ctx.subtask_index + 1}/"
                 f"{ctx.parallelism})")
        self._conn = connect(self.dsn, autocommit=self.mode != "exactly_once",
                             timeout_s=self.connect_timeout_s, what=where)
        self._rows = RowWriter(self._check(self._conn), self.key, where)

    def create_writer(self, ctx: RuntimeContext) -> SinkWriter:
        if self.mode == "exactly_once":
            return super().create_writer(ctx)
        return _BatchWriter(self, ctx)

    def write_batch(self, batch: Batch) -> int:
        """Write ``batch`` on the writer's connection (the caller owns the transaction)."""
        assert self._rows is not None, "open() first"
        if self.key:
            return self._rows.upsert(self._conn, batch)
        return self._rows.append(self._conn, batch)

    def close(self) -> None:
        """Close the connections; an open (unprepared) transaction is rolled back by the
        server, prepared ones stay for the checkpoint that holds them."""
        for conn in (self._conn, self._control):
            if conn is not None:
                try:
                    conn.close()
                except Exception as e:  # noqa: BLE001 - closing after a failure
                    log.debug("closing a PostgresSink connection failed: %s", e)
        self._reset()

    # -- transactions (exactly_once) ---------------------------------------------------
    def begin_transaction(self) -> PgTransaction:
        # psycopg begins the database transaction with the first statement
        return PgTransaction()

    def write(self, transaction: PgTransaction, batch: Batch) -> None:
        transaction.rows += self.write_batch(batch)

    def pre_commit(self, transaction: PgTransaction) -> None:
        self.pre_commit_at(transaction, None)

    def pre_commit_at(self, transaction: PgTransaction, checkpoint_id: int | None) -> None:
        """``PREPARE TRANSACTION`` under an id naming the job run, attempt, subtask and
        checkpoint (``end`` at the end of a bounded input)."""
        if transaction.rows == 0:
            self._conn.rollback()  # nothing written; end whatever psycopg began
            return
        ctx = self._ctx
        assert ctx is not None
        gid = (f"{self._prefix(ctx)}-{ctx.run_id}-{ctx.attempt_number}-{ctx.subtask_index}-"
               f"{'end' if checkpoint_id is None else checkpoint_id}")
        sql = psycopg_module().sql
        self._conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
        transaction.gid = gid

    def commit(self, transaction: PgTransaction) -> None:
        """``COMMIT PREPARED``; a transaction no longer prepared was committed before."""
        if transaction.gid is not None:
            self._finish_prepared("COMMIT", transaction.gid)

    def recover_and_commit(self, transaction: PgTransaction) -> None:
        self.commit(transaction)

    def abort(self, transaction: PgTransaction) -> None:
        if transaction.gid is not None:
            self._finish_prepared("ROLLBACK", transaction.gid)
        elif self._conn is not None:
            self._conn.rollback()

    def recover_and_abort(self, transaction: PgTransaction) -> None:
        # a transaction open at the checkpoint had no id then; if it was prepared later,
        # abort_lingering finds it
        if transaction.gid is not None:
            self._finish_prepared("ROLLBACK", transaction.gid)

    def abort_lingering(self, keep: list[PgTransaction], ctx: RuntimeContext, *,
                        job_ended: bool = False) -> None:
        """Roll back this sink's prepared transactions that are not in ``keep`` and not
        of the attempt now running: done by subtask 0 after recovery, and by the driver
        when the job has ended (then nothing is running any more)."""
        if self.mode != "exactly_once" or (not job_ended and ctx.subtask_index != 0):
            return
        prefix = self._prefix(ctx)
        spare = None if job_ended else f"{prefix}-{ctx.run_id}-{ctx.attempt_number}-"
        kept = {t.gid for t in keep}
        for gid in self.prepared_ids(prefix):
            if gid in kept or (spare is not None and gid.startswith(spare)):
                continue
            self._finish_prepared("ROLLBACK", gid)

    def prepared_ids(self, prefix: str) -> list[str]:
        """The ids of the prepared transactions in this database starting with
        ``prefix``."""
        conn = self._control_connection()
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "-%"
        rows = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
            "AND gid LIKE %s ORDER BY prepared", (pattern,)).fetchall()
        return [r[0] for r in rows]

    # -- helpers -----------------------------------------------------------------------
    def _prefix(self, ctx: Any) -> str:
        if self.transaction_prefix is not None:
            return self.transaction_prefix
        digest = hashlib.sha1(f"{ctx.job_name}\0{ctx.operator_uid}".encode()).hexdigest()
        return f"lockgate-{digest[:16]}"

    def _control_connection(self) -> Any:
        if self._control is None or self._control.closed:
            self._control = connect(self.dsn, autocommit=True,
                                    timeout_s=self.connect_timeout_s, what="PostgresSink")
        return self._control

    def _finish_prepared(self, verb: str, gid: str) -> None:
        """``COMMIT PREPARED`` / ``ROLLBACK PREPARED``; an id that is no longer prepared
        was finished before (idempotent)."""
        psycopg = psycopg_module()
        sql = psycopg.sql
        try:
            self._control_connection().execute(
                sql.SQL(verb + " PREPARED {}").format(sql.Literal(gid)))
        except psycopg.errors.UndefinedObject:
            pass


class _BatchWriter(SinkWriter):
    """``upsert`` and ``append``: each batch in a transaction of its own."""

    def __init__(self, sink: PostgresSink, ctx: RuntimeContext) -> None:
        self.sink = sink
        sink.open(ctx)

    def write(self, batch: Batch) -> None:
        conn = self.sink._conn
        with conn.transaction():
            self.sink.write_batch(batch)

    def close(self) -> None:
        self.sink.close()

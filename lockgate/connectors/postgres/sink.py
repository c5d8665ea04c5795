"""PostgresSink: records into a PostgreSQL table, exactly-once with two-phase commit.

Modes:

* ``"exactly_once"`` (default, M-X1, M-X2): each subtask writes the rows of one
  checkpoint interval in one database transaction. On the checkpoint barrier the
  transaction ends with ``PREPARE TRANSACTION`` (durable, invisible to readers,
  surviving a crash of the writer); when the checkpoint completes it is finished
  with ``COMMIT PREPARED``. Rows go in with ``COPY``; every record becomes one
  row (a keyed aggregation's updates form a changelog). Transaction ids are
  ``<prefix>:<run>:<attempt>:<subtask>:<checkpoint>`` (see
  :mod:`~lockgate.connectors.postgres.transactions`): a restarted job commits
  those in the checkpoint it restores (committing is idempotent) and rolls back
  every other one it left (begun or prepared after that checkpoint). At the end of
  a bounded input the last transaction is prepared and the task's final checkpoint
  commits it, in the task (FLIP-147). When the job is cancelled or fails for good,
  the driver commits the prepared transactions of the newest completed checkpoint;
  however it ends, the driver rolls back the rest of its run's, so none stay in
  ``pg_prepared_xacts``. (A run whose driver dies leaves its own: a restore from its
  checkpoint commits or rolls them back; a fresh run names them in a warning and
  leaves them.) The server must allow prepared transactions
  (``max_prepared_transactions`` > 0): the job is refused at start otherwise.

  **Whose transactions a job touches.** Only ids that are exactly of the grammar
  above with the sink's own prefix (a prefix cannot contain ``:``, so ``sales``
  never matches ``sales-eu:...``), and of those only: the ids of its own run (the
  run id is new for every ``execute``), the ids named in the checkpoint it
  restores, and the ids left by the run that wrote that checkpoint once none of
  that run's writers is connected any more (each holds an advisory lock while it
  is). Another job's, or another run's of the same job, are never rolled back.
  Restoring an *older* checkpoint of a run rolls back what that run prepared for
  later ones (as in Flink).

  **Two runs with one prefix.** Two jobs with the same name (hence the same default
  prefix), or given the same ``transaction_prefix``, may run at the same time: the
  run id keeps their transactions apart. The second one's subtask 0 logs a warning
  saying so (give each job its own name or prefix to keep ids readable).

  **Commit markers.** Each prepared transaction also inserts a row (its id) into
  ``lockgate_commits`` beside the table (same schema; created when missing, so the
  sink's user needs CREATE there, or create it yourself). ``COMMIT PREPARED`` of an
  id that is no longer prepared is then "already committed" only when that row is
  there; otherwise the transaction was rolled back by something else and the
  commit raises :class:`~lockgate.connectors.postgres.transactions.TransactionLostError`
  (the job fails instead of reporting success without those rows). The table keeps
  one small row per committed transaction; rows older than the oldest checkpoint you
  may restore can be deleted.
* ``"upsert"`` (``key=`` required): applies a changelog (M-X1, M-X2): ``+I``/``+U``
  insert or update the row by ``key`` (``INSERT ... ON CONFLICT (key) DO UPDATE``), ``-D``
  and ``-U`` delete the row with that key (a primary-key change is ``-U`` old, ``+U``
  new); an append-only input is all inserts, so it is upserted. ``key`` must be covered
  by the table's primary key or a unique constraint/index on exactly those columns (not
  partial, not deferrable). Each subtask's changes of one checkpoint interval are
  compacted per key (the last change wins; :mod:`.changelog_compaction`) and written on
  the checkpoint barrier in one transaction that is prepared and committed exactly as in
  ``"exactly_once"`` (same ids, markers, restore and clean-up rules), so every change is
  applied once. Changes of one key must reach one subtask (``key_by`` the key, or
  parallelism 1), or their order is lost. When an earlier interval of the subtask is
  still prepared at the barrier (its checkpoint not completed yet: its rows stay locked),
  the interval is not written into a prepared transaction but kept in the checkpoint and
  applied when its checkpoint completes, in one transaction with its commit marker
  (:mod:`.changes`): still exactly once, never waiting on its own locks.
* ``"append"``: each batch is appended with ``COPY`` in its own transaction:
  at-least-once (a replay after a failure appends its rows again).

Records are dicts (or Arrow rows) whose fields are columns of the table; a field
the table has no column for fails the job naming it. The table must exist.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.batch import Batch
from ...core.state_records import state_record
from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import SinkWriter
from ..changelog_compaction import ChangeBuffer, Compacted
from ..two_phase_commit import TwoPhaseCommitSink
from .changes import apply_changes, apply_deferred
from .table import (
    RowWriter,
    TableShape,
    check_key,
    connect,
    describe,
    psycopg_module,
    redacted,
    split_table_name,
)
from .transactions import (
    TransactionLostError,
    check_prefix,
    ensure_marker_table,
    hold_run_lock,
    insert_marker,
    marker_exists,
    other_live_runs,
    parse_transaction_id,
    run_is_alive,
    transaction_id,
)

MODES = ("exactly_once", "upsert", "append")
#: the modes that write in prepared transactions, committed with checkpoints
TRANSACTIONAL = ("exactly_once", "upsert")

log = logging.getLogger(__name__)


@state_record("postgres.transaction")
@dataclass
class PgTransaction:
    """One subtask's rows of one checkpoint interval. ``gid`` is set when it is prepared
    (None: nothing was written, so there is nothing to prepare or commit). ``run``: the
    run id of the job that began it (a restored job rolls back what that run left once
    it is gone)."""

    gid: str | None = None
    rows: int = 0
    run: str | None = None
    #: the id it was given at pre-commit (its gid when prepared; its commit marker)
    name: str | None = None
    #: mode="upsert": the interval's changes when they wait for the commit to be applied
    #: (an earlier interval was still prepared at the barrier); kept in the checkpoint
    deferred: Compacted | None = field(default=None, repr=False)


class PostgresSink(TwoPhaseCommitSink[PgTransaction]):
    """Writes records into ``table`` of the PostgreSQL database ``dsn`` (a libpq
    connection string or URI); see the module docstring for the ``mode``s.

    ``key``: column name(s) to upsert and delete by (``"upsert"`` only), covered by a
    primary key or unique index of exactly those columns. Rows are written in key
    order, so concurrent subtasks never deadlock on each other's rows.
    ``transaction_prefix``: the start of the prepared transactions' ids (at most
    :data:`~lockgate.connectors.postgres.transactions.MAX_PREFIX_BYTES` bytes, no ``:``);
    by default ``lockgate-<hash of the job's name and the sink's uid>``. Jobs sharing
    a prefix never touch each other's transactions (see the module docstring); a run
    that finds another live run with its prefix logs a warning.
    """

    default_name = "postgres"

    def __init__(
        self,
        dsn: str,
        table: str,
        mode: str = "exactly_once",
        key: str | Sequence[str] | None = None,
        *,
        transaction_prefix: str | None = None,
        connect_timeout_s: float = 10.0,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigurationError(
                f"PostgresSink dsn must be a connection string such as "
                f"'postgresql://user@127.0.0.1:5432/db', got {dsn!r}"
            )
        split_table_name(table)
        if mode not in MODES:
            raise ConfigurationError(
                f"PostgresSink mode must be one of {', '.join(MODES)}, got {mode!r}"
            )
        keys = (key,) if isinstance(key, str) else tuple(key or ())
        if not all(isinstance(k, str) and k for k in keys):
            raise ConfigurationError(
                f"PostgresSink key must be a column name or a list of them, got {key!r}"
            )
        if len(set(keys)) != len(keys):
            raise ConfigurationError(f"PostgresSink key names a column twice: {list(keys)}")
        if mode == "upsert" and not keys:
            raise ConfigurationError(
                "PostgresSink mode='upsert' needs key=<column or columns> (the table's "
                "primary key, or columns with a unique constraint) to insert, update and "
                "delete rows by, e.g. PostgresSink(dsn, table, mode='upsert', key='id')"
            )
        if mode != "upsert" and keys:
            raise ConfigurationError(
                f"PostgresSink key={key!r} is for mode='upsert' (which applies inserts, "
                f"updates and deletes by key, exactly once); mode={mode!r} appends each "
                "record as a row: drop key= or use mode='upsert'"
            )
        if transaction_prefix is not None:
            check_prefix(transaction_prefix)
        if not isinstance(connect_timeout_s, (int, float)) or connect_timeout_s <= 0:
            raise ConfigurationError(
                f"PostgresSink connect_timeout_s must be > 0, got {connect_timeout_s!r}"
            )
        self.dsn = dsn
        self.table = table
        self.mode = mode
        self.key = keys
        self.transaction_prefix = transaction_prefix
        self.connect_timeout_s = float(connect_timeout_s)
        self._reset()

    @property
    def commits_on_checkpoint(self) -> bool:
        """True for ``"exactly_once"`` and ``"upsert"`` (prepared transactions committed
        with checkpoints), False for ``"append"``."""
        return self.mode in TRANSACTIONAL

    @property
    def accepts_changes(self) -> bool:
        """True in ``"upsert"`` mode: updates and deletes are applied by key."""
        return self.mode == "upsert"

    def _reset(self) -> None:
        self._conn: Any = None  # the writer's connection (holds the open transaction)
        self._control: Any = None  # autocommit: COMMIT/ROLLBACK PREPARED
        self._rows: RowWriter | None = None
        self._ctx: RuntimeContext | None = None
        #: mode="upsert": the open interval's changes, written on the barrier
        self._changes: ChangeBuffer | None = None
        #: names of this subtask's pre-committed transactions not committed yet
        self._uncommitted: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_conn", "_control", "_rows", "_ctx", "_changes"):
            state[name] = None
        state["_uncommitted"] = set()
        return state

    # -- checks -----------------------------------------------------------------------
    def check_before_run(self) -> None:
        """On the driver, before the job starts: the table exists (and has a unique key
        on ``key``), and for exactly-once the server allows prepared transactions."""
        with connect(
            self.dsn, autocommit=True, timeout_s=self.connect_timeout_s, what="PostgresSink"
        ) as conn:
            self._check(conn)

    def _check(self, conn: Any) -> TableShape:
        shape = describe(conn, self.table)
        if self.key:
            check_key(shape, self.key)
        if self.mode in TRANSACTIONAL:
            limit = int(conn.execute("SHOW max_prepared_transactions").fetchone()[0])
            if limit <= 0:
                raise ConfigurationError(
                    f"PostgresSink(mode={self.mode!r}) needs prepared transactions, but the "
                    f"server ({redacted(self.dsn)}) has max_prepared_transactions = {limit}; "
                    f"set it above the sink's parallelism (e.g. ALTER SYSTEM SET "
                    f"max_prepared_transactions = 64) and restart PostgreSQL"
                )
        return shape

    # -- lifecycle ---------------------------------------------------------------------
    def open(self, ctx: RuntimeContext) -> None:
        self._ctx = ctx
        where = (
            f"PostgresSink '{ctx.operator_name}' (subtask {ctx.subtask_index + 1}/"
            f"{ctx.parallelism})"
        )
        self._conn = connect(
            self.dsn,
            autocommit=self.mode not in TRANSACTIONAL,
            timeout_s=self.connect_timeout_s,
            what=where,
        )
        if self.mode in TRANSACTIONAL:
            self._open_transactional(ctx)
        self._rows = RowWriter(self._check(self._conn), self.key, where)
        if self.mode in TRANSACTIONAL:
            self._conn.commit()  # end the transaction the checks began
        if self.mode == "upsert":
            self._changes = ChangeBuffer(self.key, where)

    def _open_transactional(self, ctx: RuntimeContext) -> None:
        """Hold this run's lock on the writer's session, make sure the commit-marker
        table exists, and (subtask 0) warn when another run shares the prefix."""
        prefix = self._prefix(ctx)
        hold_run_lock(self._conn, prefix, ctx.run_id)
        ensure_marker_table(self._conn, self.table)
        if ctx.subtask_index == 0 and other_live_runs(self._conn, prefix, ctx.run_id):
            log.warning(
                "PostgresSink '%s' of job %r: another run is writing with the same "
                "transaction prefix %r right now (a second job with this name, or one given "
                "this transaction_prefix). This run keeps to its own transactions (their ids "
                "carry its run id %r), so neither disturbs the other; give each job its own "
                "name or transaction_prefix to tell their transactions apart at a glance",
                ctx.operator_name,
                ctx.job_name,
                prefix,
                ctx.run_id,
            )
        self._conn.commit()

    def create_writer(self, ctx: RuntimeContext) -> SinkWriter:
        if self.mode in TRANSACTIONAL:
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
        if self._changes is not None:
            self._changes.clear()
        return PgTransaction(run=self._ctx.run_id if self._ctx is not None else None)

    def write(self, transaction: PgTransaction, batch: Batch) -> None:
        if self._changes is not None:  # upsert: collected, written on the barrier
            self._changes.add(batch)
            return
        transaction.rows += self.write_batch(batch)

    def pre_commit(self, transaction: PgTransaction) -> None:
        self.pre_commit_at(transaction, None)

    def pre_commit_at(self, transaction: PgTransaction, checkpoint_id: int | None) -> None:
        """``PREPARE TRANSACTION`` under an id naming the job run, attempt, subtask and
        checkpoint (``end`` at the end of a bounded input), with its commit marker.

        ``"upsert"``: the interval's changes, compacted per key, are written first; or,
        when an earlier transaction of this subtask is still prepared (its rows locked),
        kept in the transaction to be applied by its commit (see the module docstring)."""
        changes = None
        if self._changes is not None and len(self._changes):
            changes = self._changes.compact()
            self._changes.clear()
            transaction.rows = changes.num_keys
        if transaction.rows == 0:
            self._conn.rollback()  # nothing written; end whatever psycopg began
            return
        ctx = self._ctx
        assert ctx is not None
        gid = transaction_id(
            self._prefix(ctx), ctx.run_id, ctx.attempt_number, ctx.subtask_index, checkpoint_id
        )
        transaction.name = gid
        if changes is not None:
            if self._uncommitted:
                self._conn.rollback()
                transaction.deferred = changes
                self._uncommitted.add(gid)
                log.debug(
                    "%s: %d changes wait for commit (transactions %s are still prepared)",
                    self._rows.where if self._rows else "PostgresSink",
                    changes.num_keys,
                    sorted(self._uncommitted - {gid}),
                )
                return
            assert self._rows is not None
            apply_changes(self._conn, self._rows, changes)
        insert_marker(self._conn, self.table, gid, transaction.rows)
        sql = psycopg_module().sql
        self._conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
        transaction.gid = gid
        self._uncommitted.add(gid)

    def commit(self, transaction: PgTransaction) -> None:
        """``COMMIT PREPARED``. A transaction no longer prepared was committed before when
        its commit marker is there; otherwise something else rolled it back and this
        raises :class:`TransactionLostError` (its rows are lost). Deferred changes
        (``"upsert"``) are applied with their marker, once."""
        if transaction.deferred is not None and transaction.name is not None:
            applied = apply_deferred(
                self._control_connection(),
                self.table,
                self._row_writer(),
                transaction.name,
                transaction.deferred,
            )
            if not applied:
                log.info("PostgresSink: %s was applied before; skipped", transaction.name)
            self._uncommitted.discard(transaction.name)
            return
        if transaction.gid is None:
            return
        if self._finish_prepared("COMMIT", transaction.gid):
            self._uncommitted.discard(transaction.gid)
            return
        self._uncommitted.discard(transaction.gid)
        if not marker_exists(self._control_connection(), self.table, transaction.gid):
            raise TransactionLostError(
                f"PostgresSink: prepared transaction {transaction.gid!r} ({transaction.rows} "
                f"rows for {self.table!r}) is gone and was never committed (no row for it "
                f"in lockgate_commits): something other than this job rolled it back (a "
                f"ROLLBACK PREPARED by hand, or a program that matched its id), so its rows "
                f"are lost and this job's output is incomplete. Find what rolls back "
                f"prepared transactions of prefix {transaction.gid.split(':', 1)[0]!r} and "
                f"rerun the job from a checkpoint before the loss or from the start"
            )

    def recover_and_commit(self, transaction: PgTransaction) -> None:
        self.commit(transaction)

    def abort(self, transaction: PgTransaction) -> None:
        if transaction.name is not None:
            self._uncommitted.discard(transaction.name)
        if transaction.gid is not None:
            self._finish_prepared("ROLLBACK", transaction.gid)
        elif self._conn is not None:
            self._conn.rollback()

    def recover_and_abort(self, transaction: PgTransaction) -> None:
        # a transaction open at the checkpoint had no id then; if it was prepared later,
        # abort_lingering finds it
        if transaction.gid is not None:
            self._finish_prepared("ROLLBACK", transaction.gid)

    def abort_lingering(
        self, keep: list[PgTransaction], ctx: RuntimeContext, *, job_ended: bool = False
    ) -> None:
        """Roll back the prepared transactions this run may prove its own that are not in
        ``keep``: done by subtask 0 after recovery, and by the driver when the job has
        ended (then nothing of this run is running any more).

        Its own: ids exactly of the sink's grammar and prefix, and of this run (except,
        after recovery, those of the attempt now running), or, after recovery, of a run
        that began a transaction of the restored checkpoint (``keep``) once no writer of
        that run is connected any more. Ids of other jobs and other runs are never
        touched."""
        if self.mode not in TRANSACTIONAL or (not job_ended and ctx.subtask_index != 0):
            return
        prefix = self._prefix(ctx)
        kept = {t.gid for t in keep if t.gid is not None}
        others: dict[str, list[str]] = {}  # run -> its ids, of runs other than this one
        for gid in self.prepared_ids(prefix):
            parsed = parse_transaction_id(prefix, gid)
            if parsed is None or gid in kept:
                continue  # not of this sink's grammar and prefix, or committed by a restore
            if parsed.run != ctx.run_id:
                others.setdefault(parsed.run, []).append(gid)
            elif job_ended or parsed.attempt != ctx.attempt_number:
                self._finish_prepared("ROLLBACK", gid)
        if job_ended or not others:
            return
        restored = self._runs_of(keep, prefix)
        control = self._control_connection()
        for run, gids in others.items():
            if run_is_alive(control, prefix, run):
                if run in restored:
                    log.warning(
                        "PostgresSink '%s' of job %r: run %r, whose checkpoint this run "
                        "restored, is still running; its %d prepared transactions are left "
                        "to it",
                        ctx.operator_name,
                        ctx.job_name,
                        run,
                        len(gids),
                    )
            elif run in restored:
                for gid in gids:
                    self._finish_prepared("ROLLBACK", gid)
            else:
                log.warning(
                    "PostgresSink '%s' of job %r: %d prepared transactions of run %r with "
                    "this sink's prefix (%s) are held by no running job: that run ended "
                    "without settling them (its driver died?). They are not this run's and "
                    "stay prepared (holding locks on the table): restore that run's newest "
                    "checkpoint to commit them, or roll them back by hand (ROLLBACK PREPARED "
                    "'<id>') if their rows are not wanted",
                    ctx.operator_name,
                    ctx.job_name,
                    len(gids),
                    run,
                    ", ".join(gids[:3]) + (", ..." if len(gids) > 3 else ""),
                )

    @staticmethod
    def _runs_of(transactions: list[PgTransaction], prefix: str) -> set[str]:
        """The runs that began ``transactions`` (those of a restored checkpoint)."""
        runs: set[str] = set()
        for t in transactions:
            parsed = parse_transaction_id(prefix, t.gid) if t.gid else None
            run = parsed.run if parsed is not None else getattr(t, "run", None)
            if run:
                runs.add(run)
        return runs

    def prepared_ids(self, prefix: str) -> list[str]:
        """The ids of the prepared transactions in this database starting with
        ``prefix``."""
        conn = self._control_connection()
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ":%"
        rows = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
            "AND gid LIKE %s ORDER BY prepared",
            (pattern,),
        ).fetchall()
        return [r[0] for r in rows]

    # -- helpers -----------------------------------------------------------------------
    def _prefix(self, ctx: Any) -> str:
        if self.transaction_prefix is not None:
            return self.transaction_prefix
        digest = hashlib.sha1(f"{ctx.job_name}\0{ctx.operator_uid}".encode()).hexdigest()
        return f"lockgate-{digest[:16]}"

    def _row_writer(self) -> RowWriter:
        """The writer's :class:`RowWriter`; on the driver (never opened) one made from the
        table as it is now."""
        if self._rows is None:
            shape = describe(self._control_connection(), self.table)
            self._rows = RowWriter(shape, self.key, f"PostgresSink ({self.table})")
        return self._rows

    def _control_connection(self) -> Any:
        if self._control is None or self._control.closed:
            self._control = connect(
                self.dsn, autocommit=True, timeout_s=self.connect_timeout_s, what="PostgresSink"
            )
        return self._control

    def _finish_prepared(self, verb: str, gid: str) -> bool:
        """``COMMIT PREPARED`` / ``ROLLBACK PREPARED``; False when ``gid`` is no longer
        prepared (finished before, by whatever)."""
        psycopg = psycopg_module()
        sql = psycopg.sql
        try:
            self._control_connection().execute(
                sql.SQL(verb + " PREPARED {}").format(sql.Literal(gid))
            )
        except psycopg.errors.UndefinedObject:
            return False
        return True


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

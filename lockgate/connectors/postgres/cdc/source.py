"""PostgresCdcSource: the changes of PostgreSQL tables as a changelog, over logical
replication with the built-in ``pgoutput`` plugin; see ``docs/postgres_cdc.md``."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ....errors import ConfigurationError
from ....runtime.context import RuntimeContext
from ...base import Source, SourceReader, check_bool, check_int, check_positive
from ..table import redacted
from .connection import OWNER, connect
from .pgoutput import parse_lsn
from .reader import CdcReader
from .slot import (
    SLOT_NAME,
    check_slot,
    check_wal_level,
    create_slot,
    ensure_publication,
    slot_info,
)
from .snapshot import ChunkRange, plan_chunks
from .splits import ChunkSplit, Plan, StreamSplit
from .tables import (
    TableInfo,
    check_metadata_names,
    check_replica_identity,
    describe_tables,
    parse_table_name,
)

SNAPSHOT_MODES = ("initial", "never")
log = logging.getLogger(__name__)


class PostgresCdcSource(Source):
    """The inserts, updates and deletes of ``tables`` in the database ``dsn``, read from
    the logical replication slot ``slot`` through the publication ``publication``, as
    one changelog stream (Arrow batches with row kinds; ``docs/postgres_cdc.md``).

    Each batch holds the rows of one table: its columns (typed, see
    :mod:`~lockgate.connectors.postgres.cdc.types`) and the metadata columns
    ``<prefix>table`` (``schema.table``), ``<prefix>lsn`` (the commit's LSN; null for
    snapshot rows) and ``<prefix>commit_time`` (the commit's time, UTC; for snapshot
    rows the time the run planned its snapshot) - the event time to assign with
    ``WatermarkStrategy...with_timestamp_assigner("_commit_time")``.

    Kinds: an insert is ``+I``; an update is ``-U`` (old row) then ``+U`` (new row)
    when the old row is known (``REPLICA IDENTITY FULL``, or a changed key: then the
    ``-U`` holds the old key only), else ``+U`` alone (apply it as an upsert by key); a
    delete is ``-D`` with the key columns (others null) or, with ``REPLICA IDENTITY
    FULL``, the whole old row. ``snapshot="initial"``: every row of the tables first as
    ``+I`` (read in chunks of ``chunk_size`` rows by integer primary key, in parallel),
    then the changes after each chunk's snapshot, exactly once across the switch;
    ``"never"``: the changes from the slot's position on.

    Guarantees (M-X1): the checkpointed position is the LSN after the last transaction
    emitted whole (a transaction is never split across checkpoints); the slot's
    ``confirmed_flush_lsn`` is moved to it only when its checkpoint completes, so a
    restore re-reads from there and skips exactly what was emitted. One subtask reads
    the stream; the others only read snapshot chunks.

    ``bounded=True``: reads up to the server's flushed WAL position at the job's start,
    then ends. A bounded job that finishes drops the slot after its final checkpoint
    (nothing is left holding WAL on the server) unless ``drop_slot_on_finish=False``
    (a later job then goes on from it); a cancelled, stopped or failed job always keeps
    it, since its checkpoints or savepoint restore from it. A missing publication is created ``FOR TABLE`` the tables,
    a missing slot created; neither is ever altered.
    """

    default_name = "postgres cdc"

    def __init__(
        self,
        dsn: str,
        tables: str | Sequence[str],
        *,
        slot: str,
        publication: str,
        snapshot: str = "initial",
        bounded: bool = False,
        chunk_size: int = 10_000,
        batch_size: int = 10_000,
        drop_slot_on_finish: bool = True,
        metadata_prefix: str = "_",
        poll_interval_ms: float = 50,
        status_interval_s: float = 1.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigurationError(
                f"{OWNER} dsn must be a connection string such as "
                f"'postgresql://user@127.0.0.1:5432/db', got {dsn!r}"
            )
        names = [tables] if isinstance(tables, str) else list(tables)
        if not names:
            raise ConfigurationError(f"{OWNER} tables must name at least one table")
        parsed = [parse_table_name(t) for t in names]
        if len(set(parsed)) != len(parsed):
            raise ConfigurationError(f"{OWNER} tables must be distinct, got {names!r}")
        if not isinstance(slot, str) or not SLOT_NAME.fullmatch(slot):
            raise ConfigurationError(
                f"{OWNER} slot must be a replication slot name of lower-case letters, digits "
                f"and underscores (at most 63), got {slot!r}"
            )
        if not isinstance(publication, str) or not publication or "\x00" in publication:
            raise ConfigurationError(
                f"{OWNER} publication must be a publication name (created FOR TABLE the "
                f"tables when missing), got {publication!r}"
            )
        if snapshot not in SNAPSHOT_MODES:
            raise ConfigurationError(
                f"{OWNER} snapshot must be 'initial' (the tables' rows first, then their "
                f"changes) or 'never' (changes from the slot's position only), got {snapshot!r}"
            )
        if not isinstance(metadata_prefix, str) or not metadata_prefix:
            raise ConfigurationError(
                f"{OWNER} metadata_prefix must be a non-empty str, got {metadata_prefix!r}"
            )
        self.dsn = dsn
        self.tables = tuple(parsed)
        self.slot = slot
        self.publication = publication
        self.snapshot = snapshot
        self.bounded = check_bool(OWNER, "bounded", bounded)
        self.drop_slot_on_finish = check_bool(OWNER, "drop_slot_on_finish", drop_slot_on_finish)
        self.chunk_size = check_int(OWNER, "chunk_size", chunk_size, 1, "rows per snapshot chunk")
        self.batch_size = check_int(OWNER, "batch_size", batch_size, 1, "changes per poll")
        self.metadata_prefix = metadata_prefix
        self.poll_interval_ms = check_positive(
            OWNER, "poll_interval_ms", poll_interval_ms, "wait when nothing is new"
        )
        self.status_interval_s = check_positive(
            OWNER, "status_interval_s", status_interval_s, "seconds between status updates"
        )
        self.connect_timeout_s = check_positive(
            OWNER, "connect_timeout_s", connect_timeout_s, "seconds to connect"
        )
        self._plan: Plan | None = None

    # -- metadata ----------------------------------------------------------------------
    @property
    def metadata_columns(self) -> tuple[str, str, str]:
        p = self.metadata_prefix
        return f"{p}table", f"{p}lsn", f"{p}commit_time"

    # -- driver ------------------------------------------------------------------------
    def check_before_run(self) -> None:
        """The server has ``wal_level = logical``; the tables exist with a replica
        identity and no column named like the metadata; the publication and slot, when
        they exist, fit."""
        with connect(self.dsn, timeout_s=self.connect_timeout_s, fatal=True) as conn:
            self._check(conn)

    def _check(self, conn: Any) -> list[TableInfo]:
        check_wal_level(conn, self.dsn)
        tables = describe_tables(conn, self.tables)
        for t in tables:
            check_replica_identity(t)
            check_metadata_names(t, self.metadata_columns)
        info = slot_info(conn, self.slot)
        if info is not None:
            check_slot(info, self.slot, self._database(conn))
        return tables

    @staticmethod
    def _database(conn: Any) -> str:
        return str(conn.execute("SELECT current_database()").fetchone()[0])

    @property
    def needs_checkpoints(self) -> str | None:
        """Why a job with this source needs checkpointing (refused without it when the
        job is built), or None."""
        if self.snapshot == "initial":
            return (
                "after its initial snapshot it streams the changes only once a checkpoint "
                "holding every snapshot chunk completed (docs/postgres_cdc.md)"
            )
        return None

    def prepare_run(self) -> bool:
        """Once per run: the publication and slot made to exist, the tables described,
        the snapshot's chunks planned and (bounded) the end fixed, so every subtask and
        every attempt of the run works from the same plan."""
        with connect(self.dsn, timeout_s=self.connect_timeout_s, fatal=True) as conn:
            tables = self._check(conn)
            if ensure_publication(conn, self.publication, tables):
                log.info("%s: created publication %r", OWNER, self.publication)
            info = slot_info(conn, self.slot)
            start_snapshot = None
            if info is None:
                start_lsn, exported = create_slot(self.dsn, self.slot, self.connect_timeout_s)
                start_snapshot = str(exported)
                log.info("%s: created replication slot %r at %s", OWNER, self.slot, start_lsn)
            else:
                check_slot(info, self.slot, self._database(conn))
                start_lsn = info.confirmed_flush_lsn or 0
            chunks: list[ChunkRange] = []
            if self.snapshot == "initial":
                for t in tables:
                    chunks.extend(plan_chunks(conn, t, self.chunk_size))
            end = None
            if self.bounded:
                end = parse_lsn(
                    conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0]
                )
        self._plan = Plan(
            start_lsn, start_snapshot, end, tuple(tables), tuple(chunks), int(time.time() * 1e6)
        )
        return True

    @property
    def plan(self) -> Plan:
        if self._plan is None:
            self.prepare_run()
        assert self._plan is not None
        return self._plan

    def create_splits(self, parallelism: int) -> list[Any]:
        """The stream split first (subtask 0 reads it), then the snapshot's chunks."""
        plan = self.plan
        stream = StreamSplit(
            plan.start_lsn,
            plan.end_lsn,
            {t.qualified: t.columns for t in plan.tables},
            plan.chunks,
            None if plan.chunks else {},
        )
        return [stream, *(ChunkSplit(i, c) for i, c in enumerate(plan.chunks))]

    def restore_splits(self, splits: list[Any], ctx: RuntimeContext) -> list[Any]:
        """This subtask's share of every old subtask's splits (the reader restores every
        split): the stream split on subtask 0, which also learns the snapshots of the
        chunks read in the checkpoint; chunk ``i`` on subtask ``(i + 1) % parallelism``
        (as a fresh start assigns them). Bounded, a stream split without an end gets this
        run's (M-R3)."""
        mine: list[Any] = []
        done = {s.index: s.snapshot for s in splits if isinstance(s, ChunkSplit) and s.snapshot}
        for split in splits:
            if isinstance(split, StreamSplit) and ctx.subtask_index == 0:
                split = replace(split, known={**split.known, **done})
                if self.bounded and split.end is None:
                    split.end = self.plan.end_lsn
                mine.append(split)
            elif isinstance(split, ChunkSplit) and (split.index + 1) % ctx.parallelism == (
                ctx.subtask_index
            ):
                mine.append(replace(split))
        return mine

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        return CdcReader(self, ctx)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def describe_dsn(self) -> str:
        return redacted(self.dsn)

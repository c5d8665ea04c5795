"""The reader of :class:`~.source.PostgresCdcSource`: snapshot chunks, then the slot's
change stream (on subtask 0), as changelog batches."""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from ....core.batch import with_kinds
from ....core.row_kind import RowKind
from ....errors import ConfigurationError
from ....runtime.context import RuntimeContext
from ...base import InputStatus, ReaderOutput, SourceReader
from . import change_columns as cc
from .connection import OWNER, ReplicationStream, connect
from .pgoutput import (
    UNCHANGED,
    Begin,
    Commit,
    Delete,
    Insert,
    Keepalive,
    Message,
    Relation,
    Truncate,
    Update,
    Value,
    decode,
    decode_frame,
    format_lsn,
)
from .slot import drop_slot, slot_info
from .snapshot import marker_prefix, parse_marker, read_chunk, write_marker
from .splits import ChunkSplit, ReaderSettings, StreamSplit
from .tables import TableInfo
from .types import Column, ValueConversionError, batch_of, batch_of_text
from .xids import XidSnapshot

log = logging.getLogger(__name__)
#: frames read from the replication connection per poll, at most
FRAMES_PER_POLL = 20_000
#: the wait before the next poll while a transaction's messages are still arriving
OPEN_TRANSACTION_POLL_MS = 2.0
#: fewer changes in a row than this are taken one by one from the compiled scan (numpy's
#: cost per call would exceed what making their columns together saves)
MIN_DECODED_RUN = 64
#: frames taken from the connection at a time (decoded together: see change_columns)
FRAMES_PER_READ = 4_000

Row = tuple[str | None, ...]


class SchemaChangedError(ConfigurationError):
    """A table's columns changed while it was replicated (a Relation message that
    differs from the columns the job started with)."""


class LostSlotError(ConfigurationError):
    """The slot a restore needs is gone or was moved past the checkpoint's position."""


@dataclass
class _Rows:
    """Consecutive changes of one table, decoded one message at a time."""

    table: str
    kinds: list[int]
    rows: list[Row]

    def __len__(self) -> int:
        return len(self.kinds)

    def texts(self, columns: int) -> list[pa.Array]:
        return [pa.array([r[i] for r in self.rows], pa.string()) for i in range(columns)]


@dataclass
class _Texts:
    """Consecutive changes of one table, decoded together (change_columns): their
    kinds and one string array per column."""

    table: str
    kinds: np.ndarray
    columns: list[pa.Array]

    def __len__(self) -> int:
        return len(self.kinds)

    def texts(self, columns: int) -> list[pa.Array]:
        return self.columns


@dataclass
class _Txn:
    begin: Begin
    skip: bool
    #: its changes in commit order, as runs of one table
    parts: list[_Rows | _Texts] = field(default_factory=list)
    count: int = 0


class _TableFilter:
    """The snapshot chunks of one table: which chunk a key falls in."""

    def __init__(self, table: TableInfo, chunks: list[tuple[int, Any]]) -> None:
        key = table.integer_key
        self.key_index = table.column_index(key.name) if key is not None else None
        ordered = sorted(chunks, key=lambda c: -(1 << 64) if c[1].lo is None else c[1].lo)
        self.los = [-(1 << 64) if c.lo is None else c.lo for _, c in ordered]
        self.indexes = [i for i, _ in ordered]

    def chunk(self, row: Row) -> int:
        if self.key_index is None or len(self.indexes) == 1:
            return self.indexes[0]
        value = row[self.key_index]
        if value is None:
            return self.indexes[0]
        return self.indexes[bisect.bisect_right(self.los, int(value)) - 1]


class CdcReader(SourceReader):
    """Reads its snapshot chunks (one per poll, emitted whole), then, on the subtask
    with the stream split, the slot's changes, whole transactions per poll."""

    restores_every_split = True
    #: decode a read's changes together when numba is there (change_columns); False:
    #: one message at a time (pgoutput.decode), the reference the fast path matches
    fast_decoding = True

    def __init__(self, source: ReaderSettings, ctx: RuntimeContext) -> None:
        self.source = source
        self.ctx = ctx
        self.plan = source.plan
        self.tables = {t.qualified: t for t in self.plan.tables}
        self.run_tag = f"{ctx.run_id}:{ctx.attempt_number}"
        self.chunks: list[ChunkSplit] = []
        self.stream: StreamSplit | None = None
        self._conn: Any = None
        self._repl: ReplicationStream | None = None
        #: chunks read in this attempt whose marker is not written yet
        self._unmarked: dict[int, str] = {}
        self._relations: dict[int, Relation] = {}
        self._txn: _Txn | None = None
        self._filters: dict[str, _TableFilter] = {}
        self._snapshots: dict[int, XidSnapshot] = {}
        self._filter_below: XidSnapshot | None = None
        self._started: set[str] = set()
        self._announced = False
        self._wait_since = time.monotonic()

    # -- splits ------------------------------------------------------------------------
    def add_splits(self, splits: list[Any]) -> None:
        for split in splits:
            if isinstance(split, ChunkSplit):
                self.chunks.append(replace(split))
            elif isinstance(split, StreamSplit):
                if self.fast_decoding:
                    # the kernels load (about 1.5 s of numba) while the snapshot is read:
                    # the stream's first read does not wait for them
                    cc.warm_up()
                self.stream = replace(split, known=dict(split.known))
                self._check_slot(self.stream)
                if self.stream.snapshots is not None:
                    self._use_snapshots(self.stream.snapshots)

    def _sql(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.source.dsn, timeout_s=self.source.connect_timeout_s)
        return self._conn

    def _check_slot(self, split: StreamSplit) -> None:
        """The slot still holds what the split needs: it exists and has not confirmed
        past the split's position (else changes in between are gone)."""
        info = slot_info(self._sql(), self.source.slot)
        if info is None:
            raise LostSlotError(
                f"{OWNER}: replication slot {self.source.slot!r} does not exist; the changes "
                f"after LSN {format_lsn(split.position)} (where the checkpoint resumes) are "
                "lost. Start a fresh job (fresh=True or without restoring), which creates the "
                "slot and takes a new snapshot"
            )
        if info.confirmed_flush_lsn is not None and info.confirmed_flush_lsn > split.position:
            raise LostSlotError(
                f"{OWNER}: replication slot {self.source.slot!r} has confirmed LSN "
                f"{format_lsn(info.confirmed_flush_lsn)}, past the checkpoint's position "
                f"{format_lsn(split.position)}: the changes in between are gone (was the slot "
                "dropped and created again, or read by another consumer?). Restore a newer "
                "checkpoint, or start a fresh job with a new snapshot"
            )

    # -- polling -----------------------------------------------------------------------
    def poll(self, output: ReaderOutput) -> InputStatus:
        for split in self.chunks:
            if split.snapshot is None:
                self._read_chunk(split, output)
                return InputStatus.MORE_AVAILABLE
        stream = self.stream
        if stream is not None and not stream.finished:
            if stream.snapshots is None:
                return self._wait_for_chunks(stream)
            return self._read_stream(stream, output)
        if self.source.bounded and not self._unmarked:
            return InputStatus.END_OF_INPUT
        return InputStatus.NOTHING_AVAILABLE

    def wait_hint_ms(self) -> float | None:
        if self._txn is not None:  # the rest of a transaction is on its way
            return min(self.source.poll_interval_ms, OPEN_TRANSACTION_POLL_MS)
        return self.source.poll_interval_ms

    # -- snapshot chunks ---------------------------------------------------------------
    def _read_chunk(self, split: ChunkSplit, output: ReaderOutput) -> None:
        table = self.tables[split.chunk.table]
        start = XidSnapshot.parse(self.plan.start_snapshot) if self.plan.start_snapshot else None
        snapshot, rows = read_chunk(self._sql(), table, split.chunk, start)
        if split.split_id not in self._started:
            output.split_started(split.split_id)
            self._started.add(split.split_id)
        if rows:
            n = len(rows)
            extra = self._metadata(table.qualified, [None] * n, [self.plan.snapshot_time_us] * n)
            output.emit_from_split(split.split_id, self._batch(table, rows, extra, None))
        split.snapshot = str(snapshot)
        self._unmarked[split.index] = split.snapshot
        output.split_finished(split.split_id)

    def _wait_for_chunks(self, stream: StreamSplit) -> InputStatus:
        """Before the stream emits anything, every chunk must be read and in a completed
        checkpoint (its rows then reached every downstream operator before any change of
        the stream can): the readers of the chunks announce this in the WAL (markers,
        :func:`~.snapshot.write_marker`); this reads the slot's stream only for them."""
        needed = set(range(len(stream.chunks))) - set(stream.known)
        if needed:
            repl = self._replication(stream)
            prefix = marker_prefix(self.source.slot)
            for data in repl.read_raw(FRAMES_PER_POLL):
                if len(data) > 25 and data[0] == 0x77 and data[25] != 0x4D:
                    continue  # XLogData, not a logical message ('M')
                frame = decode_frame(data)
                if isinstance(frame, Keepalive):
                    if frame.reply_requested:
                        repl.send_status()
                    continue
                if frame.payload[:1] != b"M":
                    continue
                msg = decode(frame.payload)
                if isinstance(msg, Message) and msg.prefix == prefix:
                    marker = parse_marker(msg.content)
                    if marker is not None and marker[0] == self.run_tag:
                        stream.known[marker[1]] = str(marker[2])
            repl.keep_alive(self.source.status_interval_s)
            needed = set(range(len(stream.chunks))) - set(stream.known)
            if needed:
                if time.monotonic() - self._wait_since > 120:
                    self._wait_since = time.monotonic()
                    log.warning(
                        "%s: the stream still waits for %d snapshot chunks to be read and "
                        "checkpointed (is checkpointing enabled? snapshot='initial' needs it)",
                        OWNER,
                        len(needed),
                    )
                return InputStatus.NOTHING_AVAILABLE
        # every chunk is known: read the stream again from its start, filtering
        self._close_replication()
        stream.snapshots = dict(stream.known)
        stream.known = {}
        self._use_snapshots(stream.snapshots)
        return InputStatus.MORE_AVAILABLE

    def _use_snapshots(self, snapshots: dict[int, str]) -> None:
        assert self.stream is not None
        self._snapshots = {i: XidSnapshot.parse(s) for i, s in snapshots.items()}
        by_table: dict[str, list[tuple[int, Any]]] = {}
        for i, chunk in enumerate(self.stream.chunks):
            by_table.setdefault(chunk.table, []).append((i, chunk))
        self._filters = {
            name: _TableFilter(self.tables[name], chunks) for name, chunks in by_table.items()
        }
        # transactions at or above the newest snapshot's xmax are seen by none
        self._filter_below = max(self._snapshots.values(), key=lambda s: s.xmax, default=None)

    # -- the stream --------------------------------------------------------------------
    def _replication(self, stream: StreamSplit) -> ReplicationStream:
        if self._repl is None:
            info = slot_info(self._sql(), self.source.slot)
            confirmed = (info.confirmed_flush_lsn if info else None) or 0
            self._repl = ReplicationStream(
                self.source.dsn,
                self.source.slot,
                self.source.publication,
                stream.position,
                confirmed,
                timeout_s=self.source.connect_timeout_s,
            )
            self._relations.clear()
            self._txn = None
        return self._repl

    def _close_replication(self) -> None:
        repl, self._repl = self._repl, None
        if repl is not None:
            repl.close()
        self._txn = None

    def _read_stream(self, stream: StreamSplit, output: ReaderOutput) -> InputStatus:
        if not self._announced:
            output.split_started(stream.split_id)
            self._announced = True
        repl = self._replication(stream)
        done: list[_Txn] = []
        full = False
        # every frame read is handled (none dropped); the poll stops between reads once
        # enough changes are complete
        for _ in range(max(1, FRAMES_PER_POLL // FRAMES_PER_READ)):
            frames = repl.read_raw(FRAMES_PER_READ)
            full = len(frames) == FRAMES_PER_READ
            if self._take(stream, frames, done):
                break  # the bounded stream's end
            if frames and sum(t.count for t in done) < self.source.batch_size:
                continue
            break
        repl.keep_alive(self.source.status_interval_s)
        if done:
            self._emit(stream, done, output)
        if stream.end is not None and stream.position >= stream.end and self._txn is None:
            stream.finished = True
            output.split_finished(stream.split_id)
            self._close_replication()
            return InputStatus.MORE_AVAILABLE
        # the poll stopped at its limit of frames, not at the end of what arrived: more
        # are there now (the rest of a large transaction)
        return InputStatus.MORE_AVAILABLE if done or full else InputStatus.NOTHING_AVAILABLE

    def _take(self, stream: StreamSplit, frames: list[Any], done: list[_Txn]) -> bool:
        """Handles ``frames`` in order (transactions they complete go to ``done``);
        True when the bounded stream's end was reached (the frames after it are not
        needed). The changes between other messages are decoded together
        (:mod:`.change_columns`) when possible, else one by one."""
        if not frames:
            return False
        if not self.fast_decoding or not cc.available():
            return any(self._frame(stream, data, done) for data in frames)
        scan = cc.scan(frames)
        ftype = scan.ftype
        others = np.flatnonzero((ftype == cc.CONTROL) | (ftype == cc.REFERENCE)).tolist()
        start = 0
        for i in others:
            if i > start:
                self._changes(scan, start, i)
            if self._frame(stream, frames[i], done):
                return True
            start = i + 1
        if start < len(frames):
            self._changes(scan, start, len(frames))
        return False

    def _frame(self, stream: StreamSplit, data: Any, done: list[_Txn]) -> bool:
        """One frame, decoded alone; True at the bounded stream's end."""
        if len(data) >= cc.XLOGDATA_HEADER and data[0] == 0x77:  # XLogData: its message
            msg = decode(memoryview(data)[cc.XLOGDATA_HEADER :])
        else:
            frame = decode_frame(data)  # a keepalive (or the error naming the frame)
            assert isinstance(frame, Keepalive)
            if self._txn is None and frame.wal_end > stream.position:
                stream.position = frame.wal_end  # every commit before it was sent
            if frame.reply_requested:
                assert self._repl is not None
                self._repl.send_status()
            return False
        if stream.end is not None and isinstance(msg, Begin) and msg.final_lsn >= stream.end:
            # committed after the end: every transaction up to it was read
            stream.position = max(stream.position, stream.end)
            return True
        txn = self._handle(stream, msg)
        if txn is not None:
            done.append(txn)
        return False

    def _changes(self, scan: cc.FrameScan, start: int, end: int) -> None:
        """The Insert/Update/Delete frames ``start:end`` of a scan (nothing else between
        them), as :meth:`_change` takes them one by one: the same rows, kinds and order."""
        txn = self._txn
        if txn is None or txn.skip:
            return
        newest = self._filter_below
        # a transaction a chunk's snapshot may already show: each row is checked (_add)
        filtered = bool(self._snapshots) and (
            newest is not None and newest.full_xid(txn.begin.xid) < newest.xmax
        )
        parts = None
        if not filtered and end - start >= MIN_DECODED_RUN:
            parts = self._decoded(scan, start, end)
        if parts is not None:
            for part in parts:
                txn.parts.append(part)
                txn.count += len(part)
        elif not self._one_by_one(txn, scan, start, end):
            for i in range(start, end):
                msg = decode(scan.frames[i][cc.XLOGDATA_HEADER :])
                assert isinstance(msg, (Insert, Update, Delete)), msg  # the scan saw to it
                self._change(txn, msg)

    def _one_by_one(self, txn: _Txn, scan: cc.FrameScan, start: int, end: int) -> bool:
        """The changes of frames ``start:end`` taken one by one from the scan (each row
        through :meth:`_add`, which skips what a chunk's snapshot shows), as
        :meth:`_change` takes them; False (nothing taken) when they need the reference
        path: a tuple whose width is not its table's, a value that is not UTF-8."""
        try:
            changes = cc.rows(scan, start, end)
        except UnicodeDecodeError:
            return False
        tables: list[tuple[str, int] | None] = []
        for _, relid, old, new in changes:
            relation = self._relations.get(relid)
            if relation is None or relation.qualified not in self.tables:
                tables.append(None)
                continue
            width = len(self.tables[relation.qualified].columns)
            if (old is not None and len(old) != width) or (new is not None and len(new) != width):
                return False
            tables.append((relation.qualified, width))
        xid = txn.begin.xid
        for (kind, _, old, new), table in zip(changes, tables):
            if table is None:
                continue
            name = table[0]
            if kind == cc.INSERT:
                self._add(txn, name, RowKind.INSERT, new, xid)
            elif kind == cc.UPDATE:
                if old is not None:
                    self._add(txn, name, RowKind.UPDATE_BEFORE, old, xid)
                self._add(txn, name, RowKind.UPDATE_AFTER, new, xid)
            else:
                self._add(txn, name, RowKind.DELETE, old, xid)
        return True

    def _decoded(self, scan: cc.FrameScan, start: int, end: int) -> list[_Texts] | None:
        """The rows of frames ``start:end`` as runs of one table, or None when they need
        the message-by-message path (a tuple whose width is not its table's, a value
        that is not UTF-8)."""
        ftype = scan.ftype[start:end]
        relid = scan.relid[start:end]
        old_base = scan.old_base[start:end]
        new_base = scan.new_base[start:end]
        # the table of each frame: an index into names, -1 for tables not read
        names: list[str] = []
        code = np.full(end - start, -1, dtype=np.int64)
        for rel in np.unique(relid).tolist():
            relation = self._relations.get(rel)
            if relation is None or relation.qualified not in self.tables:
                continue
            at = relid == rel
            width = len(self.tables[relation.qualified].columns)
            olds = scan.old_n[start:end][at][old_base[at] >= 0]
            news = scan.new_n[start:end][at][new_base[at] >= 0]
            if (olds != width).any() or (news != width).any():
                return None
            code[at] = len(names)
            names.append(relation.qualified)
        # rows: Insert: +I new; Update: -U old (when sent), +U new; Delete: -D old
        before = (ftype == cc.UPDATE) & (old_base >= 0)
        counts = 1 + before.astype(np.int64)
        first = np.cumsum(counts) - counts
        total = int(counts.sum())
        kinds = np.empty(total, dtype=np.int8)
        bases = np.empty(total, dtype=np.int64)
        kinds[first] = np.where(
            ftype == cc.INSERT,
            int(RowKind.INSERT),
            np.where(
                ftype == cc.DELETE,
                int(RowKind.DELETE),
                np.where(before, int(RowKind.UPDATE_BEFORE), int(RowKind.UPDATE_AFTER)),
            ),
        )
        bases[first] = np.where((ftype == cc.DELETE) | before, old_base, new_base)
        second = first[before] + 1
        kinds[second] = int(RowKind.UPDATE_AFTER)
        bases[second] = new_base[before]
        codes = np.repeat(code, counts)
        cuts = [0, *(np.flatnonzero(codes[1:] != codes[:-1]) + 1).tolist(), total]
        parts: list[_Texts] = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            c = int(codes[a])
            if c < 0:
                continue
            table = names[c]
            texts = cc.text_columns(scan, bases[a:b], len(self.tables[table].columns))
            if texts is None:
                return None
            parts.append(_Texts(table, kinds[a:b], texts))
        return parts

    def _handle(self, stream: StreamSplit, msg: Any) -> _Txn | None:
        """Take in one message; a transaction it completes with changes to emit."""
        if isinstance(msg, Begin):
            self._txn = _Txn(msg, skip=msg.final_lsn < stream.position)
        elif isinstance(msg, Commit):
            txn, self._txn = self._txn, None
            if txn is None:
                raise ConnectionError(f"{OWNER}: a Commit without a Begin in the stream")
            if not txn.skip:
                stream.position = max(stream.position, msg.end_lsn)
                return txn if txn.count else None
        elif isinstance(msg, Relation):
            self._relation(stream, msg)
        elif isinstance(msg, (Insert, Update, Delete, Truncate)) and (
            self._txn is not None and not self._txn.skip
        ):
            self._change(self._txn, msg)
        return None

    def _relation(self, stream: StreamSplit, rel: Relation) -> None:
        expected = stream.schemas.get(rel.qualified)
        if expected is None:
            return  # a table of the publication the source was not asked for
        got = tuple(Column(c.name, c.type_oid, c.type_mod, c.key) for c in rel.columns)
        if len(got) != len(expected) or not all(a.same_shape(b) for a, b in zip(got, expected)):
            raise SchemaChangedError(
                f"{OWNER}: the columns of {rel.qualified} changed while it was replicated: "
                f"the job started with {[(c.name, c.type_oid) for c in expected]}, the WAL now "
                f"has {[(c.name, c.type_oid) for c in got]} (at LSN "
                f"{format_lsn(stream.position)}). The source does not follow schema changes: "
                "start a fresh job (a new slot and snapshot) for the new schema"
            )
        self._relations[rel.relid] = rel

    def _change(self, txn: _Txn, msg: Insert | Update | Delete | Truncate) -> None:
        if isinstance(msg, Truncate):
            names = [self._relations[r].qualified for r in msg.relids if r in self._relations]
            raise ConfigurationError(
                f"{OWNER}: TRUNCATE of {names} (transaction {txn.begin.xid}) cannot be "
                "replicated as row changes; remove 'truncate' from the publication's "
                "publish list to ignore truncates, or start a fresh job after one"
            )
        rel = self._relations.get(msg.relid)
        if rel is None:
            return  # not one of the source's tables
        table = rel.qualified
        if table not in self.tables:
            return
        xid = txn.begin.xid
        if isinstance(msg, Insert):
            self._add(txn, table, RowKind.INSERT, _plain(msg.new), xid)
        elif isinstance(msg, Update):
            new = self._filled(table, msg.new, msg.old if not msg.old_is_key_only else None)
            if msg.old is not None:
                self._add(txn, table, RowKind.UPDATE_BEFORE, _plain(msg.old), xid)
            self._add(txn, table, RowKind.UPDATE_AFTER, new, xid)
        else:
            self._add(txn, table, RowKind.DELETE, _plain(msg.old), xid)

    def _filled(self, table: str, new: tuple[Value, ...], old: tuple[Value, ...] | None) -> Row:
        if UNCHANGED not in new:
            return new  # type: ignore[return-value]
        if old is not None:
            return tuple(o if n is UNCHANGED else n for n, o in zip(new, old))  # type: ignore[misc]
        columns = [c.name for c, v in zip(self.tables[table].columns, new) if v is UNCHANGED]
        raise ConfigurationError(
            f"{OWNER}: an update of {table} left TOASTed column(s) {columns} unchanged and "
            "PostgreSQL did not send their values; the source cannot emit the new row. Run "
            f"ALTER TABLE {self.tables[table].sql_name} REPLICA IDENTITY FULL (the old row, "
            "with them, is then sent) and start a fresh job"
        )

    def _add(self, txn: _Txn, table: str, kind: RowKind, row: Row, xid: int) -> None:
        snapshots = self._snapshots
        if snapshots:
            newest = self._filter_below
            if newest is not None and newest.full_xid(xid) < newest.xmax:
                chunk = self._filters[table].chunk(row)
                if snapshots[chunk].sees(xid):
                    return  # the chunk's rows already show this change
        last = txn.parts[-1] if txn.parts else None
        if not isinstance(last, _Rows) or last.table != table:
            last = _Rows(table, [], [])
            txn.parts.append(last)
        last.kinds.append(int(kind))
        last.rows.append(row)
        txn.count += 1

    def _emit(self, stream: StreamSplit, txns: list[_Txn], output: ReaderOutput) -> None:
        """The changes of whole transactions, in commit order, as batches of consecutive
        changes of one table (one batch for many small transactions)."""
        parts = [(p, t.begin) for t in txns for p in t.parts]
        start = 0
        while start < len(parts):
            name = parts[start][0].table
            end = start
            while end < len(parts) and parts[end][0].table == name:
                end += 1
            group = parts[start:end]
            table = self.tables[name]
            width = len(table.columns)
            sizes = [len(p) for p, _ in group]
            columns = self._columns(group, width)
            kinds = np.concatenate([np.asarray(p.kinds, dtype=np.int8) for p, _ in group])
            extra = self._metadata(
                name,
                np.repeat(np.array([b.final_lsn for _, b in group], dtype=np.int64), sizes),
                np.repeat(np.array([b.commit_time_us for _, b in group], dtype=np.int64), sizes),
            )
            try:
                batch = batch_of_text(table.columns, columns, extra)
            except ValueConversionError as e:
                raise ConfigurationError(f"{OWNER}: table {table.qualified}: {e}") from e
            output.emit_from_split(stream.split_id, with_kinds(batch, kinds))
            start = end

    @staticmethod
    def _columns(group: list[tuple[_Rows | _Texts, Begin]], width: int) -> list[pa.Array]:
        """One string array per column of the parts' rows, in order (the rows decoded
        one by one are put together first: one array per run of them, not per part)."""
        pieces: list[list[pa.Array]] = []
        rows: list[Row] = []
        for part, _ in group:
            if isinstance(part, _Rows):
                rows.extend(part.rows)
                continue
            if rows:
                pieces.append(_Rows("", [], rows).texts(width))
                rows = []
            pieces.append(part.texts(width))
        if rows:
            pieces.append(_Rows("", [], rows).texts(width))
        if len(pieces) == 1:
            return pieces[0]
        return [pa.concat_arrays([p[i] for p in pieces]) for i in range(width)]

    def _metadata(
        self, table: str, lsns: list[int | None] | np.ndarray, times_us: list[int] | np.ndarray
    ) -> list[tuple[pa.Field, pa.Array]]:
        name, lsn, commit_time = self.source.metadata_columns
        n = len(lsns)
        return [
            (pa.field(name, pa.string()), pa.repeat(pa.scalar(table, pa.string()), n)),
            (pa.field(lsn, pa.int64()), pa.array(lsns, pa.int64())),
            (
                pa.field(commit_time, pa.timestamp("us", tz="UTC")),
                pa.array(times_us, pa.timestamp("us", tz="UTC")),
            ),
        ]

    def _batch(
        self,
        table: TableInfo,
        rows: list[Row],
        extra: list[tuple[pa.Field, pa.Array]],
        kinds: np.ndarray | None,
    ) -> pa.RecordBatch:
        try:
            batch = batch_of(table.columns, rows, extra)
        except ValueConversionError as e:
            raise ConfigurationError(f"{OWNER}: table {table.qualified}: {e}") from e
        return with_kinds(batch, kinds) if kinds is not None else batch

    # -- checkpoints -------------------------------------------------------------------
    def snapshot_positions(self) -> list[Any]:
        out: list[Any] = [replace(c) for c in self.chunks]
        if self.stream is not None:
            out.insert(0, replace(self.stream, known=dict(self.stream.known)))
        return out

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[Any]) -> None:
        """The chunks read in this checkpoint are announced in the WAL (their rows are
        now past every downstream operator), and the slot confirms the stream's
        checkpointed position: the server keeps the WAL from there, frees the rest."""
        for split in positions:
            if isinstance(split, ChunkSplit) and split.index in self._unmarked:
                snapshot = self._unmarked.pop(split.index)
                write_marker(
                    self._sql(),
                    self.source.slot,
                    self.run_tag,
                    split.index,
                    XidSnapshot.parse(snapshot),
                )
            elif isinstance(split, StreamSplit) and split.snapshots is not None:
                self._confirm(split.position)
                if split.finished and self.source.drop_slot_on_finish:
                    self._close_replication()
                    drop_slot(self._sql(), self.source.slot)
                    log.info("%s: dropped replication slot %r", OWNER, self.source.slot)

    def _confirm(self, lsn: int) -> None:
        if self._repl is not None:
            self._repl.confirm(lsn)
            return
        info = slot_info(self._sql(), self.source.slot)
        if info is None or info.confirmed_flush_lsn is None or info.confirmed_flush_lsn >= lsn:
            return
        if info.active_pid is None:
            self._sql().execute(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                (self.source.slot, format_lsn(lsn)),
            )

    def close(self) -> None:
        self._close_replication()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _plain(values: tuple[Value, ...]) -> Row:
    """An old row's values (unchanged TOASTed values cannot occur in it) as text/None."""
    return tuple(None if v is UNCHANGED else v for v in values)  # type: ignore[misc]

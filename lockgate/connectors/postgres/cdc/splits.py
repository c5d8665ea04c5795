"""What the PostgreSQL change-data-capture source and its reader share: the splits
(state records ``postgres_cdc.stream_split`` and ``postgres_cdc.chunk_split``), the
run's :class:`Plan`, and :class:`ReaderSettings`, what a reader reads of its source."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ....core.state_records import state_record
from .snapshot import ChunkRange
from .tables import TableInfo
from .types import Column

STREAM_SPLIT = "wal"


@state_record("postgres_cdc.stream_split")
@dataclass
class StreamSplit:
    """The slot's change stream (one ordered stream: one subtask reads it).

    ``position``: the LSN up to which every transaction was emitted (the end of the last
    emitted commit, or a keepalive's WAL end after it): a restore restarts replication
    there and skips any transaction committed before it (M-X1). ``end``: bounded, the
    server's flushed WAL position at the job's start (inclusive). ``schemas``: the
    columns of each table as the source expects them (a Relation message that differs
    fails the job). ``chunks``: every chunk of the initial snapshot (empty with
    ``snapshot="never"``); ``snapshots``: each chunk's snapshot once all are read and
    checkpointed (None until then: the stream waits, emitting nothing);
    ``known``: snapshots learnt from a restored checkpoint while waiting."""

    position: int
    end: int | None
    schemas: dict[str, tuple[Column, ...]]
    chunks: tuple[ChunkRange, ...] = ()
    snapshots: dict[int, str] | None = None
    known: dict[int, str] = field(default_factory=dict)
    finished: bool = False
    split_id: str = STREAM_SPLIT


@state_record("postgres_cdc.chunk_split")
@dataclass
class ChunkSplit:
    """Chunk ``index`` of the initial snapshot; ``snapshot`` (its ``xmin:xmax:xip``) is
    set in the same poll that emits its rows, so a checkpoint holds a chunk either
    unread (read again from scratch after a restore) or read whole (never again)."""

    index: int
    chunk: ChunkRange
    snapshot: str | None = None

    @property
    def split_id(self) -> str:
        return f"chunk-{self.index}"


@dataclass(frozen=True)
class Plan:
    """What every subtask of every attempt of a run must agree on, fixed once per run on
    the driver (:meth:`PostgresCdcSource.prepare_run`)."""

    start_lsn: int
    #: the slot's exported snapshot when this run created the slot (None otherwise)
    start_snapshot: str | None
    end_lsn: int | None
    tables: tuple[TableInfo, ...]
    chunks: tuple[ChunkRange, ...]
    #: event time of snapshot rows: when the run planned its snapshot (Unix us)
    snapshot_time_us: int


class ReaderSettings(Protocol):
    """What :class:`~.reader.CdcReader` reads of its
    :class:`~.source.PostgresCdcSource`."""

    dsn: str
    slot: str
    publication: str
    bounded: bool
    drop_slot_on_finish: bool
    batch_size: int
    poll_interval_ms: float
    status_interval_s: float
    connect_timeout_s: float

    @property
    def metadata_columns(self) -> tuple[str, str, str]: ...

    @property
    def plan(self) -> Plan: ...

"""A decoder of pgoutput's messages, protocol version 1, and of the replication
protocol's CopyData frames around them.

Protocol 1 is enough: the source never asks for in-progress transactions to be streamed
(``streaming`` off), so the server sends each transaction whole, at its commit, in commit
order: ``Begin``, its ``Relation``/``Type`` descriptions and changes, ``Commit``. Logical
decoding messages (``pg_logical_emit_message``) come when ``messages`` is on.

Reference: PostgreSQL's "Logical Replication Message Formats" and "Streaming Replication
Protocol" (XLogData ``w``, Primary keepalive ``k``, Standby status update ``r``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

#: microseconds between the Unix epoch and PostgreSQL's (2000-01-01)
PG_EPOCH_US = 946_684_800_000_000


class ProtocolError(ValueError):
    """Bytes that are not a pgoutput (or replication protocol) message."""


def format_lsn(lsn: int) -> str:
    """``0/16B3748`` from an LSN as an int."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """An LSN as an int from ``0/16B3748``."""
    high, _, low = text.partition("/")
    if not _ or not high or not low:
        raise ValueError(f"not an LSN: {text!r} (expected e.g. '0/16B3748')")
    return (int(high, 16) << 32) | int(low, 16)


def to_unix_us(pg_us: int) -> int:
    """A PostgreSQL timestamp (us since 2000-01-01) as us since the Unix epoch."""
    return pg_us + PG_EPOCH_US


# -- messages --------------------------------------------------------------------------
@dataclass(frozen=True)
class Begin:
    final_lsn: int  #: the LSN of the transaction's commit record
    commit_time_us: int  #: Unix epoch microseconds
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int  #: the end of the commit record: where reading resumes after it
    commit_time_us: int


@dataclass(frozen=True)
class Origin:
    lsn: int
    name: str


@dataclass(frozen=True)
class RelationColumn:
    name: str
    type_oid: int
    type_mod: int
    key: bool


@dataclass(frozen=True)
class Relation:
    relid: int
    namespace: str
    name: str
    replica_identity: str  #: 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[RelationColumn, ...]

    @property
    def qualified(self) -> str:
        return f"{self.namespace}.{self.name}"


@dataclass(frozen=True)
class TypeInfo:
    type_oid: int
    namespace: str
    name: str


#: one column's value in a tuple: text, None (NULL) or :data:`UNCHANGED` (a TOASTed value
#: the update did not change, not sent)
class _Unchanged:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = _Unchanged()
Value = str | None | _Unchanged


@dataclass(frozen=True)
class Insert:
    relid: int
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Update:
    relid: int
    new: tuple[Value, ...]
    #: the old row: its key columns (``'K'``, others None) or all of it (``'O'``, replica
    #: identity full); None when the server sent none (the key did not change)
    old: tuple[Value, ...] | None = None
    old_is_key_only: bool = False


@dataclass(frozen=True)
class Delete:
    relid: int
    old: tuple[Value, ...]
    old_is_key_only: bool = True


@dataclass(frozen=True)
class Truncate:
    relids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True)
class Message:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


PgOutputMessage = (
    Begin | Commit | Origin | Relation | TypeInfo | Insert | Update | Delete | Truncate | Message
)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = bytes(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ProtocolError(
                f"message cut short: needs {end} bytes, has {len(self.data)}: {self.data[:40]!r}"
            )
        out = self.data[self.pos : end]
        self.pos = end
        return out

    def int8(self) -> int:
        return self.take(1)[0]

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def uint32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self.take(8))[0])

    def uint64(self) -> int:
        return int(struct.unpack(">Q", self.take(8))[0])

    def string(self) -> str:
        end = self.data.find(b"\x00", self.pos)
        if end < 0:
            raise ProtocolError(f"unterminated string in {self.data[:40]!r}")
        out = self.data[self.pos : end].decode("utf-8")
        self.pos = end + 1
        return out

    def tuple_data(self) -> tuple[Value, ...]:
        values: list[Value] = []
        for _ in range(self.int16()):
            kind = self.take(1)
            if kind == b"t":
                values.append(self.take(self.int32()).decode("utf-8"))
            elif kind == b"n":
                values.append(None)
            elif kind == b"u":
                values.append(UNCHANGED)
            elif kind == b"b":
                raise ProtocolError("binary tuple values were not asked for (binary off)")
            else:
                raise ProtocolError(f"unknown tuple value kind {kind!r}")
        return tuple(values)


def _begin(r: _Reader) -> Begin:
    return Begin(r.uint64(), to_unix_us(r.int64()), r.uint32())


def _commit(r: _Reader) -> Commit:
    r.int8()  # flags, unused
    return Commit(r.uint64(), r.uint64(), to_unix_us(r.int64()))


def _insert(r: _Reader) -> Insert:
    relid = r.uint32()
    if r.take(1) != b"N":
        raise ProtocolError("Insert without a new tuple")
    return Insert(relid, r.tuple_data())


def _update(r: _Reader) -> Update:
    relid = r.uint32()
    kind = r.take(1)
    old = None
    key_only = False
    if kind in (b"K", b"O"):
        key_only = kind == b"K"
        old = r.tuple_data()
        kind = r.take(1)
    if kind != b"N":
        raise ProtocolError(f"Update without a new tuple (got {kind!r})")
    return Update(relid, r.tuple_data(), old, key_only)


def _delete(r: _Reader) -> Delete:
    relid = r.uint32()
    kind = r.take(1)
    if kind not in (b"K", b"O"):
        raise ProtocolError(f"Delete without an old tuple (got {kind!r})")
    return Delete(relid, r.tuple_data(), kind == b"K")


def _relation(r: _Reader) -> Relation:
    relid = r.uint32()
    namespace, name = r.string(), r.string()
    identity = chr(r.int8())
    columns = []
    for _ in range(r.int16()):
        flags = r.int8()
        columns.append(RelationColumn(r.string(), r.uint32(), r.int32(), bool(flags & 1)))
    return Relation(relid, namespace or "pg_catalog", name, identity, tuple(columns))


def _truncate(r: _Reader) -> Truncate:
    count = r.int32()
    options = r.int8()
    return Truncate(tuple(r.uint32() for _ in range(count)), bool(options & 1), bool(options & 2))


def _message(r: _Reader) -> Message:
    flags = r.int8()
    lsn = r.uint64()
    prefix = r.string()
    return Message(bool(flags & 1), lsn, prefix, r.take(r.int32()))


_DECODERS: dict[bytes, Callable[[_Reader], PgOutputMessage]] = {
    b"B": _begin,
    b"C": _commit,
    b"I": _insert,
    b"U": _update,
    b"D": _delete,
    b"R": _relation,
    b"Y": lambda r: TypeInfo(r.uint32(), r.string(), r.string()),
    b"O": lambda r: Origin(r.uint64(), r.string()),
    b"T": _truncate,
    b"M": _message,
}


_BEGIN = struct.Struct(">Qq I")  # final LSN, commit time, xid
_COMMIT = struct.Struct(">xQQq")  # (flags), commit LSN, end LSN, commit time


def decode(payload: bytes | memoryview) -> PgOutputMessage:
    """One pgoutput message (the payload of an XLogData frame)."""
    size = len(payload)
    if size >= 21 and payload[0] == 0x42:  # 'B', read at once (one per transaction)
        final, time_us, xid = _BEGIN.unpack_from(payload, 1)
        return Begin(final, to_unix_us(time_us), xid)
    if size >= 26 and payload[0] == 0x43:  # 'C'
        commit, end, time_us = _COMMIT.unpack_from(payload, 1)
        return Commit(commit, end, to_unix_us(time_us))
    r = _Reader(payload)
    tag = r.take(1)
    decoder = _DECODERS.get(tag)
    if decoder is None:
        raise ProtocolError(
            f"unknown pgoutput message {tag!r} (protocol 1 without streaming was asked for)"
        )
    return decoder(r)


# -- the replication protocol's frames ------------------------------------------------
@dataclass(frozen=True)
class XLogData:
    wal_start: int
    wal_end: int
    payload: bytes = field(repr=False)


@dataclass(frozen=True)
class Keepalive:
    wal_end: int
    reply_requested: bool


_XLOGDATA = struct.Struct(">QQq")  # WAL start, WAL end, the server's clock
_KEEPALIVE = struct.Struct(">QqB")  # WAL end, the server's clock, reply requested


def decode_frame(data: bytes | memoryview) -> XLogData | Keepalive:
    """One CopyData frame of a logical replication stream (its payload copied once)."""
    size = len(data)
    if size >= 25 and data[0] == 0x77:  # 'w'
        start, end, _ = _XLOGDATA.unpack_from(data, 1)
        return XLogData(start, end, bytes(data[25:]))
    if size >= 18 and data[0] == 0x6B:  # 'k'
        end, _, reply = _KEEPALIVE.unpack_from(data, 1)
        return Keepalive(end, bool(reply))
    r = _Reader(data)  # cut short or unknown: the error says which
    tag = r.take(1)
    if tag == b"w":
        r.take(24)
    elif tag == b"k":
        r.take(17)
    raise ProtocolError(f"unknown replication frame {tag!r}")


def status_update(lsn: int, now_unix_us: int, reply: bool = False) -> bytes:
    """A standby status update saying that everything up to ``lsn`` is written, flushed
    and applied: the server moves the slot's ``confirmed_flush_lsn`` to it."""
    return b"r" + struct.pack(">QQQqB", lsn, lsn, lsn, now_unix_us - PG_EPOCH_US, 1 if reply else 0)

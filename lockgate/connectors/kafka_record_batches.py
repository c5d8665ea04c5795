"""Kafka record batches (message format v2) decoded a fetch at a time, without a Python
object per record: the records of one partition come out as numpy columns (offsets,
timestamps, where each key and value sits in the fetched bytes).

A fetch response holds, per partition, a run of record batches. Each batch has a
61-byte header (base offset, length, attributes, timestamps, producer id, record count)
and its records, each a chain of varints::

    length, attributes (1 byte), timestamp delta, offset delta,
    key length, key, value length, value, header count, headers

The batch headers are read one by one in Python (a producer's batch holds thousands of
records). The records of every batch are then located in one compiled pass
(:func:`lockgate.connectors.kafka_framing.frame`, the only per-record step), and their
offsets and timestamps computed at once with numpy.

``read_committed`` (KIP-98): control batches (transaction markers) are never records;
a transactional batch of a producer whose transaction the response lists as aborted
(from its first offset until its abort marker) is skipped, as Kafka's own consumer does.

Compression: uncompressed and gzip batches are decoded here; any other codec raises
:class:`UnsupportedBatch`, on which the caller reads through librdkafka instead.
Anything that does not parse raises :class:`CorruptBatch`.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: batch header: base offset (8), batch length (4) ... record count; 61 bytes in all
HEADER_BYTES = 61
_HEAD = struct.Struct(">qiibIhiqqqhii")
#: attributes: compression codec bits, timestamp type bit, transactional and control bits
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_GZIP = 1
#: gaps between two values up to this long are blanked a byte position at a time
_SHORT_GAP = 24
#: confluent-kafka's timestamp kinds: none, create time, log append time
TIMESTAMP_NONE, TIMESTAMP_CREATE, TIMESTAMP_LOG_APPEND = 0, 1, 2


class CorruptBatch(ValueError):
    """Fetched bytes that are not valid record batches."""


class UnsupportedBatch(ValueError):
    """A record batch this decoder does not read (an older message format, or a
    compression codec other than gzip)."""


@dataclass
class PartitionRecords:
    """One partition's records of one fetch, in offset order.

    ``buffer`` holds the bytes; record ``i``'s value is
    ``buffer[value_starts[i] : value_starts[i] + value_lengths[i]]`` (length -1: no
    value, a tombstone), its key likewise. ``next_offset`` is where the next fetch
    starts: past every batch read, control batches and aborted ones included."""

    topic: str
    partition: int
    buffer: bytes
    offsets: np.ndarray
    timestamps: np.ndarray
    timestamp_kinds: np.ndarray
    key_starts: np.ndarray
    key_lengths: np.ndarray
    value_starts: np.ndarray
    value_lengths: np.ndarray
    next_offset: int
    _array: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.offsets)

    def array(self) -> np.ndarray:
        if self._array is None:
            self._array = np.frombuffer(self.buffer, dtype=np.uint8)
        return self._array

    def values(self) -> list[bytes | None]:
        """Each record's value (None for a tombstone)."""
        buf = self.buffer
        return [
            None if n < 0 else buf[s : s + n]
            for s, n in zip(self.value_starts.tolist(), self.value_lengths.tolist())
        ]

    def keys(self) -> list[bytes | None]:
        """Each record's key (None when it has none)."""
        buf = self.buffer
        return [
            None if n < 0 else buf[s : s + n]
            for s, n in zip(self.key_starts.tolist(), self.key_lengths.tolist())
        ]

    def json_object_lines(self) -> bytes | None:
        """Every value on a line of its own, as one bytes (what a newline-delimited JSON
        reader takes), when each value starts with ``{``, ends with ``}`` and holds no
        newline; else None. The bytes between two values (the next record's framing)
        are blanked to spaces, not cut out, so the lines are built without copying
        each value: line ``i`` is whitespace then value ``i``."""
        lengths = self.value_lengths
        n = len(lengths)
        if n == 0 or bool((lengths < 1).any()):
            return None
        starts = self.value_starts
        stops = starts + lengths
        arr = self.array()
        if not (bool((arr[starts] == 0x7B).all()) and bool((arr[stops - 1] == 0x7D).all())):
            return None
        low = int(starts[0])
        work = arr[low : int(stops[-1])].copy()
        gap_starts = stops[:-1] - low
        gap_lengths = starts[1:] - stops[:-1]
        # short gaps (a record's framing) a byte position at a time for all of them,
        # in order of length so that the gaps longer than j are a tail of that order;
        # long ones (a batch header between two batches, long keys) one by one
        short = gap_lengths <= _SHORT_GAP
        if bool(short.all()):
            short_starts, short_lengths = gap_starts, gap_lengths
        else:
            short_starts, short_lengths = gap_starts[short], gap_lengths[short]
            longs = zip(gap_starts[~short].tolist(), (gap_starts + gap_lengths)[~short].tolist())
            for a, b in longs:
                work[a:b] = 0x20
        order = np.argsort(short_lengths.astype(np.uint8), kind="stable")
        by_length = short_starts[order]
        top = int(short_lengths.max(initial=0))
        tails = np.searchsorted(short_lengths[order], np.arange(1, top), side="right")
        for j, tail in zip(range(1, top), tails.tolist()):
            work[by_length[tail:] + j] = 0x20
        work[gap_starts] = 0x0A
        lines = work.tobytes()
        if lines.count(b"\n") != n - 1:
            return None  # a newline inside a value
        return lines

    def messages(self) -> list[RawMessage]:
        """One confluent-kafka-like message per record (for record-by-record paths)."""
        return [
            RawMessage(self.topic, self.partition, o, k, v, (kind, ts))
            for o, k, v, kind, ts in zip(
                self.offsets.tolist(),
                self.keys(),
                self.values(),
                self.timestamp_kinds.tolist(),
                self.timestamps.tolist(),
            )
        ]


class RawMessage:
    """A record with the accessors of confluent-kafka's ``Message`` that the source
    uses, so its record-by-record paths take either."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_timestamp")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: tuple[int, int],
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._timestamp = timestamp

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def error(self) -> None:
        return None


@dataclass
class _Batch:
    """A batch header, and where its records sit."""

    base_offset: int
    last_offset: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    count: int
    start: int
    stop: int


def batch_headers(data: bytes | memoryview) -> list[_Batch]:
    """The complete batches of ``data`` (a partial one at the end, which a fetch cut
    at its size limit, is left out), headers only."""
    batches: list[_Batch] = []
    pos = 0
    size = len(data)
    if 17 <= size < HEADER_BYTES and data[16] != 2:
        # a whole message of an older format can be shorter than a v2 header
        raise UnsupportedBatch(f"message format v{data[16]} (v2 is read)")
    while pos + HEADER_BYTES <= size:
        (base, length, _epoch, magic, _crc, attributes, last_delta, base_ts, max_ts, pid, _pep,
         _seq, count) = _HEAD.unpack_from(data, pos)  # fmt: skip
        stop = pos + 12 + length
        if stop > size:
            break  # cut by the fetch's size limit: the next fetch starts here
        if magic != 2:
            raise UnsupportedBatch(f"message format v{magic} at offset {base} (v2 is read)")
        if length < HEADER_BYTES - 12 or count < 0:
            raise CorruptBatch(f"record batch at offset {base}: length {length}, {count} records")
        batches.append(
            _Batch(
                base,
                base + last_delta,
                attributes,
                base_ts,
                max_ts,
                pid,
                count,
                pos + HEADER_BYTES,
                stop,
            )  # fmt: skip
        )
        pos = stop
    return batches


def next_offset_after(batches: list[_Batch], fetch_offset: int) -> int:
    """Where the next fetch starts once ``batches`` are read."""
    if not batches:
        return fetch_offset
    return max(fetch_offset, batches[-1].last_offset + 1)


def _kept(batches: list[_Batch], aborted: list[tuple[int, int]], committed_only: bool,
          data: bytes | memoryview) -> list[_Batch]:  # fmt: skip
    """The batches whose records are delivered: no control batch; with
    ``committed_only``, no batch of an aborted transaction (``aborted``: the response's
    ``(producer id, first offset)`` list)."""
    kept: list[_Batch] = []
    pending = sorted(aborted, key=lambda a: a[1])
    nxt = 0
    aborting: set[int] = set()
    for b in batches:
        if committed_only and b.attributes & _TRANSACTIONAL:
            while nxt < len(pending) and pending[nxt][1] <= b.last_offset:
                aborting.add(pending[nxt][0])
                nxt += 1
        if b.attributes & _CONTROL:
            if committed_only and b.producer_id in aborting and _is_abort_marker(data, b):
                aborting.discard(b.producer_id)
            continue
        if committed_only and b.attributes & _TRANSACTIONAL and b.producer_id in aborting:
            continue
        kept.append(b)
    return kept


def _is_abort_marker(data: bytes | memoryview, b: _Batch) -> bool:
    """A control batch's record key is (version int16, type int16); type 0 aborts."""
    if b.attributes & _CODEC_MASK or b.count < 1:
        return True  # markers are never compressed; treat an odd one as ending the abort
    from lockgate.connectors.kafka_framing import frame

    try:
        fields = frame(np.frombuffer(data, dtype=np.uint8), np.array([b.start], dtype=np.int64),
                       np.array([b.stop], dtype=np.int64), np.array([b.count], dtype=np.int64),
                       "a control batch")  # fmt: skip
    except CorruptBatch as e:
        raise CorruptBatch(f"control batch at offset {b.base_offset} is cut short: {e}") from None
    key_start, key_length = int(fields[2, 0]), int(fields[3, 0])
    if key_length < 4:
        return True
    return bool(struct.unpack_from(">h", data, key_start + 2)[0] == 0)


def decode_partition(
    topic: str,
    partition: int,
    data: bytes | memoryview,
    fetch_offset: int,
    end_offset: int | None,
    aborted: list[tuple[int, int]] | None,
    committed_only: bool,
    batches: list[_Batch] | None = None,
) -> PartitionRecords:
    """The records of one partition's fetched ``data`` at or after ``fetch_offset``
    (and before ``end_offset``, if given); ``batches``: ``batch_headers(data)`` if the
    caller has them already."""
    try:
        from lockgate.connectors.kafka_framing import frame
    except Exception as e:  # numba missing or unusable here: librdkafka reads instead
        raise UnsupportedBatch(f"the compiled record decoding is unavailable: {e!r}") from e
    if batches is None:
        batches = batch_headers(data)
    next_offset = next_offset_after(batches, fetch_offset)
    kept = _kept(batches, aborted or [], committed_only, data)
    whole = bytes(data)
    buffer = whole
    if any(b.attributes & _CODEC_MASK for b in kept):
        # the records of each batch, decompressed where needed, in batch order, so that
        # every record (and value) sits after the one before it
        pieces: list[bytes] = []
        at = 0
        for b in kept:
            codec = b.attributes & _CODEC_MASK
            if codec == 0:
                piece = whole[b.start : b.stop]
            elif codec == _GZIP:
                try:
                    piece = zlib.decompress(whole[b.start : b.stop], 16 + zlib.MAX_WBITS)
                except zlib.error as e:
                    raise CorruptBatch(f"gzip batch at offset {b.base_offset}: {e}") from e
            else:
                raise UnsupportedBatch(
                    f"record batch at offset {b.base_offset} of {topic}[{partition}] is "
                    f"compressed with codec {codec} (gzip and none are decoded here)"
                )
            pieces.append(piece)
            b.start, b.stop = at, at + len(piece)
            at = b.stop
        buffer = b"".join(pieces)
    counts = np.array([b.count for b in kept], dtype=np.int64)
    arr = np.frombuffer(buffer, dtype=np.uint8)
    fields = frame(
        arr,
        np.array([b.start for b in kept], dtype=np.int64),
        np.array([b.stop for b in kept], dtype=np.int64),
        counts,
        f"{topic}[{partition}]",
    )
    return _columns(topic, partition, buffer, arr, fields, kept, counts,
                    fetch_offset, end_offset, next_offset)  # fmt: skip


def _columns(topic: str, partition: int, buffer: bytes, arr: np.ndarray, fields: np.ndarray,
             kept: list[_Batch], counts: np.ndarray, fetch_offset: int,
             end_offset: int | None, next_offset: int) -> PartitionRecords:  # fmt: skip
    ts_delta, offset_delta, key_starts, key_lengths, value_starts, value_lengths = fields
    base_offsets = np.repeat(np.array([b.base_offset for b in kept], dtype=np.int64), counts)
    offsets = base_offsets + offset_delta
    log_append = np.repeat(
        np.array([bool(b.attributes & _LOG_APPEND_TIME) for b in kept], dtype=np.bool_), counts
    )
    timestamps = np.where(
        log_append,
        np.repeat(np.array([b.max_timestamp for b in kept], dtype=np.int64), counts),
        np.repeat(np.array([b.base_timestamp for b in kept], dtype=np.int64), counts) + ts_delta,
    )
    # the kind comes from the attribute bit alone, as librdkafka reports it (a
    # timestamp of -1 is a create time of -1 there too)
    kinds = np.where(log_append, TIMESTAMP_LOG_APPEND, TIMESTAMP_CREATE).astype(np.int8)
    keep: Any = offsets >= fetch_offset
    if end_offset is not None:
        keep &= offsets < end_offset
    if not bool(keep.all()):
        offsets, timestamps, kinds = offsets[keep], timestamps[keep], kinds[keep]
        key_starts, key_lengths = key_starts[keep], key_lengths[keep]
        value_starts, value_lengths = value_starts[keep], value_lengths[keep]
    if end_offset is not None:
        next_offset = min(next_offset, max(end_offset, fetch_offset))
    return PartitionRecords(
        topic, partition, buffer, offsets, timestamps, kinds, key_starts, key_lengths,
        value_starts, value_lengths, next_offset, _array=arr,
    )  # fmt: skip

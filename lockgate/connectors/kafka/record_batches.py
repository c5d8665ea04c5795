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
(:func:`lockgate.connectors.kafka.framing.frame`, the only per-record step), and their
offsets and timestamps computed at once with numpy.

``read_committed`` (KIP-98): control batches (transaction markers) are never records;
a transactional batch of a producer whose transaction the response lists as aborted
(from its first offset until its abort marker) is skipped, as Kafka's own consumer does.

Compression: uncompressed and gzip batches are decoded here; any other codec raises
:class:`UnsupportedBatch`, on which the caller reads through librdkafka instead.
Anything that does not parse raises :class:`CorruptBatch`.

Hostile batches (issue 37 items 2 and 7), which the broker stores as they are: a batch
whose records' offsets are not strictly increasing inside ``[base offset, base offset +
last offset delta]`` (a record claiming a later offset would move the reader past other
producers' records), and a compressed batch that expands to more than
``max_batch_bytes`` (a gzip bomb), are *refused*: their records are left out and each
is listed in :attr:`PartitionRecords.refused` for the caller to fail on or dead-letter.
Decompression is streamed with that bound, and the batches of one fetch expand to at
most twice it in all: the rest is left for the next fetch (``next_offset``).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lockgate.connectors.kafka.errors import CorruptBatch

#: batch header: base offset (8), batch length (4) ... record count; 61 bytes in all
HEADER_BYTES = 61
_HEAD = struct.Struct(">qiibIhiqqqhii")
#: attributes: compression codec bits, timestamp type bit, transactional and control bits
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_GZIP = 1
#: the most bytes one compressed batch may expand to unless the caller says otherwise
#: (the source passes a bound derived from its fetch and record limits)
DEFAULT_MAX_BATCH_BYTES = 64 << 20
#: bytes a gzip batch is expanded by at a time (checked against the bound after each)
_INFLATE_STEP = 1 << 20
#: gaps between two values up to this long are blanked a byte position at a time
_SHORT_GAP = 24
#: confluent-kafka's timestamp kinds: none, create time, log append time
TIMESTAMP_NONE, TIMESTAMP_CREATE, TIMESTAMP_LOG_APPEND = 0, 1, 2


@dataclass(frozen=True)
class RefusedBatch:
    """A record batch the broker stored but no reader may take: its records are not
    emitted, and the position moves past it only once the caller has failed on it or
    dead-lettered it. ``last_offset`` is the header's (base offset + last offset
    delta)."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    count: int
    reason: str

    @property
    def location(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.base_offset}"


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
    #: batches whose records were left out (forged offsets, a decompression bomb)
    refused: list[RefusedBatch] = field(default_factory=list)
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
    from lockgate.connectors.kafka.framing import frame

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
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> PartitionRecords:
    """The records of one partition's fetched ``data`` at or after ``fetch_offset``
    (and before ``end_offset``, if given); ``batches``: ``batch_headers(data)`` if the
    caller has them already. A compressed batch expanding to more than
    ``max_batch_bytes``, or whose records' offsets are not strictly increasing inside
    its header's range, is left out and listed in ``refused``; once the expanded
    batches reach ``2 * max_batch_bytes`` the rest is left for the next fetch (a lower
    ``next_offset``)."""
    try:
        from lockgate.connectors.kafka.framing import frame
    except Exception as e:  # numba missing or unusable here: librdkafka reads instead
        raise UnsupportedBatch(f"the compiled record decoding is unavailable: {e!r}") from e
    if batches is None:
        batches = batch_headers(data)
    next_offset = next_offset_after(batches, fetch_offset)
    kept = _kept(batches, aborted or [], committed_only, data)
    refused: list[RefusedBatch] = []
    whole = bytes(data)
    buffer = whole
    if any(b.attributes & _CODEC_MASK for b in kept):
        kept, buffer, cut = _expand(topic, partition, whole, kept, max_batch_bytes, refused)
        if cut is not None:
            next_offset = max(fetch_offset, cut)
    counts = np.array([b.count for b in kept], dtype=np.int64)
    arr = np.frombuffer(buffer, dtype=np.uint8)
    fields = frame(
        arr,
        np.array([b.start for b in kept], dtype=np.int64),
        np.array([b.stop for b in kept], dtype=np.int64),
        counts,
        f"{topic}[{partition}]",
    )
    kept, counts, fields = _offsets_checked(topic, partition, kept, counts, fields, refused)
    records = _columns(topic, partition, buffer, arr, fields, kept, counts,
                       fetch_offset, end_offset, next_offset)  # fmt: skip
    # only what lies at or after the fetch offset (and before a bounded end) is the
    # caller's: a refused batch before it was refused by an earlier fetch already
    records.refused = [
        r
        for r in sorted(refused, key=lambda r: r.base_offset)
        if r.last_offset >= fetch_offset and (end_offset is None or r.base_offset < end_offset)
    ]
    return records


def _expand(
    topic: str,
    partition: int,
    whole: bytes,
    kept: list[_Batch],
    max_batch_bytes: int,
    refused: list[RefusedBatch],
) -> tuple[list[_Batch], bytes, int | None]:
    """The records of each batch of ``kept``, decompressed where needed, in batch order
    in one buffer (so that every record, and value, sits after the one before it):
    ``(the batches in it, the buffer, the offset the next fetch starts at when the
    budget of ``2 * max_batch_bytes`` cut the fetch short, else None)``. A batch
    expanding past ``max_batch_bytes`` goes to ``refused``."""
    budget = 2 * max_batch_bytes
    out = bytearray()
    expanded: list[_Batch] = []
    cut: int | None = None
    for b in kept:
        codec = b.attributes & _CODEC_MASK
        if codec == 0:
            piece: bytes | bytearray | memoryview = memoryview(whole)[b.start : b.stop]
        elif codec == _GZIP:
            room = budget - len(out)
            if out and room <= 0:
                cut = b.base_offset
                break
            limit = min(max_batch_bytes, room) if out else max_batch_bytes
            piece, over = _gunzip(memoryview(whole)[b.start : b.stop], limit, b.base_offset)
            if over and limit < max_batch_bytes:
                cut = b.base_offset  # the next fetch starts with it, with the whole bound
                break
            if over:
                refused.append(
                    RefusedBatch(
                        topic,
                        partition,
                        b.base_offset,
                        b.last_offset,
                        b.count,
                        f"gzip batch expands to more than {max_batch_bytes} bytes (a "
                        "decompression bomb, or a batch larger than the source reads: "
                        "raise max_record_bytes if it is genuine)",
                    )  # fmt: skip
                )
                continue
        else:
            raise UnsupportedBatch(
                f"record batch at offset {b.base_offset} of {topic}[{partition}] is "
                f"compressed with codec {codec} (gzip and none are decoded here)"
            )
        if out and len(out) + len(piece) > budget:
            cut = b.base_offset
            break
        start = len(out)
        out += piece
        b.start, b.stop = start, len(out)
        expanded.append(b)
    return expanded, bytes(out), cut


def _gunzip(data: memoryview, limit: int, base_offset: int) -> tuple[bytearray, bool]:
    """``data`` gunzipped a :data:`_INFLATE_STEP` at a time into one growing buffer, so
    that no more than ``limit`` plus a step is ever held: ``(bytes, False)``, or
    ``(empty, True)`` as soon as it expands past ``limit``."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    rest: bytes | memoryview = data
    try:
        while not inflater.eof:
            step = inflater.decompress(rest, _INFLATE_STEP)
            rest = inflater.unconsumed_tail
            if not step and not rest:
                raise CorruptBatch(f"gzip batch at offset {base_offset}: the stream is cut short")
            out += step
            if len(out) > limit:
                return bytearray(), True
    except zlib.error as e:
        raise CorruptBatch(f"gzip batch at offset {base_offset}: {e}") from e
    return out, False


def _offsets_checked(
    topic: str,
    partition: int,
    kept: list[_Batch],
    counts: np.ndarray,
    fields: np.ndarray,
    refused: list[RefusedBatch],
) -> tuple[list[_Batch], np.ndarray, np.ndarray]:
    """``kept``, their counts and record columns without the batches whose records'
    offset deltas are not strictly increasing inside ``[0, last offset delta]`` (those
    go to ``refused``): a record claiming an offset past its batch would move the
    reader past records it never read (issue 37 item 2)."""
    deltas = fields[1]
    if not len(deltas):
        return kept, counts, fields
    batch_of = np.repeat(np.arange(len(kept)), counts)
    last = np.repeat(
        np.array([b.last_offset - b.base_offset for b in kept], dtype=np.int64), counts
    )
    bad = (deltas < 0) | (deltas > last)
    bad[1:] |= (deltas[1:] <= deltas[:-1]) & (batch_of[1:] == batch_of[:-1])
    if not bool(bad.any()):
        return kept, counts, fields
    wrong = set(np.unique(batch_of[bad]).tolist())
    for i in sorted(wrong):
        b = kept[i]
        refused.append(
            RefusedBatch(
                topic,
                partition,
                b.base_offset,
                b.last_offset,
                b.count,
                f"{_claim(b, bad[batch_of == i], deltas[batch_of == i])}, outside the "
                f"strictly increasing offsets its header allows ([{b.base_offset}, "
                f"{b.last_offset}]): a forged batch, refused so that no other record is "
                "skipped",
            )  # fmt: skip
        )
    good = np.array([i not in wrong for i in range(len(kept))], dtype=np.bool_)
    mask = good[batch_of]
    return [b for i, b in enumerate(kept) if good[i]], counts[good], fields[:, mask]


def _claim(b: _Batch, bad: np.ndarray, deltas: np.ndarray) -> str:
    """What the first wrong record of batch ``b`` claims."""
    j = int(np.flatnonzero(bad)[0])
    said = f"record {j} of the batch claims offset {b.base_offset + int(deltas[j])}"
    if j:
        said += f" after {b.base_offset + int(deltas[j - 1])}"
    return said


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

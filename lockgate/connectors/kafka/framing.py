"""The records of Kafka record batches (message format v2) located in one compiled pass:
for every record, its timestamp and offset deltas and where its key and value sit.

Each record is a chain of zigzag varints::

    length, attributes (1 byte), timestamp delta, offset delta,
    key length, key, value length, value, header count, headers

:func:`frame` walks every record of every batch given, checking each length against what
is left of its record and batch, so corrupt bytes raise :class:`CorruptBatch` and are
never read past. It is the only per-record step of the direct fetch path.
"""

from __future__ import annotations

import numpy as np

from lockgate.connectors.compiled import inline, kernel
from lockgate.connectors.kafka.errors import CorruptBatch

#: the fewest bytes a record takes: length, attributes, timestamp and offset deltas,
#: key and value lengths, header count (one byte each)
_SMALLEST_RECORD = 7
OK = 0
NEGATIVE_LENGTH = 1
PAST_BATCH = 2
BATCH_END = 3
LONG_VARINT = 4
OVERRUN = 5


@inline
def _varint(buf: np.ndarray, pos: int, limit: int) -> tuple[int, int, int]:  # pragma: no cover
    """The zigzag varint at ``pos`` read before ``limit``: (value, position after it,
    error code)."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    while True:
        if pos >= limit:
            return 0, pos, OVERRUN
        c = buf[pos]
        pos += 1
        raw |= np.uint64(c & 0x7F) << shift
        if c < 0x80:
            break
        shift += np.uint64(7)
        if shift > np.uint64(63):
            return 0, pos, LONG_VARINT
    value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
    return value, pos, OK


@inline
def _record(
    buf: np.ndarray, pos: int, stop: int, out: np.ndarray, k: int
) -> tuple[int, int]:  # pragma: no cover - compiled; tested through frame()
    """The record at ``pos`` (its batch ends at ``stop``) into column ``k`` of ``out``:
    (error code, the position after the record, or where the error is)."""
    length, pos, err = _varint(buf, pos, stop)
    if err != OK:
        return (PAST_BATCH if err == OVERRUN else err), pos
    if length < 0:
        return NEGATIVE_LENGTH, length
    if length > stop - pos:
        return PAST_BATCH, pos
    end = pos + length
    pos += 1  # attributes
    for row in range(2):  # timestamp delta, offset delta
        out[row, k], pos, err = _varint(buf, pos, end)
        if err != OK:
            return err, pos
    for row in (2, 4):  # key, value: a length then the bytes
        size, pos, err = _varint(buf, pos, end)
        if err != OK:
            return err, pos
        if size < -1 or size > end - pos:
            return OVERRUN, pos
        out[row, k] = pos
        out[row + 1, k] = size
        if size > 0:
            pos += size
    if pos >= end:  # the header count follows the value
        return OVERRUN, pos
    return OK, end


@kernel
def _frame(
    buf: np.ndarray, starts: np.ndarray, stops: np.ndarray, counts: np.ndarray, out: np.ndarray
) -> tuple[int, int, int]:  # pragma: no cover - compiled; tested through frame()
    """Fill ``out`` (6 rows: timestamp delta, offset delta, key start, key length, value
    start, value length; a column per record); return (error code, batch, position)."""
    k = 0
    for b in range(len(starts)):
        pos = starts[b]
        for _ in range(counts[b]):
            err, pos = _record(buf, pos, stops[b], out, k)
            if err != OK:
                return err, b, pos
            k += 1
        if pos != stops[b]:
            return BATCH_END, b, pos
    return OK, 0, 0


def frame(
    buffer: np.ndarray,
    starts: np.ndarray,
    stops: np.ndarray,
    counts: np.ndarray,
    where: str,
) -> np.ndarray:
    """Every record of the batches whose records lie at ``buffer[starts[i]:stops[i]]``
    (``counts[i]`` records each): an int64 array of 6 rows (timestamp delta, offset
    delta, key start, key length, value start, value length; length -1 for none), a
    column per record, in order. Raises :class:`CorruptBatch` naming ``where`` (a topic
    partition) when a record does not fit its batch or a length its record."""
    if len(starts) and (
        int(starts.min()) < 0
        or bool((stops < starts).any())
        or int(stops.max()) > len(buffer)
        or int(counts.min()) < 0
    ):
        raise CorruptBatch(f"record batches of {where} outside the fetched bytes")
    if bool((counts * _SMALLEST_RECORD > stops - starts).any()):
        # checked before the columns are allocated: a corrupt count of 2**31 would ask
        # for 96 GiB
        raise CorruptBatch(f"a batch of {where} claims more records than its bytes hold")
    out = np.empty((6, int(counts.sum())), dtype=np.int64)
    code, b, pos = _frame(buffer, starts, stops, counts, out)
    if code == OK:
        return out
    if code == NEGATIVE_LENGTH:
        raise CorruptBatch(f"a record of {where} has a negative length {pos}")
    if code == PAST_BATCH:
        raise CorruptBatch(f"a record of {where} runs past its batch (byte {pos})")
    if code == BATCH_END:
        raise CorruptBatch(
            f"the records of a batch of {where} end at byte {pos}, their batch at {stops[b]}"
        )
    if code == LONG_VARINT:
        raise CorruptBatch(f"a record of {where} has a varint longer than 10 bytes")
    raise CorruptBatch(f"a record of {where} overruns its length (byte {pos})")

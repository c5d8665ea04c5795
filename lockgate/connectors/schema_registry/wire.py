"""The Confluent wire format of a registry-encoded Kafka record.

A value (or key) written by a Schema Registry serializer is::

    byte 0     magic byte 0
    bytes 1-4  the schema id, a big-endian unsigned 32-bit integer
    ...        Protobuf only: the message indexes (which message of the schema's
               file), a zigzag varint count then that many zigzag varints; the single
               byte 0 stands for [0], the file's first message
    ...        the payload: Avro binary, a Protobuf message, or JSON text

This module frames and unframes; it never looks inside the payload. Every function
checks the bytes it is given and raises :class:`WireFormatError` saying what is wrong,
so a caller can report the record as malformed with its position.
"""

from __future__ import annotations

import struct

#: the first byte of every registry-framed record
MAGIC = 0
#: bytes before the payload (or before Protobuf's message indexes)
HEADER_BYTES = 5
#: at most this many message indexes (a message nested this deep is not a real schema)
MAX_MESSAGE_INDEXES = 64

_HEADER = struct.Struct(">bI")


class WireFormatError(ValueError):
    """Bytes that are not a registry-framed record (the reason is the message)."""


def schema_id_of(value: bytes | bytearray | memoryview) -> int:
    """The schema id framed in ``value``; :class:`WireFormatError` when ``value`` is
    shorter than the 5-byte header or does not start with the magic byte 0."""
    if len(value) < HEADER_BYTES:
        raise WireFormatError(
            f"{len(value)} bytes is shorter than the 5-byte header of the Schema Registry "
            "wire format (magic byte 0, 4-byte schema id); was it written without a "
            "registry serializer?"
        )
    magic, schema_id = _HEADER.unpack_from(value, 0)
    if magic != MAGIC:
        raise WireFormatError(
            f"the first byte is {magic & 0xFF}, not the Schema Registry wire format's "
            "magic byte 0; was it written without a registry serializer?"
        )
    return int(schema_id)


def frame(schema_id: int, payload: bytes, message_indexes: list[int] | None = None) -> bytes:
    """``payload`` framed for ``schema_id``; ``message_indexes`` (Protobuf only) name the
    message within the schema's file ([0] is written as the single byte 0)."""
    if isinstance(schema_id, bool) or not isinstance(schema_id, int) or not 0 <= schema_id < 2**32:
        raise ValueError(f"a schema id is an int in [0, 2**32), got {schema_id!r}")
    head = _HEADER.pack(MAGIC, schema_id)
    if message_indexes is None:
        return head + payload
    return head + encode_message_indexes(message_indexes) + payload


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _write_varint(n: int, out: bytearray) -> None:
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return


def encode_message_indexes(indexes: list[int]) -> bytes:
    """Protobuf message indexes as framed ([0] as the single byte 0)."""
    if not indexes or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in indexes):
        raise ValueError(f"message indexes are a non-empty list of ints >= 0, got {indexes!r}")
    if indexes == [0]:
        return b"\x00"
    out = bytearray()
    _write_varint(_zigzag(len(indexes)), out)
    for i in indexes:
        _write_varint(_zigzag(i), out)
    return bytes(out)


def _read_varint(value: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(value):
            raise WireFormatError("the Protobuf message indexes end inside a varint")
        b = value[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise WireFormatError("a Protobuf message index varint is longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def decode_message_indexes(
    value: bytes | bytearray | memoryview, pos: int = HEADER_BYTES
) -> tuple[list[int], int]:
    """The Protobuf message indexes starting at ``pos`` and the payload's offset after
    them; :class:`WireFormatError` when they are cut short, negative or too many."""
    count, pos = _read_varint(value, pos)
    if count == 0:
        return [0], pos
    if count < 0:
        raise WireFormatError(f"a negative count of Protobuf message indexes ({count})")
    if count > MAX_MESSAGE_INDEXES:
        raise WireFormatError(
            f"{count} Protobuf message indexes (at most {MAX_MESSAGE_INDEXES} are read)"
        )
    indexes = []
    for _ in range(count):
        i, pos = _read_varint(value, pos)
        if i < 0:
            raise WireFormatError(f"a negative Protobuf message index ({i})")
        indexes.append(i)
    return indexes, pos

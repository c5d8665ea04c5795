"""Raw Kafka protocol for hostile-input tests: record batches (message format v2) built
byte by byte, with any per-record offset deltas and any gzip payload, written to the
broker with a hand-made Produce request (v3, the oldest Kafka 4 serves), so a test can
store exactly what a hostile producer would (a client library builds only valid
batches). Used by ``tests/connectors/test_kafka_hostile_batches.py`` and
``bench/hostile_kafka_batches.py``."""

from __future__ import annotations

import socket
import struct
import zlib
from collections.abc import Sequence

from kafka.record.util import calc_crc32c

PRODUCE_API_KEY = 0
PRODUCE_VERSION = 3
GZIP = 1


def varint(n: int) -> bytes:
    """Kafka's zigzag varint of ``n``."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def record(
    offset_delta: int, ts_delta: int, value: bytes | None, key: bytes | None = None
) -> bytes:
    """One v2 record (no headers) claiming ``offset_delta``."""
    body = bytearray(b"\x00") + varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(0)
    return varint(len(body)) + bytes(body)


def record_batch(
    records: bytes,
    count: int,
    last_offset_delta: int,
    *,
    attributes: int = 0,
    base_ts: int = 1_700_000_000_000,
) -> bytes:
    """A v2 batch (base offset 0: the broker assigns it) of ``count`` records whose
    bytes (already compressed when ``attributes`` names a codec) are ``records``; the
    header's last offset delta is ``last_offset_delta`` whatever the records claim. The
    CRC32C is right, so the broker takes it as it is."""
    after_crc = (
        struct.pack(">hiqqqhii", attributes, last_offset_delta, base_ts, base_ts, -1, -1, -1, count)
        + records
    )
    crc = calc_crc32c(after_crc)
    after_length = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


def forged_batch(values: Sequence[bytes], offset_deltas: Sequence[int]) -> bytes:
    """An uncompressed batch of ``values`` whose records claim ``offset_deltas`` (the
    header's count and last offset delta agree, as the broker checks)."""
    assert len(values) == len(offset_deltas)
    body = b"".join(record(d, i, v) for i, (v, d) in enumerate(zip(values, offset_deltas)))
    return record_batch(body, len(values), len(values) - 1)


def gzip_bomb_batch(expanded_bytes: int, value: bytes = b'{"v": 0}') -> bytes:
    """A gzip batch of ONE record whose key is ``expanded_bytes`` of zeros (valid
    records; compressed about a thousandfold) and whose value is ``value``."""
    padding = b"\x00" * expanded_bytes
    body = record(0, 0, value, key=padding)
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    compressed = packer.compress(body) + packer.flush()
    return record_batch(compressed, 1, 0, attributes=GZIP)


def produce_raw(
    bootstrap: str, topic: str, partition: int, batches: Sequence[bytes], timeout_s: float = 30
) -> list[int]:
    """Write ``batches`` to ``topic[partition]`` (the broker at ``bootstrap`` must lead
    it: the test broker is a single node), one Produce v3 request each, acks=all; the
    base offset the broker gave each. Raises AssertionError naming the Kafka error code
    when the broker refuses one."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    name = topic.encode()
    offsets: list[int] = []
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        for correlation, batch in enumerate(batches, 1):
            body = (
                struct.pack(">hhih", PRODUCE_API_KEY, PRODUCE_VERSION, correlation, 4)
                + b"test"
                + struct.pack(">hhi", -1, -1, int(timeout_s * 1000))
                + struct.pack(">ih", 1, len(name))
                + name
                + struct.pack(">iii", 1, partition, len(batch))
                + batch
            )
            sock.sendall(struct.pack(">i", len(body)) + body)
            response = _read_response(sock)
            (got,) = struct.unpack_from(">i", response, 0)
            assert got == correlation, f"response {got} to request {correlation}"
            pos = 8  # correlation id, topic count
            (name_len,) = struct.unpack_from(">h", response, pos)
            pos += 2 + name_len + 4  # the name, the partition count
            _, error, base, _ = struct.unpack_from(">ihqq", response, pos)
            assert error == 0, f"the broker refused the batch: Kafka error code {error}"
            offsets.append(base)
    return offsets


def _read_response(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return bytes(out)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)

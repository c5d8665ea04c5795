"""The direct fetcher's decoding of Kafka record batches (message format v2) and Fetch v4
responses, on batches built here byte by byte from the format's definition, so each case
(multi-byte varints, tombstones, headers, log append time, gzip, transactions, truncation,
corruption) is exact. The same code against the real broker:
``tests/connectors/test_kafka_direct_fetch.py``."""

from __future__ import annotations

import gzip
import json
import socket
import struct

import numpy as np
import pytest

from lockgate.connectors.kafka.direct_client import (
    LEADER_WAIT_S,
    DirectFetcher,
    FetchUnavailable,
    _Connection,
    direct_fetch_possible,
    fetch_request,
    parse_fetch_response,
)
from lockgate.connectors.kafka.framing import frame
from lockgate.connectors.kafka.record_batches import (
    TIMESTAMP_CREATE,
    TIMESTAMP_LOG_APPEND,
    CorruptBatch,
    UnsupportedBatch,
    batch_headers,
    decode_partition,
)


def varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def record(
    offset_delta: int,
    ts_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]] = (),  # type: ignore[assignment]
) -> bytes:
    body = bytearray(b"\x00")
    body += varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for name, hv in headers:
        body += varint(len(name)) + name.encode() + varint(len(hv)) + hv
    return varint(len(body)) + bytes(body)


def batch(
    base_offset: int,
    records: list[tuple[bytes | None, bytes | None]],
    *,
    base_ts: int = 1_000,
    attributes: int = 0,
    producer_id: int = -1,
    headers: bool = False,
    compress: bool = False,
    offset_step: int = 1,
) -> bytes:
    """A v2 batch of ``(key, value)`` records at offsets ``base_offset + i * step``,
    timestamps ``base_ts + i``."""
    body = b"".join(
        record(i * offset_step, i, k, v, [("h", b"x" * i)] if headers else [])
        for i, (k, v) in enumerate(records)
    )
    if compress:
        body = gzip.compress(body)
        attributes |= 1
    last_delta = (len(records) - 1) * offset_step
    after_length = struct.pack(
        ">ibIhiqqqhii", 0, 2, 0, attributes, last_delta, base_ts, base_ts + len(records) - 1,
        producer_id, 0, 0, len(records),
    )  # fmt: skip
    return struct.pack(">qi", base_offset, len(after_length) + len(body)) + after_length + body


def control(offset: int, producer_id: int, commit: bool) -> bytes:
    """A transaction marker: a control batch whose one record's key is (0, type)."""
    return batch(
        offset,
        [(struct.pack(">hh", 0, 1 if commit else 0), b"\x00\x00\x00\x00\x00\x00")],
        attributes=0x30,
        producer_id=producer_id,
    )


def decode(data: bytes, fetch_offset: int = 0, end: int | None = None, aborted=None,
           committed_only: bool = True):  # fmt: skip
    return decode_partition("t", 0, data, fetch_offset, end, aborted, committed_only)


def test_every_field_of_every_record_including_multi_byte_varints_and_headers() -> None:
    big = json.dumps({"x": "y" * 20_000}).encode()  # a length needing three varint bytes
    rows = [(None, b'{"a":1}'), (b"k", None), (b"k" * 300, big), (b"", b"")] * 50
    data = batch(100, rows, headers=True) + batch(300, rows[:3], base_ts=5_000)
    got = decode(data, fetch_offset=100)
    assert got.offsets.tolist() == list(range(100, 300)) + [300, 301, 302]
    assert got.values() == [v for _, v in rows] + [v for _, v in rows[:3]]
    assert got.keys() == [k for k, _ in rows] + [k for k, _ in rows[:3]]
    assert got.timestamps.tolist() == [1_000 + i for i in range(200)] + [5_000, 5_001, 5_002]
    assert set(got.timestamp_kinds.tolist()) == {TIMESTAMP_CREATE}
    assert got.next_offset == 303
    messages = got.messages()
    assert (messages[2].offset(), messages[2].key(), messages[2].value()) == (102, b"k" * 300, big)
    assert messages[2].timestamp() == (TIMESTAMP_CREATE, 1_002) and messages[2].error() is None


def test_records_before_the_fetch_offset_and_at_or_after_the_end_are_left_out() -> None:
    data = batch(10, [(None, b"%d" % i) for i in range(10)])
    got = decode(data, fetch_offset=13, end=17)
    assert got.offsets.tolist() == [13, 14, 15, 16]
    assert got.values() == [b"3", b"4", b"5", b"6"]
    assert got.next_offset == 17, "a bounded split stops at its end, not the batch's"


def test_a_batch_cut_short_by_the_fetch_size_is_left_for_the_next_fetch() -> None:
    first = batch(0, [(None, b"a"), (None, b"b")])
    second = batch(2, [(None, b"c")])
    got = decode(first + second[:-3], fetch_offset=0)
    assert got.values() == [b"a", b"b"] and got.next_offset == 2
    assert decode(b"", fetch_offset=7).next_offset == 7


def test_log_append_time_gives_every_record_the_batch_max_timestamp() -> None:
    got = decode(batch(0, [(None, b"a"), (None, b"b")], attributes=0x08, base_ts=77))
    assert got.timestamps.tolist() == [78, 78]
    assert set(got.timestamp_kinds.tolist()) == {TIMESTAMP_LOG_APPEND}
    unset = decode(batch(0, [(None, b"a")], base_ts=-1))
    assert unset.messages()[0].timestamp() == (TIMESTAMP_CREATE, -1), "as librdkafka says"


def test_gzip_batches_decode_like_plain_ones_other_codecs_are_refused() -> None:
    rows = [(b"k%d" % i, b"value %d" % i) for i in range(500)]
    plain = decode(batch(0, rows) + batch(500, rows))
    zipped = decode(batch(0, rows, compress=True) + batch(500, rows))
    assert zipped.values() == plain.values() and zipped.keys() == plain.keys()
    assert zipped.offsets.tolist() == list(range(1000))
    for order in ([True, False, True], [False, True, False], [True, True, False]):
        mixed = b"".join(
            batch(i * 10, [(None, b'{"v": %d}' % (i * 10 + j)) for j in range(10)], compress=z)
            for i, z in enumerate(order)
        )
        got = decode(mixed)
        assert got.values() == [b'{"v": %d}' % i for i in range(30)], order
        assert got.offsets.tolist() == list(range(30))
        lines = got.json_object_lines()
        assert lines is not None and [json.loads(x)["v"] for x in lines.split(b"\n")] == list(
            range(30)
        ), f"values in offset order, whatever the codecs: {order}"
    lz4 = bytearray(batch(0, rows))
    lz4[22] = 3  # attributes' low byte: codec 3 (lz4)
    with pytest.raises(UnsupportedBatch, match="codec 3"):
        decode(bytes(lz4))
    old = bytearray(batch(0, rows))
    old[16] = 1  # magic 1: the old message format
    with pytest.raises(UnsupportedBatch, match="v1"):
        decode(bytes(old))
    with pytest.raises(UnsupportedBatch, match="v1"):
        decode(bytes(old[:40]))  # an old message shorter than a v2 header


def test_read_committed_skips_aborted_transactions_and_every_marker_KIP_98() -> None:
    """Two producers' transactions interleave in one partition: 7 commits, 9 aborts. The
    aborted list names producer 9 from offset 1; producer 9's later transaction (after
    its abort marker) is committed and kept."""
    data = (
        batch(0, [(None, b"plain")])
        + batch(1, [(None, b"aborted-1")], attributes=0x10, producer_id=9)
        + batch(2, [(None, b"committed-1")], attributes=0x10, producer_id=7)
        + batch(3, [(None, b"aborted-2")], attributes=0x10, producer_id=9)
        + control(4, 9, commit=False)
        + control(5, 7, commit=True)
        + batch(6, [(None, b"committed-2")], attributes=0x10, producer_id=9)
        + control(7, 9, commit=True)
    )
    got = decode(data, aborted=[(9, 1)])
    assert got.values() == [b"plain", b"committed-1", b"committed-2"]
    assert got.offsets.tolist() == [0, 2, 6]
    assert got.next_offset == 8, "the position moves past markers and aborted records"
    everything = decode(data, aborted=[(9, 1)], committed_only=False)
    assert everything.values() == [
        b"plain", b"aborted-1", b"committed-1", b"aborted-2", b"committed-2",
    ]  # fmt: skip


def test_corrupt_records_raise_never_decode_garbage() -> None:
    good = batch(0, [(None, b"abc"), (None, b"def")])
    short = bytearray(good)
    short[61] += 2  # the first record claims one more byte than it has
    with pytest.raises(CorruptBatch):
        decode(bytes(short))
    negative = bytearray(good)
    negative[61] = 0x03  # zigzag -2
    with pytest.raises(CorruptBatch):
        decode(bytes(negative))
    lying_value = bytearray(good)
    lying_value[61 + 5] = 0x10  # value length 8 inside a record of 8 bytes
    with pytest.raises(CorruptBatch):
        decode(bytes(lying_value))


def test_a_key_or_value_length_near_2_63_raises_never_reads_past_its_record() -> None:
    def raw_batch(bodies: list[bytes]) -> bytes:
        body = b"".join(varint(len(b)) + b for b in bodies)
        after = struct.pack(
            ">ibIhiqqqhii", 0, 2, 0, 0, len(bodies) - 1, 1000, 1000, -1, 0, 0, len(bodies)
        )
        return struct.pack(">qi", 0, len(after) + len(body)) + after + body

    def rec(i: int, key_length: int, value_length: int, payload: bytes) -> bytes:
        return (
            b"\x00" + varint(i) * 2 + varint(key_length) + varint(value_length) + payload + b"\x00"
        )

    for huge in (2**63 - 1, 2**63 - 40, 2**62 + 5):
        next_record = rec(1, -1, 2, b"{}")
        with pytest.raises(CorruptBatch, match="overruns its length"):
            decode(raw_batch([rec(0, -1, huge, b'{"secret": 1}'), next_record]))
        with pytest.raises(CorruptBatch, match="overruns its length"):
            decode(raw_batch([rec(0, huge, 2, b"{}"), next_record]))


def test_varints_of_every_width_decode_and_overlong_or_cut_ones_raise() -> None:
    values = [0, 1, -1, 63, -64, 64, 8191, -8192, 8192, 2**20, -(2**31), 2**62, -(2**63)]
    values += [2**63 - 1, 300, -300, 5]
    bodies = [record(v, -v if v > -(2**63) else v, None, b"x") for v in values]
    data = b"".join(bodies)
    got = frame(
        np.frombuffer(data, dtype=np.uint8),
        np.array([0]), np.array([len(data)]), np.array([len(values)]), "t[0]",
    )  # fmt: skip
    assert got[1].tolist() == values, "offset deltas"
    assert got[0].tolist() == [-v if v > -(2**63) else v for v in values], "timestamp deltas"
    assert (got[5] == 1).all() and bytes(data[i] for i in got[4]) == b"x" * len(values)

    def one(body: bytes) -> None:
        rec = varint(len(body)) + body
        frame(np.frombuffer(rec, dtype=np.uint8), np.array([0]), np.array([len(rec)]),
              np.array([1]), "t[0]")  # fmt: skip

    with pytest.raises(CorruptBatch, match="longer than 10 bytes"):
        one(b"\x00" + b"\x80" * 11 + b"\x01\x00\x01\x01\x00")
    with pytest.raises(CorruptBatch, match="overruns its length"):
        one(b"\x00\x02" + b"\x80" * 5)  # the offset delta runs past the record


def test_json_object_lines_blank_the_framing_and_refuse_what_is_not_one_object_a_line() -> None:
    rows = [(b"key" * 20, b'{"a": %d}' % i) for i in range(100)]
    got = decode(batch(0, rows[:60], headers=True) + batch(60, rows[60:]))
    lines = got.json_object_lines()
    assert lines is not None
    assert [json.loads(line) for line in lines.split(b"\n")] == [{"a": i} for i in range(100)]
    for bad in (b"[1]", b'{"a":\n1}', None, b" {}"):
        odd = decode(batch(0, [(None, b"{}"), (None, bad)]))
        assert odd.json_object_lines() is None, bad


def test_fetch_responses_parse_and_a_truncated_one_raises() -> None:
    records = batch(5, [(None, b"x")])
    topic = b"tp"
    body = (
        struct.pack(">ii", 42, 0) + struct.pack(">i", 1) + struct.pack(">h", 2) + topic
        + struct.pack(">i", 1) + struct.pack(">ihqqi", 3, 0, 6, 6, 1) + struct.pack(">qq", 9, 1)
        + struct.pack(">i", len(records)) + records
    )  # fmt: skip
    (part,) = parse_fetch_response(body, 42)
    assert (part.topic, part.partition, part.error, part.high_watermark) == ("tp", 3, 0, 6)
    assert part.aborted == [(9, 1)] and bytes(part.records) == records
    assert [b.base_offset for b in batch_headers(part.records)] == [5]
    with pytest.raises(CorruptBatch):
        parse_fetch_response(body[:-5], 42)
    with pytest.raises(CorruptBatch, match="expected 41"):
        parse_fetch_response(body, 41)
    request = fetch_request(7, [("tp", [(3, 5)])], committed_only=True)
    assert struct.unpack_from(">ihhi", request) == (len(request) - 4, 1, 4, 7)


def test_only_plaintext_connections_are_fetched_directly() -> None:
    assert direct_fetch_possible({})
    assert direct_fetch_possible({"security.protocol": "PLAINTEXT", "linger.ms": 5})
    assert not direct_fetch_possible({"security.protocol": "SASL_SSL"})
    assert not direct_fetch_possible({"sasl.mechanism": "PLAIN"})
    assert not direct_fetch_possible({"ssl.ca.location": "/x"})


def test_an_unreachable_broker_ends_direct_fetching() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    fetcher = DirectFetcher(lambda tps: {tp: ("127.0.0.1", port) for tp in tps}, True)
    fetcher.assign(("t", 0), 0, None)
    with pytest.raises(FetchUnavailable, match="cannot connect"):
        fetcher.poll()
    asked: list[int] = []
    now = [0.0]
    fetcher = DirectFetcher(lambda tps: asked.append(1) or {}, True, clock=lambda: now[0])
    fetcher.assign(("t", 0), 0, None)
    for t in (0.0, 0.05, 0.2, 5.0, LEADER_WAIT_S):  # an election may be under way
        now[0] = t
        assert fetcher.poll() == []
    assert len(asked) == 4, "asked again at most every LEADER_RETRY_S"
    now[0] = LEADER_WAIT_S + 1
    with pytest.raises(FetchUnavailable, match="no leader"):
        fetcher.poll()


def test_a_response_larger_than_the_bound_is_refused() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        conn = _Connection(server.getsockname())
        peer, _ = server.accept()
        peer.sendall(struct.pack(">i", 1 << 30))
        conn.sock.setblocking(True)
        with pytest.raises(FetchUnavailable, match="announced a response of"):
            conn.receive()
        conn.close()
        peer.close()
    finally:
        server.close()


def test_decoding_a_million_records_makes_numpy_columns_not_objects() -> None:
    rows = [(None, b'{"k":%d}' % (i % 1000)) for i in range(20_000)]
    data = b"".join(batch(i, rows) for i in range(0, 1_000_000, 20_000))
    got = decode(data)
    assert len(got) == 1_000_000 and isinstance(got.offsets, np.ndarray)
    assert got.offsets[-1] == 999_999 and got.value_lengths.min() >= 7


def test_a_count_or_control_batch_that_lies_raises_corrupt_batch_and_never_allocates_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    good = bytearray(batch(0, [(None, b"abc")] * 3))
    good[57:61] = struct.pack(">i", 2**31 - 1)  # the record count, last header field
    with pytest.raises(CorruptBatch, match="more records than its bytes hold"):
        decode(bytes(good))
    marker = bytearray(control(5, producer_id=9, commit=False))
    cut = bytes(marker[:61]) + b"\x02"  # a marker whose record is cut short
    cut = cut[:8] + struct.pack(">i", len(cut) - 12) + cut[12:]
    with pytest.raises(CorruptBatch, match="cut short"):
        decode(batch(0, [(None, b"x")], attributes=0x10, producer_id=9) + cut, aborted=[(9, 0)])


def test_without_the_compiled_decoding_a_fetch_is_unsupported_so_librdkafka_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "lockgate.connectors.kafka.framing", None)
    with pytest.raises(UnsupportedBatch, match="compiled record decoding is unavailable"):
        decode(batch(0, [(None, b"abc")]))


def forged(base_offset: int, deltas: list[int], last: int | None = None) -> bytes:
    """An uncompressed batch whose records claim ``deltas``; its header's last offset
    delta is ``last``, by default what agrees with the count (all the broker checks)."""
    body = b"".join(record(d, i, None, b'{"i": %d}' % i) for i, d in enumerate(deltas))
    after_length = struct.pack(
        ">ibIhiqqqhii",
        0,
        2,
        0,
        0,
        len(deltas) - 1 if last is None else last,
        1_000,
        1_000,
        -1,
        0,
        0,
        len(deltas),
    )
    return struct.pack(">qi", base_offset, len(after_length) + len(body)) + after_length + body


@pytest.mark.parametrize("deltas", [[0, 1, 1_000_000], [0, 2, 1], [0, 1, 1], [0, -1, 2], [3, 1, 2]])
def test_a_batch_whose_offsets_do_not_increase_inside_its_range_is_refused_alone(
    deltas: list[int],
) -> None:
    """Issue 37 item 2: the records of a batch claiming offsets outside its header's
    range, or not strictly increasing, are never decoded; the batches around it are."""
    data = batch(0, [(None, b"a%d" % i) for i in range(3)]) + forged(3, deltas)
    data += batch(6, [(None, b"c%d" % i) for i in range(2)])
    out = decode(data)
    assert out.values() == [b"a0", b"a1", b"a2", b"c0", b"c1"]
    assert out.offsets.tolist() == [0, 1, 2, 6, 7]
    assert [(r.base_offset, r.last_offset, r.count) for r in out.refused] == [(3, 5, 3)]
    assert out.refused[0].location == "t[0]@3"
    assert out.next_offset == 8


def test_a_compacted_batch_with_gaps_inside_its_range_is_read() -> None:
    """Compaction leaves gaps inside a batch's range; its offsets still increase."""
    out = decode(forged(10, [0, 2], last=2) + batch(13, [(None, b"x")]))
    assert out.offsets.tolist() == [10, 12, 13]
    assert not out.refused


def test_gzip_is_expanded_with_a_bound_and_a_budget_per_fetch() -> None:
    """Issue 37 item 7: a gzip batch expanding past ``max_batch_bytes`` is refused (never
    expanded whole); once the expanded batches reach twice the bound, the rest is left
    for the next fetch (``next_offset`` at the first batch left)."""
    small = [(None, b"v" * 4_000)]
    bomb = [(None, b"\x00" * 200_000)]
    pieces = [batch(i, bomb if i == 1 else small, compress=True) for i in range(6)]
    data = b"".join(pieces)
    out = decode_partition("t", 0, data, 0, None, None, True, max_batch_bytes=10_000)
    assert [(r.base_offset, "expands to more than 10000" in r.reason) for r in out.refused] == [
        (1, True)
    ]
    assert out.offsets.tolist() == [0, 2, 3, 4]
    assert out.next_offset == 5
    # the next fetch starts at the batch left
    again = decode_partition("t", 0, pieces[5], 5, None, None, True, max_batch_bytes=10_000)
    assert again.offsets.tolist() == [5] and not again.refused

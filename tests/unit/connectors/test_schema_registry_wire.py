"""The Confluent wire format (``lockgate.connectors.schema_registry.wire``): framing
agrees byte for byte with confluent-kafka's serializers, and every malformed header is
refused with a reason (the bad-input rule: a malformed record is reported, never
guessed at)."""

from __future__ import annotations

import io

import pytest
from confluent_kafka.schema_registry.common import serde

from lockgate.connectors.schema_registry import wire

INDEXES = [[0], [1], [0, 0], [2, 5], [1, 0, 3], [200], [0, 70000]]


@pytest.mark.parametrize("indexes", INDEXES)
def test_message_indexes_are_written_as_confluent_kafka_writes_them(indexes) -> None:
    theirs = io.BytesIO()
    serde.SchemaId._encode_varints(theirs, indexes, zigzag=True)
    assert wire.encode_message_indexes(indexes) == theirs.getvalue()


@pytest.mark.parametrize("indexes", INDEXES)
def test_message_indexes_read_back_as_confluent_kafka_reads_them(indexes) -> None:
    framed = wire.frame(42, b"payload", indexes)
    read, at = wire.decode_message_indexes(framed)
    assert read == indexes
    assert framed[at:] == b"payload"
    their_buf = io.BytesIO(framed[wire.HEADER_BYTES :])
    assert serde.SchemaId._read_index_array(their_buf, zigzag=True) == indexes


def test_the_schema_id_is_big_endian_after_the_magic_byte() -> None:
    framed = wire.frame(0x01020304, b"x")
    assert framed[:5] == b"\x00\x01\x02\x03\x04"
    assert wire.schema_id_of(framed) == 0x01020304
    assert wire.schema_id_of(wire.frame(2**32 - 1, b"")) == 2**32 - 1


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "shorter than the 5-byte header"),
        (b"\x00\x00\x00\x01", "shorter than the 5-byte header"),
        (b'{"a": 1}', "not the Schema Registry wire format's magic byte 0"),
        (b"\x01" + bytes(16) + b"x", "first byte is 1"),
    ],
)
def test_a_value_that_is_not_framed_is_refused_with_the_reason(value, reason) -> None:
    with pytest.raises(wire.WireFormatError, match=reason):
        wire.schema_id_of(value)


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        (b"\x80", "end inside a varint"),
        (b"\x04\x02", "end inside a varint"),  # two indexes announced, one given
        (b"\x03", "negative"),  # a count of -2
        (b"\x80" * 11, "longer than 10 bytes"),
        (b"\x82\x01", "at most 64"),  # 65 indexes announced
        (b"\x02\x01", "negative Protobuf message index"),
    ],
)
def test_cut_or_hostile_message_indexes_are_refused(tail, reason) -> None:
    with pytest.raises(wire.WireFormatError, match=reason):
        wire.decode_message_indexes(b"\x00\x00\x00\x00\x01" + tail)


@pytest.mark.parametrize("bad", [-1, 2**32, True, 1.0, "1"])
def test_frame_refuses_a_schema_id_out_of_range(bad) -> None:
    with pytest.raises(ValueError, match="schema id"):
        wire.frame(bad, b"")


@pytest.mark.parametrize("bad", [[], [-1], [True], ["0"]])
def test_encode_refuses_bad_message_indexes(bad) -> None:
    with pytest.raises(ValueError, match="message indexes"):
        wire.encode_message_indexes(bad)

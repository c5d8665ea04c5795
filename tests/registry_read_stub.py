"""A stub Schema Registry and helpers for the registry decoders' unit tests
(``test_registry_read_hostile.py``; also imported by its child processes)."""

from __future__ import annotations

import json

from lockgate.connectors.schema_registry.client import RegisteredSchema, Schema
from lockgate.connectors.schema_registry.formats import RegistryDecoder, RegistryFormat


def zigzag(n):
    """n as an Avro long (zigzag varint), n taken modulo 2**64."""
    n = ((n << 1) ^ (n >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


class Stub:
    """A registry holding one schema text (with ``references``) under every id."""

    redacted_url = "http://***@registry.invalid:8081"

    def __init__(self, text, schema_type="AVRO", references=(), subject=None):
        self.text, self.schema_type = text, schema_type
        self.references, self.subject = tuple(references), subject
        self.asked = []

    def version(self, subject, version):
        return None  # no subject: a reference to one is not in the registry

    def schema(self, schema_id):
        self.asked.append(schema_id)
        return RegisteredSchema(
            schema_id, Schema(self.text, self.schema_type, self.references), self.subject
        )


def decoder(writer, schema=None, reader=None, fmt="avro", schema_type="AVRO", registry=None):
    text = writer if isinstance(writer, str) else json.dumps(writer)
    return RegistryDecoder(
        registry or Stub(text, schema_type),
        value=RegistryFormat(fmt, reader),
        plain_format=fmt,
        key=None,
        key_field=None,
        timestamp_field=None,
        schema=schema,
        max_record_bytes=1 << 25,
    )


def decode(d, values):
    """(the batch, [(index, error, schema_id)] of the malformed records)."""
    bad = []
    batch = d.decode(
        values,
        lambda: [None] * len(values),
        lambda: ([0] * len(values), [0] * len(values)),
        lambda i, raw, error, sid: bad.append((i, error, sid)),
    )
    return batch, bad

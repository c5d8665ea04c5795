"""Hostile registry-encoded records (issue 38 review): a producer's bytes must not crash
or hang the reader.

Each attack runs in a child interpreter (a crash is a signal there, not the end of the
bench) against the registry decoder (:class:`lockgate.connectors.schema_registry.formats.
RegistryDecoder`) with a stub registry holding the attacker's writer schema:

- ``string_length``: a string's length near 2**63 - 1 in a flat Avro record (the
  compiled Arrow reader's bound check wrapped and read outside its buffer: segfault);
- ``deep_recursion``: a 10,000-deep linked list of a recursive schema (fastavro's
  compiled reader overflowed the C stack: segfault);
- ``array_bomb``: an array of nulls claiming 2**62 items (fastavro looped and allocated
  without bound).

The first two must end as one malformed record (the good records around it arrive), the
third as WriterSchemaError (the job fails: the schema is refused); each within 60 s and
1 GiB. It is a case of ``bench/hostile.py`` (``--cases registry_read``) once registered,
and runs on its own, printing one JSON line::

    python bench/hostile_registry_read.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from typing import Any

_PRELUDE = r"""
import json
import pyarrow as pa
from lockgate.connectors.schema_registry.client import RegisteredSchema, Schema
from lockgate.connectors.schema_registry.formats import (
    RegistryDecoder, RegistryFormat, WriterSchemaError,
)


def zigzag(n):
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
    redacted_url = "http://registry.invalid"

    def __init__(self, writer):
        self.text = json.dumps(writer)

    def schema(self, schema_id):
        return RegisteredSchema(schema_id, Schema(self.text))


def run(writer, values, schema=None):
    d = RegistryDecoder(Stub(writer), value=RegistryFormat("avro"), plain_format="avro",
                        key=None, key_field=None, timestamp_field=None, schema=schema,
                        max_record_bytes=1 << 25)
    bad = []
    try:
        batch = d.decode(values, lambda: [None] * len(values),
                         lambda: ([0] * len(values), [0] * len(values)),
                         lambda i, raw, error, sid, **more: bad.append(i))
    except WriterSchemaError:
        print(json.dumps({"outcome": "schema refused"}))
        return
    rows = 0 if batch is None else len(batch) if not hasattr(batch, "num_rows") else batch.num_rows
    print(json.dumps({"outcome": "malformed", "bad": bad, "good": rows}))


H = b"\x00\x00\x00\x00\x07"
"""

_ATTACKS = {
    "string_length": r"""
writer = {"type": "record", "name": "R",
          "fields": [{"name": "s", "type": "string"}, {"name": "a", "type": "long"}]}
good = H + zigzag(2) + b"ab" + zigzag(7)
bad = H + zigzag(2**63 - 1) + b"ab" + zigzag(7)
run(writer, [good, bad, good], pa.schema([("s", pa.string()), ("a", pa.int64())]))
""",
    "deep_recursion": r"""
node = {"type": "record", "name": "Node", "fields": [
    {"name": "v", "type": "long"}, {"name": "next", "type": ["null", "Node"]}]}
good = H + b"\x02\x00"
run(node, [good, H + b"\x02\x02" * 10_000 + b"\x02\x00", good])
""",
    "array_bomb": r"""
writer = {"type": "record", "name": "A",
          "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}]}
run(writer, [H + zigzag(2**62) + b"\x00"])
""",
}
_EXPECTED = {
    "string_length": {"outcome": "malformed", "bad": [1], "good": 2},
    "deep_recursion": {"outcome": "malformed", "bad": [1], "good": 2},
    "array_bomb": {"outcome": "schema refused"},
}


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (1 << 30, 1 << 30))


def _attack(name: str) -> dict[str, Any]:
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PRELUDE + _ATTACKS[name]],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=_limit,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "outcome": "ran past 60 s"}
    seconds = round(time.monotonic() - started, 2)
    if done.returncode != 0:
        return {"ok": False, "exit": done.returncode, "stderr": done.stderr[-500:], "s": seconds}
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return {"ok": got == _EXPECTED[name], **got, "s": seconds}


def registry_read(target: Any = None) -> dict[str, Any]:
    """The case (``target``, the job of ``bench/hostile.py``, is not needed). JSON
    fields: ``ok`` and each attack's outcome."""
    results = {name: _attack(name) for name in _ATTACKS}
    return {"ok": all(r["ok"] for r in results.values()), **results}


if __name__ == "__main__":
    line = {"case": "registry_read", **registry_read()}
    print(json.dumps(line, default=str), flush=True)
    sys.exit(0 if line["ok"] else 1)

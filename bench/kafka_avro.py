"""The Avro case of ``bench/kafka.py``: the same job on Avro records in the Confluent
wire format, their schemas in a Schema Registry.

The input: the records of ``bench/kafka.py`` (keys, event times, the two end markers) as
Avro records of :data:`INPUT_AVRO` (``key`` and ``ts`` as in the JSON case, plus a
``temperature`` double and a ``sensor`` string the job does not use but every reader
decodes), encoded by fastavro's ``schemaless_writer`` and framed (magic byte 0, the
schema id) by ``lockgate.connectors.schema_registry.wire.frame``, the schema registered
under ``<input topic>-value`` with confluent-kafka's ``SchemaRegistryClient``. The
output: ``{"key", "window_start", "count"}`` records in the wire format, each system's
under ``<its output topic>-value``; :func:`result_decoder` reads them back by their
schema ids (fetched from the registry, decoded with fastavro), whichever schema each
system derived and registered.

lockgate's job reads with ``KafkaSource(format="avro", schema_registry=...,
schema=INPUT_ARROW)`` (an Arrow batch per poll and partition) and writes with
``KafkaSink(format="avro", schema_registry=..., schema=OUTPUT_ARROW)``; Flink SQL's with
the ``avro-confluent`` format on both tables (``bench/kafka_flink.py --format
avro-confluent``).
"""

from __future__ import annotations

import io
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from lockgate.connectors.schema_registry.wire import HEADER_BYTES, frame, schema_id_of

DEFAULT_REGISTRY = "http://127.0.0.1:8081/apis/ccompat/v7"
SENSORS = 50

INPUT_AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "namespace": "lgbench.kafka",
    "fields": [
        {"name": "key", "type": "long"},
        {"name": "ts", "type": "long", "doc": "event time, epoch milliseconds"},
        {"name": "temperature", "type": "double"},
        {"name": "sensor", "type": "string"},
    ],
}
INPUT_ARROW = pa.schema(
    [
        pa.field("key", pa.int64(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("temperature", pa.float64(), nullable=False),
        pa.field("sensor", pa.string(), nullable=False),
    ]
)
OUTPUT_ARROW = pa.schema(
    [
        pa.field("key", pa.int64(), nullable=False),
        pa.field("window_start", pa.int64(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
    ]
)


def wait_for_registry(url: str, timeout_s: float = 60.0) -> None:
    """Return once the registry at ``url`` answers ``GET /subjects``; exit saying how to
    start it otherwise."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/subjects", timeout=5) as answer:
                json.load(answer)
                return
        except (OSError, ValueError) as e:  # URLError, refused, a non-JSON answer
            last = str(e)
        time.sleep(0.5)  # bounded polling for a registry still starting
    raise SystemExit(
        f"the schema registry at {url} did not answer GET /subjects within {timeout_s:.0f} s "
        f"({last}); 'bash scripts/services.sh' starts it, --registry names another"
    )


def register_input_schema(url: str, topic: str) -> int:
    """Register :data:`INPUT_AVRO` under ``<topic>-value``; its schema id."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    return int(client.register_schema(f"{topic}-value", Schema(json.dumps(INPUT_AVRO), "AVRO")))


def value_encoder(schema_id: int) -> Callable[[np.ndarray, np.ndarray], list[bytes]]:
    """A function of (keys, event times) giving each record's framed Avro value."""
    parsed = fastavro.parse_schema(INPUT_AVRO)
    write = fastavro.schemaless_writer

    def encode(keys: np.ndarray, ts: np.ndarray) -> list[bytes]:
        out = []
        buf = io.BytesIO()
        for k, t in zip(keys.tolist(), ts.tolist(), strict=True):
            buf.seek(0)
            buf.truncate()
            record = {
                "key": k,
                "ts": t,
                "temperature": 15.0 + (t % 2000) / 100,
                "sensor": f"sensor-{k % SENSORS}",
            }
            write(buf, parsed, record)
            out.append(frame(schema_id, buf.getvalue()))
        return out

    return encode


def result_decoder(url: str) -> Callable[[bytes], tuple[int, int, int]]:
    """A function of an output value giving its ``(key, window_start, count)``: the
    writer's schema fetched from the registry by the value's id (once per id), the
    payload decoded by fastavro."""
    schemas: dict[int, Any] = {}

    def decode(value: bytes) -> tuple[int, int, int]:
        schema_id = schema_id_of(value)
        parsed = schemas.get(schema_id)
        if parsed is None:
            try:
                with urllib.request.urlopen(f"{url}/schemas/ids/{schema_id}", timeout=10) as a:
                    text = json.load(a)["schema"]
            except urllib.error.HTTPError as e:
                raise SystemExit(f"the registry at {url} has no schema id {schema_id}: {e}") from e
            parsed = schemas[schema_id] = fastavro.parse_schema(json.loads(text))
        r = fastavro.schemaless_reader(io.BytesIO(value[HEADER_BYTES:]), parsed)
        return int(r["key"]), int(r["window_start"]), int(r["count"])

    return decode


def delete_subjects(url: str, subjects: list[str]) -> None:
    """Delete this run's subjects (soft, then permanently), those that exist; the names
    carry the run's id, so none is another's."""
    for subject in subjects:
        quoted = urllib.parse.quote(subject, safe="")
        for query in ("", "?permanent=true"):
            request = urllib.request.Request(f"{url}/subjects/{quoted}{query}", method="DELETE")
            try:
                with urllib.request.urlopen(request, timeout=10):
                    pass
            except urllib.error.HTTPError as e:
                if e.code != 404:  # 404: no such subject (the system registered none)
                    print(f"could not delete subject {subject}: {e}", file=sys.stderr)
                break
            except OSError as e:
                print(f"could not delete subject {subject}: {e}", file=sys.stderr)
                break

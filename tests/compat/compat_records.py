"""Every state record lockgate writes, one of each, as this release writes it (issue 40
part 2; docs/savepoint_format.md).

The job cases (compat_job, compat_joins) hold the records a job of built-in sources
and operators keeps; the records of the connectors that need a service (Kafka, Redis,
NATS, PostgreSQL, Delta, Iceberg splits and transactions) and the rest are here: a
state file ``savepoints/<release>/records/records.tree`` holding :func:`examples`
(record name -> one instance with every field set), and ``records.json.gz`` with each
record's version and fields as plain JSON (:func:`canonical`). ``test_compat.py``
decodes every release's file with today's reader, without unpickling, and checks each
record against its stored fields; ``make_savepoints.py records`` writes this release's.
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from lockgate.checkpoint.types import StateHandle
from lockgate.connectors.builtin.collection import CollectionSplit
from lockgate.connectors.builtin.sequence import SequenceSplit
from lockgate.connectors.delta.files import DataFile
from lockgate.connectors.delta.sink import DeltaTransaction
from lockgate.connectors.files.sink import FileTransaction
from lockgate.connectors.files.source import DoneFiles, FileSplit
from lockgate.connectors.iceberg.sink import IcebergTransaction
from lockgate.connectors.kafka.source import KafkaSplit
from lockgate.connectors.kafka.transactions import KafkaTransaction
from lockgate.connectors.nats.jetstream import NatsJetStreamSplit
from lockgate.connectors.postgres.cdc.snapshot import ChunkRange
from lockgate.connectors.postgres.cdc.splits import ChunkSplit, StreamSplit
from lockgate.connectors.postgres.cdc.types import Column
from lockgate.connectors.postgres.sink import PgTransaction
from lockgate.connectors.redis.stream import RedisStreamSplit
from lockgate.core.batch import RowBatch
from lockgate.core.state_records import spec_of
from lockgate.runtime.operators.join.window_join import JoinState
from lockgate.windowing.aggregate_specs import WindowAggregate
from lockgate.windowing.aggregates import Accumulators, WindowAggregation

TREE_FILE = "records.tree"
FIELDS_FILE = "records.json.gz"


def examples() -> dict[str, Any]:
    """Record name -> one instance of it, every optional field set."""
    aggregation = WindowAggregation(
        (WindowAggregate("count", None, "count"), WindowAggregate("sum", "v", "sum_v"))
    )
    column = Column("id", 23, key=True)
    chunk = ChunkRange("public.orders", 100, 200)
    handle = StateHandle("op-1/part-0", 1234, 987654321, mac="ab" * 32)
    data_file = DataFile("day=2026-12-06/part-0.parquet", 4096, {"day": "2026-12-06"}, "{}", 17)
    return {
        "batch.rows": RowBatch(
            [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}],
            np.array([10, 20], dtype=np.int64),
            np.array([0, 2], dtype=np.int8),
        ),
        "files.split": FileSplit("f-3", "/in/day=1/a.jsonl", 7),
        "files.done": DoneFiles(frozenset({"/in/a.jsonl", "/in/b.jsonl"}), bounded=True),
        "files.transaction": FileTransaction(
            "/out/.part-0-4.inprogress", "/out/part-0-4.jsonl", 0, 4, 120, 4096
        ),
        "sequence.split": SequenceSplit("seq-1", 500, 1000, 4, 4000),
        "collection.split": CollectionSplit("c-0", 0, 10, 3),
        "kafka.split": KafkaSplit("orders", 3, 1_234, 5_000),
        "kafka.transaction": KafkaTransaction(
            "lockgate-orders-0-7", 4242, 3, 9, (("out", 0, 12), ("out", 1, 8))
        ),
        "redis.split": RedisStreamSplit("events", "events", "1733480000000-3", "1733480999000-0"),
        "nats.split": NatsJetStreamSplit("ORDERS", "orders.>", 41, 100),
        "postgres.transaction": PgTransaction("lockgate-sink-0-5", 5, "run-7", "orders_out"),
        "postgres_cdc.stream_split": StreamSplit(
            23_456_789,
            23_456_000,
            {"public.orders": (column, Column("note", 25))},
            (ChunkRange("public.orders", None, 100), chunk),
            {0: "1:2:"},
            {1: "3:4:"},
        ),
        "postgres_cdc.chunk_split": ChunkSplit(1, chunk, "5:6:"),
        "postgres_cdc.chunk_range": chunk,
        "postgres_cdc.column": column,
        "delta.transaction": DeltaTransaction("app:0:run-7", 0, "stem-7", 12, [data_file]),
        "delta.data_file": data_file,
        "iceberg.transaction": IcebergTransaction(
            "sink-1", "run-7", 1, "tok-9", ["s3://w/t/data/a.parquet"], 250, 12
        ),
        "window.aggregate": WindowAggregate("sum", "v", "sum_v"),
        "window.aggregation": aggregation,
        "window.accumulators": Accumulators(
            aggregation,
            [(np.array([1, 2], np.int64),), (np.array([1.5, 2.5]), np.array([1, 2], np.int64))],
            [None, pa.float64()],
        ),
        "window_join.state": JoinState(
            2,
            [(np.array([0, 1], np.int64), pa.table({"k": [1, 2], "v": [3, 6]}))],
            [(np.array([1], np.int64), pa.table({"k": [2], "w": [10]}))],
        ),
        "checkpoint.state_handle": StateHandle(
            "op-1/part-0.chk", 2048, 123456789, (handle,), mac="cd" * 32
        ),
    }


def canonical(value: Any) -> Any:
    """``value`` as plain JSON: a record as its name, version and fields; arrays, Arrow
    data and bytes tagged with their types."""
    spec = spec_of(type(value))
    if spec is not None:
        fields = spec.fields_of(value)
        return {
            "record": spec.name,
            "version": spec.version,
            "fields": {k: canonical(v) for k, v in sorted(fields.items())},
        }
    if isinstance(value, np.ndarray):
        return {"ndarray": str(value.dtype), "values": value.tolist()}
    if isinstance(value, (pa.Table, pa.RecordBatch)):
        return {"arrow": str(value.schema), "rows": value.to_pylist()}
    if isinstance(value, (pa.DataType, pa.Schema)):
        return {"arrow_type": str(value)}
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, (frozenset, set)):
        return {"set": sorted((canonical(v) for v in value), key=json.dumps)}
    if isinstance(value, dict):
        return {"dict": [[canonical(k), canonical(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"no canonical form for {type(value).__qualname__}: {value!r}")


def read_fields(folder: Path) -> dict[str, Any]:
    with gzip.open(folder / FIELDS_FILE, "rt", encoding="utf-8") as f:
        return json.load(f)


def write(folder: Path) -> None:
    """This release's records file and their fields into ``folder``."""
    from lockgate.checkpoint.state_tree import encode_tree

    values = examples()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TREE_FILE).write_bytes(encode_tree(values))
    with gzip.open(folder / FIELDS_FILE, "wt", encoding="utf-8") as f:
        json.dump({name: canonical(v) for name, v in sorted(values.items())}, f, indent=1)

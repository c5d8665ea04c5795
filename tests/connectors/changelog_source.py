"""A changelog for the tests of the sinks that apply changes (PostgresSink upsert, DeltaSink
merge): a seeded generator of a consistent changelog (inserts, updates, key-changing
updates, deletes carrying only their key, bursts of changes to one key, re-inserts), the
oracle that applies it to a dict, and a one-split source emitting it as Arrow batches with
their row kinds (``lockgate.core.batch.with_kinds``), checkpointed by position.

Every row carries ``seq``, the index of the change that wrote it, so a test can see in
what order changes reached a target (and whether one reached it twice).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa

from lockgate.connectors.base import InputStatus, ReaderOutput, Source, SourceReader
from lockgate.core.batch import with_kinds
from lockgate.core.row_kind import RowKind
from lockgate.runtime.context import RuntimeContext

SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("amount", pa.int64()), ("seq", pa.int64())]
)
#: the PostgreSQL columns of SCHEMA
PG_COLUMNS = "id bigint PRIMARY KEY, name text, amount bigint, seq bigint"

Change = tuple[RowKind, dict[str, Any]]


def make_changelog(seed: int, n: int, keys: int) -> list[Change]:
    """About ``n`` changes of a table whose keys come from ``range(keys)``: each is valid
    for the table as the changes before it left it (an insert of an absent key, an update
    or delete of a present one)."""
    rng = random.Random(seed)
    table: dict[int, dict[str, Any]] = {}
    out: list[Change] = []

    def row(key: int, note: str) -> dict[str, Any]:
        return {"id": key, "name": f"{note}-{key}-{len(out)}", "amount": rng.randrange(10**6)}

    def emit(kind: RowKind, r: dict[str, Any]) -> None:
        out.append((kind, {**r, "seq": len(out)}))

    def absent() -> int | None:
        free = [k for k in rng.sample(range(keys), min(keys, 8)) if k not in table]
        return free[0] if free else None

    while len(out) < n:
        op = rng.random()
        present = list(table)
        if op < 0.30 or not present:  # insert (a key never seen, or a re-insert)
            key = absent()
            if key is None:
                continue
            table[key] = row(key, "ins")
            emit(RowKind.INSERT, table[key])
        elif op < 0.60:  # update in place: -U old, +U new
            key = rng.choice(present)
            emit(RowKind.UPDATE_BEFORE, table[key])
            table[key] = row(key, "upd")
            emit(RowKind.UPDATE_AFTER, table[key])
        elif op < 0.70:  # a primary-key change: -U old key, +U new key
            key, new = rng.choice(present), absent()
            if new is None:
                continue
            emit(RowKind.UPDATE_BEFORE, table.pop(key))
            table[new] = row(new, "moved")
            emit(RowKind.UPDATE_AFTER, table[new])
        elif op < 0.85:  # delete; half of them carry only the key (as Debezium's may)
            key = rng.choice(present)
            old = table.pop(key)
            if rng.random() < 0.5:
                old = {"id": key, "name": None, "amount": None}
            emit(RowKind.DELETE, old)
        else:  # a burst: several updates of one key, then maybe a delete and re-insert
            key = rng.choice(present)
            for _ in range(rng.randrange(2, 6)):
                emit(RowKind.UPDATE_BEFORE, table[key])
                table[key] = row(key, "burst")
                emit(RowKind.UPDATE_AFTER, table[key])
            if rng.random() < 0.5:
                emit(RowKind.DELETE, table.pop(key))
                table[key] = row(key, "again")
                emit(RowKind.INSERT, table[key])
    return out


def oracle(changes: list[Change]) -> dict[int, dict[str, Any]]:
    """The table after applying ``changes`` in order (Flink's upsert semantics)."""
    table: dict[int, dict[str, Any]] = {}
    for kind, r in changes:
        if kind.is_addition:
            table[r["id"]] = r
        else:
            table.pop(r["id"], None)
    return table


def oracle_rows(changes: list[Change]) -> list[tuple[Any, ...]]:
    """The oracle's rows as sorted (id, name, amount, seq) tuples."""
    return sorted((r["id"], r["name"], r["amount"], r["seq"]) for r in oracle(changes).values())


def to_batch(changes: list[Change]) -> pa.RecordBatch:
    """``changes`` as one Arrow batch with their kinds."""
    columns = {name: [r.get(name) for _, r in changes] for name in SCHEMA.names}
    batch = pa.RecordBatch.from_pydict(columns, schema=SCHEMA)
    kinds = np.array([int(k) for k, _ in changes], dtype=np.int8)
    result = with_kinds(batch, kinds)
    assert isinstance(result, pa.RecordBatch)
    return result


class ChangelogSource(Source):
    """Emits ``changes`` as Arrow batches of ``batch_size`` changes with their kinds, from
    one split (subtask 0 reads it; the others end at once), checkpointing its position."""

    bounded = True
    default_name = "changelog"

    def __init__(self, changes: list[Change], batch_size: int = 50) -> None:
        self.changes = changes
        self.batch_size = batch_size

    def create_splits(self, parallelism: int) -> list[Any]:
        return [{"split": "changes", "position": 0}]

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        return _Reader(self)


class _Reader(SourceReader):
    def __init__(self, source: ChangelogSource) -> None:
        self.source = source
        self.position: int | None = None  # None: no split

    def add_splits(self, splits: list[Any]) -> None:
        for split in splits:
            self.position = int(split["position"])

    def poll(self, output: ReaderOutput) -> InputStatus:
        changes = self.source.changes
        if self.position is None or self.position >= len(changes):
            if self.position is not None:
                output.split_finished("changes")
                self.position = None
            return InputStatus.END_OF_INPUT
        end = min(len(changes), self.position + self.source.batch_size)
        output.emit_from_split("changes", to_batch(changes[self.position : end]))
        self.position = end
        self.pending_records = len(changes) - end
        return InputStatus.MORE_AVAILABLE

    def snapshot_positions(self) -> list[Any]:
        if self.position is None:
            return []
        return [{"split": "changes", "position": self.position}]

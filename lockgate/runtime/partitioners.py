"""Partitioners: which output channel(s) each record of a batch goes to.

A partitioner spec is picklable configuration; ``create(num_channels, subtask)``
makes the per-producer instance. ``partition(batch)`` returns ``(channel,
batch)`` pairs. Key-group partitioning is vectorized: keys are hashed a batch
at a time and the batch is split with one ``take`` per target channel.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from ..graph.key_groups import key_groups_of_column, key_groups_of_keys, subtasks_for_key_groups
from .batch import Batch, RowBatch, num_rows, take, to_rows


class KeySelector:
    """Extracts keys: a column name, several column names (a tuple key) or a function."""

    def __init__(self, key: str | Sequence[str] | Callable[[Any], Any]) -> None:
        if isinstance(key, str):
            self.columns: tuple[str, ...] | None = (key,)
            self.fn: Callable[[Any], Any] | None = None
        elif isinstance(key, (list, tuple)) and key and all(isinstance(k, str) for k in key):
            self.columns = tuple(key)
            self.fn = None
        else:
            self.columns = None
            self.fn = key  # type: ignore[assignment]

    def describe(self) -> str:
        if self.columns is not None:
            return ", ".join(repr(c) for c in self.columns)
        return getattr(self.fn, "__name__", repr(self.fn))

    def keys(self, batch: Batch, rows: list[Any] | None = None) -> list[Any]:
        """One key per record."""
        cols = self.columns
        if cols is None:
            fn = self.fn
            assert fn is not None
            return [fn(r) for r in (rows if rows is not None else to_rows(batch))]
        if isinstance(batch, pa.RecordBatch):
            if len(cols) == 1:
                return _column(batch, cols[0]).to_pylist()
            return list(zip(*(_column(batch, c).to_pylist() for c in cols)))
        rows = batch.rows
        try:
            if len(cols) == 1:
                c = cols[0]
                return [r[c] for r in rows]
            return [tuple(r[c] for c in cols) for r in rows]
        except (KeyError, TypeError) as e:
            raise KeyError(
                f"key_by({self.describe()}) needs records that are dicts with those fields; "
                f"got {rows[0]!r}" if rows else "key_by found no field"
            ) from e

    def key_groups(self, batch: Batch, max_parallelism: int) -> np.ndarray:
        cols = self.columns
        if cols is not None and len(cols) == 1 and isinstance(batch, pa.RecordBatch):
            return key_groups_of_column(_column(batch, cols[0]), max_parallelism)
        return key_groups_of_keys(self.keys(batch), max_parallelism)


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        raise KeyError(
            f"key_by({name!r}): the records have no field {name!r}; their fields are "
            f"{batch.schema.names}"
        )
    return batch.column(idx)


class Partitioner:
    def partition(self, batch: Batch) -> list[tuple[int, Batch]]:
        raise NotImplementedError


class PartitionerSpec:
    """Picklable description of a partitioner; ``name`` shows in plans and errors."""

    name = "partitioner"
    #: whether the producer→consumer channels are one-to-one (needs equal parallelism)
    pointwise = False

    def create(self, num_channels: int, subtask_index: int) -> Partitioner:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


class _Forward(Partitioner):
    def partition(self, batch: Batch) -> list[tuple[int, Batch]]:
        return [(0, batch)]


class ForwardPartitioning(PartitionerSpec):
    """Subtask i sends to subtask i (equal parallelism)."""

    name = "forward"
    pointwise = True

    def create(self, num_channels: int, subtask_index: int) -> Partitioner:
        return _Forward()


class _RoundRobin(Partitioner):
    def __init__(self, n: int, start: int) -> None:
        self.n = n
        self.next = start % n

    def partition(self, batch: Batch) -> list[tuple[int, Batch]]:
        target = self.next
        self.next = (target + 1) % self.n
        return [(target, batch)]


class RebalancePartitioning(PartitionerSpec):
    """Batches go round-robin to every consumer subtask."""

    name = "rebalance"

    def create(self, num_channels: int, subtask_index: int) -> Partitioner:
        return _RoundRobin(num_channels, subtask_index)


class _Broadcast(Partitioner):
    def __init__(self, n: int) -> None:
        self.n = n

    def partition(self, batch: Batch) -> list[tuple[int, Batch]]:
        return [(i, batch) for i in range(self.n)]


class BroadcastPartitioning(PartitionerSpec):
    """Every record goes to every consumer subtask."""

    name = "broadcast"

    def create(self, num_channels: int, subtask_index: int) -> Partitioner:
        return _Broadcast(num_channels)


class _KeyGroups(Partitioner):
    def __init__(self, selector: KeySelector, max_parallelism: int, n: int) -> None:
        self.selector = selector
        self.max_parallelism = max_parallelism
        self.n = n

    def partition(self, batch: Batch) -> list[tuple[int, Batch]]:
        if num_rows(batch) == 0:
            return []
        # Computed at parallelism 1 too: a key that cannot be hashed stably must fail
        # now, not when the job is later rescaled.
        groups = self.selector.key_groups(batch, self.max_parallelism)
        if self.n == 1:
            return [(0, batch)]
        targets = subtasks_for_key_groups(groups, self.n, self.max_parallelism)
        return split_by_target(batch, targets, self.n)


def split_by_target(batch: Batch, targets: np.ndarray, n: int) -> list[tuple[int, Batch]]:
    """Split ``batch`` into one batch per target channel, keeping record order."""
    first = int(targets[0])
    if (targets == first).all():
        return [(first, batch)]
    order = np.argsort(targets, kind="stable")
    counts = np.bincount(targets, minlength=n)
    out: list[tuple[int, Batch]] = []
    start = 0
    if isinstance(batch, pa.RecordBatch):
        taken = batch.take(pa.array(order, type=pa.int64()))
        for t in range(n):
            c = int(counts[t])
            if c:
                out.append((t, taken.slice(start, c)))
                start += c
        return out
    rows = batch.rows
    ts = batch.timestamps
    ordered = order.tolist()
    for t in range(n):
        c = int(counts[t])
        if c:
            part = ordered[start : start + c]
            out.append((t, RowBatch([rows[i] for i in part],
                                    None if ts is None else ts[order[start : start + c]])))
            start += c
    return out


class KeyGroupPartitioning(PartitionerSpec):
    """Each record goes to the subtask owning its key's key group (key_by)."""

    name = "hash"

    def __init__(self, selector: KeySelector, max_parallelism: int) -> None:
        self.selector = selector
        self.max_parallelism = max_parallelism

    def create(self, num_channels: int, subtask_index: int) -> Partitioner:
        return _KeyGroups(self.selector, self.max_parallelism, num_channels)


__all__ = [
    "BroadcastPartitioning",
    "ForwardPartitioning",
    "KeyGroupPartitioning",
    "KeySelector",
    "Partitioner",
    "PartitionerSpec",
    "RebalancePartitioning",
    "split_by_target",
    "take",
]

"""Partitioners: which output channel(s) each record of a batch goes to.

A partitioner spec is picklable configuration; ``create(num_channels, subtask)``
makes the per-producer instance. ``partition(batch)`` returns ``(channel,
batch)`` pairs. Key-group partitioning is vectorized: keys are hashed a batch
at a time and the batch is split with one ``take`` per target channel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import LockgateError, UnsupportedKeyError, UserFunctionError
from .batch import Batch, RowBatch, num_rows, take, to_rows
from .excerpt import excerpt
from .key_groups import key_groups_of_column, key_groups_of_keys, subtasks_for_key_groups
from .key_hash import canonical_keys


class KeyExtractionError(LockgateError, KeyError):
    """``key_by`` could not take the key of a record (a record without the key field, or
    a key selector that raised: ``error``, the user's exception); the message quotes the
    record (truncated)."""

    def __init__(self, message: str, error: BaseException | None = None) -> None:
        super().__init__(message)
        self.error = error

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.error))


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
        """One key per record. A record the selector cannot take a key from raises
        :class:`KeyExtractionError` quoting it."""
        cols = self.columns
        if cols is None:
            fn = self.fn
            assert fn is not None
            records = rows if rows is not None else to_rows(batch)
            keys: list[Any] = []
            append = keys.append
            try:
                for r in records:
                    append(fn(r))
            except Exception as e:
                raise KeyExtractionError(
                    f"key_by({self.describe()}): the key selector raised "
                    f"{type(e).__name__}: {e} for the record {excerpt(records[len(keys)])}",
                    e,
                ) from e
            return keys
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
        except (KeyError, TypeError, IndexError):
            pass
        raise self._field_error(rows)

    def state_keys(self, batch: Batch, rows: list[Any] | None = None) -> list[Any]:
        """:meth:`keys` as keyed state holds them: every float NaN (also inside a tuple
        key) is one and the same key object, as Java's ``Double.equals`` has it, so all
        NaN records share one state entry. Non-float key columns cost nothing extra."""
        keys = self.keys(batch, rows)
        cols = self.columns
        if cols is not None and isinstance(batch, pa.RecordBatch):
            schema = batch.schema
            if not any(pa.types.is_floating(schema.field(c).type) for c in cols):
                return keys
        return canonical_keys(keys)

    def _field_error(self, rows: list[Any]) -> KeyExtractionError:
        """The error naming the first record without the key fields."""
        cols = self.columns or ()
        for r in rows:
            try:
                for c in cols:
                    r[c]
            except (KeyError, TypeError, IndexError) as e:
                fields = ", ".join(repr(c) for c in cols)
                return KeyExtractionError(
                    f"key_by({self.describe()}) needs records with the field(s) {fields}, "
                    f"but got the {type(r).__name__} record {excerpt(r)} "
                    f"({type(e).__name__}: {e}); check what the operator before key_by "
                    "returns"
                )
        return KeyExtractionError(f"key_by({self.describe()}) could not take the keys")

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


def attribute_key_errors(
    write: Callable[[Batch], None], partitioner: Any, producer: Any
) -> Callable[[Batch], None]:
    """``write`` of a record writer, such that a key_by failure in its partitioner (a
    record without the key field, an unhashable key) names ``producer``, the operator
    whose records it is, with the key_by's error as the cause. Other partitioners get
    ``write`` itself (no extra call per batch)."""
    if not isinstance(partitioner, _KeyGroups):
        return write

    def write_naming_producer(batch: Batch) -> None:
        try:
            write(batch)
        except (KeyExtractionError, UnsupportedKeyError) as e:
            raise UserFunctionError(
                producer.name, producer.ctx.subtask_index, producer.ctx.parallelism, e
            ) from e

    return write_naming_producer


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
    kinds = batch.kinds
    ordered = order.tolist()
    for t in range(n):
        c = int(counts[t])
        if c:
            part = ordered[start : start + c]
            picked = order[start : start + c]
            out.append(
                (
                    t,
                    RowBatch(
                        [rows[i] for i in part],
                        None if ts is None else ts[picked],
                        None if kinds is None else kinds[picked],
                    ),
                )
            )
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
    "KeyExtractionError",
    "KeyGroupPartitioning",
    "KeySelector",
    "Partitioner",
    "PartitionerSpec",
    "RebalancePartitioning",
    "attribute_key_errors",
    "split_by_target",
    "take",
]

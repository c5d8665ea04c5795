"""CollectionSource: records from an in-memory collection (tests, examples)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.batch import RowBatch
from ...core.row_kind import Change
from ...core.state_records import state_record
from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import InputStatus, ReaderOutput, Source, SourceReader


@state_record("collection.split")
@dataclass
class CollectionSplit:
    split_id: str
    start: int
    end: int
    next: int


class CollectionSource(Source):
    """Emits ``items`` in order (one contiguous slice per subtask). The items are
    shipped with the job, so they must be picklable. Bounded.

    Items that are ``lg.Change(kind, record)`` make a changelog: each such item is
    emitted as its record with its kind (the others as inserts), all from one split, in
    order (one subtask reads it; ``key_by`` the key before anything reorders)."""

    default_name = "collection"

    def __init__(self, items: Iterable[Any], batch_size: int = 4096) -> None:
        if isinstance(items, (str, bytes, dict)):
            raise ConfigurationError(
                f"CollectionSource needs a list (or other iterable) of records, got a "
                f"{type(items).__name__}; wrap a single record in a list"
            )
        try:
            self.items = list(items)
        except TypeError as e:
            raise ConfigurationError(
                f"CollectionSource needs an iterable of records, got {items!r}"
            ) from e
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(
                f"CollectionSource batch_size must be >= 1, got {batch_size!r}"
            )
        self.batch_size = batch_size
        #: whether an item is an lg.Change (the stream is then a changelog)
        self.changes = any(type(item) is Change for item in self.items)

    def create_splits(self, parallelism: int) -> list[CollectionSplit]:
        n = len(self.items)
        if getattr(self, "changes", False):  # a changelog is one ordered split
            return [CollectionSplit("collection-0", 0, n, 0)]
        return [
            CollectionSplit(
                f"collection-{i}",
                n * i // parallelism,
                n * (i + 1) // parallelism,
                n * i // parallelism,
            )
            for i in range(parallelism)
        ]

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        return _CollectionReader(self.items, self.batch_size, getattr(self, "changes", False))


class _CollectionReader(SourceReader):
    def __init__(self, items: list[Any], batch_size: int, changes: bool = False) -> None:
        self.items = items
        self.batch_size = batch_size
        self.changes = changes
        self.splits: list[CollectionSplit] = []

    def add_splits(self, splits: list[CollectionSplit]) -> None:
        self.splits.extend(s for s in splits if s.next < s.end)

    def poll(self, output: ReaderOutput) -> InputStatus:
        if not self.splits:
            return InputStatus.END_OF_INPUT
        s = self.splits[0]
        stop = min(s.end, s.next + self.batch_size)
        items = self.items[s.next : stop]
        if self.changes:
            kinds = np.array(
                [int(x.kind) if type(x) is Change else 0 for x in items], dtype=np.int8
            )
            items = [x.value if type(x) is Change else x for x in items]
            output.emit_from_split(s.split_id, RowBatch(items, None, kinds))
        else:
            output.emit_from_split(s.split_id, RowBatch(items))
        s.next = stop
        if s.next >= s.end:
            self.splits.pop(0)
            output.split_finished(s.split_id)
        return InputStatus.MORE_AVAILABLE if self.splits else InputStatus.END_OF_INPUT

    def snapshot_positions(self) -> list[CollectionSplit]:
        return [CollectionSplit(s.split_id, s.start, s.end, s.next) for s in self.splits]

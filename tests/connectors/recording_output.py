"""A ReaderOutput that records what a source reader emits, for reader-level tests."""

from __future__ import annotations

from typing import Any

from lockgate.connectors.base import ReaderOutput
from lockgate.core.batch import Batch, RowBatch


class RecordingOutput(ReaderOutput):
    """Records what a reader emits: batches with their split, dead letters, finished splits."""

    def __init__(self) -> None:
        self.batches: list[tuple[Any, list[Any]]] = []
        self.dead: list[dict[str, Any]] = []
        self.finished: list[Any] = []

    def emit(self, batch: Batch) -> None:
        self.emit_from_split(None, batch)

    def emit_from_split(self, split_id: Any, batch: Batch) -> None:
        assert isinstance(batch, RowBatch), "records travel as a RowBatch"
        self.batches.append((split_id, list(batch.rows)))

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        self.dead.append(record)

    def split_finished(self, split_id: Any) -> None:
        self.finished.append(split_id)

    @property
    def records(self) -> list[Any]:
        return [r for _, rows in self.batches for r in rows]

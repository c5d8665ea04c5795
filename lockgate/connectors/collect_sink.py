"""CollectSink: keeps records in memory and returns them with the job result."""

from __future__ import annotations

from typing import Any

from ..core.batch import Batch, to_rows
from ..runtime.context import RuntimeContext
from .base import Sink, SinkWriter


class CollectSink(Sink):
    """Used by ``execute_and_collect``; the records come back in ``result.sink_results``.

    Exactly-once: the records collected so far are part of each checkpoint and are
    restored with it, so after failures the result holds every record once (M-X1)."""

    default_name = "collect"

    def create_writer(self, ctx: RuntimeContext) -> SinkWriter:
        return _Collect()


class _Collect(SinkWriter):
    def __init__(self) -> None:
        self.records: list[Any] = []

    def write(self, batch: Batch) -> None:
        self.records.extend(to_rows(batch))

    def initialize_state(self, states: list[Any]) -> None:
        for records in states:
            self.records.extend(records)

    def snapshot_state(self, checkpoint_id: int) -> list[Any]:
        return list(self.records)  # later records do not change the copy

    def result(self) -> list[Any]:
        return self.records

"""CollectSink: keeps records in memory and returns them with the job result."""

from __future__ import annotations

from typing import Any

from ...core.batch import Batch, kinds_of, to_rows
from ...core.row_kind import Change, RowKind
from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import Sink, SinkWriter


class CollectSink(Sink):
    """Used by ``execute_and_collect``; the records come back in ``result.sink_results``.

    Exactly-once: the records collected so far are part of each checkpoint and are
    restored with it, so after failures the result holds every record once (M-X1)."""

    default_name = "collect"

    def __init__(self, *, changelog: bool = False) -> None:
        """``changelog=True``: the sink takes a changelog and collects every record as an
        ``lg.Change(kind, record)`` (inserts too), in the order it came; otherwise an
        update or delete reaching it fails the job (it would be taken for a new row)."""
        if not isinstance(changelog, bool):
            raise ConfigurationError(
                f"CollectSink(changelog=...) takes True or False, got {changelog!r}"
            )
        self.changelog = changelog

    @property
    def accepts_changes(self) -> bool:
        return self.changelog

    def create_writer(self, ctx: RuntimeContext) -> SinkWriter:
        return _CollectChanges() if self.changelog else _Collect()


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


class _CollectChanges(_Collect):
    def write(self, batch: Batch) -> None:
        kinds = kinds_of(batch)
        rows = to_rows(batch)
        if kinds is None:
            self.records.extend(Change(RowKind.INSERT, r) for r in rows)
        else:
            all_kinds = tuple(RowKind)
            self.records.extend(Change(all_kinds[k], r) for k, r in zip(kinds.tolist(), rows))

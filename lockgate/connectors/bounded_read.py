"""Read a bounded :class:`~lockgate.connectors.base.Source` to its end, in the calling
thread, as one Arrow table: a lookup table made of any bounded source (files, a
collection) is read by the source's own reader, so it decodes exactly as the source
does in a job (formats, CSV types, Parquet projection, object stores)."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa

from ..core.batch import Batch, concat, num_rows, to_arrow
from ..core.clock import Clock, SystemClock
from ..errors import ConfigurationError, MalformedRecordError
from ..runtime.context import RuntimeContext
from .base import InputStatus, ReaderOutput, Source
from .lookup_source import LoadedTable, LookupSource

#: how long a reader may have nothing available before the read gives up (ms)
DEFAULT_STALL_MS = 60_000.0


class _Collect(ReaderOutput):
    def __init__(self, what: str) -> None:
        self.what = what
        self.batches: list[Batch] = []

    def emit(self, batch: Batch) -> None:
        self.batches.append(batch)

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        raise MalformedRecordError(
            f"{self.what}: a record cannot be decoded ({record.get('error')}, at "
            f"{record.get('location')}); fix the input, a lookup table has no dead letters",
            location=str(record.get("location")),
            raw=record.get("raw"),
        )


def read_bounded(
    source: Source, what: str, *, clock: Clock | None = None, stall_ms: float = DEFAULT_STALL_MS
) -> pa.Table:
    """Every record of ``source`` (bounded) as one Arrow table. Raises
    :class:`ConfigurationError` for an unbounded source or one whose reader has nothing
    for ``stall_ms`` of ``clock``'s time, and :class:`MalformedRecordError` for a record
    the source would send to its dead letters."""
    if not source.bounded:
        raise ConfigurationError(
            f"{what}: {type(source).__name__} is unbounded; a lookup table is read to its "
            "end, give a bounded source (e.g. FileSource without monitor_interval)"
        )
    clock = clock or SystemClock()
    ctx = RuntimeContext(
        task_name=what,
        operator_name=what,
        operator_uid=what,
        subtask_index=0,
        parallelism=1,
        max_parallelism=1,
        clock=clock,
    )
    reader = source.create_reader(ctx)
    output = _Collect(what)
    wake = threading.Event()
    try:
        reader.add_splits(source.create_splits(1))
        idle_since: float | None = None
        while True:
            status = reader.poll(output)
            if status is InputStatus.END_OF_INPUT:
                break
            if status is InputStatus.MORE_AVAILABLE:
                idle_since = None
                continue
            now = clock.monotonic_ms()
            idle_since = now if idle_since is None else idle_since
            if now - idle_since > stall_ms:
                raise ConfigurationError(
                    f"{what}: {type(source).__name__} had nothing to read for "
                    f"{stall_ms / 1000:.0f} s before its end; a lookup table must be "
                    "readable to its end"
                )
            clock.wait(wake, reader.wait_hint_ms() or 10.0)
    finally:
        reader.close()
    batches = [b for b in output.batches if num_rows(b)]
    if not batches:
        return pa.table({})
    return pa.Table.from_batches([to_arrow(concat(batches), operator=what)])


class SourceLookup(LookupSource):
    """A lookup table read whole from a bounded source (no versions: a reload, and a
    restore, read the source's current contents)."""

    def __init__(self, source: Source, what: str) -> None:
        if not isinstance(source, Source):
            raise ConfigurationError(f"{what} needs a lockgate Source, got {source!r}")
        if not source.bounded:
            raise ConfigurationError(
                f"{what}: {type(source).__name__} is unbounded; give a bounded source "
                "(e.g. FileSource without monitor_interval)"
            )
        self.source = source
        self.what = what

    def load(self, version: int | None = None) -> LoadedTable:
        self.source.check_before_run()
        return LoadedTable(read_bounded(self.source, self.what))

    def describe(self) -> str:
        return self.what

"""SequenceSource: the integers ``start, start+1, ..., end-1``, optionally rate-limited."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.batch import scalar_batch
from ..errors import ConfigurationError
from ..runtime.context import RuntimeContext
from .base import InputStatus, ReaderOutput, Source, SourceReader


@dataclass
class SequenceSplit:
    """A contiguous range; ``next`` is the read position (the next value to emit)."""

    split_id: str
    next: int
    end: int


class SequenceSource(Source):
    """Emits the integers of ``range(start, end)`` as bare values, in order per split.

    The range is cut into one contiguous split per subtask. With
    ``rows_per_second`` the whole source emits at most that many values per
    second (shared evenly between subtasks). Bounded: the job finishes after
    the last value; with ``bounded=False`` the source stays running after its last
    value, emitting nothing, until the job is cancelled or stopped (e.g. with
    ``stop_with_savepoint``), so checkpoints and savepoints go on.
    """

    default_name = "sequence"

    def __init__(
        self,
        start: int,
        end: int,
        rows_per_second: float | None = None,
        batch_size: int | None = None,
        bounded: bool = True,
    ) -> None:
        for name, v in (("start", start), ("end", end)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigurationError(f"SequenceSource {name} must be an int, got {v!r}")
        if end < start:
            raise ConfigurationError(f"SequenceSource needs start <= end, got {start} > {end}")
        if rows_per_second is not None and not rows_per_second > 0:
            raise ConfigurationError(
                f"SequenceSource rows_per_second must be positive (or None), got {rows_per_second!r}"
            )
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ConfigurationError(f"SequenceSource batch_size must be >= 1, got {batch_size!r}")
        self.start = start
        self.end = end
        self.rows_per_second = rows_per_second
        self.batch_size = batch_size
        if not isinstance(bounded, bool):
            raise ConfigurationError(
                f"SequenceSource bounded must be True or False, got {bounded!r}"
            )
        self.bounded = bounded

    def create_splits(self, parallelism: int) -> list[SequenceSplit]:
        total = self.end - self.start
        splits = []
        for i in range(parallelism):
            lo = self.start + total * i // parallelism
            hi = self.start + total * (i + 1) // parallelism
            splits.append(SequenceSplit(f"seq-{i}", lo, hi))
        return splits

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        rate = None if self.rows_per_second is None else self.rows_per_second / ctx.parallelism
        return _SequenceReader(ctx, self.batch_size or 65536, rate, self.bounded)


class _SequenceReader(SourceReader):
    #: how long an unbounded reader without data waits before it is polled again
    IDLE_WAIT_MS = 50.0

    def __init__(
        self, ctx: RuntimeContext, batch_size: int, rate: float | None, bounded: bool = True
    ) -> None:
        self.ctx = ctx
        self.bounded = bounded
        self.batch_size = batch_size
        self.rate = rate
        self.splits: list[SequenceSplit] = []
        self.emitted = 0
        self.started_ms: float | None = None
        self._wait_ms: float | None = None

    def add_splits(self, splits: list[SequenceSplit]) -> None:
        self.splits.extend(s for s in splits if s.next < s.end)

    def poll(self, output: ReaderOutput) -> InputStatus:
        if not self.splits:
            return self._exhausted()
        split = self.splits[0]
        n = min(self.batch_size, split.end - split.next)
        if self.rate is not None:
            now = self.ctx.clock.monotonic_ms()
            if self.started_ms is None:
                self.started_ms = now
            allowed = int((now - self.started_ms) / 1000.0 * self.rate) + 1 - self.emitted
            if allowed <= 0:
                self._wait_ms = 1000.0 / self.rate
                return InputStatus.NOTHING_AVAILABLE
            n = min(n, allowed)
        output.emit_from_split(
            split.split_id, scalar_batch(np.arange(split.next, split.next + n, dtype=np.int64))
        )
        split.next += n
        self.emitted += n
        if split.next >= split.end:
            self.splits.pop(0)
            output.split_finished(split.split_id)
        return InputStatus.MORE_AVAILABLE if self.splits else self._exhausted()

    def _exhausted(self) -> InputStatus:
        if self.bounded:
            return InputStatus.END_OF_INPUT
        self._wait_ms = self.IDLE_WAIT_MS
        return InputStatus.NOTHING_AVAILABLE

    def wait_hint_ms(self) -> float | None:
        return self._wait_ms

    def snapshot_positions(self) -> list[SequenceSplit]:
        return [SequenceSplit(s.split_id, s.next, s.end) for s in self.splits]

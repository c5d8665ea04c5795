"""SequenceSource: the integers ``start, start+1, ..., end-1``, optionally rate-limited."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...core.batch import scalar_batch
from ...core.state_records import state_record
from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import InputStatus, ReaderOutput, Source, SourceReader

log = logging.getLogger(__name__)


@state_record("sequence.split")
@dataclass
class SequenceSplit:
    """A contiguous range; ``next`` is the read position (the next value to emit).
    ``split_id`` is ``seq-<index>``; ``count`` is the number of splits the source's range
    is cut into (indices ``0 .. count-1``; None in checkpoints written before finished
    splits were kept in them)."""

    split_id: str
    next: int
    end: int
    count: int | None = None
    #: the end of the whole range the splits were cut from (None in checkpoints written
    #: before it was kept: a split of a finished subtask may be missing from those)
    range_end: int | None = None

    @property
    def index(self) -> int | None:
        """The index in ``seq-<index>`` (None for another id)."""
        found = _SPLIT_ID.fullmatch(self.split_id)
        return int(found.group(1)) if found else None


_SPLIT_ID = re.compile(r"seq-([0-9]+)")


class SequenceSource(Source):
    """Emits the integers of ``range(start, end)`` as bare values, in order per split.

    The range is cut into one contiguous split per subtask. With
    ``rows_per_second`` the whole source emits at most that many values per
    second (shared evenly between subtasks). Bounded: the job finishes after
    the last value; with ``bounded=False`` the source stays running after its last
    value, emitting nothing, until the job is cancelled or stopped (e.g. with
    ``stop_with_savepoint``), so checkpoints and savepoints go on.

    Restored from a checkpoint or savepoint (of a bounded or an unbounded run), the
    splits resume at their positions, each read by one subtask (the split of index
    ``i`` by subtask ``i % parallelism``); checkpoints keep the finished splits too, so
    a restored source whose ``end`` is past the checkpointed range's end reads the
    values from there to ``end`` as one more split, and a bounded one then ends
    (:meth:`restore_splits`). A smaller ``end`` does not shorten the restored splits.
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
            splits.append(SequenceSplit(f"seq-{i}", lo, hi, parallelism, self.end))
        return splits

    def restore_splits(self, splits: list[Any], ctx: RuntimeContext) -> list[SequenceSplit]:
        """This subtask's share of the restored splits of every old subtask (index
        modulo the parallelism), finished ones included (kept in its checkpoints), plus,
        when ``end`` is past the restored range's end, the values from there to ``end``
        as a new split (index ``count``) (M-R3). Raises ConfigurationError for state that
        is not a SequenceSource's, or when ``end`` grew but the checkpoint does not say
        where its range ended (one written before finished splits were kept)."""
        restored: dict[int, SequenceSplit] = {}
        for split in splits:
            index = split.index if isinstance(split, SequenceSplit) else None
            if index is None:
                raise ConfigurationError(
                    f"SequenceSource cannot restore {split!r}: the checkpoint holds another "
                    "source's state under this source's uid"
                )
            restored.setdefault(index, split)
        out = list(restored.values())
        if not out and self.end > self.start and ctx.subtask_index == 0:
            log.warning(
                "SequenceSource(start=%d, end=%d) restored state that holds no split (a "
                "finished run's, written before finished splits were kept): it cannot tell "
                "where the old range ended, so it reads nothing; if end grew, start without "
                "the checkpoint or read the new values with a source of their own",
                self.start,
                self.end,
            )
        known = [s.range_end for s in out if s.range_end is not None]
        counts = {s.count for s in out}
        total: int | None
        if known and None not in counts:
            # the range's end and its number of splits are kept in every split: a split
            # missing here (its subtask had finished) was read whole and stays finished
            old_end, total = max(known), max(c for c in counts if c is not None)
        else:  # older checkpoints: whole only if every split of the range is here
            old_end = max((s.end for s in out), default=self.start)
            whole = counts == {len(out)} and sorted(restored) == list(range(len(out)))
            total = len(out) if whole else None
        if self.end > old_end and out:
            if total is None:
                raise ConfigurationError(
                    f"SequenceSource(start={self.start}, end={self.end}) cannot tell where "
                    "the restored range ended: the checkpoint does not hold every split of "
                    "it (it was written before finished splits were kept); restore with "
                    f"the old end (at least {old_end}), or start without the checkpoint"
                )
            out.append(SequenceSplit(f"seq-{total}", old_end, self.end))
            total, old_end = total + 1, self.end
        return [
            replace(
                s,
                count=total if total is not None else s.count,
                range_end=old_end if total is not None else s.range_end,
            )
            for s in out
            if s.index is not None and s.index % ctx.parallelism == ctx.subtask_index
        ]

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        rate = None if self.rows_per_second is None else self.rows_per_second / ctx.parallelism
        return _SequenceReader(ctx, self.batch_size or 65536, rate, self.bounded)


class _SequenceReader(SourceReader):
    #: the source shares the restored splits out itself (``restore_splits``)
    restores_every_split = True
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
        #: the splits read to their end (kept in checkpoints: a restore with a larger
        #: range learns where the old one ended from them)
        self.finished: list[SequenceSplit] = []
        self.emitted = 0
        self.started_ms: float | None = None
        self._wait_ms: float | None = None

    def add_splits(self, splits: list[SequenceSplit]) -> None:
        self.splits.extend(s for s in splits if s.next < s.end)
        self.finished.extend(s for s in splits if s.next >= s.end)

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
            self.finished.append(self.splits.pop(0))
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
        """Copies of the unfinished splits at their positions, then the finished ones."""
        return [replace(s) for s in (*self.splits, *self.finished)]

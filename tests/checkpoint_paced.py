"""CheckpointPacedSource: a source whose progress follows completed checkpoints, not the
clock, for recovery tests whose faults must find each attempt still running.

A wall-time pace (``RateLimitedSource``) lets a loaded machine, whose checkpoints take
longer, read the whole input before the checkpoint a fault waits for; then the fault
never fires. Paced by checkpoints, every attempt lives through the same checkpoints,
however slow the machine: a fault keyed to the n-th checkpoint of an attempt, or to a
record after ``after_checkpoints=`` completed ones, finds the input still there.
"""

from __future__ import annotations

from typing import Any

from lockgate.connectors.base import InputStatus, ReaderOutput, Source, SourceReader
from lockgate.connectors.builtin.rate_limit import CountingOutput
from lockgate.errors import ConfigurationError
from lockgate.runtime.context import RuntimeContext

#: how long a held reader asks its task to wait before it is polled again (ms)
HELD_WAIT_MS = 5.0


class CheckpointPacedSource(Source):
    """``source``, whose reader (per subtask and attempt) emits:

    * nothing before the first checkpoint of the attempt completed, then at most
      ``records_per_checkpoint`` records per completed checkpoint (counted from the
      reader's start in this attempt; one poll of the wrapped reader, so one batch per
      split, may run past the allowance);
    * the end of input only once it was notified of ``end_after`` completed checkpoints
      in this attempt, so every attempt lives through that many checkpoints (or fails
      before).

    Splits, positions, restores and watermarks are the wrapped source's: the wrapped
    reader is simply not polled while the allowance is used up, so its checkpointed
    positions are those of the records emitted."""

    def __init__(self, source: Source, records_per_checkpoint: int, end_after: int = 1) -> None:
        if not isinstance(source, Source):
            raise ConfigurationError(
                f"CheckpointPacedSource wraps a lockgate source, got {source!r}"
            )
        if records_per_checkpoint < 1 or end_after < 0:
            raise ConfigurationError(
                "CheckpointPacedSource needs records_per_checkpoint >= 1 and end_after >= 0, "
                f"got {records_per_checkpoint!r} and {end_after!r}"
            )
        self.source = source
        self.records_per_checkpoint = records_per_checkpoint
        self.end_after = end_after
        self.bounded = source.bounded
        self.default_name = source.default_name
        self.on_error = source.on_error

    @property
    def side_outputs(self) -> tuple[str, ...]:
        return tuple(self.source.side_outputs)

    def create_splits(self, parallelism: int) -> list[Any]:
        return self.source.create_splits(parallelism)

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        return _PacedReader(self.source.create_reader(ctx), self)

    def restore_splits(self, splits: list[Any], ctx: RuntimeContext) -> list[Any]:
        return self.source.restore_splits(splits, ctx)

    def max_parallelism(self) -> int | None:
        return self.source.max_parallelism()

    def check_before_run(self) -> None:
        self.source.check_before_run()

    def prepare_run(self) -> bool:
        return self.source.prepare_run()


class _PacedReader(SourceReader):
    def __init__(self, inner: SourceReader, source: CheckpointPacedSource) -> None:
        self.inner = inner
        self.per_checkpoint = source.records_per_checkpoint
        self.end_after = source.end_after
        self.restores_every_split = inner.restores_every_split
        #: completed checkpoints this reader was notified of (this attempt)
        self.completed = 0
        #: records emitted by this reader (this attempt)
        self.emitted = 0
        #: the wrapped reader reported its end (never polled again)
        self.ended = False

    @property
    def pending_records(self) -> int | None:
        return self.inner.pending_records

    def add_splits(self, splits: list[Any]) -> None:
        self.inner.add_splits(splits)

    def poll(self, output: ReaderOutput) -> InputStatus:
        if not self.ended:
            if self.emitted >= self.completed * self.per_checkpoint:
                return InputStatus.NOTHING_AVAILABLE  # held until the next completion
            counting = CountingOutput(output)
            status = self.inner.poll(counting)
            self.emitted += counting.count
            if status is not InputStatus.END_OF_INPUT:
                return status
            self.ended = True
        if self.completed < self.end_after:
            return InputStatus.NOTHING_AVAILABLE  # the end held until enough completions
        return InputStatus.END_OF_INPUT

    def wait_hint_ms(self) -> float | None:
        if self.ended or self.emitted >= self.completed * self.per_checkpoint:
            return HELD_WAIT_MS
        return self.inner.wait_hint_ms()

    def snapshot_positions(self) -> list[Any]:
        return self.inner.snapshot_positions()

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[Any]) -> None:
        self.completed += 1
        self.inner.notify_checkpoint_complete(checkpoint_id, positions)

    def close(self) -> None:
        self.inner.close()

"""RateLimitedSource: any source, throttled to a number of records per second (Flink's
``RateLimiterStrategy``), for load tests, backfills that must spare a shared system, and
recovery tests that need a job to live through several checkpoints."""

from __future__ import annotations

from typing import Any

from ...core.batch import Batch, num_rows
from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import InputStatus, ReaderOutput, Source, SourceReader, check_positive


class RateLimitedSource(Source):
    """``source``, emitting at most ``rows_per_second`` records per second in all
    (shared evenly between its subtasks), measured on the subtask's clock.

    Splits, positions, checkpoints, dead letters and watermarks are the wrapped
    source's; only the pace changes. The limit holds per batch: a reader's batch is
    emitted whole, so a subtask runs ahead by at most one batch.
    """

    def __init__(self, source: Source, rows_per_second: float) -> None:
        if not isinstance(source, Source):
            raise ConfigurationError(f"RateLimitedSource wraps a lockgate source, got {source!r}")
        check_positive(
            "RateLimitedSource",
            "rows_per_second",
            rows_per_second,
            "records per second, shared by the subtasks",
        )
        self.source = source
        self.rows_per_second = float(rows_per_second)
        self.bounded = source.bounded
        self.default_name = source.default_name

    @property
    def side_outputs(self) -> tuple[str, ...]:
        return tuple(getattr(self.source, "side_outputs", ()))

    def create_splits(self, parallelism: int) -> list[Any]:
        return self.source.create_splits(parallelism)

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        return _RateLimitedReader(
            self.source.create_reader(ctx), ctx, self.rows_per_second / ctx.parallelism
        )

    def restore_splits(self, splits: list[Any], ctx: RuntimeContext) -> list[Any]:
        return self.source.restore_splits(splits, ctx)

    def max_parallelism(self) -> int | None:
        return self.source.max_parallelism()

    def check_before_run(self) -> None:
        self.source.check_before_run()

    def prepare_run(self) -> bool:
        return self.source.prepare_run()


class CountingOutput(ReaderOutput):
    """Passes everything to ``inner`` and counts the records emitted (``count``): for a
    source wrapper that paces its wrapped reader."""

    def __init__(self, inner: ReaderOutput) -> None:
        self.inner = inner
        self.count = 0

    def emit(self, batch: Batch) -> None:
        self.count += num_rows(batch)
        self.inner.emit(batch)

    def emit_from_split(self, split_id: Any, batch: Batch) -> None:
        self.count += num_rows(batch)
        self.inner.emit_from_split(split_id, batch)

    def split_started(self, split_id: Any) -> None:
        self.inner.split_started(split_id)

    def split_finished(self, split_id: Any) -> None:
        self.inner.split_finished(split_id)

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        self.inner.emit_dead_letter(record)


class _RateLimitedReader(SourceReader):
    def __init__(self, inner: SourceReader, ctx: RuntimeContext, rate: float) -> None:
        self.inner = inner
        self.ctx = ctx
        self.rate = rate
        self.restores_every_split = inner.restores_every_split
        self.started_ms: float | None = None
        self.emitted = 0
        self._throttled = False

    def add_splits(self, splits: list[Any]) -> None:
        self.inner.add_splits(splits)

    def poll(self, output: ReaderOutput) -> InputStatus:
        now = self.ctx.clock.monotonic_ms()
        if self.started_ms is None:
            self.started_ms = now
        if self.emitted >= (now - self.started_ms) / 1000.0 * self.rate + 1:
            self._throttled = True
            return InputStatus.NOTHING_AVAILABLE
        self._throttled = False
        counting = CountingOutput(output)
        status = self.inner.poll(counting)
        self.emitted += counting.count
        return status

    def wait_hint_ms(self) -> float | None:
        if self._throttled:
            assert self.started_ms is not None
            due = self.started_ms + (self.emitted - 1) / self.rate * 1000.0
            return max(1.0, due - self.ctx.clock.monotonic_ms())
        return self.inner.wait_hint_ms()

    def snapshot_positions(self) -> list[Any]:
        return self.inner.snapshot_positions()

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[Any]) -> None:
        self.inner.notify_checkpoint_complete(checkpoint_id, positions)

    def close(self) -> None:
        self.inner.close()

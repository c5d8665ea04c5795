"""RateControlledSource: a source whose input rate the test sets while the job runs, for
autoscaling tests.

The rate (records/s, shared by the subtasks) is read from a control file the test
writes (every :data:`RELOAD_MS`), so it reaches the source on both executors (a Spark
slot is another process on the same machine). The reader behaves like a queue being
filled at that rate: ``pending_records`` is how many records were due by the rate
schedule and not read yet, the backlog an autoscaler sees of a Kafka topic. A new
reader (a restart, a rescale) starts its schedule afresh.
"""

from __future__ import annotations

import os
from typing import Any

from lockgate.connectors.base import InputStatus, ReaderOutput, Source, SourceReader
from lockgate.connectors.builtin.rate_limit import CountingOutput
from lockgate.errors import ConfigurationError
from lockgate.runtime.context import RuntimeContext

#: how often the reader reads the control file (ms)
RELOAD_MS = 50.0


def set_rate(control: str, rate: float) -> None:
    """Set the rate the source's readers follow from now on (atomically)."""
    tmp = f"{control}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{float(rate)}\n")
    os.replace(tmp, control)


class RateControlledSource(Source):
    """``source`` read at the rate in the file ``control`` (see the module docstring);
    ``max_parallelism`` bounds its subtasks (1: the source is not rescaled)."""

    def __init__(self, source: Source, control: str, max_parallelism: int | None = 1) -> None:
        if not os.path.isfile(control):
            raise ConfigurationError(f"RateControlledSource: no control file {control!r}")
        self.source = source
        self.control = control
        self._max = max_parallelism
        self.bounded = source.bounded
        self.default_name = source.default_name
        self.on_error = source.on_error

    @property
    def side_outputs(self) -> tuple[str, ...]:
        return tuple(self.source.side_outputs)

    def create_splits(self, parallelism: int) -> list[Any]:
        return self.source.create_splits(parallelism)

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        return _Reader(self.source.create_reader(ctx), ctx, self.control)

    def restore_splits(self, splits: list[Any], ctx: RuntimeContext) -> list[Any]:
        return self.source.restore_splits(splits, ctx)

    def max_parallelism(self) -> int | None:
        return self._max

    def check_before_run(self) -> None:
        self.source.check_before_run()

    def prepare_run(self) -> bool:
        return self.source.prepare_run()


class _Reader(SourceReader):
    def __init__(self, inner: SourceReader, ctx: RuntimeContext, control: str) -> None:
        self.inner = inner
        self.ctx = ctx
        self.control = control
        self.share = 1.0 / ctx.parallelism
        self.restores_every_split = inner.restores_every_split
        self.rate = 0.0
        self.loaded_ms: float | None = None
        self.due = 0.0
        self.at_ms: float | None = None
        self.emitted = 0

    @property
    def pending_records(self) -> int:
        return max(0, int(self.due) - self.emitted)

    def add_splits(self, splits: list[Any]) -> None:
        self.inner.add_splits(splits)

    def _advance(self) -> None:
        now = self.ctx.clock.monotonic_ms()
        if self.loaded_ms is None or now - self.loaded_ms >= RELOAD_MS:
            with open(self.control) as f:
                self.rate = float(f.read().strip() or 0) * self.share
            self.loaded_ms = now
        if self.at_ms is not None:
            self.due += (now - self.at_ms) / 1000.0 * self.rate
        self.at_ms = now

    def poll(self, output: ReaderOutput) -> InputStatus:
        self._advance()
        if self.emitted >= self.due:
            return InputStatus.NOTHING_AVAILABLE
        counting = CountingOutput(output)
        status = self.inner.poll(counting)
        self.emitted += counting.count
        return status

    def wait_hint_ms(self) -> float | None:
        if self.emitted >= self.due:
            if self.rate <= 0:
                return RELOAD_MS
            return max(1.0, min(RELOAD_MS, (self.emitted + 1 - self.due) / self.rate * 1000))
        return self.inner.wait_hint_ms()

    def snapshot_positions(self) -> list[Any]:
        return self.inner.snapshot_positions()

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[Any]) -> None:
        self.inner.notify_checkpoint_complete(checkpoint_id, positions)

    def close(self) -> None:
        self.inner.close()

"""Watermark generation inside an operator: a source's, or
``assign_timestamps_and_watermarks``' (M-W1, M-W2).

:class:`OperatorWatermarks` runs a :class:`~lockgate.time.watermark_output.PerSplitWatermarks`
for the operator and turns what it generates into stream elements:

* each batch gets its records' event timestamps, and its split's generator sees it
  first, so an ACTIVE goes out ahead of the batch (M-W2), while a watermark the
  generator emits meanwhile (a punctuated one) is held and follows the batch: it
  never overtakes the records it came from;
* a finished split stops holding the watermark back, but the last one stays until
  another split starts, so the operator never looks idle between splits or at its
  end (IDLE would let downstream valves pass data still to come, M-W4);
* the watermark only advances, and each one is recorded as the operator's event time.
"""

from __future__ import annotations

from typing import Any

from ...core.batch import Batch, with_timestamps
from ...core.elements import StreamStatus, Watermark
from ...errors import MalformedRecordError
from .base import StreamOperator


class OperatorWatermarks:
    def __init__(self, operator: StreamOperator, strategy: Any) -> None:
        from ...time.watermark_output import PerSplitWatermarks

        self.operator = operator
        self.generation = PerSplitWatermarks(strategy, self, operator.ctx.clock)
        self._splits: set[Any] = set()
        self._finished_last: Any = None
        self._holding = False
        self._held: int | None = None

    # WatermarkOutput ------------------------------------------------------------------
    def emit_watermark(self, timestamp: int) -> None:
        if self._holding:
            self._held = timestamp if self._held is None else max(self._held, timestamp)
            return
        op = self.operator
        if timestamp > op.current_watermark:
            op.note_watermark(timestamp)
            op.output.emit_element(Watermark(timestamp))

    def mark_idle(self) -> None:
        self.operator.output.emit_element(StreamStatus.IDLE)

    def mark_active(self) -> None:
        self.operator.output.emit_element(StreamStatus.ACTIVE)

    # batches and splits -----------------------------------------------------------------
    def emit(self, split_id: Any, batch: Batch) -> None:
        """Give ``batch`` (of split ``split_id``) its event timestamps and emit it."""
        generation = self.generation
        if split_id not in self._splits:  # a split's first batch: its own generator
            self.add_split(split_id)
        self._holding = True
        try:
            timestamps = generation.on_batch(split_id, batch)
        except MalformedRecordError as e:
            e.operator = self.operator.name  # type: ignore[attr-defined]
            raise
        finally:
            self._holding = False
        self.operator.emit(batch if timestamps is None else with_timestamps(batch, timestamps))
        held, self._held = self._held, None
        if held is not None:
            self.emit_watermark(held)

    def add_split(self, split_id: Any) -> None:
        """Give split ``split_id`` its generator (done by its first batch at the latest);
        it holds the watermark back from now on. A finished split kept as the last one
        goes."""
        self._splits.add(split_id)
        self.generation.add_split(split_id)
        last, self._finished_last = self._finished_last, None
        if last is not None:
            self._splits.discard(last)
            self.generation.finish_split(last)

    def split_finished(self, split_id: Any) -> None:
        if split_id not in self._splits:
            return
        if len(self._splits) > 1:
            self._splits.discard(split_id)
            self.generation.finish_split(split_id)
        else:
            self._finished_last = split_id

    # time -------------------------------------------------------------------------------
    def emit_periodic_if_due(self) -> None:
        self.generation.emit_periodic_if_due()

    def ms_until_periodic_emit(self) -> float:
        return self.generation.ms_until_periodic_emit()

    def finish(self) -> None:
        """End of input: ACTIVE if idle, then the maximum watermark (M-W2)."""
        self.generation.finish()

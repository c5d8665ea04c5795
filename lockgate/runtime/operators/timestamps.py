"""``stream.assign_timestamps_and_watermarks(strategy)``: event time assigned mid-stream.

Each batch's records get their event timestamps from the strategy's assigner
(vectorized for a column); the strategy's generator sees them first and its
watermarks and idleness leave as stream elements (M-W1, M-W2). Periodic emission
runs on the subtask's processing-time service (the injectable clock). Watermarks
from upstream are dropped, except the final maximum watermark (end of input), as
in Flink: the strategy now owns event time.
"""

from __future__ import annotations

from typing import Any

from ...errors import MalformedRecordError
from ..batch import Batch, num_rows, with_timestamps
from ..elements import MAX_WATERMARK, StreamStatus, Watermark
from .base import StreamOperator


class TimestampsAndWatermarksOperator(StreamOperator):
    def __init__(self, strategy: Any) -> None:
        super().__init__()
        self.strategy = strategy

    def open(self) -> None:
        from ...time.watermark_output import PerSplitWatermarks

        self.watermarks = PerSplitWatermarks(self.strategy, self, self.ctx.clock)
        self.watermarks.add_split("input")
        self._schedule()

    def _schedule(self) -> None:
        service = self.ctx.processing_time_service
        if service is None:
            return
        delay = max(1, int(self.watermarks.ms_until_periodic_emit()))
        service.schedule(service.current_time() + delay, self._on_time)

    def _on_time(self, _: int) -> None:
        self.watermarks.emit_periodic_if_due()
        self._schedule()

    # WatermarkOutput --------------------------------------------------------------
    _holding = False
    _held: int | None = None

    def emit_watermark(self, timestamp: int) -> None:
        if self._holding:  # a punctuated watermark waits for the batch it came from
            self._held = timestamp if self._held is None else max(self._held, timestamp)
            return
        if timestamp > self.current_watermark:
            self.note_watermark(timestamp)
            self.output.emit_element(Watermark(timestamp))

    def mark_idle(self) -> None:
        self.output.emit_element(StreamStatus.IDLE)

    def mark_active(self) -> None:
        self.output.emit_element(StreamStatus.ACTIVE)

    # stream --------------------------------------------------------------------------
    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        self.counters.records_in += num_rows(batch)
        self._holding = True
        try:
            timestamps = self.watermarks.on_batch("input", batch)
        except MalformedRecordError as e:
            e.operator = self.name  # type: ignore[attr-defined]
            raise
        finally:
            self._holding = False
        self.emit(batch if timestamps is None else with_timestamps(batch, timestamps))
        held, self._held = self._held, None
        if held is not None:
            self.emit_watermark(held)

    def process_watermark(self, watermark: Watermark, input_index: int = 0) -> None:
        if watermark.timestamp == MAX_WATERMARK:
            self.watermarks.finish()

    def process_status(self, status: StreamStatus, input_index: int = 0) -> None:
        """Upstream idleness is not this operator's: its own generator decides."""

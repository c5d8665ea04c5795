"""``stream.assign_timestamps_and_watermarks(strategy)``: event time assigned mid-stream.

Each batch's records get their event timestamps from the strategy's assigner
(vectorized for a column; without an assigner, the timestamps they already carry);
the strategy's generator sees them first and its watermarks and idleness leave as
stream elements (M-W1, M-W2; :class:`~.event_time.OperatorWatermarks`). Periodic
emission runs on the subtask's processing-time service (the injectable clock).
Watermarks and statuses from upstream are dropped, except the final maximum
watermark (end of input), as in Flink: the strategy now owns event time.
"""

from __future__ import annotations

from typing import Any

from ...core.batch import Batch, num_rows
from ...core.elements import MAX_WATERMARK, StreamStatus, Watermark
from .base import StreamOperator
from .event_time import OperatorWatermarks

#: the one split of this operator's input
INPUT = "input"


class TimestampsAndWatermarksOperator(StreamOperator):
    """Gives records their event timestamps and emits watermarks; row kinds pass."""

    accepts_changes = True

    def __init__(self, strategy: Any) -> None:
        super().__init__()
        self.strategy = strategy

    def open(self) -> None:
        self.watermarks = OperatorWatermarks(self, self.strategy)
        # the input holds event time back from the start, data or not (idle only with
        # the strategy's idleness)
        self.watermarks.add_split(INPUT)
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

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        self.counters.records_in += num_rows(batch)
        self.watermarks.emit(INPUT, batch)

    def process_watermark(self, watermark: Watermark, input_index: int = 0) -> None:
        if watermark.timestamp == MAX_WATERMARK:
            self.watermarks.finish()

    def process_status(self, status: StreamStatus, input_index: int = 0) -> None:
        """Upstream idleness is not this operator's: its own generator decides."""

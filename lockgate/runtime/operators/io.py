"""Source and sink operators: the ends of a dataflow."""

from __future__ import annotations

import time
from typing import Any

from ...connectors.base import (
    DEAD_LETTER_TAG,
    InputStatus,
    ReaderOutput,
    Sink,
    SinkWriter,
    Source,
    SourceReader,
    assign_splits,
)
from ...errors import LockgateError, MalformedRecordError
from ..batch import Batch, RowBatch, num_rows, user_view, with_timestamps
from ..elements import MAX_WATERMARK, StreamStatus, Watermark
from .base import StreamOperator


class _OperatorReaderOutput(ReaderOutput):
    def __init__(self, operator: "SourceOperator") -> None:
        self.operator = operator
        self._dead: list[dict[str, Any]] = []
        self._splits: set[Any] = set()  # splits with a watermark generator
        self._finished_last: Any = None  # a finished split kept as the only one

    def emit(self, batch: Batch) -> None:
        self.emit_from_split(SUBTASK_SPLIT, batch)

    def split_finished(self, split_id: Any) -> None:
        """A finished split stops holding the watermark back; the last one stays until
        another split starts, so a source between splits (or at its end) never looks
        idle: IDLE would let downstream valves pass the watermark of data still to
        come from other subtasks (M-W4)."""
        watermarks = self.operator.watermarks
        if watermarks is None or split_id not in self._splits:
            return
        if len(self._splits) > 1:
            self._splits.discard(split_id)
            watermarks.finish_split(split_id)
        else:
            self._finished_last = split_id

    def emit_from_split(self, split_id: Any, batch: Batch) -> None:
        counters = self.operator.counters
        now = time.time()
        if counters.first_emit_s is None:
            counters.first_emit_s = now
        counters.last_emit_s = now
        watermarks = self.operator.watermarks
        if watermarks is None:
            self.operator.emit(batch)
            return
        # the generator sees the batch first, so ACTIVE goes out ahead of it (M-W2); a
        # watermark it emits meanwhile follows the batch
        if split_id not in self._splits:  # a split's first batch: its own generator
            self._splits.add(split_id)
            watermarks.add_split(split_id)
            last, self._finished_last = self._finished_last, None
            if last is not None:
                self._splits.discard(last)
                watermarks.finish_split(last)
        out = self.operator.watermark_output
        out.holding = True
        try:
            timestamps = watermarks.on_batch(split_id, batch)
        except MalformedRecordError as e:
            out.holding, out.held = False, None
            e.operator = self.operator.name  # type: ignore[attr-defined]
            raise
        if timestamps is not None:
            batch = with_timestamps(batch, timestamps)
        self.operator.emit(batch)
        out.release()

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        self._dead.append(record)

    def flush_dead_letters(self) -> None:
        if self._dead:
            dead, self._dead = self._dead, []
            op = self.operator
            op.counters.side_out[DEAD_LETTER_TAG] = (
                op.counters.side_out.get(DEAD_LETTER_TAG, 0) + len(dead)
            )
            op.output.emit_side(DEAD_LETTER_TAG, RowBatch(dead))


#: the split of batches a reader emits without naming their split (one generator for
#: all of them)
SUBTASK_SPLIT = "subtask"


class _ElementWatermarkOutput:
    """Turns a source's generated watermarks and idleness into stream elements (M-W1,
    M-W2)."""

    def __init__(self, operator: StreamOperator) -> None:
        self.operator = operator
        #: while a batch is shown to the generator: a watermark it emits waits for the
        #: batch (a punctuated watermark must not overtake the records it came from)
        self.holding = False
        self.held: int | None = None

    def emit_watermark(self, timestamp: int) -> None:
        if self.holding:
            self.held = timestamp if self.held is None else max(self.held, timestamp)
            return
        self.operator.note_watermark(timestamp)
        self.operator.output.emit_element(Watermark(timestamp))

    def release(self) -> None:
        """After the batch: emit the watermark held back during it, if any."""
        self.holding = False
        held, self.held = self.held, None
        if held is not None:
            self.emit_watermark(held)

    def mark_idle(self) -> None:
        self.operator.output.emit_element(StreamStatus.IDLE)

    def mark_active(self) -> None:
        self.operator.output.emit_element(StreamStatus.ACTIVE)


class SourceOperator(StreamOperator):
    """Drives a :class:`SourceReader`; the task calls ``emit_next`` as its default action."""

    def __init__(self, source: Source, watermark_strategy: Any = None) -> None:
        super().__init__()
        self.source = source
        self.reader: SourceReader | None = None
        self.watermark_strategy = watermark_strategy
        #: the subtask's watermark generation (``PerSplitWatermarks``), with a strategy
        self.watermarks: Any = None
        self.watermark_output: Any = None

    def initialize_state(self, restored: Any) -> None:
        """Take over the unfinished splits, with their read positions, recorded by the
        old subtasks assigned to this one (M-R1: the source rewinds to them)."""
        self._restored_splits: list[Any] | None = None
        if restored is not None:
            self._restored_splits = [
                split for state in restored.assigned() if state for split in state["splits"]
            ]

    def open(self) -> None:
        try:
            self.reader = self.source.create_reader(self.ctx)
            restored = getattr(self, "_restored_splits", None)
            if restored is not None:
                self.reader.add_splits(restored)
            else:
                splits = self.source.create_splits(self.ctx.parallelism)
                self.reader.add_splits(
                    assign_splits(splits, self.ctx.subtask_index, self.ctx.parallelism))
        except LockgateError:
            raise
        except Exception as e:
            raise self.user_error(e) from e
        self.reader_output = _OperatorReaderOutput(self)
        if self.watermark_strategy is not None:
            from ...time.watermark_output import PerSplitWatermarks

            self.watermark_output = _ElementWatermarkOutput(self)
            self.watermarks = PerSplitWatermarks(
                self.watermark_strategy, self.watermark_output, self.ctx.clock)

    def emit_next(self) -> InputStatus:
        assert self.reader is not None
        try:
            status = self.reader.poll(self.reader_output)
        except (LockgateError, MalformedRecordError) as e:
            if getattr(e, "operator", None) is None:
                e.operator = self.name  # type: ignore[attr-defined]
                e.subtask = self.ctx.subtask_index  # type: ignore[attr-defined]
            raise
        except Exception as e:
            raise self.user_error(e) from e
        self.reader_output.flush_dead_letters()
        if self.watermarks is not None:
            self.watermarks.emit_periodic_if_due()
        return status

    def wait_hint_ms(self) -> float | None:
        hint = self.reader.wait_hint_ms() if self.reader is not None else None
        if self.watermarks is not None:
            periodic = self.watermarks.ms_until_periodic_emit()
            hint = periodic if hint is None else min(hint, periodic)
        return hint

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """The reader's unfinished splits with their read positions (copies) (M-T4)."""
        if self.reader is None:
            return None
        return {"splits": self.reader.snapshot_positions()}

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        raise RuntimeError("a source operator has no input")

    def finish(self) -> None:
        """End of input: event time ends too; the source sends the maximum watermark,
        not IDLE (M-W2)."""
        if self.watermarks is not None:
            self.watermarks.finish()
        else:
            self.output.emit_element(Watermark(MAX_WATERMARK))

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()


class SinkOperator(StreamOperator):
    """Hands batches to a :class:`SinkWriter`."""

    def __init__(self, sink: Sink) -> None:
        super().__init__()
        self.sink = sink
        self.writer: SinkWriter | None = None

    _restored: Any = None

    def initialize_state(self, restored: Any) -> None:
        self._restored = restored

    def open(self) -> None:
        try:
            self.writer = self.sink.create_writer(self.ctx)
            initialize = getattr(self.writer, "initialize_state", None)
            if callable(initialize):
                restored, self._restored = self._restored, None
                initialize(restored.assigned() if restored is not None else [])
        except LockgateError:
            raise
        except Exception as e:
            raise self.user_error(e) from e

    # checkpoints: a transactional writer pre-commits on the barrier and commits on the
    # completion notice (M-X2); a failing commit fails the task (M-X3)
    def snapshot_state(self, checkpoint_id: int) -> Any:
        return self._call_writer("snapshot_state", checkpoint_id)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._call_writer("notify_checkpoint_complete", checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._call_writer("notify_checkpoint_aborted", checkpoint_id)

    def _call_writer(self, method: str, checkpoint_id: int) -> Any:
        """The writer's optional checkpoint hook ``method`` (None when it has none); its
        errors are the user's, naming this sink."""
        hook = getattr(self.writer, method, None)
        if not callable(hook):
            return None
        try:
            return hook(checkpoint_id)
        except LockgateError:
            raise
        except Exception as e:
            raise self.user_error(e) from e

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        self.counters.records_in += num_rows(batch)
        assert self.writer is not None
        try:
            self.writer.write(user_view(batch))  # sinks never see the event-time column
        except LockgateError:
            raise
        except Exception as e:
            raise self.user_error(e) from e

    def finish(self) -> None:
        if self.writer is not None:
            try:
                self.writer.finish()
            except LockgateError:
                raise
            except Exception as e:
                raise self.user_error(e) from e

    def result(self) -> Any:
        return self.writer.result() if self.writer is not None else None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

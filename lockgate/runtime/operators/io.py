"""Source and sink operators: the ends of a dataflow."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

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
from ...core.batch import (
    Batch,
    RowBatch,
    has_changes,
    kinds_of,
    num_rows,
    user_view,
    with_timestamps,
)
from ...core.elements import MAX_WATERMARK, Watermark
from ...core.latency.histogram import LatencyHistogram
from ...core.latency.marker import LatencyMarker
from ...core.row_kind import RowKind
from ...errors import ChangelogError, LockgateError, MalformedRecordError
from ..latency.emitter import MarkerEmitter
from .base import StreamOperator
from .event_time import OperatorWatermarks


class _OperatorReaderOutput(ReaderOutput):
    def __init__(self, operator: SourceOperator) -> None:
        self.operator = operator
        self._dead: list[dict[str, Any]] = []

    def emit(self, batch: Batch) -> None:
        self.emit_from_split(SUBTASK_SPLIT, batch)

    def split_started(self, split_id: Any) -> None:
        if self.operator.watermarks is not None:
            self.operator.watermarks.add_split(split_id)

    def split_finished(self, split_id: Any) -> None:
        if self.operator.watermarks is not None:
            self.operator.watermarks.split_finished(split_id)

    def emit_from_split(self, split_id: Any, batch: Batch) -> None:
        counters = self.operator.counters
        now = time.time()
        if counters.first_emit_s is None:
            counters.first_emit_s = now
        counters.last_emit_s = now
        markers = self.operator.latency_markers
        stamp = None if markers is None else markers.due_stamp()
        watermarks = self.operator.watermarks
        if watermarks is None:
            self.operator.emit(batch)
        else:
            watermarks.emit(split_id, batch)
        if stamp is not None:  # end-to-end latency: a marker right behind the batch
            markers.emit_after(stamp)  # type: ignore[union-attr]

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        self._dead.append(record)

    def flush_dead_letters(self) -> None:
        if self._dead:
            dead, self._dead = self._dead, []
            op = self.operator
            op.counters.side_out[DEAD_LETTER_TAG] = op.counters.side_out.get(
                DEAD_LETTER_TAG, 0
            ) + len(dead)
            op.output.emit_side(DEAD_LETTER_TAG, RowBatch(dead))


#: the split of batches a reader emits without naming their split (one generator for
#: all of them)
SUBTASK_SPLIT = "subtask"


class SourceOperator(StreamOperator):
    """Drives a :class:`SourceReader`; the task calls ``emit_next`` as its default action."""

    accepts_changes = True

    def __init__(self, source: Source, watermark_strategy: Any = None) -> None:
        super().__init__()
        self.source = source
        self.reader: SourceReader | None = None
        self.watermark_strategy = watermark_strategy
        #: the subtask's watermark generation, with a strategy
        self.watermarks: OperatorWatermarks | None = None
        #: checkpoint id -> the positions snapshotted for it, kept until it completes
        #: (only for readers with a ``notify_checkpoint_complete``)
        self._pending_positions: dict[int, list[Any]] = {}
        #: latency markers behind emitted batches (set by the task builder when
        #: ``latency_tracking_interval_ms`` is on; None: off)
        self.latency_markers: MarkerEmitter | None = None

    def track_latency(self, interval_ms: int) -> None:
        """Send a latency marker behind a batch at most every ``interval_ms`` of this
        subtask's clock (end-to-end latency per sink; call after ``setup``)."""
        self.latency_markers = MarkerEmitter(
            self.ctx.clock, interval_ms, self.uid, self.ctx.subtask_index, self.output.emit_element
        )

    def initialize_state(self, restored: Any) -> None:
        """Take over the unfinished splits, with their read positions, recorded by the
        old subtasks assigned to this one (M-R1: the source rewinds to them)."""
        self._restored = restored

    def open(self) -> None:
        try:
            self.reader = self.source.create_reader(self.ctx)
            restored, self._restored = getattr(self, "_restored", None), None
            if restored is not None:
                # only readers that pick their own share read every old subtask's state
                states = restored.all() if self.reader.restores_every_split else restored.assigned()
                splits = [split for state in states if state for split in state["splits"]]
                # the source's configuration may differ from the checkpoint's run (e.g.
                # bounded now): the source reconciles the splits with it
                self.reader.add_splits(self.source.restore_splits(splits, self.ctx))
            else:
                splits = self.source.create_splits(self.ctx.parallelism)
                self.reader.add_splits(
                    assign_splits(splits, self.ctx.subtask_index, self.ctx.parallelism)
                )
        except LockgateError:
            raise
        except Exception as e:
            raise self.user_error(e) from e
        self.reader_output = _OperatorReaderOutput(self)
        if self.watermark_strategy is not None:
            self.watermarks = OperatorWatermarks(self, self.watermark_strategy)

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

    def watch_arrival(self, wake: Callable[[], None]) -> bool:
        """Ask the reader to call ``wake()`` when data arrives (see
        :meth:`SourceReader.watch_arrival`); False when it cannot."""
        return self.reader is not None and self.reader.watch_arrival(wake)

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
        positions = self.reader.snapshot_positions()
        hook = type(self.reader).notify_checkpoint_complete
        if hook is not SourceReader.notify_checkpoint_complete:
            self._pending_positions[checkpoint_id] = positions
        return {"splits": positions}

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Hand the reader the positions it snapshotted for ``checkpoint_id``, if it
        wants them (older pending ones are dropped: a later checkpoint subsumes them)."""
        positions = self._pending_positions.pop(checkpoint_id, None)
        for older in [c for c in self._pending_positions if c < checkpoint_id]:
            del self._pending_positions[older]
        if positions is None or self.reader is None:
            return
        try:
            self.reader.notify_checkpoint_complete(checkpoint_id, positions)
        except LockgateError:
            raise
        except Exception as e:
            raise self.user_error(e) from e

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._pending_positions.pop(checkpoint_id, None)

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

    accepts_changes = True

    def __init__(self, sink: Sink) -> None:
        super().__init__()
        self.sink = sink
        self.writer: SinkWriter | None = None
        self._changes = bool(getattr(sink, "accepts_changes", False))
        #: end-to-end latency of the batches whose markers reached this sink subtask
        #: (created by the first marker; None while latency tracking sent none)
        self.latency: LatencyHistogram | None = None

    def process_latency_marker(self, marker: LatencyMarker) -> None:
        """A marker reached the sink: every batch before it on its path was written
        (``writer.write`` returned), so ``now - marker.emitted_ms`` on this subtask's
        wall clock is the latency of the batch it followed."""
        histogram = self.latency
        if histogram is None:
            histogram = self.latency = LatencyHistogram()
        histogram.record(self.ctx.clock.time_ms() - marker.emitted_ms)

    def _append_only_error(self, batch: Batch) -> str:
        kinds = kinds_of(batch)
        assert kinds is not None
        first = int(np.flatnonzero(kinds)[0])
        kind = RowKind(int(kinds[first])).short
        return (
            f"sink '{self.name}' ({type(self.sink).__name__}) writes append-only, but its "
            f"input is a changelog: record #{first} of a batch is {kind} "
            f"({RowKind(int(kinds[first])).name}). Writing it as a new row would corrupt "
            "the output. Use a sink that applies changes (PostgresSink(mode='upsert', "
            "key=...), DeltaSink(mode='merge', key=...), KafkaSink(format='upsert', "
            "key=...) or format='debezium-json', CollectSink(changelog=True)), or make "
            "the stream append-only first (.kinds_to_field('op') keeps each kind as a "
            "field)"
        )

    _restored: Any = None

    def initialize_state(self, restored: Any) -> None:
        self._restored = restored

    def open(self) -> None:
        try:
            self.writer = self.sink.create_writer(self.ctx)
            initialize = getattr(self.writer, "initialize_state", None)
            if callable(initialize):
                restored, self._restored = self._restored, None
                if restored is None:
                    initialize([])
                elif getattr(self.writer, "wants_every_state", False):
                    # transactional writers also see what the other subtasks restore
                    initialize(restored.assigned(), every_state=restored.all())
                else:
                    initialize(restored.assigned())
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
            if self._changes:
                self.writer.write(with_timestamps(batch, None))
            else:
                if has_changes(batch):
                    raise ChangelogError(self._append_only_error(batch))
                self.writer.write(user_view(batch))  # sinks never see reserved columns
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

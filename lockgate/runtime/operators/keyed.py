"""The keyed process operator (the per-record context of process functions is
:mod:`.element_context`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.batch import Batch, RowBatch, kinds_of, timestamps_of, to_rows
from ...core.elements import Watermark
from ...core.key_groups import key_group_range
from ...core.partitioners import KeySelector
from ...core.row_kind import changes_made
from ...state.snapshot import keyed_parts, payload_part
from ...time.timers import InternalTimerService
from .basic import (
    _SINGLE_RECORDS,
    _FunctionOperator,
    is_iterable,
    not_iterable_error,
    process_timestamped,
    single_record_error,
)
from .changes import output_kinds
from .element_context import ElementContext, tag_name

__all__ = ["ElementContext", "KeyedProcessOperator", "tag_name"]


class KeyedProcessOperator(_FunctionOperator):
    """Runs a ``KeyedProcessFunction`` with keyed state scoped to each record's key."""

    accepts_changes = True

    method = "process_element"

    def __init__(self, fn: Any, key_selector: KeySelector) -> None:
        super().__init__(fn)
        self.key_selector = key_selector

    def metric_keys(self) -> int | None:
        """Keys holding state, as the state backend estimates them (a metric)."""
        backend = getattr(self, "backend", None)
        estimate = getattr(backend, "approximate_keys", None)
        return estimate() if estimate is not None else None

    def open(self) -> None:
        ctx = self.ctx
        self.backend = ctx.state_backend.create_keyed_backend(
            self.name, ctx.max_parallelism, clock=ctx.clock, subtask_index=ctx.subtask_index
        )
        ctx._keyed_backend = self.backend
        typed = getattr(self.backend, "typed", None)
        if typed is not None:
            typed.uid = self.uid  # errors about typed state name the uid
        self.timers = InternalTimerService(
            self.name,
            ctx.max_parallelism,
            clock=ctx.clock,
            on_earlier_processing_time=self._schedule_processing_time,
        )
        backend = self.backend
        self.element_ctx = ElementContext(
            self, None, self.timers.facade(lambda: backend.current_key)
        )
        self._on_timer = getattr(self.function, "on_timer", None)
        self._timer_output: list[Any] = []
        self._timer_stamps: list[int] = []
        super().open()

    # -- timers (M-W6) ------------------------------------------------------------------
    def advance_watermark(self, watermark: Watermark) -> None:
        """Fire every event-time timer due at ``watermark``, in timestamp order with its
        key set, emit what they produced, then forward the watermark (M-W6)."""
        self.backend.current_watermark = watermark.timestamp  # event-time TTL
        self.timers.advance_watermark(watermark.timestamp, self._fire)
        self._emit_timer_output()
        self.output.emit_element(watermark)

    def _schedule_processing_time(self, time_ms: int) -> None:
        service = self.ctx.processing_time_service
        if service is not None:
            service.schedule(time_ms, self._on_processing_time)

    def _on_processing_time(self, _: int) -> None:
        self.timers.on_processing_time(self.ctx.clock.time_ms(), self._fire)
        self._emit_timer_output()

    def _fire(self, timer: Any) -> None:
        on_timer = self._on_timer
        if not callable(on_timer):
            raise self.user_error(
                TypeError(
                    "a timer fired but the function has no on_timer(timestamp, ctx) method; "
                    "subclass lg.KeyedProcessFunction (lg.KeyedCoProcessFunction on "
                    "connected streams) and implement on_timer"
                )
            )
        key = timer.key
        self.backend.current_key = key
        ectx = self.element_ctx
        ectx.current_key = key
        ectx.timestamp = timer.timestamp
        try:
            result = on_timer(timer.timestamp, ectx)
            if result is not None:
                if isinstance(result, _SINGLE_RECORDS):
                    raise single_record_error("on_timer", result)
                before = len(self._timer_output)
                try:
                    self._timer_output.extend(result)
                except TypeError:
                    if is_iterable(result):
                        raise
                    raise not_iterable_error(
                        "on_timer", result, key, origin="the timer of key"
                    ) from None
                self._timer_stamps.extend([timer.timestamp] * (len(self._timer_output) - before))
        except Exception as e:
            raise self.user_error(e) from e
        finally:
            ectx.timestamp = None

    def _emit_timer_output(self) -> None:
        self.element_ctx.flush_side_outputs()
        if self._timer_output:
            out, stamps = self._timer_output, self._timer_stamps
            self._timer_output, self._timer_stamps = [], []
            # timers are few: their outputs are always looked through for Change values
            kinds = output_kinds(out, None, None, made_before=-1)
            self.emit(RowBatch(out, np.asarray(stamps, dtype=np.int64), kinds))

    def restore_state(self, restored: Any) -> None:
        """Operator state as every function operator, then keyed state: at the same
        parallelism a subtask's own payload holds exactly its key groups; otherwise every
        old subtask's payload is read and filtered by key group (M-R1, M-R3, rescaling)."""
        super().restore_state(restored)
        payloads = [restored.own()] if restored.same_parallelism else restored.all()
        ctx = self.ctx
        key_groups = key_group_range(ctx.subtask_index, ctx.parallelism, ctx.max_parallelism)
        self.backend.restore(keyed_parts(payloads), key_groups)
        timers = [t for t in (payload_part(p, "timers") for p in payloads) if t is not None]
        if timers:
            self.timers.restore(timers, key_groups)

    def keyed_snapshot(self) -> Any:
        """A copy-on-write view of the keyed state, grouped by key group (M-T3, M-T4)."""
        return self.backend.snapshot()

    def timers_snapshot(self) -> Any:
        """The timers, grouped by key group (M-T4), when there are any."""
        if self.timers.next_event_time() is None and self.timers.next_processing_time() is None:
            return None
        return self.timers.snapshot_view()

    def close(self) -> None:
        try:
            super().close()
        finally:
            backend = getattr(self, "backend", None)
            if backend is not None:
                backend.close()

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        """Run the function on each record with its key current. A backend with batch
        scopes (RocksDB: ``begin_batch``/``end_batch``) serves the batch's state
        accesses from one multi-get and writes them as one write batch; the scope is
        closed (its writes in the database) before the results go downstream, and
        before any timer, snapshot or restore of this operator."""
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        try:
            keys = self.key_selector.state_keys(batch, rows)
        except Exception as e:
            raise self.user_error(e) from e
        backend = self.backend
        begin = getattr(backend, "begin_batch", None)
        if begin is None:
            self.emit(self._process_records(batch, rows, keys))
            return
        try:
            begin(keys)
        except Exception as e:
            raise self.user_error(e) from e
        try:
            out = self._process_records(batch, rows, keys)
        finally:
            backend.end_batch()
        self.emit(out)

    def _process_records(self, batch: Batch, rows: list[Any], keys: list[Any]) -> RowBatch:
        backend = self.backend
        ectx = self.element_ctx
        fn = self.call
        timestamps = timestamps_of(batch)
        kinds = kinds_of(batch)
        if timestamps is not None or kinds is not None:
            return process_timestamped(self, rows, timestamps, fn, ectx, keys, backend, kinds)
        out: list[Any] = []
        extend = out.extend
        cancel = self.cancellation
        made = changes_made()
        try:
            for r, k in zip(rows, keys):
                if cancel.requested:  # stop within one record, not one batch
                    break
                backend.current_key = k
                ectx.current_key = k
                result = fn(r, ectx)
                if result is not None:
                    if isinstance(result, _SINGLE_RECORDS):
                        raise single_record_error("process_element", result)
                    try:
                        extend(result)
                    except TypeError:
                        if is_iterable(result):
                            raise
                        raise not_iterable_error("process_element", result, r) from None
        except Exception as e:
            raise self.user_error(e) from e
        cancel.check()
        ectx.flush_side_outputs()
        return RowBatch(out, None, output_kinds(out, None, None, made))

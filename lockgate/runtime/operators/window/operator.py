"""The window operator: keyed windows in event or processing time.

``stream.key_by(...).window(assigner).aggregate(...)`` (or ``.reduce``/``.process``)
runs a :class:`WindowOperator`. What it guarantees:

* **Assignment.** Each record goes to the windows the assigner gives its
  timestamp (event time: the record's event timestamp; processing time: the
  operator's clock when the batch arrives). Merging assigners (sessions) merge a
  key's windows that overlap or touch (:mod:`lockgate.windowing.session_merge`).
* **Event-time firing (M-W6).** When the watermark reaches ``end - 1`` of a
  window, the window fires: its result rows are emitted, in window-end order,
  before the watermark is forwarded. With ``allowed_lateness(d)`` the window's
  state is kept until the watermark reaches ``end - 1 + d``; a record arriving
  for it meanwhile updates the state and the window fires again at once with
  the updated result (one result per touched (key, window) per batch: the full
  window, not a delta). Then the state is dropped.
* **Late records.** A record is late when every window it belongs to was
  already dropped (``end - 1 + allowed_lateness <= watermark``). Late records go
  to the side output set by ``side_output_late_data(tag)`` (as they arrived,
  with their timestamps); without one they are dropped (as in Flink) and
  counted in the operator's metrics under ``side_out[LATE_RECORDS_DROPPED]``.
  A record in no window at all (a gap between sliding windows) is not late.
  A record without an event timestamp in an event-time window fails the job
  (never silently dropped).
* **Processing-time firing.** A window fires when the operator's clock (the
  injectable clock) passes ``end - 1`` (reads ``end`` or later: no later record can
  fall in it), and is then dropped. At the end of a
  bounded input, open processing-time windows fire with what they hold.
* **Results** carry the window (see :mod:`.contents` for their shape) and
  the event timestamp ``end - 1``.
* **Checkpoints (M-T3, M-T4).** The synchronous part of a snapshot is cheap
  (copy-on-write for the vectorized aggregates; user accumulators are pickled);
  processing continues during the asynchronous part. State is recorded by key
  group with each row's fired flag and the subtask's watermark, and restored
  exactly, at the same or another parallelism (each subtask keeps the rows of
  its key groups). After a restore, until the watermark passes it again, the
  restored watermark of a key's key group still decides lateness, so replayed
  records are judged as they were before the failure.

The fast path - built-in aggregates (``lg.agg.*``) on tumbling or sliding
windows over Arrow batches keyed by columns - does no per-record Python work:
keys are dictionary-encoded per batch, records are reduced per (key, window)
with numpy and merged into columnar state one window at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....core.batch import Batch, num_rows, take, timestamps_of
from ....core.elements import MAX_WATERMARK, MIN_WATERMARK, Watermark
from ....core.key_groups import key_group_range
from ....core.partitioners import KeySelector
from ....errors import ConfigurationError
from ....state.snapshot import PAYLOAD_MARK, PAYLOAD_VERSION, payload_part
from ....windowing.assigners import WindowAssigner, WindowAssignment
from ..base import StreamOperator, close_function, open_function
from ..key_group_state import check_max_parallelism, empty_floor, subtask_key_groups, take_floor
from .contents import WindowContents
from .keys import KeyDictionary
from .store import AlignedStore, Block, Rows, SessionStore

#: the ``side_out`` metric counting late records dropped (no late-data side output)
LATE_RECORDS_DROPPED = "late records dropped"
#: the ``format`` mark and ``version`` of window state snapshots
WINDOW_STATE_FORMAT = "lockgate-windows"
WINDOW_STATE_VERSION = 1
#: built-in aggregates: the windows a watermark fires leave together in one batch,
#: flushed early once it holds this many (key, window) results
FIRE_BATCH_ROWS = 1 << 17


class WindowOperator(StreamOperator):
    """Keyed windows (see the module docstring)."""

    def __init__(
        self,
        assigner: WindowAssigner,
        key_selector: KeySelector,
        contents: WindowContents,
        allowed_lateness: int = 0,
        late_tag: str | None = None,
    ) -> None:
        super().__init__()
        self.assigner = assigner
        self.key_selector = key_selector
        self.contents = contents
        self.allowed_lateness = allowed_lateness
        self.late_tag = late_tag
        self.event_time = assigner.is_event_time
        self.merging = assigner.is_merging
        #: late records dropped by this subtask (no late-data side output)
        self.late_records_dropped = 0
        self._restored: Any = None

    # -- lifecycle ----------------------------------------------------------------------
    def initialize_state(self, restored: Any) -> None:
        self._restored = restored

    def open(self) -> None:
        ctx = self.ctx
        self.keys = KeyDictionary(self.key_selector, ctx.max_parallelism)
        self.contents.open(self)
        self.store: AlignedStore | SessionStore = (
            SessionStore(self.contents) if self.merging else AlignedStore(self.contents)
        )
        #: restored watermark per key group, until event time passes it (or None)
        self._floor: np.ndarray | None = None
        self._floor_max = MIN_WATERMARK
        self._scheduled: set[int] = set()
        restored, self._restored = self._restored, None
        if restored is not None:
            self._restore(restored)
        fn = getattr(self.contents, "function", None)
        if fn is not None:
            try:
                open_function(fn, ctx)
            except Exception as e:
                raise self.user_error(e) from e

    def metric_keys(self) -> int:
        """Keys seen (a metric, read from other threads)."""
        return len(self.keys)

    def metric_state_bytes(self) -> int:
        """Approximate bytes of the open windows' contents (a metric)."""
        return sum(
            int(getattr(t.payload, "nbytes", 0)) + t.codes.nbytes
            for t in list(getattr(self.store, "windows", lambda: [])())
        )

    def close(self) -> None:
        fn = getattr(self.contents, "function", None)
        if fn is not None:
            try:
                close_function(fn)
            except Exception as e:
                raise self.user_error(e) from e

    def finish(self) -> None:
        """End of input: open processing-time windows fire with what they hold (event
        time: the final watermark already fired everything)."""
        if not self.event_time:
            self._fire_processing_time(MAX_WATERMARK)

    # -- records ------------------------------------------------------------------------
    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        n = num_rows(batch)
        if not n:
            return
        self.counters.records_in += n
        contents = self.contents
        try:
            data = contents.prepare(batch)
            codes = self.keys.codes_of(
                data if contents.vectorized else batch, None if contents.vectorized else data
            )
        except Exception as e:
            raise self.user_error(e) from e
        timestamps = self._timestamps(batch, n)
        try:
            assignment = self.assigner.assign(timestamps)
            if self.merging:
                self._add_to_sessions(batch, data, codes, timestamps, assignment)
            else:
                self._add_to_windows(batch, data, codes, timestamps, assignment)
        except ConfigurationError as e:  # e.g. an aggregate of a column the records lack
            if f"window operator '{self.name}'" in str(e):
                raise
            raise ConfigurationError(f"window operator '{self.name}': {e}") from e

    def _timestamps(self, batch: Batch, n: int) -> np.ndarray:
        if not self.event_time:
            return np.full(n, self.ctx.clock.time_ms(), dtype=np.int64)
        ts = timestamps_of(batch)
        if ts is None:
            raise ConfigurationError(
                f"window operator '{self.name}' uses event-time windows, but its records "
                "have no event timestamps: give the source a watermark_strategy "
                "(env.from_source(..., watermark_strategy=...)) or call "
                "assign_timestamps_and_watermarks(...) before key_by(...).window(...), or use "
                "processing-time windows"
            )
        return ts

    def _add_to_windows(
        self,
        batch: Batch,
        data: Any,
        codes: np.ndarray,
        timestamps: np.ndarray,
        assignment: WindowAssignment,
    ) -> None:
        store = self.store
        assert isinstance(store, AlignedStore)
        lateness = self.allowed_lateness
        if self.event_time:
            rows, starts, ends = assignment
            limit = self._late_limit(codes[rows] if self._floor is not None else None)
            late = (ends - 1 + lateness) <= limit
            if late.any():
                keep = ~late
                accepted = np.zeros(len(codes), dtype=bool)
                accepted[rows[keep]] = True
                windowed = np.zeros(len(codes), dtype=bool)
                windowed[rows] = True
                self._late_records(batch, np.flatnonzero(windowed & ~accepted))
                assignment = WindowAssignment(rows[keep], starts[keep], ends[keep])
        touched = store.add(data, codes, timestamps, assignment)
        if not self.event_time:
            for table, _ in touched:
                self._schedule(table.end)
        elif lateness:
            # late firing: rows of windows the watermark already passed fire again now
            for table, trows in touched:
                limit = self._late_limit(table.codes[trows] if self._floor is not None else None)
                due = (table.end - 1) <= limit
                if np.all(due):
                    self._emit_rows(store.fire(table, trows))
                elif np.any(due):
                    self._emit_rows(store.fire(table, trows[due]))

    def _add_to_sessions(
        self,
        batch: Batch,
        data: Any,
        codes: np.ndarray,
        timestamps: np.ndarray,
        assignment: WindowAssignment,
    ) -> None:
        store = self.store
        assert isinstance(store, SessionStore)
        late_time: Any = None
        if self.event_time:
            late_time = self.current_watermark if self._floor is None else self._late_limit
        result = store.add(data, codes, timestamps, assignment, late_time, self.allowed_lateness)
        self._late_records(batch, result.late_records)
        touched = result.touched
        if not len(touched):
            return
        if not self.event_time:
            for end in np.unique(store.end[touched]).tolist():
                self._schedule(end)
        elif self.allowed_lateness:
            ends = store.end[touched]
            due = touched[
                (ends - 1)
                <= self._late_limit(store.key[touched] if self._floor is not None else None)
            ]
            if len(due):
                self._emit_rows(store.fire(due[np.argsort(store.end[due], kind="stable")]))

    def _late_limit(self, codes: np.ndarray | None) -> Any:
        """The event time deciding lateness: the watermark, or, after a restore and
        until the watermark passes them, the restored watermark of each code's key group
        (an array, one per code)."""
        wm = self.current_watermark
        floor = self._floor
        if floor is None or codes is None:
            return wm
        if wm >= self._floor_max:
            self._floor = None
            return wm
        return np.maximum(floor[self.keys.key_groups[codes]], wm)

    def _late_records(self, batch: Batch, indices: np.ndarray) -> None:
        n = len(indices)
        if not n:
            return
        counters = self.counters.side_out
        if self.late_tag is not None:
            counters[self.late_tag] = counters.get(self.late_tag, 0) + n
            self.output.emit_side(self.late_tag, take(batch, indices))
        else:
            self.late_records_dropped += n
            counters[LATE_RECORDS_DROPPED] = counters.get(LATE_RECORDS_DROPPED, 0) + n

    def _emit_rows(self, rows: Rows) -> None:
        if not len(rows.codes):
            return
        for b in self.contents.results(self.keys, rows.codes, rows.starts, rows.ends, rows.payload):
            self.emit(b)

    def _concat_rows(self, parts: list[Rows]) -> Rows:
        """One :class:`Rows` of ``parts``, in order."""
        if len(parts) == 1:
            return parts[0]
        return Rows(
            np.concatenate([p.codes for p in parts]),
            np.concatenate([p.starts for p in parts]),
            np.concatenate([p.ends for p in parts]),
            self.contents.concat([p.payload for p in parts]),
        )

    # -- event time (M-W6) -------------------------------------------------------------
    def advance_watermark(self, watermark: Watermark) -> None:
        """Fire every window whose end - 1 the watermark reached (in end order), drop
        the state of windows past their allowed lateness, then forward the watermark."""
        t = watermark.timestamp
        if self.event_time:
            self._fire_event_time(t)
        elif t == MAX_WATERMARK:
            self._fire_processing_time(MAX_WATERMARK)
        self.output.emit_element(watermark)

    def _fire_event_time(self, t: int) -> None:
        lateness = self.allowed_lateness
        store = self.store
        if isinstance(store, AlignedStore):
            # built-in aggregates: the windows this watermark fires leave as one batch
            # (in end, then start order; flushed early at FIRE_BATCH_ROWS rows), not one
            # batch per window: a batch costs the same per-call overhead downstream
            # (result columns, sink writes, Parquet row groups) whatever its size
            pending: list[Rows] = []
            rows_pending = 0
            together = self.contents.vectorized
            for table in store.due(t):
                if table.pending:
                    fired = store.fire(table)
                    if not together:
                        self._emit_rows(fired)
                    else:
                        pending.append(fired)
                        rows_pending += len(fired.codes)
                        if rows_pending >= FIRE_BATCH_ROWS:
                            self._emit_rows(self._concat_rows(pending))
                            pending, rows_pending = [], 0
                if table.end - 1 + lateness <= t or t == MAX_WATERMARK:
                    store.remove(table)
            if pending:
                self._emit_rows(self._concat_rows(pending))
        else:
            if len(store):
                self._emit_rows(store.fire(store.due(t)))
                store.remove_where((store.end - 1 + lateness <= t) | (t == MAX_WATERMARK))
        self._maybe_compact()

    # -- processing time --------------------------------------------------------------
    def _schedule(self, time_ms: int) -> None:
        if time_ms in self._scheduled:
            return
        service = self.ctx.processing_time_service
        if service is None:
            return
        self._scheduled.add(time_ms)
        service.schedule(time_ms, self._on_processing_time)

    def _on_processing_time(self, time_ms: int) -> None:
        self._scheduled.discard(time_ms)
        self._fire_processing_time(self.ctx.clock.time_ms() - 1)

    def _fire_processing_time(self, passed: int) -> None:
        """Fire and drop every window whose ``end - 1`` the clock passed (``end - 1 <=
        passed``; the clock then reads at least ``end``, so no record of the task can
        still fall in the window)."""
        store = self.store
        if isinstance(store, AlignedStore):
            for table in store.due(passed):
                self._emit_rows(store.fire(table, np.arange(len(table))))
                store.remove(table)
        elif len(store):
            rows = store.due(passed, unfired_only=False)
            if len(rows):
                self._emit_rows(store.fire(rows))
                mask = np.zeros(len(store), dtype=bool)
                mask[rows] = True
                store.remove_where(mask)
        self._maybe_compact()

    # -- key dictionary ------------------------------------------------------------------
    def _maybe_compact(self) -> None:
        """Forget keys no window holds any more (the dictionary would grow forever)."""
        n = len(self.keys)
        if n < 4096 or n < 2 * len(self.store):
            return
        live = self.store.live_codes()
        if n < 2 * len(live):
            return
        self.store.remap(self.keys.compact(live))

    # -- checkpoints (M-T3, M-T4) ------------------------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> WindowSnapshot:
        """The synchronous part: the store's blocks (copy-on-write), the key dictionary
        as it is now, and the event time."""
        keys = self.keys
        ctx = self.ctx
        floor = self._floor
        return WindowSnapshot(
            blocks=self.store.snapshot_blocks(),
            values=keys.values,
            key_groups=keys.key_groups,
            header={
                "format": WINDOW_STATE_FORMAT,
                "version": WINDOW_STATE_VERSION,
                "contents": self.contents.describe(),
                "merging": self.merging,
                "max_parallelism": ctx.max_parallelism,
                "key_groups": subtask_key_groups(ctx),
                "watermark": int(self.current_watermark),
                "key_types": keys.types,
                "floor": None if floor is None else floor.copy(),
            },
        )

    def _restore(self, restored: Any) -> None:
        """Take over the rows of this subtask's key groups from one (same parallelism)
        or every (rescaling) old subtask's snapshot."""
        ctx = self.ctx
        payloads = [restored.own()] if restored.same_parallelism else restored.all()
        mine = key_group_range(ctx.subtask_index, ctx.parallelism, ctx.max_parallelism)
        floor = empty_floor(ctx)
        contents = self.contents
        for payload in payloads:
            state = payload_part(payload, "function")
            if state is None:
                continue
            self._check_restored(state)
            self.keys.restore_types(state.get("key_types") or [])
            take_floor(floor, state, mine)
            for block in state["blocks"]:
                groups = np.asarray(block["key_groups"], dtype=np.int64)
                pick = np.flatnonzero((groups >= mine.start) & (groups < mine.stop))
                if not len(pick):
                    continue
                keys = block["keys"]
                codes = self.keys.restore_keys([keys[i] for i in pick.tolist()], groups[pick])
                rows = contents.take(contents.thaw(block["payload"]), pick)
                self.store.restore(
                    Block(
                        codes,
                        np.asarray(block["start"])[pick],
                        np.asarray(block["end"])[pick],
                        np.asarray(block["fired"], dtype=bool)[pick],
                        rows,
                    )
                )
        if self.event_time:
            top = int(floor.max()) if len(floor) else MIN_WATERMARK
            if top > MIN_WATERMARK:
                self._floor = floor
                self._floor_max = top
        else:
            for end in self._window_ends():
                self._schedule(end)

    def _window_ends(self) -> list[int]:
        store = self.store
        if isinstance(store, AlignedStore):
            return sorted({t.end for t in store.windows()})
        return sorted(set(store.end.tolist()))

    def _check_restored(self, state: Any) -> None:
        if not isinstance(state, dict) or state.get("format") != WINDOW_STATE_FORMAT:
            raise ConfigurationError(
                f"window operator '{self.name}': the state restored for its uid is not "
                "window state; was the uid given to another operator? Give this operator "
                "a new uid or restore with allow_non_restored_state"
            )
        if state.get("version") != WINDOW_STATE_VERSION:
            raise ConfigurationError(
                f"window operator '{self.name}': window state version {state.get('version')} "
                f"cannot be read (this version reads {WINDOW_STATE_VERSION})"
            )
        expected = self.contents.describe()
        if state.get("contents") != expected or state.get("merging") != self.merging:
            raise ConfigurationError(
                f"window operator '{self.name}': the restored window state holds "
                f"{state.get('contents')} ({'merging' if state.get('merging') else 'aligned'} "
                f"windows), but the operator now computes {expected} "
                f"({'merging' if self.merging else 'aligned'} windows); keep the window "
                "function, or give the operator a new uid to start it empty"
            )
        check_max_parallelism(state, self.ctx, f"window operator '{self.name}'")


class WindowSnapshot:
    """The synchronous part of a window operator's snapshot; ``materialize()`` (any
    thread) builds the payload::

        {"lockgate_state": 1, "keyed": None, "operator": None, "broadcast": None,
         "timers": None, "function": {
             "format": "lockgate-windows", "version": 1, "contents": str, "merging": bool,
             "max_parallelism": int, "key_groups": (first, stop) of the subtask,
             "watermark": int, "key_types": [Arrow type or None per key column],
             "floor": int64 array per key group or None,
             "blocks": [{"keys": [key, ...], "key_groups": int64 array, "start": int64
                         array, "end": int64 array, "fired": bool array,
                         "payload": Accumulators | pickled list}, ...]}}

    one row per (key, window) in each block."""

    def __init__(
        self, blocks: list[Block], values: list[Any], key_groups: np.ndarray, header: dict[str, Any]
    ) -> None:
        self._blocks: list[Block] | None = blocks
        self._values = values
        self._key_groups = key_groups
        self._header = header

    def materialize(self) -> dict[str, Any]:
        blocks = self._blocks
        if blocks is None:
            raise ConfigurationError("this window state snapshot was released")
        values = self._values
        out = []
        for b in blocks:
            out.append(
                {
                    "keys": [values[c] for c in b.codes.tolist()],
                    "key_groups": self._key_groups[b.codes],
                    "start": b.starts,
                    "end": b.ends,
                    "fired": b.fired,
                    "payload": b.payload,
                }
            )
        state = dict(self._header)
        state["blocks"] = out
        return {
            PAYLOAD_MARK: PAYLOAD_VERSION,
            "keyed": None,
            "operator": None,
            "broadcast": None,
            "timers": None,
            "function": state,
        }

    def release(self) -> None:
        self._blocks = None

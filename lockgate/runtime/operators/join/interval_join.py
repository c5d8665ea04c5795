"""The interval join operator: two keyed inputs joined on key and event-time distance.

``a.key_by(ka).interval_join(b.key_by(kb)).between(lower, upper).process(...)`` runs an
:class:`IntervalJoinOperator` (input 0: the left stream ``a``, input 1: the right
stream ``b``, each key-group partitioned by its own key selector). What it guarantees,
as Flink's ``IntervalJoinOperator``:

* **Pairs.** A left record at ``tl`` and a right record at ``tr`` with equal keys join
  when ``tl + lower <= tr <= tl + upper`` (``lower``/``upper`` are the inclusive bounds
  after ``lower_bound_exclusive()``/``upper_bound_exclusive()`` moved them by 1 ms).
  Each pair is produced once, when the later of the two arrives, with the event
  timestamp ``max(tl, tr)``.
* **Event time (M-W5).** The operator's watermark is the minimum of its two inputs'.
  A record is *late* when its timestamp is below that watermark on arrival (Flink's
  rule); late records are dropped and counted in the operator's metrics under
  ``side_out[LATE_RECORDS_DROPPED]``, or, with ``side_output_late_data(left_tag,
  right_tag)``, emitted to the side output of their input.
* **Bounded state.** A left record is kept until the watermark passes ``tl + upper``,
  a right record until it passes ``tr - lower``: then no record that is not late can
  join it any more, and it is dropped. So every pair of records that are both not
  late is produced, and the state holds about (input rate) x (watermark lag +
  interval width) records per side.
* **Two paths.** ``fn=None`` with column keys: the vectorized path keeps each side's
  records as Arrow batches and joins a batch against the other side's buffer with
  Arrow's hash join, then filters the time condition with numpy; the output rows
  have the left's columns and the right's (a key column of the same name on both
  sides once, other colliding names with the suffixes). Key columns are cast to one
  type per kind first (integers to int64, strings - also large and dictionary-encoded
  - to string, floats to float64: :mod:`lockgate.core.key_types`), so an int32 key
  joins an int64 key of equal value, and the output's key columns have that type.
  Keys of kinds that never match (an integer and a string or a float) fail the job
  with a ConfigurationError naming both key columns, on either path. With a
  ``ProcessJoinFunction``: records are Python rows, buffered per key, and
  ``fn.process_element(left, right, ctx)`` yields the outputs of each pair.
* **Checkpoints (M-T3, M-T4).** The synchronous part of a snapshot keeps references to
  the (immutable) Arrow buffers, or pickles the row buffers; the key group of each
  buffered record is computed in the asynchronous part. The state is the operator's
  own (the same on the heap and the RocksDB backend); restores take the records of
  the subtask's key groups, so rescaling through a savepoint moves them with their
  keys. The restored watermark still decides lateness per key group until event
  time passes it again, so replayed records are judged as before the failure.
"""

from __future__ import annotations

import heapq
import pickle
from typing import Any

import numpy as np
import pyarrow as pa

from ....core.batch import (
    TS_COLUMN,
    Batch,
    RowBatch,
    num_rows,
    take,
    timestamps_of,
    to_arrow,
    to_rows,
)
from ....core.elements import MAX_WATERMARK, MIN_WATERMARK, Watermark
from ....core.key_groups import key_group_range, key_groups_of_keys
from ....core.key_types import (
    KeyKindCheck,
    arrow_types,
    canonical_key_columns,
    key_kinds,
    python_types,
    schema_kinds,
)
from ....core.moved_modules import loads as moved_loads
from ....core.partitioners import KeySelector
from ....core.user_functions import bind_function
from ....errors import ConfigurationError
from ....state.snapshot import PAYLOAD_MARK, PAYLOAD_VERSION, payload_part
from ..base import StreamOperator, close_function, open_function
from ..basic import _SINGLE_RECORDS, single_record_error
from ..key_group_state import check_max_parallelism, empty_floor, subtask_key_groups, take_floor
from ..keyed import ElementContext

#: the ``side_out`` metric counting late records dropped (no late-data side output)
LATE_RECORDS_DROPPED = "late records dropped"
#: the ``format`` mark and ``version`` of interval join state snapshots
INTERVAL_JOIN_STATE_FORMAT = "lockgate-interval-join"
INTERVAL_JOIN_STATE_VERSION = 1
LEFT, RIGHT = 0, 1
_LEFT_TS = "__lockgate_left_time"
_RIGHT_TS = "__lockgate_right_time"
#: the vectorized buffers are merged into one batch once they hold this many chunks
_MAX_CHUNKS = 32


class ProcessJoinContext(ElementContext):
    """The ``ctx`` of ``process_element(left, right, ctx)``: ``left_timestamp``,
    ``right_timestamp``, ``timestamp`` (the output's: their maximum), ``current_key``
    (the left record's key) and ``output(tag, value)`` (a side output). Reused across
    pairs: do not keep it."""

    __slots__ = ("left_timestamp", "right_timestamp")

    def __init__(self, operator: StreamOperator) -> None:
        super().__init__(operator, None)
        self.left_timestamp = 0
        self.right_timestamp = 0


class _Chunk:
    __slots__ = ("batch", "ts", "min_ts")

    def __init__(self, batch: pa.RecordBatch, ts: np.ndarray) -> None:
        self.batch = batch
        self.ts = ts
        self.min_ts = int(ts.min()) if len(ts) else MAX_WATERMARK


class ColumnBuffer:
    """One side's records as Arrow batches (with their event-time column), in chunks;
    chunks are immutable, so a snapshot keeps references."""

    def __init__(self) -> None:
        self.chunks: list[_Chunk] = []
        self.rows = 0

    def add(self, batch: pa.RecordBatch, ts: np.ndarray) -> None:
        if not batch.num_rows:
            return
        self.chunks.append(_Chunk(batch, ts))
        self.rows += batch.num_rows
        if len(self.chunks) > _MAX_CHUNKS:
            merged = self.table().combine_chunks().to_batches()
            batch = merged[0] if merged else batch
            self.chunks = [_Chunk(batch, np.concatenate([c.ts for c in self.chunks]))]

    def table(self) -> pa.Table:
        batches = [c.batch for c in self.chunks]
        if all(b.schema.equals(batches[0].schema) for b in batches):
            return pa.Table.from_batches(batches)
        return pa.concat_tables(
            [pa.Table.from_batches([b]) for b in batches], promote_options="permissive"
        )

    def expire(self, before: int) -> None:
        """Drop the records with ``ts < before`` (their bound already passed)."""
        kept: list[_Chunk] = []
        for c in self.chunks:
            if c.min_ts >= before:
                kept.append(c)
                continue
            keep = np.flatnonzero(c.ts >= before)
            self.rows -= len(c.ts) - len(keep)
            if len(keep):
                kept.append(_Chunk(c.batch.take(pa.array(keep, type=pa.int64())), c.ts[keep]))
        self.chunks = kept

    def nbytes(self) -> int:
        return sum(c.batch.nbytes for c in list(self.chunks))

    def snapshot(self) -> list[pa.RecordBatch]:
        return [c.batch for c in self.chunks]

    def restore(self, batch: pa.RecordBatch) -> None:
        ts = timestamps_of(batch)
        assert ts is not None
        self.add(batch, np.asarray(ts, dtype=np.int64))


class RowBuffer:
    """One side's records as Python rows, per key: ``key -> [(ts, record), ...]``, and a
    heap of (ts, key) to find what expired without scanning every key."""

    def __init__(self) -> None:
        self.by_key: dict[Any, list[tuple[int, Any]]] = {}
        self._heap: list[tuple[int, int, Any]] = []
        self._low: dict[Any, int] = {}
        self._seq = 0
        self.rows = 0

    def add(self, key: Any, ts: int, record: Any) -> None:
        entries = self.by_key.get(key)
        if entries is None:
            entries = self.by_key[key] = []
        entries.append((ts, record))
        self.rows += 1
        low = self._low.get(key)
        if low is None or ts < low:
            # the heap knows each key's smallest buffered time (older entries go stale)
            self._low[key] = ts
            self._seq += 1
            heapq.heappush(self._heap, (ts, self._seq, key))

    def expire(self, before: int) -> None:
        """Drop the records with ``ts < before``."""
        heap = self._heap
        touched: set[Any] = set()
        while heap and heap[0][0] < before:
            _, _, key = heapq.heappop(heap)
            touched.add(key)
        for key in touched:
            entries = self.by_key.get(key)
            if entries is None:
                continue
            kept = [e for e in entries if e[0] >= before]
            self.rows -= len(entries) - len(kept)
            if kept:
                self.by_key[key] = kept
                low = min(e[0] for e in kept)
                self._low[key] = low
                self._seq += 1
                heapq.heappush(heap, (low, self._seq, key))
            else:
                del self.by_key[key]
                del self._low[key]

    def snapshot(self) -> bytes:
        return pickle.dumps(
            [(k, e) for k, e in self.by_key.items()], protocol=pickle.HIGHEST_PROTOCOL
        )


class IntervalJoinOperator(StreamOperator):
    """The interval join (see the module docstring)."""

    two_input = True

    def __init__(
        self,
        left_key: KeySelector,
        right_key: KeySelector,
        lower: int,
        upper: int,
        fn: Any = None,
        suffixes: tuple[str, str] = ("_left", "_right"),
        late_tags: tuple[str | None, str | None] = (None, None),
    ) -> None:
        super().__init__()
        if lower > upper:
            raise ConfigurationError(
                f"interval join: the lower bound {lower} ms is above the upper bound "
                f"{upper} ms, so no pair can join; use between(lower, upper) with lower <= upper"
            )
        self.selectors = (left_key, right_key)
        self.lower = lower
        self.upper = upper
        self.fn = fn
        self.suffixes = suffixes
        self.late_tags = late_tags
        self.vectorized = fn is None
        #: late records dropped by this subtask (no late-data side output)
        self.late_records_dropped = 0
        #: the most records both buffers held together after any batch (a metric)
        self.max_buffered_rows = 0
        self._restored: Any = None

    # -- lifecycle ----------------------------------------------------------------------
    def initialize_state(self, restored: Any) -> None:
        self._restored = restored

    def open(self) -> None:
        self.buffers: tuple[Any, Any] = (
            (ColumnBuffer(), ColumnBuffer()) if self.vectorized else (RowBuffer(), RowBuffer())
        )
        self._floor: np.ndarray | None = None
        self._floor_max = MIN_WATERMARK
        left, right = self.selectors
        self._kinds = KeyKindCheck(
            f"interval join '{self.name}'",
            (f"the left key ({left.describe()})", f"the right key ({right.describe()})"),
        )
        if not self.vectorized:
            self._call = bind_function(self.fn, "process_element")
            self.join_ctx = ProcessJoinContext(self)
        restored, self._restored = self._restored, None
        if restored is not None:
            self._restore(restored)
        if self.fn is not None:
            try:
                open_function(self.fn, self.ctx)
            except Exception as e:
                raise self.user_error(e) from e

    def close(self) -> None:
        if self.fn is not None:
            try:
                close_function(self.fn)
            except Exception as e:
                raise self.user_error(e) from e

    def buffered_rows(self) -> int:
        """Records both sides hold in state now."""
        return int(self.buffers[0].rows + self.buffers[1].rows)

    def metric_state_bytes(self) -> int | None:
        """Approximate bytes of the buffered records (vectorized path; a metric)."""
        buffers = getattr(self, "buffers", None)
        if buffers is None or not self.vectorized:
            return None
        return int(buffers[0].nbytes() + buffers[1].nbytes())

    def metric_keys(self) -> int | None:
        buffers = getattr(self, "buffers", None)
        if buffers is None or self.vectorized:
            return None
        return len(buffers[0].by_key) + len(buffers[1].by_key)

    # -- records ------------------------------------------------------------------------
    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        n = num_rows(batch)
        if not n:
            return
        self.counters.records_in += n
        side = RIGHT if input_index else LEFT
        ts = timestamps_of(batch)
        if ts is None:
            raise ConfigurationError(
                f"interval join '{self.name}' joins on event time, but the records of its "
                f"{'right' if side else 'left'} input have no event timestamps: give the "
                "source a watermark_strategy (env.from_source(..., watermark_strategy=...)) "
                "or call assign_timestamps_and_watermarks(...) before key_by(...)"
            )
        ts = np.asarray(ts, dtype=np.int64)
        try:
            if self.vectorized:
                self._process_columns(batch, ts, side)
            else:
                self._process_rows(batch, ts, side)
        except (ConfigurationError, KeyError) as e:
            raise self.user_error(e) from e
        total = self.buffered_rows()
        if total > self.max_buffered_rows:
            self.max_buffered_rows = total

    def _expiry(self, side: int) -> int:
        """A record of ``side`` at ``ts`` is kept while ``ts + offset >= watermark``."""
        return self.upper if side == LEFT else -self.lower

    def _late_mask(self, ts: np.ndarray, key_groups: Any) -> np.ndarray:
        wm = self.current_watermark
        if self._floor is not None:
            if wm >= self._floor_max:
                self._floor = None
            else:
                return ts < np.maximum(self._floor[key_groups()], wm)
        if wm == MIN_WATERMARK:
            return np.zeros(len(ts), dtype=bool)
        return ts < wm

    def _late(self, batch: Batch, late: np.ndarray, side: int) -> None:
        idx = np.flatnonzero(late)
        tag = self.late_tags[side]
        counters = self.counters.side_out
        if tag is not None:
            counters[tag] = counters.get(tag, 0) + len(idx)
            self.output.emit_side(tag, take(batch, idx))
        else:
            self.late_records_dropped += len(idx)
            counters[LATE_RECORDS_DROPPED] = counters.get(LATE_RECORDS_DROPPED, 0) + len(idx)

    # vectorized ---------------------------------------------------------------------
    def _process_columns(self, batch: Batch, ts: np.ndarray, side: int) -> None:
        arrow = to_arrow(batch, operator=f"interval join '{self.name}'")
        selector = self.selectors[side]
        columns = selector.columns or ()
        self._kinds.observe(
            side, schema_kinds(arrow.schema, columns), arrow_types(arrow.schema, columns)
        )
        arrow = canonical_key_columns(arrow, columns)
        late = self._late_mask(ts, lambda: selector.key_groups(arrow, self.ctx.max_parallelism))
        if late.any():
            self._late(arrow, late, side)
            keep = np.flatnonzero(~late)
            arrow = arrow.take(pa.array(keep, type=pa.int64()))
            ts = ts[keep]
            if not len(ts):
                return
        other = self.buffers[1 - side]
        if other.rows:
            self._join_columns(arrow, other.table(), side)
        # keep only what a later record of the other side can still join
        keep_from = self.current_watermark - self._expiry(side)
        if self.current_watermark > MIN_WATERMARK and int(ts.min()) < keep_from:
            keep = np.flatnonzero(ts >= keep_from)
            arrow = arrow.take(pa.array(keep, type=pa.int64()))
            ts = ts[keep]
        self.buffers[side].add(arrow, ts)

    def _join_columns(self, new: pa.RecordBatch, buffered: pa.Table, side: int) -> None:
        fresh = pa.Table.from_batches([new])
        left, right = (fresh, buffered) if side == LEFT else (buffered, fresh)
        left = left.rename_columns([_LEFT_TS if c == TS_COLUMN else c for c in left.column_names])
        right = right.rename_columns(
            [_RIGHT_TS if c == TS_COLUMN else c for c in right.column_names]
        )
        lkeys = list(self.selectors[LEFT].columns or ())
        rkeys = list(self.selectors[RIGHT].columns or ())
        joined = left.join(
            right,
            keys=lkeys,
            right_keys=rkeys,
            join_type="inner",
            left_suffix=self.suffixes[0],
            right_suffix=self.suffixes[1],
            coalesce_keys=lkeys == rkeys,
            use_threads=False,
        )
        if not joined.num_rows:
            return
        lt = joined.column(_LEFT_TS).to_numpy()
        rt = joined.column(_RIGHT_TS).to_numpy()
        ok = (rt >= lt + self.lower) & (rt <= lt + self.upper)
        hits = np.flatnonzero(ok)
        if not len(hits):
            return
        out_ts = np.maximum(lt[hits], rt[hits])
        joined = joined.take(pa.array(hits, type=pa.int64()))
        joined = joined.drop_columns([_LEFT_TS, _RIGHT_TS])
        joined = joined.append_column(pa.field(TS_COLUMN, pa.int64()), pa.array(out_ts))
        for b in joined.combine_chunks().to_batches():
            self.emit(b)

    # rows (ProcessJoinFunction) ------------------------------------------------------
    def _process_rows(self, batch: Batch, ts: np.ndarray, side: int) -> None:
        rows = to_rows(batch)
        keys = self.selectors[side].state_keys(batch, rows)
        if keys:
            self._kinds.observe(side, key_kinds(keys[0]), python_types(keys[0]))
        late = self._late_mask(ts, lambda: key_groups_of_keys(keys, self.ctx.max_parallelism))
        if late.any():
            self._late(batch, late, side)
        other: RowBuffer = self.buffers[1 - side]
        mine: RowBuffer = self.buffers[side]
        lower, upper = self.lower, self.upper
        call = self._call
        ctx = self.join_ctx
        out: list[Any] = []
        stamps: list[int] = []
        keep_from = (
            self.current_watermark - self._expiry(side)
            if self.current_watermark > MIN_WATERMARK
            else MIN_WATERMARK
        )
        cancel = self.cancellation
        late_list = late.tolist()
        ts_list = ts.tolist()
        try:
            for i, record in enumerate(rows):
                if cancel.requested:
                    break
                if late_list[i]:
                    continue
                t = ts_list[i]
                key = keys[i]
                for t2, record2 in other.by_key.get(key, ()):
                    if side == LEFT:
                        tl, tr, lrec, rrec = t, t2, record, record2
                    else:
                        tl, tr, lrec, rrec = t2, t, record2, record
                    if tl + lower <= tr <= tl + upper:
                        ctx.current_key = key
                        ctx.left_timestamp = tl
                        ctx.right_timestamp = tr
                        stamp = ctx.timestamp = tl if tl > tr else tr
                        result = call(lrec, rrec, ctx)
                        if result is not None:
                            if isinstance(result, _SINGLE_RECORDS):
                                raise single_record_error("process_element", result)
                            before = len(out)
                            out.extend(result)
                            stamps.extend([stamp] * (len(out) - before))
                if t >= keep_from:
                    mine.add(key, t, record)
        except ConfigurationError:
            raise
        except Exception as e:
            raise self.user_error(e) from e
        cancel.check()
        ctx.flush_side_outputs()
        if out:
            self.emit(RowBatch(out, np.asarray(stamps, dtype=np.int64)))

    # -- event time (M-W5, M-W6) --------------------------------------------------------
    def advance_watermark(self, watermark: Watermark) -> None:
        """Drop the records no record that is not late can join any more, then forward
        the watermark."""
        t = watermark.timestamp
        for side in (LEFT, RIGHT):
            buffer = self.buffers[side]
            if t == MAX_WATERMARK:
                buffer.expire(MAX_WATERMARK)
            else:
                buffer.expire(t - self._expiry(side))
        self.output.emit_element(watermark)

    # -- checkpoints (M-T3, M-T4) -------------------------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> IntervalJoinSnapshot:
        ctx = self.ctx
        floor = self._floor
        return IntervalJoinSnapshot(
            sides=(self.buffers[LEFT].snapshot(), self.buffers[RIGHT].snapshot()),
            selectors=self.selectors,
            header={
                "format": INTERVAL_JOIN_STATE_FORMAT,
                "version": INTERVAL_JOIN_STATE_VERSION,
                "vectorized": self.vectorized,
                "max_parallelism": ctx.max_parallelism,
                "key_groups": subtask_key_groups(ctx),
                "watermark": int(self.current_watermark),
                "floor": None if floor is None else floor.copy(),
            },
        )

    def _restore(self, restored: Any) -> None:
        ctx = self.ctx
        payloads = [restored.own()] if restored.same_parallelism else restored.all()
        mine = key_group_range(ctx.subtask_index, ctx.parallelism, ctx.max_parallelism)
        floor = empty_floor(ctx)
        for payload in payloads:
            state = payload_part(payload, "function")
            if state is None:
                continue
            self._check_restored(state)
            take_floor(floor, state, mine)
            for side in (LEFT, RIGHT):
                part = state["sides"][side]
                groups = np.asarray(part["key_groups"], dtype=np.int64)
                pick = np.flatnonzero((groups >= mine.start) & (groups < mine.stop))
                if not len(pick):
                    continue
                if self.vectorized:
                    table: pa.Table = part["table"]
                    chosen = table.take(pa.array(pick, type=pa.int64())).combine_chunks()
                    columns = self.selectors[side].columns or ()
                    for b in chosen.to_batches():
                        self.buffers[side].restore(canonical_key_columns(b, columns))
                else:
                    entries = moved_loads(part["entries"])
                    buffer: RowBuffer = self.buffers[side]
                    for i in pick.tolist():
                        key, ts, record = entries[i]
                        buffer.add(key, ts, record)
        top = int(floor.max()) if len(floor) else MIN_WATERMARK
        if top > MIN_WATERMARK:
            self._floor = floor
            self._floor_max = top

    def _check_restored(self, state: Any) -> None:
        if not isinstance(state, dict) or state.get("format") != INTERVAL_JOIN_STATE_FORMAT:
            raise ConfigurationError(
                f"interval join '{self.name}': the state restored for its uid is not "
                "interval join state; was the uid given to another operator? Give this "
                "operator a new uid or restore with allow_non_restored_state"
            )
        if state.get("version") != INTERVAL_JOIN_STATE_VERSION:
            raise ConfigurationError(
                f"interval join '{self.name}': state version {state.get('version')} cannot "
                f"be read (this version reads {INTERVAL_JOIN_STATE_VERSION})"
            )
        if state.get("vectorized") != self.vectorized:
            was = "the vectorized join (no function)" if state.get("vectorized") else "a function"
            now = "the vectorized join" if self.vectorized else "a ProcessJoinFunction"
            raise ConfigurationError(
                f"interval join '{self.name}': the restored state was written by {was}, the "
                f"operator now runs {now}; keep process(...)'s argument, or give the operator "
                "a new uid to start it empty"
            )
        check_max_parallelism(state, self.ctx, f"interval join '{self.name}'")


class IntervalJoinSnapshot:
    """The synchronous part of an interval join's snapshot; ``materialize()`` (any
    thread) builds the payload::

        {"lockgate_state": 1, "keyed": None, "operator": None, "broadcast": None,
         "timers": None, "function": {
             "format": "lockgate-interval-join", "version": 1, "vectorized": bool,
             "max_parallelism": int, "key_groups": (first, stop) of the subtask,
             "watermark": int, "floor": int64 array per key group or None,
             "sides": [left, right]}}

    where a side is ``{"table": pyarrow.Table (with the event-time column),
    "key_groups": int64 array}`` (vectorized) or ``{"entries": pickled [(key, ts,
    record), ...], "key_groups": int64 array}`` (rows), one key group per record."""

    def __init__(
        self,
        sides: tuple[Any, Any],
        selectors: tuple[KeySelector, KeySelector],
        header: dict[str, Any],
    ) -> None:
        self._sides: tuple[Any, Any] | None = sides
        self._selectors = selectors
        self._header = header

    def materialize(self) -> dict[str, Any]:
        sides = self._sides
        if sides is None:
            raise ConfigurationError("this interval join state snapshot was released")
        max_parallelism = self._header["max_parallelism"]
        parts = []
        for side, taken in enumerate(sides):
            if self._header["vectorized"]:
                batches: list[pa.RecordBatch] = taken
                if batches:
                    table = pa.concat_tables(
                        [pa.Table.from_batches([b]) for b in batches],
                        promote_options="permissive",
                    ).combine_chunks()
                    groups = (
                        np.concatenate(
                            [
                                self._selectors[side].key_groups(b, max_parallelism)
                                for b in table.to_batches()
                            ]
                        )
                        if table.num_rows
                        else np.zeros(0, dtype=np.int64)
                    )
                else:
                    table = pa.table({})
                    groups = np.zeros(0, dtype=np.int64)
                parts.append({"table": table, "key_groups": groups})
            else:
                by_key = moved_loads(taken)
                entries = [(k, ts, r) for k, es in by_key for ts, r in es]
                groups = key_groups_of_keys([e[0] for e in entries], max_parallelism)
                parts.append(
                    {
                        "entries": pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL),
                        "key_groups": np.asarray(groups, dtype=np.int64),
                    }
                )
        state = dict(self._header)
        state["sides"] = parts
        return {
            PAYLOAD_MARK: PAYLOAD_VERSION,
            "keyed": None,
            "operator": None,
            "broadcast": None,
            "timers": None,
            "function": state,
        }

    def release(self) -> None:
        self._sides = None


__all__ = [
    "LATE_RECORDS_DROPPED",
    "IntervalJoinOperator",
    "ProcessJoinContext",
]

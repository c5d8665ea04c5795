"""Window join and co-group: the two inputs share one window operator.

``a.join(b).where(ka).equal_to(kb).window(assigner).apply(fn)`` is built as Flink
builds it: each input is *tagged* with its side and its key, the two tagged streams
are unioned and keyed by the key, and one
:class:`~lockgate.runtime.operators.window.operator.WindowOperator` holds both sides'
records per (key, window) as :class:`JoinContents`. Assignment, merging (sessions merge
over both sides' records), firing, allowed lateness, late records, checkpoints, restores
and rescaling are the window operator's (see
:mod:`lockgate.runtime.operators.window.operator`).

Tagging (:class:`TagBatch`, :class:`TagRecord`):

* built-in join (no Python function, column keys): an Arrow batch gets two kinds of
  columns appended - :data:`SIDE_FIELD` (int8: 0 left, 1 right) and one copy of each
  key column (:func:`key_fields`), so both sides key by the same field names while
  the user's columns (and their types) stay as they are;
* Python functions: each record ``r`` becomes ``{SIDE_FIELD: side, KEY_FIELD: key,
  VALUE_FIELD: r}``, so records of any type (and function keys) work.

What a firing emits (each output's event timestamp is the window's ``end - 1``):

* built-in join: one Arrow batch per fired batch of (key, window) rows, holding every
  pair of a left and a right record of the same row (an inner join). The pairs are
  found vectorized (numpy on the rows' ids) and the columns gathered with Arrow
  ``take``: no per-record Python. Columns: the left's, then the right's; a key
  column with the same name on both sides appears once; other names both sides
  have get the suffixes (pandas ``merge`` style);
* ``JoinFunction``: ``join(left, right)`` per pair, one output each;
  ``FlatJoinFunction``: ``join(left, right)`` yields outputs;
* ``CoGroupFunction``: ``co_group(lefts, rights)`` once per fired (key, window),
  with both lists (one may be empty), yielding outputs.

With allowed lateness a window that fires again (a record arrived within the
lateness) emits the join (or co-group) of its *whole* updated contents again, as
Flink's window join does - pairs emitted by the earlier firing come again.

Key types: keys are routed and held by value (:mod:`lockgate.core.key_hash` hashes
every integer width alike, and strings whether ``string``, ``large_string`` or
dictionary-encoded), so an int32 key joins an int64 key of equal value. Keys of
kinds that never match (an integer and a string or a float) fail the job with a
ConfigurationError naming both keys (:mod:`lockgate.core.key_types`), checked by each
subtask once it has seen records of both inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import cloudpickle
import numpy as np
import pyarrow as pa

from ....core.batch import TS_COLUMN, Batch, RowBatch, to_arrow, to_rows, with_timestamps
from ....core.excerpt import excerpt
from ....core.key_types import KeyKindCheck, arrow_types, key_kinds, python_types, schema_kinds
from ....core.moved_modules import loads as moved_loads
from ....core.state_records import state_record
from ....core.user_functions import bind_function
from ....errors import ConfigurationError
from ..basic import first_none
from ..window.contents import WindowContents

#: the field telling a tagged record's side (0: left, 1: right)
SIDE_FIELD = "__lockgate_join_side"
#: the key field of tagged records (Python functions)
KEY_FIELD = "__lockgate_join_key"
#: the field holding the original record (Python functions)
VALUE_FIELD = "__lockgate_join_value"
LEFT, RIGHT = 0, 1
#: a side's records are kept in at most this many chunks (more are concatenated)
MAX_CHUNKS = 32

#: what a firing computes: the built-in join, a (flat) join function, a co-group
ARROW_JOIN, FUNCTION_JOIN, FLAT_JOIN, CO_GROUP = "arrow join", "join", "flat join", "co_group"


def key_fields(n: int) -> tuple[str, ...]:
    """The field names of the ``n`` key columns of Arrow-tagged batches."""
    return tuple(f"{KEY_FIELD}_{i}" for i in range(n))


class TagBatch:
    """``map_batches`` function of the built-in join: appends the side column and a
    copy of each key column (named :func:`key_fields`)."""

    def __init__(self, side: int, columns: Sequence[str]) -> None:
        self.side = side
        self.columns = tuple(columns)

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        names = batch.schema.names
        missing = [c for c in self.columns if c not in names]
        if missing:
            which = "where" if self.side == LEFT else "equal_to"
            raise ConfigurationError(
                f"the window join's {which}({', '.join(map(repr, self.columns))}) names "
                f"column(s) {missing} the {'left' if self.side == LEFT else 'right'} "
                f"records lack (they have {names}); name existing columns"
            )
        out = batch.append_column(
            SIDE_FIELD, pa.array(np.full(batch.num_rows, self.side, dtype=np.int8))
        )
        for field, c in zip(key_fields(len(self.columns)), self.columns):
            out = out.append_column(field, batch.column(c))
        return out


class TagRecord:
    """``map`` function of the Python-function paths: wraps each record with its side
    and key."""

    def __init__(self, side: int, key: str | Sequence[str] | Callable[[Any], Any]) -> None:
        self.side = side
        self.key = key

    def __call__(self, record: Any) -> dict[str, Any]:
        key = self.key
        if isinstance(key, str):
            k = record[key]
        elif isinstance(key, (list, tuple)):
            k = tuple(record[c] for c in key)
        else:
            k = key(record)  # type: ignore[operator]
        return {SIDE_FIELD: self.side, KEY_FIELD: k, VALUE_FIELD: record}


class Prepared(NamedTuple):
    """A batch as :class:`JoinContents` folds it: each record's side and the records
    (an Arrow table of the user's columns, or a list of the original records)."""

    side: np.ndarray
    part: Any


Chunk = tuple[np.ndarray, Any]


@state_record("window_join.state")
class JoinState:
    """The payload of ``n`` (key, window) rows: per side, chunks of (row ids, records).

    A row id of ``-1`` marks a dead record (its row was taken away): taking rows
    renumbers ids and leaves records in place, so the records are copied only when a
    side holds more dead records than live ones or more than :data:`MAX_CHUNKS`
    chunks (then its live records become one chunk). A snapshot
    (:meth:`JoinContents.freeze`) holds live records only.

    Chunks are never changed once made; :meth:`JoinContents.fold` appends chunks to
    the side lists in place (the store copies a payload a snapshot holds first)."""

    __slots__ = ("left", "n", "right")

    def __init__(self, n: int, left: list[Chunk] | None = None, right: list[Chunk] | None = None):
        self.n = n
        self.left: list[Chunk] = left if left is not None else []
        self.right: list[Chunk] = right if right is not None else []

    def __len__(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        total = 0
        for ids, part in self.left + self.right:
            total += ids.nbytes + int(getattr(part, "nbytes", 0))
        return total

    def __getstate__(self) -> tuple[int, list[Chunk], list[Chunk]]:
        return (self.n, self.left, self.right)

    def __state_fields__(self) -> dict[str, Any]:
        return {"n": self.n, "left": self.left, "right": self.right}

    @classmethod
    def __from_state_fields__(cls, fields: dict[str, Any]) -> JoinState:
        return cls(fields["n"], list(fields["left"]), list(fields["right"]))

    def __setstate__(self, state: tuple[int, list[Chunk], list[Chunk]]) -> None:
        self.n, self.left, self.right = state


def _load_frozen(frozen: bytes) -> JoinState:
    """A frozen buffer (:meth:`JoinContents.freeze`: a pickle of a JoinState), also one
    written before JoinState moved here (lockgate 0.1.0 wrote
    ``lockgate.runtime.operators.window_join``; :mod:`lockgate.core.moved_modules`)."""
    state: JoinState = moved_loads(frozen)
    return state


_NO_IDS = np.zeros(0, dtype=np.int64)


class JoinContents(WindowContents):
    """Both sides' records per (key, window) row, joined or co-grouped on firing (see
    the module docstring)."""

    def __init__(
        self,
        mode: str,
        function: Any = None,
        left_keys: Sequence[str] = (),
        right_keys: Sequence[str] = (),
        suffixes: tuple[str, str] = ("_left", "_right"),
    ) -> None:
        self.mode = mode
        self.kind = f"window {mode}"
        self.function = function
        self.left_keys = tuple(left_keys)
        self.right_keys = tuple(right_keys)
        self.suffixes = suffixes
        self.arrow = mode == ARROW_JOIN

    def open(self, operator: Any) -> None:
        super().open(operator)
        if self.arrow:
            keys = (
                f"the where(...) key column(s) {list(self.left_keys)}",
                f"the equal_to(...) key column(s) {list(self.right_keys)}",
            )
        else:
            keys = ("the where(...) key", "the equal_to(...) key")
        what = "window co-group" if self.mode == CO_GROUP else "window join"
        self._kinds = KeyKindCheck(f"{what} '{operator.name}'", keys)
        if self.mode in (FUNCTION_JOIN, FLAT_JOIN):
            self._call: Callable[..., Any] = bind_function(self.function, "join")
        elif self.mode == CO_GROUP:
            self._call = bind_function(self.function, "co_group")

    # -- input ----------------------------------------------------------------------
    def prepare(self, batch: Batch) -> Prepared:
        if self.arrow:
            arrow = to_arrow(batch, operator=f"window join '{self.operator.name}'")
            side = arrow.column(SIDE_FIELD).to_numpy(zero_copy_only=False)
            drop = {SIDE_FIELD, TS_COLUMN, *key_fields(len(self.left_keys))}
            keep = [i for i, name in enumerate(arrow.schema.names) if name not in drop]
            user = pa.Table.from_batches([arrow.select(keep)])
            if len(side) and side.min() == side.max():
                s = int(side[0])
                cols = self.left_keys if s == LEFT else self.right_keys
                self._kinds.observe(
                    s, schema_kinds(arrow.schema, cols), arrow_types(arrow.schema, cols)
                )
            return Prepared(side, user)
        rows = to_rows(batch)
        sides = np.fromiter((r[SIDE_FIELD] for r in rows), dtype=np.int8, count=len(rows))
        for s in (LEFT, RIGHT):
            first = np.flatnonzero(sides == s)
            if len(first):
                key = rows[int(first[0])][KEY_FIELD]
                self._kinds.observe(s, key_kinds(key), python_types(key))
        return Prepared(sides, [r[VALUE_FIELD] for r in rows])

    def fold(
        self, payload: JoinState, rows: np.ndarray, data: Prepared, records: np.ndarray
    ) -> None:
        sides = data.side[records]
        for s, chunks in ((LEFT, payload.left), (RIGHT, payload.right)):
            sel = np.flatnonzero(sides == s)
            if not len(sel):
                continue
            chunks.append(
                (rows[sel].astype(np.int64, copy=False), self._take_part(data.part, records[sel]))
            )
            if len(chunks) > MAX_CHUNKS:
                chunks[:] = [self._compact(chunks)]

    # -- payload rows ---------------------------------------------------------------
    def empty(self, n: int) -> JoinState:
        return JoinState(n)

    def length(self, payload: JoinState) -> int:
        return payload.n

    def take(self, payload: JoinState, rows: np.ndarray) -> JoinState:
        """The rows ``rows`` (distinct) of ``payload``, in that order. Records stay in
        their chunks (their ids renumbered, those of rows not taken ``-1``) unless a
        side would keep more dead records than live ones (see :class:`JoinState`):
        taking most rows, as a store removing a few does, copies no records."""
        rows = np.asarray(rows, dtype=np.int64)
        n = payload.n
        if len(rows) == n and (not n or bool((rows == np.arange(n)).all())):
            return JoinState(n, list(payload.left), list(payload.right))
        pos = np.full(n, -1, dtype=np.int64)
        pos[rows] = np.arange(len(rows), dtype=np.int64)
        return JoinState(len(rows), self._remap(payload.left, pos), self._remap(payload.right, pos))

    def _remap(self, chunks: list[Chunk], pos: np.ndarray) -> list[Chunk]:
        out: list[Chunk] = []
        for ids, part in chunks:
            new = np.full(len(ids), -1, dtype=np.int64)
            alive = ids >= 0
            new[alive] = pos[ids[alive]]
            if (new >= 0).any():
                out.append((new, part))
        return self._bounded(out)

    def _bounded(self, chunks: list[Chunk]) -> list[Chunk]:
        """``chunks``, its live records made one chunk when it holds more than
        :data:`MAX_CHUNKS` chunks or more dead records than live ones."""
        live = sum(int(np.count_nonzero(ids >= 0)) for ids, _ in chunks)
        if not live:
            return []
        held = sum(len(ids) for ids, _ in chunks)
        if len(chunks) > MAX_CHUNKS or held - live > live:
            return [self._compact(chunks)]
        return chunks

    def concat(self, parts: list[Any]) -> JoinState:
        left: list[Chunk] = []
        right: list[Chunk] = []
        offset = 0
        for p in parts:
            left.extend((_shifted(ids, offset), part) for ids, part in p.left)
            right.extend((_shifted(ids, offset), part) for ids, part in p.right)
            offset += p.n
        return JoinState(offset, self._bounded(left), self._bounded(right))

    def combine(self, payload: JoinState, groups: np.ndarray, n: int) -> JoinState:
        groups = np.asarray(groups, dtype=np.int64)
        return JoinState(
            n,
            [(_regrouped(groups, ids), part) for ids, part in payload.left],
            [(_regrouped(groups, ids), part) for ids, part in payload.right],
        )

    # -- snapshots ------------------------------------------------------------------
    def freeze(self, payload: JoinState) -> Any:
        # live records only; Arrow chunks are immutable: new lists of them are enough
        payload = JoinState(payload.n, self._live(payload.left), self._live(payload.right))
        if self.arrow:
            return payload
        try:  # a join function may change the records it gets: copy them now
            return cloudpickle.dumps(payload)
        except Exception as e:
            raise self.operator.user_error(
                TypeError(
                    f"the window join state cannot be pickled for a checkpoint ({e}); "
                    "keep the joined records picklable"
                )
            ) from e

    def thaw(self, frozen: Any) -> JoinState:
        state = frozen if isinstance(frozen, JoinState) else _load_frozen(frozen)
        return JoinState(state.n, list(state.left), list(state.right))

    # -- records --------------------------------------------------------------------
    def _take_part(self, part: Any, idx: np.ndarray) -> Any:
        if self.arrow:
            return part.take(pa.array(idx, type=pa.int64()))
        return [part[i] for i in idx.tolist()]

    def _concat_parts(self, parts: list[Any]) -> Any:
        if self.arrow:
            if len(parts) == 1:
                return parts[0]
            return pa.concat_tables(parts, promote_options="default")
        out: list[Any] = []
        for p in parts:
            out.extend(p)
        return out

    def _live(self, chunks: list[Chunk]) -> list[Chunk]:
        """``chunks`` without dead records (a chunk holding none is kept as it is)."""
        out: list[Chunk] = []
        for ids, part in chunks:
            alive = ids >= 0
            if alive.all():
                out.append((ids, part))
            elif alive.any():
                sel = np.flatnonzero(alive)
                out.append((ids[sel], self._take_part(part, sel)))
        return out

    def _compact(self, chunks: list[Chunk]) -> Chunk:
        """The live records of ``chunks`` as one chunk (Arrow: the chunks' tables
        concatenated without a copy, then one ``take`` of the live records)."""
        chunks = [c for c in chunks if len(c[0])] if self.arrow else self._live(chunks)
        if not chunks:
            return (_NO_IDS, pa.table({}) if self.arrow else [])
        ids = chunks[0][0] if len(chunks) == 1 else np.concatenate([i for i, _ in chunks])
        part = self._concat_parts([p for _, p in chunks])
        alive = ids >= 0
        if alive.all():
            return (ids, part)
        sel = np.flatnonzero(alive)
        return (ids[sel], self._take_part(part, sel))

    # -- output ---------------------------------------------------------------------
    def results(
        self, keys: Any, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, payload: JoinState
    ) -> list[Batch]:
        stamps = np.asarray(ends, dtype=np.int64) - 1
        left_ids, left = self._compact(payload.left)
        right_ids, right = self._compact(payload.right)
        if self.mode == CO_GROUP:
            return self._co_group(payload.n, left_ids, left, right_ids, right, stamps)
        li, ri = pair_indices(left_ids, right_ids, payload.n)
        if not len(li):
            return []
        out_stamps = stamps[left_ids[li]]
        if self.arrow:
            batch = self._merge_columns(left, right, li, ri)
            return [with_timestamps(batch, out_stamps)]
        call = self._call
        out: list[Any] = []
        out_ts: list[int] = []
        try:
            if self.mode == FLAT_JOIN:
                for a, b, t in zip(li.tolist(), ri.tolist(), out_stamps.tolist()):
                    produced = call(left[a], right[b])
                    if produced is not None:
                        for value in produced:
                            out.append(value)
                            out_ts.append(t)
                return [RowBatch(out, np.asarray(out_ts, dtype=np.int64))] if out else []
            pairs = list(zip(li.tolist(), ri.tolist()))
            out = [call(left[a], right[b]) for a, b in pairs]
        except Exception as e:
            raise self.operator.user_error(e) from e
        missing = first_none(out)
        if missing >= 0:
            a, b = pairs[missing]
            raise self.operator.user_error(none_join_error(left[a], right[b]))
        return [RowBatch(out, out_stamps)]

    def _co_group(
        self,
        n: int,
        left_ids: np.ndarray,
        left: list[Any],
        right_ids: np.ndarray,
        right: list[Any],
        stamps: np.ndarray,
    ) -> list[Batch]:
        lo = np.argsort(left_ids, kind="stable")
        ro = np.argsort(right_ids, kind="stable")
        lb = np.searchsorted(left_ids[lo], np.arange(n + 1))
        rb = np.searchsorted(right_ids[ro], np.arange(n + 1))
        lo_list, ro_list = lo.tolist(), ro.tolist()
        lb_list, rb_list = lb.tolist(), rb.tolist()
        call = self._call
        out: list[Any] = []
        out_ts: list[int] = []
        try:
            for r, t in enumerate(stamps.tolist()):
                lefts = [left[i] for i in lo_list[lb_list[r] : lb_list[r + 1]]]
                rights = [right[i] for i in ro_list[rb_list[r] : rb_list[r + 1]]]
                if not lefts and not rights:
                    continue
                produced = call(lefts, rights)
                if produced is not None:
                    for value in produced:
                        out.append(value)
                        out_ts.append(t)
        except Exception as e:
            raise self.operator.user_error(e) from e
        return [RowBatch(out, np.asarray(out_ts, dtype=np.int64))] if out else []

    def _merge_columns(
        self, left: pa.Table, right: pa.Table, li: np.ndarray, ri: np.ndarray
    ) -> pa.RecordBatch:
        """The pairs' columns, pandas-merge style (see the module docstring)."""
        shared_keys = {lk for lk, rk in zip(self.left_keys, self.right_keys) if lk == rk}
        right_names = [c for c in right.column_names if c not in shared_keys]
        clash = set(left.column_names) & set(right_names)
        ls, rs = self.suffixes
        names = [c + ls if c in clash else c for c in left.column_names]
        names += [c + rs if c in clash else c for c in right_names]
        if len(set(names)) != len(names):
            dup = sorted({c for c in names if names.count(c) > 1})
            raise ConfigurationError(
                f"window join '{self.operator.name}': the joined records would have two "
                f"columns named {dup} (after the suffixes {self.suffixes!r}); pass other "
                "suffixes=(...) to apply() or rename the columns upstream"
            )
        lt = left.take(pa.array(li, type=pa.int64()))
        rt = right.take(pa.array(ri, type=pa.int64()))
        arrays = [lt.column(c).combine_chunks() for c in left.column_names]
        arrays += [rt.column(c).combine_chunks() for c in right_names]
        return pa.RecordBatch.from_arrays(arrays, names=names)


def _shifted(ids: np.ndarray, offset: int) -> np.ndarray:
    """Row ids moved up by ``offset``; dead ids (``-1``) stay dead."""
    if not offset:
        return ids
    return np.where(ids >= 0, ids + offset, -1)


def _regrouped(groups: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Row ids mapped through ``groups``; dead ids (``-1``) stay dead."""
    out = np.full(len(ids), -1, dtype=np.int64)
    alive = ids >= 0
    out[alive] = groups[ids[alive]]
    return out


def none_join_error(left: object, right: object) -> TypeError:
    """The error for a join function that returned None for a pair (worded as
    :func:`~lockgate.runtime.operators.basic.none_result_error` of ``map``)."""
    return TypeError(
        f"join() returned None for the pair of the left record {excerpt(left)} and the "
        f"right record {excerpt(right)}; a join function must return a record for every "
        "pair: use an lg.FlatJoinFunction to return zero or more records per pair (or "
        "filter() after the join)"
    )


def pair_indices(
    left_ids: np.ndarray, right_ids: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every (left, right) pair of records with the same row id: their indices into
    ``left_ids`` and ``right_ids``, ordered by row id (then left, then right record
    order). Vectorized: a sort of each side and index arithmetic, no Python loop."""
    if not len(left_ids) or not len(right_ids):
        return _NO_IDS, _NO_IDS
    lo = np.argsort(left_ids, kind="stable")
    ro = np.argsort(right_ids, kind="stable")
    lsorted = left_ids[lo]
    counts = np.bincount(right_ids, minlength=n)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rep = counts[lsorted]
    total = int(rep.sum())
    if not total:
        return _NO_IDS, _NO_IDS
    li = np.repeat(np.arange(len(lsorted), dtype=np.int64), rep)
    run_start = np.repeat(np.cumsum(rep) - rep, rep)
    within = np.arange(total, dtype=np.int64) - run_start
    ri = first[lsorted[li]] + within
    return lo[li], ro[ri]

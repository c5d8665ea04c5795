"""Columnar window state: the (key, window) rows of a window operator.

Two stores, one per kind of assigner:

* :class:`AlignedStore` - tumbling and sliding windows, whose bounds do not depend
  on the key: one :class:`WindowTable` per window, holding the key codes present in
  it (looked up with a sorted index, ``searchsorted``) and their payload rows.
  Records are added a batch at a time: built-in aggregates are reduced per (key,
  window) with numpy and merged into the table in one call per window.
* :class:`SessionStore` - merging windows: flat arrays of (key code, start, end)
  rows; a batch's windows are merged with the open sessions of its keys by
  :func:`~lockgate.windowing.session_merge.merge_session_windows` (vectorized), and
  the store is rebuilt from the untouched rows and the merge results.

Every row has a ``fired`` flag: whether its current contents were emitted (a row
fires once when event time passes its end, and again whenever late records
change it within the allowed lateness).

Snapshots (M-T3): :meth:`snapshot_blocks` is the cheap synchronous part. Aligned
tables are copied on their next write (copy-on-write); session rows are never
written in place (each batch builds new arrays), so their blocks are plain
references. Payloads of user functions are frozen (pickled) by the contents.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from ....windowing.assigners import WindowAssignment
from ....windowing.session_merge import merge_session_windows
from .contents import WindowContents


class Rows(NamedTuple):
    """(key, window) rows leaving a store: their key codes, bounds and payload."""

    codes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    payload: Any


class Block(NamedTuple):
    """Rows in a snapshot (or being restored): codes, bounds, fired flags, payload
    (frozen by the contents in snapshots)."""

    codes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    fired: np.ndarray
    payload: Any


_EMPTY_CODES = np.zeros(0, dtype=np.int64)


class WindowTable:
    """The rows of one window ``[start, end)`` of an :class:`AlignedStore`."""

    __slots__ = (
        "_order",
        "_sorted",
        "codes",
        "end",
        "fired",
        "payload",
        "pending",
        "shared",
        "start",
    )

    def __init__(self, start: int, end: int, contents: WindowContents) -> None:
        self.start = start
        self.end = end
        self.codes = _EMPTY_CODES
        self.fired = np.zeros(0, dtype=bool)
        self.payload = contents.empty(0)
        #: some row has not fired with its current contents
        self.pending = False
        #: a snapshot holds the arrays: copy before writing in place
        self.shared = False
        self._sorted = _EMPTY_CODES
        self._order = _EMPTY_CODES

    def __len__(self) -> int:
        return len(self.codes)

    @classmethod
    def of_rows(cls, start: int, end: int, codes: np.ndarray, payload: Any) -> WindowTable:
        """A new table holding one unfired row per code (``codes`` distinct). The
        table owns nothing yet (``shared``): ``payload`` may be a view of a batch's
        partials, so it is copied before the first write in place."""
        table = cls.__new__(cls)
        table.start = start
        table.end = end
        table.codes = codes = codes.astype(np.int64, copy=False)
        table.fired = np.zeros(len(codes), dtype=bool)
        table.payload = payload
        table.pending = len(codes) > 0
        table.shared = True
        if len(codes) < 2 or bool((codes[1:] > codes[:-1]).all()):  # sorted already
            table._order = np.arange(len(codes), dtype=np.int64)
            table._sorted = codes
        else:
            table._index()
        return table

    def lookup(self, codes: np.ndarray) -> np.ndarray:
        """The row of each code, -1 where the key has no row."""
        srt = self._sorted
        if not len(srt):
            return np.full(len(codes), -1, dtype=np.int64)
        pos = np.searchsorted(srt, codes)
        np.minimum(pos, len(srt) - 1, out=pos)
        hit = srt[pos] == codes
        return np.where(hit, self._order[pos], -1)

    def ensure(self, codes: np.ndarray, contents: WindowContents) -> np.ndarray:
        """The row of each code, appending empty rows for keys without one."""
        rows = self.lookup(codes)
        missing = rows < 0
        if missing.any():
            fresh = np.unique(codes[missing])
            self.append(
                fresh, np.zeros(len(fresh), dtype=bool), contents.empty(len(fresh)), contents
            )
            rows = self.lookup(codes)
        return rows

    def ensure_distinct(self, codes: np.ndarray, contents: WindowContents) -> np.ndarray:
        """:meth:`ensure` for ``codes`` without repeats (a batch's partials of one
        window): missing keys are appended in the given order, so their rows are known
        without a ``np.unique`` or a second lookup."""
        n = len(self.codes)
        if not n:
            m = len(codes)
            self.append(codes, np.zeros(m, dtype=bool), contents.empty(m), contents)
            return np.arange(m, dtype=np.int64)
        rows = self.lookup(codes)
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            m = len(missing)
            self.append(codes[missing], np.zeros(m, dtype=bool), contents.empty(m), contents)
            rows[missing] = np.arange(n, n + m, dtype=np.int64)
        return rows

    def append(
        self, codes: np.ndarray, fired: np.ndarray, payload: Any, contents: WindowContents
    ) -> None:
        """Add rows for keys that have none (new arrays: a snapshot keeps the old ones)."""
        self.codes = np.concatenate([self.codes, codes.astype(np.int64, copy=False)])
        self.fired = np.concatenate([self.fired, fired])
        self.payload = contents.concat([self.payload, payload])
        self.pending = self.pending or not bool(fired.all())
        self.shared = False
        self._index()

    def _index(self) -> None:
        order = np.argsort(self.codes, kind="stable")
        self._order = order
        self._sorted = self.codes[order]

    def own(self, contents: WindowContents) -> None:
        """Make the arrays private before an in-place write (copy-on-write)."""
        if self.shared:
            self.payload = contents.take(self.payload, np.arange(len(self.codes)))
            self.fired = self.fired.copy()
            self.shared = False

    def remap(self, remap: np.ndarray) -> None:
        self.codes = remap[self.codes]
        self._index()

    def block(self, contents: WindowContents) -> Block:
        self.shared = True
        n = len(self.codes)
        return Block(
            self.codes,
            np.full(n, self.start, dtype=np.int64),
            np.full(n, self.end, dtype=np.int64),
            self.fired,
            contents.freeze(self.payload),
        )


class AlignedStore:
    """Rows of non-merging windows, one :class:`WindowTable` per window."""

    def __init__(self, contents: WindowContents) -> None:
        self.contents = contents
        self.tables: dict[tuple[int, int], WindowTable] = {}

    def __len__(self) -> int:
        return sum(len(t) for t in self.tables.values())

    def _table(self, start: int, end: int) -> WindowTable:
        table = self.tables.get((start, end))
        if table is None:
            table = self.tables[(start, end)] = WindowTable(start, end, self.contents)
        return table

    def add(
        self, data: Any, codes: np.ndarray, timestamps: np.ndarray, assignment: WindowAssignment
    ) -> list[tuple[WindowTable, np.ndarray]]:
        """Add the records of ``assignment`` (record ``rows[i]`` of ``data`` into window
        ``[starts[i], ends[i])``); returns each touched table with its touched rows."""
        contents = self.contents
        rows, starts, ends = assignment
        touched: list[tuple[WindowTable, np.ndarray]] = []
        if not len(rows):
            return touched
        if contents.vectorized:
            # one partial per (key, window), grouped window by window (ascending)
            partials = contents.partials(data, codes, assignment, timestamps)
            starts_of = partials.window_start
            everything = partials.accumulators
            for lo, hi in _runs(starts_of):
                start, end = int(starts_of[lo]), int(partials.window_end[lo])
                pcodes = partials.key_code[lo:hi]
                acc = everything if hi - lo == len(starts_of) else everything.slice(lo, hi)
                table = self.tables.get((start, end))
                if table is None:
                    # a new window: its rows are the partials themselves (merging them
                    # into empty rows would give the same values and types, tested in
                    # test_a_partial_merged_into_empty_rows_is_the_partial_itself)
                    table = WindowTable.of_rows(start, end, pcodes, acc)
                    self.tables[(start, end)] = table
                    touched.append((table, np.arange(hi - lo, dtype=np.int64)))
                    continue
                trows = table.ensure_distinct(pcodes, contents)
                table.own(contents)
                contents.merge_into(table.payload, trows, acc)
                self._touch(table, trows)
                touched.append((table, trows))
            return touched
        for sel in _by_window(starts):
            table = self._table(int(starts[sel[0]]), int(ends[sel[0]]))
            records = rows[sel]
            trows = table.ensure(codes[records], contents)
            table.own(contents)
            contents.fold(table.payload, trows, data, records)
            trows = np.unique(trows)
            self._touch(table, trows)
            touched.append((table, trows))
        return touched

    @staticmethod
    def _touch(table: WindowTable, rows: np.ndarray) -> None:
        """Rows changed: they must fire again (the table is owned: see ``own``)."""
        table.fired[rows] = False
        table.pending = True

    def due(self, time: int) -> list[WindowTable]:
        """Tables whose window ended by ``time`` (``end - 1 <= time``), by end then start."""
        return sorted(
            (t for t in self.tables.values() if t.end - 1 <= time), key=lambda t: (t.end, t.start)
        )

    def fire(self, table: WindowTable, rows: np.ndarray | None = None) -> Rows:
        """The rows ``rows`` of ``table`` (None: those not fired yet), marked fired."""
        n = len(table.codes)
        if rows is None and not table.fired.any():
            # every row fires (the common case: a window fires once): the arrays leave
            # as they are, shared with the table (copied on its next write, see ``own``)
            table.shared = True
            table.fired = np.ones(n, dtype=bool)
            table.pending = False
            return Rows(
                table.codes,
                np.full(n, table.start, dtype=np.int64),
                np.full(n, table.end, dtype=np.int64),
                table.payload,
            )
        if rows is None:
            rows = np.flatnonzero(~table.fired)
        out = Rows(
            table.codes[rows],
            np.full(len(rows), table.start, dtype=np.int64),
            np.full(len(rows), table.end, dtype=np.int64),
            self.contents.take(table.payload, rows),
        )
        fired = table.fired.copy()
        fired[rows] = True
        table.fired = fired
        table.pending = not bool(fired.all())
        return out

    def remove(self, table: WindowTable) -> None:
        self.tables.pop((table.start, table.end), None)

    def live_codes(self) -> np.ndarray:
        parts = [t.codes for t in self.tables.values()]
        return np.unique(np.concatenate(parts)) if parts else _EMPTY_CODES

    def remap(self, remap: np.ndarray) -> None:
        for t in self.tables.values():
            t.remap(remap)

    def snapshot_blocks(self) -> list[Block]:
        return [t.block(self.contents) for t in self.tables.values() if len(t)]

    def restore(self, block: Block) -> None:
        """Add restored rows (keys not present yet in their windows); the block's
        payload is thawed."""
        contents = self.contents
        payload = block.payload
        pairs = (
            np.stack([block.starts, block.ends], axis=1)
            if len(block.codes)
            else np.zeros((0, 2), dtype=np.int64)
        )
        for s, e in {(int(a), int(b)) for a, b in pairs.tolist()}:
            sel = np.flatnonzero((block.starts == s) & (block.ends == e))
            self._table(s, e).append(
                block.codes[sel], block.fired[sel], contents.take(payload, sel), contents
            )

    def windows(self) -> Iterator[WindowTable]:
        return iter(list(self.tables.values()))


def _runs(starts: np.ndarray) -> list[tuple[int, int]]:
    """``[lo, hi)`` of each run of equal values of ``starts`` (sorted ascending)."""
    if starts[0] == starts[-1]:
        return [(0, len(starts))]
    cuts = (np.flatnonzero(starts[1:] != starts[:-1]) + 1).tolist()
    bounds = [0, *cuts, len(starts)]
    return list(zip(bounds[:-1], bounds[1:]))


def _by_window(starts: np.ndarray) -> list[np.ndarray]:
    """Positions of each distinct window start (ascending), each in position order."""
    first = starts[0]
    if starts[-1] == first and (starts == first).all():
        return [np.arange(len(starts))]
    uniq, inverse = np.unique(starts, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(uniq)))[:-1]
    return np.split(order, bounds)


class SessionAddResult(NamedTuple):
    """What :meth:`SessionStore.add` did: the rows (indices into the rebuilt store)
    that got records, and the records that went to late sessions (not added)."""

    touched: np.ndarray
    late_records: np.ndarray


class SessionStore:
    """Rows of merging (session) windows: flat (key code, start, end) arrays."""

    def __init__(self, contents: WindowContents) -> None:
        self.contents = contents
        self.key = _EMPTY_CODES
        self.start = _EMPTY_CODES
        self.end = _EMPTY_CODES
        self.fired = np.zeros(0, dtype=bool)
        self.payload = contents.empty(0)

    def __len__(self) -> int:
        return len(self.key)

    def add(
        self,
        data: Any,
        codes: np.ndarray,
        timestamps: np.ndarray,
        assignment: WindowAssignment,
        late_time: Any = None,
        lateness: int = 0,
    ) -> SessionAddResult:
        """Merge the records' windows (one per record: ``rows`` is ``arange(n)``) into
        the sessions of their keys and add the records. With ``late_time`` (event
        time: the watermark, a scalar, or a callable giving it per key code), a merged
        session with ``end - 1 + lateness <= late_time`` is late: its records are not
        added and are returned as ``late_records`` (such a session is made of new
        windows only: the store never holds a session past its cleanup time)."""
        contents = self.contents
        _, starts, ends = assignment
        batch_keys = np.unique(codes)
        hit = np.isin(self.key, batch_keys, assume_unique=False)
        ex = np.flatnonzero(hit)
        rest = np.flatnonzero(~hit)
        m = merge_session_windows(self.key[ex], self.start[ex], self.end[ex], codes, starts, ends)
        n_res = len(m)
        late_res = np.zeros(n_res, dtype=bool)
        if late_time is not None:
            threshold = late_time(m.key) if callable(late_time) else late_time
            late_res = (m.end - 1 + lateness) <= threshold
        record_ok = ~late_res[m.new_to_result]
        ok = np.flatnonzero(record_ok)
        late_records = np.flatnonzero(~record_ok)
        payload = contents.combine(contents.take(self.payload, ex), m.existing_to_result, n_res)
        targets = m.new_to_result[ok]
        if contents.vectorized:
            part = contents.partial_rows(data, targets, n_res, ok, timestamps)
            payload = contents.merge_rows(payload, part)
        else:
            contents.fold(payload, targets, data, ok)
        touched = np.zeros(n_res, dtype=bool)
        touched[targets] = True
        fired = np.zeros(n_res, dtype=bool)
        fired[m.existing_to_result] = self.fired[ex]
        fired[touched] = False
        keep = np.flatnonzero(~late_res)
        self.key = np.concatenate([self.key[rest], m.key[keep]])
        self.start = np.concatenate([self.start[rest], m.start[keep]])
        self.end = np.concatenate([self.end[rest], m.end[keep]])
        self.fired = np.concatenate([self.fired[rest], fired[keep]])
        self.payload = contents.concat(
            [contents.take(self.payload, rest), contents.take(payload, keep)]
        )
        touched_rows = len(rest) + np.flatnonzero(touched[keep])
        return SessionAddResult(touched_rows, late_records)

    def due(self, time: int, *, unfired_only: bool = True) -> np.ndarray:
        """Rows whose session ended by ``time`` (``end - 1 <= time``; by default only
        those not fired yet), ordered by end."""
        mask = (self.end - 1) <= time
        if unfired_only:
            mask &= ~self.fired
        rows = np.flatnonzero(mask)
        return rows[np.argsort(self.end[rows], kind="stable")]

    def fire(self, rows: np.ndarray) -> Rows:
        """The rows ``rows``, marked fired."""
        out = Rows(
            self.key[rows], self.start[rows], self.end[rows], self.contents.take(self.payload, rows)
        )
        if len(rows):
            fired = self.fired.copy()
            fired[rows] = True
            self.fired = fired
        return out

    def remove_where(self, mask: np.ndarray) -> None:
        if not mask.any():
            return
        keep = np.flatnonzero(~mask)
        self.key, self.start, self.end = self.key[keep], self.start[keep], self.end[keep]
        self.fired = self.fired[keep]
        self.payload = self.contents.take(self.payload, keep)

    def live_codes(self) -> np.ndarray:
        return np.unique(self.key)

    def remap(self, remap: np.ndarray) -> None:
        self.key = remap[self.key]

    def snapshot_blocks(self) -> list[Block]:
        if not len(self.key):
            return []
        return [
            Block(self.key, self.start, self.end, self.fired, self.contents.freeze(self.payload))
        ]

    def restore(self, block: Block) -> None:
        """Add restored rows; the block's payload is thawed."""
        contents = self.contents
        self.key = np.concatenate([self.key, block.codes])
        self.start = np.concatenate([self.start, block.starts])
        self.end = np.concatenate([self.end, block.ends])
        self.fired = np.concatenate([self.fired, block.fired])
        self.payload = contents.concat([self.payload, block.payload])

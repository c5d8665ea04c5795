"""Merging of session windows, per key.

Session windows of one key that overlap or touch (:meth:`TimeWindow.intersects`)
merge into one window covering them all. A window operator keeps, per key, a
set of disjoint windows, each with the *state window*: the namespace its state
(accumulator, timers) is stored under. When windows merge the result keeps the
state window of one of them, so a growing session never moves its state; the
state of the other merged windows is merged into it and then dropped.

Two APIs, with the same rules:

* :func:`merge_session_windows` - vectorized over many keys: existing windows
  and new windows as arrays of int key codes, starts and ends; one sort and a
  sweep give the merged set and, for every existing and new window, the merged
  window it ended in. State windows are opaque int *state ids* (by default the
  existing windows' indices, e.g. rows of an accumulator table).
* :class:`SessionWindowSet` - one key, one window at a time, with
  :class:`TimeWindow` objects.

Rules both guarantee:

* the merged windows of a key are disjoint and do not touch;
* a merged window's state comes from the existing window with the earliest
  start among those it absorbed (none if it absorbed only new windows);
* a window that only gained new windows inside its bounds is unchanged (no
  state merge, no timer change).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigurationError
from .assigners import TimeWindow

NO_STATE = -1
"""The state id of a merged window that absorbed no existing window."""


@dataclass(frozen=True)
class SessionMerge:
    """The result of :func:`merge_session_windows`.

    Result windows (``key``, ``start``, ``end``) are sorted by key, then start.
    For the operator:

    * new records go to result ``new_to_result[i]``;
    * result ``r`` keeps its state under ``state_id[r]`` (:data:`NO_STATE`: the
      window is fresh, create state for it);
    * for each ``j``, merge state ``merged_from[j]`` into ``merged_into[j]``,
      then drop ``merged_from[j]``;
    * delete the timers of existing windows where ``retired`` is true (they no
      longer exist with those bounds) and register timers for results where
      ``changed`` is true (fresh or grown).
    """

    key: np.ndarray
    start: np.ndarray
    end: np.ndarray
    existing_to_result: np.ndarray
    new_to_result: np.ndarray
    state_id: np.ndarray
    merged_from: np.ndarray
    merged_into: np.ndarray
    changed: np.ndarray
    retired: np.ndarray

    def __len__(self) -> int:
        return len(self.key)


def _int_array(values: object, what: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ConfigurationError(
            f"merge_session_windows: {what} must be a 1-D integer array, got "
            f"dtype {array.dtype} and shape {array.shape}"
        )
    return array.astype(np.int64, copy=False)


def _windows(key: object, start: object, end: object, what: str) -> tuple[np.ndarray, ...]:
    k = _int_array(key, f"{what} keys")
    s = _int_array(start, f"{what} starts")
    e = _int_array(end, f"{what} ends")
    if not len(k) == len(s) == len(e):
        raise ConfigurationError(
            f"merge_session_windows: {what} keys, starts and ends must have one length, got "
            f"{len(k)}, {len(s)} and {len(e)}"
        )
    if len(s) and bool(np.any(e <= s)):
        i = int(np.argmax(e <= s))
        raise ConfigurationError(
            f"merge_session_windows: {what} window {i} is [{s[i]}, {e[i]}); "
            "every window needs end > start"
        )
    return k, s, e


def _segmented_exclusive_cummax(values: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """For each position, the maximum of ``values`` over the earlier positions of
    its segment (``segment`` is non-decreasing); the int64 minimum where none."""
    n = len(values)
    out = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    if n < 2:
        return out
    uniq, rank = np.unique(values, return_inverse=True)
    # segment * len(uniq) + rank grows across segments, so the running maximum
    # never carries one segment's values into the next
    shifted = segment * len(uniq) + rank
    running = np.maximum.accumulate(shifted)
    prior = running[:-1] - segment[1:] * len(uniq)
    same = segment[1:] == segment[:-1]
    out[1:][same] = uniq[prior[same]]
    return out


def merge_session_windows(
    existing_key: object,
    existing_start: object,
    existing_end: object,
    new_key: object,
    new_start: object,
    new_end: object,
    existing_state_id: object = None,
) -> SessionMerge:
    """Merge the ``new`` windows into the ``existing`` ones, per key.

    Keys are int codes (e.g. a factorization of the batch's keys); windows are
    ``[start, end)`` in ms. The existing windows of a key are normally disjoint
    (as a previous merge left them) and may come in any order; if some overlap
    they are merged too, and their states reported in ``merged_from``.
    ``existing_state_id`` (default: the existing windows' indices) names each
    existing window's state. Windows that overlap or touch merge.

    Returns a :class:`SessionMerge` covering every key present in either input.
    """
    ek, es, ee = _windows(existing_key, existing_start, existing_end, "existing")
    nk, ns, ne = _windows(new_key, new_start, new_end, "new")
    n_old = len(ek)
    if existing_state_id is None:
        sid_old = np.arange(n_old, dtype=np.int64)
    else:
        sid_old = _int_array(existing_state_id, "existing state ids")
        if len(sid_old) != n_old:
            raise ConfigurationError(
                f"merge_session_windows: {len(sid_old)} existing state ids for {n_old} "
                "existing windows; pass one per window"
            )
    key = np.concatenate([ek, nk])
    start = np.concatenate([es, ns])
    end = np.concatenate([ee, ne])
    order = np.lexsort((start, key))  # stable: existing before new on equal (key, start)
    key, start, end = key[order], start[order], end[order]
    n = len(order)

    # a window opens a new session where its key changes or it starts after
    # every earlier window of its key has ended
    segment = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(key[1:] != key[:-1], out=segment[1:])
    reach = _segmented_exclusive_cummax(end, segment)
    opens = np.ones(n, dtype=bool)
    if n > 1:
        opens[1:] = (segment[1:] != segment[:-1]) | (start[1:] > reach[1:])
    group = np.cumsum(opens) - 1
    first = np.flatnonzero(opens)
    num = len(first)

    res_key = key[first]
    res_start = start[first]
    res_end = np.maximum.reduceat(end, first) if n else end[:0]

    to_result = np.empty(n, dtype=np.int64)
    to_result[order] = group
    existing_to_result = to_result[:n_old]
    new_to_result = to_result[n_old:]

    # state: the earliest-starting existing window of each result
    is_old = order < n_old
    old_group = group[is_old]
    old_pos = order[is_old]  # existing-window index, in (key, start) order
    state_id = np.full(num, NO_STATE, dtype=np.int64)
    if len(old_pos):
        lead = np.ones(len(old_pos), dtype=bool)
        lead[1:] = old_group[1:] != old_group[:-1]
        state_id[old_group[lead]] = sid_old[old_pos[lead]]
        merged_from = sid_old[old_pos[~lead]]
        merged_into = state_id[old_group[~lead]]
    else:
        merged_from = merged_into = np.empty(0, dtype=np.int64)

    retired = (es != res_start[existing_to_result]) | (ee != res_end[existing_to_result])
    unchanged = np.zeros(num, dtype=bool)
    unchanged[existing_to_result[~retired]] = True
    return SessionMerge(
        key=res_key,
        start=res_start,
        end=res_end,
        existing_to_result=existing_to_result,
        new_to_result=new_to_result,
        state_id=state_id,
        merged_from=merged_from,
        merged_into=merged_into,
        changed=~unchanged,
        retired=retired,
    )


@dataclass(frozen=True)
class SessionAdd:
    """What :meth:`SessionWindowSet.add` did.

    * ``window`` - the session the added window is now part of;
    * ``state_window`` - where that session's state lives;
    * ``merged_windows`` - existing windows absorbed into ``window`` (gone from
      the set: delete their timers; register one for ``window``);
    * ``merged_state_windows`` - states to merge into ``state_window``, then drop;
    * ``is_new`` - no existing window was involved: create state under ``window``.

    When the added window fell inside an existing one, ``window`` is that
    window and nothing else changes (``merged_windows`` is empty, ``is_new`` false).
    """

    window: TimeWindow
    state_window: TimeWindow
    merged_windows: tuple[TimeWindow, ...]
    merged_state_windows: tuple[TimeWindow, ...]
    is_new: bool


class SessionWindowSet:
    """The session windows of one key, each with its state window.

    Windows are kept disjoint and non-touching; adding a window merges it with
    every window it overlaps or touches. Picklable; :meth:`snapshot` gives a
    plain list for a state backend.
    """

    __slots__ = ("_state", "_windows")

    def __init__(self, state_windows: Mapping[TimeWindow, TimeWindow] | None = None) -> None:
        """``state_windows`` maps each window to its state window (e.g. restored
        from :meth:`snapshot`); its windows must be disjoint and non-touching."""
        self._windows: list[TimeWindow] = []
        self._state: dict[TimeWindow, TimeWindow] = {}
        for window, state in sorted((state_windows or {}).items()):
            if self._windows and self._windows[-1].intersects(window):
                raise ConfigurationError(
                    f"SessionWindowSet: windows {self._windows[-1]} and {window} overlap "
                    "or touch; restore only windows a SessionWindowSet produced"
                )
            self._windows.append(window)
            self._state[window] = state

    def add(self, window: TimeWindow) -> SessionAdd:
        """Add ``window``, merging it with the windows it overlaps or touches."""
        windows = self._windows
        lo = bisect.bisect_left(windows, window.start, key=lambda w: w.end)
        hi = bisect.bisect_right(windows, window.end, key=lambda w: w.start)
        hit = windows[lo:hi]
        if not hit:
            windows.insert(lo, window)
            self._state[window] = window
            return SessionAdd(window, window, (), (), True)
        merged = TimeWindow(min(window.start, hit[0].start), max(window.end, hit[-1].end))
        if len(hit) == 1 and merged == hit[0]:
            return SessionAdd(merged, self._state[merged], (), (), False)
        states = [self._state.pop(w) for w in hit]
        windows[lo:hi] = [merged]
        self._state[merged] = states[0]
        return SessionAdd(merged, states[0], tuple(hit), tuple(states[1:]), False)

    def add_all(self, windows: Iterable[TimeWindow]) -> list[SessionAdd]:
        """:meth:`add` each window in order."""
        return [self.add(w) for w in windows]

    def state_window(self, window: TimeWindow) -> TimeWindow:
        """The state window of ``window`` (a window of this set)."""
        try:
            return self._state[window]
        except KeyError:
            raise KeyError(f"{window} is not a window of this SessionWindowSet") from None

    def retire(self, window: TimeWindow) -> TimeWindow:
        """Remove ``window`` (fired and purged, or late); return its state window."""
        state = self.state_window(window)
        del self._state[window]
        self._windows.pop(bisect.bisect_left(self._windows, window))
        return state

    def windows(self) -> list[TimeWindow]:
        """The windows, by start."""
        return list(self._windows)

    def snapshot(self) -> list[tuple[int, int, int, int]]:
        """``(start, end, state_start, state_end)`` per window, by start."""
        return [(w.start, w.end, s.start, s.end) for w in self._windows for s in (self._state[w],)]

    @classmethod
    def from_snapshot(cls, rows: Iterable[tuple[int, int, int, int]]) -> SessionWindowSet:
        """The set :meth:`snapshot` described."""
        return cls({TimeWindow(a, b): TimeWindow(c, d) for a, b, c, d in rows})

    def __len__(self) -> int:
        return len(self._windows)

    def __iter__(self) -> Iterator[TimeWindow]:
        return iter(list(self._windows))

    def __contains__(self, window: object) -> bool:
        return window in self._state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SessionWindowSet) and other._state == self._state

    def __getstate__(self) -> list[tuple[int, int, int, int]]:
        return self.snapshot()

    def __setstate__(self, rows: list[tuple[int, int, int, int]]) -> None:
        restored = SessionWindowSet.from_snapshot(rows)
        self._windows = restored._windows
        self._state = restored._state

    def __repr__(self) -> str:
        return f"SessionWindowSet({self._windows!r})"


__all__ = [
    "NO_STATE",
    "SessionAdd",
    "SessionMerge",
    "SessionWindowSet",
    "merge_session_windows",
]

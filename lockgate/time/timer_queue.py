"""One deduplicated priority queue of timers (event time or processing time).

A timer is ``(timestamp, key, namespace)``; registering one that is already
queued changes nothing (deduplication). The queue keeps **one bucket per distinct
timestamp**: a ``dict`` namespace -> ``dict`` key -> None, both in first-registration
order, and a min-heap of the bucket timestamps:

* register / delete: O(1) on the bucket, plus O(log b) heap push when a timestamp
  gets its first timer (b = number of distinct timestamps). A delete that empties a
  bucket removes it and leaves its heap entry stale (lazy deletion); stale entries
  are skipped when met and the heap is rebuilt when they outnumber the buckets.
* firing: takes the smallest timestamp's bucket apart timer by timer; ties fire in a
  stable order: namespace by namespace (in the order the namespaces first got a timer
  at that timestamp), keys in registration order. With one namespace (the usual case:
  None, or one window per window end) that is registration order.
* bulk registration groups timers by timestamp with numpy and adds each group's keys
  with one C-level ``dict.update`` (deduplicating them on the way), which is what
  makes one timer per (key, window) cheap; keys are stored as they are, never wrapped.

Copy-on-write for snapshots (M-T3): :meth:`TimerQueue.freeze` hands out the current
buckets (a shallow copy of the outer dict, O(b)) and marks them frozen; the first
write to a frozen bucket afterwards replaces it by a private copy (O(its timers),
once per bucket and snapshot), so a taken view never changes and can be read from
another thread without locks.

Invariant: no bucket and no namespace entry is empty, and every bucket's timestamp
has at least one heap entry. Everything here belongs to the task thread, except
reading a frozen view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from heapq import heapify, heappop, heappush
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np


class InternalTimer(NamedTuple):
    """A timer: fire at ``timestamp`` (ms) for ``key`` in ``namespace`` (None unless a
    window operator uses it). Equal (and hashing equal) to the plain tuple
    ``(timestamp, key, namespace)``."""

    timestamp: int
    key: Any
    namespace: Any = None


#: one timestamp's timers: namespace -> key -> None (insertion ordered)
Bucket = dict[Any, dict[Any, None]]
#: a frozen view: timestamp -> bucket (never written again)
FrozenView = dict[int, Bucket]

_MISSING: Any = object()
#: below this many timers a bulk registration takes the per-timer loop
_GROUPING_THRESHOLD = 64


def _copy(bucket: Bucket) -> Bucket:
    return {ns: dict(keys) for ns, keys in bucket.items()}


def object_column(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """``values`` as a 1-d numpy array (object dtype unless already an array), for
    vectorized reordering; tuples stay single elements."""
    if isinstance(values, np.ndarray):
        return values
    return np.fromiter(values, dtype=object, count=len(values))


class TimerQueue:
    """A deduplicated min-queue of timers by timestamp (see the module docstring)."""

    __slots__ = ("_buckets", "_frozen", "_heap", "_size")

    def __init__(self) -> None:
        self._buckets: dict[int, Bucket] = {}
        self._heap: list[int] = []  # bucket timestamps; may hold stale or duplicate entries
        self._frozen: set[int] = set()  # timestamps whose bucket a view shares
        self._size = 0

    def __len__(self) -> int:
        return self._size

    # -- writes ---------------------------------------------------------------------------
    def _thaw(self, timestamp: int, bucket: Bucket) -> Bucket:
        """A private copy of a frozen bucket, put in its place."""
        bucket = _copy(bucket)
        self._buckets[timestamp] = bucket
        self._frozen.discard(timestamp)
        return bucket

    def _new_bucket(self, timestamp: int) -> Bucket:
        bucket: Bucket = {}
        self._buckets[timestamp] = bucket
        heappush(self._heap, timestamp)
        return bucket

    def add(self, timestamp: int, key: Any, namespace: Any) -> bool:
        """Queue one timer; False if it was already queued."""
        bucket = self._buckets.get(timestamp)
        if bucket is None:
            self._new_bucket(timestamp)[namespace] = {key: None}
            self._size += 1
            return True
        keys = bucket.get(namespace)
        if keys is not None and key in keys:
            return False
        if self._frozen and timestamp in self._frozen:
            bucket = self._thaw(timestamp, bucket)
            keys = bucket.get(namespace)
        if keys is None:
            bucket[namespace] = {key: None}
        else:
            keys[key] = None
        self._size += 1
        return True

    def add_many(
        self,
        timestamps: np.ndarray,
        keys: Sequence[Any] | np.ndarray,
        namespaces: Sequence[Any] | None = None,
        namespace: Any = None,
    ) -> int:
        """Queue ``(timestamps[i], keys[i], namespaces[i])`` for every i, in that order
        (``namespace`` for all when ``namespaces`` is None); returns how many were new.
        ``timestamps`` is an int64 array; ``keys`` a list or a 1-d numpy array."""
        n = len(timestamps)
        if n == 0:
            return 0
        if namespaces is not None or n < _GROUPING_THRESHOLD:
            ns_iter: Iterable[Any] = repeat(namespace) if namespaces is None else namespaces
            key_list = keys.tolist() if isinstance(keys, np.ndarray) else keys
            return self._add_each(timestamps.tolist(), key_list, ns_iter)
        uniq, inverse = np.unique(timestamps, return_inverse=True)
        if len(uniq) * 4 > n:  # mostly distinct timestamps: grouping does not pay
            key_list = keys.tolist() if isinstance(keys, np.ndarray) else keys
            return self._add_each(timestamps.tolist(), key_list, repeat(namespace))
        if len(uniq) == 1:
            key_list = keys.tolist() if isinstance(keys, np.ndarray) else keys
            return self._add_group(int(uniq[0]), namespace, key_list)
        order = np.argsort(inverse, kind="stable")
        ordered = object_column(keys)[order]
        ends = np.cumsum(np.bincount(inverse, minlength=len(uniq))).tolist()
        added = 0
        start = 0
        for t, end in zip(uniq.tolist(), ends):
            added += self._add_group(t, namespace, ordered[start:end].tolist())
            start = end
        return added

    def _add_each(
        self, timestamps: Iterable[int], keys: Iterable[Any], namespaces: Iterable[Any]
    ) -> int:
        """``add`` inlined for a loop; new timestamps are pushed on the heap at the end
        (also when a key turns out unhashable half way)."""
        buckets = self._buckets
        frozen = self._frozen
        new_ts: list[int] = []
        added = 0
        try:
            for t, key, ns in zip(timestamps, keys, namespaces):
                bucket = buckets.get(t)
                if bucket is None:
                    buckets[t] = {ns: {key: None}}
                    new_ts.append(t)
                    added += 1
                    continue
                group = bucket.get(ns)
                if group is not None and key in group:
                    continue
                if frozen and t in frozen:
                    bucket = self._thaw(t, bucket)
                    group = bucket.get(ns)
                if group is None:
                    bucket[ns] = {key: None}
                else:
                    group[key] = None
                added += 1
        finally:
            self._size += added
            self._push_all(new_ts)
        return added

    def _push_all(self, new_ts: list[int]) -> None:
        heap = self._heap
        if len(new_ts) > 16 and len(new_ts) * 4 > len(heap):
            heap.extend(new_ts)
            heapify(heap)
        else:
            for t in new_ts:
                heappush(heap, t)

    def _add_group(self, timestamp: int, namespace: Any, keys: Sequence[Any]) -> int:
        bucket = self._buckets.get(timestamp)
        if bucket is None:
            bucket = self._new_bucket(timestamp)
        elif self._frozen and timestamp in self._frozen:
            bucket = self._thaw(timestamp, bucket)
        existing = bucket.get(namespace)
        if existing is None:
            existing = bucket[namespace] = dict.fromkeys(keys)
            added = len(existing)
        else:
            before = len(existing)
            existing.update(dict.fromkeys(keys))
            added = len(existing) - before
        self._size += added
        return added

    def remove(self, timestamp: int, key: Any, namespace: Any) -> bool:
        """Delete one timer; False if it was not queued."""
        bucket = self._buckets.get(timestamp)
        if bucket is None:
            return False
        keys = bucket.get(namespace)
        if keys is None or key not in keys:
            return False
        if self._frozen and timestamp in self._frozen:
            bucket = self._thaw(timestamp, bucket)
            keys = bucket[namespace]
        # Always mutate the dicts themselves: a firing loop may be walking them.
        del keys[key]
        if not keys:
            del bucket[namespace]
            if not bucket:
                del self._buckets[timestamp]
                self._maybe_compact()
        self._size -= 1
        return True

    def _maybe_compact(self) -> None:
        heap = self._heap
        if len(heap) > 64 and len(heap) > 2 * len(self._buckets):
            heap[:] = list(self._buckets)  # in place: a firing loop holds ``heap``
            heapify(heap)

    # -- reads ----------------------------------------------------------------------------
    def __contains__(self, timer: object) -> bool:
        if not isinstance(timer, tuple) or len(timer) != 3:
            return False
        keys = self._buckets.get(timer[0], {}).get(timer[2])
        return keys is not None and timer[1] in keys

    def peek_timestamp(self) -> int | None:
        """The smallest queued timestamp, or None when the queue is empty."""
        heap = self._heap
        buckets = self._buckets
        while heap:
            t = heap[0]
            if t in buckets:
                return t
            heappop(heap)  # stale: its bucket was emptied by deletes
        return None

    def timers(self) -> list[InternalTimer]:
        """Every queued timer, in firing order (a new list)."""
        return timers_of(self._buckets)

    # -- firing ---------------------------------------------------------------------------
    def fire(self, limit: int, on_timer: Callable[[InternalTimer], Any]) -> int:  # noqa: C901 (hot loop kept inline (per-timer call overhead))
        """Remove and hand to ``on_timer``, in timestamp order, every timer with
        timestamp <= ``limit``, including those the callbacks register meanwhile
        (<= ``limit``; one earlier than the timer being fired fires next) and leaving
        out those they delete. Returns how many fired. A timer is removed before its
        callback runs, so one whose callback raises is gone."""
        heap = self._heap
        buckets = self._buckets
        fired = 0
        while heap:
            t = heap[0]
            if t > limit:
                break
            bucket = buckets.get(t)
            if bucket is None:
                heappop(heap)  # stale entry
                continue
            if len(bucket) == 1:
                [(lone_ns, lone)] = bucket.items()
                if len(lone) == 1:  # fast path: a lone timer (frozen or not: not written)
                    [lone_key] = lone
                    del buckets[t]
                    self._frozen.discard(t)
                    heappop(heap)
                    self._size -= 1
                    fired += 1
                    on_timer(InternalTimer(t, lone_key, lone_ns))
                    continue
            if self._frozen and t in self._frozen:
                bucket = self._thaw(t, bucket)
            earlier = False
            for ns in list(bucket):
                keys = bucket.get(ns)
                if keys is None:
                    continue  # emptied by a callback's deletes
                for key in list(keys):
                    if keys.pop(key, _MISSING) is _MISSING:
                        continue  # deleted by an earlier callback
                    if not keys:  # keep "nothing empty": callbacks may register at t
                        if bucket.get(ns) is keys:
                            del bucket[ns]
                        if not bucket and buckets.get(t) is bucket:
                            del buckets[t]
                    self._size -= 1
                    fired += 1
                    on_timer(InternalTimer(t, key, ns))
                    if heap and heap[0] < t:
                        earlier = True  # a callback registered an earlier timer
                        break
                if earlier:
                    break
        return fired

    # -- snapshots (M-T3) -----------------------------------------------------------------
    def freeze(self) -> FrozenView:
        """The current timers as a view that later writes never change (O(distinct
        timestamps)); the queue copies a bucket before its first write afterwards."""
        view = dict(self._buckets)
        self._frozen = set(view)
        return view


def timers_of(view: FrozenView) -> list[InternalTimer]:
    """The timers of a queue's buckets (or a frozen view) in firing order."""
    return [
        InternalTimer(t, key, ns)
        for t in sorted(view)
        for ns, keys in view[t].items()
        for key in keys
    ]

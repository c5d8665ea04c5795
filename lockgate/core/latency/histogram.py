"""A bounded, mergeable latency histogram with log-scale buckets.

Memory is fixed (:data:`BUCKETS` counters whatever the number of samples), two
histograms merge by adding their counters (subtasks of one sink, or a reading minus an
older one for a time window), and quantiles are computed on read. Bucket 0 holds
values below 1 ms (negative ones, a wall clock behind the source's, count there too);
bucket ``i`` in ``1 .. BUCKETS - 2`` holds ``[2**((i-1)/8), 2**(i/8))`` ms, and the last
one everything from ``2**28`` ms (about 74 hours) up. A quantile is the geometric middle
of the bucket holding it, clamped to the exact minimum and maximum when they are known,
so it is within :data:`RELATIVE_ERROR` (4.4 %) of the true value at or above 1 ms and
within 0.5 ms below it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

#: buckets per power of two
PER_OCTAVE = 8
#: powers of two covered above 1 ms
OCTAVES = 28
#: number of buckets: below 1 ms, the log-scale ones, and the overflow
BUCKETS = PER_OCTAVE * OCTAVES + 2
#: the largest relative error of a quantile at or above 1 ms
RELATIVE_ERROR = 2 ** (1 / (2 * PER_OCTAVE)) - 1
#: the quantiles the metrics report
QUANTILES = (0.5, 0.95, 0.99)
#: the overflow bucket's lower bound (ms)
_OVERFLOW_MS = 2.0**OCTAVES


def bucket_of(value_ms: float) -> int:
    """The bucket holding ``value_ms``."""
    if not value_ms >= 1.0:  # also NaN
        return 0
    if value_ms >= _OVERFLOW_MS:  # also infinity
        return BUCKETS - 1
    return min(int(math.log2(value_ms) * PER_OCTAVE) + 1, BUCKETS - 1)


def bucket_bounds(index: int) -> tuple[float, float]:
    """``[low, high)`` of bucket ``index`` in ms (the last one's high is infinite)."""
    if not 0 <= index < BUCKETS:
        raise ValueError(f"bucket index must be in [0, {BUCKETS}), got {index}")
    if index == 0:
        return 0.0, 1.0
    low = 2.0 ** ((index - 1) / PER_OCTAVE)
    high = math.inf if index == BUCKETS - 1 else 2.0 ** (index / PER_OCTAVE)
    return low, high


def _estimate(index: int) -> float:
    low, high = bucket_bounds(index)
    if index == 0:
        return 0.5
    if math.isinf(high):
        return low
    return math.sqrt(low * high)


class LatencyHistogram:
    """Counts of latencies (ms) in :data:`BUCKETS` log-scale buckets, with the exact
    count, sum, minimum and maximum.

    One thread records (the sink's task thread); others may read a
    :meth:`snapshot` at any time (plain reads, a moment old, never locked): the
    snapshot's count is the sum of the bucket counts it read, so its quantiles are
    always consistent with its count.
    """

    __slots__ = ("counts", "sum_ms", "min_ms", "max_ms")

    def __init__(self) -> None:
        self.counts: list[int] = [0] * BUCKETS
        self.sum_ms = 0.0
        self.min_ms: float | None = None
        self.max_ms: float | None = None

    @property
    def count(self) -> int:
        return sum(self.counts)

    def record(self, value_ms: float) -> None:
        """Add one latency; a negative one (clocks apart) counts as 0."""
        value = max(0.0, float(value_ms))
        self.counts[bucket_of(value)] += 1
        self.sum_ms += value
        if self.min_ms is None or value < self.min_ms:
            self.min_ms = value
        if self.max_ms is None or value > self.max_ms:
            self.max_ms = value

    def record_all(self, values_ms: Iterable[float]) -> None:
        for v in values_ms:
            self.record(v)

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        """Add ``other``'s samples to this histogram (in place; returns it)."""
        for i, n in enumerate(other.counts):
            if n:
                self.counts[i] += n
        self.sum_ms += other.sum_ms
        for name, pick in (("min_ms", min), ("max_ms", max)):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None:
                setattr(self, name, theirs if mine is None else pick(mine, theirs))
        return self

    def minus(self, older: LatencyHistogram) -> LatencyHistogram:
        """The samples recorded since ``older`` (an earlier reading of the same
        histogram): a new histogram without minimum and maximum (they are not known
        for a difference)."""
        out = LatencyHistogram()
        out.counts = [max(0, a - b) for a, b in zip(self.counts, older.counts)]
        out.sum_ms = max(0.0, self.sum_ms - older.sum_ms)
        return out

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile in ms (None when empty), as ``numpy.quantile`` defines
        it, within :data:`RELATIVE_ERROR` at or above 1 ms (0.5 ms below)."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"a quantile must be in [0, 1], got {q!r}")
        counts = list(self.counts)
        total = sum(counts)
        if total == 0:
            return None
        rank = round(q * (total - 1))  # the order statistic nearest numpy's position
        if rank == 0 and self.min_ms is not None:
            return self.min_ms
        if rank == total - 1 and self.max_ms is not None:
            return self.max_ms
        seen = 0
        for index, n in enumerate(counts):
            seen += n
            if seen > rank:
                value = _estimate(index)
                if self.min_ms is not None:
                    value = max(value, self.min_ms)
                if self.max_ms is not None:
                    value = min(value, self.max_ms)
                return value
        raise AssertionError("unreachable: the rank is below the total")

    def snapshot(self) -> dict[str, Any]:
        """A plain, picklable and JSON-ready copy: the non-empty buckets as
        ``[index, count]`` pairs, ``count``, ``sum_ms``, ``min_ms``, ``max_ms``."""
        counts = list(self.counts)
        return {
            "buckets": [[i, n] for i, n in enumerate(counts) if n],
            "count": sum(counts),
            "sum_ms": self.sum_ms,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
        }

    @classmethod
    def from_snapshot(cls, snapshot: dict[str, Any]) -> LatencyHistogram:
        """The histogram a :meth:`snapshot` describes; raises ``ValueError`` naming
        what is wrong with a malformed one."""
        out = cls()
        try:
            for index, n in snapshot["buckets"]:
                if not (isinstance(index, int) and 0 <= index < BUCKETS) or n < 0:
                    raise ValueError(f"bucket [{index!r}, {n!r}]")
                out.counts[index] += int(n)
            out.sum_ms = float(snapshot.get("sum_ms") or 0.0)
            for name in ("min_ms", "max_ms"):
                value = snapshot.get(name)
                setattr(out, name, None if value is None else float(value))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a latency histogram snapshot ({e}): {snapshot!r:.200}") from e
        return out


def latency_summary(total: LatencyHistogram, window: LatencyHistogram) -> dict[str, Any]:
    """What the metrics show of one sink subtask (or a sink's subtasks merged):
    ``count`` and ``sum_ms`` over the whole run (``total``), and over ``window`` (the
    recent samples, some of ``total``'s) ``window_count`` and the quantiles
    ``p50_ms``, ``p95_ms``, ``p99_ms`` and ``max_ms`` (None without samples in the
    window), clamped to the run's exact minimum and maximum."""
    out: dict[str, Any] = {
        "count": total.count,
        "sum_ms": round(total.sum_ms, 3),
        "window_count": window.count,
    }
    for q in (*QUANTILES, 1.0):
        name = "max_ms" if q == 1.0 else f"p{round(q * 100)}_ms"
        value = window.quantile(q)
        if value is not None:
            # the window's samples are some of the run's: its exact bounds hold for them
            if total.min_ms is not None:
                value = max(value, total.min_ms)
            if total.max_ms is not None:
                value = min(value, total.max_ms)
        out[name] = None if value is None else round(value, 3)
    return out

"""The driver's view of the sinks' end-to-end latency: per sink subtask and per sink
(its subtasks merged), the run's count and sum and the quantiles of about the last
minute (:mod:`lockgate.core.latency.window`).

The subtasks send cumulative histogram snapshots with their metrics (see
:mod:`lockgate.runtime.task_metrics`); :class:`LatencyView` keeps one
:class:`~lockgate.core.latency.LatencyWindow` per sink subtask and run.
"""

from __future__ import annotations

import threading
from typing import Any

from ..core.latency.histogram import LatencyHistogram, latency_summary
from ..core.latency.window import LatencyWindow


class LatencyView:
    """Thread-safe: the REST server, the progress logger and the user may ask at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (vertex, subtask, uid) -> (run id, its window)
        self._windows: dict[tuple[int, int, str], tuple[Any, LatencyWindow]] = {}

    def subtask(
        self, key: tuple[int, int, str], run: Any, time_ms: float, snapshot: dict[str, Any]
    ) -> tuple[LatencyHistogram, LatencyHistogram]:
        """The run's histogram of one sink subtask and its recent part, from the
        subtask's reading ``snapshot`` taken at ``time_ms``."""
        total = LatencyHistogram.from_snapshot(snapshot)
        with self._lock:
            known = self._windows.get(key)
            if known is None or known[0] != run:  # a restarted attempt starts from zero
                known = self._windows[key] = (run, LatencyWindow())
            return total, known[1].observe(time_ms, total)

    @staticmethod
    def summary(total: LatencyHistogram, window: LatencyHistogram) -> dict[str, Any]:
        return latency_summary(total, window)

    @staticmethod
    def sinks(
        per_subtask: list[tuple[dict[str, Any], LatencyHistogram, LatencyHistogram]],
    ) -> list[dict[str, Any]]:
        """One entry per sink operator (``uid``, ``name``, ``subtasks``: how many
        reported) with its subtasks' histograms merged, in the order first seen."""
        merged: dict[str, tuple[dict[str, Any], LatencyHistogram, LatencyHistogram, int]] = {}
        for op, total, window in per_subtask:
            uid = op["uid"]
            if uid not in merged:
                merged[uid] = (op, LatencyHistogram(), LatencyHistogram(), 0)
            first, t, w, n = merged[uid]
            merged[uid] = (first, t.merge(total), w.merge(window), n + 1)
        return [
            {"uid": uid, "name": op["name"], "subtasks": n, **latency_summary(t, w)}
            for uid, (op, t, w, n) in merged.items()
        ]

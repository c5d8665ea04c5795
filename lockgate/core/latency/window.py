"""The recent part of a cumulative latency histogram.

Subtasks keep their histograms cumulative (never reset, like every other counter), so
reading them costs the task nothing; the driver keeps a few older readings and
reports the quantiles of the difference: the samples of about the last
:data:`WINDOW_MS` (between ``WINDOW_MS`` and ``WINDOW_MS + STEP_MS``), or of the
whole run while it is younger.
"""

from __future__ import annotations

from collections import deque

from .histogram import LatencyHistogram

#: the quantiles cover at least this much of the recent past (ms)
WINDOW_MS = 60_000.0
#: a reading is kept as a baseline at most this often (ms)
STEP_MS = 5_000.0


class LatencyWindow:
    """Baselines of one histogram (one sink subtask of one run), oldest first.

    ``window_ms`` and ``step_ms`` are in the readings' time (``observe``'s
    ``time_ms``: the subtask's clock, so tests drive it with a manual clock).
    """

    def __init__(self, window_ms: float = WINDOW_MS, step_ms: float = STEP_MS) -> None:
        if not window_ms > 0 or not 0 < step_ms <= window_ms:
            raise ValueError(
                f"a latency window needs window_ms > 0 and 0 < step_ms <= window_ms, "
                f"got window_ms={window_ms!r}, step_ms={step_ms!r}"
            )
        self.window_ms = window_ms
        self.step_ms = step_ms
        # the run's start (nothing recorded) is the first baseline
        self._bases: deque[tuple[float, LatencyHistogram]] = deque(
            [(-float("inf"), LatencyHistogram())]
        )

    def observe(self, time_ms: float, total: LatencyHistogram) -> LatencyHistogram:
        """The samples of ``total`` (the reading taken at ``time_ms``) recorded within
        the window; keeps ``total`` as a baseline when the newest is ``step_ms`` old."""
        start = time_ms - self.window_ms
        bases = self._bases
        while len(bases) > 1 and bases[1][0] <= start:
            bases.popleft()
        recent = total.minus(bases[0][1])
        if time_ms - bases[-1][0] >= self.step_ms:
            bases.append((time_ms, total))
        return recent

"""End-to-end latency per sink (issue 42, section 5): the marker a source sends after
a batch, with the wall-clock time it started emitting that batch, and the bounded,
mergeable histogram a sink records ``now - stamp`` into.

See ``docs/operations.md`` ("End-to-end latency") for what the metric measures and
what it leaves out.
"""

from .histogram import LatencyHistogram, latency_summary
from .marker import LatencyMarker
from .window import LatencyWindow

__all__ = ["LatencyHistogram", "LatencyMarker", "LatencyWindow", "latency_summary"]

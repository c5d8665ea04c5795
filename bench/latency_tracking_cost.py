"""What end-to-end latency tracking adds per batch (issue 42, section 5): a
micro-benchmark of the operations on the hot path, not a pipeline run.

* ``source, off``: what every emitted batch pays with tracking off (the default):
  reading the source operator's ``latency_markers`` and finding it None.
* ``source, on``: with tracking on, between two markers: one wall-clock read and a
  comparison (``MarkerEmitter.due_stamp``).
* ``gate``: what every element an input gate polls pays, tracking on or off: one class
  comparison (``element.__class__ is LatencyMarker``).
* ``marker``: one marker emitted, forwarded once and recorded by a sink's histogram
  (paid at most once per ``latency_tracking_interval_ms`` per source subtask and path).

For scale, the run prints the time a batch of ``--rows`` rows takes through
SequenceSource -> DiscardingSink on the local executor.

Run: ``.venv/bin/python bench/latency_tracking_cost.py``
"""

from __future__ import annotations

import argparse
import json
import os
import time
import timeit

import lockgate as lg
from lockgate.connectors import SequenceSource
from lockgate.connectors.builtin.discarding_sink import DiscardingSink
from lockgate.core.clock import SystemClock
from lockgate.core.elements import Watermark
from lockgate.core.latency import LatencyHistogram, LatencyMarker
from lockgate.runtime.latency import ForwardOnce, MarkerEmitter


class _Op:
    latency_markers: MarkerEmitter | None = None


def _ns(stmt: str, ns: dict, number: int) -> float:
    best = min(timeit.repeat(stmt, globals=ns, number=number, repeat=7))
    return best / number * 1e9


def _pipeline_ns_per_batch(rows: int, batches: int) -> float:
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.config.rest_enabled = False
    env.config.progress_interval_ms = 0
    env.from_source(SequenceSource(0, rows * batches, batch_size=rows)).sink_to(DiscardingSink())
    started = time.perf_counter()
    env.execute("latency tracking cost: scale")
    return (time.perf_counter() - started) / batches * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--rows", type=int, default=1_000)
    args = parser.parse_args()
    off, on = _Op(), _Op()
    on.latency_markers = MarkerEmitter(SystemClock(), 1_000, "src", 0, lambda m: None)
    on.latency_markers.due_stamp()  # the next one is due in a second: the common case
    per_batch = (
        "markers = op.latency_markers\n"
        "stamp = None if markers is None else markers.due_stamp()\n"
        "if stamp is not None: markers.emit_after(stamp)"
    )
    histogram = LatencyHistogram()
    forward = ForwardOnce(lambda e: None)
    marker_ns = {"forward": forward, "histogram": histogram, "LatencyMarker": LatencyMarker}
    results = {
        "source_off_ns": _ns(per_batch, {"op": off}, args.number),
        "source_on_ns": _ns(per_batch, {"op": on}, args.number),
        "gate_ns": _ns(
            "element.__class__ is LatencyMarker",
            {"element": Watermark(1), "LatencyMarker": LatencyMarker},
            args.number,
        ),
        "marker_ns": _ns(
            "m = LatencyMarker(1, 'src', 0, n[0]); n[0] += 1; forward(m); histogram.record(12.5)",
            {**marker_ns, "n": [1]},
            args.number // 4,
        ),
        "pipeline_ns_per_batch": _pipeline_ns_per_batch(args.rows, 2_000),
        "rows_per_batch": args.rows,
        "cores": os.cpu_count(),
    }
    print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in results.items()}))


if __name__ == "__main__":
    main()

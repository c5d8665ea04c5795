"""One subtask's metrics as a plain dict, read from any thread.

:func:`task_sample` reads the task thread's cumulative counters in place (plain
attribute reads: a moment old, never locked, never reset), so taking a sample costs
the task nothing. The driver turns successive samples into rates
(:class:`lockgate.job.observer.JobObserver`); on Spark the slots send them with their
heartbeats.

Besides the counters every task keeps, an operator may tell more through optional
attributes:

* a source reader's ``pending_records``: records between its position and the end of
  its input as last seen (Kafka: the partitions' high watermarks; None: unknown);
* an operator's ``metric_keys()`` / ``metric_state_bytes()``: the keys it holds state
  for and their approximate size;
* a sink's ``latency``: its cumulative end-to-end latency histogram (sent as a
  :meth:`~lockgate.core.latency.LatencyHistogram.snapshot`: at most a few hundred
  numbers; None until a latency marker reached it).
"""

from __future__ import annotations

import itertools
import os
import socket
from typing import Any

from ..core.elements import MIN_WATERMARK

_HOST = socket.gethostname()
#: run ids of this process's tasks (never reused, unlike ``id(task)``)
_RUNS = itertools.count()


def _run_id(task: Any) -> str:
    """The task's run id: new for every task object, so a restarted attempt's subtask
    (a new object, perhaps at the address of the old one) is never taken for the old."""
    run = getattr(task, "metrics_run_id", None)
    if run is None:
        run = task.metrics_run_id = f"{os.getpid()}-{next(_RUNS)}"
    return str(run)


def _fill(channels: list[Any]) -> float | None:
    """Queued bytes over capacity of the channels that know both (None: none does)."""
    queued = capacity = 0
    for c in channels:
        q = getattr(c, "queued_bytes", None)
        cap = getattr(c, "capacity_bytes", None)
        if q is None or not cap:
            continue
        queued += q
        capacity += cap
    return min(1.0, queued / capacity) if capacity else None


def _optional(op: Any, name: str) -> int | None:
    method = getattr(op, name, None)
    if method is None:
        return None
    try:
        value = method()
    except Exception:  # noqa: BLE001 - a gauge read mid-change is skipped, never fatal
        return None
    return int(value) if value is not None else None


def _operator(op: Any) -> dict[str, Any]:
    counters = op.counters
    wm = getattr(op, "current_watermark", None)
    reader = getattr(op, "reader", None)
    pending = getattr(reader, "pending_records", None) if reader is not None else None
    return {
        "uid": op.uid,
        "name": op.name,
        "records_in": counters.records_in,
        "records_out": counters.records_out,
        "watermark": None if wm is None or wm == MIN_WATERMARK else int(wm),
        "source_lag": int(pending) if pending is not None else None,
        "keys": _optional(op, "metric_keys"),
        "state_bytes": _optional(op, "metric_state_bytes"),
        "latency": _latency(op),
    }


def _latency(op: Any) -> dict[str, Any] | None:
    histogram = getattr(op, "latency", None)
    return histogram.snapshot() if histogram is not None else None


def _taken(gate: Any, enabled: bool) -> int:
    """Bytes the channels that count them (in-process ones) handed to the task."""
    if gate is None or not enabled:
        return 0
    return sum(getattr(c, "taken_bytes", 0) for c in gate.channels)


def _waited(task: Any) -> tuple[float, float, float]:
    """The task's idle and backpressured milliseconds so far, a wait in progress
    included (an idle task blocked waiting for input is idle all along, not only once
    its wait ended: counting it at the end made a fresh attempt's idle task look busy
    1,000 ms/s), and the time they were read at."""
    state = getattr(task, "wait_state", None)
    now = float(task.clock.monotonic_ms())
    if state is None:
        return float(task.idle_ms), float(task.backpressured_ms), now
    idle, backpressured, since, is_backpressure = state
    if since is not None:
        ongoing = max(0.0, now - since)
        if is_backpressure:
            backpressured += ongoing
        else:
            idle += ongoing
    return idle, backpressured, now


def task_sample(task: Any) -> dict[str, Any]:
    """The cumulative counters of one subtask (see :mod:`lockgate.job.observer`)."""
    vertex, subtask = task.key
    idle, backpressured, now = _waited(task)
    outputs = [c for w in task.writers for c in w.channels]
    gate = task.input_gate
    return {
        "vertex": vertex,
        "subtask": subtask,
        "task": task.name,
        "host": _HOST,
        # a restarted attempt is a new run: its counters start from zero
        "run": _run_id(task),
        "time_ms": now,
        "idle_ms": idle,
        "backpressured_ms": backpressured,
        "bytes_in": task.bytes_in + _taken(gate, task.metrics_enabled),
        "bytes_out": sum(w.bytes_out for w in task.writers),
        "input_queue_fill": _fill(list(gate.channels)) if gate is not None else None,
        "output_queue_fill": _fill(outputs),
        "operators": [_operator(op) for op in task.chain.operators],
    }

"""What a running job shows from outside: its graph, live metrics, exceptions and a
progress summary, as plain JSON-ready dicts (the REST API, ``/metrics`` and the
dashboard serve them; ``JobClient`` returns them).

The subtasks keep cumulative counters only (records, bytes, idle and backpressured
milliseconds, see :mod:`lockgate.runtime.task_metrics`); the executor publishes a
way to read them (``JobHandle.metrics``: read in place on the local executor, sent
with the slots' heartbeats on Spark, so a moment old there). :class:`JobObserver`
turns successive readings into rates over the last :data:`RATE_WINDOW_S` seconds.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .latency_view import LatencyView

#: rates are computed against the newest reading at least this old
RATE_WINDOW_S = 1.0
#: readings kept per subtask (enough for the rate window at any polling pace)
_KEPT = 64


def graph_of(plan: Any) -> dict[str, Any]:
    """The job graph of ``plan`` (an ``ExecutionPlan``): its vertices (tasks, each a
    chain of operators) and the edges between them."""
    if plan is None:
        return {"vertices": [], "edges": []}
    vertices = [
        {
            "id": v.id,
            "name": v.name,
            "parallelism": v.parallelism,
            "max_parallelism": v.max_parallelism,
            "is_source": bool(v.is_source),
            "operators": [{"uid": o.uid, "name": o.name} for o in v.operators],
        }
        for v in plan.vertices
    ]
    edges = [
        {
            "source": e.source_vertex,
            "target": e.target_vertex,
            "partitioning": _partitioning_name(e.partitioning),
            "side_output": e.side_tag,
        }
        for e in sorted(plan.edges.values(), key=lambda e: e.id)
    ]
    return {"vertices": vertices, "edges": edges}


#: partitioning names as Flink's web UI shows them
_PARTITIONING = {
    "ForwardPartitioning": "FORWARD",
    "RebalancePartitioning": "REBALANCE",
    "BroadcastPartitioning": "BROADCAST",
    "KeyGroupPartitioning": "HASH",
}


def _partitioning_name(spec: Any) -> str:
    name = type(spec).__name__
    return _PARTITIONING.get(name, name)


def _total(rows: list[dict[str, Any]], name: str) -> float:
    return sum(r[name] or 0 for r in rows)


def _worst(rows: list[dict[str, Any]], name: str) -> float | None:
    values = [r[name] for r in rows if r[name] is not None]
    return max(values) if values else None


def _new_run(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether ``new`` is a reading of another run of the subtask than ``old`` (a
    restarted attempt): another run id, or cumulative counters that went back (rates
    against the old run's readings would be nonsense: an idle task's idle time below
    the old one's made it look busy 1,000 ms/s)."""
    if old.get("run") != new.get("run"):
        return True
    return any(
        new.get(name, 0) < old.get(name, 0)
        for name in ("time_ms", "idle_ms", "backpressured_ms", "bytes_in", "bytes_out")
    )


def _rate(new: float, old: float, seconds: float) -> float:
    return max(0.0, (new - old) / seconds) if seconds > 0 else 0.0


class JobObserver:
    """Live metrics of one job from the readings ``read()`` returns (a list of
    subtask samples, see :func:`lockgate.runtime.task_metrics.task_sample`).
    ``earlier()``: the records in and out of the run's ended attempts per (vertex,
    subtask, operator uid), added to the record counts (not to the rates).

    Thread-safe: the REST server, the progress logger and the user may ask at once.
    """

    def __init__(
        self,
        plan: Any,
        read: Callable[[], list[dict[str, Any]]],
        *,
        wall_clock: Callable[[], float] = time.time,
        earlier: Callable[[], dict[tuple[int, int, str], tuple[int, int]]] | None = None,
        current_plan: Callable[[], Any] | None = None,
    ) -> None:
        self._plan = plan
        #: the plan the running attempt runs (after a rescale, not ``plan``); None: ``plan``
        self._current_plan = current_plan
        self._read = read
        self._earlier = earlier
        self._wall = wall_clock
        self._lock = threading.Lock()
        #: (vertex, subtask) -> recent readings (oldest first)
        self._history: dict[tuple[int, int], deque[dict[str, Any]]] = {}
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()
        self._latency = LatencyView()

    def start_sampling(self, interval_s: float = RATE_WINDOW_S) -> None:
        """Take a reading every ``interval_s`` in a background thread until :meth:`stop`,
        so the first ``metrics()`` a client asks for already has rates."""
        if self._sampler is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(interval_s):
                self._samples()

        self._sampler = threading.Thread(target=loop, name="lockgate metrics sampler", daemon=True)
        self._sampler.start()

    def stop(self) -> None:
        """End the background readings (idempotent)."""
        self._stop.set()
        sampler, self._sampler = self._sampler, None
        if sampler is not None and sampler is not threading.current_thread():
            sampler.join(5)

    def _samples(self) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        """Each subtask's newest reading with the one to compute its rates against."""
        try:
            readings = list(self._read())
        except Exception:  # noqa: BLE001 - an attempt being torn down reads nothing
            readings = []
        out = []
        with self._lock:
            for s in readings:
                key = (int(s["vertex"]), int(s["subtask"]))
                history = self._history.get(key)
                if history is None or (history and _new_run(history[-1], s)):
                    history = self._history[key] = deque(maxlen=_KEPT)
                if not history or history[-1]["time_ms"] != s["time_ms"]:
                    history.append(s)
                base = None
                for old in reversed(history):
                    if s["time_ms"] - old["time_ms"] >= RATE_WINDOW_S * 1000:
                        base = old
                        break
                if base is None and len(history) > 1:
                    base = history[0]
                out.append((s, base))
        return out

    def metrics(self) -> dict[str, Any]:
        """Per vertex (with its subtasks) and per operator subtask: records and bytes in
        and out (totals and per second), busy / idle / backpressured milliseconds per
        second, input and output queue fill (0..1), watermark and its lag behind the
        wall clock, source lag (records behind the end of the input, where the source
        knows it), keys and state size (where the operator knows them), and for sinks
        with latency tracking on, ``latency`` (see :mod:`.latency_view`); ``latency``
        at the top lists each sink with its subtasks merged."""
        now_ms = self._wall() * 1000.0
        earlier = dict(self._earlier()) if self._earlier is not None else {}
        subtasks: list[dict[str, Any]] = []
        operators: list[dict[str, Any]] = []
        latencies: list[tuple[dict[str, Any], Any, Any]] = []
        for s, base in self._samples():
            seconds = (s["time_ms"] - base["time_ms"]) / 1000.0 if base else 0.0
            entry: dict[str, Any] = {
                "vertex": s["vertex"],
                "task": s["task"],
                "subtask": s["subtask"],
                "host": s.get("host"),
                "bytes_in": s["bytes_in"],
                "bytes_out": s["bytes_out"],
                "bytes_in_per_s": _rate(s["bytes_in"], base["bytes_in"], seconds) if base else 0.0,
                "bytes_out_per_s": (
                    _rate(s["bytes_out"], base["bytes_out"], seconds) if base else 0.0
                ),
                "input_queue_fill": s.get("input_queue_fill"),
                "output_queue_fill": s.get("output_queue_fill"),
            }
            if base is not None and seconds > 0:
                idle = min(1000.0, _rate(s["idle_ms"], base["idle_ms"], seconds))
                back = min(1000.0, _rate(s["backpressured_ms"], base["backpressured_ms"], seconds))
                entry["idle_ms_per_s"] = round(idle, 1)
                entry["backpressured_ms_per_s"] = round(back, 1)
                entry["busy_ms_per_s"] = round(max(0.0, 1000.0 - idle - back), 1)
            else:
                entry["idle_ms_per_s"] = entry["backpressured_ms_per_s"] = None
                entry["busy_ms_per_s"] = None
            subtasks.append(entry)
            old_ops = {o["uid"]: o for o in base["operators"]} if base else {}
            for op in s["operators"]:
                before = old_ops.get(op["uid"])
                watermark = op.get("watermark")
                ended_in, ended_out = earlier.get((s["vertex"], s["subtask"], op["uid"]), (0, 0))
                operators.append(
                    {
                        "uid": op["uid"],
                        "name": op["name"],
                        "vertex": s["vertex"],
                        "subtask": s["subtask"],
                        # the run's: the ended attempts' records and the running one's
                        "records_in": op["records_in"] + ended_in,
                        "records_out": op["records_out"] + ended_out,
                        "records_in_per_s": (
                            _rate(op["records_in"], before["records_in"], seconds)
                            if before
                            else 0.0
                        ),
                        "records_out_per_s": (
                            _rate(op["records_out"], before["records_out"], seconds)
                            if before
                            else 0.0
                        ),
                        "watermark": watermark,
                        "watermark_lag_ms": (
                            max(0.0, now_ms - watermark) if watermark is not None else None
                        ),
                        "source_lag": op.get("source_lag"),
                        "keys": op.get("keys"),
                        "state_bytes": op.get("state_bytes"),
                        "latency": None,
                    }
                )
                if op.get("latency") is not None:
                    total, window = self._latency.subtask(
                        (s["vertex"], s["subtask"], op["uid"]),
                        s.get("run"),
                        s["time_ms"],
                        op["latency"],
                    )
                    operators[-1]["latency"] = LatencyView.summary(total, window)
                    latencies.append((op, total, window))
        return {
            "time": now_ms / 1000.0,
            "vertices": self._vertices(subtasks, operators),
            "operators": operators,
            "latency": LatencyView.sinks(latencies),
        }

    def _vertices(
        self, subtasks: list[dict[str, Any]], operators: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        plan = self._current_plan() if self._current_plan is not None else None
        plan = plan if plan is not None else self._plan
        plan_vertices = list(plan.vertices) if plan is not None else []
        out = []
        for v in plan_vertices:
            mine = sorted((s for s in subtasks if s["vertex"] == v.id), key=lambda s: s["subtask"])
            head = v.operators[0].uid if v.operators else None
            tail = v.operators[-1].uid if v.operators else None
            heads = [o for o in operators if o["vertex"] == v.id and o["uid"] == head]
            tails = [o for o in operators if o["vertex"] == v.id and o["uid"] == tail]

            out.append(
                {
                    "id": v.id,
                    "name": v.name,
                    "parallelism": v.parallelism,
                    "is_source": bool(v.is_source),
                    "is_sink": not v.out_edges,
                    "head": head,
                    "tail": tail,
                    "records_in": _total(heads, "records_in"),
                    "records_out": _total(tails, "records_out"),
                    "records_in_per_s": _total(heads, "records_in_per_s"),
                    "records_out_per_s": _total(tails, "records_out_per_s"),
                    "bytes_in": _total(mine, "bytes_in"),
                    "bytes_out": _total(mine, "bytes_out"),
                    "bytes_in_per_s": _total(mine, "bytes_in_per_s"),
                    "bytes_out_per_s": _total(mine, "bytes_out_per_s"),
                    # as Flink's vertex view: the busiest / most backpressured subtask
                    "busy_ms_per_s": _worst(mine, "busy_ms_per_s"),
                    "idle_ms_per_s": _worst(mine, "idle_ms_per_s"),
                    "backpressured_ms_per_s": _worst(mine, "backpressured_ms_per_s"),
                    "subtasks": mine,
                }
            )
        return out

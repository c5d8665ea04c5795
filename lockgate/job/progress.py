"""Progress for people: one summary per job, as a dict (``JobClient.progress()``) and
as a log line every ``ExecutionConfig.progress_interval_ms`` (as Spark's
``lastProgress`` and its periodic progress log)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

log = logging.getLogger("lockgate.progress")


def progress_of(metrics: dict[str, Any], checkpoints: list[Any]) -> dict[str, Any]:
    """The summary of ``metrics`` (``JobClient.metrics()``) and ``checkpoints``."""
    job = metrics.get("job", {})
    vertices = metrics.get("vertices", [])
    operators = metrics.get("operators", [])
    heads = {(v["id"], v.get("head")) for v in vertices if v.get("is_source")}
    tails = {(v["id"], v.get("tail")) for v in vertices if v.get("is_sink")}
    read = [o for o in operators if (o["vertex"], o["uid"]) in heads]
    written = [o for o in operators if (o["vertex"], o["uid"]) in tails]
    watermarks = [o["watermark"] for o in operators if o.get("watermark") is not None]
    # only a task that is backpressured at all: none names nothing
    backpressure = [
        (v["backpressured_ms_per_s"], v["name"])
        for v in vertices
        if (v.get("backpressured_ms_per_s") or 0) > 0
    ]
    worst = max(backpressure, default=None)
    completed = [c for c in checkpoints if getattr(c, "status", None) == "completed"]
    last = completed[-1] if completed else None
    lag = [o["source_lag"] for o in operators if o.get("source_lag") is not None]
    return {
        "job": job.get("name"),
        "status": job.get("status"),
        "time": metrics.get("time"),
        "uptime_s": job.get("uptime_s"),
        "restarts": job.get("restarts", 0),
        "input_records_per_s": round(sum(o["records_out_per_s"] for o in read), 1),
        "output_records_per_s": round(sum(o["records_in_per_s"] for o in written), 1),
        "records_in": sum(o["records_out"] for o in read),
        "watermark": min(watermarks) if watermarks else None,
        "source_lag": sum(lag) if lag else None,
        "last_checkpoint": (
            None
            if last is None
            else {
                "id": last.checkpoint_id,
                "duration_ms": last.duration_ms,
                "state_size": last.state_size,
                "is_savepoint": last.is_savepoint,
            }
        ),
        "checkpoints_completed": len(completed),
        "checkpoints_failed": sum(1 for c in checkpoints if getattr(c, "status", None) == "failed"),
        "most_backpressured": (
            None if worst is None else {"task": worst[1], "backpressured_ms_per_s": worst[0]}
        ),
    }


def format_progress(p: dict[str, Any]) -> str:
    """One line: ``job 'x' RUNNING: 12,345 records/s in, 12,300 out, watermark
    2026-11-25T04:00:01Z, last checkpoint 7 (120 ms, 3.2 MB), backpressure: 'map' 640
    ms/s``."""
    wm = p.get("watermark")
    watermark = (
        datetime.fromtimestamp(wm / 1000.0, tz=timezone.utc).isoformat(timespec="seconds")
        if wm is not None
        else "none"
    )
    cp = p.get("last_checkpoint")
    checkpoint = (
        "none"
        if cp is None
        else f"{cp['id']} ({_ms(cp.get('duration_ms'))}, {_size(cp.get('state_size', 0))})"
    )
    worst = p.get("most_backpressured")
    back = (
        f"'{worst['task']}' {worst['backpressured_ms_per_s']:.0f} ms/s"
        if worst and worst["backpressured_ms_per_s"]
        else "none"
    )
    lag = p.get("source_lag")
    lag_text = f", source lag {lag:,} records" if lag is not None else ""
    return (
        f"job '{p.get('job')}' {p.get('status')}: {p.get('input_records_per_s', 0):,.0f} "
        f"records/s in, {p.get('output_records_per_s', 0):,.0f} records/s out, "
        f"{p.get('records_in', 0):,} read{lag_text}, watermark {watermark}, last checkpoint "
        f"{checkpoint}, restarts {p.get('restarts', 0)}, backpressure {back}"
    )


def format_result(result: Any, plan: Any) -> str:
    """The line a job's end logs: ``job 'x' FINISHED in 12,345 ms (2 attempts): 40,000
    records read, 40,000 written`` (records read: its sources' output, written: its
    sinks' input, over every attempt, see ``JobExecutionResult``)."""
    read = written = 0
    for v in getattr(plan, "vertices", []):
        if not v.operators:
            continue
        if v.is_source:
            read += _count(result, v.operators[0].uid, "records_out")
        if not v.out_edges:
            written += _count(result, v.operators[-1].uid, "records_in")
    attempts = result.attempts
    text = (
        f"job '{result.job_name}' {result.status.value} in {result.duration_ms:,.0f} ms "
        f"({attempts} attempt{'' if attempts == 1 else 's'}): {read:,} records read, "
        f"{written:,} written"
    )
    if result.savepoint_path:
        text += f", savepoint {result.savepoint_path}"
    return text


def _count(result: Any, uid: str, name: str) -> int:
    for m in result.operators.values():
        if m.uid == uid:
            return int(getattr(m, name))
    return 0


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} ms"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


class ProgressLogger:
    """Logs ``format_progress(progress())`` every ``interval_ms`` while the job runs
    (logger ``lockgate.progress``, INFO). ``wait(seconds)`` returns True when stopped:
    an injectable event-based wait, so tests drive it without sleeping."""

    def __init__(
        self,
        progress: Callable[[], dict[str, Any]],
        running: Callable[[], bool],
        interval_ms: int,
        *,
        name: str = "lockgate progress",
    ) -> None:
        self._progress = progress
        self._running = running
        self.interval_s = interval_ms / 1000.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> ProgressLogger:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self._running():
                continue
            try:
                log.info(format_progress(self._progress()))
            except Exception:
                log.debug("progress line failed", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)

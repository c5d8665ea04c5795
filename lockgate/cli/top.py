"""``lockgate top JOB``: a live terminal view of a running job, from its REST API.

Each frame shows the job's progress (``GET .../progress``: records per second in and
out, watermark, last checkpoint, restarts) and one row per task (``GET .../metrics``:
parallelism, records in and out per second, busy and backpressured time, the lowest
watermark of its operators and its lag, queue fill). :func:`render_frame` makes a frame
from those two replies, with no terminal involved; :func:`run_top` fetches them every
``interval`` seconds and redraws in place with ANSI escape codes on a terminal (on a
pipe it prints frame after frame), until Ctrl-C (exit 0) or the job ends.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TextIO

from .remote import RemoteError, RestClient, settle_rates

#: the job's final statuses: ``top`` shows the last frame and exits
FINAL = ("FINISHED", "CANCELED", "FAILED")
#: ANSI: switch to the alternate screen and hide the cursor / back
_ENTER, _LEAVE = "\x1b[?1049h\x1b[?25l", "\x1b[?25h\x1b[?1049l"
_HOME_CLEAR = "\x1b[H\x1b[2J"
_COLUMNS = ("TASK", "PAR", "IN/s", "OUT/s", "BUSY", "BACKPR", "WATERMARK", "WM LAG", "QUEUE")


def _rate(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.1f}k"
    return f"{value:,.0f}"


def _share(ms_per_s: Any) -> str:
    return "-" if not isinstance(ms_per_s, (int, float)) else f"{ms_per_s / 10:.0f}%"


def _clock(ms: Any) -> str:
    if not isinstance(ms, (int, float)):
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc).strftime("%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return "max" if ms > 0 else "min"


def _lag(ms: Any) -> str:
    if not isinstance(ms, (int, float)):
        return "-"
    s = ms / 1000.0
    return f"{s:.1f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.0f}h"


def _fill(subtasks: list[dict[str, Any]]) -> str:
    fills: list[float] = [
        s["input_queue_fill"]
        for s in subtasks
        if isinstance(s.get("input_queue_fill"), (int, float))
    ]
    return f"{max(fills) * 100:.0f}%" if fills else "-"


def task_rows(metrics: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per task (vertex) of ``metrics`` (a ``/metrics`` reply), in the
    columns of :data:`_COLUMNS`: the lowest watermark and the largest lag of its
    operators, the fullest input queue of its subtasks."""
    operators = [o for o in metrics.get("operators") or [] if isinstance(o, dict)]
    rows: list[tuple[str, ...]] = []
    for v in metrics.get("vertices") or []:
        if not isinstance(v, dict):
            continue
        mine = [o for o in operators if o.get("vertex") == v.get("id")]
        marks = [o["watermark"] for o in mine if isinstance(o.get("watermark"), (int, float))]
        lags = [
            o["watermark_lag_ms"]
            for o in mine
            if isinstance(o.get("watermark_lag_ms"), (int, float))
        ]
        rows.append(
            (
                str(v.get("name")),
                str(v.get("parallelism", "-")),
                _rate(v.get("records_in_per_s")) if not v.get("is_source") else "-",
                _rate(v.get("records_out_per_s")) if not v.get("is_sink") else "-",
                _share(v.get("busy_ms_per_s")),
                _share(v.get("backpressured_ms_per_s")),
                _clock(min(marks)) if marks else "-",
                _lag(max(lags)) if lags else "-",
                _fill([s for s in v.get("subtasks") or [] if isinstance(s, dict)]),
            )
        )
    return rows


def _checkpoint(cp: Any) -> str:
    if not isinstance(cp, dict):
        return "none"
    duration = cp.get("duration_ms")
    size = cp.get("state_size")
    kind = " (savepoint)" if cp.get("is_savepoint") else ""
    took = f"{duration:.0f} ms" if isinstance(duration, (int, float)) else "? ms"
    held = f"{size:,} bytes" if isinstance(size, int) else "? bytes"
    return f"{cp.get('id')}{kind}, {took}, {held}"


def _backpressure(worst: Any) -> str:
    if not isinstance(worst, dict) or not worst.get("backpressured_ms_per_s"):
        return "none"
    return f"{worst.get('task')} {_share(worst.get('backpressured_ms_per_s'))}"


def summary_lines(progress: dict[str, Any], job: dict[str, Any]) -> list[str]:
    """The frame's head: status, rates, watermark, checkpoints, backpressure."""
    uptime = job.get("uptime_s") or progress.get("uptime_s") or 0
    lag = progress.get("source_lag")
    return [
        f"status {progress.get('status') or job.get('status')}, up {_lag(uptime * 1000)}, "
        f"restarts {progress.get('restarts', job.get('restarts', 0))}",
        f"records/s {_rate(progress.get('input_records_per_s'))} in, "
        f"{_rate(progress.get('output_records_per_s'))} out; "
        f"{progress.get('records_in', 0):,} read"
        + (f", source lag {lag:,} records" if isinstance(lag, int) else ""),
        f"watermark {_clock(progress.get('watermark'))}; backpressure "
        f"{_backpressure(progress.get('most_backpressured'))}",
        f"checkpoints {progress.get('checkpoints_completed', 0)} completed, "
        f"{progress.get('checkpoints_failed', 0)} failed; last "
        f"{_checkpoint(progress.get('last_checkpoint'))}",
    ]


def render_frame(
    url: str, progress: dict[str, Any], metrics: dict[str, Any], width: int | None = None
) -> str:
    """One frame of ``lockgate top`` (no escape codes): a head with the job's status,
    rates, watermark and checkpoints, then the task table; with ``width``, lines are
    cut to that many characters."""
    job = metrics.get("job") if isinstance(metrics.get("job"), dict) else {}
    assert isinstance(job, dict)
    now = datetime.now().strftime("%H:%M:%S")
    head = [
        f"lockgate top - {progress.get('job') or job.get('name')} at {url} - {now}",
        *summary_lines(progress, job),
        "",
    ]
    rows = [_COLUMNS, *task_rows(metrics)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    table = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]
    if len(rows) == 1:
        table.append("(no task runs now: the job is starting, restarting or has ended)")
    lines = [*head, *table]
    return "\n".join(lines if width is None else [line[:width] for line in lines]) + "\n"


def fetch_frame(client: RestClient, job_id: str, width: int | None) -> tuple[str, str]:
    """(the frame, the job's status) read now from ``client``."""
    progress = client.get(f"/jobs/{job_id}/progress")
    metrics = client.get(f"/jobs/{job_id}/metrics")
    if not isinstance(progress, dict) or not isinstance(metrics, dict):
        raise RemoteError(f"{client.url}: unexpected reply for job {job_id}; is it lockgate?")
    status = str(progress.get("status") or (metrics.get("job") or {}).get("status"))
    return render_frame(client.url, progress, metrics, width), status


def run_top(
    client: RestClient,
    job_id: str,
    *,
    interval: float = 2.0,
    once: bool = False,
    out: TextIO | None = None,
    stop: threading.Event | None = None,
    width: Callable[[], int | None] | None = None,
) -> int:
    """Show the job ``job_id`` of ``client`` every ``interval`` seconds (``once``: one
    frame) until Ctrl-C or ``stop`` is set (exit code 0), or the job reaches a final
    status (its last frame stays; exit code 0). A REST API that stops answering raises
    :class:`RemoteError` (the job ended or became unreachable)."""
    out = out or sys.stdout
    stop = stop or threading.Event()
    tty = out.isatty()
    live = not once and tty
    columns = width or (lambda: shutil.get_terminal_size().columns if tty else None)
    if once:
        settle_rates(client, job_id)
        out.write(fetch_frame(client, job_id, columns())[0])
        out.flush()
        return 0
    if live:
        out.write(_ENTER)
    last = ""
    try:
        while True:
            try:
                frame, status = fetch_frame(client, job_id, columns())
            except RemoteError as e:
                if last:
                    raise RemoteError(
                        f"the job stopped answering (it has probably ended; 'lockgate list' "
                        f"shows the running ones): {e}"
                    ) from None
                raise
            last = frame
            out.write((_HOME_CLEAR + frame) if live else frame + "\n")
            out.flush()
            if status in FINAL or stop.wait(interval):
                break
    except KeyboardInterrupt:
        pass
    finally:
        if live:
            out.write(_LEAVE)
            if last:
                out.write(last)  # the last frame stays on the normal screen
            out.flush()
    return 0

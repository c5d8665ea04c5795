"""``GET /metrics``: a job's live metrics in the Prometheus text format.

A custom ``prometheus_client`` collector reads ``JobClient.metrics()``,
``checkpoints()`` and ``status()`` at every scrape (nothing is kept between scrapes,
nothing goes to the process-wide default registry). Labels: ``job`` (the job's
name) and ``job_id`` on every series; ``operator`` (uid), ``task`` and ``subtask`` on
the per-subtask series. A gauge without a value yet (a rate before two readings a
second apart, a watermark before the first) is left out, never reported as 0.

Per operator subtask: ``lockgate_operator_records_in_total``,
``lockgate_operator_records_out_total``, ``lockgate_operator_records_in_per_second``,
``lockgate_operator_records_out_per_second``, ``lockgate_operator_watermark_ms`` (event
time, ms since the epoch), ``lockgate_operator_watermark_lag_ms``,
``lockgate_operator_source_lag_records``, ``lockgate_operator_keys``,
``lockgate_operator_state_bytes``.

Per sink subtask with latency tracking on (``latency_tracking_interval_ms``):
``lockgate_sink_latency_seconds``, a summary of the end-to-end latency: the quantiles
0.5, 0.95 and 0.99 of about the last minute (left out while that window holds no
sample), ``_count`` and ``_sum`` over the run.

Per task subtask: ``lockgate_task_busy_ms_per_second``,
``lockgate_task_idle_ms_per_second``, ``lockgate_task_backpressured_ms_per_second``
(Flink's ``busyTimeMsPerSecond`` ...), ``lockgate_task_bytes_in_total``,
``lockgate_task_bytes_out_total``, ``lockgate_task_bytes_in_per_second``,
``lockgate_task_bytes_out_per_second``, ``lockgate_task_input_queue_fill_ratio``,
``lockgate_task_output_queue_fill_ratio`` (0..1).

Per job: ``lockgate_job_status`` (1 for the current ``status`` label, 0 for the
others), ``lockgate_job_restarts_total``, ``lockgate_job_uptime_seconds``,
``lockgate_job_checkpoints_completed_total``, ``lockgate_job_checkpoints_failed_total``,
``lockgate_job_checkpoints_in_progress``, ``lockgate_job_last_checkpoint_duration_seconds``,
``lockgate_job_last_checkpoint_size_bytes``, ``lockgate_job_last_checkpoint_id``,
``lockgate_job_rescales_total`` (the autoscaler's rescales, by ``status``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..core.latency.histogram import QUANTILES

PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE_LATEST
JOB_STATUSES = ("CREATED", "RUNNING", "RESTARTING", "FINISHED", "CANCELED", "FAILED")

#: (key in ``metrics()["operators"]``, metric name, help, counter?)
OPERATOR_METRICS = (
    ("records_in", "lockgate_operator_records_in", "Records into the operator subtask.", True),
    ("records_out", "lockgate_operator_records_out", "Records out of the operator subtask.", True),
    (
        "records_in_per_s",
        "lockgate_operator_records_in_per_second",
        "Records in per second (about the last second).",
        False,
    ),
    (
        "records_out_per_s",
        "lockgate_operator_records_out_per_second",
        "Records out per second (about the last second).",
        False,
    ),
    (
        "watermark",
        "lockgate_operator_watermark_ms",
        "Current event-time watermark (ms since the epoch).",
        False,
    ),
    (
        "watermark_lag_ms",
        "lockgate_operator_watermark_lag_ms",
        "How far the watermark is behind the wall clock (ms).",
        False,
    ),
    (
        "source_lag",
        "lockgate_operator_source_lag_records",
        "Records between the source's position and the end of its input (where known).",
        False,
    ),
    ("keys", "lockgate_operator_keys", "Keys the operator holds state for.", False),
    ("state_bytes", "lockgate_operator_state_bytes", "Approximate size of its state.", False),
)

#: (key in ``metrics()["vertices"][i]["subtasks"]``, metric name, help, counter?)
TASK_METRICS = (
    ("busy_ms_per_s", "lockgate_task_busy_ms_per_second", "Busy time, ms per second.", False),
    ("idle_ms_per_s", "lockgate_task_idle_ms_per_second", "Idle time, ms per second.", False),
    (
        "backpressured_ms_per_s",
        "lockgate_task_backpressured_ms_per_second",
        "Time blocked on full output channels, ms per second.",
        False,
    ),
    ("bytes_in", "lockgate_task_bytes_in", "Bytes received from input channels.", True),
    ("bytes_out", "lockgate_task_bytes_out", "Bytes sent to output channels.", True),
    ("bytes_in_per_s", "lockgate_task_bytes_in_per_second", "Bytes in per second.", False),
    ("bytes_out_per_s", "lockgate_task_bytes_out_per_second", "Bytes out per second.", False),
    (
        "input_queue_fill",
        "lockgate_task_input_queue_fill_ratio",
        "Fill of the input queues (0..1).",
        False,
    ),
    (
        "output_queue_fill",
        "lockgate_task_output_queue_fill_ratio",
        "Fill of the output queues (0..1).",
        False,
    ),
)


def _family(name: str, help_text: str, counter: bool, labels: list[str]) -> Any:
    if counter:
        return CounterMetricFamily(name, help_text, labels=labels)
    return GaugeMetricFamily(name, help_text, labels=labels)


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class JobCollector(Collector):
    """Collects one job's metrics at each scrape (see the module docstring)."""

    def __init__(self, client: Any, job_id: Callable[[], str | None]) -> None:
        self._client = client
        self._job_id = job_id

    def collect(self) -> Iterator[Metric]:
        client = self._client
        metrics = client.metrics()
        job = [str(client.job_name), str(self._job_id() or "")]
        yield from self._operators(metrics.get("operators", []), job)
        yield self._latency(metrics.get("operators", []), job)
        yield from self._tasks(metrics.get("vertices", []), job)
        yield from self._job(metrics.get("job", {}), client.checkpoints(), job)

    def _operators(self, operators: list[dict[str, Any]], job: list[str]) -> Iterator[Metric]:
        labels = ["job", "job_id", "operator", "subtask"]
        for key, name, help_text, counter in OPERATOR_METRICS:
            family = _family(name, help_text, counter, labels)
            for op in operators:
                value = _number(op.get(key))
                if value is not None:
                    family.add_metric([*job, str(op["uid"]), str(op["subtask"])], value)
            yield family

    def _latency(self, operators: list[dict[str, Any]], job: list[str]) -> Metric:
        name = "lockgate_sink_latency_seconds"
        family = Metric(
            name,
            "End-to-end latency from a source's batch to the sink (quantiles: about the "
            "last minute; count and sum: the run).",
            "summary",
        )
        for op in operators:
            latency = op.get("latency")
            if not latency:
                continue
            labels = dict(zip(("job", "job_id"), job))
            labels.update(operator=str(op["uid"]), subtask=str(op["subtask"]))
            for q in QUANTILES:
                value = _number(latency.get(f"p{round(q * 100)}_ms"))
                if value is not None:
                    family.add_sample(name, {**labels, "quantile": str(q)}, value / 1000.0)
            family.add_sample(f"{name}_count", labels, float(latency.get("count") or 0))
            family.add_sample(f"{name}_sum", labels, float(latency.get("sum_ms") or 0) / 1000.0)
        return family

    def _tasks(self, vertices: list[dict[str, Any]], job: list[str]) -> Iterator[Metric]:
        labels = ["job", "job_id", "task", "subtask"]
        for key, name, help_text, counter in TASK_METRICS:
            family = _family(name, help_text, counter, labels)
            for vertex in vertices:
                for sub in vertex.get("subtasks", []):
                    value = _number(sub.get(key))
                    if value is not None:
                        family.add_metric([*job, str(vertex["name"]), str(sub["subtask"])], value)
            yield family

    def _job(
        self, summary: dict[str, Any], checkpoints: list[Any], job: list[str]
    ) -> Iterator[Metric]:
        labels = ["job", "job_id"]
        status = GaugeMetricFamily(
            "lockgate_job_status",
            "1 for the job's current status, 0 for the others.",
            labels=[*labels, "status"],
        )
        current = summary.get("status")
        for s in JOB_STATUSES:
            status.add_metric([*job, s], 1.0 if s == current else 0.0)
        yield status
        restarts = CounterMetricFamily(
            "lockgate_job_restarts", "Restarts of the job so far.", labels=labels
        )
        restarts.add_metric(job, float(summary.get("restarts") or 0))
        yield restarts
        rescales_of = getattr(self._client, "rescales", None)
        if rescales_of is not None:
            rescales = CounterMetricFamily(
                "lockgate_job_rescales",
                "The autoscaler's rescales so far, by how they ended.",
                labels=[*labels, "status"],
            )
            by: dict[str, int] = {}
            for d in rescales_of():
                by[d.status] = by.get(d.status, 0) + 1
            for name in ("in progress", "applied", "failed", "rolled back"):
                rescales.add_metric([*job, name], float(by.get(name, 0)))
            yield rescales
        uptime = GaugeMetricFamily(
            "lockgate_job_uptime_seconds", "Seconds since the job started.", labels=labels
        )
        uptime.add_metric(job, float(summary.get("uptime_s") or 0.0))
        yield uptime
        by_status: dict[str, int] = {}
        for c in checkpoints:
            by_status[c.status] = by_status.get(c.status, 0) + 1
        for kind in ("completed", "failed"):
            count = CounterMetricFamily(
                f"lockgate_job_checkpoints_{kind}", f"Checkpoints {kind} so far.", labels=labels
            )
            count.add_metric(job, float(by_status.get(kind, 0)))
            yield count
        in_progress = GaugeMetricFamily(
            "lockgate_job_checkpoints_in_progress", "Checkpoints in progress.", labels=labels
        )
        in_progress.add_metric(job, float(by_status.get("in_progress", 0)))
        yield in_progress
        completed = [c for c in checkpoints if c.status == "completed"]
        last = completed[-1] if completed else None
        for name, help_text, value in (
            (
                "lockgate_job_last_checkpoint_duration_seconds",
                "Duration of the last completed checkpoint.",
                None if last is None or last.duration_ms is None else last.duration_ms / 1000.0,
            ),
            (
                "lockgate_job_last_checkpoint_size_bytes",
                "State size of the last completed checkpoint.",
                None if last is None else last.state_size,
            ),
            (
                "lockgate_job_last_checkpoint_id",
                "Id of the last completed checkpoint.",
                None if last is None else last.checkpoint_id,
            ),
        ):
            family = GaugeMetricFamily(name, help_text, labels=labels)
            number = _number(value)
            if number is not None:
                family.add_metric(job, number)
            yield family


def prometheus_text(client: Any, job_id: Callable[[], str | None]) -> bytes:
    """The job's metrics in the Prometheus text format (one scrape)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(client, job_id))
    return generate_latest(registry)

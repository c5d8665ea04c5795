"""Prometheus ``/metrics`` of a running job (issue 21, item 3), parsed with
``prometheus_client``'s own parser: the named metrics are present with sane values
while the job runs, and a throttled sink makes the upstream task show more than
500 ms/s of backpressure both in the REST metrics and in ``/metrics``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rest_jobs import api, job_id, numbers_job, start, stop

import lockgate as lg
from conftest import wait_until


def scrape(client: lg.JobClient) -> dict[str, list[Any]]:
    """Sample name -> samples of one scrape of ``/metrics``."""
    with api(client) as http:
        r = http.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    found = [
        s.value
        for s in samples.get(name, [])
        if all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, f"{name}{labels}: {found} (have {sorted(samples)})"
    return float(found[0])


OPERATOR_SERIES = (
    "lockgate_operator_records_in_total",
    "lockgate_operator_records_out_total",
    "lockgate_operator_records_in_per_second",
    "lockgate_operator_records_out_per_second",
)
TASK_SERIES = (
    "lockgate_task_busy_ms_per_second",
    "lockgate_task_idle_ms_per_second",
    "lockgate_task_backpressured_ms_per_second",
    "lockgate_task_bytes_in_total",
    "lockgate_task_bytes_out_total",
    "lockgate_task_bytes_in_per_second",
    "lockgate_task_bytes_out_per_second",
)
JOB_SERIES = (
    "lockgate_job_status",
    "lockgate_job_restarts_total",
    "lockgate_job_uptime_seconds",
    "lockgate_job_checkpoints_completed_total",
    "lockgate_job_checkpoints_failed_total",
    "lockgate_job_checkpoints_in_progress",
    "lockgate_job_last_checkpoint_duration_seconds",
    "lockgate_job_last_checkpoint_size_bytes",
    "lockgate_job_last_checkpoint_id",
)


def test_metrics_are_present_with_sane_values_while_the_job_runs(tmp_path: Path) -> None:
    client = start(numbers_job(tmp_path, executor=lg.LocalExecutor()), name="scraped job")
    try:
        jid = job_id(client)

        def ready() -> bool:
            s = scrape(client)
            return (
                all(name in s for name in OPERATOR_SERIES + TASK_SERIES + JOB_SERIES)
                and value(s, "lockgate_job_checkpoints_completed_total", job="scraped job") >= 1
                and value(
                    s, "lockgate_operator_records_out_per_second", operator="numbers", subtask="0"
                )
                > 0
            )

        wait_until(ready, "every named series is scraped, with a checkpoint and a rate", 60)
        s = scrape(client)
        job = {"job": "scraped job", "job_id": jid}
        # every series carries the job's labels
        for name in OPERATOR_SERIES + TASK_SERIES:
            assert all(
                x.labels["job"] == "scraped job" and x.labels["job_id"] == jid for x in s[name]
            )
        assert value(s, "lockgate_job_status", status="RUNNING", **job) == 1
        assert value(s, "lockgate_job_status", status="FAILED", **job) == 0
        assert value(s, "lockgate_job_restarts_total", **job) == 0
        assert value(s, "lockgate_job_uptime_seconds", **job) > 0
        assert value(s, "lockgate_job_last_checkpoint_duration_seconds", **job) > 0
        assert value(s, "lockgate_job_last_checkpoint_size_bytes", **job) > 0
        assert value(s, "lockgate_job_last_checkpoint_id", **job) >= 1
        assert value(s, "lockgate_job_checkpoints_failed_total", **job) == 0
        # per operator: the source emits, the map passes on what it got (about 50,000/s)
        out = value(s, "lockgate_operator_records_out_total", operator="numbers", subtask="0")
        assert out > 0
        assert value(s, "lockgate_operator_records_in_total", operator="plus-one", subtask="0") > 0
        rate = value(s, "lockgate_operator_records_out_per_second", operator="numbers", subtask="0")
        assert 0 < rate < 1_000_000
        # per task: busy + idle + backpressured is about a second per second
        tasks = {x.labels["task"] for x in s["lockgate_task_busy_ms_per_second"]}
        assert len(tasks) == 2 and any(t.startswith("numbers") for t in tasks)
        for task in tasks:
            parts = [
                value(s, f"lockgate_task_{kind}_ms_per_second", task=task, subtask="0")
                for kind in ("busy", "idle", "backpressured")
            ]
            assert all(0 <= p <= 1000 for p in parts) and 900 <= sum(parts) <= 1100, (task, parts)
        sink_task = next(t for t in tasks if t == "out")
        assert value(s, "lockgate_task_bytes_in_total", task=sink_task, subtask="0") > 0
        for name in (
            "lockgate_task_input_queue_fill_ratio",
            "lockgate_task_output_queue_fill_ratio",
        ):
            assert all(0 <= x.value <= 1 for x in s.get(name, []))
    finally:
        stop(client)


@pytest.mark.hang_guard(240)
def test_a_throttled_sink_shows_backpressure_upstream_in_the_api_and_in_prometheus(
    tmp_path: Path,
) -> None:
    client = start(
        numbers_job(tmp_path, executor=lg.LocalExecutor(), throttled=True), name="throttled"
    )
    try:
        jid = job_id(client)

        def source_vertex() -> dict[str, Any]:
            with api(client) as http:
                metrics = http.get(f"/api/v1/jobs/{jid}/metrics").json()
            return next(v for v in metrics["vertices"] if v["name"].startswith("numbers"))

        wait_until(
            lambda: (source_vertex()["backpressured_ms_per_s"] or 0) > 500,
            "the REST metrics show the source task backpressured > 500 ms/s",
            60,
        )
        vertex = source_vertex()
        assert vertex["subtasks"][0]["backpressured_ms_per_s"] > 500
        task = vertex["name"]

        def scraped() -> float:
            return value(
                scrape(client), "lockgate_task_backpressured_ms_per_second", task=task, subtask="0"
            )

        wait_until(lambda: scraped() > 500, "/metrics shows the source task backpressured", 60)
        samples = scrape(client)
        # the throttled sink itself waits for nothing downstream
        assert (
            value(samples, "lockgate_task_backpressured_ms_per_second", task="slow", subtask="0")
            < 100
        )
    finally:
        stop(client)

"""End-to-end latency in the REST API and in Prometheus ``/metrics`` (issue 42,
section 5): a job with latency tracking on serves each sink's latency, per sink subtask
and merged, at ``/api/v1/jobs/{id}/metrics``, and a summary
``lockgate_sink_latency_seconds`` labelled by job, job id, sink operator uid and
subtask, with the quantiles 0.5, 0.95 and 0.99, its count and its sum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from rest_jobs import api, job_id, numbers_job, start, stop

import lockgate as lg
from conftest import wait_until

NAME = "lockgate_sink_latency_seconds"


def latency_family(client: lg.JobClient) -> Any:
    with api(client) as http:
        r = http.get("/metrics")
    assert r.status_code == 200, r.text
    found = [f for f in text_string_to_metric_families(r.text) if f.name == NAME]
    assert len(found) == 1, f"one {NAME} family expected, got {len(found)}"
    return found[0]


def test_the_sink_latency_is_served_by_the_api_and_as_a_prometheus_summary(
    tmp_path: Path,
) -> None:
    env = numbers_job(
        tmp_path,
        executor=lg.LocalExecutor(),
        checkpointing=False,
        latency_tracking_interval_ms=20,
    )
    client = start(env, name="latency job")
    try:
        jid = job_id(client)

        def api_metrics() -> dict[str, Any]:
            with api(client) as http:
                r = http.get(f"/api/v1/jobs/{jid}/metrics")
            assert r.status_code == 200, r.text
            return dict(r.json())

        wait_until(
            lambda: any(
                s["uid"] == "out" and s["window_count"] >= 5 for s in api_metrics()["latency"]
            ),
            "the REST metrics show 5 latency markers at the sink",
            60,
        )
        metrics = api_metrics()
        family = latency_family(client)
    finally:
        stop(client)
    (sink,) = metrics["latency"]
    assert (sink["uid"], sink["name"], sink["subtasks"]) == ("out", "out", 1)
    assert 0 <= sink["p50_ms"] <= sink["p95_ms"] <= sink["p99_ms"] <= sink["max_ms"] < 60_000
    (op,) = [o for o in metrics["operators"] if o["latency"] is not None]
    assert (op["uid"], op["subtask"]) == ("out", 0)

    assert family.type == "summary"
    labels = {"job": "latency job", "job_id": jid, "operator": "out", "subtask": "0"}
    by_kind: dict[str, float] = {}
    for sample in family.samples:
        quantile = sample.labels.pop("quantile", None)
        assert sample.labels == labels, sample
        key = sample.name if quantile is None else f"q{quantile}"
        by_kind[key] = sample.value
    assert sorted(by_kind) == sorted([f"{NAME}_count", f"{NAME}_sum", "q0.5", "q0.95", "q0.99"])
    assert by_kind[f"{NAME}_count"] >= 5
    assert by_kind[f"{NAME}_sum"] >= 0
    # seconds, in order, and sane
    assert 0 <= by_kind["q0.5"] <= by_kind["q0.95"] <= by_kind["q0.99"] < 60

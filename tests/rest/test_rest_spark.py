"""The REST API of a job on Spark (issue 21): the driver serves it while the slots run
in Spark's Python workers and send their metrics with their heartbeats; the metrics,
``/metrics`` and a savepoint through the API work as on the local executor, and a
throttled sink shows as backpressure upstream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rest_jobs import api, job_id, numbers_job, start, stop

from conftest import wait_until
from lockgate.checkpoint.storage import METADATA

pytestmark = [pytest.mark.spark, pytest.mark.hang_guard(300)]


def test_rest_api_of_a_job_on_spark(spark_executor: Any, tmp_path: Path) -> None:
    client = start(numbers_job(tmp_path, executor=spark_executor, throttled=True), "on spark")
    try:
        assert client.rest_url is not None and client.rest_url.startswith("http://127.0.0.1:")
        jid = job_id(client)
        with api(client) as http:

            def source() -> dict[str, Any]:
                metrics = http.get(f"/api/v1/jobs/{jid}/metrics").json()
                return next(v for v in metrics["vertices"] if v["name"].startswith("numbers"))

            wait_until(
                lambda: (source()["backpressured_ms_per_s"] or 0) > 500,
                "the source task on Spark is backpressured > 500 ms/s (via the heartbeats)",
                120,
            )
            assert source()["subtasks"][0]["host"]
            task = source()["name"]

            def scraped() -> float:
                text = http.get("/metrics").text
                for family in text_string_to_metric_families(text):
                    for s in family.samples:
                        if (
                            s.name == "lockgate_task_backpressured_ms_per_second"
                            and s.labels["task"] == task
                        ):
                            return float(s.value)
                return 0.0

            wait_until(lambda: scraped() > 500, "/metrics shows the backpressure", 60)
            wait_until(
                lambda: any(c.status == "completed" for c in client.checkpoints()),
                "a checkpoint completed",
                120,
            )
            r = http.post(
                f"/api/v1/jobs/{jid}/savepoints",
                json={"path": str(tmp_path / "sp"), "timeout": 120},
            )
            assert r.status_code == 200, r.text
            assert (Path(r.json()["location"]) / METADATA).is_file()
            detail = http.get(f"/api/v1/jobs/{jid}").json()
            assert detail["status"] == "RUNNING" and len(detail["graph"]["vertices"]) == 2
    finally:
        stop(client)

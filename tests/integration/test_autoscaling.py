"""The autoscaler rescales a running job up and back down, exactly once (issue 43 part 4;
M-R3 rescaling through a savepoint, M-X1 exactly-once output across it).

The job: a sequence read at a rate the test sets (``RateControlledSource``, whose backlog
is the records due and not read, as a Kafka topic's lag) -> key_by(v % 64) -> ``Work``,
a keyed count whose every record costs ``COST_S`` (released GIL, as an I/O-bound
operator: subtasks add capacity, on the local executor too) -> exactly-once files.

1. At ``HIGH`` records/s one ``Work`` subtask is far too slow: the autoscaler scales it
   up (to its bound, 3) after the stabilization and the metrics window.
2. At ``LOW`` records/s three are far too many: after the scale-down delay it goes back
   to 1.
3. A drained stop ends the input; the files then hold every number read exactly once
   (0..M-1 for the M read: the source is one subtask) and each key's counts are 1..n:
   the keyed state moved with its key groups through both rescales.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from typing import Any

import httpx
import pytest

import lockgate as lg
from lockgate.connectors import FileSink, SequenceSource
from lockgate.testing import FailAtRecord, inject_faults
from published_files import published
from rate_controlled import RateControlledSource, set_rate

COST_S = 0.0005
HIGH, LOW = 4000.0, 200.0
KEYS = 64
WAIT_S = 120.0


class Work(lg.KeyedProcessFunction):
    """Counts per key; every record costs ``COST_S`` of waiting (an I/O-bound call)."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value, ctx):
        time.sleep(COST_S)  # simulated per-record work (a remote call), not a wait in the test
        n = self.count.value() + 1
        self.count.update(n)
        yield {"v": int(value), "k": int(value) % KEYS, "n": n}


def build(tmp_path: Any, control: str) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=1, max_parallelism=32)
    env.enable_checkpointing(timedelta(milliseconds=500))
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    env.autoscaling(
        min_parallelism=1,
        max_parallelism=3,
        target_utilization=0.6,
        stabilization=timedelta(seconds=2),
        scale_down_delay=timedelta(seconds=2),
        metrics_window=timedelta(seconds=2),
        interval=timedelta(milliseconds=250),
    )
    (
        env.from_source(
            RateControlledSource(SequenceSource(0, 10_000_000, batch_size=50), control),
            name="numbers",
        )
        .uid("numbers")
        .key_by(lambda v: int(v) % KEYS)
        .process(Work(), name="work")
        .uid("work")
        .sink_to(FileSink(str(tmp_path / "out"), format="jsonl"), name="files")
        .uid("files")
    )
    return env


def wait_for(client: lg.JobClient, what: str, ok: Any) -> None:
    """Poll ``ok()`` (bounded), failing with the decisions so far."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if client.done():
            client.wait()  # raises the job's error
            pytest.fail(f"the job ended before {what}")
        if ok():
            return
        time.sleep(0.1)  # bounded poll of the client
    pytest.fail(f"no {what} within {WAIT_S}s; decisions: {client.rescales()}")


def applied(client: lg.JobClient, direction: str) -> bool:
    return any(d.status == "applied" and d.direction == direction for d in client.rescales())


def check_exact(folder: str) -> int:
    """The files hold 0..M-1 once each, and each key's counts are 1..n; returns M."""
    rows = published(folder)
    values = sorted(r["v"] for r in rows)
    assert values == list(range(len(values))), "every number read exactly once, none lost"
    counts: dict[int, list[int]] = {}
    for r in rows:
        counts.setdefault(r["k"], []).append(r["n"])
    expected = Counter(v % KEYS for v in values)
    assert {k: sorted(n) for k, n in counts.items()} == {
        k: list(range(1, c + 1)) for k, c in expected.items()
    }, "each key counted once per record: its state moved with it through the rescales"
    return len(values)


def check_rest(client: lg.JobClient) -> None:
    """The REST API serves the same parallelism and decisions, and /metrics counts them."""
    assert client.rest_url and client.rest_token
    headers = {"Authorization": f"Bearer {client.rest_token}"}
    with httpx.Client(base_url=client.rest_url, headers=headers, timeout=30) as http:
        (job,) = http.get("/api/v1/jobs").json()["jobs"]
        body = http.get(f"/api/v1/jobs/{job['id']}/rescales").json()
        prometheus = http.get("/metrics").text
    assert body["parallelism"] == client.parallelism()
    assert body["autoscaling"]["max_parallelism"] == 3
    assert [d["direction"] for d in body["rescales"]] == ["up", "down"]
    assert body["rescales"][0]["evaluation"][1]["name"].startswith("work")
    assert (
        "lockgate_job_rescales_total{job=" in prometheus and 'status="applied"} 2.0' in prometheus
    )


def run_up_and_down(tmp_path: Any, executor: Any) -> None:
    control = str(tmp_path / "rate")
    set_rate(control, HIGH)
    env = build(tmp_path, control)
    client = env.execute_async("autoscaled", executor=executor)
    try:
        wait_for(client, "scale-up", lambda: applied(client, "up"))
        assert client.parallelism()["work"] > 1
        assert client.parallelism()["numbers"] == 1, "the source's own limit holds"
        set_rate(control, LOW)
        wait_for(client, "scale-down", lambda: applied(client, "down"))
        assert client.parallelism()["work"] == 1
        check_rest(client)
        result_path = client.stop_with_savepoint(str(tmp_path / "final"), drain=True)
    finally:
        if not client.done():
            client.cancel()
    assert result_path
    result = client.wait()
    decisions = client.rescales()
    ups = [d for d in decisions if d.direction == "up"]
    assert ups[0].old["work"] == 1 and ups[0].new["work"] in (2, 3)
    assert ups[0].savepoint and ups[0].duration_ms is not None
    assert "records/s" in ups[0].reason and ups[0].evaluation
    assert all(d.status == "applied" for d in decisions), decisions
    assert result.attempts == len(decisions) + 1

    assert check_exact(str(tmp_path / "out")) > 1000


@pytest.mark.hang_guard(400)
def test_autoscaler_scales_up_and_down_exactly_once(tmp_path, executor) -> None:
    """On both executors (the shared Spark session offers 2 slots: its bound)."""
    run_up_and_down(tmp_path, executor)


@pytest.mark.hang_guard(400)
def test_a_rescale_failing_before_its_first_checkpoint_rolls_back(tmp_path, executor) -> None:
    """The first rescaled attempt (attempt 1) fails at its first record: the job goes
    back to parallelism 1 from the rescale's savepoint, the decision says "rolled back"
    with the failure, and a later rescale up applies; the output stays exact."""
    control = str(tmp_path / "rate")
    set_rate(control, HIGH)
    env = build(tmp_path, control)
    inject_faults(env, FailAtRecord("work", record=0, subtask=1, attempt=1))
    client = env.execute_async("rolled back", executor=executor)
    try:
        wait_for(
            client,
            "a rollback then an applied scale-up",
            lambda: [d.status for d in client.rescales()] == ["rolled back", "applied"],
        )
        client.stop_with_savepoint(str(tmp_path / "final"), drain=True)
    finally:
        if not client.done():
            client.cancel()
    result = client.wait()
    first, second = client.rescales()
    assert first.error and "InjectedFault" in first.error
    assert first.new["work"] > 1 and second.new["work"] > 1
    history = [(a.attempt, a.status.value) for a in result.attempt_history]
    assert history[:3] == [(0, "CANCELED"), (1, "FAILED"), (2, "CANCELED")], history
    assert result.attempts == 4
    assert check_exact(str(tmp_path / "out")) > 1000

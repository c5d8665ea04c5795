"""Jobs and HTTP helpers the REST API tests share (issue 21): a long-running job with
checkpointing, a throttled sink that backpressures its upstream task, and an httpx
client aimed at a job's REST server."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

import lockgate as lg
from conftest import wait_until
from lockgate.connectors import SequenceSource, Sink, SinkWriter
from lockgate.connectors.builtin.discarding_sink import DiscardingSink
from lockgate.core.batch import num_rows


class ThrottledWriter(SinkWriter):
    """Writes at most ``rows_per_s`` rows a second (waits on an Event never set)."""

    def __init__(self, rows_per_s: float) -> None:
        self.rows_per_s = rows_per_s
        self.pause = threading.Event()

    def write(self, batch: Any) -> None:
        self.pause.wait(num_rows(batch) / self.rows_per_s)


class ThrottledSink(Sink):
    default_name = "throttled"

    def __init__(self, rows_per_s: float) -> None:
        self.rows_per_s = rows_per_s

    def create_writer(self, ctx: Any) -> SinkWriter:
        return ThrottledWriter(self.rows_per_s)


def small_channels(env: lg.StreamEnvironment) -> None:
    env.config.channel_capacity_bytes = 64 * 1024
    env.config.buffer_max_bytes = 16 * 1024
    env.config.buffer_max_rows = 500
    env.config.progress_interval_ms = 0


def numbers_job(
    tmp_path: Path,
    *,
    executor: Any = None,
    checkpointing: bool = True,
    throttled: bool = False,
    parallelism: int = 1,
    **config: Any,
) -> lg.StreamEnvironment:
    """numbers (unbounded) -> plus one -> [rebalance] -> sink. ``throttled``: the sink
    writes 20,000 rows/s, so the upstream task is backpressured."""
    env = lg.StreamEnvironment(parallelism=parallelism, executor=executor)
    small_channels(env)
    for key, value in config.items():
        setattr(env.config, key, value)
    if checkpointing:
        env.enable_checkpointing(200)
        env.checkpoint_config.storage = str(tmp_path / "chk")
    stream = (
        env.from_source(
            SequenceSource(0, 10**9, batch_size=500, rows_per_second=None if throttled else 50_000),
            name="numbers",
        )
        .uid("numbers")
        .map(lambda v: v + 1, name="plus one")
        .uid("plus-one")
        .rebalance()
    )
    if throttled:
        stream.sink_to(ThrottledSink(20_000), name="slow").uid("slow")
    else:
        stream.sink_to(DiscardingSink(), name="out").uid("out")
    return env


def start(env: lg.StreamEnvironment, name: str = "rest job") -> lg.JobClient:
    client = env.execute_async(name)
    try:
        wait_until(lambda: client.status() == "RUNNING", "the job runs", 120)
    except BaseException:
        client.cancel()
        client.wait(120)
        raise
    return client


def stop(client: lg.JobClient) -> None:
    client.cancel()
    try:
        client.wait(120)
    except lg.JobFailedError:
        pass


def api(client: lg.JobClient, token: str | None = "right", **kwargs: Any) -> httpx.Client:
    """An httpx client for the job's REST server; ``token="right"`` sends the job's
    token as a Bearer header, None sends none, any other string sends that."""
    headers = dict(kwargs.pop("headers", {}))
    if token == "right":
        token = client.rest_token
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    assert client.rest_url is not None
    return httpx.Client(base_url=client.rest_url, headers=headers, timeout=60, **kwargs)


def job_id(client: lg.JobClient) -> str:
    with api(client) as http:
        jobs = http.get("/api/v1/jobs").json()["jobs"]
    assert len(jobs) == 1
    return str(jobs[0]["id"])

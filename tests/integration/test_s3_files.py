"""FileSink and FileSource on S3 (a moto server), whole jobs on the local executor and on
Spark (local[2]): the exactly-once recovery job of ``test_recovery.py`` (sequence ->
keyed running sum -> exactly-once FileSink), here writing to an ``s3://`` prefix through
seeded faults of every kind (also between pre-commit and commit), publishes exactly the
failure-free records and leaves no temporary key; a job watching an S3 prefix reads the
keys put while it runs exactly once into an S3 FileSink.

URLs carry the dummy credentials (``with_credentials=True``): Spark's Python workers do
not see the test's environment."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs
import pytest
from test_recovery import ROLES, RunningSum, by_value, expected_records, key_of, to_record

import lockgate as lg
from conftest import wait_until
from lockgate.connectors import FileSink, FileSource, SequenceSource
from lockgate.testing import inject_faults, seeded_faults

if TYPE_CHECKING:
    from s3_server import MotoServer

pytest_plugins = ["s3_server"]

#: records of the recovery job, and the seeded faults: one of each kind (source,
#: operator, alignment, asynchronous snapshot, commit)
N = 24_000
FAULTS = 5


@pytest.fixture
def s3_prefix(moto_server: MotoServer) -> str:
    """A fresh prefix's URL, credentials included (for Spark's workers)."""
    return moto_server.url(path=f"test-{uuid.uuid4().hex[:12]}", with_credentials=True)


def under(url: str, name: str) -> str:
    parts = urlsplit(url)
    return parts._replace(path=f"{parts.path.rstrip('/')}/{name}").geturl()


def keys(server: MotoServer, url: str) -> list[str]:
    parts = urlsplit(url)
    infos = server.filesystem().get_file_info(
        pafs.FileSelector(f"{parts.hostname}{parts.path}", recursive=False, allow_not_found=True)
    )
    return sorted(i.path for i in infos if i.type == pafs.FileType.File)


def published(server: MotoServer, url: str) -> list[dict[str, Any]]:
    """Every record of the ``part-*`` keys (what a reader skipping hidden keys sees)."""
    records: list[dict[str, Any]] = []
    fs = server.filesystem()
    for key in keys(server, url):
        if key.rsplit("/", 1)[1].startswith("part-"):
            with fs.open_input_stream(key) as f:
                records.extend(json.loads(line) for line in f.read().splitlines() if line)
    return records


def hidden(server: MotoServer, url: str) -> list[str]:
    return [k for k in keys(server, url) if k.rsplit("/", 1)[1].startswith(".")]


@pytest.mark.hang_guard(300)
def test_m_r1_m_x2_seeded_failures_publish_exactly_the_failure_free_output_on_s3(
    executor: Any, tmp_path: Any, moto_server: MotoServer, s3_prefix: str
) -> None:
    out = under(s3_prefix, "out")
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=20, delay=0))
    (
        env.from_source(SequenceSource(0, N, rows_per_second=10_000, batch_size=500))
        .uid("numbers")
        .map(to_record, name="to record")
        .key_by(key_of)
        .process(RunningSum(), name="running sum")
        .uid("sums")
        .sink_to(FileSink(out, format="jsonl"), name="files")
        .uid("files")
    )
    inject_faults(env, *seeded_faults(7, FAULTS, operators=ROLES, records=1_000))
    result = env.execute("recovery equivalence on s3")
    assert result.attempts == FAULTS + 1, f"each fault fires in an attempt: {result.attempts}"
    records = published(moto_server, out)
    expected = expected_records(N)
    assert len(records) == len(expected), f"{len(records)} published, expected {len(expected)}"
    assert by_value(records) == expected
    assert hidden(moto_server, out) == [], "no temporary key is left behind"


def put(server: MotoServer, url: str, name: str, ids: range) -> None:
    parts = urlsplit(url)
    with server.filesystem().open_output_stream(f"{parts.hostname}{parts.path}/{name}") as f:
        f.write("".join(json.dumps({"id": i}) + "\n" for i in ids).encode())


@pytest.mark.hang_guard(120)
def test_m_x1_a_job_watching_an_s3_prefix_publishes_keys_put_while_it_runs_exactly_once(
    executor: Any, tmp_path: Any, moto_server: MotoServer, s3_prefix: str
) -> None:
    source, out = under(s3_prefix, "in"), under(s3_prefix, "out")
    put(moto_server, source, "f-000.jsonl", range(25))
    expected = list(range(25))
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    (
        env.from_source(FileSource(source, monitor_interval=0.05), name="watched")
        .uid("watched")
        .sink_to(FileSink(out), name="files")
        .uid("files")
    )
    client = env.execute_async("watch an s3 prefix")

    def ids() -> list[int]:
        return sorted(r["id"] for r in published(moto_server, out))

    try:
        wait_until(lambda: client.done() or ids() == expected, "f-000 published", timeout_s=60)
        for n in range(1, 6):
            put(moto_server, source, f"f-{n:03d}.jsonl", range(25 * n, 25 * n + 25))
            expected += range(25 * n, 25 * n + 25)
        put(moto_server, source, ".half-written.jsonl", range(-5, 0))
        wait_until(lambda: client.done() or len(ids()) >= len(expected), "every key published", 60)
        assert not client.done(), "the watching job runs until it is cancelled"
        seen = sum(1 for c in client.checkpoints() if c.status == "completed")
        wait_until(
            lambda: sum(1 for c in client.checkpoints() if c.status == "completed") >= seen + 2,
            "two more checkpoints (a duplicate would be published by then)",
            timeout_s=30,
        )
    finally:
        client.cancel()
    assert client.wait(60).status is lg.JobStatus.CANCELED
    assert ids() == sorted(expected), "every record exactly once"

"""Periodic checkpoints on a running job, on both executors: they complete continuously,
storage keeps exactly ``retained`` of them with their ``_metadata`` (M-C7, M-C8), the client
lists them with their metrics (M-B10), and unaligned checkpoints complete under
backpressure while persisting in-flight data (M-B7)."""

from __future__ import annotations

import os
import time
import uuid

import pytest

import lockgate as lg
from conftest import wait_until
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.checkpoint.storage_url import open_storage
from lockgate.checkpoint.types import StateHandle
from lockgate.connectors import DiscardingSink, SequenceSource

#: the moto S3 server fixture (tests/s3_server.py)
pytest_plugins = ["s3_server"]


class RunningSum(lg.KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

    def process_element(self, value, ctx):
        t = self.total.value() + value["v"]
        self.total.update(t)
        yield {"k": ctx.current_key, "total": t}


def to_record(x):
    return {"k": x % 10, "v": x}


def key_of(r):
    return r["k"]


def completed(client: lg.JobClient) -> list[lg.CheckpointStats]:
    return [c for c in client.checkpoints() if c.status == "completed"]


def cancel_after_checkpoints(
    client: lg.JobClient, count: int, what: str, timeout_s: float = 30
) -> lg.JobExecutionResult:
    """Wait (bounded) until ``count`` checkpoints completed, then cancel the job and return
    its result (the job is cancelled even when the wait fails)."""
    try:
        wait_until(
            lambda: len(completed(client)) >= count or client.done(), what, timeout_s=timeout_s
        )
    finally:
        client.cancel()
    return client.wait(60)


def chk_folders(root: str) -> list[str]:
    return sorted(d for d in os.listdir(root) if d.startswith("chk-"))


def running_sums_job(executor, storage: str, **cfg) -> lg.JobClient:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(200, cfg.pop("mode", lg.CheckpointingMode.EXACTLY_ONCE))
    env.checkpoint_config.storage = storage
    for name, value in cfg.items():
        setattr(env.checkpoint_config, name, value)
    (
        env.from_source(SequenceSource(0, 10**12, rows_per_second=50_000, batch_size=1000))
        .uid("numbers")
        .map(to_record)
        .key_by(key_of)
        .process(RunningSum())
        .uid("sums")
        .sink_to(DiscardingSink())
        .uid("sink")
    )
    return env.execute_async("checkpointed running sums")


def test_m_c7_m_c8_a_running_job_completes_checkpoints_continuously_and_keeps_retained_ones(
    executor, tmp_path
) -> None:
    root = str(tmp_path / "ckpt")
    client = running_sums_job(
        executor, root, retained=3, externalized=lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
    )
    result = cancel_after_checkpoints(client, 5, "five checkpoints completed", timeout_s=60)
    assert result.status is lg.JobStatus.CANCELED
    done = completed(client)
    assert len(done) >= 5
    ids = [c.checkpoint_id for c in done]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    # storage: exactly `retained` checkpoints, each with its _metadata, the newest ones
    folders = chk_folders(root)
    assert folders == [f"chk-{i}" for i in ids[-3:]], (folders, ids)
    for folder in folders:
        assert os.path.exists(os.path.join(root, folder, "_metadata"))
    storage = FileSystemCheckpointStorage(root)
    assert storage.read_latest() == ids[-1]
    # metrics (M-B10) for every subtask (2 sources with the map chained, 2 sums), also
    # recorded in _metadata
    last = done[-1]
    assert last.duration_ms is not None and last.duration_ms >= 0 and last.state_size > 0
    assert len(last.subtasks) >= 4
    for metrics in last.subtasks.values():
        assert metrics.sync_ms >= 0 and metrics.async_ms >= 0 and metrics.start_delay_ms >= 0
    meta = storage.read_metadata(ids[-1])
    assert meta["checkpoint_id"] == ids[-1] and meta["stats"]["state_size"] == last.state_size
    # the state is really there: the sources' positions and the keyed sums
    positions = []
    for h in meta["operators"]["numbers"].values():
        state = storage.read_state(StateHandle(h["path"], h["size"], h["checksum"]))
        [split] = state["state"]["splits"]
        positions.append(split.next)
    assert all(p > 0 for p in positions)
    sums = meta["operators"]["sums"]
    assert set(sums) == {"0", "1"}


def test_checkpoints_go_to_s3_through_the_same_storage_layer(executor, moto_server) -> None:
    # credentials in the URL: Spark's Python workers may predate the fixture's environment
    url = moto_server.url(path=f"jobs/{uuid.uuid4().hex}", with_credentials=True)
    client = running_sums_job(
        executor, url, retained=2, externalized=lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
    )
    cancel_after_checkpoints(client, 3, "three checkpoints on S3", timeout_s=60)
    ids = [c.checkpoint_id for c in completed(client)]
    storage = open_storage(url)
    assert storage.completed_ids() == ids[-2:]
    assert storage.read_latest() == ids[-1]
    meta = storage.read_metadata(ids[-1])
    h = meta["operators"]["numbers"]["0"]
    assert (
        storage.read_state(StateHandle(h["path"], h["size"], h["checksum"]))["operator"]
        == "numbers"
    )


def test_m_s3_cancelling_deletes_the_checkpoints_unless_they_are_retained(tmp_path) -> None:
    root = str(tmp_path / "ckpt")
    client = running_sums_job(lg.LocalExecutor(), root, retained=2)
    assert cancel_after_checkpoints(client, 2, "two checkpoints").status is lg.JobStatus.CANCELED
    assert chk_folders(root) == []


def test_m_b9_at_least_once_checkpoints_complete_too(executor, tmp_path) -> None:
    client = running_sums_job(
        executor, str(tmp_path / "ckpt"), mode=lg.CheckpointingMode.AT_LEAST_ONCE
    )
    cancel_after_checkpoints(client, 3, "three checkpoints", timeout_s=60)
    assert len(completed(client)) >= 3


def slow_map(batch):
    time.sleep(0.004)  # the slow consumer under test (it builds backpressure), not a wait
    return batch


def test_m_b7_unaligned_checkpoints_complete_under_backpressure_and_persist_in_flight_data(
    executor, tmp_path
) -> None:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(200)
    cfg = env.checkpoint_config
    cfg.storage = str(tmp_path / "ckpt")
    cfg.unaligned = True
    env.set_buffer_timeout(0)
    (
        env.from_source(SequenceSource(0, 10**12, batch_size=500))
        .uid("numbers")
        .rebalance()
        .map_batches(slow_map)
        .uid("slow")
        .sink_to(DiscardingSink())
        .uid("sink")
    )
    client = env.execute_async("backpressured")
    cancel_after_checkpoints(
        client, 3, "three unaligned checkpoints under backpressure", timeout_s=60
    )
    done = completed(client)
    assert len(done) >= 3
    assert all(m.unaligned for c in done for m in c.subtasks.values())
    assert sum(c.persisted_inflight_bytes for c in done) > 0


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"unaligned": True, "mode": lg.CheckpointingMode.AT_LEAST_ONCE}, "EXACTLY_ONCE"),
        ({"unaligned": True, "max_concurrent": 2}, "max_concurrent"),
        ({"retained": 0}, "retained"),
        ({"aligned_timeout": 100}, "unaligned"),
    ],
)
def test_invalid_checkpoint_settings_are_rejected_when_the_job_is_built(bad, message) -> None:
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.enable_checkpointing(100, bad.pop("mode", lg.CheckpointingMode.EXACTLY_ONCE))
    for name, value in bad.items():
        setattr(env.checkpoint_config, name, value)
    env.from_sequence(0, 10).sink_to(DiscardingSink())
    with pytest.raises(lg.ConfigurationError, match=message):
        env.execute("bad settings")


@pytest.mark.parametrize("interval", [-1, 0, "1s", None])
def test_a_bad_checkpoint_interval_is_rejected(interval) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    with pytest.raises(lg.ConfigurationError, match="interval"):
        env.enable_checkpointing(interval)

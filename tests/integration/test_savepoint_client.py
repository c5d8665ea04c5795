"""Savepoints through JobClient: trigger, stop, self-contained folders (M-S1, M-R3)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from conftest import FileProbe, wait_until
from lockgate.checkpoint.storage import METADATA


class Summing(lg.KeyedProcessFunction):
    def __init__(self, probe: FileProbe, report_at: int) -> None:
        self.probe = probe
        self.report_at = report_at

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))
        self.seen = ctx.get_state(lg.ValueStateDescriptor("seen", default=0))

    def process_element(self, value: int, ctx: Any) -> Any:
        self.total.update(self.total.value() + value)
        self.seen.update(self.seen.value() + 1)
        if self.seen.value() == self.report_at:
            self.probe.add(ctx.current_key)
        yield {"k": ctx.current_key, "total": self.total.value()}


def job(
    tmp_path: Path, probe: FileProbe, *, checkpointing: bool = True, end: int = 1000
) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2)
    if checkpointing:
        env.enable_checkpointing(200)
        env.checkpoint_config.storage = str(tmp_path / "chk")
    (
        env.from_source(lg.connectors.SequenceSource(0, end, bounded=False), name="numbers")
        .uid("numbers")
        .key_by(lambda v: v % 4)
        .process(Summing(probe, end // 4), name="sums")
        .uid("sums")
        .sink_to(
            lg.connectors.FileSink(
                str(tmp_path / "out"), format="jsonl", exactly_once=checkpointing
            )
        )
        .uid("sink")
    )
    return env


def started(env: lg.StreamEnvironment, probe: FileProbe, executor: Any) -> lg.JobClient:
    client = env.execute_async("savepoints", executor=executor)
    try:
        wait_until(lambda: len(set(probe.items)) == 4, "every key saw its records", timeout_s=60)
    except BaseException:
        client.cancel()
        raise
    return client


def totals(location: str) -> dict[int, int]:
    frame = lg.savepoint.read(location, allow_pickle=True).state("sums", "total").to_pandas()
    return dict(zip(frame["key"], frame["value"]))


EXPECTED = {k: sum(v for v in range(1000) if v % 4 == k) for k in range(4)}


def test_trigger_savepoint_writes_a_self_contained_folder_and_the_job_goes_on_M_S1(
    executor: Any, tmp_path: Path
) -> None:
    probe = FileProbe(tmp_path / "probe")
    client = started(job(tmp_path, probe), probe, executor)
    try:
        first = client.trigger_savepoint(str(tmp_path / "sp1"), timeout=60)
        second = client.trigger_savepoint(str(tmp_path / "sp2"), timeout=60)
        assert client.running
        # the stats of a savepoint name the folder it was published to, not its
        # temporary chk-<id> folder (gone once published)
        savepoints = [c for c in client.checkpoints() if c.is_savepoint]
        assert [c.external_path for c in savepoints] == [first, second]
    finally:
        client.cancel()
    assert client.wait(60).status is lg.JobStatus.CANCELED
    for location in (first, second):
        assert (Path(location) / METADATA).is_file()
        assert totals(location) == EXPECTED
    # the job's storage keeps no copy (M-S1: the folder is self-contained) ...
    assert not any(
        p.name.startswith("chk-")
        and (p / METADATA).exists()
        and lg.savepoint.read(str(p), allow_pickle=True).is_savepoint
        for p in (tmp_path / "chk").iterdir()
    )
    # ... and a moved folder still restores
    moved = tmp_path / "elsewhere" / "sp"
    shutil.copytree(first, moved)
    shutil.rmtree(first)
    assert totals(str(moved)) == EXPECTED
    assert lg.savepoint.read(str(moved), allow_pickle=True).is_savepoint


def test_a_savepoint_folder_is_never_overwritten(tmp_path: Path) -> None:
    probe = FileProbe(tmp_path / "probe")
    client = started(job(tmp_path, probe), probe, lg.LocalExecutor())
    try:
        client.trigger_savepoint(str(tmp_path / "sp"), timeout=60)
        with pytest.raises(lg.ConfigurationError, match="already holds a savepoint"):
            client.trigger_savepoint(str(tmp_path / "sp"), timeout=60)
    finally:
        client.cancel()
        client.wait(60)


def test_savepoints_need_checkpointing_and_say_how_to_enable_it(tmp_path: Path) -> None:
    probe = FileProbe(tmp_path / "probe")
    client = started(job(tmp_path, probe, checkpointing=False), probe, lg.LocalExecutor())
    try:
        with pytest.raises(lg.ConfigurationError, match="enable_checkpointing"):
            client.trigger_savepoint(str(tmp_path / "sp"), timeout=30)
    finally:
        client.cancel()
        client.wait(60)


@pytest.mark.parametrize("bad", ["", "memory://sp", None, 3])
def test_a_bad_savepoint_folder_is_refused_before_anything_happens(
    bad: Any, tmp_path: Path
) -> None:
    env = job(tmp_path, FileProbe(tmp_path / "probe"))
    c = env.execute_async("bad folder", executor=lg.LocalExecutor())
    try:
        with pytest.raises(lg.ConfigurationError, match="savepoint"):
            c.trigger_savepoint(bad)
        with pytest.raises(lg.ConfigurationError):
            c.stop_with_savepoint(str(tmp_path / "ok"), drain="yes")  # type: ignore[arg-type]
    finally:
        c.cancel()
        c.wait(60)


def test_a_damaged_savepoint_is_never_restored(tmp_path: Path) -> None:
    probe = FileProbe(tmp_path / "probe")
    client = started(job(tmp_path, probe), probe, lg.LocalExecutor())
    location = client.stop_with_savepoint(str(tmp_path / "sp"), timeout=60)
    state_file = next(p for p in Path(location).iterdir() if p.name.startswith("op-sums-"))
    data = bytearray(state_file.read_bytes())
    data[-1] ^= 0xFF
    state_file.write_bytes(bytes(data))
    env = job(tmp_path / "again", FileProbe(tmp_path / "probe2"))
    with pytest.raises(lg.RestoreError, match="damaged"):
        env.execute("restore", executor=lg.LocalExecutor(), restore_from=location)


_OPENING = threading.Event()


class _SlowToOpen(lg.MapFunction):
    """An operator still initializing (as one restoring large state would be)."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        assert _OPENING.wait(60), "the test never let the operator open"

    def map(self, value: Any) -> Any:
        return value


def test_a_savepoint_asked_while_a_task_still_initializes_waits_for_it(tmp_path: Path) -> None:
    """The job is RUNNING once deployed, before every task finished opening; a savepoint
    asked then waits for the tasks (within its timeout) instead of failing with "a task
    was not running" (seen from the command line on Spark right after a start)."""
    _OPENING.clear()
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.enable_checkpointing(60_000)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    (
        env.from_source(
            lg.connectors.SequenceSource(0, 10**9, rows_per_second=1_000), name="numbers"
        )
        .uid("numbers")
        .map(_SlowToOpen(), name="slow to open")
        .uid("slow")
        .sink_to(lg.connectors.DiscardingSink())
        .uid("out")
    )
    client = env.execute_async("early savepoint")
    outcome: dict[str, Any] = {}

    def savepoint() -> None:
        try:
            outcome["location"] = client.trigger_savepoint(str(tmp_path / "sp"), timeout=60)
        except Exception as e:  # noqa: BLE001 - asserted below
            outcome["error"] = e

    asker = threading.Thread(target=savepoint)
    try:
        asker.start()
        wait_until(lambda: client.running, "the job is deployed", timeout_s=60)
        asker.join(0.5)  # bounded: still waiting for the task, not failed
        assert asker.is_alive(), f"the savepoint did not wait: {outcome}"
        _OPENING.set()
        asker.join(60)
        assert not asker.is_alive() and "location" in outcome, outcome
        assert (Path(outcome["location"]) / METADATA).is_file()
    finally:
        _OPENING.set()
        client.cancel()
        client.wait(60)

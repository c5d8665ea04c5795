"""Async I/O in jobs, on the local executor and on Spark (M-W7, M-T3, M-T4, M-R1).

Completion order is controlled, not timed: :class:`ReverseGroups` holds the requests of
each group of consecutive records until the whole group has started, then completes
them last first. So completions are always shuffled, the same way every run; an
ordered operator must undo it, an unordered one passes it on within watermarks.
Simulated service latency (``asyncio.sleep`` inside the user's function) is used only
where a job must have requests in flight at its checkpoints.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lockgate as lg
from conftest import FileProbe
from lockgate.api.async_stream import AsyncDataStream
from lockgate.api.functions import AsyncFunction
from lockgate.checkpoint.storage_url import open_storage
from lockgate.time.watermark_generators import PunctuatedWatermarks
from lockgate.time.watermark_strategy import WatermarkStrategy

WAITS = {"ordered": AsyncDataStream.ordered_wait, "unordered": AsyncDataStream.unordered_wait}


def index_of(record: Any) -> int:
    return record["i"] if isinstance(record, dict) else int(record)


class ReverseGroups(AsyncFunction):
    """Requests of records ``group * g .. group * g + group - 1`` (by index, the last
    group cut at ``n``) wait until all of them have started; then the last one to start
    completes first, the others in reverse order.
    A subtask must get whole groups. Reports, per subtask, the order requests completed
    in and the most requests it had in flight at once (in ``close``). Returns the record
    (as a dict) with the subtask."""

    def __init__(self, n: int, group: int, probe: FileProbe) -> None:
        self.n = n
        self.group = group
        self.probe = probe

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.subtask = ctx.subtask_index
        self.waiting: dict[int, list[asyncio.Future[None]]] = {}
        self.in_flight = 0
        self.most = 0
        self.completed: list[int] = []

    def _group_size(self, g: int) -> int:
        return min(self.group, self.n - g * self.group)

    async def async_invoke(self, record: Any) -> list[Any]:
        i = index_of(record)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        g = i // self.group
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        members = self.waiting.setdefault(g, [])
        members.append(future)
        if len(members) == self._group_size(g):
            del self.waiting[g]
            for f in reversed(members):
                f.set_result(None)
        await future
        self.in_flight -= 1
        self.completed.append(i)
        value = dict(record) if isinstance(record, dict) else {"i": i}
        return [{**value, "subtask": self.subtask}]

    def close(self) -> None:
        self.probe.add(("subtask", self.subtask, self.completed, self.most))


def reports(probe: FileProbe) -> dict[int, tuple[list[int], int]]:
    return {s: (completed, most) for _, s, completed, most in probe.items}


# ------------------------------------------------------------------------------ order


def test_ordered_output_keeps_input_order_though_completions_are_shuffled_M_W7(
    executor: Any, tmp_path: Path
) -> None:
    n, per = 400, 200  # each subtask reads 200 consecutive numbers: 25 whole groups
    probe = FileProbe(tmp_path / "probe")
    env = lg.StreamEnvironment(parallelism=2)
    numbers = env.from_collection(list(range(n)), name="numbers").uid("numbers")
    out = AsyncDataStream.ordered_wait(
        numbers, ReverseGroups(n, 8, probe), timeout=30_000, capacity=16, name="lookup"
    ).uid("lookup")
    records = out.execute_and_collect("ordered", executor=executor)
    for s in (0, 1):
        mine = [r["i"] for r in records if r["subtask"] == s]
        assert mine == list(range(s * per, (s + 1) * per)), f"subtask {s} kept input order"
    completed = reports(probe)
    assert sorted(completed) == [0, 1]
    for s, (order, _) in completed.items():
        assert sorted(order) == list(range(s * per, (s + 1) * per))
        first, last = s * per, s * per + 7  # the first group: its last request completes first
        assert order.index(last) < order.index(first), "completions were shuffled"


def punctuate_at_batch_max(timestamps: np.ndarray) -> int:
    return int(timestamps.max())


def punctuated() -> PunctuatedWatermarks:
    return PunctuatedWatermarks(punctuate_at_batch_max)


class StampWatermark(lg.KeyedProcessFunction):
    """Adds the operator's current watermark as it processes the record under ``field``."""

    def __init__(self, field: str) -> None:
        self.field = field

    def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
        assert ctx.timestamp == value["ts"], "results keep their record's timestamp"
        yield {**value, self.field: ctx.timer_service().current_watermark()}


def test_unordered_output_never_moves_a_record_across_a_watermark_M_W7(
    executor: Any, tmp_path: Path
) -> None:
    """Each record sees the same watermark downstream of the async operator as upstream
    of it: no record left before a watermark it followed or after one it preceded."""
    n = 300
    probe = FileProbe(tmp_path / "probe")
    env = lg.StreamEnvironment(parallelism=1)
    strategy = WatermarkStrategy.for_generator(punctuated).with_timestamp_assigner("ts")
    # a watermark (the batch's highest time) after every batch of 3 records
    source = lg.connectors.CollectionSource([{"i": i, "ts": i} for i in range(n)], batch_size=3)
    events = (
        env.from_source(source, name="events", watermark_strategy=strategy)
        .uid("events")
        .key_by(lambda r: 0)
        .process(StampWatermark("wm_in"), name="before")
        .uid("before")
    )
    looked_up = AsyncDataStream.unordered_wait(
        events, ReverseGroups(n, 4, probe), timeout=30_000, capacity=16
    ).uid("lookup")
    out = (
        looked_up.key_by(lambda r: 0)
        .process(StampWatermark("wm_out"), name="after")
        .uid("after")
        .execute_and_collect("unordered", executor=executor)
    )
    assert sorted(r["i"] for r in out) == list(range(n)), "every record once"
    moved = [r for r in out if r["wm_in"] != r["wm_out"]]
    assert not moved, f"records moved across a watermark: {moved[:5]}"
    segments = {r["wm_in"] for r in out}
    assert len(segments) == n // 3, "the records were between watermarks, 3 at a time"
    order = [r["i"] for r in out]
    assert order != sorted(order), "unordered results left in completion order"
    assert order[:3] == [2, 1, 0], "0..3 completed last first; 3 waited behind the watermark"


# ------------------------------------------------------------------------ backpressure


@pytest.mark.parametrize("mode", ["ordered", "unordered"])
def test_no_more_requests_than_the_capacity_are_in_flight_M_W7(
    executor: Any, tmp_path: Path, mode: str
) -> None:
    """A group of ``capacity`` requests completes only when all of it started: the most
    in flight is exactly the capacity; more would mean the queue did not hold input
    back."""
    n, capacity = 200, 5
    probe = FileProbe(tmp_path / "probe")
    env = lg.StreamEnvironment(parallelism=1)
    numbers = env.from_collection(list(range(n)), name="numbers").uid("numbers")
    out = WAITS[mode](
        numbers, ReverseGroups(n, capacity, probe), timeout=30_000, capacity=capacity
    ).uid("lookup")
    records = out.execute_and_collect("capacity", executor=executor)
    assert sorted(r["i"] for r in records) == list(range(n))
    [(completed, most)] = reports(probe).values()
    assert most == capacity
    assert len(completed) == n


# ------------------------------------------------------------------------------ timeouts


async def hang_on_7(record: int) -> list[int]:
    if record == 7:
        await asyncio.get_running_loop().create_future()  # a request that never answers
    return [record]


def test_a_request_past_its_timeout_fails_the_job_naming_the_record(executor: Any) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    numbers = env.from_collection(list(range(20)), name="numbers").uid("numbers")
    AsyncDataStream.ordered_wait(numbers, hang_on_7, timeout=50, name="lookup").uid(
        "lookup"
    ).sink_to(lg.connectors.DiscardingSink()).uid("sink")
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("timeout", executor=executor)
    assert err.value.operator == "lookup"
    assert "AsyncTimeoutError" in str(err.value)
    assert "record 7 did not complete within 50 ms" in str(err.value)


class FallbackOnTimeout(AsyncFunction):
    """Records ending in 3 never answer; the fallback answers for them."""

    async def async_invoke(self, record: int) -> list[Any]:
        if record % 10 == 3:
            await asyncio.get_running_loop().create_future()
        return [record]

    def timeout(self, record: int) -> list[Any]:
        return [f"fallback {record}"]


def test_a_timeout_fallback_supplies_the_results_in_their_place(executor: Any) -> None:
    env = lg.StreamEnvironment(parallelism=1)
    numbers = env.from_collection(list(range(60)), name="numbers").uid("numbers")
    out = AsyncDataStream.ordered_wait(numbers, FallbackOnTimeout(), timeout=50, capacity=60).uid(
        "lookup"
    )
    records = out.execute_and_collect("fallback", executor=executor)
    assert records == [f"fallback {i}" if i % 10 == 3 else i for i in range(60)]


# ------------------------------------------------------------------- exactly once (M-R1)


class Saw(lg.MapFunction):
    """Passes records on; after a restart, reports each record it took from the source."""

    def __init__(self, probe: FileProbe) -> None:
        self.probe = probe

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.attempt = ctx.attempt_number

    def map(self, value: int) -> int:
        if self.attempt:
            self.probe.add(("in", value))
        return value


class SlowSquare(AsyncFunction):
    """A service with 20-40 ms of latency, slower than the source: every request slot is
    taken at every checkpoint, so each checkpoint holds requests in flight. In the first
    attempt, the first request at or after record ``fail_from`` issued once a checkpoint
    of ``storage`` completed fails the job (so the restore has a checkpoint to start
    from, however slowly a loaded machine takes it). After a restart, reports each
    request."""

    def __init__(self, probe: FileProbe, storage: str, fail_from: int) -> None:
        self.probe = probe
        self.storage = storage
        self.fail_from = fail_from

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.attempt = ctx.attempt_number

    async def async_invoke(self, record: int) -> list[Any]:
        if self.attempt:
            self.probe.add(("request", record))
        elif record >= self.fail_from and open_storage(self.storage).read_latest():
            raise RuntimeError(f"injected failure at request {record}")
        await asyncio.sleep(0.02 + (record % 3) / 100)  # simulated I/O latency
        return [{"i": record, "sq": record * record}]


def read_parts(folder: Path) -> list[list[dict[str, Any]]]:
    """The records of each part file the exactly-once FileSink published."""
    return [
        [json.loads(line) for line in part.read_text().splitlines() if line]
        for part in sorted(folder.glob("part-*"))
    ]


@pytest.mark.hang_guard(180)
@pytest.mark.parametrize("mode", ["ordered", "unordered"])
def test_a_failure_with_requests_in_flight_loses_and_duplicates_nothing_M_R1_M_T4(
    executor: Any, tmp_path: Path, mode: str
) -> None:
    n = 2000
    probe = FileProbe(tmp_path / "probe")
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(timedelta(milliseconds=50))
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    # each subtask reads 1000 records a second and its service answers about 700
    numbers = (
        env.from_source(lg.connectors.SequenceSource(0, n, rows_per_second=2000), name="numbers")
        .uid("numbers")
        .map(Saw(probe), name="saw")
        .uid("saw")
    )
    squares = WAITS[mode](
        numbers,
        SlowSquare(probe, str(tmp_path / "chk"), fail_from=500),
        timeout=30_000,
        capacity=20,
        name="square",
    ).uid("square")
    squares.sink_to(lg.connectors.FileSink(str(tmp_path / "out"), format="jsonl")).uid("sink")
    result = env.execute(f"{mode} with a failure", executor=executor)
    assert result.attempts == 2, "the injected failure restarted the job once"
    parts = read_parts(tmp_path / "out")
    published = sorted((r for part in parts for r in part), key=lambda r: r["i"])
    assert published == [{"i": i, "sq": i * i} for i in range(n)], "each result exactly once"
    if mode == "ordered":
        for part in parts:
            assert [r["i"] for r in part] == sorted(r["i"] for r in part)
    # records requested after the restart that the source did not send again: the
    # checkpoint held them in flight and the restore issued them again
    items = probe.items
    reissued = {v for kind, v in items if kind == "request"} - {
        v for kind, v in items if kind == "in"
    }
    assert reissued, "the checkpoint the job restored had requests in flight"

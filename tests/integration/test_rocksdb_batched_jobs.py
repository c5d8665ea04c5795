"""RocksDB keyed state in batch scopes, end to end: a keyed process function whose keys
repeat many times in each input batch, with event-time timers reading the state and
a failure that restores the job from a checkpoint taken mid-stream, on both
executors. A lost buffered write shows as a missing or repeated count, a stale read
as a repeated count or a timer reading less than what came before it."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from lockgate.connectors import SequenceSource
from lockgate.testing import FailAtRecord, inject_faults
from lockgate.time.watermark_strategy import WatermarkStrategy

KEYS = 7
N = 6000


def record(i: int) -> dict[str, int]:
    return {"k": i % KEYS, "v": i, "ts": (i // 10) * 10 + (7 * i) % 10}


class CountsAndTimers(lg.KeyedProcessFunction):
    """Per record: count + 1 (value state), the value appended (list state), a per-mod
    tally (map state); a timer at the record's time that reads them all."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))
        self.values = ctx.get_list_state(lg.ListStateDescriptor("values"))
        self.by_mod = ctx.get_map_state(lg.MapStateDescriptor("by_mod"))

    def process_element(self, r: dict[str, int], ctx: Any) -> Any:
        c = self.count.value() + 1
        self.count.update(c)
        self.values.add(r["v"])
        self.by_mod[r["v"] % 3] = self.by_mod.get(r["v"] % 3, 0) + 1
        ctx.timer_service().register_event_time_timer(r["ts"])
        yield {"k": ctx.current_key, "count": c}

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield {
            "k": ctx.current_key,
            "timer": timestamp,
            "count": self.count.value(),
            "n_values": len(self.values.get()),
            "tally": sum(self.by_mod.values()),
        }


def read_sink(folder: Path) -> list[dict[str, Any]]:
    out = []
    for part in sorted(folder.glob("part-*")):
        out.extend(json.loads(line) for line in part.read_text().splitlines() if line)
    return out


@pytest.mark.hang_guard(300)
@pytest.mark.parametrize(
    ("cache_entries", "local_recovery"),
    [(None, False), (4, False), (None, True)],
    ids=["default-cache", "tiny-cache", "local-recovery"],
)
def test_rocksdb_batched_state_survives_a_failure_with_timers_reading_it(
    executor: Any, tmp_path: Path, cache_entries: int | None, local_recovery: bool
) -> None:
    """With the default write-back cache (which holds every key here), with one of 4
    entries (21 (state, key) entries: evictions and write-backs all the time, between
    and inside batches and timers), and with task-local recovery (M-R4): the restarted
    subtasks take their SST files from their local copies, none from the storage."""
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    local = tmp_path / "local"
    if local_recovery:
        env.set_state_backend(
            lg.RocksDBStateBackend(incremental=True, local_dir=str(local), local_recovery=True)
        )
    else:
        env.set_state_backend(
            lg.RocksDBStateBackend(incremental=True)
            if cache_entries is None
            else lg.RocksDBStateBackend(incremental=True, cache_entries=cache_entries)
        )
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    inject_faults(env, FailAtRecord("counts", record=2500, subtask=0, after_checkpoints=2))
    strategy = (
        WatermarkStrategy.for_bounded_out_of_orderness(20)
        .with_timestamp_assigner("ts")
        .with_periodic_emit_interval(10)
    )
    folder = tmp_path / "out"
    (
        # paced by checkpoints: the failure finds two completed ones to restore from
        env.from_source(
            CheckpointPacedSource(SequenceSource(0, N, batch_size=100), 600, end_after=3)
        )
        .uid("numbers")
        .map(record, name="records")
        .uid("records")
        .assign_timestamps_and_watermarks(strategy)
        .uid("timestamps")
        .key_by("k")
        .process(CountsAndTimers(), name="counts")
        .uid("counts")
        .sink_to(lg.connectors.FileSink(str(folder), format="jsonl"))
        .uid("sink")
    )
    result = env.execute("rocksdb batched", executor=executor)
    assert result.attempts == 2, "the injected failure restarted the job once"
    if local_recovery:
        restores = [json.loads(p.read_text()) for p in local.rglob("last-restore.json")]
        assert len(restores) == 2, "both subtasks of 'counts' restored"
        assert all(r["local"] > 0 and r["storage"] == 0 for r in restores), restores

    out = read_sink(folder)
    counts: dict[int, list[dict[str, Any]]] = defaultdict(list)
    timers: list[dict[str, Any]] = []
    for o in out:
        (timers if "timer" in o else counts[o["k"]]).append(o)
    ts_by_key: dict[int, list[int]] = defaultdict(list)
    for i in range(N):
        r = record(i)
        ts_by_key[r["k"]].append(r["ts"])
    for k, ts in ts_by_key.items():
        seen = sorted(o["count"] for o in counts[k])
        assert seen == list(range(1, len(ts) + 1)), f"key {k}: every count exactly once"
    fired: dict[int, list[int]] = defaultdict(list)
    for t in timers:
        k, at = t["k"], t["timer"]
        fired[k].append(at)
        assert t["count"] == t["n_values"] == t["tally"], t
        due = sum(1 for x in ts_by_key[k] if x <= at)
        assert due <= t["count"] <= len(ts_by_key[k]), (
            f"key {k}: the timer at {at} read count {t['count']}, but {due} records at or "
            "before it had been processed (a stale read)"
        )
    assert {k: sorted(v) for k, v in fired.items()} == {
        k: sorted(set(ts)) for k, ts in ts_by_key.items()
    }, "every timer fired exactly once"

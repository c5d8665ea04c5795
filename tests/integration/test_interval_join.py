"""The interval join end to end, on both executors: the vectorized join and a
ProcessJoinFunction against a pandas merge + time filter, exactly-once through three
injected failures (aligned and unaligned checkpoints), and rescaling 2 -> 3 through a
savepoint (M-W5, M-T4, M-R1).

Data: each side is a SequenceSource mapped to ``{k, ts, v}`` with up to 499 ms of
disorder (bounded out-of-orderness watermarks of 500 ms, never late). Every 97th
record is made 5 s older than its neighbours: behind its own source's watermark, so
late whenever the other input's watermark has passed it too. Which of them the join
sees as late depends on how the two inputs interleave, so each has a key no record of
the other side has: whether it is dropped or buffered, it joins nothing, and the
output is deterministic. The oracle drops them (late) and merges the rest; that the
join drops and counts late records exactly is tested on the operator
(tests/unit/runtime/test_interval_join_operator.py), where arrival order is fixed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import lockgate as lg
from conftest import is_spark, wait_until
from lockgate.testing import FailAtRecord, inject_faults

KEYS = 10_000
DISORDER_MS = 500
LOWER, UPPER = -300, 200
LATE_EVERY = 97


def columns(i: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Record ``i`` of ``side``: key, event time (``i // 10`` ms minus up to 499 ms of
    disorder), value; every 97th record 5 s older, with a key of its own."""
    mult = (7919, 104729)[side]
    k = (i * mult + side) % KEYS
    ts = i // 10 - (i * (104729, 7919)[side]) % DISORDER_MS + DISORDER_MS
    late = i % LATE_EVERY == 5
    k = np.where(late, (side + 1) * 10 * KEYS + i, k)
    ts = np.where(late, ts - 5000, ts)
    v = i * 2 + side
    return k, ts, v


def events(side: int) -> Any:
    def make(batch: pa.RecordBatch) -> pa.RecordBatch:
        k, ts, v = columns(batch.column(0).to_numpy(), side)
        return pa.RecordBatch.from_arrays(
            [pa.array(k), pa.array(ts), pa.array(v)], names=["k", "ts", "v"]
        )

    return make


def stream(env: lg.StreamEnvironment, source: Any, side: int, name: str) -> lg.DataStream:
    ws = lg.WatermarkStrategy.for_bounded_out_of_orderness(DISORDER_MS)
    return (
        env.from_source(source, name=name)
        .uid(name)
        .map_batches(events(side), name=f"{name}-events")
        .uid(f"{name}-events")
        .assign_timestamps_and_watermarks(ws.with_timestamp_assigner("ts"))
        .uid(f"{name}-ts")
    )


def join(left: lg.DataStream, right: lg.DataStream, fn: Any = None) -> lg.DataStream:
    return (
        left.key_by("k")
        .interval_join(right.key_by("k"))
        .between(LOWER, UPPER)
        .process(fn, name="interval-join")
        .uid("interval-join")
    )


class Pair(lg.ProcessJoinFunction):
    def process_element(self, left: Any, right: Any, ctx: Any) -> Any:
        yield {
            "k": left["k"],
            "ts_left": left["ts"],
            "v_left": left["v"],
            "ts_right": right["ts"],
            "v_right": right["v"],
        }


def frame(lo: int, hi: int, side: int) -> pd.DataFrame:
    k, ts, v = columns(np.arange(lo, hi, dtype=np.int64), side)
    return pd.DataFrame({"k": k, "ts": ts, "v": v})


def oracle(n: int) -> pd.DataFrame:
    """pandas: the records that are not late, merged on the key, then the time filter."""
    left, right = frame(0, n, 0), frame(0, n, 1)
    on_time = np.arange(n) % LATE_EVERY != 5
    m = left[on_time].merge(right[on_time], on="k", suffixes=("_left", "_right"))
    m = m[(m.ts_right >= m.ts_left + LOWER) & (m.ts_right <= m.ts_left + UPPER)]
    return ordered(m)


def ordered(df: pd.DataFrame) -> pd.DataFrame:
    cols = ["k", "ts_left", "v_left", "ts_right", "v_right"]
    return df[cols].sort_values(cols).reset_index(drop=True)


def read_sink(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for p in sorted(folder.glob("part-*"))
        for line in p.read_text().splitlines()
        if line
    ]


def assert_equal(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert len(got) == len(expected), f"{len(got)} pairs, expected {len(expected)}"
    pd.testing.assert_frame_equal(ordered(got), expected, check_dtype=False)


# -- against pandas ---------------------------------------------------------------------------
@pytest.mark.hang_guard(240)
@pytest.mark.parametrize("vectorized", [True, False], ids=["vectorized", "function"])
def test_the_interval_join_of_200k_records_per_side_equals_pandas_M_W5(
    executor: Any, vectorized: bool
) -> None:
    """200,000 records per side on both paths and both executors, parallelism 2."""
    n = 200_000
    env = lg.StreamEnvironment(parallelism=2)
    left = stream(env, lg.connectors.SequenceSource(0, n), 0, "left")
    right = stream(env, lg.connectors.SequenceSource(0, n), 1, "right")
    out = join(left, right, None if vectorized else Pair())
    got = pd.DataFrame(out.execute_and_collect("interval join", executor=executor))
    expected = oracle(n)
    assert len(expected) > n // 4, "the data makes many pairs"
    assert_equal(got, expected)


# -- exactly once through failures (M-R1, M-T4) ----------------------------------------------
@pytest.mark.hang_guard(300)
@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned-heap", "unaligned-rocksdb"])
def test_exactly_the_oracles_pairs_after_three_injected_failures_M_R1(
    executor: Any, tmp_path: Path, unaligned: bool
) -> None:
    """The join fails three times (after checkpoints holding buffered records
    completed); the FileSink's published pairs equal pandas. Aligned checkpoints on
    the heap backend, unaligned on RocksDB (the join keeps its own columnar state on
    either)."""
    n = 100_000
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.checkpoint_config.unaligned = unaligned
    if unaligned:
        env.set_state_backend(lg.RocksDBStateBackend(incremental=True))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=5, delay=0))
    sources = [
        lg.connectors.SequenceSource(0, n, rows_per_second=50_000, batch_size=1000)
        for _ in range(2)
    ]
    folder = tmp_path / "out"
    join(stream(env, sources[0], 0, "left"), stream(env, sources[1], 1, "right")).sink_to(
        lg.connectors.FileSink(str(folder), format="jsonl")
    ).uid("sink")
    inject_faults(
        env,
        # early enough in each attempt that the next one still has that many to read;
        # the first waits for a checkpoint, however slowly a loaded machine completes
        # one, so that every later attempt has one to restore
        FailAtRecord("interval-join", record=30_000, subtask=0, after_checkpoints=1),
        FailAtRecord("interval-join", record=15_000, attempt=1, subtask=1),
        FailAtRecord("interval-join", record=10_000, attempt=2, subtask=0),
    )
    result = env.execute("interval join with failures", executor=executor)
    assert result.attempts == 4, "each injected failure restarted the job"
    assert result.records_in_last_attempt("interval-join") < 2 * n, (
        "the last attempt restored a checkpoint"
    )
    assert_equal(pd.DataFrame(read_sink(folder)), oracle(n))


# -- rescaling through a savepoint (M-T4) ------------------------------------------------------
def rescale_job(env: lg.StreamEnvironment, folder: Path, stage: int, n1: int, n: int) -> None:
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(folder.parent / f"chk-{stage}")
    sides = []
    for side, name in ((0, "left"), (1, "right")):
        first = stream(
            env,
            lg.connectors.SequenceSource(0, n1, bounded=stage == 2, batch_size=5000),
            side,
            name,
        )
        if stage == 2:
            more = stream(env, lg.connectors.SequenceSource(n1, n), side, f"{name}-more")
            first = first.union(more)
        sides.append(first)
    join(sides[0], sides[1]).sink_to(lg.connectors.FileSink(str(folder), format="jsonl")).uid(
        "sink"
    )


@pytest.mark.hang_guard(300)
def test_join_state_moves_by_key_group_when_restored_at_another_parallelism_M_T4(
    executor: Any, tmp_path: Path
) -> None:
    """Stage one (parallelism 2) stops with a savepoint holding buffered records of
    both sides; stage two (3 locally, 1 on Spark's two slots) restores it and reads
    the rest: both stages' pairs together equal pandas over all records, each once."""
    n1, n = 60_000, 120_000
    env = lg.StreamEnvironment(parallelism=2)
    rescale_job(env, tmp_path / "out-1", 1, n1, n)
    client = env.execute_async("interval join stage one", executor=executor)
    # the join's watermark: the smaller of the two sides' last (each the minimum over
    # its two source subtasks; on-time records only raise it)
    final = (
        min(
            int(columns(np.arange(lo, hi), side)[1].max())
            for side in (0, 1)
            for lo, hi in ((0, n1 // 2), (n1 // 2, n1))
        )
        - DISORDER_MS
        - 1
    )
    try:
        wait_until(
            lambda: (
                sorted(w.watermark or 0 for w in client.watermarks() if w.uid == "interval-join")
                == [final, final]
            ),
            "stage one's records went through the join",
            timeout_s=120,
        )
        location = client.stop_with_savepoint(str(tmp_path / "sp"), timeout=60)
    except BaseException:
        client.cancel()
        raise
    assert client.wait(60).status is lg.JobStatus.FINISHED
    env2 = lg.StreamEnvironment(parallelism=1 if is_spark(executor) else 3)
    rescale_job(env2, tmp_path / "out-2", 2, n1, n)
    env2.execute("interval join stage two", executor=executor, restore_from=location)
    first, second = read_sink(tmp_path / "out-1"), read_sink(tmp_path / "out-2")
    assert first and second, "both stages produced pairs"
    assert_equal(pd.DataFrame(first + second), oracle(n))


# -- late data to side outputs --------------------------------------------------------------
@pytest.mark.hang_guard(180)
def test_late_records_of_each_input_go_to_its_side_output(executor: Any) -> None:
    """With side_output_late_data(left_tag, right_tag), the late records a run saw
    (how many depends on how the inputs interleave) reach the side output of their
    input, as they arrived; only the 5 s old records can be late; the pairs still
    equal pandas."""
    n = 20_000
    env = lg.StreamEnvironment(parallelism=2)
    left = stream(env, lg.connectors.SequenceSource(0, n), 0, "left")
    right = stream(env, lg.connectors.SequenceSource(0, n), 1, "right")
    tags = lg.OutputTag("late-left"), lg.OutputTag("late-right")
    out = (
        left.key_by("k")
        .interval_join(right.key_by("k"))
        .between(LOWER, UPPER)
        .side_output_late_data(*tags)
        .process(name="interval-join")
    )
    sinks = [lg.connectors.CollectSink() for _ in range(3)]
    out.sink_to(sinks[0], name="pairs").uid("pairs").set_parallelism(1)
    for tag, sink, name in zip(tags, sinks[1:], ("late-l", "late-r")):
        out.get_side_output(tag).sink_to(sink, name=name).uid(name).set_parallelism(1)
    result = env.execute("interval join late data", executor=executor)
    got = [r for part in result.sink_results["pairs"] for r in part]
    assert_equal(pd.DataFrame(got), oracle(n))
    for side, name in ((0, "late-l"), (1, "late-r")):
        late = [r for part in result.sink_results.get(name, []) for r in part]
        old = frame(0, n, side)[np.arange(n) % LATE_EVERY == 5]
        allowed = set(zip(old.k.tolist(), old.ts.tolist()))
        assert {(r["k"], r["ts"]) for r in late} <= allowed
        assert result.operators["interval-join"].side_out.get(tags[side].name, 0) == len(late)

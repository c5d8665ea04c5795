"""Connected streams end to end on both executors (issue 23 part 1): co-map, co-flat-map
and co-process on two inputs; a keyed "enrich" job (orders joined with their payments by
a KeyedCoProcessFunction, unmatched sides cleaned up by event-time timers) against a
pandas merge, exactly once through three injected failures with aligned and unaligned
checkpoints; rescaling 2 -> 3 through a savepoint; the connected operator's watermark
follows the slower input and ignores an idle one (M-W4, M-W5, M-W6, M-T4, M-R1, M-S2).

Sizes: the enrich job runs 200,000 orders and 200,000 payments (about 180,000 each
after the gaps) on the local executor, rate-limited to 50,000 per second each, and
40,000 each on Spark's two local slots, at 10,000 per second: checkpoints complete
before each injected failure. Without failures the job runs 200,000 each, unpaced, on
both executors. Rescaling runs 60,000 each.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from conftest import FileProbe, is_spark, wait_until
from lockgate.testing import FailAtRecord, inject_faults

DISORDER_MS = 300
#: how long one side waits for the other, in event time, before its state is cleaned up
WAIT_MS = 2_000
OP = "enrich"
UNMATCHED = lg.OutputTag("unmatched")
BLOCK = 1_000


# -- data ---------------------------------------------------------------------------------------
def jitter(i: np.ndarray) -> np.ndarray:
    """Up to DISORDER_MS - 1 ms of disorder (never late for DISORDER_MS of
    out-of-orderness)."""
    return DISORDER_MS - 1 - (i * 104729) % DISORDER_MS


def order_columns(i: np.ndarray) -> dict[str, np.ndarray]:
    """Order ``i`` (id ``i``; every 11th id has no order), event time ``i // 20`` ms
    plus disorder."""
    keep = i % 11 != 0
    i = i[keep]
    return {"id": i, "customer": (i * 31) % 1000, "ts": i // 20 + jitter(i)}


def payment_columns(p: np.ndarray) -> dict[str, np.ndarray]:
    """Payment ``p`` pays order ``σ(p)`` (a shuffle within blocks of 1,000 ids; every
    13th payment is missing), at about 100 ms after the order, plus disorder."""
    keep = p % 13 != 0
    p = p[keep]
    order = p - p % BLOCK + (p % BLOCK * 7) % BLOCK
    return {"order": order, "amount": (p * 17) % 997, "ts": p // 20 + 100 + jitter(p + 1)}


def to_batch(columns: dict[str, np.ndarray]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=pa.int64()) for c in columns.values()], names=list(columns)
    )


def orders(batch: pa.RecordBatch) -> pa.RecordBatch:
    return to_batch(order_columns(batch.column(0).to_numpy()))


def payments(batch: pa.RecordBatch) -> pa.RecordBatch:
    return to_batch(payment_columns(batch.column(0).to_numpy()))


def frames(n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    i = np.arange(n, dtype=np.int64)
    return pd.DataFrame(order_columns(i)), pd.DataFrame(payment_columns(i))


def expected_pairs(n: int) -> pd.DataFrame:
    o, p = frames(n)
    m = o.merge(p, left_on="id", right_on="order", suffixes=("_order", "_payment"))
    return sort(m[["id", "customer", "amount"]])


def expected_unmatched(n: int) -> pd.DataFrame:
    o, p = frames(n)
    left = o[~o.id.isin(p.order)]
    right = p[~p.order.isin(o.id)]
    return sort(
        pd.concat(
            [
                pd.DataFrame({"side": "order", "id": left.id}),
                pd.DataFrame({"side": "payment", "id": right.order}),
            ]
        )
    )


def sort(df: pd.DataFrame) -> pd.DataFrame:
    cols = sorted(df.columns)
    return df[cols].sort_values(cols).reset_index(drop=True)


def bounded() -> lg.WatermarkStrategy:
    return lg.WatermarkStrategy.for_bounded_out_of_orderness(DISORDER_MS).with_timestamp_assigner(
        "ts"
    )


# -- the function ---------------------------------------------------------------------------------
class Enrich(lg.KeyedCoProcessFunction):
    """Input 1 orders (keyed by ``id``), input 2 payments (keyed by ``order``): the first
    side of a key waits in state; the other side emits the pair and clears it. A side
    still waiting WAIT_MS of event time later is emitted to the ``unmatched`` side output
    and cleared by its timer."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.order = ctx.get_state(lg.ValueStateDescriptor("order"))
        self.payment = ctx.get_state(lg.ValueStateDescriptor("payment"))

    def process_element1(self, value: dict[str, Any], ctx: Any) -> Any:
        payment = self.payment.value()
        if payment is None:
            self.order.update(value["customer"])
            ctx.timer_service().register_event_time_timer(ctx.timestamp + WAIT_MS)
            return None
        self.payment.clear()
        return [{"id": ctx.current_key, "customer": value["customer"], "amount": payment}]

    def process_element2(self, value: dict[str, Any], ctx: Any) -> Any:
        customer = self.order.value()
        if customer is None:
            self.payment.update(value["amount"])
            ctx.timer_service().register_event_time_timer(ctx.timestamp + WAIT_MS)
            return None
        self.order.clear()
        return [{"id": ctx.current_key, "customer": customer, "amount": value["amount"]}]

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        if self.order.value() is not None:
            ctx.output(UNMATCHED, {"side": "order", "id": ctx.current_key})
            self.order.clear()
        if self.payment.value() is not None:
            ctx.output(UNMATCHED, {"side": "payment", "id": ctx.current_key})
            self.payment.clear()
        return None


def source(
    env: lg.StreamEnvironment,
    name: str,
    make: Any,
    lo: int,
    hi: int,
    paced: int | None = None,
    **options: Any,
) -> lg.DataStream:
    """Numbers ``lo..hi`` made into records by ``make``; ``paced``: at most that many per
    completed checkpoint (CheckpointPacedSource), for fault tests."""
    numbers: lg.connectors.Source = lg.connectors.SequenceSource(lo, hi, **options)
    if paced is not None:
        numbers = CheckpointPacedSource(numbers, paced, end_after=2)
    return (
        env.from_source(numbers, name=name)
        .uid(name)
        .map_batches(make, name=f"{name}-rows")
        .uid(f"{name}-rows")
        .assign_timestamps_and_watermarks(bounded())
        .uid(f"{name}-ts")
    )


def enrich(o: lg.DataStream, p: lg.DataStream, folder: Path) -> None:
    """orders.key_by(id).connect(payments.key_by(order)).process(Enrich) -> a FileSink;
    the unmatched side output -> another FileSink."""
    out = o.key_by("id").connect(p.key_by("order")).process(Enrich(), name=OP).uid(OP)
    out.sink_to(lg.connectors.FileSink(str(folder / "pairs"), format="jsonl")).uid("pairs")
    out.get_side_output(UNMATCHED).sink_to(
        lg.connectors.FileSink(str(folder / "unmatched"), format="jsonl")
    ).uid("unmatched")


def read_sink(folder: Path) -> pd.DataFrame:
    """The records an exactly-once FileSink published (``part-*`` files)."""
    return pd.DataFrame(
        [
            json.loads(line)
            for p in sorted(folder.glob("part-*"))
            for line in p.read_text().splitlines()
            if line
        ]
    )


def assert_frames_equal(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert len(got) == len(expected), f"{len(got)} records, expected {len(expected)}"
    pd.testing.assert_frame_equal(sort(got), expected, check_dtype=False)


# -- co-map, co-flat-map, co-process --------------------------------------------------------------
class Label(lg.CoMapFunction):
    def map1(self, value: int) -> Any:
        return ("number", value * 2)

    def map2(self, value: str) -> Any:
        return ("word", value.upper())


class Split(lg.CoFlatMapFunction):
    def flat_map1(self, value: int) -> Any:
        yield from range(value % 3)

    def flat_map2(self, value: str) -> Any:
        return list(value)


class Route(lg.CoProcessFunction):
    def process_element1(self, value: int, ctx: Any) -> Any:
        if value % 5 == 0:
            ctx.output(UNMATCHED, value)
            return None
        return [("1", value)]

    def process_element2(self, value: str, ctx: Any) -> Any:
        yield ("2", value)


@pytest.mark.hang_guard(180)
def test_co_map_co_flat_map_and_co_process_give_the_expected_records(executor: Any) -> None:
    """One job, three operators on the same connected streams (the inputs fan out)."""
    numbers, words = list(range(50)), [f"w{i}" for i in range(30)]
    env = lg.StreamEnvironment(parallelism=2)
    connected = env.from_collection(numbers).connect(env.from_collection(words))
    connected.map(Label()).sink_to(lg.connectors.CollectSink()).uid("map")
    connected.flat_map(Split()).sink_to(lg.connectors.CollectSink()).uid("flat")
    routed = connected.process(Route())
    routed.get_side_output(UNMATCHED).sink_to(lg.connectors.CollectSink()).uid("side")
    routed.sink_to(lg.connectors.CollectSink()).uid("main")
    result = env.execute("co-map, co-flat-map, co-process", executor=executor)
    got = {
        uid: sorted((x for part in parts for x in part), key=repr)
        for uid, parts in result.sink_results.items()
    }
    assert got["map"] == sorted(
        [("number", v * 2) for v in numbers] + [("word", w.upper()) for w in words], key=repr
    )
    assert got["flat"] == sorted(
        [x for v in numbers for x in range(v % 3)] + [c for w in words for c in w], key=repr
    )
    assert got["main"] == sorted(
        [("1", v) for v in numbers if v % 5] + [("2", w) for w in words], key=repr
    )
    assert got["side"] == sorted((v for v in numbers if v % 5 == 0), key=repr)


# -- the enrich job: exactly once through failures ------------------------------------------------
@pytest.mark.hang_guard(300)
@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_the_keyed_enrich_job_equals_a_pandas_merge_after_three_failures_M_T4_M_R1(
    executor: Any, unaligned: bool, tmp_path: Path
) -> None:
    """The enrich operator fails three times (subtask 0, 1, 0 in attempts 0, 1, 2), each
    after checkpoints with pending orders, payments and timers completed: the published
    pairs equal pandas' inner merge and the unmatched side output its anti-joins, each
    row once, and the last attempt restored a checkpoint."""
    n = 40_000 if is_spark(executor) else 200_000
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(timedelta(milliseconds=50))
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.checkpoint_config.unaligned = unaligned
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    # paced by completed checkpoints (a twentieth of each input per checkpoint), not the
    # clock: every fault waits for a checkpoint of its attempt, so the next attempt
    # restores progress, and still finds most of the input ahead, however slowly a
    # loaded machine completes checkpoints (a CI run under load once failed all three
    # faults before any checkpoint)
    o = source(env, "orders", orders, 0, n, paced=n // 20, batch_size=2_000)
    p = source(env, "payments", payments, 0, n, paced=n // 20, batch_size=2_000)
    enrich(o, p, tmp_path)
    per_subtask = n * 12 // 13 // 2  # about, of both inputs, per subtask and attempt
    inject_faults(
        env,
        # an attempt's first checkpoint precedes its records (the paced sources wait for
        # it), and on a loaded machine its second can be triggered the instant the first
        # completes (min pause 0), before the sources emit: only the third surely holds
        # progress, and attempts 1 and 2 may add none, so attempt 0 must leave some for
        # the last attempt to restore
        FailAtRecord(OP, record=per_subtask * 25 // 100, subtask=0, after_checkpoints=3),
        FailAtRecord(OP, record=per_subtask * 15 // 100, attempt=1, subtask=1, after_checkpoints=1),
        FailAtRecord(OP, record=per_subtask * 10 // 100, attempt=2, subtask=0, after_checkpoints=1),
    )
    result = env.execute("enrich with failures", executor=executor)
    assert result.attempts == 4, "each injected failure restarted the job"
    ins = len(frames(n)[0]) + len(frames(n)[1])
    assert result.records_in_last_attempt(OP) < ins, "the last attempt restored a checkpoint"
    assert_frames_equal(read_sink(tmp_path / "pairs"), expected_pairs(n))
    assert_frames_equal(read_sink(tmp_path / "unmatched"), expected_unmatched(n))


# -- the enrich job at full size on both executors ------------------------------------------------
@pytest.mark.hang_guard(300)
def test_the_keyed_enrich_job_of_200k_per_side_equals_a_pandas_merge_M_W5_M_W6(
    executor: Any, tmp_path: Path
) -> None:
    """200,000 orders and 200,000 payments (disordered, with gaps), unpaced, on either
    executor: the published pairs equal pandas' inner merge and the unmatched side
    output its anti-joins, each row once."""
    n = 200_000
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(timedelta(milliseconds=200))
    env.checkpoint_config.storage = str(tmp_path / "chk")
    o = source(env, "orders", orders, 0, n, batch_size=5_000)
    p = source(env, "payments", payments, 0, n, batch_size=5_000)
    enrich(o, p, tmp_path)
    env.execute("enrich 200k", executor=executor)
    assert_frames_equal(read_sink(tmp_path / "pairs"), expected_pairs(n))
    assert_frames_equal(read_sink(tmp_path / "unmatched"), expected_unmatched(n))


# -- rescaling through a savepoint ----------------------------------------------------------------
def rescale_job(
    env: lg.StreamEnvironment, folder: Path, stage: int, n1: int, m1: int, n: int
) -> None:
    """Stage 1 reads orders [0, n1) and payments [0, m1) and keeps running (orders of
    [m1, n1) wait for their payments in state); stage 2 restores those sources (at
    their end) and reads orders [n1, n) and payments [m1, n) from new ones."""
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(folder / "chk")
    opts = {"bounded": stage == 2, "batch_size": 5_000}
    o = source(env, "orders", orders, 0, n1, **opts)
    p = source(env, "payments", payments, 0, m1, **opts)
    if stage == 2:
        o = o.union(source(env, "more-orders", orders, n1, n))
        p = p.union(source(env, "more-payments", payments, m1, n))
    enrich(o, p, folder)


def last_watermark(make: Any, lo: int, hi: int) -> int:
    """The last watermark a parallelism-2 source of ids [lo, hi) sends while it runs:
    per split its highest event time - DISORDER_MS - 1, the lower of the two."""
    mid = lo + (hi - lo) // 2
    return min(
        int(make(np.arange(a, b, dtype=np.int64))["ts"].max()) - DISORDER_MS - 1
        for a, b in ((lo, mid), (mid, hi))
    )


@pytest.mark.hang_guard(300)
def test_keyed_co_process_state_moves_by_key_group_from_2_to_3_subtasks_M_S2(
    executor: Any, tmp_path: Path
) -> None:
    """Stage one (parallelism 2) stops with a savepoint holding waiting orders, payments
    and their timers; stage two (3 locally, 1 on Spark's two slots) restores it and reads
    the rest: the pairs and unmatched rows of both stages together equal pandas, each
    once."""
    n1, m1, n = 30_000, 20_000, 60_000
    env = lg.StreamEnvironment(parallelism=2)
    rescale_job(env, tmp_path / "stage-1", 1, n1, m1, n)
    client = env.execute_async("enrich stage one", executor=executor)
    final = min(last_watermark(order_columns, 0, n1), last_watermark(payment_columns, 0, m1))
    try:
        wait_until(
            lambda: (
                sorted(w.watermark or 0 for w in client.watermarks() if w.uid == OP)
                == [final, final]
            ),
            "stage one's records went through the enrich operator",
            timeout_s=120,
        )
        location = client.stop_with_savepoint(str(tmp_path / "sp"), timeout=60)
    except BaseException:
        client.cancel()
        raise
    assert client.wait(60).status is lg.JobStatus.FINISHED
    stage_one = read_sink(tmp_path / "stage-1" / "pairs")
    assert 0 < len(stage_one) < len(expected_pairs(n)), "stage one left orders waiting"
    env2 = lg.StreamEnvironment(parallelism=1 if is_spark(executor) else 3)
    rescale_job(env2, tmp_path / "stage-2", 2, n1, m1, n)
    env2.execute("enrich stage two", executor=executor, restore_from=location)
    both = [tmp_path / "stage-1", tmp_path / "stage-2"]
    pairs = pd.concat([read_sink(f / "pairs") for f in both])
    unmatched = pd.concat([read_sink(f / "unmatched") for f in both])
    assert_frames_equal(pairs, expected_pairs(n))
    assert_frames_equal(unmatched, expected_unmatched(n))


# -- event time: the slower input, an idle input (M-W4, M-W5, M-W6) -------------------------------
class Timers(lg.KeyedCoProcessFunction):
    """Registers an event-time timer at each record's time; reports the fired ones."""

    def __init__(self, probe: FileProbe) -> None:
        self.probe = probe

    def process_element1(self, value: dict[str, Any], ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(ctx.timestamp)
        return None

    def process_element2(self, value: dict[str, Any], ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(ctx.timestamp)
        return None

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        self.probe.add((ctx.current_key, timestamp))
        return None


def stepped(step: int) -> Any:
    def make(batch: pa.RecordBatch) -> pa.RecordBatch:
        i = batch.column(0).to_numpy()
        return pa.RecordBatch.from_arrays([pa.array(i % 3), pa.array(i * step)], ["k", "ts"])

    return make


def timed_source(
    env: lg.StreamEnvironment, name: str, n: int, step: int, idleness: bool = False
) -> lg.DataStream:
    """Records ``i`` < n at event time ``i * step``, one subtask, still running after."""
    strategy = (
        lg.WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner("ts")
        .with_periodic_emit_interval(10)
    )
    if idleness:
        strategy = strategy.with_idleness(100)
    return (
        env.from_source(lg.connectors.SequenceSource(0, n, bounded=False), name=name)
        .uid(name)
        .set_parallelism(1)
        .map_batches(stepped(step), name=f"{name}-rows")
        .uid(f"{name}-rows")
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(strategy)
        .uid(f"{name}-ts")
        .set_parallelism(1)
    )


def run_timers(
    executor: Any, probe: FileProbe, a: Any, b: Any, expected_watermark: int, held_by: str | None
) -> None:
    env = lg.StreamEnvironment(parallelism=2)
    fast, slow = a(env), b(env)
    (
        fast.key_by("k")
        .connect(slow.key_by("k"))
        .process(Timers(probe), name="timers")
        .uid("timers")
        .sink_to(lg.connectors.DiscardingSink())
        .uid("sink")
    )
    client = env.execute_async("connected event time", executor=executor)
    try:
        wait_until(
            lambda: (
                [w.watermark for w in client.watermarks() if w.uid == "timers"]
                == [expected_watermark] * 2
            ),
            f"the connected operator's watermark reaches {expected_watermark}",
            timeout_s=60,
        )
        if held_by is not None:
            holders = [w.held_back_by or "" for w in client.watermarks() if w.uid == "timers"]
            assert all(h.startswith(held_by) for h in holders), holders
    finally:
        client.cancel()
        client.wait(60)


@pytest.mark.hang_guard(180)
def test_the_connected_watermark_follows_the_slower_input_M_W5_M_W6(
    executor: Any, tmp_path: Path
) -> None:
    """Input 1 reaches event time 9,900, input 2 only 4,950: the operator's watermark is
    input 2's (4,949), held back by input 2, and exactly the timers up to it fired."""
    probe = FileProbe(tmp_path / "probe")
    run_timers(
        executor,
        probe,
        lambda env: timed_source(env, "fast", 100, 100),
        lambda env: timed_source(env, "slow", 100, 50),
        4949,
        "input 1",
    )
    expected = {(i % 3, i * 100) for i in range(100) if i * 100 <= 4949} | {
        (i % 3, i * 50) for i in range(100) if i * 50 <= 4949
    }
    assert sorted(set(probe.items)) == sorted(expected)
    assert len(probe.items) == len(set(probe.items)), "each (key, time) timer fired once"


@pytest.mark.hang_guard(180)
def test_an_idle_input_does_not_hold_the_connected_watermark_back_M_W4(
    executor: Any, tmp_path: Path
) -> None:
    """Input 2 never has data and declares idleness: the operator follows input 1 to
    9,899 and fires every timer up to it."""
    probe = FileProbe(tmp_path / "probe")
    run_timers(
        executor,
        probe,
        lambda env: timed_source(env, "fast", 100, 100),
        lambda env: timed_source(env, "idle", 0, 100, idleness=True),
        9899,
        None,
    )
    assert sorted(probe.items) == sorted((i % 3, i * 100) for i in range(99))

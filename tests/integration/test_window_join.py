"""Window join and co-group against pandas, through failures and rescaling (issue 23
parts 3-5; M-W5, M-W6, M-T4, M-R1).

One source makes both sides (even positions left, odd right), so both inputs'
watermarks come from one generator and lateness is deterministic:

* disorder up to 499 ms behind the bounded-out-of-orderness watermark (never late);
* *too late* records, 20 s behind the source's watermark: far past any window's
  allowed lateness. Yet a window subtask's watermark is the minimum over its input
  channels, and a channel may queue a large part of this input (the channels bound
  bytes, not event time), so a few may still find their window open there. Each has
  a key of its own: the oracle leaves them out, and :func:`check_too_late` accounts
  for every one exactly: dropped (counted) or alone in its window;
* *late within the lateness* records, 1.2 s behind (lateness 2 s): never dropped, so
  the oracle joins them; their window may already have fired, and then fires again
  with its whole contents (as Flink's window join): the check allows repeats only for
  those windows (sessions: those keys), everything else exactly once.

Every output gets its window's end from its event timestamp (``end - 1``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from conftest import is_spark, wait_until
from lockgate.core.elements import MIN_WATERMARK
from lockgate.runtime.operators.window.operator import LATE_RECORDS_DROPPED
from lockgate.testing import FailAtRecord, inject_faults

KEYS = 20_000
DISORDER_MS = 500
LATENESS_MS = 2000
GAP_MS = 300


def columns(i: np.ndarray, total: int) -> dict[str, np.ndarray]:
    j = i // 2
    side = i % 2
    k = np.where(side == 0, (j * 7919) % KEYS, (j * 4099) % KEYS)
    ts = i // 20 - (i * 104729) % DISORDER_MS + DISORDER_MS
    too_late = (i % 1009 == 7) & (i > total // 2)
    within = (i % 1013 == 3) & (i > 24_000)
    ts = np.where(too_late, i // 20 - 20_000, np.where(within, i // 20 - 1200, ts))
    k = np.where(too_late, KEYS + i, k)  # alone in their keys: see check_too_late
    return {"side": side, "k": k, "ts": ts, "id": i, "too_late": too_late, "within": within}


class Events:
    """The source's numbers as records of both sides (see the module docstring)."""

    def __init__(self, total: int) -> None:
        self.total = total

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        c = columns(batch.column(0).to_numpy(), self.total)
        return pa.RecordBatch.from_arrays(
            [pa.array(c[f]) for f in ("side", "k", "ts", "id")], names=["side", "k", "ts", "id"]
        )


def left_columns(batch: pa.RecordBatch) -> pa.RecordBatch:
    ids = batch.column("id")
    return pa.RecordBatch.from_arrays(
        [batch.column("k"), batch.column("ts"), ids, pc.multiply(ids, 3)],
        names=["k", "ts", "id", "v"],
    )


def right_columns(batch: pa.RecordBatch) -> pa.RecordBatch:
    ids = batch.column("id")
    return pa.RecordBatch.from_arrays(
        [batch.column("k"), batch.column("ts"), ids, pc.multiply(ids, 5)],
        names=["k", "ts", "id", "w"],
    )


class BatchWatermarks:
    """Bounded out-of-orderness (``DISORDER_MS``), emitted after every batch rather than
    every 200 ms: how far event time has advanced when a record arrives depends on the
    records before it, never on how fast this machine ran the input (an unpaced input
    read in less than one periodic interval carried no watermark before its end, so no
    record was ever late)."""

    def __init__(self) -> None:
        self.highest = MIN_WATERMARK

    def on_events(self, timestamps: np.ndarray, output: Any) -> None:
        if len(timestamps):
            self.highest = max(self.highest, int(timestamps.max()) - DISORDER_MS - 1)
            output.emit_watermark(self.highest)

    def on_periodic_emit(self, output: Any) -> None:
        pass


def two_sides(
    env: lg.StreamEnvironment, total: int, *sources: lg.connectors.Source
) -> tuple[lg.DataStream, lg.DataStream]:
    names = ("numbers", "more")
    stream = env.from_source(sources[0], name=names[0]).uid(names[0]).set_parallelism(1)
    for name, source in zip(names[1:], sources[1:]):
        stream = stream.union(env.from_source(source, name=name).uid(name).set_parallelism(1))
    events = (
        stream.map_batches(Events(total), name="events")
        .uid("events")
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(
            lg.WatermarkStrategy.for_generator(BatchWatermarks).with_timestamp_assigner("ts")
        )
        .uid("timestamps")
        .set_parallelism(1)
    )
    left = (
        events.filter(pc.field("side") == 0, name="left?")
        .uid("left?")
        .set_parallelism(1)
        .map_batches(left_columns, name="left")
        .uid("left")
    )
    right = (
        events.filter(pc.field("side") == 1, name="right?")
        .uid("right?")
        .set_parallelism(1)
        .map_batches(right_columns, name="right")
        .uid("right")
    )
    return left, right


# -- windows and oracles ---------------------------------------------------------------
ASSIGNERS = {
    "tumbling": lambda: lg.TumblingEventTimeWindows.of(1000),
    "sliding": lambda: lg.SlidingEventTimeWindows.of(1000, 500),
    "session": lambda: lg.EventTimeSessionWindows.with_gap(GAP_MS),
}


def frame(total: int) -> pd.DataFrame:
    """Every record the window operator keeps (too-late ones dropped), with its window
    ``end`` (one row per window it belongs to)."""
    return pd.DataFrame(columns(np.arange(total, dtype=np.int64), total))


def with_windows(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    df = df[~df.too_late]
    if kind == "tumbling":
        return df.assign(end=df.ts - df.ts % 1000 + 1000)
    if kind == "sliding":
        last = df.ts - df.ts % 500
        return pd.concat([df.assign(end=last + 1000), df.assign(end=last + 500)])
    df = df.sort_values(["k", "ts"], kind="stable")
    reach = df.groupby("k").ts.cummax() + GAP_MS  # the session's end so far
    opens = (df.k != df.k.shift()) | (df.ts > reach.groupby(df.k).shift())
    session = opens.cumsum()
    return df.assign(end=df.groupby(session).ts.transform("max") + GAP_MS)


def touched(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The windows (sessions: the keys) that may fire more than once."""
    hit = df[df.within]
    return (
        hit[["k"]].drop_duplicates() if kind == "session" else hit[["k", "end"]].drop_duplicates()
    )


def expected_pairs(total: int, kind: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    df = with_windows(frame(total), kind)
    left, right = df[df.side == 0], df[df.side == 1]
    pairs = left.merge(right, on=["k", "end"], suffixes=("_left", "_right"))
    return pairs[["k", "end", "id_left", "id_right"]], touched(df, kind)


GROUP_FIELDS = ["nl", "nr", "sl", "sr", "ql", "qr"]


def expected_groups(total: int, kind: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (key, window): each side's count, sum and sum of squares of record ids (what
    :class:`Groups` reports)."""
    df = with_windows(frame(total), kind)
    df = df.assign(q=df.id * df.id)
    agg = df.groupby(["k", "end", "side"]).agg(n=("id", "size"), s=("id", "sum"), q=("q", "sum"))
    wide = agg.unstack("side", fill_value=0)
    out = pd.DataFrame(
        {
            f"{m}{side}": wide[(m, i)].astype(np.int64)
            for m in ("n", "s", "q")
            for i, side in ((0, "l"), (1, "r"))
        }
    ).reset_index()
    return out[["k", "end", *GROUP_FIELDS]], touched(df, kind)


def assert_exact(
    got: pd.DataFrame, expected: pd.DataFrame, touch: pd.DataFrame, *, pairs: bool = True
) -> None:
    """``got`` holds every expected row; rows of untouched windows exactly once and
    nothing else; rows of touched windows (repeat firings) at least once (for pairs of
    aligned windows: each an expected row; a co-group's earlier firing has fewer
    records)."""
    on = list(touch.columns)
    fields = list(expected.columns)
    assert len(expected) > 1000, "the oracle expects a real amount of output"
    counts = got.groupby(fields).size().rename("n").reset_index()
    counts = counts.merge(touch, on=on, how="left", indicator="hit")
    counts["touched"] = counts.pop("hit") == "both"
    exp = expected.merge(touch, on=on, how="left", indicator="hit")
    exp["touched"] = exp.pop("hit") == "both"
    both = counts.merge(exp[fields], on=fields, how="outer", indicator=True)
    missing = both[both._merge == "right_only"]
    assert missing.empty, f"{len(missing)} expected rows missing, e.g. {missing.head(3)}"
    calm = both[both.touched.eq(False)]
    extra = calm[calm._merge == "left_only"]
    assert extra.empty, f"{len(extra)} unexpected rows, e.g. {extra.head(3)}"
    repeated = calm[calm.n != 1]
    assert repeated.empty, f"{len(repeated)} rows of windows firing once came more often"
    if pairs and on == ["k", "end"]:  # aligned windows: repeat firings repeat the oracle's rows
        stray = both[both.touched.eq(True) & (both._merge == "left_only")]
        assert stray.empty, f"{len(stray)} rows no firing of their window could give"
    assert exp.touched.sum() > 0 and (~exp.touched).sum() > 0, "both kinds are tested"


# -- functions ---------------------------------------------------------------------------
class Pair(lg.JoinFunction):
    def join(self, left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
        assert left["v"] == 3 * left["id"] and right["w"] == 5 * right["id"]
        return {"k": left["k"], "id_left": left["id"], "id_right": right["id"]}


class Groups(lg.CoGroupFunction):
    def co_group(self, lefts: list[dict[str, Any]], rights: list[dict[str, Any]]) -> Any:
        k = (lefts or rights)[0]["k"]
        yield {
            "k": k,
            "nl": len(lefts),
            "nr": len(rights),
            "sl": sum(r["id"] for r in lefts),
            "sr": sum(r["id"] for r in rights),
            "ql": sum(r["id"] ** 2 for r in lefts),
            "qr": sum(r["id"] ** 2 for r in rights),
        }


class WindowEnd(lg.ProcessFunction):
    def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
        yield {**value, "end": ctx.timestamp + 1}


def build(left: lg.DataStream, right: lg.DataStream, how: str, kind: str) -> lg.DataStream:
    if how == "co_group":
        builder: Any = left.co_group(right)
    else:
        builder = left.join(right)
    windowed = (
        builder.where("k").equal_to("k").window(ASSIGNERS[kind]()).allowed_lateness(LATENESS_MS)
    )
    fn = {"vectorized": None, "function": Pair(), "co_group": Groups()}[how]
    joined = windowed.apply(fn, name="join") if fn is not None else windowed.apply(name="join")
    return joined.uid("join").process(WindowEnd(), name="window end").uid("window-end")


def got_frame(records: list[dict[str, Any]], how: str) -> pd.DataFrame:
    df = pd.DataFrame(records)
    if how == "co_group":
        return df[["k", "end", *GROUP_FIELDS]]
    return df[["k", "end", "id_left", "id_right"]]


def expected(total: int, how: str, kind: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    return expected_groups(total, kind) if how == "co_group" else expected_pairs(total, kind)


def per_side(executor: Any, how: str = "", kind: str = "") -> int:
    """200,000 records per side for the vectorized join; the per-record Python paths
    (functions, co-group) take 200,000 with tumbling windows and 20,000 with the others
    (the same code at a tenth of the cost), and the failure runs take 200,000 on the
    local executor and 20,000 on Spark."""
    if how == "vectorized" or (how != "" and kind == "tumbling"):
        return 200_000
    if how != "":
        return 20_000
    return 20_000 if is_spark(executor) else 200_000


# -- against pandas ----------------------------------------------------------------------
@pytest.mark.hang_guard(300)
@pytest.mark.parametrize("kind", ["tumbling", "sliding", "session"])
@pytest.mark.parametrize("how", ["vectorized", "function", "co_group"])
def test_window_join_and_co_group_equal_pandas_with_disorder_and_late_records_M_W6(
    executor: Any, how: str, kind: str
) -> None:
    total = 2 * per_side(executor, how, kind)
    env = lg.StreamEnvironment(parallelism=2)
    # paced (the smaller inputs at 20,000 records a second; those of 400,000 at 100,000
    # on Spark), so that windows fire (and records are too late) during the run rather
    # than all at its end (a small input fits in the channels whole)
    if total > 100_000:
        rate = 100_000 if is_spark(executor) else None
    else:
        rate = 20_000
    source = lg.connectors.SequenceSource(0, total, rows_per_second=rate, batch_size=4000)
    left, right = two_sides(env, total, source)
    out = build(left, right, how, kind)
    sink = out.sink_to(lg.connectors.CollectSink(), name="collect").uid("collect")
    sink.set_parallelism(1)
    result = env.execute(f"window {how} {kind}", executor=executor)
    records = [r for part in result.sink_results["collect"] for r in part]
    exp, touch = expected(total, how, kind)
    got = got_frame(records, how)
    dropped = result.operators["join"].side_out.get(LATE_RECORDS_DROPPED, 0)
    assert_exact(check_too_late(got, how, total, dropped), exp, touch, pairs=how != "co_group")


def check_too_late(got: pd.DataFrame, how: str, total: int, dropped: int) -> pd.DataFrame:
    """Every too-late record was dropped and counted, or (its window still open at the
    window subtask) co-grouped alone, once; never joined (nothing shares its key).
    Returns the other rows."""
    df = frame(total)
    late = df[df.too_late]
    mine = got[got.k >= KEYS]
    assert len(late) > 0 and dropped > 0, "too-late records came and were dropped"
    if how == "co_group":
        alone = {(int(k), int(i)) for k, i in zip(late.k, late.id)}
        assert ((mine.nl + mine.nr) == 1).all(), "a too-late record is alone in its window"
        # a record of a sliding window is in several windows: alone in each still open
        # at the window subtask, once per window
        seen = [(int(k), int(i), int(e)) for k, i, e in zip(mine.k, mine.sl + mine.sr, mine.end)]
        assert len(set(seen)) == len(seen), "each once per window"
        records = {(k, i) for k, i, _ in seen}
        assert records <= alone, "only too-late records are alone in their windows"
        assert dropped + len(records) == len(late), "every too-late record accounted for"
    else:
        assert mine.empty and dropped <= len(late)
    return got[got.k < KEYS]


def int32_key(batch: pa.RecordBatch) -> pa.RecordBatch:
    if batch.schema.field("k").type != pa.int32():
        raise AssertionError(f"the key column lost its type: {batch.schema}")
    return batch


def test_the_vectorized_join_keeps_column_types_and_names_pandas_merge_style(
    executor: Any,
) -> None:
    total = 20_000
    env = lg.StreamEnvironment(parallelism=2)
    left, right = two_sides(env, total, lg.connectors.SequenceSource(0, total, batch_size=1000))
    left = left.map_batches(
        lambda b: b.set_column(0, "k", pc.cast(b.column("k"), pa.int32())), name="int32 key"
    )
    right = right.map_batches(
        lambda b: b.set_column(0, "k", pc.cast(b.column("k"), pa.int32())), name="int32 key r"
    )
    out = (
        left.join(right)
        .where("k")
        .equal_to("k")
        .window(lg.TumblingEventTimeWindows.of(1000))
        .apply(suffixes=("_l", "_r"), name="join")
        .uid("join")
        .map_batches(int32_key, name="schema probe")
    )
    got = out.execute_and_collect("join schema", executor=executor)
    assert got and set(got[0]) == {"k", "ts_l", "id_l", "v", "ts_r", "id_r", "w"}
    assert all(r["v"] == 3 * r["id_l"] and r["w"] == 5 * r["id_r"] for r in got)


# -- exactly once through failures -------------------------------------------------------
@pytest.mark.hang_guard(300)
@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_the_window_join_is_exactly_once_through_three_failures_M_R1_M_T4(
    executor: Any, tmp_path: Path, unaligned: bool
) -> None:
    total = 2 * per_side(executor)
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.checkpoint_config.unaligned = unaligned
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=5, delay=0))
    # paced by completed checkpoints (a twentieth of the input each), not the clock:
    # every fault waits for a checkpoint of its attempt and still finds most of the
    # input ahead, however slowly a loaded machine completes them
    source = CheckpointPacedSource(
        lg.connectors.SequenceSource(0, total, batch_size=2000), total // 20, end_after=2
    )
    left, right = two_sides(env, total, source)
    build(left, right, "vectorized", "tumbling").sink_to(
        lg.connectors.FileSink(str(tmp_path / "out"), format="jsonl")
    ).uid("sink")
    eighth = total // 16  # an eighth of what a window subtask reads
    inject_faults(
        env,
        # an attempt's first checkpoint precedes its records (the paced sources wait for
        # it), and on a loaded machine its second can be triggered the instant the first
        # completes (min pause 0), before the sources emit: only the third surely holds
        # progress, and attempts 1 and 2 may add none, so attempt 0 must leave some for
        # the last attempt to restore
        FailAtRecord("join", record=2 * eighth, subtask=0, after_checkpoints=3),
        FailAtRecord("join", record=eighth, attempt=1, subtask=1, after_checkpoints=1),
        FailAtRecord("join", record=eighth // 2, attempt=2, subtask=0, after_checkpoints=1),
    )
    result = env.execute("window join with failures", executor=executor)
    assert result.attempts == 4, "each injected failure restarted the job"
    assert result.records_in_last_attempt("join") < total, "the last attempt restored a checkpoint"
    exp, touch = expected_pairs(total, "tumbling")
    got = got_frame(read_sink(tmp_path / "out"), "vectorized")
    assert (got.k < KEYS).all(), "too-late records are never joined"
    assert_exact(got, exp, touch)


def read_sink(folder: Path) -> list[dict[str, Any]]:
    import json

    return [
        json.loads(line)
        for p in sorted(folder.glob("part-*"))
        for line in p.read_text().splitlines()
        if line
    ]


# -- rescaling through a savepoint -------------------------------------------------------
def rescale_job(env: lg.StreamEnvironment, folder: Path, stage: int, n1: int, n: int) -> None:
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(folder.parent / f"chk-{stage}")
    sources = [lg.connectors.SequenceSource(0, n1, bounded=stage == 2, batch_size=2000)]
    if stage == 2:
        sources.append(lg.connectors.SequenceSource(n1, n, batch_size=2000))
    left, right = two_sides(env, n, *sources)
    build(left, right, "co_group", "tumbling").sink_to(
        lg.connectors.FileSink(str(folder), format="jsonl")
    ).uid("sink")


@pytest.mark.hang_guard(300)
def test_the_co_group_state_moves_by_key_group_when_rescaled_2_to_3_M_T4(
    executor: Any, tmp_path: Path
) -> None:
    """Stage one (parallelism 2) stops with a savepoint holding open windows of both
    sides; stage two (3 locally, 1 on Spark's two slots) restores it and reads the
    rest: both stages' output together equals pandas."""
    n1, n = 60_000, 120_000
    env = lg.StreamEnvironment(parallelism=2)
    rescale_job(env, tmp_path / "out-1", 1, n1, n)
    client = env.execute_async("co-group stage one", executor=executor)
    ts = columns(np.arange(n1, dtype=np.int64), n)["ts"]
    final = int(ts.max()) - DISORDER_MS - 1
    try:
        wait_until(
            lambda: (
                sorted(w.watermark or 0 for w in client.watermarks() if w.uid == "join")
                == [final, final]
            ),
            "stage one's records went through the windows",
            timeout_s=120,
        )
        location = client.stop_with_savepoint(str(tmp_path / "sp"), timeout=60)
    except BaseException:
        client.cancel()
        raise
    assert client.wait(60).status is lg.JobStatus.FINISHED
    env2 = lg.StreamEnvironment(parallelism=1 if is_spark(executor) else 3)
    rescale_job(env2, tmp_path / "out-2", 2, n1, n)
    env2.execute("co-group stage two", executor=executor, restore_from=location)
    first = read_sink(tmp_path / "out-1")
    assert first, "stage one fired windows itself"
    got = got_frame(first + read_sink(tmp_path / "out-2"), "co_group")
    exp, touch = expected_groups(n, "tumbling")
    assert_exact(got[got.k < KEYS], exp, touch, pairs=False)

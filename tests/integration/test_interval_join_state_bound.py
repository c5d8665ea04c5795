"""The interval join's state stays bounded over a long unbounded run, read from the
running job (issue 23 part 2; M-W5, M-W6).

Two paced unbounded SequenceSources feed ``{k, ts, v}`` records (10 records per
event-time millisecond, up to ``DISORDER_MS`` of disorder, a key per record index
that both sides share, so each record joins its twin; one source subtask each, since
a SequenceSource split starts its range in the middle, far ahead in event time). While records keep flowing,
the test polls ``JobClient.watermarks()`` and then ``JobClient.metrics()``: the join
operator's state signal - the buffered bytes on the vectorized path (``state_bytes``),
the buffered keys (one record each) on the ProcessJoinFunction path (``keys``) - summed
over the subtasks must stay under a bound derived from the rate, the interval and how
far the join's watermark is behind the event time it has taken, until the join has
taken many times that bound in records. A join may keep what its watermark has not
passed (a loaded machine delays watermarks, most at the start), and no more; one that
never cleaned its buffers would hold every record it took and cross the bound long
before. The watermark must keep up too: at the end it is at most ``MAX_LAG_MS`` of event
time behind.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import lockgate as lg
from conftest import wait_until

RATE = 4_000  # records per second per side
PER_MS = 10  # records per event-time millisecond
DISORDER_MS = 50
LOWER, UPPER = -30, 20
#: wall-clock slack for watermarks and the two inputs running apart (a skew of this
#: long at RATE adds RATE * SLACK_S records per side)
SLACK_S = 1.5
#: the most records both buffers may hold: each side keeps about PER_MS x (disorder +
#: its bound) ms of event time, plus the slack
BOUND_ROWS = int(PER_MS * ((DISORDER_MS + UPPER) + (DISORDER_MS - LOWER)) + 2 * RATE * SLACK_S)
#: bytes per buffered record on the vectorized path: k, ts, v and the event-time column
ROW_BYTES = 4 * 8
#: the join must take this many records (both sides) while the bound holds
ENOUGH = 5 * BOUND_ROWS
#: how far the join's watermark may be behind the event time taken, at the end (10 s of
#: the sources' pace)
MAX_LAG_MS = 10 * RATE // PER_MS


def events(batch: pa.RecordBatch) -> pa.RecordBatch:
    i = batch.column(0).to_numpy()
    ts = i // PER_MS - (i * 7919) % DISORDER_MS + DISORDER_MS
    return pa.RecordBatch.from_arrays(
        [pa.array(i), pa.array(ts), pa.array(i * 2)], names=["k", "ts", "v"]
    )


def side(env: lg.StreamEnvironment, name: str) -> lg.KeyedStream:
    ws = lg.WatermarkStrategy.for_bounded_out_of_orderness(DISORDER_MS)
    source = lg.connectors.SequenceSource(0, 10**12, rows_per_second=RATE, batch_size=100)
    return (
        env.from_source(source, name=name)
        .uid(name)
        .set_parallelism(1)  # one split: event time advances with the sequence
        .map_batches(events, name=f"{name}-events")
        .uid(f"{name}-events")
        .set_parallelism(1)
        .assign_timestamps_and_watermarks(ws.with_timestamp_assigner("ts"))
        .uid(f"{name}-ts")
        .set_parallelism(1)
        .key_by("k")
    )


class Pair(lg.ProcessJoinFunction):
    def process_element(self, left: Any, right: Any, ctx: Any) -> Any:
        yield (left["k"], right["k"])


def join_watermark(client: Any) -> int | None:
    """The join's watermark (the least of its subtasks'), None before each has one."""
    marks = [w.watermark for w in client.watermarks() if w.uid == "interval-join"]
    if not marks or any(m is None for m in marks):
        return None
    return min(marks)


def lag_ms(taken: int, watermark: int) -> int:
    """How far ``watermark`` is behind the event time of ``taken`` records (both sides,
    ``PER_MS`` records per event-time millisecond each)."""
    return max(0, taken // (2 * PER_MS) - watermark)


def join_readings(metrics: dict[str, Any]) -> tuple[int, int | None]:
    """(records taken, state signal) of the join, summed over its subtasks."""
    ops = [o for o in metrics["operators"] if o["uid"] == "interval-join"]
    taken = sum(o["records_in"] for o in ops)
    signals = [o["state_bytes"] if o["state_bytes"] is not None else o["keys"] for o in ops]
    if not ops or any(s is None for s in signals):
        return taken, None
    return taken, sum(signals)  # type: ignore[arg-type]


@pytest.mark.hang_guard(180)
@pytest.mark.parametrize("vectorized", [True, False], ids=["vectorized", "function"])
def test_the_interval_join_state_stays_bounded_while_records_keep_flowing(
    executor: Any, vectorized: bool
) -> None:
    """On Spark the metrics are a heartbeat old: the bound holds all the same."""
    env = lg.StreamEnvironment(parallelism=2)
    (
        side(env, "left")
        .interval_join(side(env, "right"))
        .between(LOWER, UPPER)
        .process(None if vectorized else Pair(), name="interval-join")
        .uid("interval-join")
        .sink_to(lg.connectors.DiscardingSink(), name="out")
    )
    per_record = ROW_BYTES if vectorized else 1
    unit = "bytes" if vectorized else "buffered keys (one record each)"
    client = env.execute_async("interval join state bound", executor=executor)
    seen: list[tuple[int, int]] = []
    lags: list[int] = []
    try:
        wait_until(lambda: client.status() == "RUNNING", "the job runs", 120)

        def enough_taken_within_the_bound() -> bool:
            if client.done():
                pytest.fail(f"the job ended while the test polled: {client.status()}")
            # the watermark first: an older one only allows more
            watermark = join_watermark(client)
            taken, state = join_readings(client.metrics())
            if state is None or watermark is None:
                return False
            lag = lag_ms(taken, watermark)
            bound = (BOUND_ROWS + 2 * PER_MS * lag) * per_record
            seen.append((taken, state))
            lags.append(lag)
            assert state <= bound, (
                f"the interval join holds {state} {unit} after taking {taken} records, with "
                f"its watermark {lag} ms of event time behind them; the bound is {bound} "
                f"({PER_MS} records per ms per side x (interval {UPPER - LOWER} ms + disorder "
                f"{DISORDER_MS} ms + the watermark's lag) + {SLACK_S} s of slack): its "
                "buffers are not cleaned as the watermark passes"
            )
            # enough to show the cleanup: without it the join would hold 4x its bound
            return taken >= max(ENOUGH, 4 * (BOUND_ROWS + 2 * PER_MS * lag))

        wait_until(
            enough_taken_within_the_bound,
            f"the join took {ENOUGH} records while its state stayed under the bound",
            timeout_s=120,
        )
    finally:
        client.cancel()
        client.wait(60)
    taken, state = seen[-1]
    assert taken >= ENOUGH
    assert max(s for _, s in seen) > 0, "the join buffered records (the signal is live)"
    assert lags[-1] <= MAX_LAG_MS, f"the join's watermark fell behind: lags {lags}"
    # without cleanup the join would hold every record it took: far above the bound
    assert taken >= 4 * (BOUND_ROWS + 2 * PER_MS * lags[-1])
    assert len(seen) >= 2, "the state was read more than once while records flowed"

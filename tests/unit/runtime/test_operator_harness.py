"""lockgate.testing.OperatorHarness: one operator driven by hand, as a user's test drives
it (the examples of docs/testing.md): records with timestamps, watermarks firing
event-time timers (M-W6), processing time moved by the test, side outputs, a snapshot
through a state file's encoding restored into a new harness (M-T3) and at another
parallelism (M-R1), and bad calls refused saying what to do; the broadcast, window,
interval join and async I/O builders, the task thread's mailbox, the output in emission
order, snapshots begun before later records and written by hand, and the restore protocol
shared with the checkpoint restore."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pyarrow as pa
import pytest

import lockgate as lg
from lockgate.core.elements import MAX_WATERMARK, StreamStatus, Watermark
from lockgate.recovery.restore import OperatorRestore
from lockgate.runtime.operators.base import RestoredState
from lockgate.runtime.operators.basic import ProcessOperator
from lockgate.testing import OperatorHarness, OperatorSnapshot, OutputBatch

LATE = lg.OutputTag("late")


class CountPerKey(lg.KeyedProcessFunction):
    """Counts each user's records; a timer 10 s after a user's first record emits the
    count; records without a user go to the side output ``late``."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value: Any, ctx: Any) -> Any:
        if self.count.value() == 0:
            ctx.timer_service().register_event_time_timer(ctx.timestamp + 10_000)
        self.count.update(self.count.value() + 1)
        return None

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield {"user": ctx.current_key, "count": self.count.value(), "at": timestamp}


def harness(**options: Any) -> OperatorHarness:
    return OperatorHarness.for_keyed_process(CountPerKey(), key="user", **options)


def test_records_watermarks_and_event_time_timers_M_W6() -> None:
    h = harness().open()
    h.process([{"user": "a"}, {"user": "b"}, {"user": "a"}], timestamps=[1_000, 2_000, 3_000])
    h.process_watermark(11_000)
    assert h.output == [{"user": "a", "count": 2, "at": 11_000}]
    assert h.timestamps == [11_000] and h.watermarks == [11_000]
    h.process_watermark(12_000)
    assert h.take_output() == [
        {"user": "a", "count": 2, "at": 11_000},
        {"user": "b", "count": 1, "at": 12_000},
    ]
    assert h.output == [] and h.watermarks == []
    h.close()


def test_a_snapshot_restores_into_a_new_harness_M_T3() -> None:
    h = harness().open()
    h.process([{"user": "a"}] * 3, timestamps=[1_000] * 3)
    snapshot = h.snapshot()
    assert isinstance(snapshot, OperatorSnapshot) and snapshot.checkpoint_id == 1
    assert isinstance(snapshot.payload, bytes), "the state as a state file holds it"
    h.process([{"user": "a"}], timestamps=[1_500])  # after the snapshot: not restored
    restored = harness().open(restored=snapshot)
    restored.process_watermark(20_000)
    assert restored.output == [{"user": "a", "count": 3, "at": 11_000}]


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_state_and_timers_restore_at_another_parallelism_M_R1(backend: str) -> None:
    def state_backend() -> Any:
        return lg.HashMapStateBackend() if backend == "hashmap" else lg.RocksDBStateBackend()

    users = [f"u{i}" for i in range(30)]
    old = [
        harness(subtask_index=i, parallelism=2, state_backend=state_backend()).open()
        for i in range(2)
    ]
    for i, h in enumerate(old):
        mine = [u for u in users if lg.subtask_for_key(u, 2, 128) == i]
        h.process([{"user": u} for u in mine], timestamps=[1_000] * len(mine))
    snapshots = [h.snapshot() for h in old]
    fired = []
    for i in range(3):
        h = harness(subtask_index=i, parallelism=3, state_backend=state_backend())
        h.open(restored=snapshots).process_watermark(11_000)
        assert all(lg.subtask_for_key(r["user"], 3, 128) == i for r in h.output)
        fired.extend(r["user"] for r in h.output)
        h.close()
    assert sorted(fired) == sorted(users), "every key's timer fired once, in its new subtask"


def test_processing_time_moves_only_when_the_test_says() -> None:
    class Ping(lg.KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            ctx.timer_service().register_processing_time_timer(
                ctx.timer_service().current_processing_time() + 500
            )
            return None

        def on_timer(self, timestamp: int, ctx: Any) -> Any:
            yield (ctx.current_key, timestamp)

    h = OperatorHarness.for_keyed_process(Ping(), key=lambda v: v, clock=lg.ManualClock(1_000))
    h.open().process(["x", "y"])
    assert h.advance_processing_time(499) == 0 and h.output == []
    h.advance_processing_time(1)
    assert sorted(h.output) == [("x", 1_500), ("y", 1_500)]


def test_map_flat_map_and_process_functions_with_side_outputs_and_arrow_batches() -> None:
    m = OperatorHarness.for_map(lambda r: {"v2": r["v"] * 2}).open()
    m.process([{"v": 1}, {"v": 2}])
    m.process(pa.record_batch({"v": [3]}))  # an Arrow batch: records are its rows
    assert m.output == [{"v2": 2}, {"v2": 4}, {"v2": 6}]

    f = OperatorHarness.for_flat_map(lambda v: [v] * v).open()
    f.process([2, 0, 1])
    assert f.output == [2, 2, 1]

    class Split(lg.ProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            if value < 0:
                ctx.output(LATE, value)
                return None
            return [value]

    p = OperatorHarness.for_process(Split()).open()
    p.process([1, -1, 2], timestamps=[5, 6, 7])
    assert p.output == [1, 2] and p.timestamps == [5, 7]
    assert p.side_output(LATE) == [-1] and p.side_output("late") == [-1]


def test_bad_calls_are_refused_saying_what_to_do() -> None:
    with pytest.raises(lg.ConfigurationError, match="for_process"):
        OperatorHarness(CountPerKey())  # type: ignore[arg-type]
    with pytest.raises(lg.ConfigurationError, match="subtask_index 2 is not below parallelism 2"):
        harness(subtask_index=2, parallelism=2)
    with pytest.raises(lg.ConfigurationError, match="key must be a column name"):
        OperatorHarness.for_keyed_process(CountPerKey(), key=3)
    h = harness()
    with pytest.raises(RuntimeError, match=r"open\(\) first"):
        h.process([{"user": "a"}])
    h.open()
    with pytest.raises(RuntimeError, match="called already"):
        h.open()
    with pytest.raises(lg.ConfigurationError, match="2 records but 1 timestamps"):
        h.process([{"user": "a"}, {"user": "b"}], timestamps=[1])
    with pytest.raises(lg.ConfigurationError, match="input must be 1 for"):
        h.process([{"user": "a"}], input=2)
    with pytest.raises(lg.ConfigurationError, match="advance_processing_time takes ms >= 0"):
        h.advance_processing_time(-1)
    with pytest.raises(lg.ConfigurationError, match="takes snapshots of harness.snapshot"):
        harness().open(restored=[{"count": 1}])  # type: ignore[list-item]
    h.close()
    with pytest.raises(RuntimeError, match="closed"):
        h.process([{"user": "a"}])


# -- the extensions: broadcast, windows, interval joins, async I/O, elements, snapshots --
RULES: lg.MapStateDescriptor[Any] = lg.MapStateDescriptor("rules")


class ApplyRule(lg.KeyedBroadcastProcessFunction):
    """Counts records per key and multiplies by the broadcast ``factor``."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.count.update(self.count.value() + 1)
        yield (ctx.current_key, value * ctx.get_broadcast_state(RULES).get("factor", 1))

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put("factor", value)
        return None


def test_broadcast_harnesses_take_the_data_at_input_1_and_the_broadcast_at_input_2() -> None:
    class Plain(lg.BroadcastProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            yield (value, ctx.get_broadcast_state(RULES).get("x"))

        def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
            ctx.get_broadcast_state(RULES).put("x", value)
            return None

    p = OperatorHarness.for_broadcast_process(Plain(), [RULES]).open()
    p.process([1], input=1)
    p.process(["rule"], input=2)
    p.process([2], input=1)
    assert p.output == [(1, None), (2, "rule")]

    h = OperatorHarness.for_keyed_broadcast_process(ApplyRule(), [RULES], key=lambda v: v % 2)
    h.open().process([10], input=2)
    h.process([1, 2, 3], input=1)
    assert h.output == [(1, 10), (0, 20), (1, 30)]
    snapshot = h.snapshot()
    assert snapshot.state()["broadcast"] == {"rules": {"factor": 10}}
    again = OperatorHarness.for_keyed_broadcast_process(ApplyRule(), [RULES], key=lambda v: v % 2)
    again.open(restored=snapshot).process([5], input=1)
    assert again.output == [(1, 50)], "the broadcast state came back"


def test_window_harness_takes_aggregates_an_aggregate_function_reduce_or_process() -> None:
    tumbling = lg.TumblingEventTimeWindows.of(1000)
    rows = [{"k": "a", "v": 1}, {"k": "a", "v": 2}, {"k": "b", "v": 5}]

    def fire(**function: Any) -> OperatorHarness:
        h = OperatorHarness.for_window(tumbling, key="k", **function).open()
        h.process(rows, timestamps=[10, 20, 1500])
        h.process_watermark(MAX_WATERMARK)
        return h

    h = fire(aggregate=[lg.agg.count(), lg.agg.sum("v")])
    assert [(r["k"], r["window_start"], r["count"], r["sum_v"]) for r in h.output] == [
        ("a", 0, 2, 3),
        ("b", 1000, 1, 5),
    ]
    assert h.timestamps == [999, 1999], "results carry the window's end - 1"
    assert [r["count"] for r in fire(aggregate=lg.agg.count()).output] == [2, 1]
    reduced = fire(reduce=lambda a, b: {**a, "v": a["v"] + b["v"]}).output
    assert [r["result"]["v"] for r in reduced] == [3, 5]

    class Values(lg.ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: list[Any]) -> Any:
            yield (key, sorted(e["v"] for e in elements))

    assert fire(process=Values()).output == [("a", [1, 2]), ("b", [5])]
    with pytest.raises(lg.ConfigurationError, match="exactly one of aggregate="):
        OperatorHarness.for_window(tumbling, key="k")
    with pytest.raises(lg.ConfigurationError, match="exactly one of aggregate="):
        OperatorHarness.for_window(tumbling, key="k", aggregate=lg.agg.count(), reduce=max)
    with pytest.raises(lg.ConfigurationError, match="takes lg.agg aggregates"):
        OperatorHarness.for_window(tumbling, key="k", aggregate=42)


def test_window_harness_late_records_go_to_the_late_tag_with_their_timestamps() -> None:
    late = lg.OutputTag("late")
    h = OperatorHarness.for_window(
        lg.TumblingEventTimeWindows.of(1000), key="k", aggregate=lg.agg.count(), late_tag=late
    ).open()
    h.process_watermark(1500)
    h.process([{"k": "a"}, {"k": "a"}], timestamps=[400, 1600])
    assert h.side_output(late) == [{"k": "a"}] and h.side_timestamps(late) == [400]
    assert [e.tag for e in h.elements if isinstance(e, OutputBatch)] == ["late"]


@pytest.mark.parametrize("vectorized", [True, False], ids=["vectorized", "function"])
def test_interval_join_harness_joins_input_1_with_input_2_within_the_bounds(
    vectorized: bool,
) -> None:
    class Pair(lg.ProcessJoinFunction):
        def process_element(self, left: Any, right: Any, ctx: Any) -> Any:
            yield {"k": left["k"], "v_left": left["v"], "v_right": right["v"]}

    h = OperatorHarness.for_interval_join(
        -5,
        5,
        key1="k",
        key2="k",
        fn=None if vectorized else Pair(),
        upper_exclusive=True,  # tr < tl + 5
        late_tags=(lg.OutputTag("late left"), None),
    ).open()
    h.process([{"k": 1, "v": "l"}], timestamps=[100], input=1)
    h.process([{"k": 1, "v": r} for r in "abc"], timestamps=[95, 104, 105], input=2)
    got = sorted(((r["v_left"], r["v_right"]), t) for r, t in zip(h.output, h.timestamps))
    assert got == [(("l", "a"), 100), (("l", "b"), 104)], "each pair at its later timestamp"
    h.process_watermark(200, input=1)
    h.process_watermark(200, input=2)
    h.process([{"k": 1, "v": "too late"}], timestamps=[150], input=1)
    assert h.side_output("late left") == [{"k": 1, "v": "too late"}]
    assert h.watermarks == [200], "the combined watermark of both inputs"


class Gate:
    """Requests wait until the test releases them (from the test thread)."""

    def __init__(self) -> None:
        self.futures: dict[Any, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self.started = threading.Event()

    async def fn(self, record: Any) -> list[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        self.futures[record] = (loop, future)
        if len(self.futures) == 2:
            self.started.set()
        return await future

    def release(self, record: Any) -> None:
        assert self.started.wait(5), "the requests never started"
        loop, future = self.futures[record]
        loop.call_soon_threadsafe(future.set_result, [record])


def test_async_harness_runs_completions_as_mails_and_actions_while_the_operator_waits() -> None:
    gate = Gate()
    h = OperatorHarness.for_async_wait(gate.fn, timeout_ms=60_000, capacity=2).open()
    h.process(["a", "b"], timestamps=[1, 2])
    gate.release("b")
    h.run_mails_until(lambda: h.mails_run == 1)
    assert h.output == [] and h.waits == 0, "b completed, but waits behind a (ordered)"
    h.when_waiting(lambda: gate.release("a"))
    h.finish()  # the operator waits for its mailbox: the queued action releases a
    assert h.waits == 1 and h.actions_left == 0
    assert h.output == ["a", "b"] and h.timestamps == [1, 2]
    assert h.run_mails() == 0
    h.close()

    stuck = OperatorHarness.for_async_wait(Gate().fn, timeout_ms=60_000, wait_timeout_s=0.05)
    stuck.open().process(["x"])
    with pytest.raises(TimeoutError, match="no mail came"):
        stuck.run_mails_until(lambda: False)
    stuck.close()


def test_elements_keep_the_order_of_batches_watermarks_and_statuses() -> None:
    h = harness().open()
    h.process([{"user": "a"}], timestamps=[1_000])
    h.set_idle(True)
    h.process_watermark(11_000)
    h.set_idle(False)
    elements = h.elements
    assert elements[0] == StreamStatus.IDLE
    batch = elements[1]
    assert isinstance(batch, OutputBatch) and batch.tag is None
    assert batch.records == [{"user": "a", "count": 1, "at": 11_000}]
    assert batch.timestamps == [11_000] and h.batches == [batch.batch]
    assert elements[2:] == [Watermark(11_000), StreamStatus.ACTIVE]
    assert h.statuses == [StreamStatus.IDLE, StreamStatus.ACTIVE]
    assert h.take_elements() == elements
    assert h.elements == [] and h.output == [] and h.statuses == []


def test_next_processing_time_is_the_next_due_callback() -> None:
    h = OperatorHarness.for_window(
        lg.TumblingProcessingTimeWindows.of(1000),
        key="k",
        aggregate=lg.agg.count(),
        clock=lg.ManualClock(250),
    ).open()
    assert h.next_processing_time is None
    h.process([{"k": "a"}])
    assert h.next_processing_time == 1000
    assert h.advance_processing_time(750) == 1 and h.output[0]["count"] == 1
    assert h.next_processing_time is None


def test_begin_snapshot_captures_the_state_before_later_records() -> None:
    h = harness().open()
    h.process([{"user": "a"}], timestamps=[1_000])
    pending = h.begin_snapshot()
    assert pending.checkpoint_id == 1
    h.process([{"user": "a"}, {"user": "b"}], timestamps=[1_000, 1_000])
    snapshot = pending.complete()
    assert pending.complete() is snapshot, "completed once"
    restored = harness().open(restored=snapshot)
    restored.process_watermark(20_000)
    assert restored.output == [{"user": "a", "count": 1, "at": 11_000}]
    assert h.snapshot().checkpoint_id == 2


def test_snapshots_of_state_written_by_hand_restore_and_decode() -> None:
    h = harness().open()
    h.process([{"user": "a"}], timestamps=[1_000])
    state = h.snapshot().state()
    copy = OperatorSnapshot.of_state(state, subtask_index=0, parallelism=1, checkpoint_id=7)
    assert copy.state() == state and OperatorSnapshot.of_state(None).payload is None
    again = harness().open(restored=copy)
    again.process_watermark(11_000)
    assert again.output == [{"user": "a", "count": 1, "at": 11_000}]
    assert again.snapshot().checkpoint_id == 8, "ids go on after the restored one"


def test_the_harness_restore_and_the_checkpoint_restore_share_one_protocol() -> None:
    seen: list[Any] = []

    class Probe(lg.ProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            return None

    class Spy(ProcessOperator):
        def initialize_state(self, restored: Any) -> None:
            seen.append(restored)
            super().initialize_state(restored)

    old = [OperatorSnapshot.of_state(None, subtask_index=i, parallelism=2) for i in range(2)]
    OperatorHarness(Spy(Probe())).open(restored=old)
    # both subclass the protocol explicitly (mypy checks they implement it)
    assert RestoredState in type(seen[0]).__mro__ and RestoredState in OperatorRestore.__mro__
    assert seen[0].subtask == 0 and seen[0].parallelism == 1
    assert seen[0].same_parallelism is False, "two old subtasks, one new"

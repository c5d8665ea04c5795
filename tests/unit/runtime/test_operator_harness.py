"""lockgate.testing.OperatorHarness: one operator driven by hand, as a user's test drives
it (the examples of docs/testing.md): records with timestamps, watermarks firing
event-time timers (M-W6), processing time moved by the test, side outputs, a snapshot
through a state file's encoding restored into a new harness (M-T3) and at another
parallelism (M-R1), and bad calls refused saying what to do."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import lockgate as lg
from lockgate.testing import OperatorHarness, OperatorSnapshot

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

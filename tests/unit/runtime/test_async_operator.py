"""The async I/O operator driven by ``lockgate.testing.OperatorHarness`` (M-W7, M-T3,
M-T4, M-R1).

The test thread plays the task thread: completions arrive in the harness's mailbox, and
``run_mails_until`` runs mails until a condition holds. Requests wait on futures the
test resolves (``Gate``), so every completion order here is chosen by the test; nothing
sleeps. While the operator waits (a full queue, the end of input), the harness runs the
test's next action queued with ``when_waiting``, then waits for the mail it causes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import lockgate as lg
from lockgate.api.async_stream import AsyncDataStream
from lockgate.api.functions import AsyncFunction
from lockgate.core.elements import StreamStatus, Watermark
from lockgate.errors import ConfigurationError, UserFunctionError
from lockgate.runtime.async_runner import AsyncFunction as RunnerAsyncFunction
from lockgate.runtime.async_runner import AsyncTimeoutError
from lockgate.runtime.operators.async_io import AsyncRequestError, AsyncWaitOperator
from lockgate.testing import OperatorHarness, OutputBatch

WAIT_S = 5.0


class Gate:
    """Requests of ``gate.fn`` wait until the test releases them (``release``/``fail``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[Any, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._arrived: dict[Any, threading.Event] = {}
        self.started: list[Any] = []  # records, in the order their requests started

    def _event(self, record: Any) -> threading.Event:
        with self._lock:
            return self._arrived.setdefault(record, threading.Event())

    async def fn(self, record: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            self._futures[record] = (loop, future)
            self.started.append(record)
        self._event(record).set()
        return await future

    def arrived(self, record: Any) -> None:
        assert self._event(record).wait(WAIT_S), f"the request for {record!r} never started"

    def release(self, record: Any, results: Any = None) -> None:
        self.arrived(record)
        loop, future = self._futures[record]
        loop.call_soon_threadsafe(future.set_result, [record] if results is None else results)

    def fail(self, record: Any, error: BaseException) -> None:
        self.arrived(record)
        loop, future = self._futures[record]
        loop.call_soon_threadsafe(future.set_exception, error)

    def started_now(self) -> list[Any]:
        with self._lock:
            return list(self.started)


def events(h: OperatorHarness) -> list[tuple[Any, ...]]:
    """What the operator emitted, in order: ("r", record, timestamp), ("w", ts) and
    ("s", status)."""
    out: list[tuple[Any, ...]] = []
    for e in h.elements:
        if isinstance(e, OutputBatch):
            assert e.tag is None, "the async I/O operator has no side outputs"
            stamps = e.timestamps or [None] * len(e.records)
            out.extend(("r", row, ts) for row, ts in zip(e.records, stamps, strict=True))
        elif isinstance(e, Watermark):
            out.append(("w", e.timestamp))
        else:
            out.append(("s", e))
    return out


def take(h: OperatorHarness) -> list[tuple[Any, ...]]:
    """:func:`events`, and forget them."""
    out = events(h)
    h.take_elements()
    return out


def async_harness(
    fn: Any,
    *,
    capacity: int = 10,
    ordered: bool = True,
    timeout_ms: float = 60_000,
    restored: Any = None,
    subtask: int = 0,
    parallelism: int = 1,
) -> OperatorHarness:
    """One operator subtask, opened, with the test thread as its task thread."""
    h = OperatorHarness.for_async_wait(
        fn,
        timeout_ms=timeout_ms,
        capacity=capacity,
        ordered=ordered,
        subtask_index=subtask,
        parallelism=parallelism,
        name="lookup",
        uid="lookup",
        wait_timeout_s=WAIT_S,
    )
    return h.open(restored=restored)


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def harnesses() -> Any:
    made: list[OperatorHarness] = []

    def make(fn: Any, **kw: Any) -> OperatorHarness:
        h = async_harness(fn, **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def r(value: Any, ts: int | None = None) -> tuple[Any, ...]:
    return ("r", value, ts)


def w(ts: int) -> tuple[Any, ...]:
    return ("w", ts)


# ------------------------------------------------------------------------------ order


def test_ordered_results_leave_in_input_order_with_their_records_timestamps_M_W7(
    gate: Gate, harnesses: Any
) -> None:
    h = harnesses(gate.fn, ordered=True)
    h.process(["a", "b", "c"], timestamps=[5, 7, 9])
    gate.release("c", ["c1", "c2"])
    gate.release("b", [])
    h.run_mails_until(lambda: h.mails_run == 2)
    assert take(h) == [], "b and c completed, but a is in front of them"
    gate.release("a", ["a1"])
    h.run_mails_until(lambda: queue_of(h).is_empty())
    # each result keeps its record's timestamp; b had no results
    assert take(h) == [r("a1", 5), r("c1", 9), r("c2", 9)]


def queue_of(h: OperatorHarness) -> Any:
    return h.operator._queue


def test_records_without_timestamps_give_results_without_timestamps(
    gate: Gate, harnesses: Any
) -> None:
    h = harnesses(gate.fn)
    h.process([1, 2])
    gate.release(1)
    gate.release(2)
    h.run_mails_until(lambda: queue_of(h).is_empty())
    assert take(h) == [r(1), r(2)]


def test_unordered_results_leave_as_they_complete_but_never_across_a_watermark_M_W7(
    gate: Gate, harnesses: Any
) -> None:
    h = harnesses(gate.fn, ordered=False)
    h.process(["a", "b"], timestamps=[1, 2])
    h.process_watermark(2)
    h.process(["c"], timestamps=[3])
    assert take(h) == [], "the watermark waits for a and b"
    gate.release("c")
    gate.release("b")
    h.run_mails_until(lambda: len(events(h)) == 1)
    assert take(h) == [r("b", 2)], "b leaves before a (completion order); c waits"
    gate.release("a")
    h.run_mails_until(lambda: queue_of(h).is_empty())
    assert take(h) == [r("a", 1), w(2), r("c", 3)]


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_a_watermark_with_nothing_pending_in_front_leaves_at_once_M_W7(
    gate: Gate, harnesses: Any, ordered: bool
) -> None:
    h = harnesses(gate.fn, ordered=ordered)
    h.process_watermark(10)
    assert take(h) == [w(10)]
    h.process(["x"], timestamps=[11])
    h.process_watermark(12)
    assert take(h) == []
    gate.release("x")
    h.run_mails_until(lambda: queue_of(h).is_empty())
    assert take(h) == [r("x", 11), w(12)]


# ------------------------------------------------------------------------ backpressure


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_a_full_queue_makes_the_operator_wait_and_start_no_more_requests_M_W7(
    gate: Gate, harnesses: Any, ordered: bool
) -> None:
    h = harnesses(gate.fn, capacity=2, ordered=ordered)
    seen: list[list[Any]] = []

    def look_then_release(record: Any) -> Callable[[], None]:
        def act() -> None:
            gate.arrived(record)
            gate.arrived(record + 1)
            # the operator waits in this thread, so nothing else can have been submitted
            seen.append(gate.started_now())
            gate.release(record)

        return act

    # the batch does not fit: the operator waits with 0 and 1 in, then 1 and 2, ...
    h.when_waiting(*(look_then_release(i) for i in range(3)))
    h.process([0, 1, 2, 3, 4])
    assert h.waits == 1 and h.actions_left == 0, "one wait: each completion made room for the next"
    assert seen == [[0, 1], [0, 1, 2], [0, 1, 2, 3]], "never more requests than capacity"
    assert len(queue_of(h)) == 2
    gate.release(3)
    gate.release(4)
    h.run_mails_until(lambda: queue_of(h).is_empty())
    assert [e[1] for e in take(h)] == [0, 1, 2, 3, 4]


def test_a_watermark_takes_a_place_in_the_queue_too_M_W7(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn, capacity=2, ordered=True)
    h.process(["a"], timestamps=[1])
    h.process_watermark(1)
    h.when_waiting(lambda: gate.release("a"))
    h.process(["b"], timestamps=[2])  # a and the watermark fill the queue: b waits for room
    assert h.waits == 1
    assert take(h) == [r("a", 1), w(1)]
    gate.release("b")
    h.run_mails_until(lambda: queue_of(h).is_empty())
    assert take(h) == [r("b", 2)]


def test_held_back_completed_records_still_occupy_the_ordered_queue_M_W7(
    gate: Gate, harnesses: Any
) -> None:
    h = harnesses(gate.fn, capacity=2, ordered=True)
    h.process([0, 1])
    gate.release(1)
    h.run_mails_until(lambda: h.mails_run == 1)
    assert not queue_of(h).has_capacity()
    h.when_waiting(lambda: gate.release(0))
    h.process([2])
    assert take(h) == [r(0), r(1)]
    gate.arrived(2)
    assert gate.started_now() == [0, 1, 2]


# ------------------------------------------------------------------- failures, timeouts


def test_a_failed_request_fails_the_task_naming_the_record(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn)
    h.process([("order", 42)])
    gate.fail(("order", 42), ValueError("service down"))
    with pytest.raises(UserFunctionError) as err:
        h.run_mails_until(lambda: False)
    text = str(err.value)
    assert "operator 'lookup'" in text and "record ('order', 42) failed" in text
    assert "ValueError: service down" in text
    assert isinstance(err.value.error, AsyncRequestError)
    assert isinstance(err.value.__cause__, ValueError)
    assert take(h) == []


class Hangs(AsyncFunction):
    """Requests for odd records never end; even ones answer at once."""

    async def async_invoke(self, record: int) -> list[int]:
        if record % 2:
            await asyncio.get_running_loop().create_future()
        return [record]


class HangsWithFallback(Hangs):
    def timeout(self, record: int) -> list[Any]:
        return [f"fallback {record}"]


def test_a_request_past_its_timeout_fails_the_task_naming_the_record(harnesses: Any) -> None:
    h = harnesses(Hangs(), timeout_ms=20)
    h.process([3, 4])
    with pytest.raises(UserFunctionError) as err:
        h.run_mails_until(lambda: False)
    assert isinstance(err.value.error, AsyncTimeoutError)
    assert "record 3 did not complete within 20 ms" in str(err.value)
    assert take(h) == [], "4 completed but stays behind 3 in the ordered queue"


def test_a_timeout_fallback_supplies_the_results_in_place(harnesses: Any) -> None:
    h = harnesses(HangsWithFallback(), timeout_ms=20)
    h.process([1, 2, 3], timestamps=[10, 20, 30])
    h.run_mails_until(lambda: queue_of(h).is_empty())
    assert take(h) == [r("fallback 1", 10), r(2, 20), r("fallback 3", 30)]


# ----------------------------------------------------------------------- end of input


def test_finish_returns_once_every_entry_left(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn, ordered=False)
    h.process(["a", "b"])
    h.process_watermark(2**63 - 1)
    h.when_waiting(lambda: gate.release("b"), lambda: gate.release("a"))
    h.finish()
    assert take(h) == [r("b"), r("a"), w(2**63 - 1)]
    assert queue_of(h).is_empty()


def test_close_cancels_pending_requests_and_stops_the_loop_thread(gate: Gate) -> None:
    h = async_harness(gate.fn)
    h.process([1])
    gate.arrived(1)
    h.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("lockgate async io")]
    assert take(h) == []


# -------------------------------------------------------------------- stream statuses


def test_idle_waits_until_every_pending_result_left_M_W2(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn)
    h.process(["a"])
    h.set_idle(True)
    assert take(h) == [], "no record may follow IDLE downstream"
    gate.release("a")
    h.run_mails_until(lambda: len(events(h)) == 2)
    assert take(h) == [r("a"), ("s", StreamStatus.IDLE)]
    h.set_idle(False)
    assert take(h) == [("s", StreamStatus.ACTIVE)]


def test_active_cancels_a_held_idle(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn)
    h.process(["a"])
    h.set_idle(True)
    h.set_idle(False)
    gate.release("a")
    h.run_mails_until(lambda: queue_of(h).is_empty())
    assert take(h) == [r("a")], "downstream never saw IDLE, so needs no ACTIVE"


# ------------------------------------------------------------------------- checkpoints


def stored(payload: Any) -> list[Any]:
    return payload["function"]["async_io"]["inputs"]


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_the_snapshot_holds_every_input_whose_results_have_not_left_M_T3_M_T4(
    gate: Gate, harnesses: Any, ordered: bool
) -> None:
    h = harnesses(gate.fn, ordered=ordered)
    h.process(["a", "b"], timestamps=[1, 2])
    h.process_watermark(2)
    h.process(["c", "d"], timestamps=[3, 4])
    gate.release("b")  # complete; ordered: held back behind a
    gate.release("d")  # complete, held back behind a (and the watermark)
    h.run_mails_until(lambda: h.mails_run == 2)
    left = take(h)
    pending = h.begin_snapshot()
    if ordered:
        assert left == []
        expected = [
            ("record", "a", 1),
            ("record", "b", 2),
            ("watermark", 2),
            ("record", "c", 3),
            ("record", "d", 4),
        ]
    else:
        assert left == [r("b", 2)], "b left: its results are not in flight any more"
        expected = [("record", "a", 1), ("watermark", 2), ("record", "c", 3), ("record", "d", 4)]
    gate.release("a")
    h.run_mails_until(lambda: h.mails_run == 3)
    assert take(h)[:1] == [r("a", 1)]
    # processing after the synchronous part does not change the snapshot (M-T3)
    assert stored(pending.complete().state()) == expected


def test_an_empty_queue_still_writes_a_snapshot_M_T4(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn)
    assert stored(h.snapshot().state()) == []


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_a_restore_issues_the_stored_inputs_again_before_new_input_M_R1(
    gate: Gate, harnesses: Any, ordered: bool
) -> None:
    first = harnesses(gate.fn, ordered=ordered)
    first.process(["a", "b"], timestamps=[1, 2])
    first.process_watermark(2)
    first.process(["c"], timestamps=[3])
    gate.release("a")
    first.run_mails_until(lambda: len(events(first)) == 1)
    snapshot = first.snapshot()
    assert stored(snapshot.state()) == [("record", "b", 2), ("watermark", 2), ("record", "c", 3)]
    first.close()

    again = Gate()
    h = harnesses(again.fn, ordered=ordered, restored=snapshot)
    assert h.operator.current_watermark == 2, "a restored watermark is the operator's event time"
    assert again.started_now() == [], "nothing is issued (or emitted) inside open()"
    h.run_mails()  # the first mail issues them again
    again.arrived("b")
    again.arrived("c")
    assert again.started_now() == ["b", "c"]
    h.process(["d"], timestamps=[4])
    h.process_watermark(2)  # not past the restored watermark: ignored
    for v in ("d", "c", "b"):
        again.release(v)
    h.run_mails_until(lambda: queue_of(h).is_empty())
    assert again.started_now() == ["b", "c", "d"]
    # b before the restored watermark, c and d after it; each once
    assert take(h) == [r("b", 2), w(2)] + (
        [r("c", 3), r("d", 4)] if ordered else [r("d", 4), r("c", 3)]
    )


def test_restored_inputs_beyond_the_capacity_wait_in_order_before_new_input_M_R1(
    gate: Gate, harnesses: Any
) -> None:
    first = harnesses(gate.fn, capacity=4)
    first.process([0, 1, 2, 3])
    snapshot = first.snapshot()
    first.close()

    again = Gate()
    h = harnesses(again.fn, capacity=2, restored=snapshot)
    h.run_mails()
    again.arrived(0)
    again.arrived(1)
    assert again.started_now() == [0, 1], "as many as fit"
    h.when_waiting(
        *[
            lambda: again.release(0),
            lambda: again.release(1),
            lambda: again.release(2),
            lambda: again.release(3),
        ]
    )
    h.process([4])  # waits until 2 and 3 went in ahead of it
    assert again.started_now()[:4] == [0, 1, 2, 3]
    again.release(4)
    h.finish()
    assert [e[1] for e in take(h)] == [0, 1, 2, 3, 4]


def test_a_restore_at_another_parallelism_deals_out_records_once_and_drops_watermarks_M_R1(
    gate: Gate, harnesses: Any
) -> None:
    snapshots = []
    for subtask, values in enumerate([(0, 1, 2), (3, 4)]):
        h = harnesses(gate.fn, subtask=subtask, parallelism=2)
        h.process([values[0]], timestamps=[values[0]])
        h.process_watermark(values[0])
        h.process(list(values[1:]), timestamps=list(values[1:]))
        snapshots.append(h.snapshot())

    dealt = []
    for subtask in range(3):
        h = harnesses(Gate().fn, restored=snapshots, subtask=subtask, parallelism=3)
        dealt.append(stored(h.snapshot().state()))  # before the first mail issued them
    assert dealt == [
        [("record", 0, 0), ("record", 1, 1)],
        [("record", 2, 2), ("record", 3, 3)],
        [("record", 4, 4)],
    ]


def test_a_snapshot_while_waiting_for_room_mid_batch_is_refused(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn, capacity=1)
    errors: list[BaseException] = []

    def snapshot_now() -> None:
        try:
            h.snapshot(7)
        except RuntimeError as e:
            errors.append(e)
        gate.release(0)

    h.when_waiting(snapshot_now)
    h.process([0, 1])
    assert errors and "in the middle of a batch" in str(errors[0])


# ------------------------------------------------------------------------------ the API


async def lookup(record: Any) -> list[Any]:
    return [record]


def test_the_api_validates_its_arguments() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    stream = env.from_collection([1, 2])

    def sync_fn(record: Any) -> list[Any]:
        return [record]

    async def agen(record: Any) -> Any:
        yield record

    cases = [
        ((stream, sync_fn, 100), r"'sync_fn' is not an async def function"),
        ((stream, agen, 100), r"is an async generator"),
        ((stream, HangsWithFallback, 100), r"got the class HangsWithFallback; pass an instance"),
        ((stream, 42, 100), r"must be an async def function or an AsyncFunction"),
        ((stream, lookup, 0), r"timeout of AsyncDataStream.ordered_wait must be positive"),
        ((stream, lookup, -5), r"must be positive"),
        ((stream, lookup, "1s"), r"timeout .* must be a datetime.timedelta or an int"),
        ((stream, lookup, True), r"must be a datetime.timedelta or an int"),
        ((stream, lookup, timedelta(0)), r"must be positive"),
        (([1, 2], lookup, 100), r"needs a DataStream as its first argument, got list"),
    ]
    for args, message in cases:
        with pytest.raises(ConfigurationError, match=message):
            AsyncDataStream.ordered_wait(*args)
    for capacity in (0, -1, True, 1.5):
        with pytest.raises(
            ConfigurationError,
            match=r"capacity of AsyncDataStream.unordered_wait"
            r" must be an int >= 1",
        ):
            AsyncDataStream.unordered_wait(stream, lookup, 100, capacity=capacity)
    with pytest.raises(ConfigurationError, match=r"name must be a non-empty string"):
        AsyncDataStream.ordered_wait(stream, lookup, 100, name="")


def test_the_api_builds_an_unchained_operator_with_the_settings() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    out = AsyncDataStream.unordered_wait(
        env.from_collection([1]), lookup, timedelta(seconds=2), capacity=7, name="enrich"
    )
    t = out.transformation
    assert t.name == "enrich" and t.chainable is False
    assert t.factory is not None
    op = t.factory.create()
    assert isinstance(op, AsyncWaitOperator)
    assert (op.timeout_ms, op.capacity, op.ordered) == (2000.0, 7, False)
    assert AsyncFunction is RunnerAsyncFunction, "lockgate.api.functions re-exports it"

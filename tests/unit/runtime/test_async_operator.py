"""The async I/O operator driven directly (M-W7, M-T3, M-T4, M-R1).

The test thread plays the task thread: a real Mailbox where completions arrive, and a
``run_mail_until`` that runs mails until the operator's condition holds. Requests wait
on futures the test resolves (``Gate``), so every completion order here is chosen by
the test; nothing sleeps. While the operator waits (a full queue, the end of input),
the harness runs the test's next planned action, then waits for the mail it causes.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

import lockgate as lg
from lockgate.api.async_stream import AsyncDataStream
from lockgate.api.functions import AsyncFunction
from lockgate.core.batch import RowBatch
from lockgate.core.elements import StreamStatus, Watermark
from lockgate.errors import ConfigurationError, UserFunctionError
from lockgate.runtime.async_runner import AsyncFunction as RunnerAsyncFunction
from lockgate.runtime.async_runner import AsyncTimeoutError
from lockgate.runtime.mailbox import Mailbox
from lockgate.runtime.operators.async_io import AsyncRequestError, AsyncWaitOperator
from lockgate.runtime.operators.base import Output

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


class Recorder(Output):
    """What the operator emitted: ("r", record, timestamp), ("w", ts), ("s", status)."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def emit(self, batch: Any) -> None:
        stamps = batch.timestamps
        for i, row in enumerate(batch.rows):
            self.events.append(("r", row, None if stamps is None else int(stamps[i])))

    def emit_side(self, tag: str, batch: Any) -> None:
        raise AssertionError("the async I/O operator has no side outputs")

    def emit_element(self, element: Any) -> None:
        if isinstance(element, Watermark):
            self.events.append(("w", element.timestamp))
        else:
            self.events.append(("s", element))

    def take(self) -> list[tuple[Any, ...]]:
        events, self.events = self.events, []
        return events


class FakeRestore:
    """What an ``OperatorRestore`` offers, over in-memory payloads of the old subtasks."""

    def __init__(self, payloads: dict[int, Any], subtask: int, parallelism: int) -> None:
        self.payloads = payloads
        self.subtask = subtask
        self.same_parallelism = set(payloads) == set(range(parallelism))

    def own(self) -> Any:
        return copy.deepcopy(self.payloads.get(self.subtask))

    def by_subtask(self) -> dict[int, Any]:
        return {j: copy.deepcopy(p) for j, p in sorted(self.payloads.items())}

    def all(self) -> list[Any]:
        return list(self.by_subtask().values())


class Harness:
    """One operator subtask with the test thread as its task thread."""

    def __init__(
        self,
        fn: Any,
        *,
        capacity: int = 10,
        ordered: bool = True,
        timeout_ms: float = 60_000,
        restored: FakeRestore | None = None,
        subtask: int = 0,
        parallelism: int = 1,
    ) -> None:
        self.signal = threading.Event()
        self.mailbox = Mailbox(self.signal)
        self.plan: deque[Callable[[], None]] = deque()  # actions to run while waiting
        self.waits = 0  # how often the operator waited
        self.mails = 0  # how many mails ran (a completion is one)
        self.op = AsyncWaitOperator(fn, timeout_ms, capacity, ordered)
        ctx = lg.RuntimeContext(
            task_name="t",
            operator_name="lookup",
            operator_uid="lookup",
            subtask_index=subtask,
            parallelism=parallelism,
            max_parallelism=128,
        )
        ctx.mailbox = self.mailbox
        ctx.run_mail_until = self.run_mail_until
        self.out = Recorder()
        self.op.setup("lookup", "lookup", ctx, self.out)
        self.op.initialize_state(restored)
        self.op.open()

    def run_mail_until(self, done: Callable[[], bool]) -> None:
        """The task's wait: run mails until ``done()``; each turn first runs the next
        planned action, if any (the test's part while the operator waits)."""
        self.waits += 1
        while not done():
            self.signal.clear()
            self.mails += self.mailbox.run_pending()
            if done():
                return
            if self.plan:
                self.plan.popleft()()
            if not self.signal.wait(WAIT_S):
                pytest.fail(
                    f"the operator waited {WAIT_S}s and no mail came "
                    f"(planned actions left: {len(self.plan)})"
                )

    def run_mails(self) -> None:
        """Run the mails queued now (a turn of the task loop)."""
        self.mails += self.mailbox.run_pending()

    def until(self, predicate: Callable[[], bool]) -> None:
        """Run mails (as the task loop would between batches) until ``predicate()``."""
        saved, self.plan = self.plan, deque()
        try:
            self.run_mail_until(predicate)
        finally:
            self.plan = saved

    def records(self, *values: Any, stamps: list[int] | None = None) -> None:
        self.op.process_batch(
            RowBatch(list(values), None if stamps is None else np.asarray(stamps, dtype=np.int64))
        )

    def watermark(self, ts: int) -> None:
        self.op.process_watermark(Watermark(ts))

    def close(self) -> None:
        self.op.close()


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def harnesses() -> Any:
    made: list[Harness] = []

    def make(fn: Any, **kw: Any) -> Harness:
        h = Harness(fn, **kw)
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
    h.records("a", "b", "c", stamps=[5, 7, 9])
    gate.release("c", ["c1", "c2"])
    gate.release("b", [])
    h.until(lambda: h.mails == 2)
    assert h.out.take() == [], "b and c completed, but a is in front of them"
    gate.release("a", ["a1"])
    h.until(lambda: queue_of(h).is_empty())
    # each result keeps its record's timestamp; b had no results
    assert h.out.take() == [r("a1", 5), r("c1", 9), r("c2", 9)]


def queue_of(h: Harness) -> Any:
    return h.op._queue


def test_records_without_timestamps_give_results_without_timestamps(
    gate: Gate, harnesses: Any
) -> None:
    h = harnesses(gate.fn)
    h.records(1, 2)
    gate.release(1)
    gate.release(2)
    h.until(lambda: queue_of(h).is_empty())
    assert h.out.take() == [r(1), r(2)]


def test_unordered_results_leave_as_they_complete_but_never_across_a_watermark_M_W7(
    gate: Gate, harnesses: Any
) -> None:
    h = harnesses(gate.fn, ordered=False)
    h.records("a", "b", stamps=[1, 2])
    h.watermark(2)
    h.records("c", stamps=[3])
    assert h.out.take() == [], "the watermark waits for a and b"
    gate.release("c")
    gate.release("b")
    h.until(lambda: len(h.out.events) == 1)
    assert h.out.take() == [r("b", 2)], "b leaves before a (completion order); c waits"
    gate.release("a")
    h.until(lambda: queue_of(h).is_empty())
    assert h.out.take() == [r("a", 1), w(2), r("c", 3)]


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_a_watermark_with_nothing_pending_in_front_leaves_at_once_M_W7(
    gate: Gate, harnesses: Any, ordered: bool
) -> None:
    h = harnesses(gate.fn, ordered=ordered)
    h.watermark(10)
    assert h.out.take() == [w(10)]
    h.records("x", stamps=[11])
    h.watermark(12)
    assert h.out.take() == []
    gate.release("x")
    h.until(lambda: queue_of(h).is_empty())
    assert h.out.take() == [r("x", 11), w(12)]


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
    h.plan.extend(look_then_release(i) for i in range(3))
    h.records(0, 1, 2, 3, 4)
    assert h.waits == 1 and not h.plan, "one wait: each completion made room for the next"
    assert seen == [[0, 1], [0, 1, 2], [0, 1, 2, 3]], "never more requests than capacity"
    assert len(queue_of(h)) == 2
    gate.release(3)
    gate.release(4)
    h.until(lambda: queue_of(h).is_empty())
    assert [e[1] for e in h.out.take()] == [0, 1, 2, 3, 4]


def test_a_watermark_takes_a_place_in_the_queue_too_M_W7(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn, capacity=2, ordered=True)
    h.records("a", stamps=[1])
    h.watermark(1)
    h.plan.append(lambda: gate.release("a"))
    h.records("b", stamps=[2])  # a and the watermark fill the queue: b waits for room
    assert h.waits == 1
    assert h.out.take() == [r("a", 1), w(1)]
    gate.release("b")
    h.until(lambda: queue_of(h).is_empty())
    assert h.out.take() == [r("b", 2)]


def test_held_back_completed_records_still_occupy_the_ordered_queue_M_W7(
    gate: Gate, harnesses: Any
) -> None:
    h = harnesses(gate.fn, capacity=2, ordered=True)
    h.records(0, 1)
    gate.release(1)
    h.until(lambda: h.mails == 1)
    assert not queue_of(h).has_capacity()
    h.plan.append(lambda: gate.release(0))
    h.records(2)
    assert h.out.take() == [r(0), r(1)]
    gate.arrived(2)
    assert gate.started_now() == [0, 1, 2]


# ------------------------------------------------------------------- failures, timeouts


def test_a_failed_request_fails_the_task_naming_the_record(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn)
    h.records(("order", 42))
    gate.fail(("order", 42), ValueError("service down"))
    with pytest.raises(UserFunctionError) as err:
        h.until(lambda: False)
    text = str(err.value)
    assert "operator 'lookup'" in text and "record ('order', 42) failed" in text
    assert "ValueError: service down" in text
    assert isinstance(err.value.error, AsyncRequestError)
    assert isinstance(err.value.__cause__, ValueError)
    assert h.out.take() == []


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
    h.records(3, 4)
    with pytest.raises(UserFunctionError) as err:
        h.until(lambda: False)
    assert isinstance(err.value.error, AsyncTimeoutError)
    assert "record 3 did not complete within 20 ms" in str(err.value)
    assert h.out.take() == [], "4 completed but stays behind 3 in the ordered queue"


def test_a_timeout_fallback_supplies_the_results_in_place(harnesses: Any) -> None:
    h = harnesses(HangsWithFallback(), timeout_ms=20)
    h.records(1, 2, 3, stamps=[10, 20, 30])
    h.until(lambda: queue_of(h).is_empty())
    assert h.out.take() == [r("fallback 1", 10), r(2, 20), r("fallback 3", 30)]


# ----------------------------------------------------------------------- end of input


def test_finish_returns_once_every_entry_left(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn, ordered=False)
    h.records("a", "b")
    h.watermark(2**63 - 1)
    h.plan.extend([lambda: gate.release("b"), lambda: gate.release("a")])
    h.op.finish()
    assert h.out.take() == [r("b"), r("a"), w(2**63 - 1)]
    assert queue_of(h).is_empty()


def test_close_cancels_pending_requests_and_stops_the_loop_thread(gate: Gate) -> None:
    h = Harness(gate.fn)
    h.records(1)
    gate.arrived(1)
    h.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("lockgate async io")]
    assert h.out.take() == []


# -------------------------------------------------------------------- stream statuses


def test_idle_waits_until_every_pending_result_left_M_W2(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn)
    h.records("a")
    h.op.process_status(StreamStatus.IDLE)
    assert h.out.take() == [], "no record may follow IDLE downstream"
    gate.release("a")
    h.until(lambda: len(h.out.events) == 2)
    assert h.out.take() == [r("a"), ("s", StreamStatus.IDLE)]
    h.op.process_status(StreamStatus.ACTIVE)
    assert h.out.take() == [("s", StreamStatus.ACTIVE)]


def test_active_cancels_a_held_idle(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn)
    h.records("a")
    h.op.process_status(StreamStatus.IDLE)
    h.op.process_status(StreamStatus.ACTIVE)
    gate.release("a")
    h.until(lambda: queue_of(h).is_empty())
    assert h.out.take() == [r("a")], "downstream never saw IDLE, so needs no ACTIVE"


# ------------------------------------------------------------------------- checkpoints


def snapshot_payload(h: Harness) -> Any:
    return h.op.snapshot_state(1).materialize()


def stored(payload: Any) -> list[Any]:
    return payload["function"]["async_io"]["inputs"]


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_the_snapshot_holds_every_input_whose_results_have_not_left_M_T3_M_T4(
    gate: Gate, harnesses: Any, ordered: bool
) -> None:
    h = harnesses(gate.fn, ordered=ordered)
    h.records("a", "b", stamps=[1, 2])
    h.watermark(2)
    h.records("c", "d", stamps=[3, 4])
    gate.release("b")  # complete; ordered: held back behind a
    gate.release("d")  # complete, held back behind a (and the watermark)
    h.until(lambda: h.mails == 2)
    left = h.out.take()
    view = h.op.snapshot_state(1)
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
    h.until(lambda: h.mails == 3)
    assert h.out.take()[:1] == [r("a", 1)]
    # processing after the synchronous part does not change the snapshot (M-T3)
    assert stored(view.materialize()) == expected


def test_an_empty_queue_still_writes_a_snapshot_M_T4(gate: Gate, harnesses: Any) -> None:
    h = harnesses(gate.fn)
    assert stored(snapshot_payload(h)) == []


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_a_restore_issues_the_stored_inputs_again_before_new_input_M_R1(
    gate: Gate, harnesses: Any, ordered: bool
) -> None:
    first = harnesses(gate.fn, ordered=ordered)
    first.records("a", "b", stamps=[1, 2])
    first.watermark(2)
    first.records("c", stamps=[3])
    gate.release("a")
    first.until(lambda: len(first.out.events) == 1)
    payload = snapshot_payload(first)
    assert stored(payload) == [("record", "b", 2), ("watermark", 2), ("record", "c", 3)]
    first.close()

    again = Gate()
    h = harnesses(again.fn, ordered=ordered, restored=FakeRestore({0: payload}, 0, 1))
    assert h.op.current_watermark == 2, "a restored watermark is the operator's event time"
    assert again.started_now() == [], "nothing is issued (or emitted) inside open()"
    h.run_mails()  # the first mail issues them again
    again.arrived("b")
    again.arrived("c")
    assert again.started_now() == ["b", "c"]
    h.records("d", stamps=[4])
    h.watermark(2)  # not past the restored watermark: ignored
    for v in ("d", "c", "b"):
        again.release(v)
    h.until(lambda: queue_of(h).is_empty())
    assert again.started_now() == ["b", "c", "d"]
    # b before the restored watermark, c and d after it; each once
    assert h.out.take() == [r("b", 2), w(2)] + (
        [r("c", 3), r("d", 4)] if ordered else [r("d", 4), r("c", 3)]
    )


def test_restored_inputs_beyond_the_capacity_wait_in_order_before_new_input_M_R1(
    gate: Gate, harnesses: Any
) -> None:
    first = harnesses(gate.fn, capacity=4)
    first.records(0, 1, 2, 3)
    payload = snapshot_payload(first)
    first.close()

    again = Gate()
    h = harnesses(again.fn, capacity=2, restored=FakeRestore({0: payload}, 0, 1))
    h.run_mails()
    again.arrived(0)
    again.arrived(1)
    assert again.started_now() == [0, 1], "as many as fit"
    h.plan.extend(
        [
            lambda: again.release(0),
            lambda: again.release(1),
            lambda: again.release(2),
            lambda: again.release(3),
        ]
    )
    h.records(4)  # waits until 2 and 3 went in ahead of it
    assert again.started_now()[:4] == [0, 1, 2, 3]
    again.release(4)
    h.op.finish()
    assert [e[1] for e in h.out.take()] == [0, 1, 2, 3, 4]


def test_a_restore_at_another_parallelism_deals_out_records_once_and_drops_watermarks_M_R1(
    gate: Gate, harnesses: Any
) -> None:
    payloads = {}
    for subtask, values in enumerate([(0, 1, 2), (3, 4)]):
        h = harnesses(gate.fn, subtask=subtask, parallelism=2)
        h.records(values[0], stamps=[values[0]])
        h.watermark(values[0])
        h.records(*values[1:], stamps=list(values[1:]))
        payloads[subtask] = snapshot_payload(h)

    dealt = []
    for subtask in range(3):
        h = harnesses(
            Gate().fn, restored=FakeRestore(payloads, subtask, 3), subtask=subtask, parallelism=3
        )
        dealt.append(stored(snapshot_payload(h)))  # before the first mail issued them
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
            h.op.snapshot_state(7)
        except RuntimeError as e:
            errors.append(e)
        gate.release(0)

    h.plan.append(snapshot_now)
    h.records(0, 1)
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

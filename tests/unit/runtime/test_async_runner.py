"""The request runner of async I/O (M-W7): user ``async def`` functions on an event loop
thread, completions handed back to the task thread through its mailbox, per-record timeouts
that fail the record or call the user's fallback, and a close that cancels what is pending.

No test sleeps: requests wait on futures the test resolves, and the test thread waits for
mails the way a task thread does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from lockgate.core.elements import Watermark
from lockgate.errors import ConfigurationError
from lockgate.runtime.async_queue import Completion, UnorderedElementQueue
from lockgate.runtime.async_runner import AsyncFunction, AsyncRunner, AsyncTimeoutError
from lockgate.runtime.mailbox import Mailbox

WAIT_S = 5.0


class TaskThread:
    """The test thread playing a task thread: a real Mailbox it runs when signalled."""

    def __init__(self) -> None:
        self.signal = threading.Event()
        self.mailbox = Mailbox(self.signal)
        self.completions: dict[Any, Completion] = {}
        self.order: list[Any] = []
        self.threads: set[threading.Thread] = set()

    def on_complete(self, record: Any) -> Callable[[Completion], None]:
        def done(completion: Completion) -> None:
            self.threads.add(threading.current_thread())
            self.completions[record] = completion
            self.order.append(record)

        return done

    def run_until(self, predicate: Callable[[], bool], what: str) -> None:
        while not predicate():
            if not self.signal.wait(WAIT_S):
                pytest.fail(f"no mail arrived within {WAIT_S}s while waiting until {what}")
            self.signal.clear()
            self.mailbox.run_pending()

    def completion(self, record: Any) -> Completion:
        self.run_until(lambda: record in self.completions, f"{record!r} completed")
        return self.completions[record]


class Gate:
    """Lets a test decide when each request of an async function finishes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[Any, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._arrived: dict[Any, threading.Event] = {}
        self.cancelled: dict[Any, threading.Event] = {}

    def _event(self, table: dict[Any, threading.Event], record: Any) -> threading.Event:
        with self._lock:
            return table.setdefault(record, threading.Event())

    async def wait(self, record: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            self._futures[record] = (loop, future)
        self._event(self._arrived, record).set()
        try:
            return await future
        except asyncio.CancelledError:
            self._event(self.cancelled, record).set()
            raise

    def arrived(self, record: Any) -> None:
        assert self._event(self._arrived, record).wait(WAIT_S), f"{record!r} never started"

    def release(self, record: Any, value: Any) -> None:
        self.arrived(record)
        loop, future = self._futures[record]
        loop.call_soon_threadsafe(future.set_result, value)

    def raise_in(self, record: Any, error: BaseException) -> None:
        self.arrived(record)
        loop, future = self._futures[record]
        loop.call_soon_threadsafe(future.set_exception, error)

    def was_cancelled(self, record: Any) -> bool:
        return self._event(self.cancelled, record).wait(WAIT_S)


@pytest.fixture
def task() -> TaskThread:
    return TaskThread()


@pytest.fixture
def gate() -> Gate:
    return Gate()


def async_io_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("lockgate async io")]


# ----------------------------------------------------------------------------- results


def test_the_results_of_an_async_def_function_reach_on_complete_in_the_task_thread(
    task: TaskThread,
) -> None:
    loop_threads: list[threading.Thread] = []

    async def lookup(record: int) -> list[int]:
        loop_threads.append(threading.current_thread())
        return [record, record * 10]

    with AsyncRunner(lookup, task.mailbox.put, name="lookup") as runner:
        runner.submit(4, task.on_complete(4))
        assert task.completion(4) == Completion.success([4, 40])
    assert task.threads == {threading.current_thread()}
    assert loop_threads[0].name == "lockgate async io lookup"
    assert loop_threads[0] is not threading.current_thread()


def test_completions_arrive_in_the_order_requests_finish_not_the_order_they_started(
    task: TaskThread, gate: Gate
) -> None:
    async def fn(record: str) -> list[str]:
        return [await gate.wait(record)]

    with AsyncRunner(fn, task.mailbox.put) as runner:
        for record in ["a", "b", "c"]:
            runner.submit(record, task.on_complete(record))
        gate.release("c", "C")
        task.completion("c")
        gate.release("a", "A")
        task.completion("a")
        gate.release("b", "B")
        task.completion("b")
    assert task.order == ["c", "a", "b"]
    assert [task.completions[k].results for k in "abc"] == [["A"], ["B"], ["C"]]


@pytest.mark.parametrize(
    ("returned", "results"),
    [(None, []), ((x for x in [1, 2]), [1, 2]), ((3,), [3]), ({"k"}, ["k"])],
)
def test_a_function_may_return_any_iterable_of_results_or_none_for_no_results(
    task: TaskThread, returned: Any, results: list[Any]
) -> None:
    async def fn(record: Any) -> Any:
        return returned

    with AsyncRunner(fn, task.mailbox.put) as runner:
        runner.submit("x", task.on_complete("x"))
        assert task.completion("x") == Completion.success(results)


@pytest.mark.parametrize("returned", ["text", b"bytes", {"a": 1}, 5])
def test_a_function_returning_a_single_record_fails_the_record_with_a_type_error(
    task: TaskThread, returned: Any
) -> None:
    async def fn(record: Any) -> Any:
        return returned

    with AsyncRunner(fn, task.mailbox.put) as runner:
        runner.submit("x", task.on_complete("x"))
        error = task.completion("x").error
    assert isinstance(error, TypeError)
    assert "iterable of records" in str(error)


def test_an_exception_from_the_function_fails_the_record_with_that_exception(
    task: TaskThread, gate: Gate
) -> None:
    async def fn(record: str) -> list[str]:
        return [await gate.wait(record)]

    boom = ConnectionError("backend down")
    with AsyncRunner(fn, task.mailbox.put) as runner:
        runner.submit("a", task.on_complete("a"))
        runner.submit("b", task.on_complete("b"))
        gate.raise_in("a", boom)
        assert task.completion("a").error is boom
        gate.release("b", "B")
        assert task.completion("b") == Completion.success(["B"])  # others carry on


def test_a_callable_that_returns_no_awaitable_fails_the_record_with_a_type_error(
    task: TaskThread,
) -> None:
    with AsyncRunner(lambda record: [record], task.mailbox.put) as runner:
        runner.submit("a", task.on_complete("a"))
        error = task.completion("a").error
    assert isinstance(error, TypeError) and "awaitable" in str(error)


def test_a_lambda_returning_a_coroutine_runs_like_an_async_def_function(task: TaskThread) -> None:
    async def double(x: int) -> list[int]:
        return [2 * x]

    with AsyncRunner(lambda record: double(record), task.mailbox.put) as runner:
        runner.submit(3, task.on_complete(3))
        assert task.completion(3) == Completion.success([6])


def test_an_async_function_object_runs_its_async_invoke_method(task: TaskThread) -> None:
    class Enrich(AsyncFunction):
        def __init__(self) -> None:
            self.suffix = "!"

        async def async_invoke(self, record: str) -> Iterable[str]:
            return [record + self.suffix]

    with AsyncRunner(Enrich(), task.mailbox.put) as runner:
        runner.submit("hi", task.on_complete("hi"))
        assert task.completion("hi") == Completion.success(["hi!"])


def test_an_async_function_without_async_invoke_fails_the_record(task: TaskThread) -> None:
    with AsyncRunner(AsyncFunction(), task.mailbox.put) as runner:
        runner.submit("a", task.on_complete("a"))
        assert isinstance(task.completion("a").error, NotImplementedError)


# ----------------------------------------------------------------------------- timeouts


def test_a_request_past_its_timeout_is_cancelled_and_fails_with_an_error_naming_the_record(
    task: TaskThread, gate: Gate
) -> None:
    with AsyncRunner(gate.wait, task.mailbox.put, timeout_ms=1) as runner:
        runner.submit("order-17", task.on_complete("order-17"))
        error = task.completion("order-17").error
        assert gate.was_cancelled("order-17")
    assert isinstance(error, AsyncTimeoutError)
    assert isinstance(error, TimeoutError)
    assert "'order-17'" in str(error) and "1 ms" in str(error)
    assert error.record == "order-17"


def test_a_timed_out_request_uses_the_results_of_the_users_timeout_fallback(
    task: TaskThread, gate: Gate
) -> None:
    class WithFallback(AsyncFunction):
        async def async_invoke(self, record: str) -> list[str]:
            return [await gate.wait(record)]

        def timeout(self, record: str) -> list[str]:
            return [f"default for {record}"]

    with AsyncRunner(WithFallback(), task.mailbox.put, timeout_ms=1) as runner:
        runner.submit("a", task.on_complete("a"))
        assert task.completion("a") == Completion.success(["default for a"])
        assert gate.was_cancelled("a")


def test_a_timeout_fallback_may_be_async_and_its_exception_fails_the_record(
    task: TaskThread, gate: Gate
) -> None:
    class AsyncFallback(AsyncFunction):
        async def async_invoke(self, record: str) -> list[str]:
            return [await gate.wait(record)]

        async def timeout(self, record: str) -> list[str]:
            if record == "bad":
                raise LookupError("no default for bad")
            return ["cached"]

    with AsyncRunner(AsyncFallback(), task.mailbox.put, timeout_ms=1) as runner:
        runner.submit("ok", task.on_complete("ok"))
        runner.submit("bad", task.on_complete("bad"))
        assert task.completion("ok") == Completion.success(["cached"])
        assert isinstance(task.completion("bad").error, LookupError)


def test_a_result_that_arrives_within_the_timeout_wins_and_the_fallback_is_not_called(
    task: TaskThread, gate: Gate
) -> None:
    calls: list[str] = []

    class WithFallback(AsyncFunction):
        async def async_invoke(self, record: str) -> list[str]:
            return [await gate.wait(record)]

        def timeout(self, record: str) -> list[str]:
            calls.append(record)
            return ["fallback"]

    with AsyncRunner(WithFallback(), task.mailbox.put, timeout_ms=60_000) as runner:
        runner.submit("a", task.on_complete("a"))
        gate.release("a", "A")
        assert task.completion("a") == Completion.success(["A"])
    assert calls == []


def test_a_timeout_error_raised_by_the_function_itself_is_not_mistaken_for_the_timeout(
    task: TaskThread,
) -> None:
    calls: list[str] = []

    class Raises(AsyncFunction):
        async def async_invoke(self, record: str) -> list[str]:
            raise TimeoutError("the backend's own timeout")

        def timeout(self, record: str) -> list[str]:
            calls.append(record)
            return ["fallback"]

    with AsyncRunner(Raises(), task.mailbox.put, timeout_ms=60_000) as runner:
        runner.submit("a", task.on_complete("a"))
        error = task.completion("a").error
    assert type(error) is TimeoutError and calls == []


def test_user_code_cancelling_its_own_request_or_fallback_fails_the_record(
    task: TaskThread, gate: Gate
) -> None:
    class CancelsItself(AsyncFunction):
        async def async_invoke(self, record: str) -> list[str]:
            if record == "invoke":
                raise asyncio.CancelledError()
            return [await gate.wait(record)]

        async def timeout(self, record: str) -> list[str]:
            raise asyncio.CancelledError()

    with AsyncRunner(CancelsItself(), task.mailbox.put, timeout_ms=1) as runner:
        runner.submit("invoke", task.on_complete("invoke"))
        runner.submit("fallback", task.on_complete("fallback"))
        for record in ["invoke", "fallback"]:
            error = task.completion(record).error
            assert isinstance(error, RuntimeError) and "cancelled by user code" in str(error)


# ------------------------------------------------------------------------------- close


def test_close_cancels_pending_requests_delivers_nothing_more_and_ends_the_loop_thread(
    task: TaskThread, gate: Gate
) -> None:
    runner = AsyncRunner(gate.wait, task.mailbox.put, name="closing")
    runner.start()
    runner.submit("a", task.on_complete("a"))
    runner.submit("b", task.on_complete("b"))
    gate.arrived("a")
    gate.arrived("b")
    runner.close()
    assert gate.was_cancelled("a") and gate.was_cancelled("b")
    assert async_io_threads() == []
    task.mailbox.run_pending()
    assert task.completions == {}
    runner.close()  # idempotent


def test_a_completion_posted_before_close_is_not_delivered_after_close(task: TaskThread) -> None:
    async def fn(record: str) -> list[str]:
        return [record]

    runner = AsyncRunner(fn, task.mailbox.put)
    runner.start()
    runner.submit("a", task.on_complete("a"))
    assert task.signal.wait(WAIT_S)  # the completion is in the mailbox, not yet run
    runner.close()
    assert task.mailbox.run_pending() == 1
    assert task.completions == {}


def test_close_also_cancels_tasks_the_users_function_started(task: TaskThread) -> None:
    background_cancelled = threading.Event()
    started = threading.Event()

    async def forever() -> None:
        try:
            started.set()
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            background_cancelled.set()
            raise

    keep: list[asyncio.Task[None]] = []

    async def fn(record: str) -> list[str]:
        keep.append(asyncio.get_running_loop().create_task(forever()))
        return [record]

    runner = AsyncRunner(fn, task.mailbox.put)
    runner.start()
    runner.submit("a", task.on_complete("a"))
    task.completion("a")
    assert started.wait(WAIT_S)
    runner.close()
    assert background_cancelled.is_set()
    assert async_io_threads() == []


def test_a_runner_closed_before_it_started_has_no_thread_and_cannot_start(task: TaskThread) -> None:
    async def fn(record: Any) -> list[Any]:
        return []

    runner = AsyncRunner(fn, task.mailbox.put)
    runner.close()
    with pytest.raises(RuntimeError, match="closed"):
        runner.start()
    assert async_io_threads() == []


def test_submitting_before_start_or_after_close_is_refused(task: TaskThread) -> None:
    async def fn(record: Any) -> list[Any]:
        return []

    runner = AsyncRunner(fn, task.mailbox.put)
    with pytest.raises(RuntimeError, match="start"):
        runner.submit(1, task.on_complete(1))
    runner.start()
    with pytest.raises(RuntimeError, match="already"):
        runner.start()
    runner.close()
    with pytest.raises(RuntimeError, match="closed"):
        runner.submit(1, task.on_complete(1))


# -------------------------------------------------------------------------- bad input


def sync_lookup(record: Any) -> list[Any]:
    return [record]


async def agen_lookup(record: Any) -> Any:
    yield record


@pytest.mark.parametrize(
    "fn",
    [42, "lookup", sync_lookup, agen_lookup],
    ids=["int", "str", "sync-def", "async-generator"],
)
def test_a_runner_rejects_what_is_not_an_async_function(task: TaskThread, fn: Any) -> None:
    with pytest.raises(ConfigurationError, match="async"):
        AsyncRunner(fn, task.mailbox.put)


@pytest.mark.parametrize("timeout_ms", [0, -5, True, "10", float("nan"), float("inf")])
def test_a_runner_rejects_a_timeout_that_is_not_a_positive_number_of_ms(
    task: TaskThread, timeout_ms: Any
) -> None:
    async def fn(record: Any) -> list[Any]:
        return []

    with pytest.raises(ConfigurationError, match="timeout"):
        AsyncRunner(fn, task.mailbox.put, timeout_ms=timeout_ms)


def test_a_runner_rejects_a_post_that_is_not_callable() -> None:
    async def fn(record: Any) -> list[Any]:
        return []

    with pytest.raises(ConfigurationError, match="post"):
        AsyncRunner(fn, None)  # type: ignore[arg-type]


# ------------------------------------------------------------- with the queue (M-W7)


def test_m_w7_runner_completions_settle_queue_entries_and_a_watermark_waits_for_its_segment(
    task: TaskThread, gate: Gate
) -> None:
    """How the operator will combine the two: submit per entry, settle in the mail."""
    queue = UnorderedElementQueue(4)
    emitted: list[Any] = []
    settled: list[Any] = []

    class Out:
        def emit_results(self, record: Any, results: list[Any]) -> None:
            emitted.extend(results)

        def emit_watermark(self, watermark: Watermark) -> None:
            emitted.append(watermark)

    def settle(entry: Any) -> Callable[[Completion], None]:
        def done(completion: Completion) -> None:
            entry.settle(completion)
            settled.append(entry.record)
            queue.emit_completed(Out())

        return done

    async def fn(record: str) -> list[str]:
        return [await gate.wait(record)]

    with AsyncRunner(fn, task.mailbox.put) as runner:
        runner.submit("a", settle(queue.add_record("a")))
        queue.add_watermark(Watermark(9))
        queue.emit_completed(Out())
        runner.submit("b", settle(queue.add_record("b")))
        gate.release("b", "B")
        task.run_until(lambda: settled == ["b"], "b completed")
        assert emitted == []  # b is behind the watermark, which is behind a
        gate.release("a", "A")
        task.run_until(lambda: queue.is_empty(), "the queue drained")
    assert emitted == ["A", Watermark(9), "B"]

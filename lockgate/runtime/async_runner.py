"""Runs the async I/O requests of one operator subtask (M-W7).

An :class:`AsyncRunner` owns an asyncio event loop in a background thread
(``"lockgate async io <name>"``). The task thread hands it records with
:meth:`AsyncRunner.submit`; each record's request runs the user's ``async def``
function on the loop. When a request ends, its :class:`Completion` is handed
back to the task thread through ``post`` (the task's mailbox): the ``on_complete``
callback given to ``submit`` always runs in whatever thread runs posted actions,
never in the loop thread.

Guarantees:

* every submitted request ends with exactly one completion, unless the runner is
  closed first: results (``fn`` returned an iterable, or None for no results), or
  an error (``fn`` raised, returned something that is not an iterable of records,
  or ran past the timeout without a user fallback);
* a request that runs longer than ``timeout_ms`` (processing time, measured from
  the moment the loop starts it) is cancelled; then the function's
  ``timeout(record)`` fallback supplies the results, or, without one, the record
  fails with an :class:`AsyncTimeoutError` naming it;
* after :meth:`AsyncRunner.close` returns, every pending request (and every other
  task on the loop) has been cancelled, the loop thread has ended, and no
  ``on_complete`` runs any more, not even one posted earlier and not yet run (close
  from the thread that runs posted actions, as a task does);
* user code that cancels its own request (or its timeout fallback) fails the record.

The runner neither opens nor closes the user function: the operator does, around
``start()`` and ``close()``.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import reprlib
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, LockgateError
from .async_queue import Completion

if TYPE_CHECKING:
    from .context import RuntimeContext

#: results a function returns by mistake for one record (it must return an iterable of them)
_SINGLE_RECORDS = (str, bytes, dict)

_record_repr = reprlib.Repr()
_record_repr.maxstring = 60
_record_repr.maxother = 60


def describe_record(record: Any) -> str:
    """A short repr of ``record`` for messages."""
    return _record_repr.repr(record)


class AsyncTimeoutError(LockgateError, TimeoutError):
    """An async I/O request did not complete within its timeout."""

    def __init__(self, record: Any, timeout_ms: float | None = None) -> None:
        within = "" if timeout_ms is None else f" within {timeout_ms:g} ms"
        super().__init__(
            f"the async I/O request for record {describe_record(record)} did not complete"
            f"{within}; raise the timeout or override AsyncFunction.timeout(record) to "
            f"supply results instead"
        )
        self.record = record
        self.timeout_ms = timeout_ms

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.record, self.timeout_ms))


class AsyncFunction:
    """Base class of async I/O functions with a lifecycle or a timeout fallback.

    ``async_invoke(record)`` returns (or is a coroutine resolving to) an iterable of
    results for ``record``, or None for none. ``timeout(record)``, called when the
    request ran past the timeout (the request is cancelled first), returns the
    results to use instead (an iterable, or an awaitable of one); by default it
    fails the record with :class:`AsyncTimeoutError`. ``open(ctx)`` and ``close()``
    run in the task thread, before the first and after the last request.
    """

    def open(self, ctx: RuntimeContext) -> None:
        """Called once per subtask before any record."""

    def close(self) -> None:
        """Called once per subtask after the last request (also after a failure)."""

    async def async_invoke(self, record: Any) -> Iterable[Any] | None:
        raise NotImplementedError(
            f"{type(self).__name__} must implement async def async_invoke(self, record)"
        )

    def timeout(self, record: Any) -> Iterable[Any] | Awaitable[Iterable[Any] | None] | None:
        raise AsyncTimeoutError(record)


def _resolve(fn: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any] | None]:
    """The request function and the user's timeout fallback (None: fail the record)."""
    if isinstance(fn, AsyncFunction):
        fallback = fn.timeout if type(fn).timeout is not AsyncFunction.timeout else None
        return fn.async_invoke, fallback
    invoke = getattr(fn, "async_invoke", None)
    if callable(invoke) and not inspect.isroutine(fn):
        fallback = getattr(fn, "timeout", None)
        return invoke, fallback if callable(fallback) else None
    if not callable(fn):
        raise ConfigurationError(
            f"an async I/O function must be an async def function or an AsyncFunction, "
            f"got {type(fn).__name__}"
        )
    if inspect.isasyncgenfunction(fn):
        raise ConfigurationError(
            f"{getattr(fn, '__name__', fn)!r} is an async generator; async I/O needs an "
            f"async def function that returns a list of results"
        )
    if inspect.isfunction(fn) and not inspect.iscoroutinefunction(fn) and fn.__name__ != "<lambda>":
        raise ConfigurationError(
            f"{fn.__name__!r} is not an async def function; async I/O runs "
            f"'async def {fn.__name__}(record)' functions"
        )
    return fn, None


def _check_timeout(timeout_ms: object) -> float | None:
    if timeout_ms is None:
        return None
    if (
        isinstance(timeout_ms, bool)
        or not isinstance(timeout_ms, (int, float))
        or not math.isfinite(timeout_ms)
        or timeout_ms <= 0
    ):
        raise ConfigurationError(
            f"the async I/O timeout must be a positive number of milliseconds or None, "
            f"got {timeout_ms!r}"
        )
    return float(timeout_ms)


async def _resolve_results(value: Any, what: str) -> list[Any]:
    """``value`` (an iterable, None, or an awaitable of those) as a list of results."""
    if inspect.isawaitable(value):
        value = await value
    if value is None:
        return []
    if isinstance(value, _SINGLE_RECORDS) or not isinstance(value, Iterable):
        raise TypeError(
            f"{what} must return an iterable of records (or None), but returned a "
            f"{type(value).__name__} ({describe_record(value)}); wrap a single record "
            f"in a list"
        )
    return list(value)


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned task's outcome as seen (no 'exception never retrieved' log)."""
    if not task.cancelled():
        task.exception()


class AsyncRunner:
    """Runs ``fn``'s requests on an event loop thread; completions go through ``post``.

    ``fn``: an ``async def fn(record)`` function (or any callable returning an
    awaitable), or an :class:`AsyncFunction`. ``post(action)``: runs ``action`` in
    the task thread later (e.g. ``Mailbox.put``); it is called from the loop
    thread. ``timeout_ms``: per request, None for no timeout.
    ``close_grace_s``: how long :meth:`close` waits for cancelled requests to end.
    """

    def __init__(
        self,
        fn: Any,
        post: Callable[[Callable[[], None]], object],
        *,
        timeout_ms: float | None = None,
        name: str = "async",
        close_grace_s: float = 5.0,
    ) -> None:
        if not callable(post):
            raise ConfigurationError(f"post must be callable, got {type(post).__name__}")
        self._invoke, self._fallback = _resolve(fn)
        self._post = post
        self.timeout_ms = _check_timeout(timeout_ms)
        self.name = name
        if (
            isinstance(close_grace_s, bool)
            or not isinstance(close_grace_s, (int, float))
            or not math.isfinite(close_grace_s)
            or close_grace_s < 0
        ):
            raise ConfigurationError(
                f"close_grace_s must be a non-negative number of seconds, got {close_grace_s!r}"
            )
        self._close_grace_s = float(close_grace_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # strong references to the loop's tasks (asyncio keeps only weak ones)
        self._requests: set[asyncio.Future[Any]] = set()
        self._closed = False
        self._closing = False  # set on the loop thread when close() cancels its tasks
        self._lock = threading.Lock()

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the loop thread. Call once, before :meth:`submit`."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the async runner was closed; it cannot start again")
            if self._loop is not None:
                raise RuntimeError("the async runner was already started")
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._thread = threading.Thread(
                target=self._run_loop,
                args=(loop,),
                name=f"lockgate async io {self.name}",
                daemon=True,
            )
            self._thread.start()

    def __enter__(self) -> AsyncRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel every pending request, stop the loop and wait for its thread to end.
        Idempotent. No ``on_complete`` runs after this returns."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread is threading.current_thread():
            raise RuntimeError(
                "close() the async runner from the task thread, not from its own event loop"
            )
        if not loop.is_closed():
            cancel = self._cancel_requests()
            try:
                cancelled = asyncio.run_coroutine_threadsafe(cancel, loop)
            except RuntimeError:  # the loop closed meanwhile (a concurrent close())
                cancel.close()
            else:
                cancelled.result()
                loop.call_soon_threadsafe(loop.stop)
        thread.join()

    @property
    def closed(self) -> bool:
        return self._closed

    def _run_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(self._shutdown_executor(loop))
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    async def _shutdown_executor(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            await asyncio.wait_for(loop.shutdown_default_executor(), self._close_grace_s)
        except asyncio.TimeoutError:
            pass

    async def _cancel_requests(self) -> None:
        """On the loop: cancel every task (requests and whatever user code started) and
        give them the grace period to end."""
        self._closing = True
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self._close_grace_s)

    # requests --------------------------------------------------------------------------
    def submit(self, record: Any, on_complete: Callable[[Completion], None]) -> None:
        """Start the request for ``record``; ``on_complete(completion)`` runs through
        ``post`` when it ends (not at all if the runner is closed first)."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("start() the async runner before submitting records")
        if self._closed:
            raise RuntimeError("the async runner is closed")
        loop.call_soon_threadsafe(self._begin, record, on_complete)

    def _begin(self, record: Any, on_complete: Callable[[Completion], None]) -> None:
        if self._closing:  # submitted as the runner closed: never started, never completed
            return
        task = asyncio.get_running_loop().create_task(self._request(record, on_complete))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _request(self, record: Any, on_complete: Callable[[Completion], None]) -> None:
        try:
            results = await self._results(record)
        except asyncio.CancelledError:
            if self._closing:  # close() cancelled it: the request ends without a completion
                raise
            self._deliver(
                on_complete,
                Completion.failure(
                    RuntimeError(
                        f"the async I/O request for record {describe_record(record)} was cancelled "
                        f"by user code"
                    )
                ),
            )
        except BaseException as e:  # noqa: BLE001 - every failure fails the record
            self._deliver(on_complete, Completion.failure(e))
        else:
            self._deliver(on_complete, Completion.success(results))

    async def _results(self, record: Any) -> list[Any]:
        name = getattr(self._invoke, "__qualname__", "the async I/O function")
        call = self._invoke(record)
        if not inspect.isawaitable(call):
            raise TypeError(
                f"{name} returned a {type(call).__name__}, not an awaitable; async I/O "
                f"runs async def functions"
            )
        request = asyncio.ensure_future(_resolve_results(call, name))
        # a request cancelled before it started never awaits the user's coroutine: close it
        request.add_done_callback(lambda _: _close_unstarted(call))
        try:
            done, _ = await asyncio.wait({request}, timeout=self._timeout_s())
        except asyncio.CancelledError:
            request.cancel()
            raise
        if request in done:
            if request.cancelled():
                raise RuntimeError(
                    f"the async I/O request for record "
                    f"{describe_record(record)} was cancelled by user code"
                )
            return request.result()
        request.cancel()
        self._requests.add(request)  # abandoned, but kept alive until it ends
        request.add_done_callback(self._requests.discard)
        request.add_done_callback(_retrieve)
        if self._fallback is None:
            raise AsyncTimeoutError(record, self.timeout_ms)
        return await _resolve_results(self._fallback(record), "timeout()")

    def _timeout_s(self) -> float | None:
        return None if self.timeout_ms is None else self.timeout_ms / 1000.0

    def _deliver(self, on_complete: Callable[[Completion], None], completion: Completion) -> None:
        def action() -> None:
            if not self._closed:
                on_complete(completion)

        self._post(action)


def _close_unstarted(call: Any) -> None:
    """Close the user's coroutine if it never ran (no "never awaited" warning)."""
    if inspect.iscoroutine(call) and inspect.getcoroutinestate(call) == inspect.CORO_CREATED:
        call.close()

"""Base classes for user functions.

Plain callables work wherever a function is expected (``stream.map(lambda r:
...)``). Subclass these when a function needs a lifecycle: ``open(ctx)`` runs
once per subtask before the first record (ask the
:class:`~lockgate.RuntimeContext` for state there), ``close()`` after the
last. Every subtask gets its own deserialized copy of the function object,
so attributes set in ``open`` are per subtask.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..core.user_functions import default_method
from ..runtime.async_runner import AsyncFunction as AsyncFunction  # async I/O (M-W7)
from ..runtime.context import RuntimeContext
from ..runtime.operators import broadcast as _broadcast
from ..runtime.operators.join import interval_join as _interval_join
from ..runtime.operators.keyed import ElementContext
from ..runtime.operators.window.contents import WindowContext


class Function:
    def open(self, ctx: RuntimeContext) -> None:
        """Called once per subtask before any record."""

    def close(self) -> None:
        """Called once per subtask after the last record (also after a failure)."""


class MapFunction(Function):
    def map(self, value: Any) -> Any:
        raise NotImplementedError


class FilterFunction(Function):
    def filter(self, value: Any) -> bool:
        raise NotImplementedError


class FlatMapFunction(Function):
    def flat_map(self, value: Any) -> Iterable[Any]:
        raise NotImplementedError


class ProcessFunction(Function):
    """``process_element(value, ctx)`` yields (or returns an iterable of) output records;
    ``ctx.output(tag, value)`` emits to a side output."""

    Context = ElementContext

    def process_element(self, value: Any, ctx: ElementContext) -> Iterable[Any] | None:
        raise NotImplementedError


class KeyedProcessFunction(Function):
    """Processes a keyed stream record by record with keyed state.

    ``process_element(value, ctx)`` runs with ``ctx.current_key`` set to the
    record's key, and any state obtained from ``ctx.get_state(...)`` in
    ``open`` reads and writes that key's value. It yields (or returns an
    iterable of) output records.
    """

    Context = ElementContext

    def process_element(self, value: Any, ctx: ElementContext) -> Iterable[Any] | None:
        raise NotImplementedError

    def on_timer(self, timestamp: int, ctx: ElementContext) -> Iterable[Any] | None:
        """Called when a timer registered for ``ctx.current_key`` fires."""
        return None


class BroadcastProcessFunction(Function):
    """Processes a non-keyed stream connected to a broadcast stream
    (``stream.connect(rules.broadcast(descriptor)).process(fn)``).

    ``process_element(value, ctx)`` runs for the connected stream's records;
    ``ctx.get_broadcast_state(descriptor)`` is read-only there (writes raise).
    ``process_broadcast_element(value, ctx)`` runs, in every subtask, for every
    element of the broadcast stream; ``ctx.get_broadcast_state(descriptor)`` is
    writable there. Change broadcast state only from the broadcast elements, so that
    every subtask holds the same state (it is checkpointed, and restored into every
    subtask, also at another parallelism). Both yield (or return an iterable of)
    output records; ``ctx.output(tag, value)`` emits to a side output. The two inputs
    are not ordered against each other.
    """

    ReadOnlyContext = _broadcast.ReadOnlyContext
    Context = _broadcast.BroadcastContext

    def process_element(self, value: Any, ctx: _broadcast.ReadOnlyContext) -> Iterable[Any] | None:
        raise NotImplementedError

    def process_broadcast_element(
        self, value: Any, ctx: _broadcast.BroadcastContext
    ) -> Iterable[Any] | None:
        raise NotImplementedError


class KeyedBroadcastProcessFunction(Function):
    """Processes a keyed stream connected to a broadcast stream
    (``stream.key_by(...).connect(rules.broadcast(descriptor)).process(fn)``).

    As :class:`BroadcastProcessFunction`, and: ``process_element`` runs with
    ``ctx.current_key`` set to the record's key, with keyed state (from
    ``ctx.get_state(...)`` in ``open``) scoped to it; ``process_broadcast_element`` has
    no current key, but ``ctx.apply_to_keyed_state(descriptor, fn)`` calls
    ``fn(key, state)`` for every key of the subtask that has a value of that keyed
    state.
    """

    ReadOnlyContext = _broadcast.ReadOnlyContext
    Context = _broadcast.KeyedBroadcastContext

    def process_element(self, value: Any, ctx: _broadcast.ReadOnlyContext) -> Iterable[Any] | None:
        raise NotImplementedError

    def process_broadcast_element(
        self, value: Any, ctx: _broadcast.KeyedBroadcastContext
    ) -> Iterable[Any] | None:
        raise NotImplementedError


class ReduceFunction(Function):
    """Combines two values of the same type into one: ``reduce(a, b)``."""

    def reduce(self, a: Any, b: Any) -> Any:
        raise NotImplementedError


class AggregateFunction(Function):
    """An incremental aggregation: an accumulator is created, values are added to it,
    and the result is read from it. ``merge`` combines two accumulators (needed by
    merging windows)."""

    def create_accumulator(self) -> Any:
        raise NotImplementedError

    def add(self, value: Any, accumulator: Any) -> Any:
        """Add ``value``; return the new accumulator (may be ``accumulator`` itself)."""
        raise NotImplementedError

    def get_result(self, accumulator: Any) -> Any:
        raise NotImplementedError

    @default_method  # not implemented: merging (session) windows refuse the function
    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError


class ProcessWindowFunction(Function):
    """Processes the records of a fired window all at once
    (``stream.key_by(...).window(assigner).process(fn)``).

    ``process(key, context, elements)`` is called once per (key, window) each time the
    window fires, with the key, every record of the window so far (a new list; with
    allowed lateness a window may fire again with more records) and a context:
    ``context.window`` is the :class:`~lockgate.TimeWindow` (``start``, ``end``, both
    epoch ms; as in PyFlink, ``context.window()`` works too),
    ``context.current_watermark()``, ``context.current_processing_time()`` and
    ``context.output(tag, value)`` (a side output). It yields (or returns an iterable
    of) output records, each emitted with the event timestamp ``window.end - 1``.
    """

    Context = WindowContext

    def process(
        self, key: Any, context: WindowContext, elements: list[Any]
    ) -> Iterable[Any] | None:
        raise NotImplementedError


class CoMapFunction(Function):
    """Maps the two inputs of connected streams (``a.connect(b).map(fn)``): ``map1(value)``
    for each record of ``a``, ``map2(value)`` for each record of ``b``; each returns one
    output record (None fails the job, as ``map``). The two inputs are not ordered
    against each other."""

    def map1(self, value: Any) -> Any:
        raise NotImplementedError

    def map2(self, value: Any) -> Any:
        raise NotImplementedError


class CoFlatMapFunction(Function):
    """Flat-maps the two inputs of connected streams (``a.connect(b).flat_map(fn)``):
    ``flat_map1(value)`` for the records of ``a``, ``flat_map2(value)`` for those of
    ``b``; each yields (or returns an iterable of) zero or more output records."""

    def flat_map1(self, value: Any) -> Iterable[Any] | None:
        raise NotImplementedError

    def flat_map2(self, value: Any) -> Iterable[Any] | None:
        raise NotImplementedError


class CoProcessFunction(Function):
    """Processes the two inputs of connected streams (``a.connect(b).process(fn)``):
    ``process_element1(value, ctx)`` for the records of ``a``,
    ``process_element2(value, ctx)`` for those of ``b``. Both yield (or return an
    iterable of) output records; ``ctx.timestamp`` is the record's event time and
    ``ctx.output(tag, value)`` emits to a side output. Timers and keyed state need keyed
    inputs: use :class:`KeyedCoProcessFunction` after ``key_by`` on both streams. The
    two inputs are not ordered against each other."""

    Context = ElementContext

    def process_element1(self, value: Any, ctx: ElementContext) -> Iterable[Any] | None:
        raise NotImplementedError

    def process_element2(self, value: Any, ctx: ElementContext) -> Iterable[Any] | None:
        raise NotImplementedError


class KeyedCoProcessFunction(Function):
    """Processes two keyed streams connected (``a.key_by(ka).connect(b.key_by(kb))``, or
    ``a.connect(b).key_by(ka, kb)``) with keyed state shared by both inputs.

    ``process_element1(value, ctx)`` runs for the records of ``a`` with
    ``ctx.current_key`` set to ``ka`` of the record, ``process_element2(value, ctx)`` for
    those of ``b`` with ``kb`` of the record; state from ``ctx.get_state(...)`` in
    ``open`` reads and writes that key's value, the same for both inputs (a key of ``a``
    and the equal key of ``b`` see the same state). ``ctx.timer_service()`` registers
    event-time timers (fired when the minimum of both inputs' watermarks passes them,
    M-W5, M-W6) and processing-time timers for the current key; ``on_timer(timestamp,
    ctx)`` runs when one fires. All yield (or return an iterable of) output records;
    ``ctx.output(tag, value)`` emits to a side output.
    """

    Context = ElementContext

    def process_element1(self, value: Any, ctx: ElementContext) -> Iterable[Any] | None:
        raise NotImplementedError

    def process_element2(self, value: Any, ctx: ElementContext) -> Iterable[Any] | None:
        raise NotImplementedError

    def on_timer(self, timestamp: int, ctx: ElementContext) -> Iterable[Any] | None:
        """Called when a timer registered for ``ctx.current_key`` fires."""
        return None


class ProcessJoinFunction(Function):
    """Joins the pairs of an interval join
    (``a.key_by(ka).interval_join(b.key_by(kb)).between(lower, upper).process(fn)``).

    ``process_element(left, right, ctx)`` is called once for each pair of a left and a
    right record with equal keys whose times are within the bounds; it yields (or
    returns an iterable of) output records, each emitted with the event timestamp
    ``ctx.timestamp`` (the later of the two). ``ctx.left_timestamp``,
    ``ctx.right_timestamp``, ``ctx.current_key`` and ``ctx.output(tag, value)`` (a side
    output) are available too.
    """

    Context = _interval_join.ProcessJoinContext

    def process_element(
        self, left: Any, right: Any, ctx: _interval_join.ProcessJoinContext
    ) -> Iterable[Any] | None:
        raise NotImplementedError


class JoinFunction(Function):
    """Joins a pair of records of a window join
    (``a.join(b).where(ka).equal_to(kb).window(assigner).apply(fn)``).

    ``join(left, right)`` is called once per pair of a left and a right record with the
    same key in the same window, each time the window fires, and returns one output
    record (emitted with the event timestamp ``window.end - 1``). A None result fails
    the job, as it does for ``map``: use a :class:`FlatJoinFunction` to emit zero or
    more records per pair."""

    def join(self, left: Any, right: Any) -> Any:
        raise NotImplementedError


class FlatJoinFunction(Function):
    """A :class:`JoinFunction` with zero or more outputs per pair: ``join(left, right)``
    yields (or returns an iterable of) output records."""

    def join(self, left: Any, right: Any) -> Iterable[Any] | None:
        raise NotImplementedError


class CoGroupFunction(Function):
    """Processes the two sides of a window co-group
    (``a.co_group(b).where(ka).equal_to(kb).window(assigner).apply(fn)``).

    ``co_group(lefts, rights)`` is called once per key and window each time the window
    fires, with the window's left and right records of that key (lists; one of them
    may be empty), and yields (or returns an iterable of) output records, each
    emitted with the event timestamp ``window.end - 1``."""

    def co_group(self, lefts: list[Any], rights: list[Any]) -> Iterable[Any] | None:
        raise NotImplementedError

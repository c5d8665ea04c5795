"""Async I/O: call an external service per record without blocking the stream (M-W7).

::

    async def lookup(record):
        row = await client.get(record["id"])
        return [{**record, "name": row.name}]

    enriched = lg.AsyncDataStream.ordered_wait(stream, lookup, timeout=timedelta(seconds=1),
                                               capacity=100)

``fn`` is an ``async def fn(record)`` returning an iterable of results for the record
(or None for none), or an :class:`~lockgate.AsyncFunction` (``async_invoke(record)``,
``open(ctx)`` / ``close()``, and an optional ``timeout(record)`` fallback). Each
subtask runs its requests on an event loop of its own; up to ``capacity`` records
(and watermarks) are in the operator's queue at once, and when it is full the
operator stops taking input until a result has left (backpressure).

* ``ordered_wait``: results leave in the order their records arrived.
* ``unordered_wait``: results leave as their requests complete, but never across a
  watermark: everything that arrived before a watermark leaves before it, everything
  after it leaves after it.

A request that runs longer than ``timeout`` is cancelled; then ``timeout(record)`` of an
``AsyncFunction`` supplies the results, or, without one, the job fails naming the
record. A request that raises fails the job the same way. Results keep the event
timestamp of their record. With checkpoints, records whose results have not left yet
are stored in the checkpoint and requested again after a restore, so exactly-once
output holds each record's results once.

The operator runs in a subtask of its own (it is not chained to its neighbours): it
waits for room in its queue while processing a batch, which must never interleave
with a checkpoint a source triggers.
"""

from __future__ import annotations

import inspect
from datetime import timedelta
from typing import Any

from ..core.durations import to_millis
from ..errors import ConfigurationError
from ..graph.operator_factory import OperatorFactory
from ..graph.transformations import Kind, Transformation
from ..runtime.async_runner import _resolve
from ..runtime.operators.async_io import AsyncWaitOperator
from .datastream import DataStream

DEFAULT_CAPACITY = 100


class AsyncDataStream:
    """Builds async I/O operators: :meth:`ordered_wait` and :meth:`unordered_wait`."""

    @staticmethod
    def ordered_wait(
        stream: DataStream,
        fn: Any,
        timeout: timedelta | int,
        capacity: int = DEFAULT_CAPACITY,
        name: str | None = None,
    ) -> DataStream:
        """Apply ``fn`` to every record of ``stream``; results leave in input order.

        ``timeout``: per request, a ``timedelta`` or an int of milliseconds (> 0).
        ``capacity``: how many records and watermarks the operator holds at once (> 0).
        """
        return _async_wait(stream, fn, timeout, capacity, name, ordered=True)

    @staticmethod
    def unordered_wait(
        stream: DataStream,
        fn: Any,
        timeout: timedelta | int,
        capacity: int = DEFAULT_CAPACITY,
        name: str | None = None,
    ) -> DataStream:
        """Apply ``fn`` to every record of ``stream``; results leave as their requests
        complete, but never across a watermark (M-W7). Arguments as :meth:`ordered_wait`."""
        return _async_wait(stream, fn, timeout, capacity, name, ordered=False)


def _async_wait(
    stream: Any, fn: Any, timeout: Any, capacity: Any, name: Any, *, ordered: bool
) -> DataStream:
    method = "ordered_wait" if ordered else "unordered_wait"
    if not isinstance(stream, DataStream):
        raise ConfigurationError(
            f"AsyncDataStream.{method} needs a DataStream as its first argument, got "
            f"{type(stream).__name__}"
        )
    _check_function(fn, method)
    timeout_ms = to_millis(timeout, f"the timeout of AsyncDataStream.{method}", allow_zero=False)
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ConfigurationError(
            f"the capacity of AsyncDataStream.{method} must be an int >= 1, got {capacity!r}"
        )
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigurationError(f"name must be a non-empty string, got {name!r}")
    factory = OperatorFactory(
        AsyncWaitOperator,
        {"fn": fn, "timeout_ms": timeout_ms, "capacity": capacity, "ordered": ordered},
        {"function:async_invoke": fn},
    )
    label = name or ("AsyncWait (ordered)" if ordered else "AsyncWait (unordered)")
    t = Transformation(Kind.OPERATOR, label, [stream.transformation], factory=factory)
    # never chained: the operator waits for room in its queue inside process_batch, and a
    # source chained in front would take a checkpoint in the middle of a batch (M-T1)
    t.chainable = False
    stream._env._register(t)
    return DataStream(stream._env, t)


def _check_function(fn: Any, method: str) -> None:
    if inspect.isclass(fn):
        raise ConfigurationError(
            f"AsyncDataStream.{method} got the class {fn.__name__}; pass an instance: "
            f"{fn.__name__}(...)"
        )
    try:
        _resolve(fn)
    except ConfigurationError as e:
        raise ConfigurationError(f"AsyncDataStream.{method}: {e}") from None

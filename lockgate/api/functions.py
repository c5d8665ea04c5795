"""Base classes for user functions.

Plain callables work wherever a function is expected (``stream.map(lambda r:
...)``). Subclass these when a function needs a lifecycle: ``open(ctx)`` runs
once per subtask before the first record (ask the
:class:`~lockgate.RuntimeContext` for state there), ``close()`` after the
last. Every subtask gets its own deserialized copy of the function object,
so attributes set in ``open`` are per subtask.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..runtime.context import RuntimeContext
from ..runtime.operators.keyed import ElementContext


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

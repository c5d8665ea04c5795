"""Forwarding latency markers once per task."""

from __future__ import annotations

from collections.abc import Callable

from ...core.elements import StreamElement
from ...core.latency.marker import LatencyMarker


class ForwardOnce:
    """Wraps the target that sends a task's control elements to a record writer:
    a latency marker goes on only if it is newer than the last one forwarded from the
    same source subtask. A task with several input channels receives a copy of a
    marker through each upstream subtask that forwarded it; every copy is delivered
    to its operators (a sink records each path), but only one goes downstream, so
    markers grow with the parallelism of each stage, never with the product of
    them. Holds one number per source subtask; every other element passes as is.
    """

    __slots__ = ("_deliver", "_last")

    def __init__(self, deliver: Callable[[StreamElement], None]) -> None:
        self._deliver = deliver
        self._last: dict[tuple[str, int], int] = {}

    def __call__(self, element: StreamElement) -> None:
        if element.__class__ is LatencyMarker:
            assert isinstance(element, LatencyMarker)
            key = (element.source, element.subtask)
            if self._last.get(key, 0) >= element.seq:
                return
            self._last[key] = element.seq
        self._deliver(element)

"""The input gate: a subtask's view of its N input channels.

``poll`` returns the next element of some channel that has one, visiting
channels round-robin so no input starves another, and never blocks; the task
waits on its signal when nothing is available. Each channel belongs to one
logical input (``input_index``: 0 for one-input operators and unions; 0/1 for
two-input operators).

A channel can be *blocked* (:meth:`InputGate.set_blocked`): ``poll`` passes
over it, so its elements wait in the channel, in order, until it is released.
Aligned checkpoints block the channels that delivered a barrier (M-B4). An
ended or blocked channel costs ``poll`` one list lookup, as an ended one
always did.

Latency markers (end-to-end latency) are not returned: ``poll`` hands each to
:attr:`InputGate.on_latency_marker` (the head operator's ``process_latency_marker``,
set by the task builder) when it reaches the front of its channel, so every element
before it in that channel was processed, and goes on polling.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..core.elements import END_OF_PARTITION, StreamElement
from ..core.latency.marker import LatencyMarker
from .channels import InputChannel


class InputGate:
    def __init__(
        self, channels: list[InputChannel], input_indexes: list[int], signal: threading.Event
    ) -> None:
        if len(channels) != len(input_indexes):
            raise ValueError("every input channel needs an input index")
        self.channels = channels
        self.input_indexes = input_indexes
        self.ended = [False] * len(channels)
        self.blocked = [False] * len(channels)
        # ended or blocked: what ``poll`` checks, kept in one list so the hot path
        # pays one lookup per channel
        self._skip = [False] * len(channels)
        self._open = len(channels)
        self._next = 0
        #: where latency markers go (None: dropped)
        self.on_latency_marker: Callable[[LatencyMarker], None] | None = None
        for c in channels:
            c.set_consumer_signal(signal)

    @property
    def num_channels(self) -> int:
        return len(self.channels)

    @property
    def finished(self) -> bool:
        """Every channel delivered its end of partition."""
        return self._open == 0

    def set_blocked(self, channel: int, blocked: bool) -> None:
        """Stop (``True``) or resume (``False``) delivering elements of ``channel``.

        The channel object's ``pause()`` / ``resume()`` is called when it has one
        (a network channel then stops waking the task for data it may not read).
        """
        if self.blocked[channel] == blocked:
            return
        self.blocked[channel] = blocked
        self._skip[channel] = blocked or self.ended[channel]
        method = getattr(self.channels[channel], "pause" if blocked else "resume", None)
        if method is not None:
            method()

    def poll(self) -> tuple[int, StreamElement] | None:
        """``(channel index, element)`` of the next available element of a channel that
        is neither ended nor blocked, or None."""
        n = len(self.channels)
        skip = self._skip
        start = self._next
        for step in range(n):
            i = (start + step) % n
            if skip[i]:
                continue
            element = self.channels[i].poll()
            while element.__class__ is LatencyMarker:  # one check per element
                self._latency_marker(element)
                element = self.channels[i].poll()
            if element is None:
                continue
            if element is END_OF_PARTITION:
                self.ended[i] = True
                skip[i] = True
                self._open -= 1
            self._next = (i + 1) % n
            return i, element
        return None

    def _latency_marker(self, marker: LatencyMarker) -> None:
        deliver = self.on_latency_marker
        if deliver is not None:
            deliver(marker)

    def cancel(self) -> None:
        for c in self.channels:
            c.cancel()

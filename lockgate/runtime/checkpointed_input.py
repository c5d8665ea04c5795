"""The input gate as a checkpointing task sees it: barriers go to the barrier handler.

:class:`CheckpointedInputGate` wraps an :class:`~.input_gate.InputGate` and a
:class:`~lockgate.checkpoint.barriers.base.BarrierHandler`:

* Barriers and cancellation markers go to the handler and are not returned.
* END_OF_PARTITION goes to the handler (the channel counts as closed, M-B6)
  and is returned.
* Batches, watermarks and stream-status changes are returned unchanged, in
  channel order (M-E1).
* Channels the handler blocks (aligned checkpoints, M-B4) are blocked in the
  input gate, which then passes over them: their elements wait in the
  channel, in order, until the handler releases them.
* A batch of a channel that captures an unaligned checkpoint's channel state
  (M-B7) is first reported through ``actions.record_inflight``.

The handler's blocks and captures change when it receives an element (through
:meth:`poll`) or the time (``on_time``); after each element the gate copies
the blocks into the input gate and recomputes one flag, ``active`` (some
channel blocked or capturing). While ``active``, every poll first re-reads the
handler (so a task may call ``handler.on_time()`` directly or
:meth:`on_time` here) and asks it, per batch, whether the batch's channel
captures. With no checkpoint in progress a poll costs one attribute check and
one type lookup more than ``InputGate.poll``.
"""

from __future__ import annotations

from ..checkpoint.barriers.base import BarrierActions, BarrierHandler
from ..core.batch import is_batch
from ..core.elements import (
    END_OF_PARTITION,
    CancellationMarker,
    CheckpointBarrier,
    EndOfPartition,
    PriorityBarrier,
    StreamElement,
)
from .input_gate import InputGate

_HANDLED = frozenset({CheckpointBarrier, CancellationMarker, EndOfPartition, PriorityBarrier})


class CheckpointedInputGate:
    def __init__(self, gate: InputGate, handler: BarrierHandler, actions: BarrierActions) -> None:
        self.gate = gate
        self.handler = handler
        self._actions = actions
        #: some channel captures channel state: batches need a look at the handler
        self.capturing = False
        #: some channel is blocked or captures: a checkpoint is in progress
        self.active = False

    @property
    def finished(self) -> bool:
        """Every channel delivered its end of partition."""
        return self.gate.finished

    @property
    def num_channels(self) -> int:
        return self.gate.num_channels

    @property
    def input_indexes(self) -> list[int]:
        return self.gate.input_indexes

    def poll(self) -> tuple[int, StreamElement] | None:
        """``(channel, element)`` of the next element to process, or None."""
        if self.active:
            return self._poll_active()
        gate = self.gate
        while True:
            item = gate.poll()
            if item is None:
                return None
            if type(item[1]) not in _HANDLED:
                return item  # the hot path: no checkpoint in progress
            if self._handle(item):
                return item
            if self.active:
                return self._poll_active()

    def _poll_active(self) -> tuple[int, StreamElement] | None:
        """``poll`` while a checkpoint blocks or captures channels."""
        # The handler may have changed without an element (the task called
        # ``handler.on_time()`` itself): take its blocks and captures afresh.
        self._sync()
        gate = self.gate
        while True:
            item = gate.poll()
            if item is None:
                return None
            channel, element = item
            if type(element) not in _HANDLED:
                if self.capturing and is_batch(element):
                    checkpoint_id = self.handler.captures(channel)
                    if checkpoint_id is not None:
                        self._actions.record_inflight(checkpoint_id, channel, element)
                return item
            if self._handle(item):
                return item

    def _handle(self, item: tuple[int, StreamElement]) -> bool:
        """Give a barrier, marker or end of partition to the handler; whether to return it."""
        channel, element = item
        if element is END_OF_PARTITION:
            self.handler.on_end_of_partition(channel)
            self._sync()
            return True
        if isinstance(element, CheckpointBarrier):
            self.handler.on_barrier(channel, element)
        elif isinstance(element, PriorityBarrier):
            handler = self.handler
            handler.on_priority_barrier(channel, element.barrier)
            if element.overtaken is not None:
                # the barrier arrived ahead of these: persist them, then count it (M-B7)
                checkpoint_id = handler.captures(channel)
                if checkpoint_id is not None:
                    for e in element.overtaken:
                        if is_batch(e):
                            self._actions.record_inflight(checkpoint_id, channel, e)
                handler.on_barrier(channel, element.barrier)
        else:
            assert isinstance(element, CancellationMarker)
            self.handler.on_cancellation_marker(channel, element)
        self._sync()
        return False

    def next_deadline_ms(self) -> float | None:
        """Monotonic time at which the task must call :meth:`on_time`, or None."""
        return self.handler.next_deadline_ms()

    def on_time(self) -> None:
        """The clock reached :meth:`next_deadline_ms` (an alignment timed out, M-B8)."""
        self.handler.on_time()
        self._sync()

    def cancel(self) -> None:
        self.gate.cancel()

    def _sync(self) -> None:
        """Copy the handler's blocks into the gate; recompute ``capturing`` and ``active``."""
        handler = self.handler
        gate = self.gate
        blocked = gate.blocked
        capturing = any_blocked = False
        for channel in range(gate.num_channels):
            flag = handler.is_blocked(channel)
            if flag != blocked[channel]:
                gate.set_blocked(channel, flag)
            any_blocked = any_blocked or flag
            if not capturing and handler.captures(channel) is not None:
                capturing = True
        self.capturing = capturing
        self.active = capturing or any_blocked

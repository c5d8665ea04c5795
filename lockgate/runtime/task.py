"""A subtask: the mailbox loop that drives one operator chain.

The loop, each turn: run pending mails; if any output channel is full, wait
(backpressure, still answering mails); otherwise take one unit of input (a
source poll, or one element from the input gate) and push it through the
chain; flush output buffers whose timeout passed. When nothing is available
it waits on the task's signal, which channels, the mailbox and cancellation
set, with a timeout no later than the next buffer flush.

End of input (every input channel ended, or the source reported the end):
the chain finishes, buffers are flushed and end of partition is sent on every
output channel. A cancelled task raises ``TaskCancelledError`` from its loop.

With checkpoints, the input goes through a barrier handler (aligned,
unaligned or at-least-once, M-B1) that may block channels and trigger the
snapshot; a source is triggered through its mailbox, so its snapshot never
interleaves with emitting a batch (M-T1).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from ..checkpoint.types import CheckpointFailureReason
from ..connectors.base import InputStatus
from ..errors import TaskCancelledError
from ..time.clock import Clock
from .batch import is_batch
from .chain import OperatorChain
from ..time.valve import StatusWatermarkValve
from .elements import END_OF_PARTITION, StreamElement, StreamStatus, Watermark
from .input_gate import InputGate
from .mailbox import Mailbox
from .record_writer import RecordWriter

if TYPE_CHECKING:
    from ..checkpoint.barriers.base import BarrierHandler
    from ..graph.channel_identity import SubtaskChannels
    from ..checkpoint.subtask_checkpointer import SubtaskCheckpointer
    from ..runtime.elements import CheckpointBarrier


class StreamTask:
    def __init__(
        self,
        name: str,
        subtask_index: int,
        chain: OperatorChain,
        input_gate: InputGate | None,
        writers: list[RecordWriter],
        signal: threading.Event,
        clock: Clock,
    ) -> None:
        self.name = name
        self.subtask_index = subtask_index
        self.chain = chain
        self.input_gate = input_gate
        self.writers = writers
        self.signal = signal
        self.clock = clock
        self.mailbox = Mailbox(signal)
        self._cancelled = False
        self.finished = False
        #: the task processes records (after open, before finish)
        self.running = False
        #: (vertex id, subtask index), set by the builder
        self.key: tuple[int, int] = (-1, subtask_index)
        #: this subtask's channels by stable names (M-B7), set by the builder
        self.channels: SubtaskChannels | None = None
        self.checkpointer: SubtaskCheckpointer | None = None
        self.barrier_handler: BarrierHandler | None = None
        self._input: Any = input_gate  # the gate, or a CheckpointedInputGate around it
        # one status/watermark valve per logical input, over that input's channels (M-W3)
        self._valves: list[StatusWatermarkValve] = []
        self._valve_of: list[tuple[int, int]] = []  # channel -> (input index, local channel)
        if input_gate is not None:
            counts: dict[int, int] = {}
            for index in input_gate.input_indexes:
                self._valve_of.append((index, counts.get(index, 0)))
                counts[index] = counts.get(index, 0) + 1
            self._valves = [StatusWatermarkValve(counts.get(i, 1))
                            for i in range(max(counts, default=0) + 1)]

    def enable_checkpoints(self, checkpointer: "SubtaskCheckpointer",
                           handler: "BarrierHandler | None", checked_input: Any) -> None:
        """Route barriers of the input through ``handler`` (``checked_input`` wraps the
        gate) and snapshots through ``checkpointer``."""
        self.checkpointer = checkpointer
        self.barrier_handler = handler
        if checked_input is not None:
            self._input = checked_input

    # checkpoint entry points (any thread) -------------------------------------------
    def trigger_checkpoint(self, barrier: "CheckpointBarrier") -> None:
        """A source's trigger: runs in the task thread between two batches (M-T1); a task
        that is not running declines (M-T2)."""
        cp = self.checkpointer
        if cp is None:
            return

        def run() -> None:
            if self.running:
                cp.trigger_source(barrier)
            else:
                cp.decline_not_running(barrier)

        if not self.mailbox.put(run, f"trigger checkpoint {barrier.checkpoint_id}"):
            cp.responder.decline(cp.task, barrier.checkpoint_id,
                                 CheckpointFailureReason.TASK_NOT_RUNNING)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        cp = self.checkpointer
        if cp is not None:
            self.mailbox.put(lambda: cp.notify_complete(checkpoint_id), "checkpoint complete")

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        cp = self.checkpointer
        if cp is not None:
            cp.cancel(checkpoint_id)
            self.mailbox.put(lambda: cp.notify_aborted(checkpoint_id), "checkpoint aborted")

    # control ---------------------------------------------------------------
    def cancel(self) -> None:
        """Stop the loop at its next turn (thread-safe)."""
        self._cancelled = True
        self.signal.set()
        if self.input_gate is not None:
            self.input_gate.cancel()
        for w in self.writers:
            for c in w.channels:
                c.cancel()

    def run_mail_until(self, done: Callable[[], bool]) -> None:
        """Task thread only: run mails and processing-time callbacks, flushing output
        buffers and waiting in between, until ``done()``. For an operator waiting for
        asynchronous work (async I/O: a full queue, or the end of input). Raises
        ``TaskCancelledError`` when the task is cancelled meanwhile."""
        while not done():
            self.signal.clear()
            self._check_cancelled()
            self.mailbox.run_pending()
            self.chain.processing_time.fire_due()
            if done():
                return
            self._wait(self._flush_due())

    def _check_cancelled(self) -> None:
        if self._cancelled:
            raise TaskCancelledError(f"{self.name} ({self.subtask_index}) was cancelled")

    # loop ------------------------------------------------------------------
    def run(self) -> None:
        """Run to the end of input. Operators are closed whatever happens."""
        error: BaseException | None = None
        try:
            self.chain.open()
            self._replay_channel_state()
            self.running = True
            source = self.chain.source
            if source is not None:
                self._run_source(source)
            else:
                self._run_inputs()
            self._check_cancelled()
            self.running = False
            self.chain.finish()
            for w in self.writers:
                w.broadcast_event(END_OF_PARTITION)
            self.finished = True
        except BaseException as e:
            error = e
            raise
        finally:
            self.running = False
            self.mailbox.close()
            if self.checkpointer is not None:
                self.checkpointer.close()
            close_error = self.chain.close()
            if error is None and close_error is not None:
                raise close_error

    def _replay_channel_state(self) -> None:
        """Restoring an unaligned checkpoint: hand every in-flight record it recorded for
        this subtask's operators (input and output side, redistributed by
        :func:`~lockgate.recovery.channel_state.batches_to_replay`) to the operator at the
        consumer end of its edge, before any new input (M-R1, M-B7)."""
        restore = self.chain.restore
        layout = self.channels
        if restore is None or layout is None or not getattr(restore, "channels", None):
            return
        from ..recovery.channel_state import batches_to_replay

        by_uid = {op.uid: op for op in self.chain.operators}
        for edge, batch in batches_to_replay(restore, layout):
            by_uid[edge.consumer].process_batch(batch, edge.input_index)

    def _wait(self, deadline: float | None) -> None:
        now = self.clock.monotonic_ms()
        due = self.chain.processing_time.wait_ms()
        if due is not None:
            deadline = now + due if deadline is None else min(deadline, now + due)
        timeout = None if deadline is None else max(0.0, deadline - now)
        self.clock.wait(self.signal, timeout)

    def _flush_due(self) -> float | None:
        deadline: float | None = None
        now = self.clock.monotonic_ms()
        for w in self.writers:
            d = w.flush_due(now)
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        return deadline

    def _outputs_available(self) -> bool:
        for w in self.writers:
            if not w.is_available():
                return False
        return True

    def _backpressure_deadline(self) -> float | None:
        """When to look at full outputs again: channels that cannot signal freed space
        (network channels) are re-checked after their ``wake_interval_ms`` (always, since
        their state may change between two checks)."""
        deadline = self._flush_due()
        interval: float | None = None
        for w in self.writers:
            for c in w.channels:
                wake = getattr(c, "wake_interval_ms", None)
                if wake is not None:
                    interval = wake if interval is None else min(interval, wake)
        if interval is not None:
            wake_at = self.clock.monotonic_ms() + interval
            deadline = wake_at if deadline is None else min(deadline, wake_at)
        return deadline

    def _start_turn(self) -> bool:
        """Begin a loop turn: run mails; if an output is full, wait (backpressure) and
        return False so the caller starts the next turn instead of taking input."""
        self.signal.clear()
        self._check_cancelled()
        self.mailbox.run_pending()
        self.chain.processing_time.fire_due()
        if self._outputs_available():
            return True
        self._wait(self._backpressure_deadline())
        return False

    def _run_source(self, source: "object") -> None:
        from .operators.io import SourceOperator

        assert isinstance(source, SourceOperator)
        while True:
            if not self._start_turn():
                continue
            status = source.emit_next()
            deadline = self._flush_due()
            if status is InputStatus.END_OF_INPUT:
                return
            if status is InputStatus.NOTHING_AVAILABLE:
                hint = source.wait_hint_ms()
                if hint is not None:
                    wake = self.clock.monotonic_ms() + hint
                    deadline = wake if deadline is None else min(deadline, wake)
                self._wait(deadline)

    def _run_inputs(self) -> None:
        gate = self.input_gate
        assert gate is not None
        source = self._input
        head = self.chain.head
        indexes = gate.input_indexes
        handler = self.barrier_handler
        while True:
            if not self._start_turn():
                continue
            due = None
            if handler is not None:
                due = handler.next_deadline_ms()
                if due is not None and due <= self.clock.monotonic_ms():
                    handler.on_time()  # the alignment timed out (M-B8)
                    continue
            item = source.poll()
            if item is None:
                if gate.finished:
                    return
                deadline = self._flush_due()
                if due is not None:
                    deadline = due if deadline is None else min(deadline, due)
                self._wait(deadline)
                continue
            channel, element = item
            if is_batch(element):
                head.process_batch(element, indexes[channel])
            else:
                self._process_event(channel, element)
            self._flush_due()

    def _process_event(self, channel: int, element: StreamElement) -> None:
        """Watermarks, stream statuses and ends of partition go through the input's
        status/watermark valve (M-W3, M-W4); what it emits goes to the head operator."""
        index, local = self._valve_of[channel]
        valve = self._valves[index]
        if isinstance(element, Watermark):
            outputs = valve.input_watermark(element.timestamp, local)
        elif isinstance(element, StreamStatus):
            outputs = valve.input_status(element, local)
        elif element is END_OF_PARTITION:
            outputs = valve.channel_finished(local)
        else:  # barriers and markers are the checkpoint layer's; none reach here
            for w in self.writers:
                w.broadcast_event(element)
            return
        head = self.chain.head
        for out in outputs:
            if isinstance(out, Watermark):
                head.process_watermark(out, index)
            else:
                head.process_status(out, index)

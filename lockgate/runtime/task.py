"""A subtask: the mailbox loop that drives one operator chain.

The loop, each turn: run pending mails; if any output channel is full, wait
(backpressure, still answering mails); otherwise take one unit of input (a
source poll, or one element from the input gate) and push it through the
chain; flush output buffers whose timeout passed. When nothing is available
it waits on the task's signal, which channels, the mailbox and cancellation
set, with a timeout no later than the next buffer flush.

End of input (every input channel delivered its end of data or ended, or the
source reported the end, or a draining savepoint stopped it): the chain finishes,
buffers are flushed and ``END_OF_DATA`` is sent on every output channel. With
checkpoints the task then waits for its final checkpoint (Flink's FLIP-147,
:mod:`.final_checkpoint`): it keeps answering mails and taking barriers until a
checkpoint it took after its end of data completed and that completion notice was
handled (two-phase-commit sinks commit their last transaction there), and until
every input channel ended; the wait is bounded. Then end of partition is sent on
every output channel and the task ends. A task whose operators had all finished in
the restored checkpoint does not run them again: it sends the maximum watermark,
its end of data and end of partition, and ends. A cancelled task raises
``TaskCancelledError`` from its loop.

With checkpoints, the input goes through a barrier handler (aligned,
unaligned or at-least-once, M-B1) that may block channels and trigger the
snapshot; a source is triggered through its mailbox, so its snapshot never
interleaves with emitting a batch (M-T1). Once every task feeding a task has
finished, the coordinator triggers that task directly; it takes the snapshot once
every input channel ended, after the end of its data (no record of its finished
upstream tasks is left unprocessed then).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..checkpoint.types import CheckpointFailureReason
from ..connectors.base import InputStatus
from ..core.batch import Batch, is_batch, nbytes, num_rows
from ..core.clock import Clock
from ..core.elements import (
    END_OF_DATA,
    END_OF_PARTITION,
    MAX_WATERMARK,
    StreamElement,
    StreamStatus,
    Watermark,
)
from ..errors import CorruptStreamError, TaskCancelledError
from ..time.valve import StatusWatermarkValve
from .chain import OperatorChain
from .final_checkpoint import FinalCheckpoint
from .input_gate import InputGate
from .mailbox import Mailbox
from .record_writer import RecordWriter

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..checkpoint.barriers.base import BarrierHandler
    from ..core.elements import CheckpointBarrier
    from ..graph.channel_identity import EdgeKey, SubtaskChannels
    from .subtask_checkpointer import SubtaskCheckpointer

#: (restore spec, this subtask's channels) -> the (consumed edge, batch) pairs to replay
ChannelStateReplay = Callable[[Any, "SubtaskChannels"], Iterable[tuple["EdgeKey", Batch]]]


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
        #: cut the output buffers whenever the input runs dry, before waiting (set by the
        #: builder from ``ExecutionConfig.flush_when_idle``); else only the buffer
        #: timeout sends a part-filled buffer
        self.flush_when_idle = True
        self.finished = False
        #: the task runs: after open, until its final checkpoint completed (FLIP-147)
        self.running = False
        #: the operators finished and END_OF_DATA went out (FLIP-147)
        self.end_of_data = False
        #: every operator had finished in the restored checkpoint: nothing runs again
        self.restored_finished = False
        #: the final checkpoint the task waits for after its end of data (checkpoints on)
        self.final_checkpoint: FinalCheckpoint | None = None
        # a draining savepoint that stopped the source: snapshotted after the end of data
        self._drain: CheckpointBarrier | None = None
        # a trigger of a task with inputs (all its upstream tasks finished), taken once
        # every input channel ended
        self._deferred: CheckpointBarrier | None = None
        # the task is ending after its final checkpoint: new triggers are ignored
        self._closing = False
        #: (vertex id, subtask index), set by the builder
        self.key: tuple[int, int] = (-1, subtask_index)
        #: this subtask's channels by stable names (M-B7), set by the builder
        self.channels: SubtaskChannels | None = None
        #: restoring an unaligned checkpoint: (restore spec, channels) -> the (consumed
        #: edge, batch) pairs to replay, set by the builder
        #: (:func:`lockgate.recovery.channel_state.batches_to_replay`)
        self.channel_state_replay: ChannelStateReplay | None = None
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
            self._valves = [
                StatusWatermarkValve(counts.get(i, 1)) for i in range(max(counts, default=0) + 1)
            ]
        #: per input channel: it delivered its end of data (or ended)
        self._data_ended = [False] * (input_gate.num_channels if input_gate else 0)
        self._channels_with_data = len(self._data_ended)
        # metrics (cumulative; read from other threads, see task_metrics)
        #: milliseconds the task waited with nothing to do / for a full output
        self.idle_ms = 0.0
        self.backpressured_ms = 0.0
        #: ``(idle_ms, backpressured_ms, wait started at or None, backpressured)``, replaced
        #: as one value when a wait starts and ends: a reader from another thread sees
        #: the totals and the wait in progress consistently (a long wait counts while it
        #: lasts, not only once it ended)
        self.wait_state: tuple[float, float, float | None, bool] = (0.0, 0.0, None, False)
        #: in-memory bytes of the data batches taken from the input channels that do not
        #: count them themselves (see ``task_metrics``: in-process channels do)
        self.bytes_in = 0
        #: keep the metrics above (``ExecutionConfig.metrics_enabled``)
        self.metrics_enabled = True

    def enable_checkpoints(
        self,
        checkpointer: SubtaskCheckpointer,
        handler: BarrierHandler | None,
        checked_input: Any,
        final_wait_ms: float | None = None,
    ) -> None:
        """Route barriers of the input through ``handler`` (``checked_input`` wraps the
        gate) and snapshots through ``checkpointer``. ``final_wait_ms``: how long the task
        waits for its final checkpoint after its end of data (FLIP-147; None: no wait)."""
        self.checkpointer = checkpointer
        self.barrier_handler = handler
        if checked_input is not None:
            self._input = checked_input
        if final_wait_ms is not None:
            self.final_checkpoint = FinalCheckpoint(
                self.clock, final_wait_ms, f"{self.name} ({self.subtask_index})"
            )

    # checkpoint entry points (any thread) -------------------------------------------
    def trigger_checkpoint(self, barrier: CheckpointBarrier) -> None:
        """The coordinator's trigger: runs in the task thread between two batches (M-T1);
        a task that is not running declines (M-T2). A source snapshots at once (a
        draining savepoint first ends its input); a task with inputs, triggered because
        every task feeding it finished, snapshots once every input channel ended and its
        operators finished. A finished task ignores triggers: the coordinator records it
        as finished (FLIP-147)."""
        cp = self.checkpointer
        if cp is None or self.finished or self.restored_finished or self._closing:
            return

        def run() -> None:
            if not self.running:
                cp.decline_not_running(barrier)
            elif self.input_gate is not None:
                self._defer_trigger(cp, barrier)
            elif barrier.options.drain and not self.end_of_data:
                self._drain = barrier  # the source loop ends the input, then snapshots
            else:
                cp.trigger_source(barrier)

        queued = self.mailbox.put(run, f"trigger checkpoint {barrier.checkpoint_id}")
        if not queued and not self.finished:
            cp.responder.decline(
                cp.task, barrier.checkpoint_id, CheckpointFailureReason.TASK_NOT_RUNNING
            )

    def _defer_trigger(self, cp: SubtaskCheckpointer, barrier: CheckpointBarrier) -> None:
        """Task thread: keep ``barrier`` (the newest direct trigger; an older one waiting
        is declined as subsumed) until every input channel ended and the operators
        finished, then snapshot (:meth:`_fire_deferred`)."""
        older = self._deferred
        if older is not None:
            if older.checkpoint_id > barrier.checkpoint_id:
                cp.abort_checkpoint(barrier.checkpoint_id, CheckpointFailureReason.SUBSUMED)
                return
            cp.abort_checkpoint(older.checkpoint_id, CheckpointFailureReason.SUBSUMED)
        self._deferred = barrier
        self._fire_deferred()

    def _fire_deferred(self) -> None:
        barrier = self._deferred
        cp = self.checkpointer
        if (
            barrier is None
            or cp is None
            or not self.end_of_data
            or (self.input_gate is not None and not self.input_gate.finished)
        ):
            return
        self._deferred = None
        if cp.last_snapshot_id >= barrier.checkpoint_id:
            return  # its barrier reached this task through an input after all
        cp.trigger_source(barrier)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        cp = self.checkpointer
        if cp is not None:
            final = self.final_checkpoint

            def run() -> None:
                cp.notify_complete(checkpoint_id)
                if final is not None:  # after the sinks committed (FLIP-147)
                    final.completed(checkpoint_id)

            self.mailbox.put(run, "checkpoint complete")

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        cp = self.checkpointer
        if cp is not None:
            cp.cancel(checkpoint_id)
            self.mailbox.put(lambda: cp.notify_aborted(checkpoint_id), "checkpoint aborted")

    # control ---------------------------------------------------------------
    def cancel(self) -> None:
        """Stop the loop at its next turn, or a function operator before its next record
        (thread-safe). Snapshots the task takes from now on, and the asynchronous parts
        in progress, are dropped: a task that does not stop (user code blocks) and is
        abandoned can never write state of a later checkpoint."""
        self._cancelled = True
        self.chain.cancellation.requested = True
        cp = self.checkpointer
        if cp is not None:
            cp.cancel_all()
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
            self._wait(self._flush_before_waiting())

    def _check_cancelled(self) -> None:
        if self._cancelled:
            raise TaskCancelledError(f"{self.name} ({self.subtask_index}) was cancelled")

    # loop ------------------------------------------------------------------
    def run(self) -> None:
        """Run to the end of input, then wait for the final checkpoint (FLIP-147, see the
        module docstring). Operators are closed whatever happens."""
        error: BaseException | None = None
        try:
            if self._restored_as_finished():
                self._run_restored_finished()
            else:
                self.chain.open()
                self._replay_channel_state()
                self.running = True
                self._report_running()
                source = self.chain.source
                if source is not None:
                    self._run_source(source)
                else:
                    self._run_inputs()
                self._check_cancelled()
                self._finish_data()
                self._await_final_checkpoint()
                self.running = False
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

    def _report_running(self) -> None:
        """Tell the coordinator this task is RUNNING: its operators are open, their state
        restored and the restored in-flight data replayed (Flink's INITIALIZING state
        ends here). Checkpoints wait for every unfinished task's report, so no barrier
        ever reaches a task while it replays, and a slow restore cannot make the first
        checkpoint time out (M-C1, M-T2)."""
        cp = self.checkpointer
        if cp is not None:
            cp.responder.task_running(self.key)

    def _restored_as_finished(self) -> bool:
        """Every operator of this task had finished in the restored checkpoint (FLIP-147;
        the driver refused a chain of finished and unfinished operators before)."""
        restore = self.chain.restore
        if restore is None or not getattr(restore, "finished_operators", None):
            return False
        self.restored_finished = all(restore.fully_finished(op.uid) for op in self.chain.operators)
        return self.restored_finished

    def _run_restored_finished(self) -> None:
        """A task restored as finished: its operators are neither opened nor run again.
        Whatever still reaches its input (only when the job changed since the checkpoint)
        is consumed and dropped until every channel ended; then the task sends the
        maximum watermark (M-W1) and its end of data, as a task ending its input does."""
        gate = self.input_gate
        dropped = 0
        while gate is not None and not gate.finished:
            self.signal.clear()
            self._check_cancelled()
            item = gate.poll()
            if item is None:
                self.clock.wait(self.signal, None)
            elif is_batch(item[1]):
                dropped += num_rows(item[1])
        if dropped:
            log.warning(
                "%s (%d) was restored as finished, but %d records reached it; they were dropped",
                self.name,
                self.subtask_index,
                dropped,
            )
        for w in self.writers:
            w.broadcast_event(Watermark(MAX_WATERMARK))
            w.broadcast_event(END_OF_DATA)

    def _finish_data(self) -> None:
        """The end of data: finish the operators (head first), flush and send
        ``END_OF_DATA``; with checkpoints, start waiting for the final checkpoint and
        tell the coordinator (which triggers one soon), then take a draining savepoint
        that stopped the input, or a deferred trigger (FLIP-147)."""
        self.chain.finish()
        for w in self.writers:
            w.broadcast_event(END_OF_DATA)
        self.end_of_data = True
        cp = self.checkpointer
        final = self.final_checkpoint
        if cp is None or final is None:
            return
        final.start(cp.last_snapshot_id)
        report = getattr(cp.responder, "end_of_data", None)
        if callable(report):
            report(self.key, cp.last_snapshot_id)
        drain, self._drain = self._drain, None
        if drain is not None:
            cp.trigger_source(drain)
        self._fire_deferred()

    def _await_final_checkpoint(self) -> None:
        """After the end of data: answer mails and take barriers (nothing else may arrive)
        until every input channel ended and, with checkpoints, the final checkpoint
        completed (:class:`~.final_checkpoint.FinalCheckpoint`; bounded: raises
        ``CheckpointFailedError`` past its limit)."""
        gate = self.input_gate
        source = self._input
        handler = self.barrier_handler
        final = self.final_checkpoint if self.checkpointer is not None else None
        while True:
            self.signal.clear()
            self._check_cancelled()
            self.mailbox.run_pending()
            deadline: float | None = None
            if gate is not None:
                if handler is not None:
                    due = handler.next_deadline_ms()
                    if due is not None and due <= self.clock.monotonic_ms():
                        handler.on_time()  # the alignment timed out (M-B8)
                        continue
                    deadline = due
                while (item := source.poll()) is not None:
                    self._after_end_of_data(*item)
                self._fire_deferred()
            if (gate is None or gate.finished) and (final is None or final.done):
                self._drain_mails_before_the_end()
                return
            if final is not None:
                final.check_deadline()
                if not final.done and final.deadline_ms is not None:
                    deadline = (
                        final.deadline_ms if deadline is None else min(deadline, final.deadline_ms)
                    )
            now = self.clock.monotonic_ms()
            self.clock.wait(self.signal, None if deadline is None else max(0.0, deadline - now))

    def _drain_mails_before_the_end(self) -> None:
        """The task is about to end (FLIP-147): triggers already queued run now, so their
        barriers still go downstream ahead of the end of partition (a task downstream
        may otherwise never see that checkpoint); later triggers are ignored (the
        coordinator records the task as finished). Then the asynchronous parts in
        progress finish, so the checkpoints this task snapshotted get its
        acknowledgement rather than its end (bounded by the final checkpoint deadline)."""
        self._closing = True
        self.mailbox.run_pending()
        cp = self.checkpointer
        final = self.final_checkpoint
        if cp is None:
            return
        left_ms = 10_000.0
        if final is not None and final.deadline_ms is not None:
            left_ms = max(0.0, final.deadline_ms - self.clock.monotonic_ms())
        if not cp.wait_for_pending(left_ms / 1000.0):
            log.warning(
                "%s (%d): snapshots %s still being written at its end; the "
                "coordinator counts it as finished for them",
                self.name,
                self.subtask_index,
                cp.in_progress,
            )

    def _after_end_of_data(self, channel: int, element: StreamElement) -> None:
        """An element an input channel delivered after every channel's end of data: only
        its end of partition may come (barriers and markers went to the handler)."""
        if element is END_OF_PARTITION:
            return
        what = "a record batch" if is_batch(element) else repr(element)
        raise CorruptStreamError(
            f"{self.name} ({self.subtask_index}): input channel {channel} delivered {what} "
            "after its end of data"
        )

    def _replay_channel_state(self) -> None:
        """Restoring an unaligned checkpoint: hand every in-flight record it recorded for
        this subtask's operators (input and output side, redistributed by
        :func:`~lockgate.recovery.channel_state.batches_to_replay`, which the builder
        hands over as :attr:`channel_state_replay`) to the operator at the
        consumer end of its edge, before any new input (M-R1, M-B7)."""
        restore = self.chain.restore
        layout = self.channels
        if restore is None or layout is None or not getattr(restore, "channels", None):
            return
        if self.channel_state_replay is None:
            raise RuntimeError(
                f"{self.name} ({self.subtask_index}) restores recorded channel state but "
                "its builder set no channel_state_replay; build tasks with "
                "lockgate.executor.task_builder.build_task"
            )
        by_uid = {op.uid: op for op in self.chain.operators}
        for edge, batch in self.channel_state_replay(restore, layout):
            by_uid[edge.consumer].process_batch(batch, edge.input_index)

    def _wait(self, deadline: float | None, *, backpressured: bool = False) -> None:
        """Wait for the signal until ``deadline`` (or a due timer); the time counts as
        idle, or as backpressured when an output was full (metrics)."""
        now = self.clock.monotonic_ms()
        due = self.chain.processing_time.wait_ms()
        if due is not None:
            deadline = now + due if deadline is None else min(deadline, now + due)
        timeout = None if deadline is None else max(0.0, deadline - now)
        if not self.metrics_enabled:
            self.clock.wait(self.signal, timeout)
            return
        self.wait_state = (self.idle_ms, self.backpressured_ms, now, backpressured)
        self.clock.wait(self.signal, timeout)
        spent = self.clock.monotonic_ms() - now
        if backpressured:
            self.backpressured_ms += spent
        else:
            self.idle_ms += spent
        self.wait_state = (self.idle_ms, self.backpressured_ms, None, False)

    def _flush_before_waiting(self) -> float | None:
        """The task is about to wait for input: with ``flush_when_idle``, cut every output
        buffer and send what the channels take at once (never blocking), so a record
        never waits for the buffer timeout while the task is idle. Returns when to look
        at the outputs again: the next buffer deadline, or, when a channel could not
        take a batch, the backpressure re-check."""
        if not self.flush_when_idle:
            return self._flush_due()
        for w in self.writers:
            w.flush_idle()
        if self._outputs_available():
            return self._flush_due()
        return self._backpressure_deadline()

    def _flush_due(self) -> float | None:
        deadline: float | None = None
        now = self.clock.monotonic_ms()
        for w in self.writers:
            d = w.flush_due(now)
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        return deadline

    def _outputs_available(self) -> bool:
        return all(w.is_available() for w in self.writers)

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
        self._wait(self._backpressure_deadline(), backpressured=True)
        return False

    def _run_source(self, source: object) -> None:
        from .operators.io import SourceOperator

        assert isinstance(source, SourceOperator)
        while True:
            if not self._start_turn():
                continue
            if self._drain is not None:  # a draining savepoint stops the source (FLIP-147)
                return
            status = source.emit_next()
            if status is InputStatus.END_OF_INPUT:
                return
            if status is not InputStatus.NOTHING_AVAILABLE:
                self._flush_due()
                continue
            deadline = self._flush_before_waiting()
            # the reader wakes the task when data arrives, where it can (its hint
            # then only bounds the wait)
            source.watch_arrival(self.signal.set)
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
        # channels that count what is taken from them (in-process ones) cost nothing here
        count_bytes = [
            self.metrics_enabled and not hasattr(c, "taken_bytes") for c in gate.channels
        ]
        while True:
            if not self._start_turn():
                continue
            due = None
            if handler is not None:
                due = handler.next_deadline_ms()
                if due is not None and due <= self.clock.monotonic_ms():
                    handler.on_time()  # the alignment timed out (M-B8)
                    continue
            if self._channels_with_data == 0:
                return  # every channel delivered its end of data (or ended)
            item = source.poll()
            if item is None:
                deadline = self._flush_before_waiting()
                if due is not None:
                    deadline = due if deadline is None else min(deadline, due)
                self._wait(deadline)
                continue
            channel, element = item
            if is_batch(element):
                if count_bytes[channel]:
                    self.bytes_in += nbytes(element)
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
        elif element is END_OF_DATA or element is END_OF_PARTITION:
            if self._data_ended[channel]:
                if element is END_OF_DATA:
                    raise CorruptStreamError(
                        f"{self.name} ({self.subtask_index}): input channel {channel} "
                        "delivered a second end of data"
                    )
                return
            self._data_ended[channel] = True
            self._channels_with_data -= 1
            outputs = valve.channel_finished(local)  # counts as MAX from now on (M-W1)
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

"""The task side of a checkpoint (M-T1 to M-T4, M-B7, M-B10).

One :class:`SubtaskCheckpointer` per subtask. Everything except the
asynchronous part runs in the task thread, between two batches, so a snapshot
is atomic with respect to record processing:

1. prepare: every operator emits what must precede the barrier;
2. forward the barrier on every output: aligned, behind the buffered output;
   unaligned, ahead of the output not yet consumed (that data is the output
   in-flight state);
3. the synchronous part: each operator returns a consistent view of its state
   (copy-on-write; processing goes on right after). When an operator fails there,
   the subtask declines the checkpoint (``SYNC_FAILED``, M-C6: the coordinator
   aborts it and counts it towards ``tolerable_failures``), releases the views
   already taken and keeps running; the barrier already left, so a cancellation
   marker follows it downstream;
4. the asynchronous part, on a background thread: materialize the views, write
   one file per stateful operator (and one for the channel state of an
   unaligned checkpoint, once every input delivered its barrier), then
   acknowledge with the state handles and the metrics. It can be cancelled
   (abort notice, task end): it then releases its views and deletes what it
   wrote.

A checkpoint the coordinator aborted (its notice: :meth:`SubtaskCheckpointer.cancel`)
has had its ``chk-<id>/`` folder discarded; a write of it still in progress may have
created the folder again, or failed because the folder vanished under it (M-C4, M-C6,
M-C8). Such an asynchronous part ends quietly: it declines nothing (the checkpoint is
no longer pending), and it discards the folder again, so none is left behind. A failure
of a checkpoint the subtask was not told is aborted is declined as before
(``ASYNC_FAILED``, M-C6); if the abort is only on its way, the coordinator ignores that
decline and discards the folder again itself.

Incremental checkpoints (M-R4): a view with ``materialize_to(uploader)`` (the
RocksDB backend's, or an operator's composite view forwarding to it) is given a
:class:`~lockgate.checkpoint.shared_registry.SharedStateUploader` in a checkpoint
(never in a savepoint: a savepoint is always the canonical ``materialize()``,
self-contained, M-S1). The shared files it references ride on the operator's
state handle (``StateHandle.shared``) to the driver; the uploader offers for reuse
only files of the newest checkpoint this subtask knows to be complete
(:class:`~lockgate.checkpoint.shared_registry.SharedFileTracker`).
``metrics.state_size`` counts the bytes the checkpoint wrote: state files plus
newly uploaded shared files.

Channel state (M-B7) is written with every channel named by the uids at its edge's
two ends and its subtask indexes (:mod:`lockgate.checkpoint.channel_state`), under the
key ``channels:<uid of the head operator>``, so a job built again restores it.

A task that is not running declines a trigger and sends a cancellation marker
downstream instead of a barrier (M-T2). It also implements the
:class:`~lockgate.checkpoint.barriers.base.BarrierActions` its barrier handler
calls.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..checkpoint.barriers.base import AlignmentInfo
from ..checkpoint.channel_state import encode, freeze, frozen_size, state_key
from ..checkpoint.shared_registry import SharedFileTracker, SharedStateUploader
from ..checkpoint.storage import CheckpointStorage
from ..checkpoint.types import (
    CheckpointFailureReason,
    StateHandle,
    SubtaskCheckpointMetrics,
    TaskAcknowledgement,
    TaskKey,
)
from ..core.batch import Batch
from ..core.clock import Clock
from ..core.elements import (
    CancellationMarker,
    CheckpointBarrier,
    CheckpointOptions,
    CheckpointType,
)
from ..graph.channel_identity import SubtaskChannels
from .operators.base import StreamOperator
from .record_writer import RecordWriter

log = logging.getLogger(__name__)


class CheckpointResponder(Protocol):
    """How a subtask answers the coordinator (thread-safe, non-blocking)."""

    def acknowledge(self, ack: TaskAcknowledgement) -> None: ...

    def decline(
        self, task: TaskKey, checkpoint_id: int, reason: CheckpointFailureReason
    ) -> None: ...

    def task_running(self, task: TaskKey) -> None:
        """``task`` initialized (operators opened, state restored, in-flight data
        replayed): checkpoints may include it from now on."""
        ...


class _Cancelled(Exception):
    pass


@dataclass
class _InProgress:
    """A checkpoint this subtask has snapshotted and not yet acknowledged."""

    checkpoint_id: int
    metrics: SubtaskCheckpointMetrics
    views: dict[str, Any]
    unaligned: bool
    #: input channel -> the batches recorded on it, in order
    inputs: dict[int, list[Any]] = field(default_factory=dict)
    #: (writer index, channel index, batch) of the overtaken output, in order
    outputs: list[tuple[int, int, Any]] = field(default_factory=list)
    channels_done: threading.Event = field(default_factory=threading.Event)
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: the coordinator aborted this checkpoint (its notice came): its folder is discarded
    aborted: threading.Event = field(default_factory=threading.Event)
    written: list[StateHandle] = field(default_factory=list)
    future: Future[None] | None = None
    #: a savepoint: every view is materialized canonically (no shared files, M-S1)
    savepoint: bool = False
    #: the uploaders of the views that wrote incremental state (M-R4)
    uploaders: list[SharedStateUploader] = field(default_factory=list)


class SubtaskCheckpointer:
    def __init__(
        self,
        task: TaskKey,
        name: str,
        operators: list[StreamOperator],
        writers: list[RecordWriter],
        storage: CheckpointStorage,
        responder: CheckpointResponder,
        clock: Clock,
        channels: SubtaskChannels | None = None,
    ) -> None:
        """``channels`` names the subtask's channels in its channel state (M-B7); without
        it (tests driving a checkpointer alone) the state cannot be restored."""
        self.task = task
        self.name = name
        self.operators = operators
        self.writers = writers
        self.storage = storage
        self.responder = responder
        self.clock = clock
        self.channels = channels
        self._channel_owner = channels.owner if channels is not None else f"vertex-{task[0]}"
        #: the key of this subtask's channel state in a checkpoint's states (M-B7)
        self.channel_state_key = state_key(self._channel_owner)
        ctx = getattr(operators[0], "ctx", None) if operators else None
        #: the vertex's parallelism, recorded with each state file (rescaling, M-R3)
        self.parallelism: int = ctx.parallelism if ctx is not None else 1
        self._in_progress: dict[int, _InProgress] = {}
        self._lock = threading.Lock()
        self._declined: set[int] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        # the task was cancelled: snapshots are dropped, asynchronous parts discarded
        self._cancelled = False
        #: which shared files the next incremental checkpoint may reuse (M-R4)
        self.shared_files = SharedFileTracker()
        #: the newest checkpoint id this subtask snapshotted (0: none); the task's final
        #: checkpoint is one newer than it was at the end of data (FLIP-147)
        self.last_snapshot_id = 0

    # -- triggers (task thread) ---------------------------------------------------------
    def trigger_source(self, barrier: CheckpointBarrier) -> None:
        """A source's trigger (M-T1): prepare, barrier first, then the snapshot. An
        unaligned barrier overtakes the source's unconsumed output (M-B7); a source has no
        input channels, so its channel state is complete at once."""
        delay = max(0.0, float(self.clock.time_ms() - barrier.timestamp))
        unaligned = barrier.options.unaligned
        self.trigger_snapshot(barrier, AlignmentInfo(0.0, delay, unaligned=unaligned))
        if unaligned:
            self.channel_state_complete(barrier.checkpoint_id)

    def decline_not_running(self, barrier: CheckpointBarrier) -> None:
        """M-T2: a task that is not running declines and sends a cancellation marker."""
        self.abort_checkpoint(barrier.checkpoint_id, CheckpointFailureReason.TASK_NOT_RUNNING)

    def trigger_snapshot(self, barrier: CheckpointBarrier, info: AlignmentInfo) -> None:
        checkpoint_id = barrier.checkpoint_id
        if self._cancelled:
            return  # the task is cancelled: the attempt ends, nothing it snapshots counts
        self.last_snapshot_id = max(self.last_snapshot_id, checkpoint_id)
        for op in self.operators:
            op.prepare_snapshot_pre_barrier(checkpoint_id)
        metrics = SubtaskCheckpointMetrics(
            alignment_ms=info.alignment_ms,
            start_delay_ms=info.start_delay_ms,
            unaligned=info.unaligned,
        )
        progress = _InProgress(
            checkpoint_id,
            metrics,
            {},
            info.unaligned,
            savepoint=barrier.options.type is CheckpointType.SAVEPOINT,
        )
        if info.unaligned:
            forwarded = barrier
            if not barrier.options.unaligned:  # an alignment that timed out (M-B8)
                forwarded = replace(barrier, options=CheckpointOptions(unaligned=True))
            for index, w in enumerate(self.writers):
                for target, batch in w.broadcast_priority(forwarded):
                    progress.outputs.append((index, target, freeze(batch)))
            metrics.persisted_inflight_bytes = sum(frozen_size(b) for _, _, b in progress.outputs)
        else:
            for w in self.writers:
                w.broadcast_event(barrier)
            progress.channels_done.set()
        started = self.clock.monotonic_ms()
        op_name = ""
        try:
            for op in self.operators:
                op_name = op.name or op.uid
                view = op.snapshot_state(checkpoint_id)
                if view is not None:
                    progress.views[op.uid] = view
        except Exception:
            # M-C6: a failed snapshot fails the checkpoint, not the task
            log.exception(
                "%s (%d): the synchronous snapshot part of checkpoint %d failed in "
                "operator '%s'; declining the checkpoint",
                self.name,
                self.task[1],
                checkpoint_id,
                op_name,
            )
            self._release(progress)
            self.abort_checkpoint(checkpoint_id, CheckpointFailureReason.SYNC_FAILED)
            return
        metrics.sync_ms = self.clock.monotonic_ms() - started
        with self._lock:
            self._in_progress[checkpoint_id] = progress
        progress.future = self._executor().submit(self._async_part, progress)

    # -- barrier actions (task thread) --------------------------------------------------
    def abort_checkpoint(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        """Decline ``checkpoint_id`` (once) and tell downstream with a cancellation marker."""
        if checkpoint_id in self._declined:
            return
        self._declined.add(checkpoint_id)
        if len(self._declined) > 1000:
            self._declined = set(sorted(self._declined)[-100:])
        self._cancel(checkpoint_id, aborted=False)  # pending until the coordinator says
        marker = CancellationMarker(checkpoint_id)
        for w in self.writers:
            w.broadcast_event(marker)
        self.responder.decline(self.task, checkpoint_id, reason)

    def record_inflight(self, checkpoint_id: int, channel: int, batch: Batch) -> None:
        progress = self._in_progress.get(checkpoint_id)
        if progress is None:
            return
        frozen = freeze(batch)
        progress.inputs.setdefault(channel, []).append(frozen)
        progress.metrics.persisted_inflight_bytes += frozen_size(frozen)

    def channel_state_complete(self, checkpoint_id: int) -> None:
        progress = self._in_progress.get(checkpoint_id)
        if progress is not None:
            progress.channels_done.set()

    # -- notices (task thread) ------------------------------------------------------------
    def notify_complete(self, checkpoint_id: int) -> None:
        self.shared_files.complete(checkpoint_id)
        for op in self.operators:
            op.notify_checkpoint_complete(checkpoint_id)

    def notify_aborted(self, checkpoint_id: int) -> None:
        self.cancel(checkpoint_id)
        self.shared_files.abort(checkpoint_id)
        for op in self.operators:
            op.notify_checkpoint_aborted(checkpoint_id)

    def cancel(self, checkpoint_id: int) -> None:
        """The coordinator aborted ``checkpoint_id`` (its notice, any thread): cancel its
        asynchronous part if it still runs (M-T3); that part then deletes what it wrote
        and discards the checkpoint's folder, which its write may have created again
        after the coordinator discarded it (M-C4, M-C8)."""
        self._cancel(checkpoint_id, aborted=True)

    def _cancel(self, checkpoint_id: int, *, aborted: bool) -> None:
        with self._lock:
            progress = self._in_progress.get(checkpoint_id)
        if progress is not None:
            if aborted:
                progress.aborted.set()
            progress.cancelled.set()
            progress.channels_done.set()

    def cancel_all(self) -> None:
        """The task is cancelled (any thread): cancel every asynchronous part in progress
        (it deletes what it wrote) and drop every later snapshot, so a task thread that
        does not stop can write no state afterwards."""
        self._cancelled = True
        with self._lock:
            pending = list(self._in_progress.values())
        for p in pending:
            p.cancelled.set()
            p.channels_done.set()

    @property
    def in_progress(self) -> list[int]:
        with self._lock:
            return sorted(self._in_progress)

    def wait_for_pending(self, timeout_s: float) -> bool:
        """Wait, at most ``timeout_s``, until the asynchronous parts in progress have
        finished (acknowledged, declined or failed), without cancelling them: a task that
        ends after its final checkpoint acknowledges what it snapshotted (FLIP-147).
        Returns whether they all finished."""
        with self._lock:
            futures = [p.future for p in self._in_progress.values() if p.future is not None]
        if not futures:
            return True
        _, not_done = wait(futures, timeout=max(0.0, timeout_s))
        return not not_done

    def close(self, timeout_s: float = 10.0) -> None:
        """Cancel every checkpoint in progress and stop the background thread, waiting at
        most ``timeout_s`` for the asynchronous parts to end. One still running then (a
        write that hangs) is left behind, logged: it was cancelled, so whatever it
        still writes it deletes, and it never acknowledges."""
        self._closed = True
        with self._lock:
            pending = list(self._in_progress.values())
        for p in pending:
            p.cancelled.set()
            p.channels_done.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            futures = [
                p.future for p in pending if p.future is not None and not p.future.cancelled()
            ]
            _, not_done = wait(futures, timeout=max(0.0, timeout_s))
            if not_done:
                log.warning(
                    "%s (%d): the asynchronous part of checkpoints %s did not end "
                    "within %.3g s of its cancellation; left behind (cancelled, it "
                    "deletes what it writes and never acknowledges)",
                    self.name,
                    self.task[1],
                    sorted(p.checkpoint_id for p in pending if p.future in not_done),
                    timeout_s,
                )
            else:
                self._pool.shutdown(wait=True)
            self._pool = None

    # -- the asynchronous part ----------------------------------------------------------
    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                1, thread_name_prefix=f"lockgate async snapshot {self.name} ({self.task[1]})"
            )
        return self._pool

    def _check(self, progress: _InProgress) -> None:
        if progress.cancelled.is_set() or self._cancelled:
            raise _Cancelled()

    def _async_part(self, progress: _InProgress) -> None:
        checkpoint_id = progress.checkpoint_id
        started = self.clock.monotonic_ms()
        handles: dict[str, StateHandle] = {}
        subtask = self.task[1]
        try:
            for uid, view in list(progress.views.items()):
                self._check(progress)
                incremental = None if progress.savepoint else getattr(view, "materialize_to", None)
                uploader: SharedStateUploader | None = None
                if callable(incremental):
                    uploader = self.shared_files.uploader(
                        self.storage, checkpoint_id, f"{uid}/{subtask}"
                    )
                    progress.uploaders.append(uploader)
                    state = incremental(uploader)
                else:
                    materialize = getattr(view, "materialize", None)
                    state = materialize() if callable(materialize) else view
                handle = self.storage.write_state(
                    checkpoint_id,
                    f"op-{uid}-{subtask}",
                    {
                        "operator": uid,
                        "subtask": subtask,
                        "state": state,
                        "parallelism": self.parallelism,
                    },
                )
                progress.written.append(handle)
                if uploader is not None:
                    handle = replace(handle, shared=uploader.referenced())
                handles[uid] = handle
            if progress.unaligned:
                while not progress.channels_done.wait(0.5):
                    self._check(progress)
                self._check(progress)
                handle = self.storage.write_state(
                    checkpoint_id,
                    f"channels-{self._channel_owner}-{subtask}",
                    encode(subtask, self.channels, progress.inputs, progress.outputs),
                )
                progress.written.append(handle)
                handles[self.channel_state_key] = handle
            self._check(progress)
        except _Cancelled:
            self._discard(progress)
            return
        except Exception as e:
            if progress.aborted.is_set():
                # the coordinator aborted it and discarded its folder meanwhile (the write
                # lost the folder under it): the end of an aborted checkpoint, not a failure
                log.info(
                    "%s (%d): checkpoint %d was aborted while its state was written (%s); "
                    "its files are discarded",
                    self.name,
                    subtask,
                    checkpoint_id,
                    e,
                )
                self._discard(progress)
                return
            log.exception(
                "%s (%d): the asynchronous part of checkpoint %d failed",
                self.name,
                subtask,
                checkpoint_id,
            )
            self._discard(progress)
            self.responder.decline(self.task, checkpoint_id, CheckpointFailureReason.ASYNC_FAILED)
            return
        finally:
            self._release(progress)
            with self._lock:
                self._in_progress.pop(checkpoint_id, None)
        metrics = progress.metrics
        metrics.async_ms = self.clock.monotonic_ms() - started
        metrics.state_size = sum(h.size for h in handles.values()) + sum(
            u.uploaded_bytes for u in progress.uploaders
        )
        self.shared_files.snapshot_done(checkpoint_id, progress.uploaders)
        self.responder.acknowledge(TaskAcknowledgement(self.task, checkpoint_id, handles, metrics))

    def _release(self, progress: _InProgress) -> None:
        for view in progress.views.values():
            release = getattr(view, "release", None)
            if callable(release):
                try:
                    release()
                except Exception:
                    log.exception("%s: releasing a snapshot view failed", self.name)

    def _discard(self, progress: _InProgress) -> None:
        for uploader in progress.uploaders:
            uploader.discard_uploads()
        for handle in progress.written:
            try:
                self.storage.discard_handle(handle)
            except Exception:  # noqa: BLE001 - best effort; the coordinator discards the folder
                log.warning("%s: could not delete %s", self.name, handle.path)
        if progress.aborted.is_set():
            # the coordinator discarded the folder already; a write since may have created
            # it again: nothing in an aborted checkpoint's folder is needed (M-C8)
            try:
                self.storage.discard(progress.checkpoint_id)
            except Exception as e:  # noqa: BLE001 - leftover files only cost space
                log.warning(
                    "%s: could not discard the folder of aborted checkpoint %d: %s",
                    self.name,
                    progress.checkpoint_id,
                    e,
                )

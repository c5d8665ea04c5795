"""A slot: one Spark barrier task that hosts subtask i of every vertex.

Runs on an executor. It binds its data-plane socket (one for every network
channel it consumes, see :mod:`.mux`), registers that address (and its pid and
host) with the driver, waits for every slot's addresses, links to its peers, then runs its
subtasks as threads exactly like the local executor. A subtask failure is
reported to the driver with the operator, subtask and traceback, the other
subtasks are cancelled and the Spark task raises (failing the attempt). A
CANCEL from the driver stops every subtask.

Threads of a slot: the Spark task's main thread (wiring, then waiting for the
subtasks), one thread per subtask, the control thread (heartbeats, control
messages; it owns the control socket), the watchdog (thread stacks to the driver
when the heartbeat falls silent, see :mod:`.watchdog`), a snapshot thread per
checkpointing subtask, the data-plane receiver (it owns the slot's data socket,
see :mod:`.mux.receiver`) and zmq's own I/O threads. The links to peer slots are
shared by the subtask threads, one send at a time (:mod:`.mux.link`); they and the
receiver are closed here after the subtask threads ended.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

import cloudpickle
import zmq

from ...checkpoint.storage_url import open_storage
from ...checkpoint.types import CheckpointFailureReason, TaskAcknowledgement
from ...core.clock import SystemClock
from ...errors import TaskCancelledError, UserFunctionError
from ...graph.execution_plan import ExecutionPlan
from ...runtime.final_checkpoint import finished_task_results
from ...runtime.task import StreamTask
from ...runtime.task_metrics import task_sample
from ...runtime.task_threads import run_task_threads
from ...runtime.watermark_report import task_watermarks
from ..task_builder import build_task
from ..wiring import wire_subtask
from .auth import MessageAuth
from .control import (
    ACK,
    CANCEL,
    CHECKPOINT_ABORTED,
    CHECKPOINT_COMPLETE,
    DECLINE,
    FAILED,
    FINISHED,
    HEARTBEAT,
    REGISTER,
    STACKS,
    START,
    TASK_END_OF_DATA,
    TASK_FINISHED,
    TASK_RUNNING,
    TRIGGER,
    ControlClient,
    ControlReporter,
)
from .slot_channels import SlotChannels
from .watchdog import SlotWatchdog
from .worker_exits import discard_exit

log = logging.getLogger(__name__)


@dataclass
class SlotJob:
    """Everything a slot needs, shipped in the Spark task closure."""

    plan_bytes: bytes
    control_endpoint: str
    secret: bytes
    generation: int
    attempt_number: int = 0
    start_timeout_s: float = 120.0
    heartbeat_s: float = 1.0
    #: the slot's watchdog reports its thread stacks after this long without a heartbeat
    #: (the driver's heartbeat timeout is longer: the stacks are there when it fires)
    stall_after_s: float = 30.0


class SlotFailed(RuntimeError):
    """Raised by the Spark task when a subtask failed (the driver already has the details)."""


def _host() -> str:
    return os.environ.get("SPARK_LOCAL_IP") or socket.gethostbyname(socket.gethostname())


def _last_beat(control: ControlClient) -> None:
    """Send a heartbeat with the subtasks' counts as they ended: a failed or cancelled
    attempt's counts reach the driver exactly (it adds them to the run's, see
    ``JobHandle.end_attempt``), not as of the last periodic heartbeat, which a short
    attempt may not even have sent."""
    provider = getattr(control, "heartbeat_payload", None)
    if provider is None:
        return
    try:
        payload = provider()
    except Exception:  # noqa: BLE001 - diagnostics only
        return
    control.send(HEARTBEAT, payload)


def run_slot(slot: int, job: SlotJob) -> dict[str, Any]:
    """Run slot ``slot`` of the job to its end; return its counters and sink results."""
    plan: ExecutionPlan = cloudpickle.loads(job.plan_bytes)
    auth = MessageAuth(job.secret)
    context: Any = zmq.Context.instance()
    dispatch = _SlotDispatch()
    control = ControlClient(
        job.control_endpoint, auth, job.generation, slot, dispatch.on_message, job.heartbeat_s
    )
    dispatch.responder = _ControlResponder(control)
    watchdog = _start_watchdog(slot, job, auth, control)
    channels = SlotChannels(plan, slot, context, auth, job.generation)
    tasks = dispatch.tasks
    delivered = False
    try:
        storage = (
            open_storage(plan.checkpoint.storage)
            if plan.checkpointing and plan.checkpoint and plan.checkpoint.storage
            else None
        )
        endpoints = channels.bind_inputs(_host())
        discard_exit(os.getpid())  # an older process's with this pid: not this slot's end
        control.send(
            REGISTER,
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "endpoints": endpoints,
                "stack_dump": watchdog.dump_path,
            },
        )
        channels.connect(_await_start(dispatch.inbox, job.start_timeout_s))
        _build_tasks(plan, slot, job, channels, storage, dispatch)
        control.heartbeat_payload = lambda: {
            "watermarks": [w for t in list(tasks) for w in task_watermarks(t)],
            "metrics": [task_sample(t) for t in list(tasks)],
        }
        _run_tasks(tasks, control, dispatch.cancelled, on_started=watchdog.note_threads)
        delivered = True
        control.send(FINISHED, None)
        return {
            "slot": slot,
            "counters": [t.chain.counters() for t in tasks],
            "results": [(t.subtask_index, t.chain.results()) for t in tasks],
        }
    except SlotFailed:
        raise
    except BaseException as e:
        info = _failure_info(e, f"slot {slot}", slot)
        info["counters"] = [t.chain.counters() for t in tasks]  # a cancelled job's counts
        info["slot_ended"] = True  # this slot's subtasks are closed: the driver may release
        _last_beat(control)
        control.send(FAILED, info)
        raise
    finally:
        # The control thread first: it sends what is queued (FINISHED or FAILED) and stops
        # calling into the tasks (a CANCEL sets their signals), so nothing touches a
        # signal or channel below once it is closed. The watchdog before it: a stopped
        # control thread sends no heartbeats, which is no stall.
        watchdog.stop()
        control.close()
        channels.close(delivered)
        _flush(context, slot)


class _SlotDispatch:
    """The control messages from the driver, delivered to the slot's subtasks (called on
    the control thread): checkpoint triggers and notices, CANCEL; the rest (START) goes
    to :attr:`inbox` for the slot's main thread."""

    def __init__(self) -> None:
        self.inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        #: the subtasks built so far (a CANCEL during the build reaches them)
        self.tasks: list[StreamTask] = []
        #: every subtask by (vertex id, subtask index), once all are built
        self.by_key: dict[tuple[int, int], StreamTask] = {}
        self.cancelled = threading.Event()
        self.responder: _ControlResponder | None = None

    def on_message(self, type_: str, payload: Any) -> None:
        if type_ == TRIGGER:
            key, barrier = payload
            task = self.by_key.get(tuple(key))
            if task is not None:
                task.trigger_checkpoint(barrier)
            elif self.responder is not None:  # not deployed yet, or not here (M-T2)
                self.responder.decline(
                    tuple(key), barrier.checkpoint_id, CheckpointFailureReason.TASK_NOT_RUNNING
                )
            return
        if type_ == CHECKPOINT_COMPLETE:
            for t in list(self.tasks):
                t.notify_checkpoint_complete(payload)
            return
        if type_ == CHECKPOINT_ABORTED:
            for t in list(self.tasks):
                t.notify_checkpoint_aborted(payload)
            return
        if type_ == CANCEL:
            self.cancelled.set()
            for t in list(self.tasks):
                t.cancel()
        self.inbox.put((type_, payload))


def _build_tasks(
    plan: ExecutionPlan,
    slot: int,
    job: SlotJob,
    channels: SlotChannels,
    storage: Any,
    dispatch: _SlotDispatch,
) -> None:
    """Build subtask i = ``slot`` of every vertex that has one, wired by the executors'
    shared :func:`~lockgate.executor.wiring.wire_subtask`, into ``dispatch.tasks``."""
    clock = SystemClock()
    for vertex_id, i in plan.slot_subtasks(slot):
        v = plan.vertex(vertex_id)
        outputs, inputs = wire_subtask(plan, v, i, channels.out_channel, channels.in_channel)
        signal = threading.Event()
        dispatch.tasks.append(
            build_task(
                plan,
                v,
                i,
                output_channels=outputs,
                input_channels=inputs,
                signal=signal,
                clock=clock,
                attempt_number=job.attempt_number,
                storage=storage,
                responder=dispatch.responder,
                in_process=False,
            )
        )
    dispatch.by_key.update((t.key, t) for t in dispatch.tasks)


def _start_watchdog(
    slot: int, job: SlotJob, auth: MessageAuth, control: ControlClient
) -> SlotWatchdog:
    """The slot's watchdog (see :mod:`.watchdog`): reports on a socket of its own, which
    its thread creates, uses and closes; its faulthandler dump goes to a file in the
    temporary folder whose path the slot registers with the driver."""
    reporter = ControlReporter(job.control_endpoint, auth, job.generation, slot)
    dump_path = os.path.join(
        tempfile.gettempdir(), f"lockgate-slot-{slot}-gen{job.generation}-pid{os.getpid()}.stacks"
    )
    watchdog = SlotWatchdog(
        lambda: control.last_beat,
        lambda payload: reporter.send(STACKS, payload),
        stall_after_s=job.stall_after_s,
        check_s=min(job.heartbeat_s, job.stall_after_s / 4),
        dump_path=dump_path,
        label=f"slot {slot}",
        on_stop=reporter.close,
    )
    watchdog.start()
    return watchdog


#: how long a slot waits, at its end, for its last messages to leave
FLUSH_TIMEOUT_S = 15.0


def _flush(context: Any, slot: int) -> None:
    """Wait (bounded) until the messages queued on the slot's closed sockets have left.

    ``close(linger=...)`` only marks them: zmq's I/O thread sends them later, and the
    Python worker ends with ``os._exit`` as soon as the task returns, which would drop
    them. A lost end-of-partition leaves a downstream slot waiting for ever, and a lost
    FINISHED makes the driver see a slot without heartbeats. Terminating the context
    blocks until every socket's lingering messages are sent (or its linger expires).
    """
    done = threading.Event()

    def term() -> None:
        try:
            context.term()
        finally:
            done.set()

    threading.Thread(target=term, name=f"lockgate flush slot {slot}", daemon=True).start()
    if not done.wait(FLUSH_TIMEOUT_S):
        log.warning("slot %s: queued messages did not leave within %.0fs", slot, FLUSH_TIMEOUT_S)


class _ControlResponder:
    """Acknowledgements and declines travel to the driver's coordinator over the control
    plane (thread-safe: the client queues them)."""

    def __init__(self, control: ControlClient) -> None:
        self.control = control

    def acknowledge(self, ack: TaskAcknowledgement) -> None:
        self.control.send(ACK, ack)

    def decline(
        self, task: tuple[int, int], checkpoint_id: int, reason: CheckpointFailureReason
    ) -> None:
        self.control.send(DECLINE, (task, checkpoint_id, reason))

    def end_of_data(self, task: tuple[int, int], last_snapshot_id: int) -> None:
        self.control.send(TASK_END_OF_DATA, (task, last_snapshot_id))

    def task_running(self, task: tuple[int, int]) -> None:
        self.control.send(TASK_RUNNING, task)


def _await_start(inbox: queue.Queue[tuple[str, Any]], timeout_s: float) -> dict[Any, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(
                f"the driver did not send the slot addresses within {timeout_s:.0f}s"
            )
        try:
            type_, payload = inbox.get(timeout=remaining)
        except queue.Empty:
            continue
        if type_ == START:
            return payload
        if type_ == CANCEL:
            raise TaskCancelledError("the driver cancelled the job before it started")


def _failure_info(
    error: BaseException, task_name: str, subtask: int, tb: str | None = None
) -> dict[str, Any]:
    inner = error.error if isinstance(error, UserFunctionError) else error
    try:
        pickled: bytes | None = cloudpickle.dumps(error)
        cloudpickle.loads(pickled)
    except Exception:  # noqa: BLE001 - an unpicklable error travels as text only
        pickled = None
    return {
        "exception": pickled,
        "task": task_name,
        "subtask": subtask,
        "operator": getattr(error, "operator", None),
        "operator_subtask": getattr(error, "subtask", None),
        "parallelism": getattr(error, "parallelism", None),
        "error_type": type(inner).__name__,
        "error_module": type(inner).__module__,
        "message": str(inner),
        "traceback": tb
        or "".join(traceback.format_exception(type(inner), inner, inner.__traceback__)),
        "pid": os.getpid(),
    }


#: how long a slot whose subtask failed waits for the driver's CANCEL before its Spark task
#: fails (longer than the driver's grace for the other slots to close, see
#: ``CLOSE_GRACE_S`` in :mod:`lockgate.executor.spark.watch`)
RELEASE_WAIT_S = 15.0


def _run_tasks(
    tasks: list[StreamTask],
    control: ControlClient,
    cancelled: threading.Event,
    on_started: Any = None,
) -> None:
    def report(task: StreamTask, error: BaseException, tb: str) -> None:
        if not isinstance(error, TaskCancelledError):
            control.send(FAILED, _failure_info(error, task.name, task.subtask_index))

    def finished(task: StreamTask) -> None:
        # its sink results too: a later attempt restoring it as finished returns them
        control.send(TASK_FINISHED, (task.key, finished_task_results(task, pickled=True)))

    failure = run_task_threads(
        tasks, join_timeout_s=5.0, on_failure=report, on_finished=finished, on_started=on_started
    )
    if failure is None:
        return
    task, error, _ = failure
    _last_beat(control)
    if isinstance(error, TaskCancelledError):
        raise error
    # Let the other slots close their operators before this Spark task fails and Spark
    # kills the rest of the barrier stage: the driver cancels them first and sends this
    # slot its CANCEL once they ended (or after its grace); bounded, should the driver
    # be gone.
    cancelled.wait(RELEASE_WAIT_S)
    # Not chained: Spark logs this exception (twice: executor and task set manager) and
    # ships it to the driver; the user's traceback is printed once, in the driver's
    # JobFailedError built from the FAILED report.
    raise SlotFailed(
        f"subtask {task.name} ({task.subtask_index}) failed: {type(error).__name__}: {error} "
        "(the job's error carries the traceback)"
    ) from None

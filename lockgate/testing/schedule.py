"""FaultSchedule: the faults of one job, and the hooks the runtime calls to install them.

The plan carries the schedule (``plan.faults``) to every process that runs a
subtask; the task builder then calls, per subtask and attempt:

* :meth:`FaultSchedule.wrap_responder` before the subtask's checkpointer is made
  (checkpoints enabled only): it returns the responder itself unless an
  acknowledgement fault may apply to this subtask and attempt;
* :meth:`FaultSchedule.install` once the subtask is built (operators created, not
  yet opened): it replaces methods of the matching operators by instance
  attributes that count and fire. Without a matching fault it changes nothing.

Every decision uses the attempt number and counters created by ``install`` for
that one subtask, so a schedule behaves identically in any process.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..core.batch import num_rows
from ..errors import ConfigurationError
from .faults import (
    ACK_FAULTS,
    FAULT_TYPES,
    DelayAcknowledgement,
    DelayBarriers,
    FailAtRecord,
    FailCommit,
    FailDuringAlignment,
    FailSnapshot,
    Fault,
    InjectedFault,
    KillWorker,
)

if TYPE_CHECKING:
    from ..checkpoint.types import CheckpointFailureReason, TaskAcknowledgement, TaskKey
    from ..graph.execution_plan import ExecutionPlan
    from ..runtime.operators.base import StreamOperator
    from ..runtime.subtask_checkpointer import CheckpointResponder
    from ..runtime.task import StreamTask


class FaultSchedule:
    """An immutable, picklable list of faults: ``FaultSchedule(f1, f2)`` or
    ``FaultSchedule([f1, f2])``. What :func:`inject_faults` puts into a job."""

    def __init__(self, *faults: Fault | Iterable[Fault]) -> None:
        if len(faults) == 1 and isinstance(faults[0], (list, tuple)):
            faults = tuple(faults[0])
        for f in faults:
            if not isinstance(f, FAULT_TYPES):
                raise ConfigurationError(
                    f"FaultSchedule takes faults from lockgate.testing (e.g. "
                    f"FailAtRecord('my map', 100)), got {f!r}"
                )
        self.faults: tuple[Fault, ...] = tuple(faults)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"FaultSchedule({', '.join(map(repr, self.faults))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FaultSchedule) and other.faults == self.faults

    def __hash__(self) -> int:
        return hash(self.faults)

    def __len__(self) -> int:
        return len(self.faults)

    def for_attempt(self, attempt_number: int) -> list[Fault]:
        """The faults that fire in attempt ``attempt_number``."""
        return [f for f in self.faults if f.attempt == attempt_number]

    def check(self, plan: ExecutionPlan) -> None:
        """Raise ``ConfigurationError`` if a fault names an operator (or, for
        acknowledgement faults, a task) that ``plan`` does not have, since such a fault
        could never fire."""
        known = set(plan.operator_names) | set(plan.operator_names.values())
        tasks = {v.name for v in plan.vertices}
        for f in self.faults:
            if f.operator in known or (isinstance(f, ACK_FAULTS) and f.operator in tasks):
                continue
            raise ConfigurationError(
                f"{f!r} names operator {f.operator!r}, which job '{plan.job_name}' does not "
                f"have; its operators: {sorted(plan.operator_names.values())}"
            )

    # -- runtime hooks ----------------------------------------------------------------
    def wrap_responder(
        self, responder: CheckpointResponder, task_key: TaskKey, attempt_number: int
    ) -> CheckpointResponder:
        """The responder subtask ``task_key`` answers the coordinator through in attempt
        ``attempt_number``: ``responder`` itself unless an acknowledgement fault targets
        this subtask index and attempt; then a wrapper, dormant until :meth:`install`
        finds the fault's operator (or task name) in the subtask."""
        if not any(
            isinstance(f, ACK_FAULTS) and _attempt_and_subtask(f, attempt_number, task_key[1])
            for f in self.faults
        ):
            return responder
        return FaultyResponder(responder, task_key)

    def install(self, task: StreamTask, *, attempt_number: int, in_process: bool) -> None:
        """Install the faults of attempt ``attempt_number`` that match ``task`` (built,
        not opened). ``in_process``: the task runs in the test's own process, where
        :class:`KillWorker` is refused with ``ConfigurationError``."""
        if in_process:
            for f in self.faults:
                if isinstance(f, KillWorker):
                    raise ConfigurationError(
                        f"{f!r} kills the Python process running the subtask: it needs the "
                        "SparkExecutor (the local executor runs every subtask in this "
                        "process); use FailAtRecord to fail the task instead"
                    )
        for f in self.faults:
            if not _attempt_and_subtask(f, attempt_number, task.subtask_index):
                continue
            if isinstance(f, ACK_FAULTS):
                _install_ack_fault(task, f)
                continue
            for op in task.chain.operators:
                if f.operator in (op.name, op.uid):
                    _install_operator_fault(task, op, f)


def inject_faults(env: Any, *faults: Fault) -> FaultSchedule:
    """Make every run of ``env``'s job carry ``faults`` (replacing faults injected
    before); returns the schedule. For tests only."""
    from ..api.environment import StreamEnvironment

    if not isinstance(env, StreamEnvironment):
        raise ConfigurationError(f"inject_faults needs a lockgate StreamEnvironment, got {env!r}")
    schedule = FaultSchedule(*faults)
    env._faults = schedule
    return schedule


# -- matching ---------------------------------------------------------------------------
def _attempt_and_subtask(fault: Fault, attempt_number: int, subtask: int) -> bool:
    return fault.attempt == attempt_number and fault.subtask in (None, subtask)


def _where(fault: Fault, op: StreamOperator, subtask: int, detail: str) -> InjectedFault:
    return InjectedFault(
        f"injected fault {fault!r}: {detail} (operator '{op.name}', "
        f"subtask {subtask}, attempt {fault.attempt})",
        operator=op.name,
        subtask=subtask,
    )


# -- acknowledgements -------------------------------------------------------------------
class FaultyResponder:
    """Forwards a subtask's answers to the coordinator, except the acknowledgements the
    active faults drop or delay. Counts acknowledgements from 1 in each attempt
    (thread-safe: the asynchronous snapshot part acknowledges)."""

    def __init__(self, inner: CheckpointResponder, task_key: TaskKey) -> None:
        self.inner = inner
        self.task_key = task_key
        self.faults: list[Fault] = []
        self.acks = 0
        self._lock = threading.Lock()
        #: timers delivering delayed acknowledgements (for tests to join)
        self.timers: list[threading.Timer] = []

    def activate(self, fault: Fault) -> None:
        self.faults.append(fault)

    def acknowledge(self, ack: TaskAcknowledgement) -> None:
        with self._lock:
            self.acks += 1
            n = self.acks
        for f in self.faults:
            if not isinstance(f, ACK_FAULTS) or f.checkpoint != n:  # type: ignore[union-attr]
                continue
            if isinstance(f, DelayAcknowledgement):
                timer = threading.Timer(f.delay_ms / 1000.0, self.inner.acknowledge, (ack,))
                timer.name = f"lockgate delayed acknowledgement {self.task_key} (injected)"
                timer.daemon = True
                self.timers.append(timer)
                timer.start()
            return  # dropped, or handed to the timer
        self.inner.acknowledge(ack)

    def decline(self, task: TaskKey, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self.inner.decline(task, checkpoint_id, reason)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (e.g. while copying)
            raise AttributeError(name)
        return getattr(self.inner, name)


def _install_ack_fault(task: StreamTask, fault: Fault) -> None:
    names = (
        {task.name}
        | {op.name for op in task.chain.operators}
        | {op.uid for op in task.chain.operators}
    )
    if fault.operator not in names:
        return
    responder = getattr(task.checkpointer, "responder", None)
    if isinstance(responder, FaultyResponder):
        responder.activate(fault)
    elif task.checkpointer is not None:
        raise ConfigurationError(
            f"{fault!r}: the responder of task '{task.name}' was not wrapped by "
            "FaultSchedule.wrap_responder, so the fault cannot be installed"
        )
    # checkpoints disabled: there is no acknowledgement to drop or delay


# -- operator faults ----------------------------------------------------------------------
def _install_operator_fault(task: StreamTask, op: StreamOperator, fault: Fault) -> None:
    sub = task.subtask_index
    if isinstance(fault, (FailAtRecord, KillWorker)):
        _install_at_record(task, op, fault, sub)
    elif isinstance(fault, FailSnapshot):
        _install_snapshot(op, fault, sub)
    elif isinstance(fault, DelayBarriers):
        _install_barrier_delay(op, fault)
    elif isinstance(fault, FailDuringAlignment):
        _install_alignment(task, op, fault, sub)
    elif isinstance(fault, FailCommit):
        _install_commit(op, fault, sub)


def _install_at_record(
    task: StreamTask, op: StreamOperator, fault: FailAtRecord | KillWorker, sub: int
) -> None:
    from ..runtime.operators.io import SourceOperator

    seen = [0]
    completed = [0]
    fired = [False]
    if fault.after_checkpoints:
        notify = op.notify_checkpoint_complete

        def counting_notify(checkpoint_id: int) -> None:
            completed[0] += 1
            notify(checkpoint_id)

        op.notify_checkpoint_complete = counting_notify  # type: ignore[method-assign]

    def reached(batch: Any) -> bool:
        seen[0] += num_rows(batch)
        if fired[0] or seen[0] <= fault.record or completed[0] < fault.after_checkpoints:
            return False
        fired[0] = True
        return True

    def fire() -> None:
        if isinstance(fault, KillWorker):
            os.kill(os.getpid(), signal.SIGKILL)
        after = f" after {completed[0]} completed checkpoints" if fault.after_checkpoints else ""
        raise _where(fault, op, sub, f"record {fault.record} reached{after}")

    if isinstance(op, SourceOperator):
        emit = op.emit

        def emit_with_fault(batch: Any) -> None:
            if reached(batch):
                fire()
            emit(batch)

        op.emit = emit_with_fault  # type: ignore[method-assign]
        return

    process = op.process_batch

    def process_with_fault(batch: Any, input_index: int = 0) -> None:
        if reached(batch):
            fire()
        process(batch, input_index)

    _replace_process_batch(task, op, process, process_with_fault)


def _replace_process_batch(
    task: StreamTask, op: StreamOperator, old: Callable[..., None], new: Callable[..., None]
) -> None:
    """Make ``new`` the operator's ``process_batch``: as its attribute (the task calls
    the head through it) and in the outputs of the operators chained in front of it,
    which hold the method they call."""
    op.process_batch = new  # type: ignore[method-assign]
    for other in task.chain.operators:
        out = getattr(other, "output", None)
        lists = [getattr(out, "main", None), *getattr(out, "side", {}).values()]
        for targets in lists:
            if isinstance(targets, list):
                targets[:] = [new if t is old or t == old else t for t in targets]


class FailingView:
    """A snapshot view whose ``materialize()`` raises :class:`InjectedFault` (the
    asynchronous part fails); ``release()`` releases the operator's real view."""

    def __init__(self, inner: Any, error: InjectedFault) -> None:
        self.inner = inner
        self.error = error
        self.released = False

    def materialize(self) -> Any:
        raise self.error

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        release = getattr(self.inner, "release", None)
        if callable(release):
            release()


def _install_snapshot(op: StreamOperator, fault: FailSnapshot, sub: int) -> None:
    snapshot = op.snapshot_state
    taken = [0]

    def snapshot_with_fault(checkpoint_id: int) -> Any:
        taken[0] += 1
        if taken[0] != fault.checkpoint:
            return snapshot(checkpoint_id)
        detail = f"snapshot {taken[0]} (checkpoint {checkpoint_id}), {fault.phase} part"
        if fault.phase == "sync":
            raise _where(fault, op, sub, detail)
        return FailingView(snapshot(checkpoint_id), _where(fault, op, sub, detail))

    op.snapshot_state = snapshot_with_fault  # type: ignore[method-assign]


def _install_barrier_delay(op: StreamOperator, fault: DelayBarriers) -> None:
    prepare = op.prepare_snapshot_pre_barrier
    barriers = [0]

    def prepare_with_delay(checkpoint_id: int) -> None:
        barriers[0] += 1
        if barriers[0] == fault.checkpoint:
            threading.Event().wait(fault.delay_ms / 1000.0)  # the injected delay
        prepare(checkpoint_id)

    op.prepare_snapshot_pre_barrier = prepare_with_delay  # type: ignore[method-assign]


def _aligning(handler: Any) -> bool:
    pending = getattr(handler, "pending", None)
    if isinstance(pending, list):
        return bool(pending)
    return pending is not None


def _install_alignment(
    task: StreamTask, op: StreamOperator, fault: FailDuringAlignment, sub: int
) -> None:
    if op is not task.chain.head or task.input_gate is None:
        raise ConfigurationError(
            f"{fault!r}: operator '{op.name}' must be the first operator of a task with "
            f"inputs (task '{task.name}' starts with '{task.chain.head.name}'); put it "
            "after a key_by/rebalance or disable chaining"
        )
    handler = task.barrier_handler
    if handler is None:
        raise ConfigurationError(f"{fault!r} needs checkpoints: call env.enable_checkpointing(...)")
    process = op.process_batch
    fired = [False]

    def process_with_fault(batch: Any, input_index: int = 0) -> None:
        if not fired[0] and _aligning(handler):
            fired[0] = True
            raise _where(
                fault, op, sub, f"batch during the alignment of {_describe_pending(handler)}"
            )
        process(batch, input_index)

    _replace_process_batch(task, op, process, process_with_fault)

    # A barrier that starts an alignment (or leaves one unfinished) fires it too, so the
    # fault does not depend on a batch happening to arrive inside the alignment.
    for name in ("on_barrier", "on_priority_barrier"):
        original = getattr(handler, name, None)
        if original is None:
            continue

        def on_barrier_with_fault(channel: int, barrier: Any, _original: Any = original) -> None:
            _original(channel, barrier)
            if not fired[0] and _aligning(handler):
                fired[0] = True
                raise _where(
                    fault,
                    op,
                    sub,
                    f"barrier on channel {channel} during the "
                    f"alignment of {_describe_pending(handler)}",
                )

        setattr(handler, name, on_barrier_with_fault)


def _describe_pending(handler: Any) -> str:
    pending = getattr(handler, "pending", None)
    if isinstance(pending, list):
        return f"checkpoints {[entry[0] for entry in pending]}"
    return f"checkpoint {getattr(pending, 'checkpoint_id', '?')}"


def _install_commit(op: StreamOperator, fault: FailCommit, sub: int) -> None:
    notify = op.notify_checkpoint_complete
    notices = [0]

    def notify_with_fault(checkpoint_id: int) -> None:
        notices[0] += 1
        if notices[0] == fault.checkpoint:
            raise _where(
                fault,
                op,
                sub,
                f"completion notice {notices[0]} (checkpoint {checkpoint_id}) before the commit",
            )
        notify(checkpoint_id)

    op.notify_checkpoint_complete = notify_with_fault  # type: ignore[method-assign]

"""The faults a recovery test can inject, as plain, frozen, picklable values.

Every fault names where it fires and when:

* ``operator``: an operator's name or uid (``StreamOperator.name`` / ``.uid``);
  acknowledgement faults also accept the task's (vertex's) name;
* ``attempt``: the attempt number (0-based, ``RuntimeContext.attempt_number``) in
  which it fires; it never fires in another attempt;
* ``subtask``: the subtask index it fires in (default 0, so that a fault fires once
  per attempt); ``None``: in every subtask of the operator.

A fault fires at most once per attempt per matching subtask. Whether it fires is
decided from the attempt number and counts local to the subtask (records,
snapshots, acknowledgements, notices since the subtask started), never from state
shared between processes, so it behaves the same on the local executor and in a
Spark slot's Python worker. Counts restart at 0 in every attempt.

Constructors validate their arguments and raise
:class:`~lockgate.errors.ConfigurationError` naming the fault, the argument and
its value.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ConfigurationError, LockgateError


class InjectedFault(LockgateError, RuntimeError):
    """The exception an injected fault raises; its message names the fault.

    ``operator`` and ``subtask`` say where it was raised (the executors report them)."""

    def __init__(
        self, message: str, *, operator: str | None = None, subtask: int | None = None
    ) -> None:
        super().__init__(message)
        self.operator = operator
        self.subtask = subtask

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_injected, (str(self), self.operator, self.subtask))


def _rebuild_injected(message: str, operator: str | None, subtask: int | None) -> InjectedFault:
    return InjectedFault(message, operator=operator, subtask=subtask)


# -- validation ------------------------------------------------------------------------
def _fail(fault: object, arg: str, expected: str, value: object) -> ConfigurationError:
    return ConfigurationError(f"{type(fault).__name__}: {arg} must be {expected}, got {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(fault: object, arg: str, value: object, low: int) -> None:
    if not _is_int(value) or value < low:  # type: ignore[operator]
        raise _fail(fault, arg, f"an int >= {low}", value)


def _check_common(fault: Any) -> None:
    if not isinstance(fault.operator, str) or not fault.operator:
        raise _fail(fault, "operator", "a non-empty operator name or uid", fault.operator)
    _check_int(fault, "attempt", fault.attempt, 0)
    if fault.subtask is not None:
        _check_int(fault, "subtask", fault.subtask, 0)


def _check_delay(fault: object, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        raise _fail(fault, "delay_ms", "a number of milliseconds >= 0", value)


# -- the faults --------------------------------------------------------------------------
class _Fault:
    """Checks every fault's arguments when it is made: the common ones (operator,
    attempt, subtask), then each counter in ``_counted`` (name, lowest value)."""

    _counted: ClassVar[tuple[tuple[str, int], ...]] = ()

    def __post_init__(self) -> None:
        _check_common(self)
        for name, low in self._counted:
            _check_int(self, name, getattr(self, name), low)


@dataclass(frozen=True)
class FailAtRecord(_Fault):
    """The operator raises :class:`InjectedFault` while processing the batch that holds
    its ``record``-th record (0-based) of this attempt, before processing that batch.
    Records are counted in the batches given to ``process_batch``; for a source, in the
    batches it emits.

    ``after_checkpoints``: the fault waits until the subtask was notified of that many
    completed checkpoints in this attempt; it then fires at the first batch at or after
    the ``record``-th record. So a restore always has a checkpoint of this attempt to
    start from, however long a loaded machine takes to complete one (if the input ends
    first, the fault does not fire)."""

    operator: str
    record: int
    attempt: int = 0
    subtask: int | None = 0
    after_checkpoints: int = 0

    _counted: ClassVar[tuple[tuple[str, int], ...]] = (("record", 0), ("after_checkpoints", 0))


@dataclass(frozen=True)
class KillWorker(_Fault):
    """Like :class:`FailAtRecord` (``after_checkpoints`` included), but the process is
    killed (SIGKILL): on Spark, the Python worker of the slot running the subtask dies
    (a lost task). Refused by the local executor, whose tasks run in the test's own
    process."""

    operator: str
    record: int
    attempt: int = 0
    subtask: int | None = 0
    after_checkpoints: int = 0

    _counted: ClassVar[tuple[tuple[str, int], ...]] = (("record", 0), ("after_checkpoints", 0))


@dataclass(frozen=True)
class FailSnapshot(_Fault):
    """The ``checkpoint``-th snapshot (1-based, counted in this attempt; not the
    checkpoint id) the operator takes fails: ``phase="sync"`` raises from
    ``snapshot_state`` in the task thread (the subtask declines the checkpoint and keeps
    running, M-C6); ``phase="async"`` returns a view whose ``materialize()`` raises in
    the background (the subtask declines the checkpoint, M-T3, M-C6), releasing the real
    view. Either way the checkpoint fails and counts towards ``tolerable_failures``."""

    operator: str
    checkpoint: int = 1
    phase: str = "sync"
    attempt: int = 0
    subtask: int | None = 0

    _counted: ClassVar[tuple[tuple[str, int], ...]] = (("checkpoint", 1),)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.phase not in ("sync", "async"):
            raise _fail(self, "phase", "'sync' or 'async'", self.phase)


@dataclass(frozen=True)
class DropAcknowledgement(_Fault):
    """The subtask's ``checkpoint``-th acknowledgement (1-based, counted in this
    attempt) never reaches the coordinator: that checkpoint expires (M-C4).
    ``operator`` may also be the task's name."""

    operator: str
    checkpoint: int = 1
    attempt: int = 0
    subtask: int | None = 0

    _counted: ClassVar[tuple[tuple[str, int], ...]] = (("checkpoint", 1),)


@dataclass(frozen=True)
class DelayAcknowledgement(_Fault):
    """The subtask's ``checkpoint``-th acknowledgement (1-based, counted in this
    attempt) reaches the coordinator ``delay_ms`` late (delivered by a timer thread;
    later acknowledgements are not held back). ``operator`` may also be the task's
    name."""

    operator: str
    delay_ms: float
    checkpoint: int = 1
    attempt: int = 0
    subtask: int | None = 0

    _counted: ClassVar[tuple[tuple[str, int], ...]] = (("checkpoint", 1),)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_delay(self, self.delay_ms)


@dataclass(frozen=True)
class DelayBarriers(_Fault):
    """Before forwarding its ``checkpoint``-th barrier (1-based, counted in this
    attempt), the subtask blocks ``delay_ms`` in the operator's
    ``prepare_snapshot_pre_barrier``: the barrier (and everything behind it) leaves
    on every output channel of this subtask ``delay_ms`` late, so downstream subtasks
    see that channel's barrier late and align longer (M-B4)."""

    operator: str
    delay_ms: float
    checkpoint: int = 1
    attempt: int = 0
    subtask: int | None = 0

    _counted: ClassVar[tuple[tuple[str, int], ...]] = (("checkpoint", 1),)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_delay(self, self.delay_ms)


@dataclass(frozen=True)
class FailDuringAlignment(_Fault):
    """The operator, which must be the head of its task and have inputs, raises
    :class:`InjectedFault` inside the first alignment of the attempt: right after a
    barrier leaves the task's barrier handler with a checkpoint in progress (some, not
    all, channels delivered its barrier), or on the first batch it is given while one is
    in progress, whichever comes first. Needs checkpoints enabled."""

    operator: str
    attempt: int = 0
    subtask: int | None = 0


@dataclass(frozen=True)
class FailCommit(_Fault):
    """The operator (a two-phase-commit sink) raises :class:`InjectedFault` on the
    ``checkpoint``-th completion notice (1-based, counted in this attempt) before
    handling it: the transaction was pre-committed but is not committed (M-X2); the
    task fails and the job retries the commit after restoring (M-X3)."""

    operator: str
    checkpoint: int = 1
    attempt: int = 0
    subtask: int | None = 0

    _counted: ClassVar[tuple[tuple[str, int], ...]] = (("checkpoint", 1),)


#: any fault
Fault = (
    FailAtRecord
    | KillWorker
    | FailSnapshot
    | DropAcknowledgement
    | DelayAcknowledgement
    | DelayBarriers
    | FailDuringAlignment
    | FailCommit
)
FAULT_TYPES: tuple[type, ...] = (
    FailAtRecord,
    KillWorker,
    FailSnapshot,
    DropAcknowledgement,
    DelayAcknowledgement,
    DelayBarriers,
    FailDuringAlignment,
    FailCommit,
)
#: faults acting on a subtask's acknowledgements (installed through ``wrap_responder``)
ACK_FAULTS: tuple[type, ...] = (DropAcknowledgement, DelayAcknowledgement)


# -- a deterministic generator -------------------------------------------------------------
_ROLES = ("source", "operator", "sink")


def seeded_faults(
    seed: int,
    count: int,
    *,
    operators: dict[str, str],
    records: int,
    attempts_from: int = 0,
    subtasks: int = 2,
) -> list[Fault]:
    """``count`` faults drawn from ``random.Random(seed)``: the same arguments always
    give the same list, on every machine and Python version.

    Fault ``i`` fires in attempt ``attempts_from + i``: every fault has an attempt of
    its own, so a job injected with them restarts ``count`` times (if every fault
    fires) before an attempt runs without a fault. Kinds cycle, in this order:
    :class:`FailAtRecord` in ``operators["source"]``, :class:`FailAtRecord` in
    ``operators["operator"]``, :class:`FailDuringAlignment` in ``operators["operator"]``
    (which must therefore head its task, e.g. follow a ``key_by``), :class:`FailSnapshot`
    (async) in ``operators["operator"]``, :class:`FailCommit` in ``operators["sink"]``.

    Record numbers are drawn from ``[records // 10, records * 9 // 10]``: ``records``
    should be the fewest records a subtask of those operators handles in an attempt
    (a fault whose record is never reached does not fire). Checkpoint numbers are
    drawn from 1..3 and subtask indexes from ``0 .. subtasks - 1``.
    """
    if not _is_int(seed):
        raise ConfigurationError(f"seeded_faults: seed must be an int, got {seed!r}")
    for arg, value, low in (
        ("count", count, 0),
        ("records", records, 0),
        ("attempts_from", attempts_from, 0),
        ("subtasks", subtasks, 1),
    ):
        if not _is_int(value) or value < low:
            raise ConfigurationError(f"seeded_faults: {arg} must be an int >= {low}, got {value!r}")
    if (
        not isinstance(operators, dict)
        or set(operators) != set(_ROLES)
        or not all(isinstance(v, str) and v for v in operators.values())
    ):
        raise ConfigurationError(
            "seeded_faults: operators must map exactly 'source', 'operator' and 'sink' to "
            f"operator names, e.g. {{'source': 'Source: sequence', 'operator': 'running sum', "
            f"'sink': 'files'}}, got {operators!r}"
        )
    rng = random.Random(seed)
    out: list[Fault] = []
    for i in range(count):
        # every draw happens for every fault, so fault i depends only on (seed, i)
        record = rng.randint(records // 10, records * 9 // 10)
        checkpoint = rng.randint(1, 3)
        subtask = rng.randint(0, subtasks - 1)
        attempt = attempts_from + i
        kind = i % 5
        fault: Fault
        if kind == 0:
            fault = FailAtRecord(operators["source"], record, attempt, subtask)
        elif kind == 1:
            fault = FailAtRecord(operators["operator"], record, attempt, subtask)
        elif kind == 2:
            fault = FailDuringAlignment(operators["operator"], attempt, subtask)
        elif kind == 3:
            fault = FailSnapshot(operators["operator"], checkpoint, "async", attempt, subtask)
        else:
            fault = FailCommit(operators["sink"], checkpoint, attempt, subtask)
        out.append(fault)
    return out

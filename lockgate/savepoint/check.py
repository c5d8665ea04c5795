"""Checking a savepoint against a job before deploying it: :func:`check`.

``lockgate.savepoint.check(path, env)`` (and ``lockgate savepoint check SAVEPOINT
JOB.py``) builds the job without running it and answers, per operator:

* matched by uid, new (starts empty) or dropped (its state is in the savepoint but not
  in the job: the restore needs ``allow_non_restored_state``);
* per state: ``compatible`` (the same type), ``evolved`` (what changes, as
  docs/state_evolution.md allows), ``incompatible`` (why), ``untyped`` (pickled
  values: restored as they are, not checkable without running their code), ``kept``
  (in the savepoint, not asked for in ``open``: kept as it is);
* parallelism and max parallelism: a keyed operator keeps its max parallelism, and
  runs at most at that parallelism;
* whatever else the restore's own pre-flight refuses (the same code ``run --restore``
  runs: unknown operators, in-flight data of unaligned checkpoints, ...).

The states a function declares are found by calling its ``open(ctx)`` on a copy,
with a context that hands out state handles of an empty backend (the function runs
nothing else of the job). :attr:`CheckReport.ok` is True exactly when
``run --restore`` would get past restoring state.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError, LockgateError
from ..runtime.context import RuntimeContext
from ..state.keyed import HeapKeyedStateBackend
from ..state.operator_state import OperatorStateStore
from ..state.typed.evolution import IncompatibleStateError
from ..state.typed.registry import TypedStates
from .reader import Savepoint, read

COMPATIBLE = "compatible"
EVOLVED = "evolved"
INCOMPATIBLE = "incompatible"
UNTYPED = "untyped"
KEPT = "kept"
NEW = "new"


@dataclass(frozen=True)
class StateCheck:
    """One state of one operator: its name, kind, status (see the module docstring)
    and what the status means for it."""

    name: str
    kind: str
    status: str
    detail: str = ""


@dataclass(frozen=True)
class OperatorCheck:
    """One operator: ``status`` is "matched", "new" or "dropped"; ``problems`` say
    why its restore would fail (empty when it would not)."""

    uid: str
    name: str
    status: str
    states: tuple[StateCheck, ...] = ()
    problems: tuple[str, ...] = ()
    parallelism: int | None = None
    max_parallelism: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and all(s.status != INCOMPATIBLE for s in self.states)


@dataclass(frozen=True)
class CheckReport:
    """What :func:`check` found. ``ok``: ``run --restore`` would get past restoring
    state (with ``allow_non_restored_state`` as given)."""

    path: str
    operators: tuple[OperatorCheck, ...]
    allow_non_restored_state: bool
    problems: tuple[str, ...] = field(default=())

    @property
    def needs_allow_non_restored_state(self) -> bool:
        return any(o.status == "dropped" for o in self.operators)

    @property
    def ok(self) -> bool:
        if self.problems or not all(o.ok for o in self.operators):
            return False
        return self.allow_non_restored_state or not self.needs_allow_non_restored_state

    def operator(self, uid: str) -> OperatorCheck:
        for o in self.operators:
            if o.uid == uid:
                return o
        raise KeyError(uid)

    def format(self) -> str:
        """The report as text (what ``lockgate savepoint check`` prints)."""
        lines = [f"savepoint {self.path}"]
        for o in self.operators:
            shape = ""
            if o.parallelism is not None:
                shape = f" (parallelism {o.parallelism}, max parallelism {o.max_parallelism})"
            lines.append(f"  operator {o.uid!r} [{o.name}]: {o.status}{shape}")
            for s in o.states:
                detail = f": {s.detail}" if s.detail else ""
                lines.append(f"    state {s.name!r} ({s.kind}): {s.status}{detail}")
            for p in o.problems:
                lines.append(f"    problem: {p}")
        for p in self.problems:
            lines.append(f"  problem: {p}")
        if self.needs_allow_non_restored_state:
            flag = "given" if self.allow_non_restored_state else "needed"
            lines.append(f"  --allow-non-restored-state: {flag} (state of dropped operators)")
        lines.append("restorable: yes" if self.ok else "restorable: NO")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def check(
    path: str | os.PathLike[str],
    env: Any,
    *,
    allow_non_restored_state: bool = False,
    job_name: str = "lockgate job",
) -> CheckReport:
    """Check the savepoint (or checkpoint) at ``path`` against the job built in ``env``
    (a ``StreamEnvironment``), without running it; see the module docstring."""
    if not isinstance(allow_non_restored_state, bool):
        raise ConfigurationError(
            f"allow_non_restored_state must be True or False, got {allow_non_restored_state!r}"
        )
    get_graph = getattr(env, "get_job_graph", None)
    if not callable(get_graph):
        raise ConfigurationError(
            f"lockgate.savepoint.check(path, env): env must be the job's lg.StreamEnvironment, "
            f"got {env!r}"
        )
    savepoint = read(path)
    graph = get_graph()
    operators: list[OperatorCheck] = []
    in_job = set()
    for node in sorted(graph.nodes.values(), key=lambda n: n.id):
        in_job.add(node.uid)
        operators.append(_check_node(savepoint, node))
    for uid, info in savepoint.operators().items():
        if uid not in in_job:
            states = tuple(StateCheck(s.name, s.kind.value, "dropped") for s in info.states)
            operators.append(OperatorCheck(uid, "-", "dropped", states))
    problems = _preflight(env, os.fspath(path), allow_non_restored_state, job_name, operators)
    return CheckReport(os.fspath(path), tuple(operators), allow_non_restored_state, problems)


def _preflight(
    env: Any, path: str, allow: bool, job_name: str, operators: list[OperatorCheck]
) -> tuple[str, ...]:
    """The restore's own checks (``get_execution_plan(restore_from=...)``), when they
    find something the per-operator checks did not."""
    try:
        env.get_execution_plan(job_name, restore_from=path, allow_non_restored_state=allow)
    except LockgateError as e:
        text = str(e)
        dropped = any(o.status == "dropped" for o in operators)
        if dropped and not allow and "allow_non_restored_state" in text:
            return ()  # the dropped operators are reported already
        return (text,)
    return ()


def _check_node(savepoint: Savepoint, node: Any) -> OperatorCheck:
    try:
        info = savepoint.operators()[node.uid]
    except KeyError:
        return OperatorCheck(
            node.uid,
            node.name,
            NEW,
            parallelism=node.parallelism,
            max_parallelism=node.max_parallelism,
        )
    problems: list[str] = []
    if info.max_parallelism is not None:
        if info.max_parallelism != node.max_parallelism:
            problems.append(
                f"max parallelism changed from {info.max_parallelism} to "
                f"{node.max_parallelism}: keyed state is split into max-parallelism key "
                "groups, which cannot change on restore; set the old max parallelism "
                f"(set_max_parallelism({info.max_parallelism}))"
            )
        if node.parallelism > info.max_parallelism:
            problems.append(
                f"parallelism {node.parallelism} is above the max parallelism "
                f"{info.max_parallelism} the state was written with"
            )
    declared, failure = _declared_states(node)
    if failure:
        problems.append(failure)
    states = _check_states(savepoint, node, info, declared)
    return OperatorCheck(
        node.uid,
        node.name,
        "matched",
        tuple(states),
        tuple(problems),
        node.parallelism,
        node.max_parallelism,
    )


def _check_states(
    savepoint: Savepoint, node: Any, info: Any, declared: dict[str, Any]
) -> list[StateCheck]:
    registry = TypedStates(node.name)
    registry.uid = node.uid
    out: list[StateCheck] = []
    written = {s.name: s for s in info.states}
    for s in info.states:
        kind = s.kind.value
        descriptor = declared.get(s.name)
        table = savepoint.typed_table(node.uid, s.name)
        if not s.kind.keyed:
            out.append(StateCheck(s.name, kind, UNTYPED, "operator state, restored as it is"))
            continue
        if descriptor is None:
            out.append(
                StateCheck(
                    s.name, kind, KEPT, "not asked for in open(): restored and kept as it is"
                )
            )
            continue
        state_type = getattr(descriptor, "state_type", None)
        if table is None:
            if state_type is not None and s.kind.keyed:
                out.append(
                    StateCheck(
                        s.name,
                        kind,
                        EVOLVED,
                        f"pickled values become typed ({state_type.describe()}) from the next "
                        "checkpoint on; values that do not fit fail that checkpoint",
                    )
                )
            else:
                out.append(
                    StateCheck(s.name, kind, UNTYPED, "pickled values, restored as they are")
                )
            continue
        if state_type is None:
            out.append(
                StateCheck(
                    s.name,
                    kind,
                    INCOMPATIBLE,
                    f"the savepoint holds it typed ({s.type}) but the descriptor declares no type",
                )
            )
            continue
        try:
            evolution = registry.evolution(s.name, descriptor.kind, state_type, table)
        except IncompatibleStateError as e:
            out.append(StateCheck(s.name, kind, INCOMPATIBLE, "; ".join(e.reasons) or str(e)))
            continue
        if (descriptor.ttl_config is not None) != table.ttl:
            out.append(StateCheck(s.name, kind, INCOMPATIBLE, "its time-to-live setting changed"))
        elif evolution is not None and evolution.changed:
            out.append(StateCheck(s.name, kind, EVOLVED, "; ".join(evolution.changes)))
        else:
            out.append(StateCheck(s.name, kind, COMPATIBLE, state_type.describe()))
    for name, descriptor in declared.items():
        if name not in written and isinstance(getattr(descriptor, "kind", None), str):
            out.append(StateCheck(name, descriptor.kind, NEW, "starts empty"))
    return out


class _DeclaredStates:
    """A keyed backend for ``open(ctx)`` in a check: records every descriptor asked for
    and hands out handles of an empty heap backend."""

    def __init__(self, name: str, max_parallelism: int) -> None:
        self._inner = HeapKeyedStateBackend(name, max_parallelism)
        self.declared: dict[str, Any] = {}

    @property
    def current_key(self) -> Any:
        return self._inner.current_key

    @current_key.setter
    def current_key(self, key: Any) -> None:
        self._inner.current_key = key

    def get_state(self, descriptor: Any) -> Any:
        self.declared[getattr(descriptor, "name", repr(descriptor))] = descriptor
        return self._inner.get_state(descriptor)


def _declared_states(node: Any) -> tuple[dict[str, Any], str | None]:
    """The descriptors the node's functions ask for in ``open`` (on copies), and a
    sentence when a function's ``open`` failed here."""
    functions = getattr(node.factory, "user_functions", {}) or {}
    backend = _DeclaredStates(node.name, node.max_parallelism)
    ctx = RuntimeContext(
        task_name=node.name,
        operator_name=node.name,
        operator_uid=node.uid,
        subtask_index=0,
        parallelism=node.parallelism,
        max_parallelism=node.max_parallelism,
        keyed_backend=backend,
    )
    ctx._operator_state = OperatorStateStore(node.name)
    for role, fn in functions.items():
        opener = getattr(fn, "open", None)
        if not callable(opener) or isinstance(fn, type):
            continue
        try:
            copy.deepcopy(fn).open(ctx)
        except Exception as e:  # noqa: BLE001 - reported, the check goes on
            return backend.declared, (
                f"the {role} function's open(ctx) failed in the check ({type(e).__name__}: "
                f"{e}); its state could not be checked"
            )
    return backend.declared, None


__all__ = [
    "COMPATIBLE",
    "EVOLVED",
    "INCOMPATIBLE",
    "KEPT",
    "NEW",
    "UNTYPED",
    "CheckReport",
    "OperatorCheck",
    "StateCheck",
    "check",
]

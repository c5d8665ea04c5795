"""Which tasks one checkpoint involves, once some tasks may have finished (FLIP-147).

A pure function over frozen facts, like
:func:`~lockgate.checkpoint.coordinator.request_decider.decide_trigger`: the
coordinator gathers the job's :class:`JobTopology` (fixed for an attempt) and the
task states it observed, and :func:`plan_checkpoint` answers; no I/O, no clock.

Flink's ``DefaultCheckpointPlanCalculator`` is the model. Rules, in terms of task
states (a task is *running* from its RUNNING report until it *finished*; a task that
finished its operators and waits for its final checkpoint is still running):

* finished tasks are neither triggered nor waited for; the checkpoint records them as
  finished (:func:`finished_operators`), and since a task finishes only after its
  final checkpoint completed, that record is all the state it has left;
* every running task acknowledges (M-C3);
* the tasks triggered are the running tasks none of whose upstream tasks still runs:
  the sources (no upstream task, M-C3), and, once every task feeding a task has
  finished, that task itself: no barrier can reach it through its input channels any
  more (an ended channel counts as having delivered the barrier, M-B6). A task whose
  upstream tasks are not known (no entry in ``upstream``) is reached by barriers only;
* a task neither running nor finished (not deployed yet) makes the checkpoint
  impossible (``not_running`` > 0, M-C1), and so does a job without a running task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ..types import TaskKey


@dataclass(frozen=True)
class JobTopology:
    """The shape of the job, as checkpoints need it.

    ``upstream``: per task, the tasks whose output channels feed it (empty for a
    source). ``operators``: per vertex id, the uids of the operators its tasks run.
    ``parallelism``: per vertex id, its number of subtasks.
    """

    upstream: Mapping[TaskKey, frozenset[TaskKey]] = field(default_factory=dict)
    operators: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    parallelism: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointPlan:
    """The tasks of one checkpoint: ``to_trigger`` (in the order given), those that
    must acknowledge, those finished, and how many are neither running nor finished."""

    to_trigger: tuple[TaskKey, ...]
    to_acknowledge: frozenset[TaskKey]
    finished: frozenset[TaskKey]
    not_running: int

    @property
    def possible(self) -> bool:
        """Every task is running or finished, and at least one runs."""
        return self.not_running == 0 and bool(self.to_acknowledge)


def plan_checkpoint(
    tasks: Sequence[TaskKey],
    sources: Sequence[TaskKey],
    upstream: Mapping[TaskKey, frozenset[TaskKey]],
    running: AbstractSet[TaskKey],
    finished: AbstractSet[TaskKey],
) -> CheckpointPlan:
    """The plan for a checkpoint of the job whose tasks are ``tasks`` (sources first,
    in trigger order) given the tasks reported ``running`` and ``finished`` (see the
    module docstring). A task in both sets counts as finished."""
    done = frozenset(t for t in tasks if t in finished)
    alive = [t for t in tasks if t not in done]
    source_set = set(sources)
    trigger: list[TaskKey] = []
    for task in alive:
        if task not in running:
            continue
        if task in source_set:
            trigger.append(task)
            continue
        feeding = upstream.get(task)
        if feeding is not None and feeding <= done:
            trigger.append(task)
    return CheckpointPlan(
        to_trigger=tuple(trigger),
        to_acknowledge=frozenset(alive),
        finished=done,
        not_running=sum(1 for t in alive if t not in running),
    )


def finished_operators(
    finished: Iterable[TaskKey], topology: JobTopology
) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Per operator uid of a finished task: (its vertex's parallelism, the finished
    subtasks, ascending). An operator all of whose subtasks are listed is *fully
    finished*: a restore deploys its tasks as finished (they do not run again)."""
    by_vertex: dict[int, set[int]] = {}
    for vertex, subtask in finished:
        by_vertex.setdefault(vertex, set()).add(subtask)
    out: dict[str, tuple[int, tuple[int, ...]]] = {}
    for vertex, subtasks in sorted(by_vertex.items()):
        parallelism = topology.parallelism.get(vertex, 0)
        for uid in topology.operators.get(vertex, ()):
            out[uid] = (parallelism, tuple(sorted(subtasks)))
    return out


def is_fully_finished(entry: tuple[int, tuple[int, ...]] | None) -> bool:
    """Whether a :func:`finished_operators` entry lists every subtask of its operator."""
    if entry is None:
        return False
    parallelism, subtasks = entry
    return parallelism > 0 and set(subtasks) >= set(range(parallelism))

"""Checks that turn a bad logical graph into one clear error when the job is built."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

from ..core.user_functions import bind_function
from ..errors import InvalidGraphError
from .transformations import Kind, Transformation


def validate(  # noqa: C901 (a flat list of independent checks, one per rule)
    transformations: list[Transformation],
    default_parallelism: int,
    default_max_parallelism: int,
    *,
    checkpointing: bool,
) -> None:
    """Raise :class:`InvalidGraphError` listing every problem found, each with its fix.

    ``checkpointing``: whether the job takes checkpoints (an exactly-once sink in an
    unbounded job needs them, or it would never publish anything)."""
    problems: list[str] = []
    real = [t for t in transformations if not t.kind.virtual]
    sinks = [t for t in real if t.kind is Kind.SINK]
    if not sinks:
        problems.append(
            "the job has no sink: add one with stream.sink_to(...) (or stream.print()), "
            "or call stream.execute_and_collect()"
        )

    seen_uids: dict[str, Transformation] = {}
    for t in real:
        if t.uid is None:
            continue
        other = seen_uids.get(t.uid)
        if other is not None:
            problems.append(
                f"uid '{t.uid}' is used by both {other.describe()} and {t.describe()}: "
                "give each operator its own uid"
            )
        else:
            seen_uids[t.uid] = t

    for t in real:
        p = t.parallelism or default_parallelism
        mp = t.max_parallelism or default_max_parallelism
        if p > mp:
            problems.append(
                f"{t.describe()} has parallelism {p} above its max_parallelism {mp}: lower the "
                f"parallelism or raise max_parallelism (StreamEnvironment(max_parallelism=...) "
                "or .set_max_parallelism(...))"
            )

    reaches_sink = _upstream_of(sinks)
    for t in real:
        if t.kind is not Kind.SINK and t.id not in reaches_sink:
            problems.append(
                f"{t.describe()} has no path to a sink, so its output would be lost: connect it "
                "to a sink with .sink_to(...) or remove it"
            )

    for t in real:
        for tag in t.required_side_outputs:
            readers = [
                x
                for x in transformations
                if x.kind is Kind.SIDE_OUTPUT
                and x.side_tag == tag
                and x.inputs[0] is t
                and x.id in reaches_sink
            ]
            if not readers:
                problems.append(
                    f"{t.describe()} sends records to side output '{tag}', but nothing reads it, "
                    f"so they would be lost: add stream.get_side_output(lg.OutputTag('{tag}'))"
                    ".sink_to(...)"
                )

    if not checkpointing:
        problems.extend(_uncommitted_sinks(real))
        problems.extend(_sources_needing_checkpoints(real))

    for t in real:
        for label, fn in t.user_functions().items():
            problem = _function_problem(fn, label)
            if problem:
                problems.append(f"{t.describe()}: {problem}")

    if problems:
        raise InvalidGraphError("the job graph is invalid:\n  - " + "\n  - ".join(problems))


def _uncommitted_sinks(real: list[Transformation]) -> list[str]:
    """Without checkpointing: the exactly-once sinks of an unbounded job, which would
    never publish anything (their transactions commit only when a checkpoint completes,
    or when a bounded job has ended)."""
    unbounded = [
        t
        for t in real
        if t.kind is Kind.SOURCE
        and not getattr(t.user_functions().get("source:object"), "bounded", True)
    ]
    if not unbounded:
        return []
    sources = ", ".join(t.describe() for t in unbounded)
    problems = []
    for t in real:
        sink = t.user_functions().get("sink:object") if t.kind is Kind.SINK else None
        if sink is not None and getattr(sink, "commits_on_checkpoint", False):
            problems.append(
                f"{t.describe()} is an exactly-once sink: it publishes records only when a "
                f"checkpoint completes, but checkpointing is off and the job never ends "
                f"(unbounded source {sources}), so it would never publish anything: call "
                "env.enable_checkpointing(timedelta(seconds=...)), or choose an at-least-once "
                "mode (e.g. FileSink(..., exactly_once=False), PostgresSink(..., "
                "mode='append'))"
            )
    return problems


def _sources_needing_checkpoints(real: list[Transformation]) -> list[str]:
    """Without checkpointing: the sources that cannot make progress without one (a
    source's ``needs_checkpoints`` says why, e.g. PostgresCdcSource's initial snapshot,
    whose switch to the stream waits for a completed checkpoint)."""
    problems = []
    for t in real:
        source = t.user_functions().get("source:object") if t.kind is Kind.SOURCE else None
        why = getattr(source, "needs_checkpoints", None)
        if isinstance(why, str) and why:
            problems.append(
                f"{t.describe()} needs checkpointing: {why}; call "
                "env.enable_checkpointing(timedelta(seconds=...))"
            )
    return problems


def _upstream_of(sinks: list[Transformation]) -> set[int]:
    seen: set[int] = set()
    stack = list(sinks)
    while stack:
        t = stack.pop()
        if t.id in seen:
            continue
        seen.add(t.id)
        stack.extend(t.inputs)
    return seen


def _function_problem(fn: Any, label: str) -> str | None:
    method = label.split(":", 1)[1] if ":" in label else "__call__"
    name = label.split(":", 1)[0]
    if fn is None:
        return f"its {name} is None: pass a function"
    if method != "object":
        try:
            bind_function(fn, method)
        except TypeError:
            return (
                f"its {name} {fn!r} is not callable: pass a function (or an object with a "
                f"{method}() method)"
            )
    try:
        cloudpickle.dumps(fn)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as e:
        return (
            f"its {name} {fn!r} cannot be pickled ({type(e).__name__}: {e}), so it cannot be "
            "shipped to subtasks: capture only picklable values in it, and create clients, "
            "locks, files and connections in open(ctx) instead"
        )
    return None

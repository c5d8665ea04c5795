"""Checks that run on the driver before a job starts: each source's and sink's
``check_before_run`` (e.g. PostgresSink refuses a server without prepared
transactions), so a setting the job cannot run with fails at once, naming itself,
instead of in every restart of every subtask."""

from __future__ import annotations

import inspect
from typing import Any

import cloudpickle

from .execution_plan import ExecutionPlan
from .transformations import Kind


def connectors_of(plan: ExecutionPlan, kind: Kind) -> dict[str, Any]:
    """Operator uid -> the plan's own copy of each source (``Kind.SOURCE``) or sink
    (``Kind.SINK``) object; copies are never opened."""
    arg = "source" if kind is Kind.SOURCE else "sink"
    found: dict[str, Any] = {}
    for vertex in plan.vertices:
        for op in vertex.operators:
            if op.kind is kind:
                connector = cloudpickle.loads(op.payload).kwargs.get(arg)
                if connector is not None:
                    found[op.uid] = connector
    return found


def check_connectors(plan: ExecutionPlan) -> None:
    """Call ``check_before_run()`` of every source and sink of ``plan`` that has one;
    their errors propagate as they are. Then each source's ``prepare_run()``: a source
    it changed replaces the plan's copy, so every subtask and attempt gets it."""
    for kind in (Kind.SOURCE, Kind.SINK):
        for connector in connectors_of(plan, kind).values():
            check = getattr(connector, "check_before_run", None)
            if callable(check):
                # plan=: to compare settings with the checkpoint configuration (KafkaSink)
                if "plan" in inspect.signature(check).parameters:
                    check(plan=plan)
                else:
                    check()
    for vertex in plan.vertices:
        for op in vertex.operators:
            if op.kind is Kind.SOURCE:
                factory = cloudpickle.loads(op.payload)
                prepare = getattr(factory.kwargs.get("source"), "prepare_run", None)
                if callable(prepare) and prepare():
                    op.payload = cloudpickle.dumps(factory)

"""The watermark diagnostic: each operator's event time and what holds it back.

:func:`task_watermarks` reads, from any thread (plain attribute reads of the task
thread's values: a snapshot that may be a moment old), one entry per operator of a
subtask: its current watermark and what holds it back: for the head operator of a
task with inputs, the input channel that holds the task's valve back (M-W3); for a
source with a watermark strategy, its own generator (the slowest of its splits);
for chained operators, the operator before them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.elements import MIN_WATERMARK


@dataclass(frozen=True)
class OperatorWatermark:
    """One operator subtask's event time, as ``JobClient.watermarks()`` reports it."""

    operator: str
    uid: str
    subtask: int
    #: the last watermark the operator processed (None: none yet)
    watermark: int | None
    #: what holds the watermark back, in words (None: nothing known)
    held_back_by: str | None


def task_watermarks(task: Any) -> list[OperatorWatermark]:
    out: list[OperatorWatermark] = []
    previous: str | None = None
    for position, op in enumerate(task.chain.operators):
        wm = op.current_watermark
        watermark = None if wm == MIN_WATERMARK else wm
        if position == 0:
            held = _head_holder(task, op)
        else:
            held = f"operator '{previous}' before it in the chain"
        out.append(OperatorWatermark(op.name, op.uid, task.subtask_index, watermark, held))
        previous = op.name
    return out


def _head_holder(task: Any, op: Any) -> str | None:
    valves = getattr(task, "_valves", [])
    gate = task.input_gate
    if valves and gate is not None:
        # a two-input operator: look first at the input that holds the combined minimum
        # back (M-W5), not at whichever input comes first
        combined = getattr(op, "_combined", None)
        first = combined.holding_back() if combined is not None else None
        order = list(range(len(valves)))
        if first is not None and first < len(valves):
            order = [first, *(i for i in order if i != first)]
        for index in order:
            local = valves[index].holding_back()
            if local is None:
                continue
            channel = [c for c, (i, lc) in enumerate(task._valve_of) if i == index and lc == local]
            name = getattr(gate.channels[channel[0]], "name", None) if channel else None
            where = f" ({name})" if name else ""
            return f"input {index}, channel {local}{where}"
        return None
    if getattr(op, "watermarks", None) is not None:  # a source or timestamps operator
        return "the source's own watermark generator (its slowest split)"
    return None

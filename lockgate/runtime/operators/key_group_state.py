"""What the operators with their own key-group state (the window operator, the interval
join) share when they snapshot and restore it: the subtask's key-group range as
written, the max_parallelism check, and the per-key-group watermark floor a restored
subtask keeps judging lateness by.

A snapshot records the subtask's ``key_groups`` as a ``(first, stop)`` pair, its
``max_parallelism``, its ``watermark`` and its own restored ``floor`` (None or one
watermark per key group). A restore takes the rows of its own key groups from each old
snapshot, and from each the watermark its key groups had: records at or below it are
late there, as they were before the restore."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.elements import MIN_WATERMARK
from ...core.key_groups import key_group_range
from ...errors import ConfigurationError


def subtask_key_groups(ctx: Any) -> tuple[int, int]:
    """``(first, stop)`` of the key groups of ``ctx``'s subtask, as a snapshot records them."""
    r = key_group_range(ctx.subtask_index, ctx.parallelism, ctx.max_parallelism)
    return (r.start, r.stop)


def check_max_parallelism(state: dict[str, Any], ctx: Any, what: str) -> None:
    """Raise a ConfigurationError naming ``what`` unless ``state`` was written with the
    operator's max_parallelism (key groups only move between subtasks when it stays)."""
    if state.get("max_parallelism") != ctx.max_parallelism:
        raise ConfigurationError(
            f"{what}: the state was written with max_parallelism "
            f"{state.get('max_parallelism')}, the operator now has "
            f"{ctx.max_parallelism}; key groups only move between subtasks when "
            "max_parallelism stays the same"
        )


def empty_floor(ctx: Any) -> np.ndarray:
    """The floor before any snapshot is read: no key group has a watermark."""
    return np.full(ctx.max_parallelism, MIN_WATERMARK, dtype=np.int64)


def take_floor(floor: np.ndarray, state: dict[str, Any], mine: range) -> None:
    """Set ``floor`` (one watermark per key group) for the key groups of ``mine`` that
    ``state``'s subtask held: its watermark, or its own restored floor where higher."""
    old = range(*state["key_groups"])
    lo, hi = max(old.start, mine.start), min(old.stop, mine.stop)
    if lo < hi:
        recorded = np.full(len(floor), state["watermark"], dtype=np.int64)
        if state["floor"] is not None:
            recorded = np.maximum(recorded, state["floor"])
        floor[lo:hi] = recorded[lo:hi]

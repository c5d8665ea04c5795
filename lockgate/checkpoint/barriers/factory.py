"""Choosing a subtask's barrier handler from the checkpointing mode (M-B1).

* AT_LEAST_ONCE → :class:`~.tracker.BarrierTracker` (never blocks).
* EXACTLY_ONCE → :class:`~.aligner.BarrierAligner` (aligned barriers).
* EXACTLY_ONCE with unaligned checkpoints →
  :class:`~.alternating.AlternatingBarrierHandler` (savepoints aligned,
  checkpoints unaligned, aligned ones switching after ``aligned_timeout_ms``).
* AT_LEAST_ONCE with unaligned checkpoints is a configuration error, and so is
  an aligned timeout without unaligned checkpoints or a negative one.
"""

from __future__ import annotations

from ...core.clock import Clock
from ...errors import ConfigurationError
from ..config import CheckpointingMode
from .aligner import BarrierAligner
from .alternating import AlternatingBarrierHandler
from .base import BarrierActions, BarrierHandler
from .tracker import BarrierTracker


def create_barrier_handler(
    mode: CheckpointingMode,
    *,
    unaligned: bool,
    aligned_timeout_ms: int,
    num_channels: int,
    actions: BarrierActions,
    clock: Clock,
) -> BarrierHandler:
    """The handler for a subtask with ``num_channels`` input channels (M-B1)."""
    if aligned_timeout_ms < 0:
        raise ConfigurationError(
            f"checkpoint aligned_timeout must not be negative, got {aligned_timeout_ms} ms"
        )
    if aligned_timeout_ms > 0 and not unaligned:
        raise ConfigurationError(
            "checkpoint aligned_timeout switches aligned checkpoints to unaligned: it needs "
            "checkpoint_config.unaligned = True"
        )
    if mode is CheckpointingMode.AT_LEAST_ONCE:
        if unaligned:
            raise ConfigurationError(
                "unaligned checkpoints need mode EXACTLY_ONCE (M-B1): set "
                "checkpoint_config.unaligned = False or use CheckpointingMode.EXACTLY_ONCE"
            )
        return BarrierTracker(num_channels, actions, clock)
    if mode is CheckpointingMode.EXACTLY_ONCE:
        if unaligned:
            return AlternatingBarrierHandler(
                num_channels, actions, clock, aligned_timeout_ms=aligned_timeout_ms
            )
        return BarrierAligner(num_channels, actions, clock)
    raise ConfigurationError(
        f"checkpointing mode must be lg.CheckpointingMode.EXACTLY_ONCE or AT_LEAST_ONCE, "
        f"got {mode!r}"
    )

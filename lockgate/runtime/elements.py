"""Moved to :mod:`lockgate.core.elements`. Kept so that a checkpoint or savepoint written before
the move, whose pickles name these classes by their old module path, still restores
(checked by ``tests/unit/test_moved_module_pickles.py``). New code imports
:mod:`lockgate.core.elements`."""

from ..core.elements import (  # noqa: F401 - re-exported for old pickles
    CancellationMarker as CancellationMarker,
    CheckpointBarrier as CheckpointBarrier,
    CheckpointOptions as CheckpointOptions,
    CheckpointType as CheckpointType,
    EndOfData as EndOfData,
    EndOfPartition as EndOfPartition,
    PriorityBarrier as PriorityBarrier,
    StreamStatus as StreamStatus,
    Watermark as Watermark,
    _EndOfData as _EndOfData,
    _EndOfPartition as _EndOfPartition,
)

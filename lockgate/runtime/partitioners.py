"""Moved to :mod:`lockgate.core.partitioners`. Kept so that a checkpoint or savepoint written before
the move, whose pickles name these classes by their old module path, still restores
(checked by ``tests/unit/test_moved_module_pickles.py``). New code imports
:mod:`lockgate.core.partitioners`."""

from ..core.partitioners import (  # noqa: F401 - re-exported for old pickles
    BroadcastPartitioning as BroadcastPartitioning,
    ForwardPartitioning as ForwardPartitioning,
    KeyExtractionError as KeyExtractionError,
    KeyGroupPartitioning as KeyGroupPartitioning,
    KeySelector as KeySelector,
    Partitioner as Partitioner,
    PartitionerSpec as PartitionerSpec,
    RebalancePartitioning as RebalancePartitioning,
    _Broadcast as _Broadcast,
    _Forward as _Forward,
    _KeyGroups as _KeyGroups,
    _RoundRobin as _RoundRobin,
)

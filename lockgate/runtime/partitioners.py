"""Moved to :mod:`lockgate.core.partitioners`. Kept so that a checkpoint or savepoint written before
the move, whose pickles name these classes by their old module path, still restores
(checked by ``tests/unit/state/test_moved_module_pickles.py``). New code imports
:mod:`lockgate.core.partitioners`."""

from ..core.partitioners import (
    BroadcastPartitioning as BroadcastPartitioning,
)
from ..core.partitioners import (
    ForwardPartitioning as ForwardPartitioning,
)
from ..core.partitioners import (
    KeyExtractionError as KeyExtractionError,
)
from ..core.partitioners import (
    KeyGroupPartitioning as KeyGroupPartitioning,
)
from ..core.partitioners import (
    KeySelector as KeySelector,
)
from ..core.partitioners import (
    Partitioner as Partitioner,
)
from ..core.partitioners import (
    PartitionerSpec as PartitionerSpec,
)
from ..core.partitioners import (
    RebalancePartitioning as RebalancePartitioning,
)
from ..core.partitioners import (
    _Broadcast as _Broadcast,
)
from ..core.partitioners import (
    _Forward as _Forward,
)
from ..core.partitioners import (
    _KeyGroups as _KeyGroups,
)
from ..core.partitioners import (
    _RoundRobin as _RoundRobin,
)

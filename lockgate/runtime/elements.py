"""Moved to :mod:`lockgate.core.elements`. Kept so that a checkpoint or savepoint written before
the move, whose pickles name these classes by their old module path, still restores
(checked by ``tests/unit/state/test_moved_module_pickles.py``). New code imports
:mod:`lockgate.core.elements`."""

from ..core.elements import (
    CancellationMarker as CancellationMarker,
)
from ..core.elements import (
    CheckpointBarrier as CheckpointBarrier,
)
from ..core.elements import (
    CheckpointOptions as CheckpointOptions,
)
from ..core.elements import (
    CheckpointType as CheckpointType,
)
from ..core.elements import (
    EndOfData as EndOfData,
)
from ..core.elements import (
    EndOfPartition as EndOfPartition,
)
from ..core.elements import (
    PriorityBarrier as PriorityBarrier,
)
from ..core.elements import (
    StreamStatus as StreamStatus,
)
from ..core.elements import (
    Watermark as Watermark,
)
from ..core.elements import (
    _EndOfData as _EndOfData,
)
from ..core.elements import (
    _EndOfPartition as _EndOfPartition,
)

"""Moved to :mod:`lockgate.core.batch`. Kept so that a checkpoint or savepoint written before
the move, whose pickles name these classes by their old module path, still restores
(checked by ``tests/unit/state/test_moved_module_pickles.py``). New code imports
:mod:`lockgate.core.batch`."""

from ..core.batch import (
    RowBatch as RowBatch,
)

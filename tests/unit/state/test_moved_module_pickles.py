"""A checkpoint written before the layering move (issue 19) still restores: its
pickles name stream elements, row batches, partitioners and clocks by their old
module paths (``lockgate.runtime.elements``, ``lockgate.runtime.batch``,
``lockgate.runtime.partitioners``), and those paths still
resolve to the classes now in :mod:`lockgate.core` (M-R1, M-R3: restore from a
checkpoint or savepoint of an earlier run)."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from lockgate.core import batch, elements, partitioners


def _pickled_under(obj: Any, new: str, old: str) -> bytes:
    """``obj`` pickled as an older lockgate did: with ``old`` as its class's module.
    Protocol 2 names classes in newline-ended text (GLOBAL), so the rename is exact;
    protocol 5 looks the same names up, by the same import."""
    data = pickle.dumps(obj, protocol=2)
    assert new.encode() in data
    return data.replace(new.encode(), old.encode())


@pytest.mark.parametrize(
    ("obj", "new", "old"),
    [
        (elements.Watermark(42), "lockgate.core.elements", "lockgate.runtime.elements"),
        (elements.StreamStatus.IDLE, "lockgate.core.elements", "lockgate.runtime.elements"),
        (
            batch.RowBatch([{"a": 1}], np.asarray([7], dtype=np.int64)),
            "lockgate.core.batch",
            "lockgate.runtime.batch",
        ),
        (
            partitioners.RebalancePartitioning(),
            "lockgate.core.partitioners",
            "lockgate.runtime.partitioners",
        ),
    ],
)
def test_m_r3_objects_pickled_under_the_old_module_path_unpickle(
    obj: Any, new: str, old: str
) -> None:
    restored = pickle.loads(_pickled_under(obj, new, old))
    assert type(restored) is type(obj)
    assert type(restored).__module__ == new
    if isinstance(obj, batch.RowBatch):
        assert restored.rows == obj.rows and list(restored.timestamps) == [7]
    else:
        assert restored == obj or type(obj) is partitioners.RebalancePartitioning


# -- issue 41: modules moved into packages ---------------------------------------------


def test_m_r3_a_window_kept_in_state_by_an_earlier_lockgate_unpickles() -> None:
    """A user function that kept ``ctx.window`` in its state wrote a pickle naming
    ``lockgate.time.windows.TimeWindow``; the class now lives in
    ``lockgate.windowing.assigners``."""
    from lockgate.core.moved_modules import loads
    from lockgate.windowing.assigners import TimeWindow

    window = TimeWindow(0, 1000)
    old = _pickled_under(window, "lockgate.windowing.assigners", "lockgate.time.windows")
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(old)  # what a plain unpickler does with it
    assert loads(old) == window


def test_m_r3_a_state_tree_with_old_module_names_restores() -> None:
    """The pickled parts of a state file go through the same lookup (here a Kafka split
    as a pickle of the module it had before, ``lockgate.connectors.kafka_source``)."""
    from lockgate.checkpoint.state_tree import _Loader
    from lockgate.connectors.kafka.split import KafkaSplit

    split = KafkaSplit("orders", 3, 17, None)
    old = _pickled_under(
        split, "lockgate.connectors.kafka.split", "lockgate.connectors.kafka_source"
    )
    assert _Loader(old, 1, "test").value(0) == split


def test_every_successor_module_exists_and_nothing_else_is_redirected() -> None:
    import importlib

    from lockgate.core.moved_modules import MOVED_MODULES, loads

    for successors in MOVED_MODULES.values():
        for name in successors:
            importlib.import_module(name)
    # a module that never was lockgate's is not looked up anywhere else
    missing = _pickled_under(
        elements.Watermark(1), "lockgate.core.elements", "not_lockgate.elements"
    )
    with pytest.raises(ModuleNotFoundError):
        loads(missing)


def test_m_r3_a_rocksdb_value_pickled_under_an_old_module_reads_back() -> None:
    """A value in an (exported, incremental) RocksDB checkpoint is a pickle too: one
    naming a former module reads back through the codec."""
    from lockgate.state.rocksdb.codec import loads
    from lockgate.windowing.assigners import TimeWindow

    window = TimeWindow(5, 10)
    old = _pickled_under(window, "lockgate.windowing.assigners", "lockgate.time.windows")
    assert loads(old) == window
    assert loads(pickle.dumps({"a": 1})) == {"a": 1}

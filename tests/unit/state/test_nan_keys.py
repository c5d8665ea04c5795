"""Every float NaN is one key (issue 18 item 11), as Java's ``Double.equals`` has it in
Flink: NaNs with different sign and payload bits hash alike (so they route to one
subtask), key extraction hands keyed state one NaN object, and a restored NaN key is
that object again (a dict tells two NaN objects apart)."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pyarrow as pa

import lockgate as lg
from lockgate.core.batch import RowBatch
from lockgate.core.key_hash import CANONICAL_NAN, canonical_key, hash_array, hash_keys
from lockgate.core.partitioners import KeySelector
from lockgate.state.keyed import HeapKeyedStateBackend

QUIET = float("nan")
NEGATIVE = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]
PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000123))[0]
NANS = [QUIET, NEGATIVE, PAYLOAD, np.float64(np.nan)]


def test_nans_with_different_bits_hash_alike_as_python_keys_and_as_a_column() -> None:
    assert len({struct.pack("<d", n) for n in NANS}) == 3
    assert len(set(hash_keys(NANS).tolist())) == 1
    column = hash_array(pa.array([QUIET, NEGATIVE, PAYLOAD], type=pa.float64()))
    assert set(column.tolist()) == set(hash_keys(NANS).tolist())
    assert hash_keys([(1, QUIET)])[0] == hash_keys([(1, NEGATIVE)])[0]


def test_state_keys_are_one_nan_object_for_dicts_functions_columns_and_tuples() -> None:
    rows = [{"k": n, "j": 1} for n in NANS] + [{"k": 2.5, "j": 1}]
    for selector in (KeySelector("k"), KeySelector(lambda r: r["k"])):
        keys = selector.state_keys(RowBatch(rows))
        assert all(k is CANONICAL_NAN for k in keys[:-1]) and keys[-1] == 2.5
    arrow = pa.RecordBatch.from_pylist([{"k": n, "j": 1} for n in (QUIET, NEGATIVE, 1.0)])
    assert KeySelector("k").state_keys(arrow)[:2] == [CANONICAL_NAN, CANONICAL_NAN]
    pairs = KeySelector(["j", "k"]).state_keys(arrow)
    assert pairs[0] is not pairs[1] and pairs[0] == pairs[1] == (1, CANONICAL_NAN)
    ints = [{"k": i} for i in range(3)]
    keys = KeySelector("k").state_keys(RowBatch(ints))
    assert keys == [0, 1, 2]


def test_a_restored_nan_key_is_the_one_nan_key_again() -> None:
    backend = HeapKeyedStateBackend("op")
    state = backend.get_state(lg.ValueStateDescriptor("count", default=0))
    backend.current_key = canonical_key(NEGATIVE)
    state.update(3)
    snap = backend.snapshot()
    data = pickle.dumps(snap.materialize())
    snap.release()
    restored = HeapKeyedStateBackend("op")
    restored.restore([pickle.loads(data)], range(128))
    count = restored.get_state(lg.ValueStateDescriptor("count", default=0))
    restored.current_key = canonical_key(QUIET)
    assert count.value() == 3, "the restored NaN entry is found with the one NaN key"
    count.update(4)
    assert len(restored.keys("count")) == 1

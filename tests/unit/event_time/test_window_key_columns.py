"""The window operator's key dictionary turns codes back into output key columns
(``KeyDictionary.key_columns``) from Arrow columns it extends as keys appear: the
result must equal building the columns from the Python key values, keep the key
column's first-seen type, survive growth, compaction and restores, and fall back to
the per-value path for keys Arrow cannot hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from lockgate.core.partitioners import KeySelector
from lockgate.runtime.operators.window.keys import KeyDictionary


def _by_values(keys: KeyDictionary, codes: np.ndarray) -> dict[str, pa.Array] | None:
    return keys._key_columns_of(keys.keys_of(codes))


def test_key_columns_equal_the_per_value_columns_through_growth_and_keep_int32() -> None:
    keys = KeyDictionary(KeySelector("k"), 128)
    rng = np.random.default_rng(5)
    for step in range(40):  # keys appear over many batches: many chunks, then merged
        batch = pa.record_batch({"k": pa.array(rng.integers(0, 30 * (step + 1), 50), pa.int32())})
        keys.codes_of(batch)
        codes = rng.integers(0, len(keys), 70)
        got = keys.key_columns(codes)
        assert got is not None
        assert got["k"].type == pa.int32()
        assert got == _by_values(keys, codes)
        assert got["k"].to_pylist() == keys.keys_of(codes)


def _pairs(columns: dict[str, pa.Array] | None) -> list[tuple[Any, ...]]:
    assert columns is not None
    return list(zip(columns["a"].to_pylist(), columns["b"].to_pylist()))


def test_key_columns_of_tuple_keys_and_after_compaction() -> None:
    keys = KeyDictionary(KeySelector(["a", "b"]), 128)
    codes = keys.codes_of(pa.record_batch({"a": ["x", "y", "z", "x"], "b": [1, 2, 3, 4]}))
    assert _pairs(keys.key_columns(codes)) == [("x", 1), ("y", 2), ("z", 3), ("x", 4)]
    live = codes[[1, 3]]  # ("y", 2) and ("x", 4) stay
    remap = keys.compact(live)
    assert _pairs(keys.key_columns(remap[live])) == [("y", 2), ("x", 4)]
    new = keys.codes_of(pa.record_batch({"a": ["w", "x"], "b": [9, 4]}))
    assert _pairs(keys.key_columns(new)) == [("w", 9), ("x", 4)]


def test_restored_keys_are_in_the_key_columns() -> None:
    keys = KeyDictionary(KeySelector("k"), 128)
    keys.codes_of(pa.record_batch({"k": pa.array([7, 8], pa.int64())}))
    assert keys.key_columns(np.array([1]))["k"].to_pylist() == [8]  # type: ignore[index]
    codes = keys.restore_keys([9, 7], np.array([3, 4], dtype=np.int64))
    assert codes.tolist() == [2, 0]
    got = keys.key_columns(np.array([2, 0, 1]))
    assert got is not None and got["k"].to_pylist() == [9, 7, 8]


def test_keys_arrow_cannot_hold_give_none_as_before() -> None:
    keys = KeyDictionary(KeySelector(lambda r: r["o"]), 128)
    keys.codes_of_keys([1, "a"])  # no Arrow column holds both
    assert keys.key_columns(np.array([0, 1])) is None
    # one kind at a time still has a column, as with the per-value path
    assert keys.key_columns(np.array([1])) == _by_values(keys, np.array([1]))
    assert keys.key_columns(np.array([1]))["key"].to_pylist() == ["a"]  # type: ignore[index]


def test_function_keys_of_mixed_kinds_fall_back_to_a_column_per_call() -> None:
    keys = KeyDictionary(KeySelector(lambda r: r["o"]), 128)
    keys.codes_of_keys([1, 2])
    assert keys.key_columns(np.array([1]))["key"].to_pylist() == [2]  # type: ignore[index]
    keys.codes_of_keys(["a"])  # an int column cannot take it: the per-value path decides
    assert keys.key_columns(np.array([2, 0])) == _by_values(keys, np.array([2, 0]))
    assert keys.key_columns(np.array([1])) == _by_values(keys, np.array([1]))

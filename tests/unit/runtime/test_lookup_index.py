"""The lookup join's hash index (lockgate/runtime/operators/lookup/index.py): a probe
finds exactly the rows pandas' merge finds, duplicates in table order, null and
unknown keys nothing, and colliding hashes are told apart by the keys themselves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import lockgate.runtime.operators.lookup.index as index_module
from lockgate.errors import ConfigurationError
from lockgate.runtime.operators.lookup.index import LookupIndex


def pairs(index: LookupIndex, keys: pa.Array, keep: bool) -> list[tuple[int, int]]:
    m = index.probe(keys, keep_unmatched=keep)
    return list(zip(m.stream.tolist(), m.table.tolist()))


def merged_pairs(stream_keys: list, table_keys: list, how: str) -> list[tuple[int, int]]:
    """pandas' merge of row numbers: the reference a probe must equal."""
    left = pd.DataFrame({"k": pd.array(stream_keys, dtype="object"), "i": range(len(stream_keys))})
    right = pd.DataFrame({"k": pd.array(table_keys, dtype="object"), "j": range(len(table_keys))})
    right = right[right["k"].notna()]  # a null key matches nothing (SQL), pandas would match
    left_keyed = left.copy()
    left_keyed.loc[left_keyed["k"].isna(), "k"] = object()  # never equal to a table key
    out = left_keyed.merge(right, on="k", how=how, sort=False)
    out = out.sort_values(["i", "j"], na_position="last", kind="stable")
    return [(int(i), -1 if pd.isna(j) else int(j)) for i, j in zip(out["i"], out["j"])]


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("seed", range(5))
def test_a_probe_finds_what_pandas_merge_finds(how: str, seed: int) -> None:
    """Random integer keys with duplicates and nulls on both sides: the (record, row)
    pairs equal pandas' merge, in stream order and, within a record, table order."""
    rng = np.random.default_rng(seed)
    table_keys = [None if rng.random() < 0.05 else int(v) for v in rng.integers(0, 40, 60)]
    stream_keys = [None if rng.random() < 0.05 else int(v) for v in rng.integers(0, 60, 200)]
    index = LookupIndex(pa.table({"x": pa.array(table_keys, pa.int64())}), "x", "j")
    got = pairs(index, pa.array(stream_keys, pa.int32()), how == "left")
    assert got == merged_pairs(stream_keys, table_keys, how)


def test_string_keys_of_either_width_match() -> None:
    table = pa.table({"x": pa.array(["b", "a", "c", "a"], pa.large_string())})
    index = LookupIndex(table, "x", "j")
    assert pairs(index, pa.array(["a", "z", "c", None]), keep=True) == [
        (0, 1),
        (0, 3),
        (1, -1),
        (2, 2),
        (3, -1),
    ]


def test_keys_whose_hashes_collide_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key hashes alike: the index keeps one group per key and a probe steps over
    the groups of the same hash until the key itself is equal."""
    monkeypatch.setattr(index_module, "hash_array", lambda a: np.full(len(a), 7, dtype=np.uint64))
    index = LookupIndex(pa.table({"x": ["a", "b", "c", "b"]}), "x", "j")
    assert len(index.hashes) == 3
    assert pairs(index, pa.array(["c", "a", "b", "q", None]), keep=True) == [
        (0, 2),
        (1, 0),
        (2, 1),
        (2, 3),
        (3, -1),
        (4, -1),
    ]


def test_integer_keys_whose_hashes_collide_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same with numbers, whose keys are compared in numpy, not Arrow."""
    monkeypatch.setattr(index_module, "hash_array", lambda a: np.full(len(a), 7, dtype=np.uint64))
    index = LookupIndex(pa.table({"x": [30, 10, 20, 10]}), "x", "j")
    assert index.key_values is not None, "numbers take the numpy comparison"
    assert pairs(index, pa.array([20, 10, 99, None]), keep=False) == [(0, 2), (1, 1), (1, 3)]


def test_nan_matches_nothing_and_floats_match_their_value() -> None:
    index = LookupIndex(pa.table({"x": [1.5, float("nan")]}), "x", "j")
    assert pairs(index, pa.array([float("nan"), 1.5, 2.5], pa.float32()), keep=False) == [(1, 0)]


def test_an_empty_table_matches_nothing() -> None:
    index = LookupIndex(pa.table({"x": pa.array([], pa.int64())}), "x", "j")
    assert pairs(index, pa.array([1, 2]), keep=False) == []
    assert pairs(index, pa.array([1, 2]), keep=True) == [(0, -1), (1, -1)]


def test_a_table_without_the_key_column_is_refused_naming_its_columns() -> None:
    with pytest.raises(ConfigurationError, match=r"no key column 'x' \(its columns: \['id'"):
        LookupIndex(pa.table({"id": [1]}), "x", "j")


def test_key_types_that_never_match_are_refused_with_both_types() -> None:
    index = LookupIndex(pa.table({"x": pa.array([1], pa.int64())}), "x", "j")
    index.check_key_type(pa.int16(), "key")  # any integer width is an integer
    index.check_key_type(pa.null(), "key")  # all-null keys match nothing, no error
    with pytest.raises(
        ConfigurationError, match=r"'key' is string but the table's key 'x' is int64"
    ):
        index.check_key_type(pa.string(), "key")
    with pytest.raises(ConfigurationError, match="double"):
        index.check_key_type(pa.float64(), "key")

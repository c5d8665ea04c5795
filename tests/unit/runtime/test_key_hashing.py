"""The stable key hash (DESIGN §3): same value, same hash, in every process and
whether the key arrives as a Python value or as an Arrow column."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lockgate as lg
from lockgate.core import key_hash
from lockgate.core.key_hash import hash_array, hash_keys

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40
)  # no lone surrogates
FLOATS = st.floats(allow_nan=False)

SAMPLE_KEYS = ["hello", "", "héllo wörld", "日本語", "🦀 emoji", "a" * 300]


def _as_list(h: np.ndarray) -> list[int]:
    return [int(x) for x in h]


# ---------------------------------------------------------------- stability across processes

_CHILD = """
import json, sys
from lockgate.core.key_hash import hash_keys
import lockgate as lg
keys = json.loads(sys.argv[1])
print(json.dumps({
    "hashes": [int(h) for h in hash_keys(keys)],
    "groups": [lg.key_group_for(k, 128) for k in keys],
}))
"""


@pytest.mark.parametrize("seed", ["0", "12345"])
def test_a_string_key_hashes_identically_in_another_process_with_another_hash_seed(
    seed: str,
) -> None:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(SAMPLE_KEYS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    child = json.loads(proc.stdout)
    assert child["hashes"] == _as_list(hash_keys(SAMPLE_KEYS))
    assert child["groups"] == [lg.key_group_for(k, 128) for k in SAMPLE_KEYS]


def test_the_hash_of_known_keys_never_changes_between_releases() -> None:
    """Pinned values: changing the hash silently re-routes keys of every saved checkpoint."""
    assert _as_list(hash_keys(["a", "b"])) == [11083546440691376660, 1498177606602399366]
    assert _as_list(hash_keys([1])) == [11941686817672595972]


def test_long_keys_hash_to_their_pinned_values_on_the_matrix_path_too() -> None:
    """Long keys (a column of 2 KB or more, few distinct lengths) are hashed as rows of a
    byte matrix (issue 42: a 1.2 KB payload key cost 30 ns a byte before): the values are
    those the general pass gave, pinned here."""
    keys = [b"x" * 1180, b"y" * 1180, b"%036d" % 7] * 30
    assert _as_list(hash_keys(keys))[:3] == [
        2434700366554893696,
        366151719104133762,
        2344902517219922483,
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=60),
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=1, max_value=40),
)
def test_the_matrix_path_equals_the_general_pass_bit_for_bit(keys, cut, repeat) -> None:
    """Any column (repeated to pass the size threshold, sliced to move its offsets):
    the by-length sums equal the general pass's, and the column's hashes equal the hashes
    of the Python keys."""
    arr = pa.array(keys * repeat, type=pa.binary()).slice(cut % len(keys))
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=arr.offset + n + 1)
    offsets = offsets[arr.offset :]
    base, total = int(offsets[0]), int(offsets[-1] - offsets[0])
    if total == 0:
        return
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8, count=base + total)[base:]
    starts = (offsets[:-1] - base).astype(np.int64)
    lengths = np.diff(offsets).astype(np.int64)
    by_length = key_hash._polynomials_by_length(data, starts, lengths, total)
    if by_length is not None:
        general = key_hash._polynomials(data, starts, lengths, total)
        assert by_length.tolist() == general.tolist()
    assert _as_list(hash_array(arr)) == _as_list(hash_keys(arr.to_pylist()))


def test_different_keys_spread_over_many_key_groups() -> None:
    groups = {lg.key_group_for(f"user-{i}", 128) for i in range(2000)}
    assert len(groups) == 128
    int_groups = {lg.key_group_for(i, 128) for i in range(2000)}
    assert len(int_groups) == 128


# ---------------------------------------------------------------- column hashing == list hashing


@settings(max_examples=200, deadline=None)
@given(st.lists(INT64, max_size=50))
def test_hashing_an_int64_column_equals_hashing_the_python_ints(keys: list[int]) -> None:
    assert _as_list(hash_array(pa.array(keys, type=pa.int64()))) == _as_list(hash_keys(keys))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(min_value=-128, max_value=127), min_size=1, max_size=30),
    st.sampled_from([pa.int8(), pa.int16(), pa.int32(), pa.int64()]),
)
def test_hashing_a_narrow_int_column_equals_hashing_the_python_ints(keys: list[int], typ) -> None:
    assert _as_list(hash_array(pa.array(keys, type=typ))) == _as_list(hash_keys(keys))


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, max_size=30))
def test_hashing_a_string_column_equals_hashing_the_python_strings(keys: list[str]) -> None:
    assert _as_list(hash_array(pa.array(keys, type=pa.string()))) == _as_list(hash_keys(keys))


@settings(max_examples=100, deadline=None)
@given(st.lists(TEXT, max_size=20))
def test_large_string_and_dictionary_string_columns_hash_like_plain_strings(
    keys: list[str],
) -> None:
    expected = _as_list(hash_keys(keys))
    assert _as_list(hash_array(pa.array(keys, type=pa.large_string()))) == expected
    assert _as_list(hash_array(pa.array(keys, type=pa.string()).dictionary_encode())) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(FLOATS, max_size=50))
def test_hashing_a_float_column_equals_hashing_the_python_floats(keys: list[float]) -> None:
    assert _as_list(hash_array(pa.array(keys, type=pa.float64()))) == _as_list(hash_keys(keys))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), INT64), max_size=40))
def test_a_null_in_an_int_column_hashes_like_a_python_none(keys: list[int | None]) -> None:
    assert _as_list(hash_array(pa.array(keys, type=pa.int64()))) == _as_list(hash_keys(keys))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), TEXT), max_size=40))
def test_a_null_in_a_string_column_hashes_like_a_python_none(keys: list[str | None]) -> None:
    assert _as_list(hash_array(pa.array(keys, type=pa.string()))) == _as_list(hash_keys(keys))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), FLOATS), max_size=40))
def test_a_null_in_a_float_column_hashes_like_a_python_none(keys: list[float | None]) -> None:
    assert _as_list(hash_array(pa.array(keys, type=pa.float64()))) == _as_list(hash_keys(keys))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), TEXT), min_size=1, max_size=40), st.data())
def test_a_sliced_or_chunked_column_hashes_like_its_values(keys, data) -> None:
    arr = pa.array(keys, type=pa.string())
    start = data.draw(st.integers(0, len(keys)))
    length = data.draw(st.integers(0, len(keys) - start))
    assert _as_list(hash_array(arr.slice(start, length))) == _as_list(
        hash_keys(keys[start : start + length])
    )
    cut = data.draw(st.integers(0, len(keys)))
    chunked = pa.chunked_array([keys[:cut], keys[cut:]], type=pa.string())
    assert _as_list(hash_array(chunked)) == _as_list(hash_keys(keys))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(INT64, TEXT), min_size=1, max_size=20))
def test_a_struct_column_hashes_like_the_tuples_of_its_fields(keys: list[tuple[int, str]]) -> None:
    struct = pa.StructArray.from_arrays(
        [pa.array([k[0] for k in keys], pa.int64()), pa.array([k[1] for k in keys], pa.string())],
        names=["a", "b"],
    )
    assert _as_list(hash_array(struct)) == _as_list(hash_keys(keys))


def test_unicode_and_empty_string_keys_hash_alike_as_column_and_list() -> None:
    assert _as_list(hash_array(pa.array(SAMPLE_KEYS))) == _as_list(hash_keys(SAMPLE_KEYS))


def test_empty_string_and_none_are_different_keys() -> None:
    h_empty, h_none = _as_list(hash_keys(["", None]))
    assert h_empty != h_none
    col = _as_list(hash_array(pa.array(["", None])))
    assert col == [h_empty, h_none]


def test_minus_zero_and_zero_are_one_float_key() -> None:
    assert _as_list(hash_keys([-0.0])) == _as_list(hash_keys([0.0]))
    assert _as_list(hash_array(pa.array([-0.0, 0.0]))) == _as_list(hash_keys([0.0, 0.0]))


def test_mixed_type_key_lists_hash_each_key_as_if_alone() -> None:
    keys = ["a", 1, None, 2.5, ("x", 2), b"raw"]
    mixed = _as_list(hash_keys(keys))
    assert mixed == [_as_list(hash_keys([k]))[0] for k in keys]


def test_a_bool_key_hashes_like_the_equal_int_as_python_dicts_treat_them() -> None:
    assert _as_list(hash_keys([True, False])) == _as_list(hash_keys([1, 0]))
    assert _as_list(hash_array(pa.array([True, False]))) == _as_list(hash_keys([1, 0]))


def test_a_uint64_column_beyond_int64_hashes_like_the_python_ints() -> None:
    """A uint64 key column and the same values as Python ints must route alike."""
    keys = [2**63 + 5, 2**64 - 1, 7]
    assert _as_list(hash_array(pa.array(keys, type=pa.uint64()))) == _as_list(hash_keys(keys))


def test_timestamp_keys_hash_alike_as_column_and_list() -> None:
    keys = [datetime.datetime(2020, 1, 1, 12, 30), datetime.datetime(1999, 12, 31)]
    assert _as_list(hash_array(pa.array(keys))) == _as_list(hash_keys(keys))


def test_date_keys_are_supported_as_the_hash_module_documents() -> None:
    keys = [datetime.date(2020, 1, 1), datetime.date(1970, 1, 2)]
    listed = _as_list(hash_keys(keys))
    assert _as_list(hash_array(pa.array(keys, type=pa.date32()))) == listed
    assert listed[0] != listed[1]


def test_a_key_that_cannot_be_hashed_stably_raises_unsupported_key_error_with_a_fix() -> None:
    class Custom:
        pass

    with pytest.raises(lg.UnsupportedKeyError) as err:
        hash_keys([Custom()])
    assert "Custom" in str(err.value)
    assert "return an int, float, str" in str(err.value)
    assert isinstance(err.value, TypeError)


def test_an_arrow_column_of_an_unhashable_type_raises_unsupported_key_error() -> None:
    with pytest.raises(lg.UnsupportedKeyError, match="list"):
        hash_array(pa.array([[1, 2], [3]]))

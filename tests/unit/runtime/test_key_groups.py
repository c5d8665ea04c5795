"""Key → key group → subtask (DESIGN §3): key_group = hash(key) mod max_parallelism,
subtask = key_group * parallelism // max_parallelism."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lockgate as lg
from lockgate.core.key_groups import key_groups_of_column, key_groups_of_keys
from lockgate.core.key_hash import hash_keys

KEYS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20),
    st.floats(allow_nan=False),
    st.none(),
)


@st.composite
def parallelisms(draw) -> tuple[int, int]:
    max_parallelism = draw(st.integers(min_value=1, max_value=4096))
    parallelism = draw(st.integers(min_value=1, max_value=min(max_parallelism, 512)))
    return parallelism, max_parallelism


@settings(max_examples=300, deadline=None)
@given(KEYS, st.integers(min_value=1, max_value=1 << 15))
def test_the_key_group_of_a_key_is_its_stable_hash_modulo_max_parallelism(
    key, max_parallelism
) -> None:
    expected = int(hash_keys([key])[0]) % max_parallelism
    assert lg.key_group_for(key, max_parallelism) == expected


@settings(max_examples=300, deadline=None)
@given(parallelisms(), st.data())
def test_the_subtask_of_a_key_group_is_key_group_times_parallelism_div_max_parallelism(
    pm, data
) -> None:
    parallelism, max_parallelism = pm
    kg = data.draw(st.integers(0, max_parallelism - 1))
    assert (
        lg.subtask_for_key_group(kg, parallelism, max_parallelism)
        == kg * parallelism // max_parallelism
    )


@settings(max_examples=300, deadline=None)
@given(KEYS, parallelisms())
def test_subtask_for_key_composes_the_two_formulas(key, pm) -> None:
    parallelism, max_parallelism = pm
    kg = lg.key_group_for(key, max_parallelism)
    assert (
        lg.subtask_for_key(key, parallelism, max_parallelism) == kg * parallelism // max_parallelism
    )


@settings(max_examples=200, deadline=None)
@given(parallelisms())
def test_key_group_ranges_are_contiguous_disjoint_cover_everything_and_match_the_formula(
    pm,
) -> None:
    parallelism, max_parallelism = pm
    ranges = [lg.key_group_range(i, parallelism, max_parallelism) for i in range(parallelism)]
    flat = [kg for r in ranges for kg in r]
    assert flat == list(range(max_parallelism)), "ranges must tile [0, max_parallelism) in order"
    for i, r in enumerate(ranges):
        assert len(r) >= 1, f"subtask {i} owns no key group (parallelism <= max_parallelism)"
        for kg in r:
            assert lg.subtask_for_key_group(kg, parallelism, max_parallelism) == i


@settings(max_examples=100, deadline=None)
@given(parallelisms())
def test_every_subtask_owns_a_balanced_share_of_key_groups(pm) -> None:
    parallelism, max_parallelism = pm
    sizes = [len(lg.key_group_range(i, parallelism, max_parallelism)) for i in range(parallelism)]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=50),
    st.integers(min_value=1, max_value=4096),
)
def test_vectorized_key_groups_of_a_column_equal_those_of_each_key(keys, max_parallelism) -> None:
    column = key_groups_of_column(pa.array(keys, pa.int64()), max_parallelism)
    one_by_one = [lg.key_group_for(k, max_parallelism) for k in keys]
    assert column.tolist() == one_by_one
    assert key_groups_of_keys(keys, max_parallelism).tolist() == one_by_one


def test_rescaling_moves_whole_key_groups_between_subtasks() -> None:
    """Going from 2 to 4 subtasks splits each old range; no key group is split."""
    mp = 128
    for kg in range(mp):
        old = lg.subtask_for_key_group(kg, 2, mp)
        new = lg.subtask_for_key_group(kg, 4, mp)
        assert new // 2 == old


def test_the_default_max_parallelism_is_128() -> None:
    assert lg.key_group_for("x") == lg.key_group_for("x", 128)
    assert lg.StreamEnvironment(parallelism=1).max_parallelism == 128


@pytest.mark.parametrize("kg", [-1, 128, 1000])
def test_a_key_group_outside_the_range_is_rejected(kg: int) -> None:
    with pytest.raises(ValueError, match=r"\[0, 128\)"):
        lg.subtask_for_key_group(kg, 2, 128)


@pytest.mark.parametrize(
    "subtask,parallelism,max_parallelism", [(2, 2, 128), (-1, 2, 128), (0, 200, 128)]
)
def test_a_subtask_outside_its_parallelism_has_no_key_group_range(
    subtask, parallelism, max_parallelism
) -> None:
    with pytest.raises(ValueError, match="subtask"):
        lg.key_group_range(subtask, parallelism, max_parallelism)


def test_key_groups_are_int64_arrays_for_vectorized_routing() -> None:
    groups = key_groups_of_keys(["a", "b", "c"], 128)
    assert groups.dtype == np.int64
    assert ((groups >= 0) & (groups < 128)).all()

"""Rolling aggregates (``keyed.sum/min/max``): the batch kernel
(lockgate.runtime.operators.rolling_kernel) against a record-at-a-time Python fold, and
the API's checks. Each test would fail if a running value were reassociated (a float sum
rounding differently from one record at a time), if a hot key's records past the
vectorized rounds were folded out of order, if an int turned into a float, or if bad
input were accepted."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

import lockgate as lg
from lockgate.errors import ConfigurationError
from lockgate.runtime.operators.rolling_kernel import ROUNDS, as_column, combine_one, running_fold


def python_fold(
    kind: str, codes: list[int], values: list[Any], before: dict[int, Any]
) -> list[Any]:
    state = dict(before)
    out = []
    for c, v in zip(codes, values):
        state[c] = v if c not in state else combine_one(kind, state[c], v)
        out.append(state[c])
    return out


def kernel(kind: str, codes: list[int], values: list[Any], before: dict[int, Any]) -> list[Any]:
    k = max(codes) + 1
    known = np.array([c in before for c in range(k)])
    column = as_column(values + [before[c] for c in range(k) if c in before])
    vals, seen = column[: len(values)], column[len(values) :]
    prior = np.empty(k, dtype=column.dtype)
    prior[known] = seen
    return list(running_fold(kind, np.array(codes), vals, prior, known).tolist())


def same(a: list[Any], b: list[Any]) -> bool:
    """Equal value by value, NaN equal to NaN, and of the same types."""
    return [type(x) for x in a] == [type(y) for y in b] and all(
        (isinstance(x, float) and math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b)
    )


@pytest.mark.parametrize("kind", ["sum", "min", "max"])
@pytest.mark.parametrize("shape", ["uniform", "hot", "one_key"])
@pytest.mark.parametrize("numbers", ["ints", "floats", "mixed", "huge"])
def test_the_kernel_folds_as_one_record_at_a_time(kind: str, shape: str, numbers: str) -> None:
    rng = random.Random(hash((kind, shape, numbers)) & 0xFFFF)
    n = 3000
    if shape == "uniform":
        codes = [rng.randrange(500) for _ in range(n)]
    elif shape == "hot":  # a few keys far past the vectorized rounds
        codes = [
            rng.randrange(3) if rng.random() < 0.7 else rng.randrange(3, 300) for _ in range(n)
        ]
    else:
        codes = [0] * n
    if numbers == "ints":
        values: list[Any] = [rng.randrange(-(10**6), 10**6) for _ in range(n)]
    elif numbers == "floats":
        values = [rng.uniform(-1, 1) * 10 ** rng.randrange(-3, 12) for _ in range(n)]
    elif numbers == "mixed":
        values = [rng.randrange(100) if rng.random() < 0.5 else rng.random() for _ in range(n)]
    else:
        values = [rng.randrange(2**70) for _ in range(n)]
    codes = sorted(set(codes)) + codes  # every code occurs; codes are 0..k-1 when dense
    remap = {c: i for i, c in enumerate(sorted(set(codes)))}
    codes = [remap[c] for c in codes]
    values = values[: len(codes) - n] + values
    before = {c: values[c] for c in range(0, max(codes) + 1, 3)}  # some keys have state
    assert same(kernel(kind, codes, values, before), python_fold(kind, codes, values, before))


def test_a_hot_key_past_the_rounds_keeps_its_order_and_float_rounding() -> None:
    values = [1e16, 1.0, -1e16, 1.0] * (ROUNDS * 3)
    codes = [0] * len(values)
    assert same(kernel("sum", codes, values, {}), python_fold("sum", codes, values, {}))


def test_nan_propagates_in_min_and_max() -> None:
    values = [3.0, float("nan"), 1.0, 5.0]
    for kind in ("min", "max"):
        out = kernel(kind, [0, 0, 0, 0], values, {})
        assert out[0] == 3.0 and all(math.isnan(v) for v in out[1:])


@pytest.mark.parametrize("field", [None, "", 3])
def test_a_rolling_aggregate_needs_a_field_name(field: Any) -> None:
    env = lg.StreamEnvironment()
    keyed = env.from_collection([{"k": 1, "v": 1}]).key_by("k")
    with pytest.raises(ConfigurationError, match=r"keyed.sum\(field\) needs the name"):
        keyed.sum(field)


def test_nan_propagates_in_min_and_max_of_ints_mixed_with_floats() -> None:
    """The object path (ints and floats in one batch) carries NaN like the float path."""
    values: list[Any] = [1, float("nan"), 0]
    for kind in ("min", "max"):
        out = kernel(kind, [0, 0, 0], values, {})
        assert out[0] == 1 and all(math.isnan(v) for v in out[1:]), (kind, out)

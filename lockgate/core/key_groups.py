"""Key → key group → subtask, as Flink assigns them.

``key_group = hash(key) mod max_parallelism`` and
``subtask = key_group × parallelism ÷ max_parallelism`` (integer division), so
each subtask owns a contiguous range of key groups and rescaling moves whole
key groups. ``hash`` is the stable hash of :mod:`lockgate.core.key_hash`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import ConfigurationError
from .key_hash import hash_array, hash_keys

DEFAULT_MAX_PARALLELISM = 128
UPPER_BOUND_MAX_PARALLELISM = 1 << 15


def check_max_parallelism(max_parallelism: int, what: str = "max_parallelism") -> int:
    if isinstance(max_parallelism, bool) or not isinstance(max_parallelism, int):
        raise ConfigurationError(f"{what} must be an int, got {max_parallelism!r}")
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ConfigurationError(
            f"{what} must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}, got {max_parallelism}"
        )
    return max_parallelism


def check_restored_max_parallelism(found: Any, max_parallelism: int, where: str, what: str) -> None:
    """Key groups only mean the same with the same ``max_parallelism``: a snapshot
    (``where``) taken with another one cannot be restored (``what``: e.g. "keyed state")."""
    if found != max_parallelism:
        raise ConfigurationError(
            f"{where} was taken with max_parallelism {found!r}, but the operator runs with "
            f"max_parallelism {max_parallelism}; max_parallelism cannot change when "
            f"restoring {what}"
        )


def key_groups_of_hashes(hashes: np.ndarray, max_parallelism: int) -> np.ndarray:
    return (hashes % np.uint64(max_parallelism)).astype(np.int64)


def key_groups_of_keys(keys: Sequence[Any], max_parallelism: int) -> np.ndarray:
    """Key group of each Python key."""
    return key_groups_of_hashes(hash_keys(keys), max_parallelism)


def key_groups_of_column(column: pa.Array | pa.ChunkedArray, max_parallelism: int) -> np.ndarray:
    """Key group of each value of an Arrow column (vectorized)."""
    return key_groups_of_hashes(hash_array(column), max_parallelism)


def key_group_for(key: Any, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> int:
    """The key group of one key."""
    return int(key_groups_of_keys([key], max_parallelism)[0])


def subtask_for_key_group(key_group: int, parallelism: int, max_parallelism: int) -> int:
    """The subtask that owns ``key_group``: ``key_group * parallelism // max_parallelism``."""
    if not 0 <= key_group < max_parallelism:
        raise ValueError(f"key group {key_group} is outside [0, {max_parallelism})")
    return key_group * parallelism // max_parallelism


def subtasks_for_key_groups(
    key_groups: np.ndarray, parallelism: int, max_parallelism: int
) -> np.ndarray:
    return key_groups * parallelism // max_parallelism


def subtask_for_key(
    key: Any, parallelism: int, max_parallelism: int = DEFAULT_MAX_PARALLELISM
) -> int:
    return subtask_for_key_group(key_group_for(key, max_parallelism), parallelism, max_parallelism)


def key_group_range(subtask: int, parallelism: int, max_parallelism: int) -> range:
    """The key groups subtask ``subtask`` of ``parallelism`` owns (a contiguous range)."""
    if not 0 <= subtask < parallelism <= max_parallelism:
        raise ValueError(
            f"need 0 <= subtask ({subtask}) < parallelism ({parallelism}) <= "
            f"max_parallelism ({max_parallelism})"
        )
    start = (subtask * max_parallelism + parallelism - 1) // parallelism
    end = ((subtask + 1) * max_parallelism - 1) // parallelism
    return range(start, end + 1)

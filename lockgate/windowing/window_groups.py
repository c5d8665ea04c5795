"""Grouping a batch's rows by (key, window): :func:`group_keys_and_windows`, the first
step of computing the built-in window aggregates a batch at a time (:mod:`.aggregates`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import ConfigurationError

_I64_MAX = np.iinfo(np.int64).max


class WindowGroups(NamedTuple):
    """Rows grouped by (key, window start): ``group_ids[i]`` in ``[0, num_groups)``;
    ``first_row[g]`` is the first row of group ``g``. Groups are ordered by window
    start, then key code (so each window's groups are one contiguous run)."""

    group_ids: np.ndarray
    first_row: np.ndarray

    @property
    def num_groups(self) -> int:
        return len(self.first_row)


def group_keys_and_windows(key_codes: np.ndarray, window_start: np.ndarray) -> WindowGroups:
    """Group rows by ``(key_codes[i], window_start[i])`` (two int arrays of one length).

    Dense arithmetic when keys and window starts span a small range (the usual
    case: a batch covers a few windows), hashing-free sorting otherwise.
    """
    keys = np.asarray(key_codes)
    starts = np.asarray(window_start)
    if (
        keys.ndim != 1
        or starts.ndim != 1
        or len(keys) != len(starts)
        or (len(keys) and (keys.dtype.kind not in "iu" or starts.dtype.kind not in "iu"))
    ):
        raise ConfigurationError(
            "group_keys_and_windows needs two 1-D integer arrays of one length (int key "
            f"codes and window starts), got {keys.dtype}{keys.shape} and "
            f"{starts.dtype}{starts.shape}"
        )
    n = len(keys)
    if n == 0:
        return WindowGroups(np.empty(0, np.int64), np.empty(0, np.int64))
    keys = keys.astype(np.int64, copy=False)
    starts = starts.astype(np.int64, copy=False)
    kmin, kmax = int(keys.min()), int(keys.max())
    smin, smax = int(starts.min()), int(starts.max())
    limit = max(4 * n, 1 << 16)
    kspan = kmax - kmin + 1
    offsets = starts - smin
    step = 1
    if kspan * (smax - smin + 1) > limit and smax > smin:
        step = int(np.gcd.reduce(offsets))
    wspan = (smax - smin) // step + 1
    if kspan * wspan <= _I64_MAX // 2:
        wcode = offsets // step if step > 1 else offsets
        combined = wcode * kspan + (keys - kmin)
        if kspan * wspan <= limit:
            present = np.zeros(kspan * wspan, dtype=bool)
            present[combined] = True
            code = np.cumsum(present, dtype=np.int64) - 1
            group_ids = code[combined]
            num = int(code[-1]) + 1
        else:
            uniq, inverse = np.unique(combined, return_inverse=True)
            group_ids, num = inverse.astype(np.int64, copy=False), len(uniq)
    else:
        order = np.lexsort((keys, starts))
        ks, ss = keys[order], starts[order]
        opens = np.ones(n, dtype=bool)
        opens[1:] = (ks[1:] != ks[:-1]) | (ss[1:] != ss[:-1])
        group_ids = np.empty(n, dtype=np.int64)
        group_ids[order] = np.cumsum(opens) - 1
        num = int(opens.sum())
    first_row = np.full(num, n, dtype=np.int64)
    np.minimum.at(first_row, group_ids, np.arange(n, dtype=np.int64))
    return WindowGroups(group_ids, first_row)


__all__ = ["WindowGroups", "group_keys_and_windows"]

"""The compiled kernels of :mod:`.change_columns` (imported only when numba is there:
this module compiles them on import, or loads them from numba's cache)."""

from __future__ import annotations

import numpy as np

from ...compiled import inline, kernel


@inline
def _tuple(
    buf: np.ndarray, p: int, end: int, vstart: np.ndarray, vlen: np.ndarray,
    vcode: np.ndarray, m: int,
) -> tuple[int, int, int]:  # fmt: skip  # pragma: no cover - compiled
    """The TupleData at ``p``: (columns, position after it, next free value entry);
    columns -1 when this pass does not take it."""
    if end - p < 2:
        return -1, p, m
    n = (np.int64(buf[p]) << 8) | np.int64(buf[p + 1])
    if n >= 32768:  # a negative int16
        return -1, p, m
    p += 2
    if m + n > len(vstart):
        return -1, p, m
    for _ in range(n):
        if p >= end:
            return -1, p, m
        kind = buf[p]
        p += 1
        if kind == 116:  # 't'
            if end - p < 4:
                return -1, p, m
            size = (
                (np.int64(buf[p]) << 24)
                | (np.int64(buf[p + 1]) << 16)
                | (np.int64(buf[p + 2]) << 8)
                | np.int64(buf[p + 3])
            )
            p += 4
            if size >= 2**31 or size > end - p:  # negative, or past the message
                return -1, p, m
            vstart[m] = p
            vlen[m] = size
            vcode[m] = 0
            p += size
        elif kind == 110:  # 'n'
            vstart[m] = 0
            vlen[m] = 0
            vcode[m] = 1
        elif kind == 117:  # 'u'
            vstart[m] = 0
            vlen[m] = 0
            vcode[m] = 2
        else:  # 'b' (not asked for) or unknown: the reference decoder says so
            return -1, p, m
        m += 1
    return n, p, m


@kernel
def scan_frames(  # noqa: C901 (one compiled loop)
    buf: np.ndarray, fstart: np.ndarray, flen: np.ndarray, ftype: np.ndarray,
    relid: np.ndarray, old_base: np.ndarray, old_n: np.ndarray, new_base: np.ndarray,
    new_n: np.ndarray, vstart: np.ndarray, vlen: np.ndarray, vcode: np.ndarray,
) -> int:  # fmt: skip  # pragma: no cover - compiled
    """Classifies and decodes each frame (see the module docstring); the number of
    value entries used."""
    m = 0
    for f in range(len(fstart)):
        ftype[f] = 0
        old_base[f] = -1
        old_n[f] = 0
        new_base[f] = -1
        new_n[f] = 0
        relid[f] = 0
        p = fstart[f]
        end = p + flen[f]
        if flen[f] <= 25 or buf[p] != 119:  # not an XLogData frame with a payload
            continue
        p += 25
        tag = buf[p]
        if tag != 73 and tag != 85 and tag != 68:  # 'I', 'U', 'D'
            continue
        ftype[f] = 4  # until decoded whole
        if end - p < 6:
            continue
        relid[f] = (
            (np.int64(buf[p + 1]) << 24)
            | (np.int64(buf[p + 2]) << 16)
            | (np.int64(buf[p + 3]) << 8)
            | np.int64(buf[p + 4])
        )
        kind = buf[p + 5]
        p += 6
        old_kind = 0
        ob = -1
        on = 0
        if tag == 85 or tag == 68:
            if kind == 75 or kind == 79:  # 'K', 'O'
                old_kind = kind
                ob = m
                on, p, m = _tuple(buf, p, end, vstart, vlen, vcode, m)
                if on < 0:
                    continue
                if tag == 85:
                    if p >= end:
                        continue
                    kind = buf[p]
                    p += 1
            elif tag == 68:
                continue
        if tag == 68:
            unsent = False
            for c in range(on):
                if vcode[ob + c] == 2:
                    unsent = True
            if unsent:
                continue  # the reference path's row (None for it) is taken there
            old_base[f] = ob
            old_n[f] = on
            ftype[f] = 3
            continue
        if kind != 78:  # 'N'
            continue
        nb = m
        nn, p, m = _tuple(buf, p, end, vstart, vlen, vcode, m)
        if nn < 0:
            continue
        fine = True
        for c in range(on):
            if vcode[ob + c] == 2:
                fine = False
        for c in range(nn):
            if vcode[nb + c] == 2:
                if old_kind != 79 or c >= on:
                    fine = False  # nothing to fill it from: the reference path fails
                else:
                    vstart[nb + c] = vstart[ob + c]
                    vlen[nb + c] = vlen[ob + c]
                    vcode[nb + c] = vcode[ob + c]
        if not fine or (old_kind == 79 and on != nn):
            continue
        old_base[f] = ob
        old_n[f] = on
        new_base[f] = nb
        new_n[f] = nn
        ftype[f] = 1 if tag == 73 else 2
    return m


@kernel
def gather(
    buf: np.ndarray,
    starts: np.ndarray,
    sizes: np.ndarray,
    offsets: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    for i in range(len(starts)):
        at = offsets[i]
        s = starts[i]
        for k in range(sizes[i]):
            out[at + k] = buf[s + k]

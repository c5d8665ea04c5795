"""The Insert, Update and Delete messages of a whole read of replication frames decoded
in one compiled pass, and their values gathered into one text column per table column:
the stream reader's fast path (:mod:`.pgoutput` decodes one message into Python objects,
about twenty Python calls per change).

:func:`scan` joins the CopyData frames of one read into one buffer and walks them with
a numba kernel (:func:`~lockgate.connectors.compiled.kernel`). Each frame gets a class:

* ``INSERT`` / ``UPDATE`` / ``DELETE``: an XLogData frame holding that pgoutput message,
  decoded whole: its relation id and, for its old and new tuples, where their values
  start in the value table (``vstart``/``vlen``/``vcode``, one entry per column). An
  update's new value that PostgreSQL did not send (``'u'``, an unchanged TOASTed value)
  is filled from the old row when the old row is whole (``REPLICA IDENTITY FULL``):
  what :meth:`.reader.CdcReader._filled` does.
* ``REFERENCE``: a change message this pass does not take (cut short, binary or unknown
  values, an unchanged value with no whole old row to fill it from, an unchanged value
  in an old row): the caller decodes it with :func:`.pgoutput.decode` and gets exactly
  the old path's rows or errors.
* ``CONTROL``: everything else (keepalives, Begin, Commit, Relation, Truncate, logical
  messages ...), for :func:`.pgoutput.decode_frame` and :func:`.pgoutput.decode`.

:func:`text_columns` then makes, for rows given as the value-table index of their
tuple's first value, one Arrow string array per column from the buffer (one copy of the
bytes), which :func:`.types.text_to_arrow` converts like every other row's text.

Without numba (:func:`available` is False) the reader decodes every frame the reference
way.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

log = logging.getLogger(__name__)

#: frame classes (``FrameScan.ftype``)
CONTROL, INSERT, UPDATE, DELETE, REFERENCE = 0, 1, 2, 3, 4
#: value codes (``FrameScan.vcode``): text, NULL, unchanged (not sent)
TEXT, NULL, UNSENT = 0, 1, 2
#: bytes before an XLogData frame's payload: 'w', WAL start, WAL end, the server's clock
XLOGDATA_HEADER = 25


_KERNELS: tuple[Any, Any] | None = None
_UNAVAILABLE: str | None = None
_LOADING = threading.Lock()
_WARMING: list[threading.Thread] = []


def available() -> bool:
    """Whether the compiled pass can run here (numba installed and compiling); else
    the reader decodes every frame with :mod:`.pgoutput`."""
    if _KERNELS is not None:
        return True
    if _UNAVAILABLE is not None:
        return False
    with _LOADING:
        return _load()


def _load() -> bool:
    global _KERNELS, _UNAVAILABLE
    if _KERNELS is not None or _UNAVAILABLE is not None:
        return _KERNELS is not None
    try:
        from .change_kernels import gather, scan_frames

        kernels = (scan_frames, gather)
        one = np.zeros(1, dtype=np.int64)
        kernels[0](np.zeros(1, dtype=np.uint8), one, one, np.zeros(1, dtype=np.uint8), one,
                   one, one, one, one, one, one, np.zeros(1, dtype=np.uint8))  # fmt: skip
        kernels[1](np.zeros(1, dtype=np.uint8), one[:0], one[:0], one, np.zeros(0, np.uint8))
    except Exception as e:  # noqa: BLE001 - numba missing or unusable: the reference path
        _UNAVAILABLE = str(e)
        log.info("PostgresCdcSource: compiled pgoutput decoding unavailable (%s)", e)
        return False
    _KERNELS = kernels
    return True


def warm_up() -> None:
    """Load (or compile) the kernels in a background thread, so that the stream's first
    read does not wait for numba (about a second and a half to import and load)."""
    if _KERNELS is None and _UNAVAILABLE is None and not _WARMING:
        thread = threading.Thread(target=available, name="lockgate-cdc-kernels", daemon=True)
        _WARMING.append(thread)
        thread.start()


@dataclass
class FrameScan:
    """The frames of one read, decoded (see the module docstring)."""

    frames: list[Any]
    data: bytes  #: the frames, joined
    buf: np.ndarray  #: the same bytes
    fstart: np.ndarray
    ftype: np.ndarray
    relid: np.ndarray
    old_base: np.ndarray
    old_n: np.ndarray
    new_base: np.ndarray
    new_n: np.ndarray
    vstart: np.ndarray
    vlen: np.ndarray
    vcode: np.ndarray
    #: the arrays above as lists, made on first use (:func:`rows`)
    _lists: tuple[list[int], ...] | None = None

    def lists(self) -> tuple[list[int], ...]:
        if self._lists is None:
            m = int(max(self.old_base.max(initial=-1), self.new_base.max(initial=-1)))
            hi = 0 if m < 0 else m + int(max(self.old_n.max(), self.new_n.max()))
            self._lists = tuple(
                a.tolist()
                for a in (
                    self.ftype, self.relid, self.old_base, self.old_n, self.new_base,
                    self.new_n, self.vstart[:hi], self.vlen[:hi], self.vcode[:hi],
                )
            )  # fmt: skip
        return self._lists


def scan(frames: list[Any]) -> FrameScan:
    """The CopyData ``frames`` (bytes-like) decoded in one pass; :func:`available` must
    be True."""
    assert _KERNELS is not None, "change_columns.available() first"
    n = len(frames)
    flen = np.fromiter(map(len, frames), dtype=np.int64, count=n)
    fstart = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(flen[:-1], out=fstart[1:])
    data = b"".join(frames)
    buf = np.frombuffer(data, dtype=np.uint8)
    # every value takes at least one byte of its frame (its kind), and a message has at
    # most two tuples of at most 32767 values (an int16 count)
    cap = int(np.minimum(flen, 2 * 32767).sum())
    ftype = np.empty(n, dtype=np.uint8)
    relid, old_base, old_n, new_base, new_n = (np.empty(n, dtype=np.int64) for _ in range(5))
    vstart = np.empty(cap, dtype=np.int64)
    vlen = np.empty(cap, dtype=np.int64)
    vcode = np.empty(cap, dtype=np.uint8)
    _KERNELS[0](buf, fstart, flen, ftype, relid, old_base, old_n, new_base, new_n, vstart,
                vlen, vcode)  # fmt: skip
    return FrameScan(
        frames,
        data,
        buf,
        fstart,
        ftype,
        relid,
        old_base,
        old_n,
        new_base,
        new_n,
        vstart,
        vlen,
        vcode,
    )


def rows(s: FrameScan, start: int, end: int) -> list[tuple[int, int, Any, Any]]:
    """The changes of frames ``start:end`` (all INSERT/UPDATE/DELETE) one by one, for
    short runs: ``(class, relid, old row or None, new row or None)``, rows as tuples of
    str/None (an old row's unsent value as None), like :mod:`.pgoutput`'s after the
    reader's filling. Raises UnicodeDecodeError for a value that is not UTF-8."""
    data = s.data
    ftype, relid, old_base, old_n, new_base, new_n, vstart, vlen, vcode = s.lists()

    def row(base: int, n: int) -> tuple[str | None, ...] | None:
        if base < 0:
            return None
        return tuple(
            data[vstart[i] : vstart[i] + vlen[i]].decode("utf-8") if vcode[i] == TEXT else None
            for i in range(base, base + n)
        )

    return [
        (ftype[i], relid[i], row(old_base[i], old_n[i]), row(new_base[i], new_n[i]))
        for i in range(start, end)
    ]


def text_columns(s: FrameScan, bases: np.ndarray, ncols: int) -> list[pa.Array] | None:
    """For rows whose tuples' values start at value entries ``bases``, one string array
    per column (NULL where the value is NULL, or an old row's unsent value); None when
    a column's bytes are not valid UTF-8 or hold 2 GiB or more (the caller then takes
    the reference path, which fails or converts as before)."""
    assert _KERNELS is not None
    n = len(bases)
    index = (np.arange(ncols, dtype=np.int64)[:, None] + bases[None, :]).ravel()  # by column
    present = s.vcode[index] == TEXT
    sizes = np.where(present, s.vlen[index], 0)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 2**31:
        return None
    data = np.empty(total, dtype=np.uint8)
    _KERNELS[1](s.buf, s.vstart[index], sizes, offsets, data)
    data_buffer = pa.py_buffer(data)
    offsets32 = offsets.astype(np.int32)
    out = []
    for c in range(ncols):
        valid = present[c * n : (c + 1) * n]
        nulls = n - int(np.count_nonzero(valid))
        validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
        column = pa.Array.from_buffers(
            pa.string(),
            n,
            [validity, pa.py_buffer(offsets32[c * n : (c + 1) * n + 1]), data_buffer],
            null_count=nulls,
        )
        try:
            column.validate(full=True)  # UTF-8, as the reference decoder requires
        except pa.ArrowInvalid:
            return None
        out.append(column)
    return out

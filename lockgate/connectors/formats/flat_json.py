"""Flat JSON objects decoded straight from fetched bytes into Arrow columns, in one
compiled pass: the fast path of ``KafkaSource(format="json", schema=...)``.

:class:`FlatJsonReader` reads values such as ``{"key": 42, "ts": 1700000000000}``: one
JSON object each, whose members the schema names are numbers, strings, booleans or
null. It covers a strict subset of JSON, and for that subset gives exactly what
``pyarrow.json.read_json(..., explicit_schema=schema, unexpected_field_behavior="ignore")``
gives (a test compares the two on generated values). Anything else makes
:meth:`FlatJsonReader.read` return None, and the caller decodes that batch the general
way, with its errors and dead letters. The subset, per value:

- whitespace, then ``{``, members, ``}``, then whitespace; JSON's four whitespace bytes
  anywhere between tokens;
- member names: strings of printable ASCII without escapes; a member the schema names
  appears at most once (others may repeat, as pyarrow.json ignores them);
- a number anywhere: 19 significant digits at most, and a power of ten within 22 (so
  that it is well inside a double's range, which pyarrow's parser checks even for
  members it ignores);
- a member the schema does not name: a number, a string (printable ASCII, no escapes),
  ``true``, ``false`` or ``null`` (an object or array there: not in the subset);
- a member the schema names, by its type: ``int8`` to ``int64`` and ``uint8`` to
  ``uint32``, an integer literal in range; ``float64``, a number whose digits (19 at most)
  form an integer of 2**53 or less and whose power of ten is within 22 (Clinger's fast
  path: one IEEE operation, so correctly rounded, as pyarrow's parser); ``bool``,
  ``true``/``false``; ``string``, a string as above; any of them ``null``;
- a member left out, or ``null``, is a null; a tombstone (no value) a row of nulls.
  A non-nullable field with a null: not in the subset.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lockgate.connectors.compiled import inline, kernel

_INT, _FLOAT, _BOOL, _STRING = 0, 1, 2, 3
#: a column's state in a row: member not seen, seen with a value, seen as null
_UNSEEN, _SET, _NULL = 0, 1, 2

_INTEGERS = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
}
#: the exact powers of ten a double holds (10**22 is the last)
_POWERS = np.array([10.0**i for i in range(23)], dtype=np.float64)


@inline
def _ws(buf: np.ndarray, p: int, end: int) -> int:  # pragma: no cover - compiled
    while p < end:
        c = buf[p]
        if c != 0x20 and c != 0x0A and c != 0x0D and c != 0x09:
            break
        p += 1
    return p


@inline
def _string(buf: np.ndarray, p: int, end: int) -> int:  # pragma: no cover - compiled
    """From just after an opening quote: the position of the closing quote, or -1 when
    the string holds an escape, a control byte or a byte outside ASCII, or never ends."""
    while p < end:
        c = buf[p]
        if c == 0x22:
            return p
        if c == 0x5C or c < 0x20 or c >= 0x80:
            return -1
        p += 1
    return -1


@inline
def _word(buf: np.ndarray, p: int, end: int) -> int:  # pragma: no cover - compiled
    """``null`` (0), ``true`` (1) or ``false`` (2) at ``p``, else -1."""
    if end - p >= 4 and buf[p + 1] == 0x75 and buf[p + 2] == 0x6C and buf[p + 3] == 0x6C:
        return 0 if buf[p] == 0x6E else -1
    if end - p >= 4 and buf[p] == 0x74 and buf[p + 1] == 0x72 and buf[p + 2] == 0x75:
        return 1 if buf[p + 3] == 0x65 else -1
    if end - p >= 5 and buf[p] == 0x66 and buf[p + 1] == 0x61 and buf[p + 2] == 0x6C:
        return 2 if buf[p + 3] == 0x73 and buf[p + 4] == 0x65 else -1
    return -1


@inline
def _digits(
    buf: np.ndarray, p: int, end: int, mantissa: np.uint64
) -> tuple[int, np.uint64, int]:  # pragma: no cover - compiled
    """The digits at ``p`` appended to ``mantissa`` (which wraps past 20 digits; the
    caller declines more than 19): (position after them, mantissa, how many)."""
    start = p
    while p < end:
        d = np.int64(buf[p]) - 0x30
        if d < 0 or d > 9:
            break
        mantissa = mantissa * np.uint64(10) + np.uint64(d)
        p += 1
    return p, mantissa, p - start


@inline
def _power(buf: np.ndarray, p: int, end: int) -> tuple[int, int]:  # pragma: no cover
    """An exponent's sign and digits at ``p``: (position after them or -1, value)."""
    sign = 1
    if p < end and (buf[p] == 0x2B or buf[p] == 0x2D):
        if buf[p] == 0x2D:
            sign = -1
        p += 1
    first = p
    power = 0
    while p < end and 0x30 <= buf[p] <= 0x39:
        if power < 100_000:
            power = power * 10 + (buf[p] - 0x30)
        p += 1
    return (-1 if p == first else p), sign * power


@inline
def _number(buf: np.ndarray, p: int, end: int) -> tuple[int, bool, bool, np.uint64, int, int]:
    """A JSON number at ``p``: (position after it or -1, negative, integer literal,
    significant digits as an integer, their count, power of ten). With more than 19
    significant digits the integer is not exact (the caller declines those)."""
    negative = p < end and buf[p] == 0x2D
    if negative:
        p += 1
    mantissa = np.uint64(0)
    if p >= end or not 0x30 <= buf[p] <= 0x39:
        return -1, negative, False, mantissa, 0, 0
    digits = 0
    if buf[p] == 0x30:  # a leading zero is the whole integer part
        p += 1
    else:
        p, mantissa, digits = _digits(buf, p, end, mantissa)
    integer = True
    exponent = 0
    if p < end and buf[p] == 0x2E:
        integer = False
        first = p + 1
        p = first
        if digits == 0:  # leading zeros of the fraction are not significant digits
            while p < end and buf[p] == 0x30:
                p += 1
        p, mantissa, more = _digits(buf, p, end, mantissa)
        digits += more
        exponent = first - p
        if p == first:
            return -1, negative, False, mantissa, 0, 0
    if p < end and (buf[p] == 0x65 or buf[p] == 0x45):
        integer = False
        p, power = _power(buf, p + 1, end)
        exponent += power
    return p, negative, integer, mantissa, digits, exponent


@inline
def _column(
    buf: np.ndarray, start: int, stop: int, names: np.ndarray, name_stops: np.ndarray
) -> int:  # pragma: no cover - compiled
    """The column whose name is ``buf[start:stop]``, or -1."""
    size = stop - start
    a = 0
    for c in range(len(name_stops)):
        b = name_stops[c]
        if b - a == size:
            j = 0
            while j < size and names[a + j] == buf[start + j]:
                j += 1
            if j == size:
                return c
        a = b
    return -1


@inline
def _integer(
    negative: bool, mantissa: np.uint64, high: np.uint64, low: np.uint64
) -> tuple[bool, int]:  # pragma: no cover - compiled
    """An integer literal's value when within ``-low .. high`` (``low`` 0: unsigned, no
    sign at all, not even on -0)."""
    if negative:
        if low == 0 or mantissa > low:
            return False, 0
        if mantissa == 0:
            return True, 0
        return True, -np.int64(mantissa - np.uint64(1)) - 1  # -2**63 has no int64 negation
    if mantissa > high:
        return False, 0
    return True, np.int64(mantissa)


@inline
def _double(
    negative: bool, mantissa: np.uint64, exponent: int, powers: np.ndarray
) -> tuple[bool, float]:  # pragma: no cover - compiled
    """``mantissa * 10**exponent`` when one IEEE operation gives it exactly rounded."""
    if mantissa > np.uint64(1 << 53):
        return False, 0.0
    value = np.float64(mantissa)
    if mantissa == np.uint64(0):
        value = 0.0
    elif 0 <= exponent <= 22:
        value = value * powers[exponent]
    elif -22 <= exponent < 0:
        value = value / powers[-exponent]
    else:
        return False, 0.0
    return True, -value if negative else value


@inline
def _value(
    buf: np.ndarray, p: int, end: int, column: int, kind: int, i: int,
    highs: np.ndarray, lows: np.ndarray, powers: np.ndarray,
    ints: np.ndarray, floats: np.ndarray, spans: np.ndarray, valid: np.ndarray,
) -> int:  # fmt: skip  # pragma: no cover - compiled
    """The member value at ``p``, stored in row ``i`` of ``column`` (-1: a member the
    schema does not name, only checked); the position after it, or -1."""
    ch = buf[p]
    if ch == 0x6E or ch == 0x74 or ch == 0x66:  # null, true, false
        word = _word(buf, p, end)
        if word < 0:
            return -1
        if column >= 0 and word == 0:
            valid[column, i] = _NULL
        elif column >= 0:
            if kind != _BOOL:
                return -1
            ints[column, i] = 1 if word == 1 else 0
            valid[column, i] = _SET
        return p + (4 if word < 2 else 5)
    if ch == 0x22:  # a string
        stop = _string(buf, p + 1, end)
        if stop < 0 or (column >= 0 and kind != _STRING):
            return -1
        if column >= 0:
            ints[column, i] = p + 1
            spans[column, i] = stop - p - 1
            valid[column, i] = _SET
        return stop + 1
    after, negative, integer, mantissa, digits, exponent = _number(buf, p, end)
    if after < 0 or digits > 19 or exponent > 22 or exponent < -22:
        return -1  # pyarrow refuses some numbers beyond a double's range, ignored or not
    if column < 0:
        return after
    if kind == _INT and integer:
        ok, number = _integer(negative, mantissa, highs[column], lows[column])
        ints[column, i] = number
    elif kind == _FLOAT:
        ok, real = _double(negative, mantissa, exponent, powers)
        floats[column, i] = real
    else:
        return -1
    valid[column, i] = _SET
    return after if ok else -1


@inline
def _object(
    buf: np.ndarray, p: int, end: int, i: int, names: np.ndarray, name_stops: np.ndarray,
    kinds: np.ndarray, highs: np.ndarray, lows: np.ndarray, powers: np.ndarray,
    ints: np.ndarray, floats: np.ndarray, spans: np.ndarray, valid: np.ndarray,
) -> bool:  # fmt: skip  # pragma: no cover - compiled
    """The object ``buf[p:end]`` decoded into row ``i``; False when not in the subset."""
    p = _ws(buf, p, end)
    if p >= end or buf[p] != 0x7B:
        return False
    p = _ws(buf, p + 1, end)
    if p < end and buf[p] == 0x7D:
        return _ws(buf, p + 1, end) == end
    while True:
        if p >= end or buf[p] != 0x22:
            return False
        name_stop = _string(buf, p + 1, end)
        if name_stop < 0:
            return False
        column = _column(buf, p + 1, name_stop, names, name_stops)
        if column >= 0 and valid[column, i] != _UNSEEN:
            return False  # a named member twice: pyarrow refuses it
        p = _ws(buf, name_stop + 1, end)
        if p >= end or buf[p] != 0x3A:
            return False
        p = _ws(buf, p + 1, end)
        if p >= end:
            return False
        kind = kinds[column] if column >= 0 else -1
        p = _value(buf, p, end, column, kind, i, highs, lows, powers, ints, floats, spans, valid)
        if p < 0:
            return False
        p = _ws(buf, p, end)
        if p < end and buf[p] == 0x2C:
            p = _ws(buf, p + 1, end)
        elif p < end and buf[p] == 0x7D:
            return _ws(buf, p + 1, end) == end
        else:
            return False


@kernel
def _parse(
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, names: np.ndarray,
    name_stops: np.ndarray, kinds: np.ndarray, highs: np.ndarray, lows: np.ndarray,
    powers: np.ndarray, ints: np.ndarray, floats: np.ndarray, spans: np.ndarray,
    valid: np.ndarray,
) -> int:  # fmt: skip  # pragma: no cover - compiled; tested through FlatJsonReader
    """Decode every value; -1, or the index of the first value not in the subset.
    ``ints`` gets integers, booleans (0/1) and strings' starts, ``spans`` strings'
    lengths, ``floats`` floats; ``valid`` whether each member was seen, and null."""
    for i in range(len(starts)):
        for c in range(len(kinds)):
            valid[c, i] = _UNSEEN
        if lengths[i] < 0:
            continue  # a tombstone: a row of nulls
        start = starts[i]
        if not _object(buf, start, start + lengths[i], i, names, name_stops, kinds, highs,
                       lows, powers, ints, floats, spans, valid):  # fmt: skip
            return i
    return -1


@kernel
def _gather(
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    for i in range(len(starts)):
        o = offsets[i]
        s = starts[i]
        for j in range(lengths[i]):
            out[o + j] = buf[s + j]


class FlatJsonReader:
    """Decodes JSON object values with a schema's fields, in one compiled pass, when
    they are in the subset this module's docstring describes."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.kinds = np.empty(len(schema), dtype=np.int64)
        self.highs = np.zeros(len(schema), dtype=np.uint64)
        self.lows = np.zeros(len(schema), dtype=np.uint64)
        self.usable = len(set(schema.names)) == len(schema.names)
        names = [name.encode() for name in schema.names]
        for c, f in enumerate(schema):
            name = names[c]
            if not name.isascii() or any(b < 0x20 or b in b'"\\' for b in name):
                self.usable = False
            if f.type in _INTEGERS:
                self.kinds[c] = _INT
                info = np.iinfo(_INTEGERS[f.type])  # type: ignore[type-var]
                self.highs[c] = info.max
                self.lows[c] = -int(info.min)  # 0 for unsigned types: no sign allowed
            elif f.type == pa.float64():
                self.kinds[c] = _FLOAT
            elif f.type == pa.bool_():
                self.kinds[c] = _BOOL
            elif f.type == pa.string():
                self.kinds[c] = _STRING
            else:
                self.usable = False
        self.names = np.frombuffer(b"".join(names) or b"\0", dtype=np.uint8)
        self.name_stops = np.cumsum([len(n) for n in names]).astype(np.int64)

    def read(self, buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Table | None:
        """The values at ``buffer[starts[i] : starts[i] + lengths[i]]`` (length -1: a
        tombstone) as a table of the schema's columns, or None when one is not in the
        subset (the caller then decodes them the general way)."""
        if not self.usable:
            return None
        n = len(starts)
        if n and (
            int(starts.min()) < 0
            or int(lengths.min()) < -1
            or int((starts + np.maximum(lengths, 0)).max()) > len(buffer)
        ):
            raise ValueError("FlatJsonReader.read: a value lies outside the buffer")
        columns = len(self.schema)
        # zeros, not empty: the values under nulls end up in the Arrow arrays
        ints = np.zeros((columns, n), dtype=np.int64)
        floats = np.zeros((columns, n), dtype=np.float64)
        spans = np.zeros((columns, n), dtype=np.int64)
        valid = np.empty((columns, n), dtype=np.uint8)
        declined = _parse(
            buffer, starts, lengths, self.names, self.name_stops, self.kinds,
            self.highs, self.lows, _POWERS, ints, floats, spans, valid,
        )  # fmt: skip
        if declined >= 0:
            return None
        arrays = []
        for c, f in enumerate(self.schema):
            present = valid[c] == _SET
            everything = bool(present.all())
            if not everything and not f.nullable:
                return None
            mask = None if everything else ~present
            kind = self.kinds[c]
            if kind == _INT:
                arrays.append(pa.array(ints[c].astype(_INTEGERS[f.type]), f.type, mask=mask))
            elif kind == _FLOAT:
                arrays.append(pa.array(floats[c], f.type, mask=mask))
            elif kind == _BOOL:
                arrays.append(pa.array(ints[c] != 0, f.type, mask=mask))
            else:
                strings = _strings(buffer, ints[c], spans[c], present, everything)
                if strings is None:
                    return None
                arrays.append(strings)
        return pa.Table.from_arrays(arrays, schema=self.schema)


def _strings(
    buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray, present: np.ndarray,
    everything: bool,
) -> pa.Array | None:  # fmt: skip
    """A string array of the bytes at ``starts``/``lengths`` where ``present``; None
    when they hold 2 GiB or more (a 32-bit offset would overflow)."""
    sizes = np.where(present, lengths, 0)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] >= 2**31:
        return None
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    _gather(buffer, np.where(present, starts, 0), sizes, offsets, data)
    validity = None if everything else pa.py_buffer(np.packbits(present, bitorder="little"))
    return pa.Array.from_buffers(
        pa.string(),
        len(sizes),
        [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
        null_count=0 if everything else int(len(sizes) - present.sum()),
    )

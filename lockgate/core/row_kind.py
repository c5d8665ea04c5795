"""The kind of change a record stands for in a changelog stream (Flink's ``RowKind``).

A stream is a changelog when its records say what they change in a table: an insert
(``+I``), the row as it was before an update (``-U``), the row after it (``+U``), or a
delete (``-D``). Every record of an append-only stream is an insert, and such a stream
carries nothing for it: the kinds exist only where a changelog source, a conversion
(``to_changelog``) or a function that emits :class:`Change` values made them, so
append-only jobs pay nothing.

Where the kinds travel, as the event timestamps do (:mod:`lockgate.core.batch`): an
Arrow batch holds them in the reserved int8 column :data:`KIND_COLUMN`, a ``RowBatch``
in its ``kinds`` array. A batch without either is all inserts. The byte values are
Flink's (``RowKind.toByteValue``), so a changelog written by one reads the same in the
other.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

#: the reserved column holding the kinds of an Arrow batch's records (int8)
KIND_COLUMN = "__lockgate_row_kind"


class RowKind(IntEnum):
    """What a record of a changelog does to its table (Flink's byte values)."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    @property
    def short(self) -> str:
        """``+I``, ``-U``, ``+U`` or ``-D`` (Flink's ``shortString``)."""
        return _SHORT[self]

    @property
    def is_addition(self) -> bool:
        """True for ``+I`` and ``+U`` (the row is in the table after it)."""
        return self in (RowKind.INSERT, RowKind.UPDATE_AFTER)

    @classmethod
    def parse(cls, value: Any) -> RowKind:
        """A kind from a :class:`RowKind`, its byte value, its name (``"delete"``) or
        its short string (``"-D"``); raises ``ValueError`` naming what is accepted."""
        if isinstance(value, RowKind):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3:
            return RowKind(value)
        if isinstance(value, str):
            found = _BY_TEXT.get(value.strip().lower())
            if found is not None:
                return found
        raise ValueError(
            f"not a row kind: {value!r}; use lg.RowKind.INSERT, UPDATE_BEFORE, UPDATE_AFTER "
            "or DELETE, their byte values 0-3, names ('insert', 'update_before', "
            "'update_after', 'delete') or short strings ('+I', '-U', '+U', '-D')"
        )


_SHORT = {
    RowKind.INSERT: "+I",
    RowKind.UPDATE_BEFORE: "-U",
    RowKind.UPDATE_AFTER: "+U",
    RowKind.DELETE: "-D",
}
_BY_TEXT = {
    **{k.name.lower(): k for k in RowKind},
    **{s.lower(): k for k, s in _SHORT.items()},
}


@dataclass(frozen=True)
class Change:
    """An output of a row function (``map``, ``flat_map``, ``process``, timers) with its
    kind: ``return lg.Change(lg.RowKind.DELETE, row)`` (or ``yield`` it) emits ``row``
    as a delete. Any other output keeps the kind of the record that produced it (an
    insert in an append-only stream). Make a ``Change`` when you emit it: operators look
    for them only in batches during which one was made, which is what keeps
    append-only streams free of any cost (a ``Change`` kept in state and emitted in a
    later batch goes out as a plain value)."""

    kind: RowKind
    value: Any

    def __post_init__(self) -> None:
        global _made
        object.__setattr__(self, "kind", RowKind.parse(self.kind))
        _made += 1


#: how many Change values were made so far in this process (see changes_made)
_made = 0


def changes_made() -> int:
    """A number that differs from an earlier call's whenever a :class:`Change` was made
    in between (by any thread): an operator compares it around a batch to know whether
    its outputs may hold Change values, at no per-record cost."""
    return _made

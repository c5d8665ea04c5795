"""What a savepoint holds, as :meth:`~lockgate.savepoint.Savepoint.operators` lists it."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class StateKind(str, enum.Enum):
    """The kind of one state of an operator (compares equal to its string value)."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"
    REDUCING = "reducing"
    #: the rows show the accumulator, not the result of ``get_result``
    AGGREGATING = "aggregating"
    OPERATOR_LIST = "operator_list"
    UNION_LIST = "union_list"
    BROADCAST = "broadcast"
    #: whatever an operator saved that is not typed state (source splits, sink transactions,
    #: function state): one row per subtask
    RAW = "raw"

    @property
    def keyed(self) -> bool:
        """Whether the state is keyed state (one row per key)."""
        return self in _KEYED

    def __str__(self) -> str:
        return self.value


_KEYED = frozenset(
    {StateKind.VALUE, StateKind.LIST, StateKind.MAP, StateKind.REDUCING, StateKind.AGGREGATING}
)

#: the name of the state holding an operator's payload when it is not typed state
RAW_STATE = "_raw"
#: the name of the state holding the ``"function"`` entry of typed operator state
FUNCTION_STATE = "_function"


@dataclass(frozen=True)
class StateInfo:
    """One state of an operator: its name, kind and, for typed keyed state, the type
    its descriptor declared (``type=``; None for pickled values)."""

    name: str
    kind: StateKind
    type: str | None = None


@dataclass(frozen=True)
class OperatorInfo:
    """One operator of a savepoint: its uid, the parallelism it ran with, its states
    (sorted by name) and, when it has keyed state, the max parallelism (number of key
    groups) that state was written with."""

    uid: str
    parallelism: int
    states: tuple[StateInfo, ...]
    max_parallelism: int | None = None

    def state_names(self) -> list[str]:
        return [s.name for s in self.states]

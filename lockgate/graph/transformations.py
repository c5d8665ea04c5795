"""The logical graph: one Transformation per API call.

Real transformations (sources, operators, sinks) become operators; virtual
ones (union, partitioning, side-output selection) only shape the edges
between real ones and vanish when the stream graph is built.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Any

from ..core.partitioners import KeySelector, PartitionerSpec
from .operator_factory import OperatorFactory


class Kind(enum.Enum):
    SOURCE = "source"
    OPERATOR = "operator"
    SINK = "sink"
    UNION = "union"
    PARTITION = "partition"
    SIDE_OUTPUT = "side output"

    @property
    def virtual(self) -> bool:
        return self in (Kind.UNION, Kind.PARTITION, Kind.SIDE_OUTPUT)


_ids = itertools.count(1)


@dataclass(eq=False)
class Transformation:
    kind: Kind
    name: str
    inputs: list[Transformation] = field(default_factory=list)
    factory: OperatorFactory[Any] | None = None
    parallelism: int | None = None
    max_parallelism: int | None = None
    uid: str | None = None
    partitioning: PartitionerSpec | None = None
    side_tag: str | None = None
    #: set on partition transformations made by key_by
    key_selector: KeySelector | None = None
    #: the operator was made for a keyed stream (its input must be key-partitioned)
    keyed: bool = False
    chainable: bool = True
    #: side outputs whose records must reach a sink (e.g. a source's dead letters)
    required_side_outputs: tuple[str, ...] = ()
    #: a stateless step the API adds for another operator (e.g. a window join's side
    #: tagging): ``(operator, suffix)``; without a uid of its own it takes
    #: ``"<operator's uid>.<suffix>"`` when that operator has an explicit uid
    uid_of: tuple[Transformation, str] | None = None
    id: int = field(default_factory=lambda: next(_ids))

    def describe(self) -> str:
        uid = f", uid '{self.uid}'" if self.uid else ""
        return f"'{self.name}' ({self.kind.value} #{self.id}{uid})"

    def user_functions(self) -> dict[str, Any]:
        return self.factory.user_functions if self.factory is not None else {}


def walk(sinks: list[Transformation]) -> list[Transformation]:
    """Every transformation reachable upstream from ``sinks``, inputs before consumers."""
    seen: set[int] = set()
    order: list[Transformation] = []

    def visit(t: Transformation) -> None:
        if t.id in seen:
            return
        seen.add(t.id)
        for i in t.inputs:
            visit(i)
        order.append(t)

    for s in sinks:
        visit(s)
    return order

"""The recipe for an operator that a job graph carries: its class, its arguments and
the user functions in it. Picklable; the runtime creates the operator from it in the
subtask (``lockgate.runtime.chain``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

OpT = TypeVar("OpT")


@dataclass
class OperatorFactory(Generic[OpT]):
    """Picklable recipe for an operator: its class, arguments and the user functions in it
    (named, so that validation can point at them). ``operator_class`` is a
    :class:`~lockgate.runtime.operators.base.StreamOperator` subclass; the graph layer
    does not need to know it."""

    operator_class: type[OpT]
    kwargs: dict[str, Any] = field(default_factory=dict)
    user_functions: dict[str, Any] = field(default_factory=dict)

    def create(self) -> OpT:
        return self.operator_class(**self.kwargs)

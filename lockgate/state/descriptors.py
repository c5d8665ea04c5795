"""State descriptors: the name and kind of a piece of state a function asks for."""

from __future__ import annotations

import copy
from typing import Any, Generic, TypeVar

from ..errors import ConfigurationError

T = TypeVar("T")

_IMMUTABLE = (int, float, str, bytes, bool, tuple, frozenset, type(None), complex)


class StateDescriptor(Generic[T]):
    """Names a piece of state; the name is unique within an operator."""

    kind = "state"

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                f"a state descriptor needs a non-empty string name, got {name!r}"
            )
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor[T]):
    """One value per key. ``default`` is returned for keys that have none (a fresh
    copy each time when it is mutable, so keys never share it)."""

    kind = "value"

    def __init__(self, name: str, default: T | None = None) -> None:
        super().__init__(name)
        self.default = default
        self._immutable_default = isinstance(default, _IMMUTABLE)

    def default_value(self) -> Any:
        return self.default if self._immutable_default else copy.deepcopy(self.default)

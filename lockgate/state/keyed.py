"""The in-memory (heap) keyed state backend and its ValueState.

State is held per state name as ``key -> value``; the backend's
``current_key`` (set by the keyed operator before each record and timer)
selects the entry a state handle reads and writes. Keys are owned by the
subtask's key-group range; snapshots (a later issue) group them by key group.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from ..errors import ConfigurationError
from .descriptors import StateDescriptor, ValueStateDescriptor

T = TypeVar("T")
_MISSING = object()


class ValueState(Generic[T]):
    """A single value per key, scoped to the current key."""

    __slots__ = ("_backend", "_table", "_descriptor")

    def __init__(self, backend: "HeapKeyedStateBackend", table: dict[Any, Any],
                 descriptor: ValueStateDescriptor[T]) -> None:
        self._backend = backend
        self._table = table
        self._descriptor = descriptor

    def value(self) -> T:
        """The current key's value, or the descriptor's default."""
        v = self._table.get(self._backend.current_key, _MISSING)
        if v is _MISSING:
            return self._descriptor.default_value()
        return v

    def update(self, value: T | None) -> None:
        """Set the current key's value; ``None`` clears it."""
        if value is None:
            self._table.pop(self._backend.current_key, None)
        else:
            self._table[self._backend.current_key] = value

    def clear(self) -> None:
        self._table.pop(self._backend.current_key, None)


class HeapKeyedStateBackend:
    """Keyed state in Python dicts (the HashMap state backend's keyed part)."""

    def __init__(self, operator_name: str) -> None:
        self.operator_name = operator_name
        self.current_key: Any = None
        self._tables: dict[str, dict[Any, Any]] = {}
        self._kinds: dict[str, str] = {}

    def get_state(self, descriptor: StateDescriptor[Any]) -> Any:
        if not isinstance(descriptor, StateDescriptor):
            raise ConfigurationError(
                f"operator '{self.operator_name}': get_state needs a state descriptor such as "
                f"lg.ValueStateDescriptor('name'), got {descriptor!r}"
            )
        known = self._kinds.get(descriptor.name)
        if known is not None and known != descriptor.kind:
            raise ConfigurationError(
                f"operator '{self.operator_name}': state '{descriptor.name}' is already "
                f"registered as {known} state; give the {descriptor.kind} state another name"
            )
        self._kinds[descriptor.name] = descriptor.kind
        table = self._tables.setdefault(descriptor.name, {})
        if isinstance(descriptor, ValueStateDescriptor):
            return ValueState(self, table, descriptor)
        raise ConfigurationError(
            f"operator '{self.operator_name}': state kind {descriptor.kind!r} is not supported yet"
        )

    def keys(self, state_name: str) -> list[Any]:
        return list(self._tables.get(state_name, {}))

    def entries(self) -> dict[str, dict[Any, Any]]:
        return self._tables

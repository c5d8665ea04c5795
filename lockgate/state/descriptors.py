"""State descriptors: the name and kind of a piece of state a function asks for.

The vocabulary is PyFlink's (``ValueStateDescriptor``, ``ListStateDescriptor``,
``MapStateDescriptor``, ``ReducingStateDescriptor``, ``AggregatingStateDescriptor``);
a descriptor is given to ``ctx.get_state(...)`` (keyed state), to
``ctx.get_list_state(...)`` / ``ctx.get_union_list_state(...)`` (operator state) or
to ``stream.broadcast(...)`` (broadcast state, a ``MapStateDescriptor``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ..errors import ConfigurationError
from .ttl import StateTtlConfig, check_ttl_config
from .typed.types import StateType, state_type

T = TypeVar("T")

_IMMUTABLE = (int, float, str, bytes, bool, tuple, frozenset, type(None), complex)


class StateDescriptor(Generic[T]):
    """Names a piece of state; the name is unique within an operator.

    ``type=`` makes the state *typed* (keyed state): its values are stored as Arrow
    columns in savepoints, restore without running code, and may evolve as
    docs/state_evolution.md allows (``aliases={"new field": "old field"}`` declares
    renamed fields); see :mod:`lockgate.state.typed.types` for the types it accepts.
    Without ``type=`` values are pickled: they restore as long as their classes still
    unpickle, and cannot evolve."""

    kind = "state"

    def __init__(
        self, name: str, *, type: Any = None, key_type: Any = None, aliases: Any = None
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                f"a state descriptor needs a non-empty string name, got {name!r}"
            )
        self.name = name
        #: the time-to-live settings (``enable_time_to_live``), or None
        self.ttl_config: Any = None
        #: the declared type (``type=``) as given, or None for pickled values
        self.type: Any = type
        #: the declared type's conversions, or None
        self.state_type: StateType | None = None
        where = f"{self.__class__.__name__}({name!r})"
        if type is not None:
            self.state_type = state_type(
                type, where, key_type=key_type, aliases=aliases, kind=self.kind
            )
        elif key_type is not None or aliases is not None:
            raise ConfigurationError(
                f"{where}: key_type= and aliases= need type= (the type of the values)"
            )

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        """Give the state a time to live: values (list elements, map entries) expire
        ``ttl_config.ttl`` after their last write (see :mod:`lockgate.state.ttl`).
        Applies to keyed state; raises ConfigurationError for anything but an
        ``lg.StateTtlConfig``."""
        self.ttl_config = check_ttl_config(
            ttl_config, f"{type(self).__name__}({self.name!r}).enable_time_to_live"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor[T]):
    """One value per key. ``default`` is returned for keys that have none (a fresh
    copy each time when it is mutable, so keys never share it)."""

    kind = "value"

    def __init__(
        self, name: str, default: T | None = None, *, type: Any = None, aliases: Any = None
    ) -> None:
        super().__init__(name, type=type, aliases=aliases)
        self.default = default
        self._immutable_default = isinstance(default, _IMMUTABLE)

    def default_value(self) -> Any:
        return self.default if self._immutable_default else copy.deepcopy(self.default)


class ListStateDescriptor(StateDescriptor[T]):
    """A list of values per key (keyed state) or per operator subtask (operator state).
    ``type=``: the type of one element."""

    kind = "list"

    def __init__(self, name: str, *, type: Any = None, aliases: Any = None) -> None:
        super().__init__(name, type=type, aliases=aliases)


class MapStateDescriptor(StateDescriptor[T]):
    """A map ``user key -> value`` per key (keyed state), or the broadcast state.
    Typed: ``key_type=`` the user keys' type (a scalar), ``type=`` the values' type."""

    kind = "map"

    def __init__(
        self, name: str, *, key_type: Any = None, type: Any = None, aliases: Any = None
    ) -> None:
        super().__init__(name, type=type, key_type=key_type, aliases=aliases)


def _reduce_callable(fn: Any, what: str) -> Callable[[Any, Any], Any]:
    """``fn.reduce`` for a ReduceFunction object, else ``fn`` itself when callable."""
    reduce = None if isinstance(fn, type) else getattr(fn, "reduce", None)
    if callable(reduce):
        return reduce
    if callable(fn):
        return fn
    raise ConfigurationError(
        f"{what} needs a reduce function: a callable (a, b) -> value or an lg.ReduceFunction, "
        f"got {fn!r}"
    )


class ReducingStateDescriptor(StateDescriptor[T]):
    """One value per key, combined with ``reduce_function(old, new)`` on every ``add``."""

    kind = "reducing"

    def __init__(
        self, name: str, reduce_function: Any, *, type: Any = None, aliases: Any = None
    ) -> None:
        super().__init__(name, type=type, aliases=aliases)
        self.reduce_function = reduce_function
        self.reduce: Callable[[Any, Any], Any] = _reduce_callable(
            reduce_function, f"ReducingStateDescriptor({name!r})"
        )


class AggregatingStateDescriptor(StateDescriptor[T]):
    """An accumulator per key, driven by an :class:`~lockgate.AggregateFunction`
    (``create_accumulator``, ``add(value, acc)``, ``get_result(acc)``). ``type=``: the
    accumulator's type."""

    kind = "aggregating"

    def __init__(
        self, name: str, agg_function: Any, *, type: Any = None, aliases: Any = None
    ) -> None:
        super().__init__(name, type=type, aliases=aliases)
        missing = [
            m
            for m in ("create_accumulator", "add", "get_result")
            if not callable(getattr(agg_function, m, None))
        ]
        if missing:
            raise ConfigurationError(
                f"AggregatingStateDescriptor({name!r}) needs an lg.AggregateFunction; "
                f"{agg_function!r} has no {', '.join(missing)} method(s)"
            )
        self.agg_function = agg_function

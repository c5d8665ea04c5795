"""Broadcast state: a ``key -> value`` map that every subtask of a broadcast operator
holds in full (Flink's broadcast state pattern).

A stream made with ``stream.broadcast(descriptor, ...)`` sends every element to
every subtask of the operator it is connected to; the function's
``process_broadcast_element`` puts what it learns into the broadcast state
(:class:`BroadcastState`, writable), and ``process_element`` of the other input
reads it through a :class:`ReadOnlyBroadcastState` view. Because every subtask
sees the same broadcast elements, every subtask holds the same broadcast state,
as long as the function changes it only from the broadcast elements.

Guarantees:

* Both classes are Python mappings of the live entries: ``k in s``, ``s[k]``
  (KeyError when absent), iteration over keys and ``len(s)``; ``keys()``,
  ``values()`` and ``items()`` return lists (copies), so the state may be changed
  while iterating over them. Keys must be hashable.
* Every write through a :class:`ReadOnlyBroadcastState` raises
  :class:`~lockgate.errors.ConfigurationError`: broadcast state is only writable in
  ``process_broadcast_element``.
* :meth:`BroadcastStateStore.snapshot` deep-copies the entries (the synchronous part
  of a checkpoint, M-T3), so later writes, and in-place changes of values, never
  change a snapshot. The snapshot form is ``{name: {key: value}}`` (the ``broadcast``
  part of an operator payload, :mod:`lockgate.state.snapshot`).
* Values are not copied on the way in or out: a value mutated in place after ``get``
  changes the live state (as in Flink; call ``put`` to change state explicitly).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

from ..errors import ConfigurationError
from .descriptors import MapStateDescriptor

K = TypeVar("K")
V = TypeVar("V")

_MISSING: Any = object()


def _hashable(key: Any, what: str) -> Any:
    try:
        hash(key)
    except TypeError as e:
        raise ConfigurationError(
            f"{what}: broadcast state keys must be hashable (e.g. str, int, tuple), got "
            f"{type(key).__name__} {key!r}"
        ) from e
    return key


class _BroadcastView(Generic[K, V]):
    """The reads shared by the writable state and its read-only view."""

    __slots__ = ("_entries", "name")

    def __init__(self, name: str, entries: dict[Any, Any]) -> None:
        self.name = name
        self._entries = entries

    def _what(self, method: str) -> str:
        return f"broadcast state {self.name!r}.{method}"

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value of ``key``, or ``default`` when absent."""
        return self._entries.get(_hashable(key, self._what("get")), default)

    def contains(self, key: K) -> bool:
        """Whether ``key`` has a value (None is a value)."""
        return _hashable(key, self._what("contains")) in self._entries

    def keys(self) -> list[K]:
        return list(self._entries)

    def values(self) -> list[V]:
        return list(self._entries.values())

    def items(self) -> list[tuple[K, V]]:
        return list(self._entries.items())

    def is_empty(self) -> bool:
        return not self._entries

    def __contains__(self, key: object) -> bool:
        return self.contains(key)  # type: ignore[arg-type]

    def __getitem__(self, key: K) -> V:
        v = self._entries.get(_hashable(key, f"broadcast state {self.name!r}[...]"), _MISSING)
        if v is _MISSING:
            raise KeyError(key)
        return v

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {len(self._entries)} entries)"


class BroadcastState(_BroadcastView[K, V]):
    """The writable broadcast state ``process_broadcast_element`` gets from
    ``ctx.get_broadcast_state(descriptor)``: a ``key -> value`` map, the same in every
    subtask of the operator."""

    __slots__ = ()

    def put(self, key: K, value: V) -> None:
        """Set ``key`` to ``value`` (None is a value)."""
        self._entries[_hashable(key, self._what("put"))] = value

    def put_all(self, entries: Mapping[K, V]) -> None:
        """Set every ``key -> value`` of ``entries`` (a mapping)."""
        if not isinstance(entries, Mapping):
            raise ConfigurationError(
                f"{self._what('put_all')} needs a mapping (e.g. a dict) of key -> value, got "
                f"{entries!r}"
            )
        what = self._what("put_all")
        new = {_hashable(k, what): v for k, v in entries.items()}
        self._entries.update(new)

    def remove(self, key: K) -> None:
        """Remove ``key`` (nothing happens when absent)."""
        self._entries.pop(_hashable(key, self._what("remove")), None)

    def clear(self) -> None:
        """Remove every entry."""
        self._entries.clear()

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        if _hashable(key, f"del broadcast state {self.name!r}[...]") not in self._entries:
            raise KeyError(key)
        del self._entries[key]


class ReadOnlyBroadcastState(_BroadcastView[K, V]):
    """The broadcast state as ``process_element`` sees it: every read of
    :class:`BroadcastState`; every write raises :class:`ConfigurationError`. It is a
    live view: it shows what ``process_broadcast_element`` wrote so far."""

    __slots__ = ()

    def _refuse(self, method: str) -> ConfigurationError:
        return ConfigurationError(
            f"{self._what(method)}: broadcast state is read-only in process_element; it is "
            "only writable in process_broadcast_element (so that every subtask keeps the same "
            "broadcast state); change it there, from the broadcast elements"
        )

    def put(self, key: K, value: V) -> None:
        raise self._refuse("put")

    def put_all(self, entries: Mapping[K, V]) -> None:
        raise self._refuse("put_all")

    def remove(self, key: K) -> None:
        raise self._refuse("remove")

    def clear(self) -> None:
        raise self._refuse("clear")

    def __setitem__(self, key: K, value: V) -> None:
        raise self._refuse("__setitem__")

    def __delitem__(self, key: K) -> None:
        raise self._refuse("__delitem__")


def check_broadcast_descriptors(
    descriptors: tuple[Any, ...], where: str
) -> list[MapStateDescriptor[Any]]:
    """``descriptors`` as a list, or a ConfigurationError (prefixed with ``where``) when
    one is not an ``lg.MapStateDescriptor``, has a TTL, or two share a name."""
    seen: set[str] = set()
    out: list[MapStateDescriptor[Any]] = []
    for d in descriptors:
        if not isinstance(d, MapStateDescriptor):
            raise ConfigurationError(
                f"{where}: broadcast state is a map; pass lg.MapStateDescriptor('name') for "
                f"each broadcast state, got {d!r}"
            )
        if d.ttl_config is not None:
            raise ConfigurationError(
                f"{where}: {d!r} has a time to live, but TTL applies to keyed state only; "
                "use a descriptor without enable_time_to_live for broadcast state"
            )
        if d.name in seen:
            raise ConfigurationError(
                f"{where}: two broadcast state descriptors are named {d.name!r}; give each "
                "broadcast state its own name"
            )
        seen.add(d.name)
        out.append(d)
    return out


class BroadcastStateStore:
    """The broadcast states of one operator subtask, one per declared descriptor (plus
    restored states no descriptor names any more: kept and snapshotted as they are, so
    a run that does not declare them does not lose them)."""

    def __init__(self, operator_name: str, descriptors: list[MapStateDescriptor[Any]]) -> None:
        self.operator_name = operator_name
        self._declared = [d.name for d in descriptors]
        self._entries: dict[str, dict[Any, Any]] = {name: {} for name in self._declared}
        self._writable: dict[str, BroadcastState[Any, Any]] = {}
        self._read_only: dict[str, ReadOnlyBroadcastState[Any, Any]] = {}

    def _name(self, descriptor: Any) -> str:
        where = f"operator '{self.operator_name}'"
        if not isinstance(descriptor, MapStateDescriptor):
            raise ConfigurationError(
                f"{where}: get_broadcast_state needs the lg.MapStateDescriptor given to "
                f"stream.broadcast(...), got {descriptor!r}"
            )
        if descriptor.name not in self._declared:
            declared = ", ".join(repr(n) for n in self._declared)
            raise ConfigurationError(
                f"{where}: no broadcast state named {descriptor.name!r}; the broadcast stream "
                f"declares {declared}; pass every descriptor to stream.broadcast(...) and ask "
                "for one of them"
            )
        return descriptor.name

    def writable(self, descriptor: MapStateDescriptor[Any]) -> BroadcastState[Any, Any]:
        """The writable state of ``descriptor`` (declared with ``stream.broadcast``)."""
        name = self._name(descriptor)
        state = self._writable.get(name)
        if state is None:
            state = self._writable[name] = BroadcastState(name, self._entries[name])
        return state

    def read_only(self, descriptor: MapStateDescriptor[Any]) -> ReadOnlyBroadcastState[Any, Any]:
        """A read-only view of the state of ``descriptor``."""
        name = self._name(descriptor)
        view = self._read_only.get(name)
        if view is None:
            view = self._read_only[name] = ReadOnlyBroadcastState(name, self._entries[name])
        return view

    # -- snapshots (M-T3, M-T4) --------------------------------------------------------
    def snapshot(self) -> dict[str, dict[Any, Any]] | None:
        """Deep copies ``{name: {key: value}}`` of every state, or None when all are empty."""
        if not any(self._entries.values()):
            return None
        return {name: copy.deepcopy(entries) for name, entries in self._entries.items()}

    def restore(self, part: Any) -> None:
        """Take over a restored ``broadcast`` part (``{name: {key: value}}`` or None);
        its entries replace the current ones. Raises ConfigurationError for anything
        that is not in that form."""
        if part is None:
            return
        where = f"operator '{self.operator_name}'"
        if not isinstance(part, Mapping):
            raise ConfigurationError(
                f"{where}: the restored broadcast state is a {type(part).__name__}, not a "
                "map of state name -> entries; restore a checkpoint or savepoint of this job"
            )
        for name, entries in part.items():
            if not isinstance(entries, Mapping):
                raise ConfigurationError(
                    f"{where}: restored broadcast state {name!r} is a "
                    f"{type(entries).__name__}, not a map; restore a checkpoint or savepoint "
                    "of this job"
                )
            live = self._entries.setdefault(name, {})
            live.clear()
            live.update(entries)

    def entries(self) -> dict[str, dict[Any, Any]]:
        """The live entries by state name (read-only; for tests and inspection)."""
        return self._entries

"""The keyed state handles user functions get from ``ctx.get_state(descriptor)``:
:class:`ValueState`, :class:`ListState`, :class:`MapState`, :class:`ReducingState`
and :class:`AggregatingState`, each scoped to the backend's ``current_key``.

Backend contract
----------------
The handles are shared by every keyed state backend. They use only:

* a *table* (:class:`StateTable`) holding ``key -> stored`` for one state name:
  ``table.get(key, default)``, ``table[key] = stored`` and
  ``table.pop(key, default)``. A mutated value is **always written back** with
  ``table[key] = ...``; nothing relies on an in-place change of what ``get``
  returned being kept (a backend may return a deserialized copy). A backend
  may re-point a handle to another table by assigning ``handle._table``.
* the backend (:class:`KeyedStateHost`): ``current_key``, and for TTL state the
  time attributes of :class:`~lockgate.state.ttl.TtlTimeSource`.
* optionally, for :meth:`ValueState.values_of` and :meth:`ValueState.update_all`, the
  table's ``get_many(keys, default)`` and ``put_many(keys, stored)`` (many keys in one
  call, with the semantics of the single-key calls in order); a plain ``dict`` table
  is read and written with its own C-level methods, any other table one key at a time.

Stored forms (what the table holds and canonical snapshots contain): value,
reducing and aggregating state store the value / accumulator; list state a
non-empty ``list`` of elements; map state a non-empty ``dict`` ``user key ->
value``. An empty list or map, and a cleared state, are **absent** (no entry),
as in Flink. With TTL, every value, list element or map entry value is a
:class:`~lockgate.state.ttl.TtlValue` (see :mod:`lockgate.state.ttl`).

Values are not copied on the way in or out (except the containers of list and
map state, see each method): mutating a value in place after reading it changes
the live state only on the heap backend; call ``update``/``put`` to change state
portably.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from ..errors import ConfigurationError
from .descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from .ttl import StateTtlConfig, TtlTimeSource, TtlValue, current_time, is_expired, stamp_time

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
OUT = TypeVar("OUT")

_MISSING: Any = object()


class StateTable(Protocol):
    """The part of a ``key -> stored`` mapping the handles use (they always pass a default)."""

    def get(self, key: Any, default: Any, /) -> Any: ...

    def __setitem__(self, key: Any, value: Any, /) -> None: ...

    def pop(self, key: Any, default: Any, /) -> Any: ...


class KeyedStateHost(TtlTimeSource, Protocol):
    """The backend as the handles see it: the current key and TTL's time sources."""

    current_key: Any


class KeyedStateHandle:
    """Base of the keyed state handles: the table, the backend and the descriptor."""

    __slots__ = ("__weakref__", "_backend", "_descriptor", "_table", "_ttl")

    def __init__(
        self, backend: KeyedStateHost, table: StateTable, descriptor: StateDescriptor[Any]
    ) -> None:
        self._backend = backend
        self._table = table  # a backend may re-point it (the heap backend's snapshots do)
        self._descriptor = descriptor
        self._ttl: StateTtlConfig | None = descriptor.ttl_config

    @property
    def name(self) -> str:
        return self._descriptor.name

    def clear(self) -> None:
        """Remove the current key's state."""
        self._table.pop(self._backend.current_key, None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._descriptor.name!r})"

    # -- one TTL-wrapped value per key (value, reducing, aggregating) ---------------------------
    def _load_ttl(self, reading: bool) -> Any:
        """The current key's unwrapped value, or ``_MISSING``; applies expiry. ``reading``:
        a user read (deletes an expired value, may return it per visibility, restamps per
        update type); else a read before an overwrite (an expired value is just absent)."""
        ttl = self._ttl
        assert ttl is not None
        backend = self._backend
        key = backend.current_key
        stored = self._table.get(key, _MISSING)
        if stored is _MISSING:
            return _MISSING
        if is_expired(ttl, stored, current_time(ttl, backend)):
            if not reading:
                return _MISSING
            self._table.pop(key, None)
            return stored.value if ttl.returns_expired else _MISSING
        if reading and ttl.updates_on_read:
            self._table[key] = TtlValue(stored.value, stamp_time(ttl, backend))
        return stored.value

    def _load(self, reading: bool) -> Any:
        if self._ttl is None:
            return self._table.get(self._backend.current_key, _MISSING)
        return self._load_ttl(reading)

    def _store(self, value: Any) -> None:
        ttl = self._ttl
        backend = self._backend
        self._table[backend.current_key] = (
            value if ttl is None else TtlValue(value, stamp_time(ttl, backend))
        )

    def _wrap(self, value: Any, ts: int | None) -> Any:
        return value if ts is None else TtlValue(value, ts)

    def _stamp(self) -> int | None:
        """The timestamp for values written now, or None without TTL."""
        ttl = self._ttl
        return None if ttl is None else stamp_time(ttl, self._backend)


class ValueState(KeyedStateHandle, Generic[T]):
    """A single value per key, scoped to the current key."""

    __slots__ = ()
    _descriptor: ValueStateDescriptor[T]

    def value(self) -> T:
        """The current key's value, or the descriptor's default (a fresh copy when mutable)."""
        if self._ttl is None:
            v = self._table.get(self._backend.current_key, _MISSING)
        else:
            v = self._load_ttl(True)
        if v is _MISSING:
            return self._descriptor.default_value()
        return v

    def update(self, value: T | None) -> None:
        """Set the current key's value; ``None`` clears it."""
        if value is None:
            self._table.pop(self._backend.current_key, None)
        elif self._ttl is None:
            self._table[self._backend.current_key] = value
        else:
            self._store(value)

    # -- many keys at once (vectorized operators) ------------------------------------------
    def values_of(self, keys: Sequence[Any]) -> list[T]:
        """The value of each of ``keys``, as :meth:`value` gives it with that key current
        (the descriptor's default where a key has none), in one call: a dict lookup per
        key on the heap backend, cache lookups (one multi-get for the keys not cached, in
        a batch scope) on RocksDB. ``keys`` must be keys as keyed state holds them (what
        the operator's key selector gives): a list, or a numpy integer array standing for
        the Python ints it holds. ``current_key`` is left as it was."""
        table = self._table
        keys = _listed(keys, table)
        if self._ttl is not None:
            return self._each(keys, lambda _: self.value())
        if type(table) is dict:
            values = list(map(table.get, keys, repeat(_MISSING)))
        else:
            get_many = getattr(table, "get_many", None)
            if get_many is not None:
                values = get_many(keys, _MISSING)
            else:
                values = [table.get(k, _MISSING) for k in keys]
        if object in set(map(type, values)):  # identity, never ==: values may be arrays
            default = self._descriptor.default_value
            values = [default() if v is _MISSING else v for v in values]
        return values  # type: ignore[return-value]

    def update_all(self, keys: Sequence[Any], values: Sequence[T | None]) -> None:
        """Set the value of each of ``keys`` to the value at the same position, as
        :meth:`update` with that key current, in order (a key given twice ends with its
        last value; ``None`` clears), in one call. ``keys`` as for :meth:`values_of`.
        ``current_key`` is left as it was."""
        table = self._table
        keys = _listed(keys, table)
        if isinstance(values, np.ndarray):
            values = values.tolist()
        if len(keys) != len(values):
            raise ConfigurationError(
                f"{self!r}.update_all needs one value per key, got {len(keys)} keys and "
                f"{len(values)} values"
            )
        if self._ttl is not None or type(None) in set(map(type, values)):
            it = iter(values)
            self._each(keys, lambda _: self.update(next(it)))
            return
        if type(table) is dict:
            table.update(zip(keys, values))
            return
        put_many = getattr(table, "put_many", None)
        if put_many is not None:
            put_many(keys, values)
            return
        for k, v in zip(keys, values):
            table[k] = v

    def _each(self, keys: Sequence[Any], call: Any) -> list[Any]:
        """``call`` with each of ``keys`` current, in order; ``current_key`` restored."""
        backend = self._backend
        before = backend.current_key
        out = []
        try:
            for k in keys:
                backend.current_key = k
                out.append(call(k))
        finally:
            backend.current_key = before
        return out


def _listed(keys: Any, table: Any) -> Any:
    """``keys`` as the table takes them: a numpy integer array stays one for a table with
    many-keys calls (they index it at once), else becomes the list of its ints."""
    if isinstance(keys, np.ndarray):
        if keys.dtype.kind in "iu" and getattr(table, "get_many", None) is not None:
            return keys
        return keys.tolist()
    return keys


def _elements(values: Any, what: str) -> list[Any]:
    if (
        values is None
        or isinstance(values, (str, bytes, bytearray, Mapping))
        or not isinstance(values, Iterable)
    ):
        raise ConfigurationError(
            f"{what} needs an iterable of elements such as a list, got {values!r}"
            + (
                " (wrap a single element in a list: [value])"
                if isinstance(values, (str, bytes, bytearray))
                else ""
            )
        )
    return list(values)


class ListState(KeyedStateHandle, Generic[T]):
    """A list of elements per key. An empty list is stored as no entry.

    With TTL each element has its own lifetime (Flink's semantics)."""

    __slots__ = ()

    def get(self) -> list[T]:
        """The current key's elements in insertion order, as a new list (``[]`` when
        none); changing it does not change the state."""
        key = self._backend.current_key
        stored = self._table.get(key, None)
        if not stored:
            return []
        ttl = self._ttl
        if ttl is None:
            return list(stored)
        backend = self._backend
        now = current_time(ttl, backend)
        live = [e for e in stored if not is_expired(ttl, e, now)]
        shown = stored if ttl.returns_expired else live
        result = [e.value for e in shown]
        if ttl.updates_on_read and live:
            ts = stamp_time(ttl, backend)
            live = [TtlValue(e.value, ts) for e in live]
        elif len(live) == len(stored):
            return result  # nothing expired, nothing restamped: no write
        if live:
            self._table[key] = live
        else:
            self._table.pop(key, None)
        return result

    def add(self, value: T) -> None:
        """Append ``value`` to the current key's list."""
        key = self._backend.current_key
        stored = self._table.get(key, None)
        element = self._wrap(value, self._stamp())
        if stored:
            stored.append(element)
        else:
            stored = [element]
        self._table[key] = stored

    def add_all(self, values: Iterable[T]) -> None:
        """Append every element of ``values`` (a list or other iterable; not a str)."""
        items = _elements(values, f"ListState {self.name!r}.add_all")
        if not items:
            return
        ts = self._stamp()
        key = self._backend.current_key
        stored = self._table.get(key, None)
        new = items if ts is None else [TtlValue(v, ts) for v in items]
        if stored:
            stored.extend(new)
        else:
            stored = new
        self._table[key] = stored

    def update(self, values: Iterable[T]) -> None:
        """Replace the current key's elements with ``values``; an empty one clears."""
        items = _elements(values, f"ListState {self.name!r}.update")
        key = self._backend.current_key
        if not items:
            self._table.pop(key, None)
            return
        ts = self._stamp()
        self._table[key] = items if ts is None else [TtlValue(v, ts) for v in items]

    def __iter__(self) -> Iterator[T]:
        """Iterates over a copy of the current key's elements (see :meth:`get`)."""
        return iter(self.get())


def _hashable(user_key: Any, what: str) -> Any:
    try:
        hash(user_key)
    except TypeError as e:
        raise ConfigurationError(
            f"{what}: map state keys must be hashable (e.g. str, int, tuple), got "
            f"{type(user_key).__name__} {user_key!r}"
        ) from e
    return user_key


class MapState(KeyedStateHandle, Generic[K, V]):
    """A ``user key -> value`` map per key. An empty map is stored as no entry.

    Also a Python mapping of the current key's entries: ``k in s``, ``s[k]``
    (KeyError when absent), ``s[k] = v``, ``del s[k]``, iteration over user keys and
    ``len(s)``. ``keys()``, ``values()`` and ``items()`` return lists (copies), so the
    state may be changed while iterating over them. With TTL each entry has its own
    lifetime (Flink's semantics)."""

    __slots__ = ()

    # -- internals -------------------------------------------------------------------------------
    def _entry(self, user_key: Any) -> Any:
        """The value of ``user_key`` for the current key, or ``_MISSING`` (TTL applied)."""
        key = self._backend.current_key
        stored = self._table.get(key, None)
        if not stored:
            return _MISSING
        entry = stored.get(user_key, _MISSING)
        ttl = self._ttl
        if ttl is None or entry is _MISSING:
            return entry
        backend = self._backend
        if is_expired(ttl, entry, current_time(ttl, backend)):
            del stored[user_key]
            self._write(key, stored)
            return entry.value if ttl.returns_expired else _MISSING
        if ttl.updates_on_read:
            stored[user_key] = TtlValue(entry.value, stamp_time(ttl, backend))
            self._table[key] = stored
        return entry.value

    def _visible(self, restamp: bool) -> dict[Any, Any]:
        """The current key's entries as a new ``user key -> value`` dict (TTL applied:
        expired entries are deleted, and returned per visibility; ``restamp``: a read of
        the values, restamped per update type)."""
        key = self._backend.current_key
        stored = self._table.get(key, None)
        if not stored:
            return {}
        ttl = self._ttl
        if ttl is None:
            return dict(stored)
        backend = self._backend
        now = current_time(ttl, backend)
        live = {k: e for k, e in stored.items() if not is_expired(ttl, e, now)}
        result = {k: e.value for k, e in (stored if ttl.returns_expired else live).items()}
        if restamp and ttl.updates_on_read and live:
            ts = stamp_time(ttl, backend)
            live = {k: TtlValue(e.value, ts) for k, e in live.items()}
        elif len(live) == len(stored):
            return result
        self._write(key, live)
        return result

    def _write(self, key: Any, stored: dict[Any, Any]) -> None:
        if stored:
            self._table[key] = stored
        else:
            self._table.pop(key, None)

    # -- Flink-style methods ------------------------------------------------------------------
    def get(self, user_key: K, default: V | None = None) -> V | None:
        """The value of ``user_key``, or ``default`` when absent."""
        v = self._entry(_hashable(user_key, f"MapState {self.name!r}.get"))
        return default if v is _MISSING else v

    def put(self, user_key: K, value: V) -> None:
        """Set ``user_key`` to ``value`` (None is a value)."""
        _hashable(user_key, f"MapState {self.name!r}.put")
        key = self._backend.current_key
        stored = self._table.get(key, None)
        if stored is None:
            stored = {}
        stored[user_key] = self._wrap(value, self._stamp())
        self._table[key] = stored

    def put_all(self, entries: Mapping[K, V]) -> None:
        """Set every ``user key -> value`` of ``entries`` (a mapping)."""
        if not isinstance(entries, Mapping):
            raise ConfigurationError(
                f"MapState {self.name!r}.put_all needs a mapping (e.g. a dict) of user key -> "
                f"value, got {entries!r}"
            )
        what = f"MapState {self.name!r}.put_all"
        ts = self._stamp()
        new = {_hashable(uk, what): self._wrap(v, ts) for uk, v in entries.items()}
        if not new:
            return
        key = self._backend.current_key
        stored = self._table.get(key, None)
        if stored is None:
            stored = new
        else:
            stored.update(new)
        self._table[key] = stored

    def remove(self, user_key: K) -> None:
        """Remove ``user_key`` (nothing happens when absent)."""
        _hashable(user_key, f"MapState {self.name!r}.remove")
        key = self._backend.current_key
        stored = self._table.get(key, None)
        if stored and user_key in stored:
            del stored[user_key]
            self._write(key, stored)

    def contains(self, user_key: K) -> bool:
        """Whether ``get(user_key)`` would find a value (a read, for TTL)."""
        return self._entry(_hashable(user_key, f"MapState {self.name!r}.contains")) is not _MISSING

    def keys(self) -> list[K]:
        return list(self._visible(False))

    def values(self) -> list[V]:
        return list(self._visible(True).values())

    def items(self) -> list[tuple[K, V]]:
        return list(self._visible(True).items())

    def is_empty(self) -> bool:
        return not self._visible(False)

    # -- the Python mapping protocol -------------------------------------------------------------
    def __contains__(self, user_key: object) -> bool:
        return self.contains(user_key)  # type: ignore[arg-type]

    def __getitem__(self, user_key: K) -> V:
        v = self._entry(_hashable(user_key, f"MapState {self.name!r}[...]"))
        if v is _MISSING:
            raise KeyError(user_key)
        return v

    def __setitem__(self, user_key: K, value: V) -> None:
        self.put(user_key, value)

    def __delitem__(self, user_key: K) -> None:
        if self._entry(_hashable(user_key, f"del MapState {self.name!r}[...]")) is _MISSING:
            raise KeyError(user_key)
        self.remove(user_key)

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._visible(False))


class ReducingState(KeyedStateHandle, Generic[T]):
    """One value per key, combined with the descriptor's ``reduce(old, new)`` on each ``add``."""

    __slots__ = ()
    _descriptor: ReducingStateDescriptor[T]

    def get(self) -> T | None:
        """The reduced value, or None when nothing was added."""
        v = self._load(True)
        return None if v is _MISSING else v

    def add(self, value: T) -> None:
        """Combine ``value`` into the current key's value (the first value is kept as is)."""
        if value is None:
            raise ConfigurationError(
                f"ReducingState {self.name!r}.add got None; add values only (None is what "
                "get() returns for an empty state), or use clear()"
            )
        old = self._load(False)
        self._store(value if old is _MISSING else self._descriptor.reduce(old, value))


class AggregatingState(KeyedStateHandle, Generic[IN, OUT]):
    """An accumulator per key, driven by the descriptor's AggregateFunction:
    ``add(v)`` folds ``v`` into it, ``get()`` returns ``get_result(accumulator)``."""

    __slots__ = ()
    _descriptor: AggregatingStateDescriptor[Any]

    def get(self) -> OUT | None:
        """``get_result`` of the current key's accumulator, or None when nothing was added."""
        acc = self._load(True)
        if acc is _MISSING:
            return None
        return self._descriptor.agg_function.get_result(acc)

    def add(self, value: IN) -> None:
        """Fold ``value`` into the accumulator (created with ``create_accumulator()`` first)."""
        fn = self._descriptor.agg_function
        acc = self._load(False)
        if acc is _MISSING:
            acc = fn.create_accumulator()
        self._store(fn.add(value, acc))


#: kind -> (descriptor class, handle class)
HANDLE_TYPES: dict[str, tuple[type[StateDescriptor[Any]], type[KeyedStateHandle]]] = {
    "value": (ValueStateDescriptor, ValueState),
    "list": (ListStateDescriptor, ListState),
    "map": (MapStateDescriptor, MapState),
    "reducing": (ReducingStateDescriptor, ReducingState),
    "aggregating": (AggregatingStateDescriptor, AggregatingState),
}

#: the keyed state kinds, as descriptors and snapshots name them
STATE_KINDS = tuple(HANDLE_TYPES)


def create_handle(
    backend: KeyedStateHost, table: StateTable, descriptor: StateDescriptor[Any], where: str
) -> KeyedStateHandle:
    """The handle for ``descriptor``'s kind over ``table``; a ConfigurationError
    (prefixed with ``where``) for an unknown kind or a descriptor of the wrong class."""
    entry = HANDLE_TYPES.get(descriptor.kind)
    if entry is None:
        raise ConfigurationError(
            f"{where}: state kind {descriptor.kind!r} of {descriptor!r} is not a keyed state "
            f"kind; use one of {', '.join(STATE_KINDS)} (e.g. lg.ValueStateDescriptor('name'))"
        )
    descriptor_type, handle_type = entry
    if not isinstance(descriptor, descriptor_type):
        raise ConfigurationError(
            f"{where}: {descriptor!r} says it is {descriptor.kind} state but is not a "
            f"{descriptor_type.__name__}; create it with lg.{descriptor_type.__name__}(...)"
        )
    return handle_type(backend, table, descriptor)

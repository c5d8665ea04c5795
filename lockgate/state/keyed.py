"""The in-memory (heap) keyed state backend, its ValueState and its snapshots.

State is held per state name as ``key -> value``; the backend's
``current_key`` (set by the keyed operator before each record and timer)
selects the entry a state handle reads and writes. Keys are owned by the
subtask's key-group range; snapshots group them by key group (M-T4).

Copy-on-write snapshots (M-T3)
------------------------------
A checkpoint snapshot has a synchronous part, :meth:`HeapKeyedStateBackend.snapshot`,
run by the task thread between two records, and an asynchronous part,
:meth:`KeyedStateSnapshot.materialize`, run on a background thread while the
task thread keeps processing. The design is a **stack of frozen layers**
(the idea of Flink's ``CopyOnWriteStateMap``, with layers instead of per-entry
version numbers so that the hot path stays a plain ``dict`` lookup):

* With no snapshot outstanding, each state's live table is a plain ``dict``
  and ``ValueState`` reads and writes it directly: no copy-on-write cost at all.
* ``snapshot()`` freezes every state's live table as a layer and gives the
  state a fresh, empty live *overlay* on top of the frozen layers; the state
  handles are re-pointed to it. This is O(number of state names x number of
  outstanding snapshots), never O(number of keys). The snapshot's view of a
  state is the tuple of its frozen layers (bottom first; a key's newest layer
  wins, a tombstone hides older layers).
* While an overlay is live, writes go to the overlay (a plain ``dict`` store,
  as fast as before); a delete of a key some frozen layer holds stores a
  tombstone. A read checks the overlay first, then the frozen layers from the
  top; a value found only in a frozen layer is copied (``copy.deepcopy``,
  skipped for immutable values: int, float, complex, str, bytes, bool, None
  and tuples/frozensets of them) into the overlay before it is returned, so
  mutating a value in place after ``value()`` never changes a snapshot.
  Frozen layers are never written while a snapshot needs them, so
  ``materialize`` can read them from another thread without locks.
* Several snapshots may be outstanding (concurrent checkpoints): each one
  freezes the current overlay as one more layer, so snapshot *i* sees the
  bottom *i* layers. When the snapshots that need the top layers are released,
  those layers are folded into the live overlay; when no snapshot is
  outstanding, every layer and the overlay are merged into the bottom layer,
  which becomes the plain live ``dict`` again (O(entries written during the
  snapshots)). If snapshots keep overlapping without a gap, the stack grows by
  one layer per snapshot until the first moment none is outstanding; only
  first reads of a key after a snapshot walk the stack.
* Folding layers rewrites tables the task thread uses, so it only ever runs on
  the task thread: ``release()`` called on the task thread folds at once;
  called from another thread (the asynchronous part), it marks the fold as
  pending and the task thread does it on its next state read, delete or
  ``snapshot()``. A snapshot whose ``materialize`` is running counts as
  outstanding until ``materialize`` returns, so a release (a cancellation)
  never lets a fold race with a running ``materialize``; a running
  ``materialize`` sees the release and stops early with
  :class:`SnapshotReleasedError`.

Caveats: values obtained *before* a snapshot (e.g. a list kept in a field of
the function without calling ``value()`` again) are shared with the snapshot;
mutating them in place changes it, as in Flink. The dict ``materialize``
returns shares value objects with the frozen layers: serialize it before
``release()``. ``restore`` takes over the value objects of the snapshots it
is given (pass freshly deserialized snapshots).
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from ..errors import ConfigurationError, LockgateError
from ..graph.key_groups import DEFAULT_MAX_PARALLELISM, check_max_parallelism, key_groups_of_keys
from .descriptors import StateDescriptor, ValueStateDescriptor

T = TypeVar("T")
_MISSING: Any = object()


class _Tombstone:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<deleted>"


_TOMBSTONE: Any = _Tombstone()

#: The format number of the dicts :meth:`KeyedStateSnapshot.materialize` returns.
SNAPSHOT_FORMAT = 1

_ATOMIC = frozenset({int, float, complex, str, bytes, bool, type(None)})


class UnsupportedSnapshotFormatError(ConfigurationError):
    """A keyed state snapshot given to ``restore`` is not in a format this version reads."""


class SnapshotReleasedError(LockgateError, RuntimeError):
    """``materialize`` was called on (or cancelled by) a released snapshot."""


def _is_immutable(value: Any) -> bool:
    t = type(value)
    if t in _ATOMIC:
        return True
    if t is tuple or t is frozenset:
        return all(_is_immutable(v) for v in value)
    return False


def _private_copy(value: Any) -> Any:
    return value if _is_immutable(value) else copy.deepcopy(value)


def _tombstones(layer: dict[Any, Any]) -> int:
    return layer.tombstones if isinstance(layer, _Overlay) else 0


def _apply(target: dict[Any, Any], layer: dict[Any, Any]) -> None:
    """Lay ``layer`` over ``target`` (a plain dict): its values win, its tombstones delete."""
    dict.update(target, layer)
    if _tombstones(layer):
        for k, v in layer.items():
            if v is _TOMBSTONE:
                del target[k]


def _flatten(layers: Sequence[dict[Any, Any]]) -> dict[Any, Any]:
    """A new plain dict with what ``layers`` (bottom first) show."""
    out: dict[Any, Any] = {}
    for layer in layers:
        _apply(out, layer)
    return out


def _lookup(layers: Sequence[dict[Any, Any]], key: Any) -> Any:
    """The value ``layers`` show for ``key``; ``_MISSING`` if none (or a tombstone)."""
    for layer in reversed(layers):
        v = dict.get(layer, key, _MISSING)
        if v is not _MISSING:
            return _MISSING if v is _TOMBSTONE else v
    return _MISSING


class _Overlay(dict[Any, Any]):
    """The live table of a state while snapshots are outstanding: the entries
    written since the newest snapshot (tombstones for deletes), on top of the
    frozen layers ``below`` (bottom first). Only ``get`` and ``pop`` differ from
    a dict; ``__setitem__`` is the plain dict store. Once frozen as a layer it is
    only read with ``dict`` methods."""

    __slots__ = ("backend", "below", "name", "tombstones")

    def __init__(self, backend: HeapKeyedStateBackend, name: str,
                 below: tuple[dict[Any, Any], ...]) -> None:
        super().__init__()
        self.backend = backend
        self.name = name
        self.below = below
        self.tombstones = 0

    def get(self, key: Any, default: Any = None) -> Any:
        backend = self.backend
        if backend._fold_pending:
            backend._fold()
            live = backend._tables[self.name]
            if live is not self:
                return live.get(key, default)
        v = dict.get(self, key, _MISSING)
        if v is _MISSING:
            v = _lookup(self.below, key)
            if v is _MISSING:
                return default
            v = _private_copy(v)
            dict.__setitem__(self, key, v)
            return v
        if v is _TOMBSTONE:
            return default
        return v

    def pop(self, key: Any, default: Any = None) -> Any:
        backend = self.backend
        if backend._fold_pending:
            backend._fold()
            live = backend._tables[self.name]
            if live is not self:
                return live.pop(key, default)
        v = dict.pop(self, key, _MISSING)
        below = _lookup(self.below, key)
        if below is not _MISSING:
            dict.__setitem__(self, key, _TOMBSTONE)
            self.tombstones += 1
        if v is _MISSING:
            # Deleted from the live view, so the caller may own it: a private copy.
            return default if below is _MISSING else _private_copy(below)
        return default if v is _TOMBSTONE else v


class ValueState(Generic[T]):
    """A single value per key, scoped to the current key."""

    __slots__ = ("__weakref__", "_backend", "_descriptor", "_table")

    def __init__(self, backend: HeapKeyedStateBackend, table: dict[Any, Any],
                 descriptor: ValueStateDescriptor[T]) -> None:
        self._backend = backend
        self._table = table  # re-pointed by the backend when snapshots start and end
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


class KeyedStateSnapshot:
    """The consistent view :meth:`HeapKeyedStateBackend.snapshot` took (M-T3).

    ``materialize()`` (the asynchronous part, any thread) turns it into a
    picklable dict grouped by key group; ``release()`` (any thread, idempotent)
    gives its layers back to the backend and cancels a running ``materialize``.
    """

    def __init__(self, backend: HeapKeyedStateBackend, depth: int,
                 views: dict[str, tuple[dict[Any, Any], ...]], kinds: dict[str, str]) -> None:
        self._backend = backend
        self._depth = depth  # the snapshot sees the bottom ``depth`` frozen layers
        self._views = views
        self._kinds = kinds
        self.max_parallelism = backend.max_parallelism
        self._lock = threading.Lock()
        self._readers = 0
        self._released = False
        self._returned = False  # the backend was told (exactly once)
        self._size: int | None = None

    @property
    def released(self) -> bool:
        return self._released

    def state_names(self) -> list[str]:
        return list(self._views)

    def size_hint(self) -> int:
        """The number of entries (keys over all states) the snapshot holds. Computed
        from the frozen layers on first use (any thread; cached, also by
        ``materialize``); raises :class:`SnapshotReleasedError` if first asked after
        ``release()``."""
        if self._size is None:
            views = self._enter()
            try:
                self._size = sum(_count(layers) for layers in views.values())
            finally:
                self._leave()
        return self._size

    def materialize(self) -> dict[str, Any]:
        """The asynchronous part: ``{"format": 1, "max_parallelism": M, "states":
        {name: {"kind": "value", "key_groups": {key_group: {key: value}}}}}``.

        Reads only the frozen layers, so the task thread keeps processing; key
        groups are computed vectorized. The dict shares value objects with the
        frozen layers: serialize it before ``release()``. Raises
        :class:`SnapshotReleasedError` if the snapshot is (or gets) released.
        """
        views = self._enter()
        try:
            states: dict[str, Any] = {}
            for name, layers in views.items():
                self._check_released()
                view = layers[0] if len(layers) == 1 else _flatten(layers)
                states[name] = {"kind": self._kinds[name], "key_groups": self._group(view)}
            self._check_released()
            if self._size is None:
                self._size = sum(
                    len(kg) for s in states.values() for kg in s["key_groups"].values()
                )
            return {"format": SNAPSHOT_FORMAT, "max_parallelism": self.max_parallelism,
                    "states": states}
        finally:
            self._leave()

    def release(self) -> None:
        """Give the view back (idempotent). A running ``materialize`` stops early."""
        with self._lock:
            if self._released:
                return
            self._released = True
            done = self._readers == 0 and not self._returned
            if done:
                self._returned = True
        if done:
            self._return_to_backend()

    # -- internals ------------------------------------------------------------------------
    def _enter(self) -> dict[str, tuple[dict[Any, Any], ...]]:
        with self._lock:
            if self._released:
                raise SnapshotReleasedError(
                    f"operator '{self._backend.operator_name}': this keyed state snapshot "
                    "was released; it cannot be materialized any more"
                )
            self._readers += 1
            return self._views

    def _leave(self) -> None:
        with self._lock:
            self._readers -= 1
            done = self._released and self._readers == 0 and not self._returned
            if done:
                self._returned = True
        if done:
            self._return_to_backend()

    def _return_to_backend(self) -> None:
        self._views = {}
        self._backend._snapshot_released(self)

    def _check_released(self) -> None:
        if self._released:
            raise SnapshotReleasedError(
                f"operator '{self._backend.operator_name}': the keyed state snapshot was "
                "released (cancelled) while it was being materialized"
            )

    def _group(self, view: dict[Any, Any]) -> dict[int, dict[Any, Any]]:
        """``view``'s entries grouped by key group (key groups computed vectorized)."""
        n = len(view)
        if n == 0:
            return {}
        keys = list(view)
        values = list(view.values())
        kgs = key_groups_of_keys(keys, self.max_parallelism)
        if n == 1:
            return {int(kgs[0]): {keys[0]: values[0]}}
        order = np.argsort(kgs, kind="stable")
        sorted_kgs = kgs[order]
        cuts = (np.flatnonzero(sorted_kgs[1:] != sorted_kgs[:-1]) + 1).tolist()
        idx = order.tolist()
        ks = [keys[i] for i in idx]
        vs = [values[i] for i in idx]
        groups: dict[int, dict[Any, Any]] = {}
        for start, end in zip([0, *cuts], [*cuts, n]):
            self._check_released()
            groups[int(sorted_kgs[start])] = dict(zip(ks[start:end], vs[start:end]))
        return groups


def _count(layers: tuple[dict[Any, Any], ...]) -> int:
    """The number of keys ``layers`` show, without flattening them."""
    count = len(layers[0]) - _tombstones(layers[0])
    for i in range(1, len(layers)):
        lower = layers[:i]
        for k, v in layers[i].items():
            count += (v is not _TOMBSTONE) - (_lookup(lower, k) is not _MISSING)
    return count


class HeapKeyedStateBackend:
    """Keyed state in Python dicts (the HashMap state backend's keyed part).

    Everything but :class:`KeyedStateSnapshot`'s ``materialize``/``release``/
    ``size_hint`` belongs to the task thread.
    """

    def __init__(self, operator_name: str,
                 max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> None:
        self.operator_name = operator_name
        self.max_parallelism = check_max_parallelism(max_parallelism)
        self.current_key: Any = None
        # name -> live table: a plain dict, or an _Overlay while snapshots are outstanding
        self._tables: dict[str, dict[Any, Any]] = {}
        self._kinds: dict[str, str] = {}
        self._handles: dict[str, weakref.WeakSet[ValueState[Any]]] = {}
        # frozen layers, one {name: table} per snapshot taken since none was outstanding
        self._frozen: list[dict[str, dict[Any, Any]]] = []
        self._lock = threading.Lock()
        self._outstanding: set[KeyedStateSnapshot] = set()
        self._fold_pending = False
        self._task_thread = threading.get_ident()

    # -- state handles ----------------------------------------------------------------------
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
        if isinstance(descriptor, ValueStateDescriptor):
            self._kinds[descriptor.name] = descriptor.kind
            table = self._tables.setdefault(descriptor.name, {})
            state: ValueState[Any] = ValueState(self, table, descriptor)
            self._handles.setdefault(descriptor.name, weakref.WeakSet()).add(state)
            return state
        raise ConfigurationError(
            f"operator '{self.operator_name}': state kind {descriptor.kind!r} is not supported yet"
        )

    def keys(self, state_name: str) -> list[Any]:
        """The keys that have a value of ``state_name`` (live view)."""
        return list(self._live_view(state_name))

    def entries(self) -> dict[str, dict[Any, Any]]:
        """The live ``key -> value`` tables by state name. Read-only: while a snapshot
        is outstanding these are merged copies whose values a snapshot may share."""
        return {name: self._live_view(name) for name in self._tables}

    def _live_view(self, name: str) -> dict[Any, Any]:
        table = self._tables.get(name)
        if table is None:
            return {}
        if isinstance(table, _Overlay):
            return _flatten((*table.below, table))
        return table

    def _repoint(self, name: str, table: dict[Any, Any]) -> None:
        self._tables[name] = table
        for handle in self._handles.get(name, ()):
            handle._table = table

    # -- snapshots (M-T3, M-T4) -----------------------------------------------------------
    def snapshot(self) -> KeyedStateSnapshot:
        """The synchronous part: freeze the current tables as the snapshot's view
        (O(state names)); processing continues on copy-on-write overlays."""
        self._task_thread = threading.get_ident()
        if self._fold_pending:
            self._fold()
        frozen = dict(self._tables)
        views: dict[str, tuple[dict[Any, Any], ...]] = {}
        for name, table in frozen.items():
            layers = (*table.below, table) if isinstance(table, _Overlay) else (table,)
            views[name] = layers
            self._repoint(name, _Overlay(self, name, layers))
        self._frozen.append(frozen)
        snap = KeyedStateSnapshot(self, len(self._frozen), views,
                                  {name: self._kinds[name] for name in views})
        with self._lock:
            self._outstanding.add(snap)
        return snap

    def outstanding_snapshots(self) -> int:
        with self._lock:
            return len(self._outstanding)

    def _snapshot_released(self, snap: KeyedStateSnapshot) -> None:
        """Called once per snapshot, from any thread, when nothing reads its layers any more."""
        with self._lock:
            self._outstanding.discard(snap)
            self._fold_pending = True
        if threading.get_ident() == self._task_thread:
            self._fold()

    def _fold(self) -> None:
        """Task thread only: fold the layers no outstanding snapshot needs into the live tables."""
        with self._lock:
            self._fold_pending = False
            needed = max((s._depth for s in self._outstanding), default=0)
        if needed >= len(self._frozen):
            return
        dropped = self._frozen[needed:]
        del self._frozen[needed:]
        for name, live in list(self._tables.items()):
            if not isinstance(live, _Overlay):
                continue
            if needed == 0:
                # No snapshot outstanding: merge everything into the bottom layer, in place.
                base = live.below[0]
                for layer in (*live.below[1:], live):
                    _apply(base, layer)
                self._repoint(name, base)
                continue
            gone = [f[name] for f in dropped if name in f]
            if not gone:
                continue
            kept = live.below[: len(live.below) - len(gone)]
            if not kept:
                self._repoint(name, _flatten((*gone, live)))
                continue
            merged: dict[Any, Any] = {}
            for layer in gone:
                dict.update(merged, layer)
            dict.update(merged, live)
            dict.clear(live)
            dict.update(live, merged)
            live.tombstones += sum(_tombstones(layer) for layer in gone)
            live.below = kept

    # -- restore (M-T4) ---------------------------------------------------------------------
    def restore(self, snapshots: Iterable[Mapping[str, Any]], key_groups: range) -> None:
        """Load the entries of ``key_groups`` from materialized snapshots (several when
        rescaling); entries of other key groups are ignored."""
        if not isinstance(key_groups, range):
            raise ConfigurationError(
                f"operator '{self.operator_name}': restore needs the subtask's key groups as a "
                f"range, got {key_groups!r}"
            )
        if self._fold_pending:
            self._fold()
        if self._frozen or self.outstanding_snapshots():
            raise ConfigurationError(
                f"operator '{self.operator_name}': cannot restore keyed state while a snapshot "
                "is outstanding; restore before processing starts"
            )
        for i, snap in enumerate(snapshots):
            where = f"operator '{self.operator_name}': keyed state snapshot #{i}"
            if not isinstance(snap, Mapping):
                raise UnsupportedSnapshotFormatError(
                    f"{where} is a {type(snap).__name__}, not a materialized keyed state "
                    f"snapshot (a dict of format {SNAPSHOT_FORMAT})"
                )
            found = snap.get("format", _MISSING)
            if found != SNAPSHOT_FORMAT or type(found) is not int:
                shown = "no 'format' entry" if found is _MISSING else f"format {found!r}"
                raise UnsupportedSnapshotFormatError(
                    f"{where} has {shown}; this version of lockgate reads keyed state "
                    f"snapshot format {SNAPSHOT_FORMAT}"
                )
            mp = snap.get("max_parallelism")
            if mp != self.max_parallelism:
                raise ConfigurationError(
                    f"{where} was taken with max_parallelism {mp!r}, but the operator runs with "
                    f"max_parallelism {self.max_parallelism}; max_parallelism cannot change "
                    "when restoring keyed state"
                )
            states = snap.get("states")
            if not isinstance(states, Mapping):
                raise UnsupportedSnapshotFormatError(
                    f"{where} has no 'states' mapping (found {type(states).__name__})"
                )
            for name, state in states.items():
                kind = state.get("kind") if isinstance(state, Mapping) else None
                if kind != "value":
                    raise UnsupportedSnapshotFormatError(
                        f"{where}: state '{name}' has kind {kind!r}; this version restores "
                        "only 'value' keyed state"
                    )
                known = self._kinds.get(name)
                if known is not None and known != kind:
                    raise ConfigurationError(
                        f"{where}: state '{name}' is {kind} state in the snapshot but is "
                        f"registered as {known} state"
                    )
                self._kinds[name] = kind
                table = self._tables.setdefault(name, {})
                groups = state.get("key_groups", {})
                if not isinstance(groups, Mapping):
                    raise UnsupportedSnapshotFormatError(
                        f"{where}: state '{name}' has no 'key_groups' mapping "
                        f"(found {type(groups).__name__})"
                    )
                for kg, entries in groups.items():
                    if kg in key_groups:
                        table.update(entries)

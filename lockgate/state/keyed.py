"""The in-memory (heap) keyed state backend and its snapshots.

State is held per state name as ``key -> stored`` (the stored forms of
:mod:`lockgate.state.handles`: a value, a non-empty list, a non-empty dict, with
:class:`~lockgate.state.ttl.TtlValue` wrappers for TTL state); the backend's
``current_key`` (set by the keyed operator before each record and timer)
selects the entry a state handle reads and writes. Every kind of keyed state
(value, list, map, reducing, aggregating) uses the same tables, so everything
below holds for all of them. Keys are owned by the subtask's key-group range;
snapshots group them by key group (M-T4).

Time for state TTL comes from the backend's ``clock`` (processing time),
``current_watermark`` and ``current_timestamp`` (event time), which the keyed
operator sets (see :mod:`lockgate.state.ttl`).

Copy-on-write snapshots (M-T3)
------------------------------
A checkpoint snapshot has a synchronous part, :meth:`HeapKeyedStateBackend.snapshot`,
run by the task thread between two records, and an asynchronous part,
:meth:`KeyedStateSnapshot.materialize`, run on a background thread while the
task thread keeps processing. The design is a **stack of frozen layers**
(the idea of Flink's ``CopyOnWriteStateMap``, with layers instead of per-entry
version numbers so that the hot path stays a plain ``dict`` lookup):

* With no snapshot outstanding, each state's live table is a plain ``dict``
  and the handles read and write it directly: no copy-on-write cost at all.
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
  and tuples/frozensets/TtlValues of them) into the overlay before it is
  returned, so mutating a value in place after ``value()`` never changes a
  snapshot, and neither do the handles' in-place appends to a list or puts
  into a map (they always mutate what ``get`` returned, then write it back).
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

TTL cleanup on snapshot: ``snapshot()`` records, per state with
``cleanup_on_snapshot``, the TTL "now" (clock time or watermark) at that moment;
``materialize`` leaves out what is expired at that time (never changing the
frozen layers), so the result does not depend on when the asynchronous part runs.

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
from typing import Any

import numpy as np

from ..core.clock import Clock, SystemClock
from ..core.key_groups import DEFAULT_MAX_PARALLELISM, check_max_parallelism, key_groups_of_keys
from ..core.key_hash import canonical_key
from ..errors import ConfigurationError, LockgateError
from .canonical import (
    SNAPSHOT_FORMAT,
    UnsupportedSnapshotFormatError,
    canonical_states,
    snapshot_kind,
)
from .descriptors import StateDescriptor
from .handles import (
    AggregatingState,
    KeyedStateHandle,
    ListState,
    MapState,
    ReducingState,
    ValueState,
    create_handle,
)
from .ttl import (
    MIN_WATERMARK,
    StateTtlConfig,
    TtlValue,
    drop_expired,
    has_ttl_wrapper,
    snapshot_expiry,
)
from .typed.registry import FrozenTypes, TypedStates

_MISSING: Any = object()


class _Tombstone:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<deleted>"


_TOMBSTONE: Any = _Tombstone()

#: The format number of the dicts :meth:`KeyedStateSnapshot.materialize` returns.

_ATOMIC = frozenset({int, float, complex, str, bytes, bool, type(None)})


#: the stored form of list and map state entries (checked on restore)


class SnapshotReleasedError(LockgateError, RuntimeError):
    """``materialize`` was called on (or cancelled by) a released snapshot."""


def _is_immutable(value: Any) -> bool:
    t = type(value)
    if t in _ATOMIC:
        return True
    if t is tuple or t is frozenset or t is TtlValue:
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

    def __init__(
        self, backend: HeapKeyedStateBackend, name: str, below: tuple[dict[Any, Any], ...]
    ) -> None:
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


class KeyedStateSnapshot:
    """The consistent view :meth:`HeapKeyedStateBackend.snapshot` took (M-T3).

    ``materialize()`` (the asynchronous part, any thread) turns it into a
    picklable dict grouped by key group; ``release()`` (any thread, idempotent)
    gives its layers back to the backend and cancels a running ``materialize``.
    """

    def __init__(
        self,
        backend: HeapKeyedStateBackend,
        depth: int,
        views: dict[str, tuple[dict[Any, Any], ...]],
        kinds: dict[str, str],
        expiry: dict[str, tuple[StateTtlConfig, int]] | None = None,
        typed: FrozenTypes | None = None,
    ) -> None:
        self._backend = backend
        self._typed = typed
        self._depth = depth  # the snapshot sees the bottom ``depth`` frozen layers
        self._views = views
        self._kinds = kinds
        # name -> (TTL config, "now" at snapshot time): states whose expired entries are left out
        self._expiry = expiry or {}
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
        ``release()``. Asked before ``materialize``, it counts keys whose TTL state
        has expired too (an upper bound)."""
        if self._size is None:
            views = self._enter()
            try:
                self._size = sum(_count(layers) for layers in views.values())
            finally:
                self._leave()
        return self._size

    def materialize(self) -> dict[str, Any]:
        """The asynchronous part, the canonical keyed state snapshot: ``{"format": 1,
        "max_parallelism": M, "states": {name: {"kind": kind, "key_groups":
        {key_group: {key: stored}}}}}`` where ``kind`` is one of "value", "list",
        "map", "reducing", "aggregating" and ``stored`` is what the state handles
        keep (TTL wrappers included; TTL state with ``cleanup_on_snapshot`` leaves
        out what was expired when ``snapshot()`` ran).

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
                kind = self._kinds[name]
                expiry = self._expiry.get(name)
                if expiry is not None:
                    view = self._unexpired(kind, view, *expiry)
                if self._typed and self._typed.is_typed(name):
                    # typed: written as columns with their key groups, never grouped here
                    states[name] = {"kind": kind, "keys": list(view), "values": list(view.values())}
                else:
                    states[name] = {"kind": kind, "key_groups": self._group(view)}
            self._check_released()
            if self._size is None:
                self._size = sum(
                    len(s["keys"]) if "keys" in s else sum(map(len, s["key_groups"].values()))
                    for s in states.values()
                )
            if self._typed:
                states = self._typed.encode(states, self.max_parallelism)
            return {
                "format": SNAPSHOT_FORMAT,
                "max_parallelism": self.max_parallelism,
                "states": states,
            }
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

    def _unexpired(
        self, kind: str, view: dict[Any, Any], config: StateTtlConfig, now: int
    ) -> dict[Any, Any]:
        """``view`` without what is expired at ``now`` (a new dict; the layers stay as they are)."""
        out: dict[Any, Any] = {}
        for i, (key, stored) in enumerate(view.items()):
            if i % 4096 == 4095:
                self._check_released()
            kept = drop_expired(kind, stored, config, now)
            if kept is not None:
                out[key] = kept
        return out

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

    ``get_state(descriptor)`` returns a :class:`ValueState`, :class:`ListState`,
    :class:`MapState`, :class:`ReducingState` or :class:`AggregatingState` per the
    descriptor's kind. Time for state TTL: ``clock`` (processing time; default the
    system clock), ``current_watermark`` (starts at ``MIN_WATERMARK``) and
    ``current_timestamp`` (the current record's event time or None), the last two
    set by the keyed operator. Everything but :class:`KeyedStateSnapshot`'s
    ``materialize``/``release``/``size_hint`` belongs to the task thread.
    """

    def __init__(
        self,
        operator_name: str,
        max_parallelism: int = DEFAULT_MAX_PARALLELISM,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.operator_name = operator_name
        self.max_parallelism = check_max_parallelism(max_parallelism)
        self.current_key: Any = None
        #: processing time for TTL state
        self.clock: Clock = SystemClock() if clock is None else clock
        #: event time for TTL state: the operator's current watermark
        self.current_watermark: int = MIN_WATERMARK
        #: event time for TTL state: the timestamp of the record being processed, or None
        self.current_timestamp: int | None = None
        #: the declared types of typed states, and restored typed state not asked for yet
        self.typed = TypedStates(operator_name)
        # name -> live table: a plain dict, or an _Overlay while snapshots are outstanding
        self._tables: dict[str, dict[Any, Any]] = {}
        self._kinds: dict[str, str] = {}  # registered or restored
        self._ttl: dict[str, StateTtlConfig | None] = {}  # registered with a descriptor
        self._handles: dict[str, weakref.WeakSet[KeyedStateHandle]] = {}
        # frozen layers, one {name: table} per snapshot taken since none was outstanding
        self._frozen: list[dict[str, dict[Any, Any]]] = []
        self._lock = threading.Lock()
        self._outstanding: set[KeyedStateSnapshot] = set()
        self._fold_pending = False
        self._task_thread = threading.get_ident()

    # -- state handles ----------------------------------------------------------------------

    def approximate_keys(self) -> int:
        """Keys holding state, approximately: those of the largest state (a metric,
        read from other threads)."""
        sizes = []
        for table in list(self._tables.values()):
            try:
                sizes.append(len(table))
            except TypeError:
                continue
        return max(sizes, default=0)

    def get_state(self, descriptor: StateDescriptor[Any]) -> Any:
        """The handle of ``descriptor``'s state (its kind's handle class). Asking again
        with the same name and kind gives another handle on the same values; another
        kind, or another TTL config, under the same name is a ConfigurationError."""
        where = f"operator '{self.operator_name}'"
        if not isinstance(descriptor, StateDescriptor):
            raise ConfigurationError(
                f"{where}: get_state needs a state descriptor such as "
                f"lg.ValueStateDescriptor('name'), got {descriptor!r}"
            )
        name = descriptor.name
        known = self._kinds.get(name)
        if known is not None and known != descriptor.kind:
            how = "registered" if name in self._ttl else "restored from a snapshot"
            raise ConfigurationError(
                f"{where}: state '{name}' is already {how} as {known} state; give the "
                f"{descriptor.kind} state another name"
            )
        ttl = descriptor.ttl_config
        if ttl is not None and not isinstance(ttl, StateTtlConfig):
            raise ConfigurationError(
                f"{where}: {descriptor!r} has ttl_config {ttl!r}; set it with "
                "descriptor.enable_time_to_live(lg.StateTtlConfig(...))"
            )
        if name in self._ttl and self._ttl[name] != ttl:
            raise ConfigurationError(
                f"{where}: state '{name}' is already registered with TTL "
                f"{self._ttl[name]!r}, now asked for with TTL {ttl!r}; use the same "
                "descriptor settings for every handle of one state"
            )
        restored = self.typed.register(descriptor, ttl is not None)
        if restored is not None:
            self._kinds[name] = descriptor.kind
            loaded = self._tables.setdefault(name, {})
            if restored.canonical_keys:
                loaded.update(zip(restored.keys, restored.values))
            else:  # a restored NaN key is a new NaN object: make it the one NaN key
                for key, stored in restored:
                    loaded[canonical_key(key)] = stored
        table = self._tables.get(name)
        handle = create_handle(self, table if table is not None else {}, descriptor, where)
        if name not in self._ttl:
            self._kinds[name] = descriptor.kind
            if table is not None:
                self._check_ttl_form(name, ttl, where)
            self._ttl[name] = ttl
        if table is None:
            table = self._tables[name] = handle._table  # type: ignore[assignment]
        self._handles.setdefault(name, weakref.WeakSet()).add(handle)
        return handle

    def _check_ttl_form(self, name: str, ttl: StateTtlConfig | None, where: str) -> None:
        """Refuse a descriptor whose TTL setting does not match how the state's existing
        (restored) values are stored: judged from one stored entry."""
        for stored in self._live_view(name).values():
            wrapped = has_ttl_wrapper(self._kinds[name], stored)
            if wrapped != (ttl is not None):
                had, has = ("with", "disables") if wrapped else ("without", "enables")
                raise ConfigurationError(
                    f"{where}: state '{name}' holds values stored {had} TTL (restored from a "
                    f"snapshot) but its descriptor {has} TTL; changing the TTL setting of "
                    "existing state is not supported: keep the setting the state was written "
                    "with, or give the state a new name"
                )
            return

    def close(self) -> None:
        """Release the backend's resources (nothing to do for the heap backend)."""

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
        (O(state names)); processing continues on copy-on-write overlays. The TTL
        "now" of each TTL state (clock time or watermark) is captured here."""
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
        expiry = snapshot_expiry(views, self._ttl, self)
        snap = KeyedStateSnapshot(
            self,
            len(self._frozen),
            views,
            {name: self._kinds[name] for name in views},
            expiry,
            self.typed.freeze(),
        )
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
        """Load the entries of ``key_groups`` from materialized (canonical) snapshots,
        several when rescaling; entries of other key groups are ignored. Every state
        kind is restored; a state's kind must match the one registered under its name.
        TTL wrappers are kept, so restored entries expire on their original schedule."""
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
            if snapshot_kind(snap, where, self.max_parallelism) == "native":
                raise UnsupportedSnapshotFormatError(
                    f"{where} is a RocksDB incremental checkpoint; restore it with "
                    "env.set_state_backend(lg.RocksDBStateBackend(...)), or change state "
                    "backends through a savepoint (savepoints restore into either backend)"
                )
            for name, kind, entries in canonical_states(snap, where, key_groups, self.typed):
                known = self._kinds.get(name)
                if known is not None and known != kind:
                    raise ConfigurationError(
                        f"{where}: state '{name}' is {kind} state in the snapshot but is "
                        f"registered as {known} state"
                    )
                self._kinds[name] = kind
                table = self._tables.setdefault(name, {})
                for key, stored in entries:
                    # a restored NaN key is a new NaN object: make it the one NaN key
                    table[canonical_key(key)] = stored
                if name in self._ttl:
                    self._check_ttl_form(name, self._ttl[name], where)


__all__ = [
    "SNAPSHOT_FORMAT",
    "AggregatingState",
    "HeapKeyedStateBackend",
    "KeyedStateSnapshot",
    "ListState",
    "MapState",
    "ReducingState",
    "SnapshotReleasedError",
    "UnsupportedSnapshotFormatError",
    "ValueState",
]

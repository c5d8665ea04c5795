"""The typed states of one keyed state backend: their declared types, the typed state
restored but not yet asked for, and the typed part of canonical snapshots.

Both keyed backends (heap and RocksDB) hold one :class:`TypedStates` and use it the same
way, so the evolution contract is the same for both:

* ``restore``: a typed entry of a canonical snapshot is kept here as Arrow columns
  (its key groups only) until the job asks for the state;
* ``register`` (from ``get_state``): checks the descriptor's type against the
  restored one (:func:`~lockgate.state.typed.evolution.evolve`: refused before any
  record flows) and hands the backend the restored entries as values of the new type;
* ``encode`` (in a snapshot's asynchronous part): writes each typed state as an Arrow
  table (:mod:`lockgate.state.typed.columns`) and keeps restored states nobody asked
  for, as they were.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ...errors import ConfigurationError
from .columns import RestoredEntries, TypedTable, encode_state, read_table, table_bytes
from .evolution import Evolution, IncompatibleStateError, evolve, widens
from .types import StateType

#: the marker of a typed entry in a canonical keyed snapshot's ``states``
TYPED_ENTRY = "typed"
#: the entries of a RocksDB incremental checkpoint payload for typed state
NATIVE_TYPES = "typed"
NATIVE_PENDING = "typed_pending"


def is_typed_entry(entry: Any) -> bool:
    return isinstance(entry, Mapping) and entry.get(TYPED_ENTRY) is not None


def typed_entry(kind: str, data: bytes) -> dict[str, Any]:
    """A canonical snapshot's entry for a typed state."""
    return {"kind": kind, TYPED_ENTRY: 1, "arrow": data}


class TypedStates:
    """See the module docstring. ``operator`` names the operator in errors."""

    def __init__(self, operator: str) -> None:
        self.operator = operator
        #: the operator's uid, named in errors when the operator runtime sets it
        self.uid: str | None = None
        self._types: dict[str, tuple[str, StateType, bool]] = {}
        self._pending: dict[str, TypedTable] = {}
        # typed states restored from a RocksDB incremental checkpoint (values in the
        # database): name -> (kind, element type, nullable, ttl)
        self._native: dict[str, tuple[str, pa.DataType, bool, bool]] = {}
        self._lock = threading.Lock()

    def _where(self, name: str) -> str:
        if self.uid and self.uid != self.operator:
            return f"operator '{self.operator}' (uid '{self.uid}'), state '{name}'"
        return f"operator '{self.operator}', state '{name}'"

    # -- restore ------------------------------------------------------------------------------
    def restore(self, name: str, entry: Mapping[str, Any], key_groups: range, where: str) -> None:
        """Keep the rows of ``key_groups`` of the typed ``entry`` until ``register``."""
        table = read_table(entry.get("arrow"), f"{where}: state '{name}'")
        if table.kind != entry.get("kind"):
            raise ConfigurationError(
                f"{where}: state '{name}' is {entry.get('kind')} state but its table says "
                f"{table.kind}"
            )
        part = table.for_key_groups(key_groups)
        with self._lock:
            before = self._pending.get(name)
            self._pending[name] = part if before is None else before.concat(part)

    def restore_native(self, payload: Mapping[str, Any], key_groups: range, where: str) -> None:
        """The typed part of a RocksDB incremental checkpoint payload: the types of the
        states whose values are in the database, and the unclaimed typed states."""
        for name, info in (payload.get(NATIVE_TYPES) or {}).items():
            schema = pa.ipc.read_schema(pa.py_buffer(info["element"]))
            element = schema.field("value")
            self._native[name] = (info["kind"], element.type, element.nullable, info["ttl"])
        for name, data in (payload.get(NATIVE_PENDING) or {}).items():
            self.restore(
                name, {"kind": read_table(data, where).kind, "arrow": data}, key_groups, where
            )

    # -- register -----------------------------------------------------------------------------
    def register(self, descriptor: Any, ttl: bool) -> RestoredEntries | None:
        """Record ``descriptor``'s type; return the restored entries to load (converted,
        migrated) or None. Raises :class:`IncompatibleStateError` when the restored state
        cannot be read with the declared type, ConfigurationError when typed state is
        asked for without a type."""
        name = descriptor.name
        state_type: StateType | None = getattr(descriptor, "state_type", None)
        where = self._where(name)
        known = self._types.get(name)
        if known is not None:
            if state_type is None or known[1].describe() != state_type.describe():
                raise ConfigurationError(
                    f"{where} is already registered with type {known[1].describe()}; "
                    f"ask for it with the same type (got {descriptor!r})"
                )
            return None
        table = self._pending.get(name)
        native = self._native.get(name)
        if native is not None:
            self._check_native(name, descriptor, state_type, ttl, native)
        if state_type is None:
            if table is not None:
                writer, _ = table.element()
                raise IncompatibleStateError(
                    f"{where}: the restored state is typed ({table.type_name or writer}) but "
                    f"{descriptor!r} declares no type; declare it (type=...) to read the "
                    "state",
                    ["type removed"],
                )
            return None
        if table is not None and table.ttl != ttl:
            had, has = ("with", "disables") if table.ttl else ("without", "enables")
            raise ConfigurationError(
                f"{where} holds values stored {had} TTL (restored from a snapshot) but its "
                f"descriptor {has} TTL; changing the TTL setting of existing state is not "
                "supported: keep the setting the state was written with, or give the state "
                "a new name"
            )
        evolution = self.evolution(name, descriptor.kind, state_type, table)
        with self._lock:
            self._types[name] = (descriptor.kind, state_type, ttl)
            self._pending.pop(name, None)
        if table is None:
            return None
        return table.entries(state_type, evolution)

    def _check_native(
        self,
        name: str,
        descriptor: Any,
        state_type: StateType | None,
        ttl: bool,
        native: tuple[str, pa.DataType, bool, bool],
    ) -> None:
        kind, writer, nullable, had_ttl = native
        where = self._where(name)
        if state_type is None:
            raise IncompatibleStateError(
                f"{where}: the restored state is typed ({writer}) but {descriptor!r} "
                "declares no type; declare it (type=...) to read the state",
                ["type removed"],
            )
        if kind != descriptor.kind or had_ttl != ttl:
            raise IncompatibleStateError(
                f"{where} was {kind} state{' with TTL' if had_ttl else ''} and is asked for "
                f"as {descriptor.kind} state{' with TTL' if ttl else ''}; give the new state "
                "another name",
                ["kind or TTL changed"],
            )
        evolution = evolve(writer, nullable, state_type.node, state_type.aliases, where)
        if evolution.changed:
            raise IncompatibleStateError(
                f"{where}: the state was restored from a RocksDB incremental checkpoint, "
                "whose values stay in the database as written, and its type changed ("
                + "; ".join(evolution.changes)
                + "); change a state's type through a savepoint (lockgate stop --savepoint, "
                "then restore from the savepoint), which migrates it",
                evolution.changes,
            )

    def evolution(
        self, name: str, kind: str, state_type: StateType, table: TypedTable | None
    ) -> Evolution | None:
        """How restoring ``table`` as ``state_type`` changes it (None: nothing restored)."""
        if table is None:
            return None
        where = self._where(name)
        if table.kind != kind:
            raise IncompatibleStateError(
                f"{where} is {table.kind} state in the snapshot but the job asks for {kind} "
                "state; give the new state another name",
                [f"kind changed from {table.kind} to {kind}"],
            )
        if kind == "map":
            old_key = table.stored_type.key_type
            assert state_type.key is not None
            if not widens(old_key, state_type.key.arrow):
                raise IncompatibleStateError(
                    f"{where}: the user key type of the map state changed from {old_key} to "
                    f"{state_type.key.arrow}; keep the old key type or give the state a new "
                    "name",
                    [f"map key changed from {old_key} to {state_type.key.arrow}"],
                )
        writer, nullable = table.element()
        return evolve(writer, nullable, state_type.node, state_type.aliases, where)

    # -- snapshot -----------------------------------------------------------------------------
    def freeze(self) -> FrozenTypes:
        """What a snapshot taken now writes: the registered types and the unclaimed
        restored states, as they are at this moment (the synchronous part)."""
        with self._lock:
            return FrozenTypes(self.operator, dict(self._types), dict(self._pending))


class FrozenTypes:
    """The typed states as they were when a snapshot was taken."""

    def __init__(
        self,
        operator: str,
        types: dict[str, tuple[str, StateType, bool]],
        pending: dict[str, TypedTable],
    ) -> None:
        self.operator = operator
        self.types = types
        self.pending = pending

    def __bool__(self) -> bool:
        return bool(self.types or self.pending)

    def is_typed(self, name: str) -> bool:
        return name in self.types

    def encode(self, states: dict[str, Any], max_parallelism: int) -> dict[str, Any]:
        """``states`` (a canonical snapshot's ``{name: {"kind", "key_groups"}}``, a typed
        state possibly as ``{"kind", "keys", "values"}``) with every typed state as an
        Arrow table, and the unclaimed restored ones added."""
        if not self:
            return states
        out = dict(states)
        for name, (kind, state_type, ttl) in self.types.items():
            entry = out.get(name)
            where = f"operator '{self.operator}', state '{name}'"
            if isinstance(entry, Mapping) and "keys" in entry:
                flat = (entry["keys"], entry["values"], max_parallelism)
                data = encode_state(kind, state_type, ttl, None, where, flat=flat)
            else:
                groups = entry.get("key_groups", {}) if isinstance(entry, Mapping) else {}
                data = encode_state(kind, state_type, ttl, groups, where)
            out[name] = typed_entry(kind, data)
        for name, table in self.pending.items():
            if name not in self.types:
                out[name] = typed_entry(table.kind, table_bytes(table.table))
        return out

    def native(self) -> dict[str, Any]:
        """The typed part of a RocksDB incremental checkpoint payload (whose values are
        in the database): each typed state's kind, TTL flag and element type, and the
        restored typed states nobody asked for, as Arrow tables."""
        if not self:
            return {}
        types = {}
        for name, (kind, state_type, ttl) in self.types.items():
            node = state_type.node
            schema = pa.schema([pa.field("value", node.arrow, nullable=node.nullable)])
            types[name] = {
                "kind": kind,
                "ttl": ttl,
                "element": schema.serialize().to_pybytes(),
            }
        pending = {
            name: table_bytes(table.table)
            for name, table in self.pending.items()
            if name not in self.types
        }
        return {NATIVE_TYPES: types, NATIVE_PENDING: pending}


__all__ = [
    "TYPED_ENTRY",
    "FrozenTypes",
    "TypedStates",
    "is_typed_entry",
    "typed_entry",
]

"""Decoding the state one operator subtask wrote into named, typed parts.

A subtask's state ``S`` (the ``"state"`` entry of its state file) is one of:

* typed operator state, a dict with ``"lockgate_state": 1`` and optional entries
  ``"keyed"`` (the canonical keyed snapshot), ``"operator"`` (operator list / union
  list state), ``"broadcast"`` (broadcast state) and ``"function"`` (anything else the
  operator saved, exposed as the state ``"_function"`` of kind ``raw``); an entry that
  is absent or None contributes no state;
* a canonical keyed snapshot on its own (``{"format": 1, "states": ...}``, what the
  keyed operator saved before typed operator state existed);
* anything else (source split positions, sink transactions, ...): the state
  ``"_raw"`` of kind ``raw``.

:func:`decode_subtask` guarantees every part it returns has the shape its kind needs
(keyed: ``{key_group: {key: stored}}``; operator lists: a list; broadcast: a dict);
any other shape raises :class:`SavepointFormatError` naming the operator, subtask
and state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..checkpoint.state_tree import PickledValue
from ..state.typed.columns import TypedStateFormatError, read_table
from ..state.typed.registry import is_typed_entry
from .errors import SavepointFormatError
from .model import FUNCTION_STATE, RAW_STATE, StateKind

#: the value of ``"lockgate_state"`` this reader understands
TYPED_STATE_FORMAT = 1
#: the ``"format"`` of canonical keyed snapshots this reader understands
KEYED_SNAPSHOT_FORMAT = 1

_OPERATOR_MODES = {"split": StateKind.OPERATOR_LIST, "union": StateKind.UNION_LIST}


@dataclass(frozen=True)
class StatePart:
    """The part of one state one subtask wrote."""

    kind: StateKind
    data: Any
    #: the declared type of typed keyed state (as the descriptor described it), else None
    type_name: str | None = None
    #: typed keyed state: the table read (a :class:`~lockgate.state.typed.columns.TypedTable`)
    table: Any = None


@dataclass(frozen=True)
class SubtaskState:
    """The decoded state of one subtask: its parts by state name, and the max
    parallelism of its keyed snapshot (None without keyed state)."""

    parts: dict[str, StatePart]
    max_parallelism: int | None = None


def is_keyed_snapshot(value: Any) -> bool:
    """Whether ``value`` is a canonical keyed snapshot (format 1)."""
    return (
        isinstance(value, Mapping)
        and value.get("format") == KEYED_SNAPSHOT_FORMAT
        and isinstance(value.get("states"), Mapping)
    )


def decode_subtask(uid: str, subtask: int, state: Any) -> SubtaskState:
    """The named parts of the state subtask ``subtask`` of operator ``uid`` wrote."""
    where = f"operator {uid!r}, subtask {subtask}"
    if isinstance(state, Mapping) and "lockgate_state" in state:
        version = state["lockgate_state"]
        if version != TYPED_STATE_FORMAT:
            raise SavepointFormatError(
                f"{where}: the state has format lockgate_state={version!r}; this lockgate "
                f"reads format {TYPED_STATE_FORMAT} (was it written by a newer lockgate?)"
            )
        return _typed(where, state)
    if is_keyed_snapshot(state):
        return _keyed(where, state, {})
    # also a file of the format before state trees, read without unpickling: one
    # PickledValue (its states are known only once it is unpickled)
    return SubtaskState({RAW_STATE: StatePart(StateKind.RAW, state)})


def _typed(where: str, state: Mapping[str, Any]) -> SubtaskState:
    parts: dict[str, StatePart] = {}
    max_parallelism = None
    if state.get("keyed") is not None:
        keyed = state["keyed"]
        if not is_keyed_snapshot(keyed):
            raise SavepointFormatError(
                f"{where}: the keyed state is in the backend-native form of an incremental "
                "RocksDB checkpoint (written by RocksDBStateBackend(incremental=True)), which "
                "cannot be read offline; take a savepoint of the job (savepoints always hold "
                "the canonical form) and read that instead"
            )
        decoded = _keyed(where, keyed, parts)
        max_parallelism = decoded.max_parallelism
    for name, entry in _mapping(where, "operator", state.get("operator")).items():
        if (
            not isinstance(entry, Mapping)
            or entry.get("mode") not in _OPERATOR_MODES
            or not isinstance(entry.get("items"), (list, PickledValue))
        ):
            raise SavepointFormatError(
                f"{where}: operator state {name!r} is not {{'mode': 'split' | 'union', "
                f"'items': [...]}}"
            )
        _add(where, parts, name, StatePart(_OPERATOR_MODES[entry["mode"]], entry["items"]))
    for name, entries in _mapping(where, "broadcast", state.get("broadcast")).items():
        if not isinstance(entries, (Mapping, PickledValue)):
            raise SavepointFormatError(
                f"{where}: broadcast state {name!r} is a {type(entries).__name__}, not a map"
            )
        _add(where, parts, name, StatePart(StateKind.BROADCAST, entries))
    if state.get("function") is not None:
        _add(where, parts, FUNCTION_STATE, StatePart(StateKind.RAW, state["function"]))
    return SubtaskState(parts, max_parallelism)


def _keyed(where: str, snapshot: Mapping[str, Any], parts: dict[str, StatePart]) -> SubtaskState:
    for name, entry in snapshot["states"].items():
        if is_typed_entry(entry):
            try:
                table = read_table(entry.get("arrow"), f"{where}: state {name!r}")
                kind_of = StateKind(table.kind)
                part = StatePart(kind_of, table.grouped(), table.type_name or None, table)
            except (TypedStateFormatError, ValueError) as e:
                raise SavepointFormatError(f"{where}: typed state {name!r}: {e}") from None
            _add(where, parts, name, part)
            continue
        kind = entry.get("kind") if isinstance(entry, Mapping) else None
        try:
            state_kind = StateKind(kind)
        except ValueError:
            state_kind = None
        if state_kind is None or not state_kind.keyed:
            raise SavepointFormatError(
                f"{where}: keyed state {name!r} has kind {kind!r}; this lockgate reads "
                f"{', '.join(k.value for k in StateKind if k.keyed)}"
            )
        key_groups = entry.get("key_groups")
        if isinstance(key_groups, PickledValue):  # loaded when the state is read
            _add(where, parts, name, StatePart(state_kind, key_groups))
            continue
        if not isinstance(key_groups, Mapping) or not all(
            isinstance(keys, (Mapping, PickledValue)) for keys in key_groups.values()
        ):
            raise SavepointFormatError(
                f"{where}: keyed state {name!r} has no {{key_group: {{key: value}}}} 'key_groups'"
            )
        _add(where, parts, name, StatePart(state_kind, key_groups))
    max_parallelism = snapshot.get("max_parallelism")
    return SubtaskState(parts, max_parallelism if isinstance(max_parallelism, int) else None)


def _mapping(where: str, entry: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SavepointFormatError(
            f"{where}: the {entry!r} state is a {type(value).__name__}, expected a dict of "
            "states by name"
        )
    return value


def _add(where: str, parts: dict[str, StatePart], name: Any, part: StatePart) -> None:
    if not isinstance(name, str):
        raise SavepointFormatError(
            f"{where}: a {part.kind.value} state is named {name!r}, not a string"
        )
    if name in parts:
        raise SavepointFormatError(
            f"{where}: two states are named {name!r} ({parts[name].kind.value} and "
            f"{part.kind.value}); the reader cannot tell them apart"
        )
    parts[name] = part

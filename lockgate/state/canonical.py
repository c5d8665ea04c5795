"""The canonical keyed state snapshot: the backend-independent format savepoints hold
(M-S1) and that both keyed backends restore (M-T4).

``{"format": 1, "max_parallelism": M, "states": {name: {"kind": kind, "key_groups":
{key_group: {key: stored}}}}}`` where ``stored`` is what the state handles keep (TTL
wrappers included). :func:`snapshot_kind` tells it from a RocksDB incremental
checkpoint payload (``{"format": "lockgate-rocksdb", ...}``) and checks either;
:func:`canonical_states` reads a canonical snapshot, checked, for the key groups a
subtask restores.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..core.key_groups import check_restored_max_parallelism
from ..errors import ConfigurationError
from .handles import STATE_KINDS
from .typed.registry import is_typed_entry

#: the format number of canonical keyed state snapshots
SNAPSHOT_FORMAT = 1
#: the format and version of the RocksDB backend's incremental checkpoint payloads
NATIVE_FORMAT = "lockgate-rocksdb"
NATIVE_VERSION = 1


class UnsupportedSnapshotFormatError(ConfigurationError):
    """A keyed state snapshot given to ``restore`` is not in a format this version reads."""


_MISSING: Any = object()
_CONTAINERS: dict[str, type] = {"list": list, "map": dict}


def snapshot_kind(snap: Any, where: str, max_parallelism: int) -> str:
    """``"canonical"`` or ``"native"`` for a snapshot given to ``restore``, after
    checking its format and its max parallelism."""
    if not isinstance(snap, Mapping):
        raise UnsupportedSnapshotFormatError(
            f"{where} is a {type(snap).__name__}, not a keyed state snapshot (a dict of "
            f"format {SNAPSHOT_FORMAT}, or a RocksDB checkpoint payload)"
        )
    found = snap.get("format", _MISSING)
    if found == NATIVE_FORMAT:
        version = snap.get("version")
        if version != NATIVE_VERSION:
            raise UnsupportedSnapshotFormatError(
                f"{where} is a RocksDB checkpoint payload of version {version!r}; this "
                f"version of lockgate reads version {NATIVE_VERSION}"
            )
        kind = "native"
    elif found == SNAPSHOT_FORMAT and type(found) is int:
        kind = "canonical"
    else:
        shown = "no 'format' entry" if found is _MISSING else f"format {found!r}"
        raise UnsupportedSnapshotFormatError(
            f"{where} has {shown}; this version of lockgate reads keyed state snapshot "
            f"format {SNAPSHOT_FORMAT} and RocksDB checkpoint payloads ({NATIVE_FORMAT!r})"
        )
    check_restored_max_parallelism(
        snap.get("max_parallelism"), max_parallelism, where, "keyed state"
    )
    return kind


def canonical_states(
    snap: Mapping[str, Any], where: str, key_groups: range, typed: Any = None
) -> Iterator[tuple[str, str, Iterator[tuple[Any, Any]]]]:
    """``(name, kind, entries)`` per untyped state of a canonical snapshot, where
    ``entries`` yields the ``(key, stored)`` of the key groups in ``key_groups`` (empty
    lists and maps left out). A typed state (Arrow columns) goes to
    ``typed.restore(...)`` (a :class:`~lockgate.state.typed.registry.TypedStates`), which
    hands it to the backend when the job asks for it. Raises
    :class:`UnsupportedSnapshotFormatError` for what is not canonical."""
    states = snap.get("states")
    if not isinstance(states, Mapping):
        raise UnsupportedSnapshotFormatError(
            f"{where} has no 'states' mapping (found {type(states).__name__})"
        )
    for name, state in states.items():
        if is_typed_entry(state):
            if typed is None:
                raise UnsupportedSnapshotFormatError(
                    f"{where}: state '{name}' is typed state (Arrow columns), which this "
                    "restore does not read"
                )
            typed.restore(name, state, key_groups, where)
            continue
        kind = state.get("kind") if isinstance(state, Mapping) else None
        if kind not in STATE_KINDS:
            raise UnsupportedSnapshotFormatError(
                f"{where}: state '{name}' has kind {kind!r}; this version restores keyed "
                f"state of kinds {', '.join(STATE_KINDS)}"
            )
        groups = state.get("key_groups", {})
        if not isinstance(groups, Mapping):
            raise UnsupportedSnapshotFormatError(
                f"{where}: state '{name}' has no 'key_groups' mapping "
                f"(found {type(groups).__name__})"
            )
        yield name, kind, _entries(where, name, kind, groups, key_groups)


def _entries(
    where: str, name: str, kind: str, groups: Mapping[Any, Any], key_groups: range
) -> Iterator[tuple[Any, Any]]:
    container = _CONTAINERS.get(kind)
    for kg, entries in groups.items():
        if kg not in key_groups:
            continue
        if not isinstance(entries, Mapping):
            raise UnsupportedSnapshotFormatError(
                f"{where}: state '{name}', key group {kg!r} is a {type(entries).__name__}, "
                "not a mapping of key -> value"
            )
        for key, stored in entries.items():
            if container is not None:
                if not isinstance(stored, container):
                    raise UnsupportedSnapshotFormatError(
                        f"{where}: {kind} state '{name}' holds a {type(stored).__name__} for "
                        f"key {key!r}; {kind} state entries are {container.__name__}s"
                    )
                if not stored:  # an empty list or map is no entry
                    continue
            yield key, stored

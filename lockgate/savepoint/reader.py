"""Reading a checkpoint or savepoint offline: :func:`read` and :class:`Savepoint`.

:func:`read` resolves the path as a restore would
(:func:`lockgate.recovery.restore.resolve_restore_path`: a ``chk-<id>`` folder, a
savepoint folder, or a checkpoint storage root, whose newest intact checkpoint is
read), loads the state file of every operator subtask (channel state, the in-flight
data of unaligned checkpoints, is not operator state and is skipped) and decodes it.
Nothing is written: a path that does not exist is rejected before any storage is
opened.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from ..checkpoint.state_tree import has_pickles
from ..checkpoint.storage_url import open_storage
from ..errors import ConfigurationError
from ..recovery.restore import CHANNEL_STATE_PREFIX, RestoreSpec, resolve_restore_path
from ..runtime.operators.join.interval_join import INTERVAL_JOIN_STATE_FORMAT
from ..runtime.operators.window.operator import WINDOW_STATE_FORMAT
from .decode import StatePart, decode_subtask
from .errors import PickledStateError, SavepointFormatError
from .frame import StateFrame
from .model import OperatorInfo, StateInfo, StateKind
from .rows import state_rows


class _Operator:
    """The decoded state of one operator: per state name, its kind and the part each
    subtask wrote."""

    def __init__(
        self,
        uid: str,
        parallelism: int,
        max_parallelism: int | None,
        states: dict[str, tuple[StateKind, list[tuple[int, StatePart]]]],
    ) -> None:
        self.uid = uid
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.states = states

    def info(self) -> OperatorInfo:
        return OperatorInfo(
            self.uid,
            self.parallelism,
            tuple(
                StateInfo(name, kind, _type_name(parts))
                for name, (kind, parts) in sorted(self.states.items())
            ),
            self.max_parallelism,
        )


class Savepoint:
    """A checkpoint or savepoint read offline (M-S1, M-S3, M-T4): the operators it holds,
    their states, and each state as a :class:`StateFrame`. Every state file was read and
    checked (format, checksum) when the savepoint was read."""

    def __init__(self, path: str, spec: RestoreSpec, operators: dict[str, _Operator]) -> None:
        self.path = path
        self.storage_url = spec.storage_url
        self.checkpoint_id = spec.checkpoint_id
        self.is_savepoint = spec.is_savepoint
        self._operators = operators

    def __repr__(self) -> str:
        kind = "savepoint" if self.is_savepoint else "checkpoint"
        return (
            f"Savepoint(path={self.path!r}, {kind} {self.checkpoint_id}, "
            f"operators={sorted(self._operators)!r})"
        )

    def operators(self) -> dict[str, OperatorInfo]:
        """Per operator uid (sorted): its parallelism and its states (name and kind)."""
        return {uid: self._operators[uid].info() for uid in sorted(self._operators)}

    def state(self, uid: str, name: str) -> StateFrame:
        """The state ``name`` of operator ``uid`` as a :class:`StateFrame`. Raises
        :class:`~lockgate.errors.ConfigurationError` listing the operators (or that
        operator's states) when there is no such operator or state, and
        :class:`~lockgate.savepoint.SavepointFormatError` for the state of a window join,
        window co-group or interval join (listed by :meth:`operators`, not readable)."""
        operator = self._operators.get(uid) if isinstance(uid, str) else None
        if operator is None:
            raise ConfigurationError(
                f"the {self._kind()} has no operator with uid {uid!r}; its operators are "
                f"{sorted(self._operators)!r}"
            )
        entry = operator.states.get(name) if isinstance(name, str) else None
        if entry is None:
            raise ConfigurationError(
                f"operator {uid!r} has no state named {name!r}; its states are "
                f"{sorted(operator.states)!r}"
            )
        kind, parts = entry
        if any(has_pickles(part.data) for _, part in parts):
            raise PickledStateError(
                f"state {name!r} of operator {uid!r} holds pickled values (no type= on its "
                "descriptor, or an operator's own state), and unpickling runs code named by "
                f"the files; read the {self._kind()} with "
                "lockgate.savepoint.read(path, allow_pickle=True) if only you (or a signed "
                "checkpoint) could have written it. Typed state (type=...) reads without it"
            )
        join = _join_operator(parts) if kind is StateKind.RAW else None
        if join is not None:
            raise SavepointFormatError(
                f"operator {uid!r} is {join}: its state {name!r} (the buffered records of "
                "both inputs, in the operator's own format) is not readable with "
                "lockgate.savepoint; the savepoint still restores the job "
                "(restore_from=...), and the joined records are in the job's output"
            )
        return StateFrame(uid, name, kind, state_rows(kind, parts))

    def typed_table(self, uid: str, name: str) -> Any:
        """The typed state table (its type, kind and TTL flag) of state ``name`` of
        operator ``uid`` as one subtask wrote it, or None when that state is not typed."""
        operator = self._operators.get(uid)
        entry = operator.states.get(name) if operator is not None else None
        if entry is None:
            return None
        return next((p.table for _, p in entry[1] if p.table is not None), None)

    def _kind(self) -> str:
        return f"{'savepoint' if self.is_savepoint else 'checkpoint'} {self.checkpoint_id}"


def _type_name(parts: list[tuple[int, StatePart]]) -> str | None:
    return next((p.type_name for _, p in parts if p.type_name), None)


def _join_operator(parts: list[tuple[int, StatePart]]) -> str | None:
    """What join wrote these raw parts (``"an interval join"``, ``"a window join"``), or
    None for any other state."""
    for _, part in parts:
        data = part.data
        if not isinstance(data, dict):
            continue
        fmt = data.get("format")
        if fmt == INTERVAL_JOIN_STATE_FORMAT:
            return "an interval join"
        contents = data.get("contents")
        # the window operator of a.join(b) / a.co_group(b) holds JoinContents
        # ("window arrow join", "window join", "window flat join", "window co_group")
        if fmt == WINDOW_STATE_FORMAT and isinstance(contents, str):
            if contents.startswith("window co_group"):
                return "a window co-group"
            if contents.startswith("window "):
                return "a window join"
    return None


def read(path: str | os.PathLike[str], *, allow_pickle: bool = False) -> Savepoint:
    """Read the checkpoint or savepoint at ``path``: a ``chk-<id>`` folder, a savepoint
    folder, or a checkpoint storage root (its newest intact checkpoint); a local path or
    any URL the checkpoint storage opens.

    Raises :class:`~lockgate.errors.ConfigurationError` for a path that is not a string
    or a local path that does not exist, :class:`~lockgate.recovery.restore.RestoreError`
    when nothing readable is there, and :class:`~lockgate.savepoint.SavepointFormatError`
    for state the offline reader cannot decode (an incremental RocksDB checkpoint: read a
    savepoint instead).

    Nothing in the files is unpickled unless ``allow_pickle=True``: typed state
    (declared with ``type=``) and every state's name and kind read without it; reading
    a pickled state (:meth:`Savepoint.state`) then raises
    :class:`~lockgate.savepoint.PickledStateError`, since unpickling runs code named by
    the files. Allow it for storage only you (or a signed checkpoint) could write."""
    if not isinstance(allow_pickle, bool):
        raise ConfigurationError(f"allow_pickle must be True or False, got {allow_pickle!r}")
    given = _check_path(path)
    spec = resolve_restore_path(given)
    storage = open_storage(spec.storage_url)
    operators: dict[str, _Operator] = {}
    for uid, handles in spec.operators.items():
        if uid.startswith(CHANNEL_STATE_PREFIX):
            continue
        payloads = {
            subtask: storage.read_state(handle, unpickle=allow_pickle)
            for subtask, handle in handles.items()
        }
        operators[uid] = _decode_operator(uid, payloads)
    return Savepoint(given, spec, operators)


def _check_path(path: Any) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path.strip():
        raise ConfigurationError(
            f"lockgate.savepoint.read(path): path must be the folder of a savepoint or "
            f"checkpoint (chk-<id>) or a checkpoint storage folder, got {path!r}"
        )
    local = _local_path(path)
    if local is not None and not os.path.isdir(local):
        problem = "is a file, not a folder" if os.path.exists(local) else "does not exist"
        raise ConfigurationError(
            f"lockgate.savepoint.read({path!r}): {local!r} {problem}; give the folder of a "
            "savepoint or checkpoint (chk-<id>) or a checkpoint storage folder"
        )
    return path


def _local_path(path: str) -> str | None:
    """The local filesystem path ``path`` names, or None for a remote URL."""
    if path.startswith("file://"):
        return urlsplit(path).path
    scheme = path.split(":", 1)[0] if "://" in path else ""
    if scheme:
        return None
    return os.path.abspath(os.path.expanduser(path))


def _decode_operator(uid: str, payloads: dict[int, Any]) -> _Operator:
    states: dict[str, tuple[StateKind, list[tuple[int, StatePart]]]] = {}
    parallelism = max(payloads, default=-1) + 1
    max_parallelism: int | None = None
    for subtask in sorted(payloads):
        payload = payloads[subtask]
        if isinstance(payload, dict) and "state" in payload:
            state = payload["state"]
            if isinstance(payload.get("parallelism"), int):
                parallelism = max(parallelism, payload["parallelism"])
        else:
            state = payload
        decoded = decode_subtask(uid, subtask, state)
        if decoded.max_parallelism is not None:
            max_parallelism = decoded.max_parallelism
        for name, part in decoded.parts.items():
            kind, parts = states.setdefault(name, (part.kind, []))
            if kind is not part.kind:
                raise SavepointFormatError(
                    f"operator {uid!r}: state {name!r} is {kind.value} state in one subtask "
                    f"and {part.kind.value} state in subtask {subtask}"
                )
            parts.append((subtask, part))
    return _Operator(uid, parallelism, max_parallelism, states)

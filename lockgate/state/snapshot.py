"""The state snapshot of one operator subtask that runs a user function (M-T4).

An operator with user-function state snapshots, in one payload:

* ``keyed``: its keyed state (the keyed backend's snapshot view: canonical, or the
  RocksDB backend's incremental payload in checkpoints);
* ``operator``: its operator list / union list state;
* ``broadcast``: its broadcast state (``{name: {key: value}}``);
* ``timers``: its event-time and processing-time timers, by key group (M-W6);
* ``function``: anything else the operator keeps.

The payload is a dict ``{"lockgate_state": 1, "keyed": ..., "operator": ...,
"broadcast": ..., "timers": ..., "function": ...}`` (absent parts are None). Savepoint readers
(:mod:`lockgate.savepoint`) rely on this layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PAYLOAD_MARK = "lockgate_state"
PAYLOAD_VERSION = 1


class OperatorStateSnapshot:
    """The synchronous part of an operator's snapshot (M-T3): the keyed backend's view
    plus copies of the small operator-level states. ``materialize()`` (canonical) or
    ``materialize_to(uploader)`` (incremental checkpoints) is the asynchronous part;
    ``release()`` gives the keyed view back."""

    def __init__(
        self,
        keyed: Any = None,
        operator: dict[str, Any] | None = None,
        broadcast: dict[str, Any] | None = None,
        function: Any = None,
        timers: Any = None,
    ) -> None:
        self.keyed = keyed
        self.operator = operator
        self.broadcast = broadcast
        self.function = function
        self.timers = timers

    def _payload(self, keyed: Any) -> dict[str, Any]:
        timers = self.timers.materialize() if self.timers is not None else None
        return {
            PAYLOAD_MARK: PAYLOAD_VERSION,
            "keyed": keyed,
            "operator": self.operator,
            "broadcast": self.broadcast,
            "timers": timers,
            "function": self.function,
        }

    def materialize(self) -> dict[str, Any]:
        keyed = self.keyed.materialize() if self.keyed is not None else None
        return self._payload(keyed)

    def materialize_to(self, uploader: Any) -> dict[str, Any]:
        keyed = None
        if self.keyed is not None:
            incremental = getattr(self.keyed, "materialize_to", None)
            keyed = incremental(uploader) if callable(incremental) else self.keyed.materialize()
        return self._payload(keyed)

    def release(self) -> None:
        if self.keyed is not None:
            self.keyed.release()
        if self.timers is not None:
            self.timers.release()


def is_operator_payload(state: Any) -> bool:
    return isinstance(state, Mapping) and PAYLOAD_MARK in state


def payload_part(state: Any, part: str) -> Any:
    """``part`` ("keyed", "operator", "broadcast", "timers" or "function") of a restored
    payload.
    A bare keyed snapshot (what keyed operators wrote before operator payloads
    existed) counts as the keyed part."""
    if is_operator_payload(state):
        return state.get(part)
    if part == "keyed" and isinstance(state, Mapping) and "states" in state:
        return state
    return None


def keyed_parts(states: Iterable[Any]) -> list[Any]:
    """The keyed parts of restored payloads (those that have one)."""
    return [k for k in (payload_part(s, "keyed") for s in states) if k is not None]

"""Master hooks: user code that runs on the coordinator at checkpoint time (M-C9).

A hook is called with the checkpoint's id and trigger timestamp before the
sources are triggered. What it returns (anything picklable; None: nothing) is
the hook's master state for that checkpoint: the coordinator stores it with
``storage.write_state(id, f"master-{identifier}", state)`` and lists its handle
under ``"master_states"`` in the checkpoint's ``_metadata``. A hook that raises
aborts the checkpoint with ``TRIGGER_FAILED`` (M-C4). Once the checkpoint is
complete, ``notify_checkpoint_complete`` is called (an exception there is
logged; the checkpoint stays complete).

Hooks run in the thread that triggers the checkpoint, outside the
coordinator's lock (they may take time without blocking acknowledgements);
they may call the coordinator. Identifiers must be unique per coordinator.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


def master_state_name(identifier: str) -> str:
    """The file name of hook ``identifier``'s state inside ``chk-<id>/``."""
    return f"master-{identifier}"


@runtime_checkable
class MasterHook(Protocol):
    """User code run on the coordinator at trigger and completion (M-C9)."""

    @property
    def identifier(self) -> str:
        """Unique among the coordinator's hooks; names the master state."""

    def trigger_checkpoint(self, checkpoint_id: int, timestamp: int) -> Any | None:
        """Return the master state of this checkpoint, or None for none."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is complete (its metadata is durable)."""

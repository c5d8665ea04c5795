"""Falling back past a damaged checkpoint that completed replays committed output
(issue 18 item 2, M-R1, M-R3, M-X2).

A completed checkpoint's notice commits the transactions of the two-phase-commit sinks
it recorded. When it is damaged, restoring an older one writes that output again. The
restore (``restore_from``) and the failover between attempts (``newest_restorable``
with ``newer_than``) refuse such a fallback with a :class:`RestoreError` naming the
checkpoint, the sinks and ``allow_replaying_committed_output``, unless allowed.
"""

from __future__ import annotations

import logging
import os

import pytest

from lockgate.checkpoint.coordinator.completed_store import CompletedCheckpoint
from lockgate.checkpoint.storage_options import StorageOptions
from lockgate.checkpoint.storage_url import open_storage
from lockgate.recovery.restore import (
    CommittedOutputGuard,
    RestoreError,
    newest_restorable,
    resolve_restore_path,
)

SINKS = CommittedOutputGuard({"files": "file sink"})


def checkpoint(storage, checkpoint_id: int, uids: list[str]) -> None:
    handles = {
        uid: {0: storage.write_state(checkpoint_id, f"op-{uid}-0", {"n": checkpoint_id})}
        for uid in uids
    }
    storage.write_metadata(
        checkpoint_id,
        CompletedCheckpoint(
            checkpoint_id, 1, 2, operator_states=handles, job_name="j"
        ).to_metadata(),
    )


def damage(root: str, checkpoint_id: int, what: str = "op-") -> None:
    folder = os.path.join(root, f"chk-{checkpoint_id}")
    name = next(n for n in sorted(os.listdir(folder)) if n.startswith(what))
    with open(os.path.join(folder, name), "r+b") as f:
        f.seek(25)
        f.write(b"\xff\x00\xff")


@pytest.fixture
def root(tmp_path) -> str:
    root = str(tmp_path / "ckpt")
    storage = open_storage(root, StorageOptions())
    checkpoint(storage, 1, ["sums", "files"])
    checkpoint(storage, 2, ["sums", "files"])
    return root


def test_restore_from_refuses_to_fall_back_past_a_damaged_checkpoint_of_a_2pc_sink(root) -> None:
    damage(root, 2)
    with pytest.raises(RestoreError) as refused:
        resolve_restore_path(os.path.join(root, "chk-2"), guard=SINKS)
    text = str(refused.value)
    assert "checkpoint 2 " in text and "'file sink' (uid files)" in text, text
    assert "allow_replaying_committed_output = True" in text
    # the storage root (its newest intact checkpoint) is guarded the same way
    with pytest.raises(RestoreError, match="allow_replaying_committed_output"):
        resolve_restore_path(root, guard=SINKS)


def test_the_failover_between_attempts_refuses_it_too_even_with_nothing_older(root) -> None:
    damage(root, 2)
    storage = open_storage(root)
    with pytest.raises(RestoreError, match="checkpoint 2 .*file sink"):
        newest_restorable(storage, newer_than=0, guard=SINKS)
    # nothing of this run is intact: the attempt would start from the run's initial state
    with pytest.raises(RestoreError, match="checkpoint 2 .*file sink"):
        newest_restorable(storage, newer_than=1, guard=SINKS)


def test_an_unreadable_metadata_counts_as_committed(root) -> None:
    damage(root, 2, "_metadata")
    with pytest.raises(RestoreError, match="checkpoint 2 .*file sink"):
        newest_restorable(open_storage(root), guard=SINKS)


def test_allowed_it_falls_back_with_a_warning(root, caplog) -> None:
    damage(root, 2)
    with caplog.at_level(logging.WARNING, logger="lockgate.recovery.restore"):
        spec = resolve_restore_path(
            os.path.join(root, "chk-2"), guard=CommittedOutputGuard(SINKS.sinks, allow=True)
        )
    assert spec.checkpoint_id == 1
    assert any(
        "allow_replaying_committed_output=True" in r.getMessage() and "file sink" in r.getMessage()
        for r in caplog.records
    )


def test_a_damaged_checkpoint_without_2pc_sinks_still_falls_back(tmp_path) -> None:
    root = str(tmp_path / "ckpt")
    storage = open_storage(root, StorageOptions())
    checkpoint(storage, 1, ["sums"])
    checkpoint(storage, 2, ["sums"])
    damage(root, 2)
    assert newest_restorable(storage, guard=SINKS).checkpoint_id == 1
    assert newest_restorable(storage, guard=CommittedOutputGuard({})).checkpoint_id == 1

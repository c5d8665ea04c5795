"""Shared state files of incremental checkpoints (M-R4) and their reference counts in
the completed-checkpoint store (M-C8): retention never deletes a file a retained
checkpoint uses, recovery re-registers, aborted checkpoints (M-C5, M-C6) do not leak,
and restore verifies shared files (M-R1)."""

from __future__ import annotations

import json
import zlib
from typing import Any

import pytest
from test_coordinator_harness import SINKS, SOURCES, TASKS, make_harness

from lockgate.checkpoint.coordinator import AckResult
from lockgate.checkpoint.coordinator.completed_store import (
    CompletedCheckpoint,
    CompletedCheckpointStore,
)
from lockgate.checkpoint.shared_registry import (
    SHARED_FOLDER,
    SharedFileTracker,
    SharedStateRegistry,
    SharedStateUploader,
    read_shared_file,
)
from lockgate.checkpoint.storage import CorruptCheckpointError, MemoryCheckpointStorage
from lockgate.checkpoint.types import CheckpointFailureReason, StateHandle
from lockgate.errors import ConfigurationError
from lockgate.recovery.restore import newest_restorable

R = CheckpointFailureReason


def shared(storage: Any, name: str, data: bytes | None = None) -> StateHandle:
    """Write the shared file ``shared/op/0/<name>``; its handle."""
    data = data if data is not None else f"contents of {name}".encode()
    path = f"{SHARED_FOLDER}/op/0/{name}"
    storage.write_file(path, data)
    return StateHandle(path, len(data), zlib.crc32(data))


def checkpoint(storage: Any, checkpoint_id: int, files: list[StateHandle]) -> CompletedCheckpoint:
    """A completed checkpoint (metadata written) whose one state references ``files``."""
    handle = storage.write_state(checkpoint_id, "op-0", {"payload": checkpoint_id})
    handle = StateHandle(handle.path, handle.size, handle.checksum, tuple(files))
    completed = CompletedCheckpoint(checkpoint_id, 0, 0, {"op": {0: handle}})
    completed.external_path = storage.write_metadata(checkpoint_id, completed.to_metadata())
    return completed


def existing(storage: Any, handles: list[StateHandle]) -> list[bool]:
    return [storage.exists(h.path) for h in handles]


# -- the registry -----------------------------------------------------------------------------


def test_m_r4_a_shared_file_is_deleted_only_when_no_registered_checkpoint_references_it() -> None:
    storage = MemoryCheckpointStorage()
    registry = SharedStateRegistry(storage)
    a, b = shared(storage, "a"), shared(storage, "b")
    registry.register(1, [StateHandle("chk-1/op", 1, 1, (a,))])
    registry.register(2, [StateHandle("chk-2/op", 1, 1, (a, b)), StateHandle("x", 1, 1, (b,))])
    registry.register(2, [StateHandle("chk-2/op", 1, 1, (a, b))])  # counted once per checkpoint
    assert (registry.references(a.path), registry.references(b.path)) == (2, 1)
    assert registry.unregister(1) == []
    assert existing(storage, [a, b]) == [True, True]
    assert registry.unregister(2) == sorted([a.path, b.path])
    assert existing(storage, [a, b]) == [False, False]
    assert registry.unregister(2) == []  # unknown: nothing happens


def test_discard_unreferenced_spares_files_a_registered_checkpoint_uses() -> None:
    storage = MemoryCheckpointStorage()
    registry = SharedStateRegistry(storage)
    kept, new = shared(storage, "kept"), shared(storage, "new")
    registry.register(1, [StateHandle("chk-1/op", 1, 1, (kept,))])
    assert registry.discard_unreferenced([StateHandle("chk-2/op", 1, 1, (kept, new))]) == [new.path]
    assert existing(storage, [kept, new]) == [True, False]


# -- the store: retention, recovery, shutdown (M-C8) -----------------------------------------


def test_m_c8_retention_never_deletes_a_shared_file_a_retained_checkpoint_uses() -> None:
    storage = MemoryCheckpointStorage()
    store = CompletedCheckpointStore(storage, retained=2)
    base = shared(storage, "base")  # used by every checkpoint
    own: dict[int, StateHandle] = {}
    for checkpoint_id in range(1, 7):
        own[checkpoint_id] = shared(storage, f"own-{checkpoint_id}")
        previous = [own[checkpoint_id - 1]] if checkpoint_id > 1 else []
        store.add(checkpoint(storage, checkpoint_id, [base, *previous, own[checkpoint_id]]))
        for retained in store.all():  # every retained checkpoint is whole
            for handle in retained.handles():
                assert all(existing(storage, list(handle.shared))), retained.checkpoint_id
    assert [c.checkpoint_id for c in store.all()] == [5, 6]
    assert sorted(storage.list_files(SHARED_FOLDER)) == sorted(
        [base.path, own[4].path, own[5].path, own[6].path]
    )


def test_m_c8_recover_registers_the_shared_files_of_adopted_checkpoints() -> None:
    storage = MemoryCheckpointStorage()
    first = CompletedCheckpointStore(storage, retained=2)
    a, only_1 = shared(storage, "a"), shared(storage, "only-1")
    first.add(checkpoint(storage, 1, [a, only_1]))
    first.add(checkpoint(storage, 2, [a]))
    store = CompletedCheckpointStore(storage, retained=2)  # a restarted coordinator's store
    assert [c.checkpoint_id for c in store.recover()] == [1, 2]
    assert store.shared.registered() == [1, 2] and store.shared.references(a.path) == 2
    store.add(checkpoint(storage, 3, [shared(storage, "c")]))  # discards checkpoint 1
    assert existing(storage, [a, only_1]) == [True, False]
    store.add(checkpoint(storage, 4, []))  # discards checkpoint 2, the last user of a
    assert existing(storage, [a]) == [False]


def test_recover_deletes_shared_files_no_completed_checkpoint_references() -> None:
    storage = MemoryCheckpointStorage()
    CompletedCheckpointStore(storage, retained=2).add(
        checkpoint(storage, 1, [shared(storage, "a")])
    )
    orphan = shared(storage, "of-a-task-that-died-before-acknowledging")
    CompletedCheckpointStore(storage, retained=2).recover()
    assert storage.list_files(SHARED_FOLDER) == [f"{SHARED_FOLDER}/op/0/a"]
    assert not storage.exists(orphan.path)


def test_recover_keeps_every_shared_file_when_a_checkpoint_cannot_be_read() -> None:
    storage = MemoryCheckpointStorage()
    a = shared(storage, "a")
    checkpoint(storage, 1, [a])
    storage.files["chk-1/_metadata"] = b"{not json"
    store = CompletedCheckpointStore(storage, retained=2)
    assert store.recover() == []
    assert storage.exists(a.path), "a file of an unreadable checkpoint was deleted"


def test_add_refuses_a_checkpoint_that_references_a_shared_file_that_is_gone() -> None:
    storage = MemoryCheckpointStorage()
    store = CompletedCheckpointStore(storage, retained=1)
    a = shared(storage, "a")
    store.add(checkpoint(storage, 1, [a]))
    store.add(checkpoint(storage, 2, []))  # retention deletes a
    stale = checkpoint(storage, 3, [a])  # a task reused a without knowing it was gone
    with pytest.raises(CorruptCheckpointError, match="no longer exists"):
        store.add(stale)
    assert [c.checkpoint_id for c in store.all()] == [2] and storage.read_latest() == 2


def test_m_c8_shutdown_discarding_deletes_every_shared_file_retaining_keeps_them() -> None:
    storage = MemoryCheckpointStorage()
    store = CompletedCheckpointStore(storage, retained=2)
    files = [shared(storage, "a"), shared(storage, "b")]
    store.add(checkpoint(storage, 1, files))
    store.shutdown(retain=True)
    assert all(existing(storage, files)) and store.all() == []
    assert store.shared.registered() == [1]  # late acknowledgements must still see them
    store = CompletedCheckpointStore(storage, retained=2)
    store.recover()
    shared(storage, "leftover")
    store.shutdown(retain=False)
    assert storage.list_files(SHARED_FOLDER) == []


def test_metadata_lists_shared_files_only_for_handles_that_have_them() -> None:
    storage = MemoryCheckpointStorage()
    a = shared(storage, "a")
    with_shared = checkpoint(storage, 1, [a])
    without = checkpoint(storage, 2, [])
    doc = json.loads(json.dumps(with_shared.to_metadata()))
    assert doc["operators"]["op"]["0"]["shared"] == [
        {"path": a.path, "size": a.size, "checksum": a.checksum}
    ]
    assert "shared" not in without.to_metadata()["operators"]["op"]["0"]
    restored = CompletedCheckpoint.from_metadata(doc)
    assert restored.operator_states == with_shared.operator_states


# -- the coordinator's abort path (M-C5, M-C6) --------------------------------------------------


def ack_with_shared(h: Any, checkpoint_id: int, task: Any, files: list[StateHandle]) -> AckResult:
    [(uid, handle)] = h.handles(checkpoint_id, task).items()
    handle = StateHandle(handle.path, handle.size, handle.checksum, tuple(files))
    return h.ack(checkpoint_id, task, handles={uid: handle})


def test_m_c6_an_aborted_checkpoint_deletes_the_shared_files_it_uploaded_not_reused_ones() -> None:
    h = make_harness()
    base = shared(h.storage, "base")
    first = h.trigger()
    for task in TASKS:
        ack_with_shared(h, first, task, [base] if task == SINKS[0] else [])
    second = h.trigger()
    new = shared(h.storage, "new")
    ack_with_shared(h, second, SINKS[0], [base, new])
    h.coordinator.receive_decline(SOURCES[0], second, R.DECLINED)
    assert h.gateway.abort_reason(second) is R.DECLINED
    assert existing(h.storage, [base, new]) == [True, False]


def test_m_c5_a_late_acknowledgement_deletes_its_unreferenced_shared_files() -> None:
    h = make_harness()
    base = shared(h.storage, "base")
    first = h.trigger()
    for task in TASKS:
        ack_with_shared(h, first, task, [base] if task == SINKS[0] else [])
    second = h.trigger()
    h.coordinator.receive_decline(SOURCES[0], second, R.DECLINED)
    late = shared(h.storage, "late")
    assert ack_with_shared(h, second, SINKS[0], [base, late]) is AckResult.DISCARDED
    assert existing(h.storage, [base, late]) == [True, False]
    stray = shared(h.storage, "stray")
    assert ack_with_shared(h, 99, SINKS[0], [stray]) is AckResult.UNKNOWN
    assert not h.storage.exists(stray.path)


def test_m_c5_a_late_acknowledgement_after_shutdown_keeping_checkpoints_spares_their_files() -> (
    None
):
    h = make_harness()
    base = shared(h.storage, "base")
    first = h.trigger()
    for task in TASKS:
        ack_with_shared(h, first, task, [base] if task == SINKS[0] else [])
    second = h.trigger()
    h.coordinator.shutdown(retain_completed=True)  # e.g. cancelled, checkpoints retained
    new = shared(h.storage, "new")
    assert ack_with_shared(h, second, SINKS[0], [base, new]) is AckResult.DISCARDED
    assert existing(h.storage, [base, new]) == [True, False]


def test_a_checkpoint_reusing_a_deleted_shared_file_fails_and_its_uploads_are_deleted() -> None:
    h = make_harness(retained=1)
    old = shared(h.storage, "old")
    first = h.trigger()
    h.ack_all(first)
    gone = StateHandle(f"{SHARED_FOLDER}/op/0/deleted-long-ago", 3, 3)
    second = h.trigger()
    new = shared(h.storage, "new")
    for task in TASKS:
        ack_with_shared(h, second, task, [gone, new] if task == SINKS[1] else [])
    assert h.gateway.abort_reason(second) is R.FINALIZE_FAILED
    assert existing(h.storage, [old, new]) == [True, False]
    assert h.storage.read_latest() == first


# -- the task side: uploader and tracker ------------------------------------------------------------


def test_the_tracker_offers_only_files_of_a_checkpoint_known_to_be_complete() -> None:
    storage = MemoryCheckpointStorage()
    tracker = SharedFileTracker()
    up1 = tracker.uploader(storage, 1, "op/0")
    a = up1.upload("db/1.sst", b"aaaa", "1.sst")
    assert a.path.startswith("shared/op/0/1-") and a.path.endswith("-1.sst")
    tracker.snapshot_done(1, [up1])
    up2 = tracker.uploader(storage, 2, "op/0")
    assert up2.reuse("db/1.sst") is None, "checkpoint 1 is not known to be complete"
    tracker.complete(1)
    up3 = tracker.uploader(storage, 3, "op/0")
    assert up3.reuse("db/1.sst") == a and up3.reused_bytes == 4
    assert tracker.uploader(storage, 3, "other/0").reuse("db/1.sst") is None
    assert up3.referenced() == (a,)


def test_an_abort_makes_the_next_checkpoint_upload_everything_again() -> None:
    storage = MemoryCheckpointStorage()
    tracker = SharedFileTracker()
    up = tracker.uploader(storage, 1, "op/0")
    up.upload("k", b"x")
    tracker.snapshot_done(1, [up])
    tracker.complete(1)
    assert tracker.confirmed_checkpoint == 1
    tracker.abort(2)
    assert tracker.confirmed_checkpoint is None
    assert tracker.uploader(storage, 3, "op/0").reuse("k") is None


def test_an_older_completion_never_replaces_a_newer_one() -> None:
    storage = MemoryCheckpointStorage()
    tracker = SharedFileTracker()
    for checkpoint_id in (1, 2):
        up = tracker.uploader(storage, checkpoint_id, "op/0")
        up.upload(f"k{checkpoint_id}", b"x")
        tracker.snapshot_done(checkpoint_id, [up])
    tracker.complete(2)
    tracker.complete(1)  # late and dropped with checkpoint 2's completion
    assert tracker.confirmed_checkpoint == 2
    assert tracker.uploader(storage, 3, "op/0").reuse("k2") is not None


def test_discard_uploads_deletes_only_what_the_uploader_wrote() -> None:
    storage = MemoryCheckpointStorage()
    old = shared(storage, "old")
    up = SharedStateUploader(storage, 2, "op/0", {"old": old})
    assert up.reuse("old") == old
    new = up.upload("new", b"new")
    up.discard_uploads()
    assert existing(storage, [old, new]) == [True, False]


def test_owner_names_become_safe_path_segments() -> None:
    up = SharedStateUploader(MemoryCheckpointStorage(), 1, "my op/../x:y/0")
    assert up.folder == "shared/my_op/_../x_y/0"
    handle = up.upload("k", b"1", name="../evil")
    assert ".." not in handle.path.split("/") and handle.path.endswith("-.._evil")
    assert up.storage.read_file(handle.path) == b"1"


@pytest.mark.parametrize(
    "args, match",
    [
        ((-1, "op/0"), "checkpoint id"),
        ((1, ""), "owner"),
        ((True, "op/0"), "checkpoint id"),
    ],
)
def test_uploader_arguments_are_checked(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        SharedStateUploader(MemoryCheckpointStorage(), *args)


# -- restore verifies shared files (M-R1) -----------------------------------------------------------


def test_m_r1_restore_skips_a_checkpoint_whose_shared_file_is_damaged_or_missing() -> None:
    storage = MemoryCheckpointStorage()
    store = CompletedCheckpointStore(storage, retained=3)
    a, b = shared(storage, "a"), shared(storage, "b")
    store.add(checkpoint(storage, 1, [a]))
    store.add(checkpoint(storage, 2, [a, b]))
    store.add(checkpoint(storage, 3, [b]))
    spec = newest_restorable(storage)
    assert spec is not None and spec.checkpoint_id == 3
    storage.write_file(b.path, b"tampered")
    spec = newest_restorable(storage)
    assert spec is not None and spec.checkpoint_id == 1
    storage.delete_file(a.path)
    assert newest_restorable(storage) is None
    with pytest.raises(CorruptCheckpointError, match="missing"):
        read_shared_file(storage, a)

"""Task-local recovery of the RocksDB backend (issue 43 part 3; M-R4, M-R1): a subtask
restarted on the same host restores its SST files from its local copies, not from the
checkpoint storage; a copy that does not match its handle is never used."""

from __future__ import annotations

import os
from typing import Any

import pytest
from test_rocksdb_backend import canonical, checkpoint, filled

import lockgate as lg
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.checkpoint.shared_registry import SharedFileTracker
from lockgate.checkpoint.storage import CorruptCheckpointError
from lockgate.state.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.state.rocksdb.local_copies import copy_name


@pytest.fixture
def make(tmp_path: Any) -> Any:
    """RocksDB backends whose working folders (and local copies) are under ``tmp_path``."""
    created: list[RocksDBKeyedStateBackend] = []

    def factory(**kwargs: Any) -> RocksDBKeyedStateBackend:
        b = RocksDBKeyedStateBackend("op", 128, local_dir=str(tmp_path / "local"), **kwargs)
        created.append(b)
        return b

    yield factory
    for b in created:
        b.close()


def shared_files(storage_root: str) -> list[str]:
    out = []
    for folder, _, files in os.walk(os.path.join(storage_root, "shared")):
        out.extend(os.path.join(folder, f) for f in files)
    return out


def test_m_r4_a_restart_restores_from_the_local_copies_without_the_storage(
    make: Any, tmp_path: Any
) -> None:
    root = str(tmp_path / "ckpt")
    storage = FileSystemCheckpointStorage(root)
    source = filled(make, local_recovery=True)
    payload, _ = checkpoint(source, storage, SharedFileTracker(), 1)
    assert payload["sst"], "the checkpoint references SST files"
    expected = canonical(source)
    source.close()  # the subtask's process is gone; its local copies stay
    for path in shared_files(root):
        os.unlink(path)  # a restore that read the storage would fail now
    target = make(local_recovery=True)
    target.restore([payload], range(128), storage=storage)
    assert canonical(target) == expected
    copies = target.local_copies(storage.url)
    assert copies is not None
    assert (copies.restored_locally, copies.restored_remotely) == (len(payload["sst"]), 0)


def test_without_local_recovery_the_same_restore_needs_the_storage(
    make: Any, tmp_path: Any
) -> None:
    root = str(tmp_path / "ckpt")
    storage = FileSystemCheckpointStorage(root)
    source = filled(make)
    payload, _ = checkpoint(source, storage, SharedFileTracker(), 1)
    source.close()
    for path in shared_files(root):
        os.unlink(path)
    with pytest.raises(CorruptCheckpointError, match="is missing"):
        make().restore([payload], range(128), storage=storage)


def test_a_damaged_local_copy_is_dropped_and_the_storage_file_read(
    make: Any, tmp_path: Any
) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "ckpt"))
    source = filled(make, local_recovery=True)
    payload, _ = checkpoint(source, storage, SharedFileTracker(), 1)
    expected = canonical(source)
    copies = source.local_copies(storage.url)
    assert copies is not None
    handle = next(iter(payload["sst"].values()))
    damaged = os.path.join(copies.folder, copy_name(handle))
    # the copy is a hard link to the snapshot's file: replace it, as a disk fault would
    with open(damaged, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF
    os.unlink(damaged)
    with open(damaged, "wb") as f:
        f.write(data)
    source.close()
    target = make(local_recovery=True)
    target.restore([payload], range(128), storage=storage)
    assert canonical(target) == expected, "the damaged copy was not used"
    mine = target.local_copies(storage.url)
    assert mine is not None and mine.restored_remotely == 1
    assert mine.restored_locally == len(payload["sst"]) - 1
    assert not os.path.exists(damaged), "a copy that does not match is deleted"


def test_only_the_last_two_snapshots_files_are_kept(make: Any, tmp_path: Any) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "ckpt"))
    tracker = SharedFileTracker()
    b = filled(make, local_recovery=True)
    state = b.get_state(lg.ValueStateDescriptor("value", default=0))
    payloads = []
    for i in range(1, 5):
        for k in range(2000):  # new rows: every checkpoint adds SST files
            b.current_key = f"round{i}-{k}"
            state.update(k)
        b.db.compact_range(None, None)  # and compaction replaces older ones
        payloads.append(checkpoint(b, storage, tracker, i)[0])
    copies = b.local_copies(storage.url)
    assert copies is not None
    kept = set(os.listdir(copies.folder))
    wanted = {copy_name(h) for p in payloads[-2:] for h in p["sst"].values()}
    assert kept == wanted
    assert {copy_name(h) for h in payloads[0]["sst"].values()} - wanted, "older files went"


def test_local_recovery_needs_incremental_checkpoints() -> None:
    with pytest.raises(lg.ConfigurationError, match="incremental=True"):
        lg.RocksDBStateBackend(incremental=False, local_recovery=True)
    with pytest.raises(lg.ConfigurationError, match="True or False"):
        lg.RocksDBStateBackend(local_recovery="yes")  # type: ignore[arg-type]

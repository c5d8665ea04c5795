"""``lockgate checkpoint export CHK DEST`` on a hand-made incremental checkpoint (M-S3,
M-R4): the export holds every state and shared file, verified, names nothing outside
itself, restores on its own, and refuses what it cannot do with a clear error. The
same with a real RocksDB job: ``tests/integration/test_checkpoint_export.py``."""

from __future__ import annotations

import os
import pickle
import shutil
from typing import Any

import pytest

from lockgate import cli
from lockgate.checkpoint.coordinator import CompletedCheckpoint
from lockgate.checkpoint.export import ExportError, export_checkpoint
from lockgate.checkpoint.fs_storage import HEADER_SIZE, FileSystemCheckpointStorage
from lockgate.checkpoint.savepoints import read_savepoint
from lockgate.checkpoint.shared_registry import SharedStateUploader, read_shared_file
from lockgate.checkpoint.storage import METADATA, CorruptCheckpointError
from lockgate.errors import ConfigurationError
from lockgate.recovery.restore import resolve_restore_path
from lockgate.state.canonical import NATIVE_FORMAT

SST = {"000007.sst": b"sst seven " * 50, "000009.sst": b"sst nine " * 70}


def make_incremental_checkpoint(root: str, checkpoint_id: int = 4) -> FileSystemCheckpointStorage:
    """A completed checkpoint whose RocksDB-like payload references two shared files, one
    uploaded by an earlier checkpoint (2) and one by this one; plus a plain state file and
    a master state."""
    storage = FileSystemCheckpointStorage(root)
    earlier = SharedStateUploader(storage, 2, "sums/0")
    old = earlier.upload("db/000007.sst", SST["000007.sst"], "000007.sst")
    uploader = SharedStateUploader(storage, checkpoint_id, "sums/0", {"db/000007.sst": old})
    assert uploader.reuse("db/000007.sst") == old
    new = uploader.upload("db/000009.sst", SST["000009.sst"], "000009.sst")
    native = {
        "format": NATIVE_FORMAT,
        "version": 1,
        "max_parallelism": 128,
        "storage_url": storage.url,
        "states": {"total": {"kind": "value", "id": 1}},
        "sst": {"000007.sst": old, "000009.sst": new},
        "private": {"CURRENT": b"MANIFEST-000011\n"},
        "key_group_span": (0, 128),
    }
    sums = storage.write_state(
        checkpoint_id,
        "op-sums-0",
        {
            "operator": "sums",
            "subtask": 0,
            "parallelism": 1,
            "state": {"keyed": native, "timers": None},
        },
    )
    sums = sums.__class__(sums.path, sums.size, sums.checksum, uploader.referenced())
    source = storage.write_state(
        checkpoint_id,
        "op-numbers-0",
        {"operator": "numbers", "subtask": 0, "parallelism": 1, "state": {"next": 42}},
    )
    master = storage.write_state(checkpoint_id, "master-offsets", {"topic": 3})
    checkpoint = CompletedCheckpoint(
        checkpoint_id,
        1000,
        2000,
        {"sums": {0: sums}, "numbers": {0: source}},
        {"offsets": master},
        job_name="sums",
    )
    storage.write_metadata(checkpoint_id, checkpoint.to_metadata())
    storage.write_latest(checkpoint_id)
    return storage


def files_under(root: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names
    )


def test_m_s3_m_r4_an_export_holds_every_file_and_restores_after_the_source_is_deleted(
    tmp_path: Any,
) -> None:
    source = make_incremental_checkpoint(str(tmp_path / "ckpt"))
    dest = str(tmp_path / "export")
    done = export_checkpoint(str(tmp_path / "ckpt" / "chk-4"), dest)
    assert (done.checkpoint_id, done.state_files, done.shared_files) == (4, 3, 2)
    assert done.location == dest
    files = files_under(dest)
    assert METADATA in files and len([f for f in files if f.startswith("shared/")]) == 2
    shutil.rmtree(source.url)

    spec = resolve_restore_path(dest)  # reads and checks every state and shared file
    assert spec.checkpoint_id == 4 and spec.storage_url == dest
    exported = FileSystemCheckpointStorage(dest)
    checkpoint = read_savepoint(exported)
    assert not checkpoint.is_savepoint, "an exported checkpoint stays a checkpoint"
    assert exported.read_state(checkpoint.master_states["offsets"]) == {"topic": 3}
    assert exported.read_state(checkpoint.operator_states["numbers"][0])["state"] == {"next": 42}
    sums = checkpoint.operator_states["sums"][0]
    native = exported.read_state(sums)["state"]["keyed"]
    assert native["storage_url"] == dest, "the RocksDB payload names the export"
    assert {name: read_shared_file(exported, h) for name, h in native["sst"].items()} == SST
    assert [h.path for h in sums.shared] == sorted(h.path for h in native["sst"].values())
    with open(os.path.join(dest, METADATA), "rb") as f:
        assert str(tmp_path / "ckpt").encode() not in f.read(), "no path back to the source"


def test_the_newest_checkpoint_of_a_storage_and_an_export_of_an_export(tmp_path: Any) -> None:
    make_incremental_checkpoint(str(tmp_path / "ckpt"), checkpoint_id=6)
    first = export_checkpoint(str(tmp_path / "ckpt"), str(tmp_path / "a"))
    assert first.checkpoint_id == 6 and first.source.endswith("chk-6")
    again = export_checkpoint(str(tmp_path / "a"), str(tmp_path / "b"))  # how to move one
    shutil.rmtree(tmp_path / "a")
    assert resolve_restore_path(again.location).checkpoint_id == 6
    native = FileSystemCheckpointStorage(again.location)
    sums = read_savepoint(native).operator_states["sums"][0]
    assert native.read_state(sums)["state"]["keyed"]["storage_url"] == again.location


def test_the_cli_exports_and_prints_where_and_what(tmp_path: Any, capsys: Any) -> None:
    make_incremental_checkpoint(str(tmp_path / "ckpt"))
    rc = cli.main(
        ["checkpoint", "export", str(tmp_path / "ckpt" / "chk-4"), str(tmp_path / "export")]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "exported checkpoint 4" in out and str(tmp_path / "export") in out
    assert "3 state files, 2 shared files" in out


def test_an_existing_non_empty_destination_is_refused(tmp_path: Any, capsys: Any) -> None:
    make_incremental_checkpoint(str(tmp_path / "ckpt"))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    rc = cli.main(["checkpoint", "export", str(tmp_path / "ckpt"), str(tmp_path / "busy")])
    assert rc == 2
    assert "not empty" in capsys.readouterr().err
    assert os.listdir(tmp_path / "busy") == ["notes.txt"]
    (tmp_path / "empty").mkdir()  # an empty folder is fine
    assert export_checkpoint(str(tmp_path / "ckpt"), str(tmp_path / "empty")).state_files == 3
    with pytest.raises(ConfigurationError, match="is a file"):
        export_checkpoint(str(tmp_path / "ckpt"), str(tmp_path / "busy" / "notes.txt"))


def test_missing_and_incomplete_checkpoints_are_named_in_the_error(
    tmp_path: Any, capsys: Any
) -> None:
    rc = cli.main(["checkpoint", "export", str(tmp_path / "nowhere"), str(tmp_path / "x")])
    assert rc == 2 and "no such folder" in capsys.readouterr().err
    storage = make_incremental_checkpoint(str(tmp_path / "ckpt"))
    storage.write_state(5, "op-sums-0", "never completed")
    rc = cli.main(["checkpoint", "export", str(tmp_path / "ckpt" / "chk-5"), str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert rc == 1 and "chk-5" in err and "no _metadata" in err
    (tmp_path / "empty-storage").mkdir()
    with pytest.raises(ExportError, match="holds no completed checkpoint"):
        export_checkpoint(str(tmp_path / "empty-storage"), str(tmp_path / "y"))
    with pytest.raises(ConfigurationError, match="memory://"):
        export_checkpoint(str(tmp_path / "ckpt"), "memory://somewhere")
    assert cli.main(["checkpoint"]) == 2, "an action is required"


@pytest.mark.parametrize("victim", ["shared", "state"])
def test_a_damaged_file_fails_the_export_naming_it_and_leaves_no_metadata(
    tmp_path: Any, capsys: Any, victim: str
) -> None:
    storage = make_incremental_checkpoint(str(tmp_path / "ckpt"))
    checkpoint = CompletedCheckpoint.from_metadata(storage.read_metadata(4))
    handle = checkpoint.operator_states["sums"][0]
    path = handle.shared[0].path if victim == "shared" else handle.path
    with open(os.path.join(storage.url, path), "r+b") as f:
        f.seek(HEADER_SIZE + 5)
        byte = f.read(1)
        f.seek(HEADER_SIZE + 5)
        f.write(bytes([byte[0] ^ 0xFF]))
    rc = cli.main(["checkpoint", "export", str(tmp_path / "ckpt"), str(tmp_path / "export")])
    err = capsys.readouterr().err
    assert rc == 1
    assert path in err and "damaged" in err and "were deleted" in err
    assert files_under(str(tmp_path / "export")) == [], "what the export wrote is gone"
    with pytest.raises(CorruptCheckpointError):
        export_checkpoint(str(tmp_path / "ckpt"), str(tmp_path / "export-2"))


def test_a_payload_the_export_cannot_read_says_how_to_fix_it(
    tmp_path: Any, monkeypatch: Any
) -> None:
    make_incremental_checkpoint(str(tmp_path / "ckpt"))

    def unreadable(data: bytes) -> Any:
        raise ModuleNotFoundError("No module named 'my_job_helpers'")

    monkeypatch.setattr(pickle, "loads", unreadable)
    with pytest.raises(ExportError, match="PYTHONPATH"):
        export_checkpoint(str(tmp_path / "ckpt"), str(tmp_path / "export"))

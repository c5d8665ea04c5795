"""``lockgate checkpoint export CHK DEST`` on a hand-made incremental checkpoint (M-S3,
M-R4): the export holds every state and shared file, verified, names nothing outside
itself, restores on its own, and refuses what it cannot do with a clear error. The
same with a real RocksDB job: ``tests/integration/test_checkpoint_export.py``."""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import zlib
from typing import Any

import pytest

from lockgate import cli
from lockgate.checkpoint.coordinator import CompletedCheckpoint
from lockgate.checkpoint.export import ExportError, export_checkpoint
from lockgate.checkpoint.fs_storage import (
    HEADER_SIZE,
    KIND_PICKLE,
    FileSystemCheckpointStorage,
    encode_file,
)
from lockgate.checkpoint.savepoints import read_savepoint
from lockgate.checkpoint.shared_registry import SharedStateUploader, read_shared_file
from lockgate.checkpoint.storage import METADATA, CorruptCheckpointError
from lockgate.checkpoint.types import StateHandle
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
    assert native["storage_url"] == str(tmp_path / "ckpt"), "state files are copied unread"
    restored = spec.operator("sums", 0, 1)
    assert restored is not None
    native = restored.own()["keyed"]
    assert native["storage_url"] == dest, "a restore reads the shared files from the export"
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
    restored = resolve_restore_path(again.location).operator("sums", 0, 1)
    assert restored is not None
    assert restored.own()["keyed"]["storage_url"] == again.location


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


class Tripwire:
    """Unpickling it creates the file ``marker``: proof that the export ran the pickle."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.marker, "w"))


def plant_tripwire(storage: FileSystemCheckpointStorage, checkpoint_id: int, marker: str) -> None:
    """Replace the state file that references shared files (the one an export used to
    rewrite) with an unsigned pickle that creates ``marker`` when unpickled, and rewrite
    ``_metadata`` so that its size and CRC32 match (what anyone who can write the storage
    can do)."""
    checkpoint = CompletedCheckpoint.from_metadata(storage.read_metadata(checkpoint_id))
    sums = checkpoint.operator_states["sums"][0]
    assert sums.shared, "the tripwire sits in the state file that references shared files"
    payload = pickle.dumps(Tripwire(marker))
    data = encode_file(payload, KIND_PICKLE)
    with open(os.path.join(storage.url, sums.path), "wb") as f:
        f.write(data)
    operators = dict(checkpoint.operator_states)
    operators["sums"] = {0: StateHandle(sums.path, len(data), zlib.crc32(payload), sums.shared)}
    forged = dataclasses.replace(checkpoint, operator_states=operators)
    storage.write_metadata(checkpoint_id, forged.to_metadata())


def test_exporting_an_unsigned_checkpoint_never_unpickles_its_state(
    tmp_path: Any, capsys: Any
) -> None:
    """Issue 37 item 8: the export only reads its source. A state file someone else wrote
    is copied byte for byte and checked (size, CRC32, MAC with a key), never unpickled:
    the tripwire must not go off, through the API or the command line."""
    storage = make_incremental_checkpoint(str(tmp_path / "ckpt"))
    marker = str(tmp_path / "tripwire-went-off")
    plant_tripwire(storage, 4, marker)
    hostile = CompletedCheckpoint.from_metadata(storage.read_metadata(4)).operator_states["sums"][0]
    with open(os.path.join(storage.url, hostile.path), "rb") as f:
        hostile_bytes = f.read()

    done = export_checkpoint(str(tmp_path / "ckpt" / "chk-4"), str(tmp_path / "export"))
    assert not os.path.exists(marker), "the export unpickled a state file of its source"
    assert (done.state_files, done.shared_files) == (3, 2), "every file is still exported"
    exported = read_savepoint(FileSystemCheckpointStorage(done.location))
    copied = exported.operator_states["sums"][0]
    with open(os.path.join(done.location, copied.path), "rb") as f:
        assert f.read() == hostile_bytes, "the state file is copied as it is"

    rc = cli.main(["checkpoint", "export", str(tmp_path / "ckpt"), str(tmp_path / "export-2")])
    assert rc == 0, capsys.readouterr().err
    assert not os.path.exists(marker), "lockgate checkpoint export unpickled a state file"


def test_an_export_never_calls_the_unpickler(tmp_path: Any, monkeypatch: Any) -> None:
    """Nothing of the export deserializes state, so a state file whose classes are not
    importable here (the job's own modules) exports all the same."""
    make_incremental_checkpoint(str(tmp_path / "ckpt"))

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the export unpickled a state file")

    monkeypatch.setattr(pickle, "loads", refused)
    monkeypatch.setattr(pickle, "load", refused)
    monkeypatch.setattr(pickle, "Unpickler", refused)
    done = export_checkpoint(str(tmp_path / "ckpt"), str(tmp_path / "export"))
    assert (done.state_files, done.shared_files) == (3, 2)

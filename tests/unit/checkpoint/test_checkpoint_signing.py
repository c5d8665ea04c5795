"""Checkpoints are code (issue 18 item 6, M-R1, M-R3): permissions, signing, verification
without unpickling.

A state file is a pickle and restoring one runs it. These tests pin down:

* files the storage creates are ``0o600`` and its folders ``0o700`` (configurable);
* the driver's check of a checkpoint before a restore never unpickles a state file;
* with ``checkpoint_config.signing_key`` every file carries an HMAC-SHA256; a file an
  attacker rewrote (unsigned, or signed with another key, ``_metadata`` included) is
  refused before any of it is unpickled;
* savepoints and ``lockgate checkpoint export`` keep working, signed.
"""

from __future__ import annotations

import json
import os
import pickle
import stat
import zlib
from dataclasses import replace

import pytest

import lockgate as lg
from lockgate.checkpoint.coordinator.completed_store import CompletedCheckpoint
from lockgate.checkpoint.export import export_checkpoint
from lockgate.checkpoint.fs_storage import KIND_JSON, KIND_PICKLE, decode_file, encode_file
from lockgate.checkpoint.savepoints import publish_savepoint
from lockgate.checkpoint.shared_registry import SharedStateUploader, read_shared_file
from lockgate.checkpoint.storage import CorruptCheckpointError
from lockgate.checkpoint.storage_options import StorageOptions
from lockgate.checkpoint.storage_url import open_storage
from lockgate.errors import ConfigurationError
from lockgate.recovery.restore import RestoreError, newest_restorable, resolve_restore_path

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
#: set by Evil.__reduce__ when a pickle of it is loaded
ran: list[str] = []


def _record(what: str) -> str:
    ran.append(what)
    return what


class Evil:
    """A state whose unpickling runs code (records it in ``ran``)."""

    def __reduce__(self):
        return (_record, ("unpickled",))


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def write_checkpoint(storage, checkpoint_id: int, states: dict[str, object]) -> str:
    handles = {
        uid: {0: storage.write_state(checkpoint_id, f"op-{uid}-0", state)}
        for uid, state in states.items()
    }
    completed = CompletedCheckpoint(
        checkpoint_id, 1, 2, operator_states=handles, job_name="signed job"
    )
    return storage.write_metadata(checkpoint_id, completed.to_metadata())


def signed(url: str, key: bytes = KEY):
    return open_storage(url, StorageOptions(signing_key=key))


def mode_of(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# ------------------------------------------------------------------------ permissions


def test_files_are_created_0600_and_folders_0700_by_default(tmp_path) -> None:
    root = str(tmp_path / "ckpt")
    storage = open_storage(root, StorageOptions())
    location = write_checkpoint(storage, 1, {"a": {"x": 1}})
    storage.write_latest(1)
    assert mode_of(root) == 0o700
    assert mode_of(location) == 0o700
    for name in os.listdir(location):
        assert mode_of(os.path.join(location, name)) == 0o600, name
    assert mode_of(os.path.join(root, "_latest")) == 0o600


def test_permissions_are_configurable_and_checked(tmp_path) -> None:
    root = str(tmp_path / "shared-ckpt")
    storage = open_storage(root, StorageOptions(file_mode=0o640, dir_mode=0o750))
    location = write_checkpoint(storage, 1, {"a": 1})
    assert mode_of(location) == 0o750
    assert {mode_of(os.path.join(location, n)) for n in os.listdir(location)} == {0o640}
    with pytest.raises(ConfigurationError, match="file_mode"):
        StorageOptions(file_mode=0o1000)
    cfg = lg.CheckpointConfig(interval=1000, dir_mode="0700")
    with pytest.raises(ConfigurationError, match="dir_mode"):
        cfg.validate()


# ------------------------------------------------------------- verification, unsigned


def test_the_driver_checks_a_checkpoint_without_unpickling_its_state_files(tmp_path) -> None:
    """Before the fix ``newest_restorable`` unpickled every state file on the driver."""
    storage = open_storage(str(tmp_path / "ckpt"), StorageOptions())
    write_checkpoint(storage, 1, {"a": Evil()})
    spec = newest_restorable(storage)
    assert spec is not None and spec.checkpoint_id == 1
    assert ran == [], "verifying a checkpoint unpickled a state file on the driver"


# --------------------------------------------------------------------------- signing


def test_a_signed_checkpoint_restores_with_its_key(tmp_path) -> None:
    url = str(tmp_path / "ckpt")
    storage = signed(url)
    write_checkpoint(storage, 1, {"a": {"x": 1}})
    storage.write_latest(1)
    assert storage.read_latest() == 1
    spec = resolve_restore_path(url, options=StorageOptions(signing_key=KEY))
    restore = spec.operator("a", 0, 1)
    assert restore is not None and restore.own() == {"x": 1}


@pytest.mark.parametrize("how", ["unsigned", "other key"])
def test_a_tampered_state_file_is_refused_before_it_is_unpickled(tmp_path, how) -> None:
    """The attacker replaces a state file with a pickle of their own and rewrites
    ``_metadata`` to match it (size, CRC32): unsigned, or signed with another key."""
    url = str(tmp_path / "ckpt")
    write_checkpoint(signed(url), 1, {"a": {"x": 1}})
    folder = os.path.join(url, "chk-1")
    victim = next(n for n in os.listdir(folder) if n.startswith("op-a-0"))
    attacker = StorageOptions(signing_key=OTHER_KEY) if how == "other key" else None
    payload = pickle.dumps(Evil())
    data = encode_file(payload, KIND_PICKLE, attacker)
    with open(os.path.join(folder, victim), "wb") as f:
        f.write(data)
    with open(os.path.join(folder, "_metadata"), "rb") as f:
        metadata = json.loads(decode_file(f.read(), KIND_JSON, "_metadata")[0])
    metadata["operators"]["a"]["0"].update(size=len(data), checksum=zlib.crc32(payload))
    with open(os.path.join(folder, "_metadata"), "wb") as f:
        f.write(encode_file(json.dumps(metadata).encode(), KIND_JSON, attacker))
    with pytest.raises(RestoreError, match="no intact completed checkpoint"):
        resolve_restore_path(url, options=StorageOptions(signing_key=KEY))
    storage = signed(url)
    with pytest.raises(CorruptCheckpointError, match="not signed"):
        storage.read_metadata(1)
    handle = CompletedCheckpoint.from_metadata(metadata).operator_states["a"][0]
    with pytest.raises(CorruptCheckpointError, match="not signed"):
        storage.read_state(handle)
    assert ran == [], "a tampered state file was unpickled"


def test_an_unsigned_checkpoint_is_refused_when_signing_is_on(tmp_path) -> None:
    url = str(tmp_path / "ckpt")
    write_checkpoint(open_storage(url, StorageOptions()), 1, {"a": 1})
    with pytest.raises(RestoreError, match="no intact completed checkpoint"):
        resolve_restore_path(url, options=StorageOptions(signing_key=KEY))
    # without a key it restores (and a signed checkpoint restores without a key too)
    assert resolve_restore_path(url, options=StorageOptions()).checkpoint_id == 1


def test_a_tampered_shared_file_is_refused(tmp_path) -> None:
    storage = signed(str(tmp_path / "ckpt"))
    uploader = SharedStateUploader(storage, 1, "a/0")
    handle = uploader.upload("sst-1", b"rocksdb bytes")
    assert handle.mac
    assert read_shared_file(storage, handle) == b"rocksdb bytes"
    forged = b"rocksdb bytez"  # other bytes; the attacker fixes the CRC32 in the handle
    storage.write_file(handle.path, forged)
    with pytest.raises(CorruptCheckpointError, match="not signed with this job's signing key"):
        read_shared_file(storage, replace(handle, checksum=zlib.crc32(forged)))
    with pytest.raises(CorruptCheckpointError, match="is not signed"):
        read_shared_file(storage, replace(handle, checksum=zlib.crc32(forged), mac=""))


def test_signing_key_is_checked_and_never_shown(tmp_path) -> None:
    with pytest.raises(ConfigurationError, match="at least 16 bytes"):
        StorageOptions(signing_key=b"short")
    cfg = lg.CheckpointConfig(interval=1000, signing_key=123)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="signing_key must be bytes or str"):
        cfg.validate()
    shown = lg.CheckpointConfig(interval=1000, signing_key="s" * 20)
    assert "sss" not in repr(shown) and "sss" not in repr(shown.storage_options())


def test_a_signed_savepoint_and_export_restore_with_the_key_and_stay_signed(tmp_path) -> None:
    url = str(tmp_path / "ckpt")
    storage = signed(url)
    write_checkpoint(storage, 1, {"a": {"x": 1}})
    completed = CompletedCheckpoint.from_metadata(storage.read_metadata(1))
    completed.is_savepoint = True
    savepoint = publish_savepoint(storage, completed, str(tmp_path / "sp"))
    exported = export_checkpoint(savepoint, str(tmp_path / "export"), signing_key=KEY)
    for folder in (savepoint, exported.location):
        spec = resolve_restore_path(folder, options=StorageOptions(signing_key=KEY))
        assert spec.operator("a", 0, 1).own() == {"x": 1}
        # files of the folder are all signed: another key is refused
        with pytest.raises(RestoreError, match="damaged"):
            resolve_restore_path(folder, options=StorageOptions(signing_key=OTHER_KEY))
    with pytest.raises(CorruptCheckpointError, match="not signed with this job's signing key"):
        export_checkpoint(savepoint, str(tmp_path / "export2"), signing_key=OTHER_KEY)

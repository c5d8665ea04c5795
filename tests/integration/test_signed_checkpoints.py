"""Signed checkpoints of a running job, on both executors (issue 18 item 6, M-R3, M-X2).

With ``checkpoint_config.signing_key`` the tasks (in Spark's Python workers too) sign
every state file they write and the driver signs ``_metadata``; a restore with the key
gets the exact failure-free output, and a checkpoint someone rewrote (a pickle of their
own, ``_metadata`` adjusted) is refused before anything in it is unpickled.
"""

from __future__ import annotations

import glob
import json
import os
import pickle
import shutil
import stat
import zlib

import pytest
from test_checkpointing import cancel_after_checkpoints, chk_folders
from test_recovery import SPLIT, by_value, expected_records, published, unbounded_sums

import lockgate as lg
from lockgate.checkpoint.fs_storage import HEADER, KIND_JSON, KIND_PICKLE, decode_file, encode_file

KEY = "a signing key of the tests, 32+b"


class Evil:
    """Unpickling it creates the file ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def signed_sums(
    executor, tmp_path, n: int, key: str | None = KEY, *, bounded: bool = False
) -> lg.StreamEnvironment:
    """``unbounded_sums`` with a signing key: a run of ``n // 2`` to cancel, restored into
    one of ``n`` with ``bounded=True``."""
    env = unbounded_sums(executor, tmp_path, n, bounded=bounded)
    env.checkpoint_config.signing_key = key
    return env


def tamper(folder: str, marker: str) -> None:
    """Replace one state file of ``folder`` with an unsigned pickle of an ``Evil`` and
    rewrite ``_metadata`` (unsigned) so that its size and CRC32 match."""
    victim = min(glob.glob(os.path.join(folder, "op-sums-*")))
    payload = pickle.dumps(Evil(marker))
    data = encode_file(payload, KIND_PICKLE)
    with open(victim, "wb") as f:
        f.write(data)
    meta_path = os.path.join(folder, "_metadata")
    with open(meta_path, "rb") as f:
        raw = f.read()
    metadata = json.loads(decode_file(raw, KIND_JSON, meta_path)[0])  # no key: MAC unchecked
    name = os.path.basename(victim)
    for by_subtask in metadata["operators"].values():
        for handle in by_subtask.values():
            if handle["path"].endswith(name):
                handle.update(size=len(data), checksum=zlib.crc32(payload))
    with open(meta_path, "wb") as f:
        f.write(encode_file(json.dumps(metadata).encode(), KIND_JSON))


@pytest.mark.hang_guard(180)
def test_m_r3_a_signed_checkpoint_restores_exactly_and_a_tampered_one_is_refused(
    executor, tmp_path
) -> None:
    n = 2 * SPLIT
    client = signed_sums(executor, tmp_path, n // 2).execute_async("signed")
    cancel_after_checkpoints(client, 3, "three checkpoints completed")
    storage = str(tmp_path / "checkpoints")
    newest = chk_folders(storage)[-1]
    state_file = min(glob.glob(os.path.join(storage, newest, "op-sums-*")))
    with open(state_file, "rb") as f:
        version = HEADER.unpack_from(f.read(HEADER.size))[1]
    assert version == 2, "the tasks wrote an unsigned state file"
    assert stat.S_IMODE(os.stat(state_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(storage, newest)).st_mode) == 0o700

    # a tampered copy: refused, and the attacker's pickle never ran
    copy = str(tmp_path / "copy")
    shutil.copytree(storage, copy)
    marker = str(tmp_path / "evil-ran")
    tamper(os.path.join(copy, newest), marker)
    with pytest.raises(lg.RestoreError, match="not signed"):
        signed_sums(executor, tmp_path, n, bounded=True).execute(
            "tampered", restore_from=os.path.join(copy, newest)
        )
    assert not os.path.exists(marker), "a tampered state file was unpickled"
    # another key refuses the genuine checkpoint too
    with pytest.raises(lg.RestoreError, match="signing key"):
        signed_sums(
            executor, tmp_path, n, key="another key of 32 bytes.........", bounded=True
        ).execute("other key", restore_from=os.path.join(storage, newest))

    restored = signed_sums(executor, tmp_path, n, bounded=True).execute(
        "restored", restore_from=os.path.join(storage, newest)
    )
    assert restored.status is lg.JobStatus.FINISHED
    assert by_value(published(str(tmp_path / "out"))) == expected_records(n)


@pytest.mark.hang_guard(180)
def test_m_r4_signed_incremental_rocksdb_checkpoints_export_and_restore_with_the_key(
    tmp_path,
) -> None:
    """Shared SST files carry their HMAC in the (signed) handles; the export checks them
    and every state file's MAC, copies them as they are (never unpickled), signs its
    ``_metadata``, and restores with the key; a forged shared file is refused."""
    from lockgate.checkpoint.export import export_checkpoint

    n = 2 * SPLIT

    def job(bounded: bool = True) -> lg.StreamEnvironment:
        env = signed_sums(lg.LocalExecutor(), tmp_path, n if bounded else n // 2, bounded=bounded)
        env.set_state_backend(lg.RocksDBStateBackend(incremental=True))
        return env

    cancel_after_checkpoints(
        job(bounded=False).execute_async("signed rocksdb"), 3, "three checkpoints completed"
    )
    storage = str(tmp_path / "checkpoints")
    newest = os.path.join(storage, chk_folders(storage)[-1])
    with open(os.path.join(newest, "_metadata"), "rb") as f:
        metadata = json.loads(decode_file(f.read(), KIND_JSON, "_metadata")[0])
    shared = [
        s for by in metadata["operators"].values() for h in by.values() for s in h.get("shared", ())
    ]
    assert shared and all(len(s["mac"]) == 64 for s in shared), shared
    exported = export_checkpoint(newest, str(tmp_path / "export"), signing_key=KEY)

    forged = str(tmp_path / "forged")
    shutil.copytree(exported.location, forged)
    sst = os.path.join(forged, shared[0]["path"])
    with open(sst, "r+b") as f:
        f.seek(os.path.getsize(sst) // 2)
        f.write(b"\x00\xff\x00")
    with pytest.raises(lg.RestoreError, match="damaged"):
        job().execute("forged", restore_from=forged)

    restored = job().execute("restored", restore_from=exported.location)
    assert restored.status is lg.JobStatus.FINISHED
    assert by_value(published(str(tmp_path / "out"))) == expected_records(n)

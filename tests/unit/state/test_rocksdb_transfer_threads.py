"""A RocksDB restore downloads its SST files with ``transfer_threads`` at once (Flink's
``state.backend.rocksdb.checkpoint.transfer.thread.num``; issue 43 part 3): an object
store's per-request latency, not its bandwidth, bounds one stream. The files are still
checked against their handles, and a bad one still fails the restore (M-R1, M-R4)."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

import lockgate as lg
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.checkpoint.shared_registry import SharedStateUploader
from lockgate.checkpoint.storage import CorruptCheckpointError
from lockgate.errors import ConfigurationError
from lockgate.state.rocksdb.restore import download

FILES = 8


class Rendezvous(FileSystemCheckpointStorage):
    """A storage whose reads wait until ``together`` of them are in progress at once
    (bounded: a BrokenBarrierError after 10 s), as a proof of concurrent downloads."""

    def __init__(self, url: str, together: int) -> None:
        super().__init__(url)
        self.barrier = threading.Barrier(together, timeout=10)
        self.most = 0
        self._now = 0
        self._lock = threading.Lock()

    def read_file(self, rel: str) -> bytes:
        with self._lock:
            self._now += 1
            self.most = max(self.most, self._now)
        try:
            self.barrier.wait()
            return super().read_file(rel)
        finally:
            with self._lock:
                self._now -= 1


def payload_of(storage: FileSystemCheckpointStorage) -> tuple[dict[str, Any], dict[str, bytes]]:
    uploader = SharedStateUploader(storage, 1, "op/0")
    files = {f"{i:06d}.sst": os.urandom(10_000 + i) for i in range(FILES)}
    sst = {name: uploader.upload(f"db/{name}", data, name) for name, data in files.items()}
    return {"sst": sst, "private": {"CURRENT": b"MANIFEST-000001\n"}}, files


def test_m_r4_a_restore_downloads_its_files_four_at_a_time(tmp_path: Any) -> None:
    root = str(tmp_path / "ckpt")
    payload, files = payload_of(FileSystemCheckpointStorage(root))
    storage = Rendezvous(root, together=4)
    folder = str(tmp_path / "restored")
    download(payload, storage, folder, "checkpoint 1 of 'op' subtask 0", threads=4)
    assert storage.most == 4, "four downloads ran at once"
    for name, data in files.items():
        with open(os.path.join(folder, name), "rb") as f:
            assert f.read() == data
    with open(os.path.join(folder, "CURRENT"), "rb") as f:
        assert f.read() == b"MANIFEST-000001\n"


def test_one_thread_downloads_one_file_at_a_time(tmp_path: Any) -> None:
    root = str(tmp_path / "ckpt")
    payload, _ = payload_of(FileSystemCheckpointStorage(root))
    storage = Rendezvous(root, together=1)
    download(payload, storage, str(tmp_path / "restored"), "checkpoint 1", threads=1)
    assert storage.most == 1


def test_m_r1_a_corrupt_file_fails_the_threaded_restore_naming_it(tmp_path: Any) -> None:
    root = str(tmp_path / "ckpt")
    storage = FileSystemCheckpointStorage(root)
    payload, _ = payload_of(storage)
    bad = payload["sst"]["000005.sst"]
    with open(os.path.join(root, bad.path), "r+b") as f:
        f.write(b"\x00\x01\x02")
    with pytest.raises(CorruptCheckpointError, match=bad.path):
        download(payload, storage, str(tmp_path / "restored"), "checkpoint 1", threads=4)


@pytest.mark.parametrize("value", [0, 65, 2.0, True, "4"])
def test_bad_transfer_threads_are_refused_naming_the_setting(value: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"transfer_threads=\.\.\.\) must be an int"):
        lg.RocksDBStateBackend(transfer_threads=value)


def test_the_setting_reaches_each_subtask_backend(tmp_path: Any) -> None:
    backend = lg.RocksDBStateBackend(local_dir=str(tmp_path), transfer_threads=2)
    keyed = backend.create_keyed_backend("op", 128, clock=lg.ManualClock(0))
    try:
        assert keyed.transfer_threads == 2
        assert lg.RocksDBStateBackend().transfer_threads == 4
    finally:
        keyed.close()

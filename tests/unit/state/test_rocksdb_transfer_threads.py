"""A RocksDB restore downloads its SST files with ``transfer_threads`` at once (Flink's
``state.backend.rocksdb.checkpoint.transfer.thread.num``; issue 43 part 3): an object
store's per-request latency, not its bandwidth, bounds one stream. The files are still
checked against their handles, and a bad one still fails the restore (M-R1, M-R4)."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from test_rocksdb_backend import canonical, checkpoint, filled

import lockgate as lg
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.checkpoint.shared_registry import SharedFileTracker, SharedStateUploader
from lockgate.checkpoint.storage import CorruptCheckpointError
from lockgate.errors import ConfigurationError
from lockgate.state.keyed import SnapshotReleasedError
from lockgate.state.rocksdb.backend import RocksDBKeyedStateBackend
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


class WriteRendezvous(FileSystemCheckpointStorage):
    """A storage whose writes wait until ``together`` are in progress at once (bounded),
    and whose write of a file named ``fail`` raises."""

    def __init__(self, url: str, together: int, fail: str | None = None) -> None:
        super().__init__(url)
        self.barrier = threading.Barrier(together, timeout=10)
        self.fail = fail

    def write_file(self, rel: str, data: bytes, *, atomic: bool = False) -> None:
        if self.fail is not None and rel.endswith(self.fail):
            raise OSError(f"injected: cannot write {rel}")
        self.barrier.wait()
        super().write_file(rel, data, atomic=atomic)


def local_files(tmp_path: Any) -> list[tuple[str, str, str]]:
    folder = tmp_path / "db"
    folder.mkdir()
    out = []
    for i in range(FILES):
        name = f"{i:06d}.sst"
        (folder / name).write_bytes(os.urandom(5_000 + i))
        out.append((f"db/{name}", str(folder / name), name))
    return out


def test_m_r4_an_incremental_checkpoint_uploads_four_files_at_a_time(tmp_path: Any) -> None:
    files = local_files(tmp_path)
    storage = WriteRendezvous(str(tmp_path / "ckpt"), together=4)
    uploader = SharedStateUploader(storage, 1, "op/0")
    handles = uploader.upload_files(files, threads=4)
    assert [h.size for h in handles] == [5_000 + i for i in range(FILES)], "in the given order"
    assert list(uploader.files()) == [key for key, _, _ in files]
    assert uploader.uploaded_bytes == sum(h.size for h in handles)
    for (_, path, _), handle in zip(files, handles, strict=True):
        with open(path, "rb") as f:
            assert storage.read_file(handle.path) == f.read()


def test_m_r4_a_failed_upload_fails_the_checkpoint_and_its_files_are_discarded(
    tmp_path: Any,
) -> None:
    files = local_files(tmp_path)
    root = tmp_path / "ckpt"
    storage = WriteRendezvous(str(root), together=1, fail="000003.sst")
    uploader = SharedStateUploader(storage, 1, "op/0")
    with pytest.raises(OSError, match="injected"):
        uploader.upload_files(files, threads=4)
    assert uploader.files() == {}, "nothing referenced by a failed upload"
    written = [p for p in root.rglob("*.sst")]
    assert written, "other uploads ran"
    uploader.discard_uploads()
    assert not list(root.rglob("*.sst")), "every file written was deleted"


def test_a_keyed_backend_checkpoints_and_restores_with_its_transfer_threads(
    tmp_path: Any,
) -> None:
    made: list[RocksDBKeyedStateBackend] = []

    def make(**kwargs: Any) -> RocksDBKeyedStateBackend:
        b = RocksDBKeyedStateBackend(
            "op", 128, local_dir=str(tmp_path / "local"), transfer_threads=3, **kwargs
        )
        made.append(b)
        return b

    try:
        storage = FileSystemCheckpointStorage(str(tmp_path / "ckpt"))
        source = filled(make)
        payload, uploader = checkpoint(source, storage, SharedFileTracker(), 1)
        assert payload["sst"] and uploader.uploaded_bytes > 0
        target = make()
        target.restore([payload], range(128), storage=storage)
        assert canonical(target) == canonical(source)
    finally:
        for b in made:
            b.close()


def test_no_upload_starts_once_the_snapshot_is_released(tmp_path: Any) -> None:
    files = local_files(tmp_path)
    root = tmp_path / "ckpt"
    uploader = SharedStateUploader(FileSystemCheckpointStorage(str(root)), 1, "op/0")
    started = []

    def released_after_two() -> None:
        if len(started) == 2:
            raise SnapshotReleasedError("released")
        started.append(1)

    with pytest.raises(SnapshotReleasedError):
        uploader.upload_files(files, threads=1, before_each=released_after_two)
    assert len(list(root.rglob("*.sst"))) == 2, "the two uploads before the release only"

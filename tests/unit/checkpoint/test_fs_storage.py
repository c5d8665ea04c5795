"""FileSystemCheckpointStorage on the local filesystem (and pyarrow's mock filesystem):
layout, file format checks, atomic ``_metadata`` (M-C7), the durable pointer (M-C8),
pickling, URL errors. The S3 variant is ``tests/integration/test_s3_storage.py``."""

from __future__ import annotations

import json
import os
import pickle
import re
import struct
import threading
import zlib
from typing import Any

import pytest

from lockgate.checkpoint import fs_storage
from lockgate.checkpoint.fs_storage import (
    HEADER_SIZE,
    FileSystemCheckpointStorage,
    decode_file,
    encode_file,
)
from lockgate.checkpoint.state_tree import TREE_VERSION, decode_tree
from lockgate.checkpoint.storage import (
    LATEST,
    METADATA,
    CorruptCheckpointError,
    MemoryCheckpointStorage,
)
from lockgate.checkpoint.storage_url import open_storage
from lockgate.checkpoint.types import StateHandle
from lockgate.errors import ConfigurationError, LockgateError


@pytest.fixture
def root(tmp_path: Any) -> str:
    return str(tmp_path / "ckpt")


@pytest.fixture
def storage(root: str) -> FileSystemCheckpointStorage:
    return FileSystemCheckpointStorage(root)


def files_under(root: str) -> list[str]:
    found = []
    for folder, _dirs, names in os.walk(root):
        for name in names:
            found.append(os.path.relpath(os.path.join(folder, name), root))
    return sorted(found)


#: a state file name: the name given to ``write_state`` plus a random token (M-T3)
TOKEN = re.compile(r"\.[0-9a-f]{16}$")


def without_tokens(paths: list[str]) -> list[str]:
    """``paths`` with the random token of state file names removed."""
    return [TOKEN.sub("", p) for p in paths]


def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


# --------------------------------------------------------------------------- round trip


def test_state_round_trips_through_a_file_per_handle(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    states = {
        "op-abc-0": {"count": 3, "keys": ["a", "b"]},
        "op-abc-1": [1.5, None, b"\x00"],
        "op-def-0": None,
    }
    handles = {name: storage.write_state(3, name, state) for name, state in states.items()}
    for name, handle in handles.items():
        assert re.fullmatch(rf"chk-3/{name}\.[0-9a-f]{{16}}", handle.path), handle.path
        assert storage.read_state(handle) == states[name]
        assert handle.size == os.path.getsize(os.path.join(root, handle.path))
        with open(os.path.join(root, handle.path), "rb") as f:
            assert handle.checksum == zlib.crc32(f.read()[HEADER_SIZE:])


def test_a_state_handle_read_by_another_storage_object_for_the_same_url(root: str) -> None:
    handle = FileSystemCheckpointStorage(root).write_state(1, "op-0", {"x": 1})
    assert FileSystemCheckpointStorage(root).read_state(handle) == {"x": 1}


def test_files_start_with_the_documented_header(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    handle = storage.write_state(1, "op-0", "state")
    storage.write_metadata(1, {"a": 1})
    with open(os.path.join(root, handle.path), "rb") as f:
        data = f.read()
    magic, version, kind, crc, length = struct.unpack_from("<4sHBIQ", data)
    assert (magic, version, kind, length) == (b"LGCK", 1, 1, len(data) - 19)
    # the payload is a state tree (lockgate.checkpoint.state_tree): magic, version, value
    assert data[19:25] == b"LGST" + TREE_VERSION.to_bytes(2, "little")
    assert crc == zlib.crc32(data[19:])
    assert decode_tree(data[19:], unpickle=False) == "state"
    with open(os.path.join(root, "chk-1", METADATA), "rb") as f:
        data = f.read()
    magic, version, kind, crc, length = struct.unpack_from("<4sHBIQ", data)
    assert (magic, version, kind) == (b"LGCK", 1, 2)
    assert json.loads(data[19:].decode("utf-8")) == {"a": 1}


def test_layout_is_one_folder_per_checkpoint_with_metadata_and_a_pointer_at_the_root(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    storage.write_state(1, "op-a-0", 1)
    storage.write_state(1, "op-a-1", 2)
    storage.write_metadata(1, {"id": 1})
    storage.write_state(2, "op-a-0", 3)
    storage.write_latest(1)
    assert without_tokens(files_under(root)) == [
        "_latest",
        "chk-1/_metadata",
        "chk-1/op-a-0",
        "chk-1/op-a-1",
        "chk-2/op-a-0",
    ]


def test_metadata_round_trips_as_json(storage: FileSystemCheckpointStorage) -> None:
    metadata = {
        "checkpoint_id": 4,
        "handles": [{"path": "chk-4/op-0", "size": 10}],
        "savepoint": False,
        "name": "ünïcode",
    }
    storage.write_metadata(4, metadata)
    assert storage.read_metadata(4) == metadata


def test_metadata_that_is_not_json_compatible_is_rejected_by_both_storages(
    storage: FileSystemCheckpointStorage,
) -> None:
    handle = StateHandle("chk-1/op-0", 1, 2)
    for s in (storage, MemoryCheckpointStorage()):
        with pytest.raises(TypeError):
            s.write_metadata(1, {"handle": handle})
    assert storage.completed_ids() == []


def test_reading_metadata_of_a_missing_checkpoint_raises_file_not_found(
    storage: FileSystemCheckpointStorage,
) -> None:
    with pytest.raises(FileNotFoundError, match="checkpoint 9 has no metadata"):
        storage.read_metadata(9)


def test_write_metadata_returns_the_checkpoint_folder(
    storage: FileSystemCheckpointStorage, root: str, tmp_path: Any
) -> None:
    assert storage.write_metadata(7, {}) == os.path.join(root, "chk-7")
    url_storage = FileSystemCheckpointStorage(f"file://{tmp_path}/u")
    assert url_storage.write_metadata(2, {}) == f"file://{tmp_path}/u/chk-2"
    assert os.path.isfile(tmp_path / "u" / "chk-2" / METADATA)


def test_state_names_cannot_escape_the_checkpoint_folder(
    storage: FileSystemCheckpointStorage,
) -> None:
    for name in ("../x", "", "a//b", METADATA):
        with pytest.raises(ValueError):
            storage.write_state(1, name, 0)
    with pytest.raises(ValueError):
        storage.read_state(StateHandle("/etc/passwd", 1, 1))


# --------------------------------------------------------------------------- M-C7: _metadata last, atomic


def test_m_c7_a_folder_without_metadata_is_not_a_completed_checkpoint(
    storage: FileSystemCheckpointStorage,
) -> None:
    storage.write_state(1, "op-0", "s")
    storage.write_state(2, "op-0", "s")
    assert storage.completed_ids() == []
    storage.write_metadata(2, {"id": 2})
    assert storage.completed_ids() == [2]
    storage.write_metadata(1, {"id": 1})
    assert storage.completed_ids() == [1, 2]


def test_m_c7_metadata_is_moved_into_place_and_leaves_no_temporary_file(
    storage: FileSystemCheckpointStorage, root: str, monkeypatch: Any
) -> None:
    renames: list[tuple[str, str]] = []
    real_replace = os.replace

    def recording_replace(src: str, dst: str) -> None:
        renames.append((src, dst))
        assert os.path.isfile(src) and not os.path.exists(dst)
        real_replace(src, dst)

    monkeypatch.setattr(fs_storage.os, "replace", recording_replace)
    storage.write_state(5, "op-0", "s")
    storage.write_metadata(5, {"id": 5})
    [(src, dst)] = renames
    assert dst == os.path.join(root, "chk-5", METADATA)
    assert os.path.dirname(src) == os.path.dirname(dst)
    assert without_tokens(files_under(root)) == ["chk-5/_metadata", "chk-5/op-0"]


def test_m_c7_a_metadata_write_that_fails_leaves_neither_metadata_nor_a_temporary_file(
    storage: FileSystemCheckpointStorage, root: str, monkeypatch: Any
) -> None:
    def failing_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    storage.write_state(5, "op-0", "s")
    monkeypatch.setattr(fs_storage.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        storage.write_metadata(5, {"id": 5})
    assert without_tokens(files_under(root)) == ["chk-5/op-0"]
    assert storage.completed_ids() == []


def test_m_c7_completed_ids_ignore_other_names(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    storage.write_metadata(3, {})
    storage.write_metadata(10, {})
    for name in ("chk-x", "chk-007", "chk--1", "savepoint-1", "chk-4.tmp"):
        os.makedirs(os.path.join(root, name))
        with open(os.path.join(root, name, METADATA), "wb") as f:
            f.write(b"")
    with open(os.path.join(root, "chk-11"), "wb") as f:  # a file, not a folder
        f.write(b"")
    assert storage.completed_ids() == [3, 10]


def test_completed_ids_of_an_empty_storage_is_empty(storage: FileSystemCheckpointStorage) -> None:
    assert storage.completed_ids() == []


# --------------------------------------------------------------------------- corruption


def test_a_flipped_payload_byte_raises_corrupt_checkpoint_error_naming_the_file(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    handle = storage.write_state(1, "op-0", {"k": "v" * 100})
    flip_byte(os.path.join(root, handle.path), HEADER_SIZE + 20)
    with pytest.raises(CorruptCheckpointError, match=r"chk-1/op-0.*CRC32"):
        storage.read_state(handle)


def test_a_flipped_magic_byte_raises_corrupt_checkpoint_error(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    handle = storage.write_state(1, "op-0", 1)
    flip_byte(os.path.join(root, handle.path), 0)
    with pytest.raises(CorruptCheckpointError, match="not a lockgate checkpoint file"):
        storage.read_state(handle)


def test_corrupt_metadata_raises_corrupt_checkpoint_error(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    storage.write_metadata(1, {"some": "metadata"})
    flip_byte(os.path.join(root, "chk-1", METADATA), HEADER_SIZE + 3)
    with pytest.raises(CorruptCheckpointError, match="_metadata"):
        storage.read_metadata(1)


@pytest.mark.parametrize(
    "keep", [0, 3, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 5], ids=lambda k: f"keep{k}"
)
def test_a_truncated_file_raises_corrupt_checkpoint_error(
    storage: FileSystemCheckpointStorage, root: str, keep: int
) -> None:
    handle = storage.write_state(1, "op-0", list(range(100)))
    path = os.path.join(root, handle.path)
    with open(path, "r+b") as f:
        f.truncate(keep)
    with pytest.raises(CorruptCheckpointError, match="chk-1/op-0.*truncated"):
        storage.read_state(handle)


def test_bytes_after_the_payload_raise_corrupt_checkpoint_error(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    storage.write_metadata(1, {})
    with open(os.path.join(root, "chk-1", METADATA), "ab") as f:
        f.write(b"junk")
    with pytest.raises(CorruptCheckpointError, match="after the"):
        storage.read_metadata(1)


def test_an_unknown_newer_format_version_is_named_in_the_error(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    handle = storage.write_state(1, "op-0", 1)
    path = os.path.join(root, handle.path)
    with open(path, "r+b") as f:
        f.seek(4)
        f.write(struct.pack("<H", 3))  # 1: unsigned, 2: signed (issue 18 item 6)
    with pytest.raises(CorruptCheckpointError, match=r"format version 3.*version\(s\) 1, 2"):
        storage.read_state(handle)


def test_a_file_of_the_wrong_kind_is_rejected() -> None:
    data = encode_file(b"{}", fs_storage.KIND_JSON)
    with pytest.raises(CorruptCheckpointError, match="JSON payload, expected pickle"):
        decode_file(data, fs_storage.KIND_PICKLE, "some/file")


def test_a_state_file_that_does_not_match_its_handle_is_rejected(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    handle = storage.write_state(1, "op-0", "first")
    other = storage.write_state(1, "op-0", "second")
    with open(os.path.join(root, other.path), "rb") as f:
        data = f.read()
    with open(os.path.join(root, handle.path), "wb") as f:  # a valid file, but another one
        f.write(data)
    with pytest.raises(CorruptCheckpointError, match="does not match its handle"):
        storage.read_state(handle)


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_m_t3_writing_the_same_state_name_twice_makes_two_files_and_never_overwrites(
    kind: str, root: str
) -> None:
    """M-T3, M-E2: a late asynchronous part of a failed attempt writing (and then
    deleting) ``op-<uid>-<subtask>`` of the same checkpoint id never touches the file
    another writer made under that name."""
    storage: Any = (
        FileSystemCheckpointStorage(root) if kind == "file" else MemoryCheckpointStorage()
    )
    mine = storage.write_state(1, "op-sums-0", "attempt 1")
    late = storage.write_state(1, "op-sums-0", "attempt 0, late")
    assert mine.path != late.path
    storage.discard_handle(late)
    assert storage.read_state(mine) == "attempt 1"


def test_a_missing_state_file_raises_corrupt_checkpoint_error(
    storage: FileSystemCheckpointStorage,
) -> None:
    with pytest.raises(CorruptCheckpointError, match="chk-1/op-0 is missing"):
        storage.read_state(StateHandle("chk-1/op-0", 30, 1234))


def test_corrupt_checkpoint_error_is_a_lockgate_error() -> None:
    assert issubclass(CorruptCheckpointError, LockgateError)


# --------------------------------------------------------------------------- discard


def test_discard_deletes_the_checkpoint_folder(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    for cid in (1, 2):
        storage.write_state(cid, "op-0", cid)
        storage.write_metadata(cid, {})
    storage.write_latest(2)
    storage.discard(1)
    assert storage.completed_ids() == [2]
    assert without_tokens(files_under(root)) == ["_latest", "chk-2/_metadata", "chk-2/op-0"]
    assert not os.path.exists(os.path.join(root, "chk-1"))


def test_discard_of_a_missing_checkpoint_is_fine(storage: FileSystemCheckpointStorage) -> None:
    storage.discard(42)
    storage.write_state(1, "op-0", 0)  # a folder without _metadata is discarded too
    storage.discard(1)
    storage.discard(1)
    assert storage.completed_ids() == []


def test_discard_handle_deletes_one_state_file(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    kept = storage.write_state(1, "op-0", "kept")
    late = storage.write_state(1, "op-1", "late")
    storage.discard_handle(late)
    storage.discard_handle(late)  # missing is fine
    assert files_under(root) == [kept.path]
    assert storage.read_state(kept) == "kept"


# --------------------------------------------------------------------------- M-C8: durable pointer


def test_m_c8_latest_pointer_survives_a_new_storage_object_for_the_same_url(root: str) -> None:
    first = FileSystemCheckpointStorage(root)
    assert first.read_latest() is None
    first.write_latest(3)
    first.write_latest(4)
    restarted = FileSystemCheckpointStorage(root)
    assert restarted.read_latest() == 4
    assert files_under(root) == [LATEST]  # the rename left no temporary file


def test_m_c8_a_corrupt_latest_pointer_raises_corrupt_checkpoint_error(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    storage.write_latest(12)
    flip_byte(os.path.join(root, LATEST), HEADER_SIZE + 2)
    with pytest.raises(CorruptCheckpointError, match="_latest"):
        storage.read_latest()


def test_m_c8_a_latest_pointer_without_an_id_raises_corrupt_checkpoint_error(
    storage: FileSystemCheckpointStorage, root: str
) -> None:
    with open(os.path.join(root, LATEST), "wb") as f:
        f.write(encode_file(b'{"checkpoint": 3}', fs_storage.KIND_JSON))
    with pytest.raises(CorruptCheckpointError, match="checkpoint_id"):
        storage.read_latest()


# --------------------------------------------------------------------------- pickling


def test_pickles_as_its_url_only_and_works_after_unpickling(
    storage: FileSystemCheckpointStorage,
) -> None:
    handle = storage.write_state(1, "op-0", {"a": 1})  # the filesystem is open now
    data = pickle.dumps(storage)
    assert len(data) < 300
    copy = pickle.loads(data)
    assert copy.__getstate__() == {"url": storage.url}
    assert copy == storage and copy._fs is None
    assert copy.read_state(handle) == {"a": 1}
    copy.write_metadata(1, {})
    assert storage.completed_ids() == [1]


def test_an_unpickled_storage_opens_its_filesystem_once_across_threads(
    storage: FileSystemCheckpointStorage,
) -> None:
    copy = pickle.loads(pickle.dumps(storage))
    start = threading.Barrier(8)
    handles: list[StateHandle] = []
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            start.wait(5)
            handles.append(copy.write_state(1, f"op-{i}", i))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors
    assert sorted(storage.read_state(h) for h in handles) == list(range(8))


# --------------------------------------------------------------------------- URLs


def test_a_relative_path_is_made_absolute_when_the_storage_is_created(
    tmp_path: Any, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    storage = FileSystemCheckpointStorage("rel/ckpt")
    assert storage.url == str(tmp_path / "rel" / "ckpt")
    assert os.path.isdir(tmp_path / "rel" / "ckpt")  # the root is created


def test_a_file_url_opens_the_local_filesystem(tmp_path: Any) -> None:
    storage = FileSystemCheckpointStorage(f"file://{tmp_path}/ckpt")
    handle = storage.write_state(1, "op-0", "x")
    assert os.path.isfile(tmp_path / "ckpt" / handle.path)
    assert storage.read_state(handle) == "x"


def test_m_c7_other_pyarrow_filesystems_write_metadata_through_a_temporary_file() -> None:
    # pyarrow's in-memory mock filesystem: no local fast path, rename-based atomic writes
    storage = FileSystemCheckpointStorage("mock:///ckpt")
    handle = storage.write_state(1, "op-0", [1, 2])
    storage.write_metadata(1, {"id": 1})
    storage.write_latest(1)
    import pyarrow.fs as pafs

    infos = storage.filesystem.get_file_info(pafs.FileSelector("ckpt", recursive=True))
    assert sorted(i.path for i in infos if i.type == pafs.FileType.File) == [
        "ckpt/_latest",
        "ckpt/chk-1/_metadata",
        f"ckpt/{handle.path}",
    ]
    assert storage.read_state(handle) == [1, 2]
    assert storage.completed_ids() == [1] and storage.read_latest() == 1
    storage.discard(1)
    assert storage.completed_ids() == []


@pytest.mark.parametrize("url", ["bogus://somewhere/ckpt", "s3://", "   "])
def test_an_unusable_url_raises_configuration_error_naming_it(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        FileSystemCheckpointStorage(url)
    assert repr(url) in str(info.value) and "checkpoint storage" in str(info.value)


def test_the_configuration_error_keeps_the_pyarrow_error_as_its_cause() -> None:
    with pytest.raises(ConfigurationError, match="Unrecognized filesystem type") as info:
        FileSystemCheckpointStorage("bogus://x")
    assert info.value.__cause__ is not None


def test_a_root_that_cannot_be_created_raises_configuration_error(tmp_path: Any) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    url = str(tmp_path / "a-file" / "ckpt")
    with pytest.raises(ConfigurationError, match="cannot create its root directory") as info:
        FileSystemCheckpointStorage(url)
    assert url in str(info.value) and isinstance(info.value.__cause__, OSError)


def test_a_password_in_the_url_is_not_shown_in_errors() -> None:
    with pytest.raises(ConfigurationError) as info:
        FileSystemCheckpointStorage("bogus://key:s3cret@bucket/ckpt")
    assert "s3cret" not in str(info.value) and "key:***@bucket" in str(info.value)


def test_open_storage_picks_the_implementation_by_url(tmp_path: Any) -> None:
    memory = open_storage("memory://job-1")
    assert isinstance(memory, MemoryCheckpointStorage) and memory.url == "memory://job-1"
    on_disk = open_storage(str(tmp_path / "c"))
    assert isinstance(on_disk, FileSystemCheckpointStorage)
    assert isinstance(open_storage(f"file://{tmp_path}/d"), FileSystemCheckpointStorage)
    with pytest.raises(ConfigurationError):
        open_storage("bogus://x")


# --------------------------------------------------------------------------- raw files


@pytest.fixture(params=["local", "mock", "memory"])
def any_storage(request: Any, tmp_path: Any) -> Any:
    if request.param == "local":
        return FileSystemCheckpointStorage(str(tmp_path / "raw"))
    if request.param == "mock":  # pyarrow's mock filesystem: the non-local code path
        return FileSystemCheckpointStorage("mock:///raw")
    return MemoryCheckpointStorage()


def test_raw_files_round_trip_byte_for_byte_in_nested_folders(any_storage: Any) -> None:
    data = bytes(range(256)) * 3
    any_storage.write_file("shared/op/0/a.sst", data)
    any_storage.write_file("copy/chk-1/_metadata", b"{}", atomic=True)
    assert any_storage.read_file("shared/op/0/a.sst") == data
    assert any_storage.read_file("copy/chk-1/_metadata") == b"{}"
    any_storage.write_file("shared/op/0/a.sst", b"new")  # replaces
    assert any_storage.read_file("shared/op/0/a.sst") == b"new"


def test_raw_file_exists_delete_and_missing_files(any_storage: Any) -> None:
    any_storage.write_file("x/y", b"1")
    assert any_storage.exists("x/y") and not any_storage.exists("x")  # a folder is no file
    assert not any_storage.exists("x/z")
    any_storage.delete_file("x/y")
    assert not any_storage.exists("x/y")
    any_storage.delete_file("x/y")  # missing is fine
    with pytest.raises(FileNotFoundError, match="x/y"):
        any_storage.read_file("x/y")


def test_list_files_is_recursive_sorted_and_relative_to_the_root(any_storage: Any) -> None:
    for rel in ["b/2", "a/1", "a/sub/3", "ab/4"]:
        any_storage.write_file(rel, b"-")
    any_storage.write_file("a/atomic", b"-", atomic=True)
    assert any_storage.list_files("a") == ["a/1", "a/atomic", "a/sub/3"]  # not "ab/4"
    assert any_storage.list_files("a/sub") == ["a/sub/3"]
    assert any_storage.list_files("missing") == []
    assert any_storage.list_files() == ["a/1", "a/atomic", "a/sub/3", "ab/4", "b/2"]
    for rel in any_storage.list_files(""):  # the listed paths read back
        assert any_storage.read_file(rel) == b"-"


def test_a_checkpoint_folder_copies_through_the_raw_api(any_storage: Any, tmp_path: Any) -> None:
    handle = any_storage.write_state(3, "op-a-0", {"k": 1})
    any_storage.write_metadata(3, {"checkpoint_id": 3})
    target = FileSystemCheckpointStorage(str(tmp_path / "user-savepoints"))
    for rel in any_storage.list_files("chk-3"):
        target.write_file(rel, any_storage.read_file(rel), atomic=True)
    assert target.completed_ids() == [3]
    if isinstance(any_storage, FileSystemCheckpointStorage):  # same file format
        assert target.read_state(handle) == {"k": 1}
        assert target.read_metadata(3) == {"checkpoint_id": 3}


@pytest.mark.parametrize("rel", ["", "/abs", "a//b", "a/../b", "./a", "a/", 3])
def test_raw_file_paths_must_be_plain_relative_paths(any_storage: Any, rel: Any) -> None:
    for call in (
        lambda: any_storage.write_file(rel, b""),
        lambda: any_storage.read_file(rel),
        lambda: any_storage.delete_file(rel),
        lambda: any_storage.exists(rel),
    ):
        with pytest.raises(ConfigurationError, match="relative to the storage root"):
            call()
    if rel != "":
        with pytest.raises(ConfigurationError, match="folder path"):
            any_storage.list_files(rel)


def test_raw_file_data_must_be_bytes(any_storage: Any) -> None:
    with pytest.raises(ConfigurationError, match="must be bytes"):
        any_storage.write_file("a", "text")

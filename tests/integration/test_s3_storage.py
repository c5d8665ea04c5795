"""FileSystemCheckpointStorage on S3: a moto server in a subprocess (``tests/s3_server.py``),
URLs of the form
``s3://bucket/prefix?endpoint_override=127.0.0.1:PORT&scheme=http&region=us-east-1``."""

from __future__ import annotations

import os
import pickle
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs
import pytest

from lockgate.checkpoint.fs_storage import HEADER_SIZE, FileSystemCheckpointStorage
from lockgate.checkpoint.storage import METADATA, CorruptCheckpointError
from lockgate.checkpoint.storage_url import open_storage
from lockgate.errors import ConfigurationError

if TYPE_CHECKING:
    from s3_server import MotoServer

#: the session-scoped ``moto_server`` fixture and the per-test ``s3_url``
pytest_plugins = ["s3_server"]


def s3_root(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}{parts.path.rstrip('/')}"


def s3_files(server: MotoServer, url: str) -> list[str]:
    """Objects (not directory markers) under the storage root, relative to it."""
    root = s3_root(url)
    infos = server.filesystem().get_file_info(
        pafs.FileSelector(root, recursive=True, allow_not_found=True)
    )
    return sorted(i.path[len(root) + 1 :] for i in infos if i.type == pafs.FileType.File)


def test_url_form_opens_an_s3_filesystem(s3_url: str) -> None:
    storage = open_storage(s3_url)
    assert isinstance(storage, FileSystemCheckpointStorage)
    assert storage.filesystem.type_name == "s3"
    assert "endpoint_override=127.0.0.1:" in s3_url and "scheme=http" in s3_url


def test_state_and_metadata_round_trip_on_s3(moto_server: MotoServer, s3_url: str) -> None:
    storage = FileSystemCheckpointStorage(s3_url)
    states = {"op-abc-0": {"count": 3}, "op-abc-1": list(range(1000)), "op-def-0": None}
    handles = {name: storage.write_state(3, name, s) for name, s in states.items()}
    assert storage.completed_ids() == []  # M-C7: no _metadata yet
    location = storage.write_metadata(3, {"checkpoint_id": 3, "handles": sorted(handles)})
    assert location.startswith(f"s3://{moto_server.bucket}/") and "/chk-3?" in location
    for name, handle in handles.items():
        assert handle.path.startswith(f"chk-3/{name}.")  # plus a random token (M-T3)
        assert storage.read_state(handle) == states[name]
    assert storage.read_metadata(3) == {"checkpoint_id": 3, "handles": sorted(handles)}
    assert storage.completed_ids() == [3]
    assert s3_files(moto_server, s3_url) == sorted(
        ["chk-3/_metadata"] + [h.path for h in handles.values()]
    )


def test_m_c7_completed_ids_on_s3_list_only_folders_with_metadata(s3_url: str) -> None:
    storage = FileSystemCheckpointStorage(s3_url)
    storage.write_state(1, "op-0", "a")
    storage.write_state(2, "op-0", "b")
    storage.write_metadata(2, {})
    storage.write_metadata(10, {})
    assert storage.completed_ids() == [2, 10]


def test_m_c7_metadata_on_s3_is_one_put_without_temporary_objects(
    moto_server: MotoServer, s3_url: str
) -> None:
    storage = FileSystemCheckpointStorage(s3_url)
    storage.write_metadata(1, {"id": 1})
    storage.write_latest(1)
    assert s3_files(moto_server, s3_url) == ["_latest", "chk-1/_metadata"]


def test_discard_and_discard_handle_on_s3(moto_server: MotoServer, s3_url: str) -> None:
    storage = FileSystemCheckpointStorage(s3_url)
    kept = {}
    for cid in (1, 2):
        kept[cid] = storage.write_state(cid, "op-0", cid)
        storage.write_metadata(cid, {})
    late = storage.write_state(2, "op-late", "late")
    storage.discard_handle(late)
    storage.discard_handle(late)  # missing is fine
    storage.discard(1)
    storage.discard(1)
    storage.discard(99)
    assert storage.completed_ids() == [2]
    assert s3_files(moto_server, s3_url) == ["chk-2/_metadata", kept[2].path]


def test_m_c8_latest_pointer_on_s3_survives_a_new_storage_object(s3_url: str) -> None:
    first = FileSystemCheckpointStorage(s3_url)
    assert first.read_latest() is None
    first.write_latest(5)
    first.write_latest(6)
    assert FileSystemCheckpointStorage(s3_url).read_latest() == 6


def test_an_unpickled_s3_storage_reads_and_writes(s3_url: str) -> None:
    storage = FileSystemCheckpointStorage(s3_url)
    handle = storage.write_state(1, "op-0", {"k": "v"})
    data = pickle.dumps(storage)
    assert len(data) < 400
    copy = pickle.loads(data)
    assert copy.read_state(handle) == {"k": "v"}
    copy.write_metadata(1, {})
    copy.write_latest(1)
    assert storage.completed_ids() == [1] and storage.read_latest() == 1


def test_a_corrupt_s3_object_raises_corrupt_checkpoint_error(
    moto_server: MotoServer, s3_url: str
) -> None:
    storage = FileSystemCheckpointStorage(s3_url)
    handle = storage.write_state(1, "op-0", "x" * 100)
    path = s3_root(s3_url) + "/" + handle.path
    fs = moto_server.filesystem()
    with fs.open_input_stream(path) as f:
        data = bytearray(f.read())
    data[HEADER_SIZE + 10] ^= 0xFF
    with fs.open_output_stream(path) as out:
        out.write(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="chk-1/op-0"):
        storage.read_state(handle)
    with fs.open_output_stream(path) as out:
        out.write(bytes(data[: HEADER_SIZE + 3]))
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        storage.read_state(handle)


def test_credentials_in_the_url_work_without_the_environment(
    moto_server: MotoServer, monkeypatch: Any
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    storage = FileSystemCheckpointStorage(
        moto_server.url(path="with-credentials", with_credentials=True)
    )
    storage.write_metadata(1, {})
    assert storage.completed_ids() == [1]
    assert s3_files(moto_server, moto_server.url(path="with-credentials")) == [f"chk-1/{METADATA}"]


def test_a_missing_bucket_raises_configuration_error(moto_server: MotoServer) -> None:
    url = moto_server.url("no-such-bucket", "ckpt")
    with pytest.raises(ConfigurationError, match="no-such-bucket"):
        FileSystemCheckpointStorage(url)


def test_the_moto_server_runs_in_a_subprocess(moto_server: MotoServer) -> None:
    assert moto_server.process.poll() is None and moto_server.process.pid != os.getpid()


def test_a_moto_server_that_does_not_answer_in_time_fails_with_a_clear_message() -> None:
    from s3_server import start_moto_server

    with pytest.raises(RuntimeError, match=r"did not answer HTTP within 0.0s"):
        start_moto_server(bucket=None, timeout_s=0.0)

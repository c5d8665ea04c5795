"""``bench/state.py --cases large``: a large RocksDB keyed state (issue 43, part 3),
checkpointed and restored, with and without task-local recovery. One JSON line per
storage.

The state: ``--large-keys`` int keys (default 100 million), each with a value of
``--value-bytes`` random bytes (incompressible), written through ``ValueState.update_all``
a million keys at a time into one RocksDB keyed backend (``local_recovery=True``), whose
database is then compacted. Then, per storage (a local folder; S3 on a moto server with
``--s3``, at ``--s3-keys`` keys: moto keeps every object in memory):

* ``full_checkpoint_s``: the first incremental checkpoint (every SST file uploaded);
* ``incremental_checkpoint_s`` / ``incremental_bytes``: after ``--changed`` of the keys got
  a new value, the next one (only new SST files uploaded);
* ``read_local_s``: reading every SST file of the state from the local disk (the
  reference: what a restore costs at least);
* ``restore_storage_s``: a new backend restoring the checkpoint from the storage (every
  file downloaded, checked and written), ``transfer_threads`` files at once (the
  default); ``restore_storage_1_thread_s`` the same one file at a time;
* ``restore_local_s``: a new backend of the same operator and subtask restoring it with
  task-local recovery (every file linked from its local copy after its CRC32 check), with
  ``restored_locally`` / ``restored_remotely`` file counts;
* ``restore_local_over_read``: ``restore_local_s / read_local_s`` (issue 43: at most 2).

``page_cache``: whether the kernel's page cache was dropped before each timed read
(``/proc/sys/vm/drop_caches``, needs root); when not, reads may come from memory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.checkpoint.shared_registry import SharedFileTracker
from lockgate.checkpoint.storage_url import open_storage
from lockgate.state.descriptors import ValueStateDescriptor
from lockgate.state.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.state.rocksdb.restore import DEFAULT_TRANSFER_THREADS

CHUNK = 1_000_000


def drop_page_cache() -> bool:
    """Drop the kernel's page cache (root only); whether it worked."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def fill(backend: RocksDBKeyedStateBackend, keys: int, value_bytes: int, seed: int = 1) -> Any:
    """``keys`` int keys with random values of ``value_bytes`` bytes, written in chunks."""
    state = backend.get_state(ValueStateDescriptor("blob", default=b""))
    rng = np.random.default_rng(seed)
    for start in range(0, keys, CHUNK):
        n = min(CHUNK, keys - start)
        raw = rng.bytes(n * value_bytes)
        values = [raw[i * value_bytes : (i + 1) * value_bytes] for i in range(n)]
        state.update_all(np.arange(start, start + n, dtype=np.int64), values)
        backend.flush()
    backend.db.compact_range(None, None)
    return state


def checkpoint(
    backend: RocksDBKeyedStateBackend, storage: Any, tracker: SharedFileTracker, cid: int
) -> tuple[dict[str, Any], float, int]:
    """An incremental checkpoint: its payload, seconds and uploaded bytes."""
    started = time.perf_counter()
    view = backend.snapshot()
    try:
        uploader = tracker.uploader(storage, cid, "bench/0")
        payload = view.materialize_to(uploader)
    finally:
        view.release()
    tracker.snapshot_done(cid, [uploader])
    tracker.complete(cid)
    return payload, time.perf_counter() - started, uploader.uploaded_bytes


def read_files(paths: list[str]) -> float:
    started = time.perf_counter()
    for path in paths:
        with open(path, "rb") as f:
            while f.read(16 << 20):
                pass
    return time.perf_counter() - started


def restore_time(
    payload: dict[str, Any],
    storage: Any,
    local_dir: str,
    local_recovery: bool,
    threads: int = DEFAULT_TRANSFER_THREADS,
) -> tuple[float, Any]:
    target = RocksDBKeyedStateBackend(
        "bench",
        128,
        local_dir=local_dir,
        local_recovery=local_recovery,
        cache_entries=0,
        transfer_threads=threads,
    )
    started = time.perf_counter()
    target.restore([payload], range(128), storage=storage)
    seconds = time.perf_counter() - started
    copies = target.local_copies(storage.url) if local_recovery else None
    counts = (copies.restored_locally, copies.restored_remotely) if copies else (0, 0)
    target.close()
    return seconds, counts


def one_storage(
    name: str, storage: Any, keys: int, value_bytes: int, changed: float, local_dir: str
) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="lockgate-bench-large-", dir=local_dir)
    backend = RocksDBKeyedStateBackend(
        "bench", 128, local_dir=work, local_recovery=True, cache_entries=0
    )
    try:
        started = time.perf_counter()
        state = fill(backend, keys, value_bytes)
        fill_s = time.perf_counter() - started
        db_bytes = sum(
            os.path.getsize(os.path.join(backend.working_dir, "db", f))
            for f in os.listdir(os.path.join(backend.working_dir, "db"))
        )
        tracker = SharedFileTracker()
        cached = drop_page_cache()
        full, full_s, full_bytes = checkpoint(backend, storage, tracker, 1)
        rng = np.random.default_rng(2)
        some = np.unique(rng.integers(0, keys, int(keys * changed), dtype=np.int64))
        raw = rng.bytes(len(some) * value_bytes)
        state.update_all(
            some, [raw[i * value_bytes : (i + 1) * value_bytes] for i in range(len(some))]
        )
        backend.flush()
        _, incremental_s, incremental_bytes = checkpoint(backend, storage, tracker, 2)
        copies = backend.local_copies(storage.url)
        assert copies is not None
        local_files = [os.path.join(copies.folder, f) for f in os.listdir(copies.folder)
                       if f.endswith(".sst")]  # fmt: skip
        backend.close()  # the subtask is gone; its local copies stay
        drop_page_cache()
        read_s = read_files(local_files)
        drop_page_cache()
        one_thread_s, _ = restore_time(full, storage, work, local_recovery=False, threads=1)
        drop_page_cache()
        storage_s, _ = restore_time(full, storage, work, local_recovery=False)
        drop_page_cache()
        local_s, (here, there) = restore_time(full, storage, work, local_recovery=True)
        return {
            "bench": "state",
            "case": "large",
            "storage": name,
            "keys": keys,
            "value_bytes": value_bytes,
            "db_bytes": db_bytes,
            "fill_s": round(fill_s, 1),
            "full_checkpoint_s": round(full_s, 2),
            "full_bytes": full_bytes,
            "changed": changed,
            "incremental_checkpoint_s": round(incremental_s, 2),
            "incremental_bytes": incremental_bytes,
            "read_local_s": round(read_s, 2),
            "restore_storage_1_thread_s": round(one_thread_s, 2),
            "restore_storage_s": round(storage_s, 2),
            "transfer_threads": DEFAULT_TRANSFER_THREADS,
            "restore_local_s": round(local_s, 2),
            "restored_locally": here,
            "restored_remotely": there,
            "restore_local_over_read": round(local_s / read_s, 2) if read_s else None,
            "page_cache": "dropped before each timed read" if cached else "not dropped",
            "cores": os.cpu_count(),
        }
    finally:
        backend.close()
        shutil.rmtree(work, ignore_errors=True)


def large_cases(
    keys: int, value_bytes: int, changed: float, local_dir: str, s3_keys: int | None
) -> list[dict[str, Any]]:
    rows = []
    folder = tempfile.mkdtemp(prefix="lockgate-bench-large-ckpt-", dir=local_dir)
    try:
        rows.append(
            one_storage(
                "local", FileSystemCheckpointStorage(folder), keys, value_bytes, changed, local_dir
            )  # fmt: skip
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if s3_keys:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
        from s3_server import start_moto_server

        server = start_moto_server()
        try:
            os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
            storage = open_storage(server.url(path="bench-large", with_credentials=True))
            rows.append(one_storage("s3 (moto)", storage, s3_keys, value_bytes, changed,
                                    local_dir))  # fmt: skip
        finally:
            server.stop()
    return rows


if __name__ == "__main__":  # pragma: no cover - run through bench/state.py
    subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "state.py"),
                    "--cases", "large", *sys.argv[1:]], check=False)  # fmt: skip

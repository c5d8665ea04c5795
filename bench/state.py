"""Keyed state backends: update throughput and checkpoint sizes, one JSON line per case.

updates      value state read-modify-writes through the state handles
             (``state.update(state.value() + 1)`` with ``current_key`` set first, as the
             keyed operator does), over ``--keys`` keys in a random order, for the heap
             (hashmap) and the RocksDB backend; the median of ``--repeat`` runs.
checkpoints  the RocksDB backend with ``--keys`` keys: the bytes of a full checkpoint
             (the first incremental one: every file is new), of an incremental one after
             ``--changed`` of the keys changed (target: under 20% of the full one), of
             the canonical full state (what ``incremental=False`` and savepoints write)
             and of the heap backend's checkpoint of the same state, with the times of
             the synchronous and the asynchronous parts. Written to a local folder.

Usage:
    python bench/state.py [--cases updates,checkpoints] [--keys N] [--updates N]
                          [--changed FRACTION] [--repeat K]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from typing import Any

from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.checkpoint.shared_registry import SharedFileTracker
from lockgate.state.descriptors import ValueStateDescriptor
from lockgate.state.keyed import HeapKeyedStateBackend
from lockgate.state.rocksdb_backend import RocksDBKeyedStateBackend


def make_backend(kind: str, local_dir: str) -> Any:
    if kind == "hashmap":
        return HeapKeyedStateBackend("bench", 128)
    return RocksDBKeyedStateBackend("bench", 128, local_dir=local_dir)


def load(backend: Any, keys: int) -> Any:
    state = backend.get_state(ValueStateDescriptor("count", default=0))
    for k in range(keys):
        backend.current_key = k
        state.update(k)
    return state


def updates_run(kind: str, keys: int, updates: int, local_dir: str) -> float:
    backend = make_backend(kind, local_dir)
    try:
        state = load(backend, keys)
        order = [random.randrange(keys) for _ in range(updates)]
        started = time.perf_counter()
        for k in order:
            backend.current_key = k
            state.update(state.value() + 1)
        return updates / (time.perf_counter() - started)
    finally:
        backend.close()


def updates_case(kind: str, keys: int, updates: int, repeat: int, local_dir: str) -> dict:
    rates = [updates_run(kind, keys, updates, local_dir) for _ in range(repeat)]
    return {
        "case": "updates",
        "backend": kind,
        "keys": keys,
        "updates": updates,
        "updates_per_s": round(statistics.median(rates)),
        "runs": [round(r) for r in rates],
        "cores": os.cpu_count(),
    }


def checkpoints_case(keys: int, changed: float, local_dir: str) -> dict:
    storage = FileSystemCheckpointStorage(tempfile.mkdtemp(prefix="lockgate-bench-state-"))
    tracker = SharedFileTracker()
    rocks = make_backend("rocksdb", local_dir)
    try:
        state = load(rocks, keys)

        def incremental(checkpoint_id: int) -> dict[str, float]:
            started = time.perf_counter()
            view = rocks.snapshot()
            sync_s = time.perf_counter() - started
            try:
                uploader = tracker.uploader(storage, checkpoint_id, "bench/0")
                handle = storage.write_state(
                    checkpoint_id, "op-bench-0", view.materialize_to(uploader)
                )
            finally:
                view.release()
            tracker.snapshot_done(checkpoint_id, [uploader])
            tracker.complete(checkpoint_id)
            return {
                "bytes": handle.size + uploader.uploaded_bytes,
                "referenced_bytes": handle.size + uploader.uploaded_bytes + uploader.reused_bytes,
                "sync_ms": round(sync_s * 1000, 1),
                "total_ms": round((time.perf_counter() - started) * 1000, 1),
            }

        full = incremental(1)
        rnd = random.Random(1)
        for k in rnd.sample(range(keys), int(keys * changed)):
            rocks.current_key = k
            state.update(state.value() + 1)
        second = incremental(2)

        started = time.perf_counter()
        view = rocks.snapshot()
        try:
            canonical = view.materialize()
            canonical_bytes = storage.write_state(3, "op-bench-0", canonical).size
        finally:
            view.release()
        canonical_ms = (time.perf_counter() - started) * 1000
    finally:
        rocks.close()
    heap = make_backend("hashmap", local_dir)
    load(heap, keys)
    started = time.perf_counter()
    heap_view = heap.snapshot()
    heap_bytes = storage.write_state(4, "op-bench-0", heap_view.materialize()).size
    heap_view.release()
    heap_ms = (time.perf_counter() - started) * 1000
    return {
        "case": "checkpoints",
        "backend": "rocksdb",
        "keys": keys,
        "changed": changed,
        "full_bytes": full["bytes"],
        "full_sync_ms": full["sync_ms"],
        "full_total_ms": full["total_ms"],
        "incremental_bytes": second["bytes"],
        "incremental_referenced_bytes": second["referenced_bytes"],
        "incremental_sync_ms": second["sync_ms"],
        "incremental_total_ms": second["total_ms"],
        "incremental_over_full": round(second["bytes"] / full["bytes"], 4),
        "canonical_bytes": canonical_bytes,
        "canonical_ms": round(canonical_ms, 1),
        "heap_checkpoint_bytes": heap_bytes,
        "heap_checkpoint_ms": round(heap_ms, 1),
        "cores": os.cpu_count(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", default="updates,checkpoints")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--updates", type=int, default=1_000_000)
    ap.add_argument("--changed", type=float, default=0.01)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--local-dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    cases = args.cases.split(",")
    if "updates" in cases:
        for kind in ("hashmap", "rocksdb"):
            print(
                json.dumps(
                    updates_case(kind, args.keys, args.updates, args.repeat, args.local_dir)
                ),
                flush=True,
            )
    if "checkpoints" in cases:
        print(json.dumps(checkpoints_case(args.keys, args.changed, args.local_dir)), flush=True)


if __name__ == "__main__":
    main()

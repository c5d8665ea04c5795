"""Keyed state backends: update throughput and checkpoint sizes, one JSON line per case.

updates      value state read-modify-writes through the state handles
             (``state.update(state.value() + 1)`` with ``current_key`` set first), one
             backend call per access (the path outside batch scopes: timers, and how
             the keyed operator worked before batch scopes), over ``--keys`` keys in a
             random order, for the heap (hashmap) and the RocksDB backend; the median
             of ``--repeat`` runs.
batched      the same updates the way the keyed process operator now makes them: per
             input batch of ``--batch`` records, ``backend.begin_batch(keys)`` (RocksDB:
             one multi-get of the batch's keys that are not cached), the per-record
             handle calls, then ``backend.end_batch()`` (RocksDB: the cache trimmed to
             its bound; with ``--cache-entries 0``, one write batch); the heap backend has
             no batch scopes, so its loop is the per-call one. The backend's batched
             API is called directly (no operator, no records): this measures state
             access only. Both backends and the per-call RocksDB path run alternately
             in one process, so a noisy machine affects them alike.
operator     the same updates as records through the keyed process operator
             (``KeyedProcessOperator.process_batch`` with a KeyedProcessFunction doing
             ``count.update(count.value() + 1)``, batches of ``--batch`` dict records
             keyed by ``"k"``): key extraction, the function call and the output
             included; RocksDB (batch scopes) and heap alternately.
many_keys    the same updates a batch at a time through the many-keys calls: per batch
             of ``--batch`` random keys, its distinct keys (a numpy int array), their
             values with one ``ValueState.values_of``, each plus the number of times
             its key occurs in the batch, written with one ``update_all`` (RocksDB:
             the column mode of ``lockgate.state.rocksdb.columns``); heap and RocksDB
             alternately.
rolling      ``keyed.sum("v")``'s operator (``RollingAggregateOperator.process_batch``)
             on Arrow batches of ``--batch`` ``{"k", "v": 1}`` records: key column,
             running fold, state calls and the output batch included; heap and RocksDB
             alternately.
RocksDB runs with its write-back state cache bounded by ``--cache-entries`` (default: the
product default, 100,000; 0: no cache across batches). The keys are loaded first (and
written back, so the cache holds the last ``--cache-entries`` of them, clean); each
RocksDB line has ``cache_entries``, ``write_back_s`` (the time to write back the dirty
entries after the run: what the next snapshot's synchronous part would do) and
``updates_per_s_with_write_back`` (the rate with that time counted).

checkpoints  the RocksDB backend with ``--keys`` keys: the bytes of a full checkpoint
             (the first incremental one: every file is new), of an incremental one after
             ``--changed`` of the keys changed (target: under 20% of the full one), of
             the canonical full state (what ``incremental=False`` and savepoints write)
             and of the heap backend's checkpoint of the same state, with the times of
             the synchronous and the asynchronous parts. Written to a local folder.

typed        typed state (``ValueStateDescriptor(..., type=...)``: Arrow columns) against
             pickled state (no ``type=``), ``--keys`` keys of the heap backend, int
             values and a three-field dataclass: the bytes of the savepoint's state
             file, the time to take it (snapshot, canonical form, file written) and to
             restore it (file read, backend restored, the state asked for: the typed
             path converts its columns to values there); the two alternate, the
             median of ``--repeat`` runs. ``--cases typed``. Measured on 2026-12-06
             at state tree version 2 (2 cores, an idle machine, 1,000,000 keys,
             repeat 3): int values typed 3.3 MB / write 0.21 s / restore 0.22 s
             against pickled 9.7 MB / 0.78 s / 0.52 s; a three-field dataclass typed
             6.5 MB / 0.66 s / 2.40 s against pickled 46.5 MB / 5.93 s / 3.28 s.
             (Earlier the same day, beside a full test run: int typed 0.62 s / 0.68 s
             against pickled 2.64 s / 2.01 s; dataclass typed 2.36 s / 6.29 s against
             pickled 15.96 s / 9.75 s.)

Measured on 2026-11-28 (2 cores, 1,000,000 keys, 1,000,000 updates, batches of 4,096):
heap 796,000 updates/s (batched case) and 1,002,000 (operator case); RocksDB 91,000-97,000
(batched), 80,000 (per call), 100,000 (operator). Below the Python layer, rocksdict's own
calls cost about 3.6-4.6 us per key for a multi-get of 4,096 random keys of the million
(cached blocks, bloom filters; 1.5 us only when the keys are dense and sorted, which a
batch's keys among a million are not) and about 1.8 us per row for the write batch: a
ceiling near 160,000 updates/s for one read and one write per update, whatever the
Python side does. The 1,000,000/s target needs fewer database operations per update,
not faster ones.

With the write-back cache (2026-11-28, same machine shared with other benchmarks, one
run per line, ``--cases batched,operator --keys 1000000 --updates 1000000 --repeat 1``;
heap and RocksDB alternate in one process, so compare within a run):

  --cache-entries  batched heap / RocksDB       operator heap / RocksDB   write-back
  1,000,000        964,000 / 716,000            988,000 / 745,000         2.6-3.2 s
                   1,243,000 / 649,000          608,000 / 567,000         3.9-4.0 s
  100,000          871,000 / 63,000             864,000 / 65,000          0.3-0.5 s
  0                1,073,000 / 70,000           900,000 / 60,000          -

With every key cached RocksDB makes 0.52-0.93x the heap backend's updates/s (0.74-0.75x
in the quieter run): below 1,000,000/s. A py-spy profile of the cached loop (300,000
keys, 900,000 updates: heap 1.25-1.34M/s, RocksDB 0.69-0.94M/s in alternate runs) puts
48% of it in ``RocksDBStateTable.get`` (40% on its ``cache.get`` line: the random lookup
in a large dict, which the heap backend pays too) and 28% in ``__setitem__`` (the
cache store and the dirty-list append). Inlining the cache access into
``ValueState.value``/``update`` (an experiment, not kept) changed nothing measurable
(930,000-980,000 either way), so the remaining gap is the lookups and checks, not the
Python frames. Caching immutable values as objects matters: with every value kept
pickled the same loop makes 202,000-214,000/s instead of 614,000-633,000. Writing
back a dirty entry costs about 3.6 us (py-spy: 33% rocksdict's ``write``, 27% its
``WriteBatch.put`` with the value's pickling, 10% ``encode_key``), so 632,000 distinct
dirty keys take 2.6-4 s in the next snapshot; counted in, the rate is 173,000-253,000/s
for this uniform key set. With 10% of the keys cached (uniform random keys: 90% misses)
the rate is that of no cache: each miss costs a multi-get read and later a write-back.

Many keys at once (2026-11-28, 2 cores, quiet machine, ``--cases
batched,operator,many_keys,rolling --keys 1000000 --updates 1000000 --repeat 3
--cache-entries 1000000``; medians of 3 alternated runs): the per-key write-back now
builds int keys' rows and int/float values with numpy and writes them in row order
(RocksDB inserts sorted rows into its memtable about 15x faster than random ones), and
many-keys calls use a columnar cache (an int64 hash index over numpy value columns):

  case        heap        RocksDB      RocksDB with write-back   write-back
  many_keys   988,000     2,761,000    1,343,000                 0.39 s
  rolling     728,000     1,603,000    1,010,000                 0.33 s
  batched     993,000       723,000      395,000                 1.12 s (was 2.6-4.1 s)
  operator    933,000       599,000      362,000                 1.06 s

(``batched``/``operator``: one handle call per record, as a ``KeyedProcessFunction``
makes them; before this change 163,000-253,000/s with the write-back counted.) With the
default bound (100,000 entries, 10% of the keys: every batch mostly misses and reads
its keys with a multi-get) ``many_keys`` and ``rolling`` make about 160,000/s on RocksDB.
The heap backend's many-keys calls are dict lookups one key after another (100-350 ns
each over a million keys, cache misses that do not overlap), so the columnar RocksDB
cache is faster than the heap backend for them.

Usage:
large        a large RocksDB state (``--large-keys``, default 100 million keys of
             ``--value-bytes`` random bytes: about 10 GB) checkpointed (full and
             incremental) and restored from a local folder and, with ``--s3-keys``,
             from S3 (moto), with and without task-local recovery: see
             ``bench/state_large.py``.

    python bench/state.py [--cases updates,batched,operator,many_keys,rolling,checkpoints,large]
                          [--keys N] [--updates N] [--batch N] [--changed FRACTION] [--repeat K]
                          [--cache-entries N] [--large-keys N] [--value-bytes B] [--s3-keys N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa

import lockgate as lg
from lockgate.api.functions import KeyedProcessFunction
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.checkpoint.shared_registry import SharedFileTracker
from lockgate.core.batch import RowBatch
from lockgate.core.partitioners import KeySelector
from lockgate.runtime.context import RuntimeContext
from lockgate.runtime.operators.base import Output
from lockgate.runtime.operators.keyed import KeyedProcessOperator
from lockgate.runtime.operators.rolling import RollingAggregate, RollingAggregateOperator
from lockgate.state.backends import HashMapStateBackend, RocksDBStateBackend
from lockgate.state.descriptors import ValueStateDescriptor
from lockgate.state.keyed import HeapKeyedStateBackend
from lockgate.state.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.state.rocksdb.cache import DEFAULT_CACHE_ENTRIES

#: the RocksDB write-back cache bound of every case (``--cache-entries``)
CACHE_ENTRIES = DEFAULT_CACHE_ENTRIES


def make_backend(kind: str, local_dir: str) -> Any:
    if kind == "hashmap":
        return HeapKeyedStateBackend("bench", 128)
    return RocksDBKeyedStateBackend("bench", 128, local_dir=local_dir, cache_entries=CACHE_ENTRIES)


def load(backend: Any, keys: int) -> Any:
    """Give ``keys`` keys a value; RocksDB: written to the database (the cache keeps
    what its bound allows, clean)."""
    state = backend.get_state(ValueStateDescriptor("count", default=0))
    for k in range(keys):
        backend.current_key = k
        state.update(k)
    flush = getattr(backend, "flush", None)
    if flush is not None:
        flush()
    return state


def write_back(backend: Any) -> float:
    """The seconds the RocksDB backend takes to write its dirty cached entries back (what
    the next snapshot would do); 0 for the heap backend."""
    flush = getattr(backend, "flush", None)
    if flush is None:
        return 0.0
    started = time.perf_counter()
    flush()
    return time.perf_counter() - started


def updates_run(kind: str, keys: int, updates: int, local_dir: str) -> tuple[float, float]:
    backend = make_backend(kind, local_dir)
    try:
        state = load(backend, keys)
        order = [random.randrange(keys) for _ in range(updates)]
        started = time.perf_counter()
        for k in order:
            backend.current_key = k
            state.update(state.value() + 1)
        return updates / (time.perf_counter() - started), write_back(backend)
    finally:
        backend.close()


def batched_run(
    kind: str, keys: int, updates: int, batch: int, local_dir: str
) -> tuple[float, float]:
    backend = make_backend(kind, local_dir)
    try:
        state = load(backend, keys)
        order = [random.randrange(keys) for _ in range(updates)]
        chunks = [order[i : i + batch] for i in range(0, updates, batch)]
        begin = getattr(backend, "begin_batch", None)
        started = time.perf_counter()
        for chunk in chunks:
            if begin is not None:
                begin(chunk)
            for k in chunk:
                backend.current_key = k
                state.update(state.value() + 1)
            if begin is not None:
                backend.end_batch()
        return updates / (time.perf_counter() - started), write_back(backend)
    finally:
        backend.close()


def batched_cases(keys: int, updates: int, batch: int, repeat: int, local_dir: str) -> list[dict]:
    """hashmap, RocksDB batched and RocksDB per call, alternating run by run."""
    variants = [("hashmap", "batched"), ("rocksdb", "batched"), ("rocksdb", "per_call")]
    rates: dict[tuple[str, str], list[float]] = {v: [] for v in variants}
    flushes: dict[tuple[str, str], list[float]] = {v: [] for v in variants}
    for _ in range(repeat):
        for kind, path in variants:
            if path == "batched":
                rate, flush_s = batched_run(kind, keys, updates, batch, local_dir)
            else:
                rate, flush_s = updates_run(kind, keys, updates, local_dir)
            rates[(kind, path)].append(rate)
            flushes[(kind, path)].append(flush_s)
    return [
        {
            "case": "batched" if path == "batched" else "updates",
            "backend": kind,
            "path": path if kind == "rocksdb" else "per_call (no batch scopes)",
            "keys": keys,
            "updates": updates,
            "batch": batch if path == "batched" else None,
            "updates_per_s": round(statistics.median(rates[(kind, path)])),
            "runs": [round(r) for r in rates[(kind, path)]],
            **cache_fields(kind, updates, rates[(kind, path)], flushes[(kind, path)]),
            "alternated": True,
            "cores": os.cpu_count(),
        }
        for kind, path in variants
    ]


def cache_fields(kind: str, updates: int, rates: list[float], flushes: list[float]) -> dict:
    """RocksDB: the cache bound, the time to write back the dirty entries after the run
    (what the next snapshot does) and the rate with that write-back counted."""
    if kind != "rocksdb":
        return {}
    with_flush = [updates / (updates / r + f) for r, f in zip(rates, flushes)]
    return {
        "cache_entries": CACHE_ENTRIES,
        "write_back_s": round(statistics.median(flushes), 3),
        "updates_per_s_with_write_back": round(statistics.median(with_flush)),
    }


class _Count(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.count.update(self.count.value() + 1)
        return None


class _Discard(Output):
    def emit(self, batch: Any) -> None:
        pass

    def emit_side(self, tag: str, batch: Any) -> None:
        pass

    def emit_element(self, element: Any) -> None:
        pass


def opened(op: Any, kind: str, local_dir: str) -> Any:
    """``op`` set up as subtask 0 of 1 over a fresh backend of ``kind``, opened."""
    backend = (
        HashMapStateBackend()
        if kind == "hashmap"
        else RocksDBStateBackend(local_dir=local_dir, cache_entries=CACHE_ENTRIES)
    )
    ctx = RuntimeContext(
        task_name="bench",
        operator_name="bench",
        operator_uid="bench",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
        state_backend=backend,
    )
    op.setup("bench", "bench", ctx, _Discard())
    op.initialize_state(None)
    op.open()
    return op


def operator_run(
    kind: str, keys: int, updates: int, batch: int, local_dir: str
) -> tuple[float, float]:
    op = opened(KeyedProcessOperator(_Count(), KeySelector("k")), kind, local_dir)
    try:
        load(op.backend, keys)
        order = [random.randrange(keys) for _ in range(updates)]
        batches = [
            RowBatch([{"k": k} for k in order[i : i + batch]]) for i in range(0, updates, batch)
        ]
        started = time.perf_counter()
        for b in batches:
            op.process_batch(b)
        return updates / (time.perf_counter() - started), write_back(op.backend)
    finally:
        op.close()


def many_keys_run(
    kind: str, keys: int, updates: int, batch: int, local_dir: str
) -> tuple[float, float]:
    """Per input batch: the batch's distinct keys' values with one ``values_of``, each + the
    number of times the key occurs in the batch, written with one ``update_all`` (what a
    vectorized keyed operator does; RocksDB: its column mode)."""
    backend = make_backend(kind, local_dir)
    try:
        state = backend.get_state(ValueStateDescriptor("count", default=0))
        everything = list(range(keys))
        state.update_all(everything, everything)
        flush = getattr(backend, "flush", None)
        if flush is not None:
            flush()
        order = np.array([random.randrange(keys) for _ in range(updates)], dtype=np.int64)
        chunks = [order[i : i + batch] for i in range(0, updates, batch)]
        started = time.perf_counter()
        for chunk in chunks:
            distinct, counts = np.unique(chunk, return_counts=True)
            values = np.array(state.values_of(distinct), dtype=np.int64) + counts
            state.update_all(distinct, values)
        return updates / (time.perf_counter() - started), write_back(backend)
    finally:
        backend.close()


def rolling_run(
    kind: str, keys: int, updates: int, batch: int, local_dir: str
) -> tuple[float, float]:
    """``keyed.sum("v")``'s operator on Arrow batches of ``{"k", "v"}`` records."""
    op = opened(
        RollingAggregateOperator(RollingAggregate("sum", "v"), KeySelector("k")), kind, local_dir
    )
    try:
        state = op.backend.get_state(ValueStateDescriptor("sum(v)"))
        everything = list(range(keys))
        state.update_all(everything, everything)
        flush = getattr(op.backend, "flush", None)
        if flush is not None:
            flush()
        order = np.array([random.randrange(keys) for _ in range(updates)], dtype=np.int64)
        batches = [
            pa.RecordBatch.from_arrays(
                [
                    pa.array(order[i : i + batch]),
                    pa.array(np.ones(len(order[i : i + batch]), np.int64)),
                ],
                names=["k", "v"],
            )
            for i in range(0, updates, batch)
        ]
        started = time.perf_counter()
        for b in batches:
            op.process_batch(b)
        return updates / (time.perf_counter() - started), write_back(op.backend)
    finally:
        op.close()


#: case -> (the run of one backend, what the case measures)
ALTERNATED: dict[str, tuple[Any, str]] = {
    "operator": (operator_run, "KeyedProcessOperator.process_batch"),
    "many_keys": (many_keys_run, "ValueState.values_of / update_all per batch"),
    "rolling": (
        rolling_run,
        "keyed.sum('v'): RollingAggregateOperator.process_batch, Arrow batches",
    ),
}


def alternated_cases(
    case: str, keys: int, updates: int, batch: int, repeat: int, local_dir: str
) -> list[dict]:
    """One of :data:`ALTERNATED`, heap and RocksDB alternating run by run."""
    run, path = ALTERNATED[case]
    rates: dict[str, list[float]] = {"hashmap": [], "rocksdb": []}
    flushes: dict[str, list[float]] = {"hashmap": [], "rocksdb": []}
    for _ in range(repeat):
        for kind in rates:
            rate, flush_s = run(kind, keys, updates, batch, local_dir)
            rates[kind].append(rate)
            flushes[kind].append(flush_s)
    return [
        {
            "case": case,
            "backend": kind,
            "path": path + (" (batch scopes)" if case == "operator" and kind == "rocksdb" else ""),
            "keys": keys,
            "updates": updates,
            "batch": batch,
            "updates_per_s": round(statistics.median(r)),
            "runs": [round(x) for x in r],
            **cache_fields(kind, updates, r, flushes[kind]),
            "alternated": True,
            "cores": os.cpu_count(),
        }
        for kind, r in rates.items()
    ]


def updates_case(kind: str, keys: int, updates: int, repeat: int, local_dir: str) -> dict:
    runs = [updates_run(kind, keys, updates, local_dir) for _ in range(repeat)]
    rates = [r for r, _ in runs]
    return {
        "case": "updates",
        "backend": kind,
        "keys": keys,
        "updates": updates,
        "updates_per_s": round(statistics.median(rates)),
        "runs": [round(r) for r in rates],
        **cache_fields(kind, updates, rates, [f for _, f in runs]),
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


@dataclasses.dataclass
class Profile:
    name: str
    visits: int
    score: float


def _typed_values(value: str, keys: int) -> list[Any]:
    if value == "int":
        return list(range(keys))
    return [Profile(f"user-{k}", k % 1000, k / 7) for k in range(keys)]


def typed_run(typed: bool, value: str, keys: int, folder: str) -> dict[str, Any]:
    """One savepoint-style round: a heap backend holding ``keys`` values, its canonical
    snapshot written as a state file (what a savepoint holds), then read back, restored
    into a new backend and the state asked for (the typed path converts it there)."""
    spec = int if value == "int" else Profile
    descriptor = lg.ValueStateDescriptor("v", type=spec if typed else None)
    values = _typed_values(value, keys)
    backend = HeapKeyedStateBackend("bench", 128)
    handle = backend.get_state(descriptor)
    handle.update_all(list(range(keys)), values)
    storage = FileSystemCheckpointStorage(
        tempfile.mkdtemp(prefix="lockgate-bench-typed-", dir=folder)
    )
    started = time.perf_counter()
    view = backend.snapshot()
    try:
        written = storage.write_state(
            1, "op-bench-0", {"state": {"lockgate_state": 1, "keyed": view.materialize()}}
        )
    finally:
        view.release()
    write_s = time.perf_counter() - started
    started = time.perf_counter()
    payload = storage.read_state(written)
    restored = HeapKeyedStateBackend("bench", 128)
    restored.restore([payload["state"]["keyed"]], range(128))
    state = restored.get_state(lg.ValueStateDescriptor("v", type=spec if typed else None))
    restore_s = time.perf_counter() - started
    restored.current_key = keys - 1
    assert state.value() == values[-1]
    shutil.rmtree(storage.url.replace("file://", ""), ignore_errors=True)
    return {"bytes": written.size, "write_s": write_s, "restore_s": restore_s}


def typed_cases(keys: int, repeat: int, folder: str) -> list[dict[str, Any]]:
    """Typed (Arrow columns) against pickled state: savepoint bytes, write and restore
    time, for int values and for a three-field dataclass; the two run alternately, the
    median of ``repeat`` runs each."""
    lines = []
    for value in ("int", "dataclass"):
        runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
        for _ in range(repeat):
            for typed in (False, True):
                runs[typed].append(typed_run(typed, value, keys, folder))
        for typed in (False, True):
            r = runs[typed]
            lines.append(
                {
                    "case": f"savepoint-{value}-{'typed' if typed else 'pickled'}",
                    "keys": keys,
                    "bytes": r[0]["bytes"],
                    "write_s": round(statistics.median(x["write_s"] for x in r), 3),
                    "restore_s": round(statistics.median(x["restore_s"] for x in r), 3),
                    "repeat": repeat,
                    "cores": os.cpu_count(),
                }
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", default="updates,batched,checkpoints")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--updates", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=4096, help="records per input batch")
    ap.add_argument("--changed", type=float, default=0.01)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--local-dir", default=tempfile.gettempdir())
    ap.add_argument("--large-keys", type=int, default=100_000_000, help="the large case's keys")
    ap.add_argument("--value-bytes", type=int, default=80, help="the large case's value size")
    ap.add_argument(
        "--s3-keys", type=int, default=0, help="the large case on S3 (moto) with this many keys"
    )
    ap.add_argument(
        "--cache-entries",
        type=int,
        default=DEFAULT_CACHE_ENTRIES,
        help="the RocksDB write-back cache bound (0: no cache across batches)",
    )
    args = ap.parse_args()
    global CACHE_ENTRIES
    CACHE_ENTRIES = args.cache_entries
    cases = args.cases.split(",")
    if "updates" in cases:
        for kind in ("hashmap", "rocksdb"):
            print(
                json.dumps(
                    updates_case(kind, args.keys, args.updates, args.repeat, args.local_dir)
                ),
                flush=True,
            )
    if "batched" in cases:
        for line in batched_cases(args.keys, args.updates, args.batch, args.repeat, args.local_dir):
            print(json.dumps(line), flush=True)
    for case in ALTERNATED:
        if case in cases:
            for line in alternated_cases(
                case, args.keys, args.updates, args.batch, args.repeat, args.local_dir
            ):
                print(json.dumps(line), flush=True)
    if "checkpoints" in cases:
        print(json.dumps(checkpoints_case(args.keys, args.changed, args.local_dir)), flush=True)
    if "typed" in cases:
        for line in typed_cases(args.keys, args.repeat, args.local_dir):
            print(json.dumps(line), flush=True)
    if "large" in cases:
        from state_large import large_cases  # bench/ is on the path

        for line in large_cases(
            args.large_keys, args.value_bytes, args.changed, args.local_dir, args.s3_keys
        ):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

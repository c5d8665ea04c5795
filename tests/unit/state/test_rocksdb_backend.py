"""The RocksDB keyed state backend against a real rocksdict database and real storage
folders: every state kind through the shared handles, snapshot isolation (M-T3),
canonical snapshots equal to the heap backend's (M-T4, M-S1), restore of canonical and
native snapshots, rescaling by key group (M-R3, M-T4) and incremental payloads (M-R4)."""

from __future__ import annotations

import os
import random
import threading
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lockgate as lg
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.checkpoint.shared_registry import SharedFileTracker, SharedStateUploader
from lockgate.checkpoint.storage import MemoryCheckpointStorage
from lockgate.core.key_groups import key_group_for, key_group_range
from lockgate.errors import ConfigurationError, UnsupportedKeyError
from lockgate.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from lockgate.state.keyed import (
    HeapKeyedStateBackend,
    SnapshotReleasedError,
    UnsupportedSnapshotFormatError,
)
from lockgate.state.rocksdb import snapshot as rocksdb_snapshot
from lockgate.state.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.state.rocksdb.codec import decode_key, encode_key, key_group_of
from lockgate.state.rocksdb.files import NATIVE_FORMAT
from lockgate.state.ttl import StateTtlConfig


class Average(lg.AggregateFunction):
    def create_accumulator(self) -> Any:
        return (0, 0)

    def add(self, value: Any, acc: Any) -> Any:
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc: Any) -> Any:
        return acc[0] / acc[1]


def descriptors(ttl: StateTtlConfig | None = None) -> dict[str, Any]:
    ds: dict[str, Any] = {
        "value": ValueStateDescriptor("value", default=0),
        "list": ListStateDescriptor("list"),
        "map": MapStateDescriptor("map"),
        "reducing": ReducingStateDescriptor("reducing", lambda a, b: a + b),
        "aggregating": AggregatingStateDescriptor("aggregating", Average()),
    }
    if ttl is not None:
        for d in ds.values():
            d.enable_time_to_live(ttl)
    return ds


@pytest.fixture
def make(tmp_path: Any) -> Any:
    """Creates RocksDB backends with working folders under ``tmp_path``; closes them."""
    created: list[RocksDBKeyedStateBackend] = []

    def factory(**kwargs: Any) -> RocksDBKeyedStateBackend:
        kwargs.setdefault("local_dir", str(tmp_path / "local"))
        b = RocksDBKeyedStateBackend(
            kwargs.pop("name", "op"), kwargs.pop("max_parallelism", 128), **kwargs
        )
        created.append(b)
        return b

    yield factory
    for b in created:
        b.close()


def apply_ops(b: Any, handles: dict[str, Any], ops: list[tuple[str, Any, Any]]) -> list[Any]:
    """Run scripted operations on a backend; returns what the reads returned."""
    reads: list[Any] = []
    for op, key, arg in ops:
        b.current_key = key
        if op == "set":
            handles["value"].update(arg)
        elif op == "incr":
            handles["value"].update(handles["value"].value() + arg)
        elif op == "clear":
            handles["value"].clear()
        elif op == "append":
            handles["list"].add(arg)
        elif op == "put":
            handles["map"].put(arg % 3, arg)
        elif op == "remove":
            handles["map"].remove(arg % 3)
        elif op == "reduce":
            handles["reducing"].add(arg)
        elif op == "agg":
            handles["aggregating"].add(arg)
        elif op == "read":
            reads.append(
                (
                    handles["value"].value(),
                    handles["list"].get(),
                    sorted(handles["map"].items()),
                    handles["reducing"].get(),
                    handles["aggregating"].get(),
                )
            )
    return reads


def random_ops(seed: int, n: int, keys: list[Any]) -> list[tuple[str, Any, Any]]:
    rnd = random.Random(seed)
    kinds = ["set", "incr", "clear", "append", "put", "remove", "reduce", "agg", "read"]
    return [(rnd.choice(kinds), rnd.choice(keys), rnd.randint(1, 9)) for _ in range(n)]


KEYS: list[Any] = ["a", "b", "c", 1, 2, -7, 2**40, (1, "x"), ("y", None), b"k", 2.5, None, False]


def flat(materialized: dict[str, Any], name: str) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for entries in materialized["states"][name]["key_groups"].values():
        out.update(entries)
    return out


def checkpoint(
    b: RocksDBKeyedStateBackend,
    storage: Any,
    tracker: SharedFileTracker,
    checkpoint_id: int,
    owner: str = "op/0",
) -> tuple[Any, SharedStateUploader]:
    """An incremental checkpoint of ``b``: payload and uploader; confirmed complete."""
    view = b.snapshot()
    try:
        uploader = tracker.uploader(storage, checkpoint_id, owner)
        payload = view.materialize_to(uploader)
    finally:
        view.release()
    tracker.snapshot_done(checkpoint_id, [uploader])
    tracker.complete(checkpoint_id)
    return payload, uploader


# -- the handles over RocksDB ---------------------------------------------------------------


def test_every_state_kind_reads_back_what_the_heap_backend_reads(make: Any) -> None:
    rocks = make()
    heap = HeapKeyedStateBackend("op", 128)
    ops = random_ops(1, 2000, KEYS)
    r = {k: rocks.get_state(d) for k, d in descriptors().items()}
    h = {k: heap.get_state(d) for k, d in descriptors().items()}
    assert apply_ops(rocks, r, ops) == apply_ops(heap, h, ops)
    assert rocks.entries() == heap.entries()
    assert sorted(map(repr, rocks.keys("list"))) == sorted(map(repr, heap.keys("list")))


def test_m_t4_the_canonical_snapshot_equals_the_heap_backends_for_the_same_operations(
    make: Any,
) -> None:
    rocks = make()
    heap = HeapKeyedStateBackend("op", 128)
    ops = random_ops(2, 3000, KEYS + [f"k{i}" for i in range(200)])
    apply_ops(rocks, {k: rocks.get_state(d) for k, d in descriptors().items()}, ops)
    apply_ops(heap, {k: heap.get_state(d) for k, d in descriptors().items()}, ops)
    view = rocks.snapshot()
    heap_view = heap.snapshot()
    try:
        assert view.materialize() == heap_view.materialize()
    finally:
        view.release()
        heap_view.release()


def test_a_value_read_is_a_copy_change_it_with_update(make: Any) -> None:
    b = make()
    s = b.get_state(ValueStateDescriptor("v"))
    b.current_key = "k"
    s.update([1])
    s.value().append(2)  # a deserialized copy: not the stored value
    assert s.value() == [1]


def test_classes_defined_at_runtime_are_stored_with_cloudpickle(make: Any) -> None:
    b = make()
    s = b.get_state(ValueStateDescriptor("v"))
    Point = type("Point", (), {"__module__": "__main__", "__qualname__": "Point_not_importable"})
    b.current_key = 1
    p = Point()
    p.x = 3  # type: ignore[attr-defined]
    s.update(p)
    assert s.value().x == 3


def test_state_kinds_and_ttl_settings_cannot_change_under_one_name(make: Any) -> None:
    b = make()
    b.get_state(ValueStateDescriptor("s"))
    with pytest.raises(ConfigurationError, match="already registered as value state"):
        b.get_state(ListStateDescriptor("s"))
    d = ValueStateDescriptor("s")
    d.enable_time_to_live(StateTtlConfig(timedelta(seconds=1)))
    with pytest.raises(ConfigurationError, match="TTL"):
        b.get_state(d)
    with pytest.raises(ConfigurationError, match="state descriptor"):
        b.get_state("s")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"incremental": "yes"}, "incremental"),
        ({"subtask_index": -1}, "subtask_index"),
        ({"local_dir": ""}, "local_dir"),
        ({"max_parallelism": 0}, "max_parallelism"),
    ],
)
def test_bad_arguments_raise_configuration_error_naming_them(
    make: Any, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make(**kwargs)


def test_an_unwritable_local_dir_raises_configuration_error(tmp_path: Any) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError, match="local_dir") as info:
        RocksDBKeyedStateBackend("op", local_dir=str(tmp_path / "file" / "sub"))
    assert info.value.__cause__ is not None


def test_close_deletes_the_working_folder_and_later_use_is_refused(
    make: Any, tmp_path: Any
) -> None:
    b = make()
    s = b.get_state(ValueStateDescriptor("v"))
    b.current_key = 1
    s.update(1)
    view = b.snapshot()
    folder = b.working_dir
    assert folder.startswith(str(tmp_path / "local")) and os.path.isdir(folder)
    b.close()
    b.close()  # idempotent
    assert not os.path.exists(folder) and view.released
    with pytest.raises(ConfigurationError, match="closed"):
        b.snapshot()


# -- snapshots (M-T3) ---------------------------------------------------------------------


def test_m_t3_a_snapshot_does_not_see_writes_made_after_it(make: Any) -> None:
    b = make()
    v = b.get_state(ValueStateDescriptor("v"))
    lst = b.get_state(ListStateDescriptor("l"))
    for k in range(100):
        b.current_key = k
        v.update(k)
        lst.add(k)
    view = b.snapshot()
    for k in range(100):
        b.current_key = k
        v.update(k + 1000)
        lst.add(-1)
    b.current_key = 3
    v.clear()
    b.current_key = "new"
    v.update(1)
    try:
        snap = view.materialize()
    finally:
        view.release()
    assert flat(snap, "v") == {k: k for k in range(100)}
    assert flat(snap, "l") == {k: [k] for k in range(100)}
    assert flat(b.snapshot().materialize(), "v")[5] == 1005  # the live state moved on


def test_m_t3_release_is_idempotent_and_deletes_the_snapshot_folder(make: Any) -> None:
    b = make()
    view = b.snapshot()
    assert os.path.isdir(view.path) and b.outstanding_snapshots() == 1
    view.release()
    view.release()
    assert not os.path.exists(view.path) and b.outstanding_snapshots() == 0
    with pytest.raises(SnapshotReleasedError):
        view.materialize()


def test_m_t3_a_release_during_materialize_stops_it_and_deletes_the_folder_after(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = make()
    v = b.get_state(ValueStateDescriptor("v"))
    for k in range(10_000):
        b.current_key = k
        v.update(k)
    view = b.snapshot()
    inside, go_on = threading.Event(), threading.Event()
    real = rocksdb_snapshot.loads

    def pausing(data: bytes) -> Any:
        inside.set()
        assert go_on.wait(10), "the test never let materialize go on"
        return real(data)

    monkeypatch.setattr(rocksdb_snapshot, "loads", pausing)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = view.materialize()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert inside.wait(10), "materialize never started reading"
    view.release()
    assert os.path.isdir(view.path)  # still read: deleted when materialize ends
    go_on.set()
    t.join(10)
    assert isinstance(box.get("error"), SnapshotReleasedError)
    assert not os.path.exists(view.path) and b.outstanding_snapshots() == 0


def test_ttl_state_expired_at_snapshot_time_is_left_out_like_the_heap_backend(make: Any) -> None:
    clock = lg.ManualClock(1_000)
    rocks = make(clock=clock)
    heap = HeapKeyedStateBackend("op", 128, clock=clock)
    ttl = StateTtlConfig(timedelta(milliseconds=100))
    for b in (rocks, heap):
        handles = {k: b.get_state(d) for k, d in descriptors(ttl).items()}
        apply_ops(b, handles, random_ops(3, 300, KEYS))
    clock.advance(60)
    for b in (rocks, heap):
        handles = {k: b.get_state(d) for k, d in descriptors(ttl).items()}
        apply_ops(b, handles, random_ops(4, 100, KEYS[:5]))
    clock.advance(60)  # the first writes expired, the second ones did not
    rv, hv = rocks.snapshot(), heap.snapshot()
    clock.advance(10_000)  # materialize uses the time of snapshot()
    try:
        canonical = rv.materialize()
        assert canonical == hv.materialize()
        assert flat(canonical, "value")  # something is left...
        assert set(flat(canonical, "value")) <= set(KEYS[:5])  # ...only the recent keys
    finally:
        rv.release()
        hv.release()


# -- restore --------------------------------------------------------------------------------


def filled(make: Any, seed: int = 5, n: int = 3000, **kwargs: Any) -> RocksDBKeyedStateBackend:
    b = make(**kwargs)
    keys = KEYS + [f"k{i}" for i in range(300)] + list(range(300))
    apply_ops(b, {k: b.get_state(d) for k, d in descriptors().items()}, random_ops(seed, n, keys))
    return b


def canonical(b: Any) -> dict[str, Any]:
    view = b.snapshot()
    try:
        return view.materialize()
    finally:
        view.release()


def test_restore_of_a_heap_snapshot_then_the_same_job_gives_the_same_results(make: Any) -> None:
    heap = HeapKeyedStateBackend("op", 128)
    ops = random_ops(6, 2000, KEYS)
    apply_ops(heap, {k: heap.get_state(d) for k, d in descriptors().items()}, ops)
    snap = heap.snapshot().materialize()
    rocks = make()
    rocks.restore([snap], range(128))
    assert canonical(rocks) == snap
    more = random_ops(7, 1000, KEYS)
    r = apply_ops(rocks, {k: rocks.get_state(d) for k, d in descriptors().items()}, more)
    h = apply_ops(heap, {k: heap.get_state(d) for k, d in descriptors().items()}, more)
    assert r == h and rocks.entries() == heap.entries()


def test_a_canonical_rocksdb_snapshot_restores_into_the_heap_backend(make: Any) -> None:
    rocks = filled(make)
    snap = canonical(rocks)
    heap = HeapKeyedStateBackend("op", 128)
    heap.restore([snap], range(128))
    assert heap.snapshot().materialize() == snap


def test_m_r4_a_native_payload_restores_the_same_state(make: Any, tmp_path: Any) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "ckpt"))
    source = filled(make)
    payload, uploader = checkpoint(source, storage, SharedFileTracker(), 1)
    assert payload["format"] == NATIVE_FORMAT and uploader.uploaded_bytes > 0
    assert all(h.path.startswith("shared/op/0/") for h in payload["sst"].values())
    target = make()
    target.restore([payload], range(128))
    assert canonical(target) == canonical(source)
    more = random_ops(8, 500, KEYS)
    r = apply_ops(target, {k: target.get_state(d) for k, d in descriptors().items()}, more)
    s = apply_ops(source, {k: source.get_state(d) for k, d in descriptors().items()}, more)
    assert r == s and target.entries() == source.entries()


def test_m_r4_a_native_payload_names_its_storage_or_takes_the_one_given(make: Any) -> None:
    storage = MemoryCheckpointStorage("memory://not-registered-anywhere")
    payload, _ = checkpoint(filled(make), storage, SharedFileTracker(), 1)
    target = make()
    target.restore([payload], range(128), storage=storage)
    assert canonical(target)["states"]["value"]["key_groups"]


def test_after_a_restore_the_first_checkpoint_uploads_everything_then_increments(
    make: Any, tmp_path: Any
) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "ckpt"))
    tracker = SharedFileTracker()
    source = filled(make)
    payload, _ = checkpoint(source, storage, tracker, 1)
    target = make()
    target.restore([payload], range(128))
    _, first = checkpoint(target, storage, tracker, 2)  # same tracker: nothing matches
    assert first.reused_bytes == 0 and first.uploaded_bytes > 0
    assert not {h.path for h in first.referenced()} & {h.path for h in payload["sst"].values()}
    _, second = checkpoint(target, storage, tracker, 3)  # nothing changed: all reused
    assert second.uploaded_bytes == 0 and second.reused_bytes == first.uploaded_bytes


def split_by_subtask(snap: dict[str, Any], parallelism: int) -> list[dict[str, Any]]:
    """The canonical snapshot as ``parallelism`` subtasks would have written it."""
    parts = []
    for i in range(parallelism):
        kgs = key_group_range(i, parallelism, 128)
        parts.append(
            {
                **snap,
                "states": {
                    name: {
                        "kind": s["kind"],
                        "key_groups": {kg: e for kg, e in s["key_groups"].items() if kg in kgs},
                    }
                    for name, s in snap["states"].items()
                },
            }
        )
    return parts


@pytest.mark.parametrize("old, new", [(2, 3), (3, 2), (2, 1), (1, 4)])
def test_m_r3_rescaling_native_payloads_moves_whole_key_groups(
    make: Any, tmp_path: Any, old: int, new: int
) -> None:
    storage = FileSystemCheckpointStorage(str(tmp_path / "ckpt"))
    full = canonical(filled(make))
    payloads = []
    for i, part in enumerate(split_by_subtask(full, old)):  # each old subtask's own database
        b = make(subtask_index=i)
        b.restore([part], key_group_range(i, old, 128))
        payloads.append(checkpoint(b, storage, SharedFileTracker(), 1, f"op/{i}")[0])
    restored = []
    for j in range(new):
        b = make(subtask_index=j)
        kgs = key_group_range(j, new, 128)
        b.restore(payloads, kgs)
        snap = canonical(b)
        for state in snap["states"].values():
            assert set(state["key_groups"]) <= set(kgs)
        restored.append(snap)
    for name, state in full["states"].items():
        merged: dict[int, Any] = {}
        for snap in restored:
            merged.update(snap["states"][name]["key_groups"])
        assert merged == state["key_groups"], name


def test_m_r3_one_native_payload_restored_to_a_smaller_range_keeps_only_that_range(
    make: Any, tmp_path: Any
) -> None:
    storage = MemoryCheckpointStorage()
    full = canonical(filled(make))
    payload, _ = checkpoint(filled(make), storage, SharedFileTracker(), 1)
    b = make()
    b.restore([payload], range(40, 90), storage=storage)
    snap = canonical(b)
    for name, state in full["states"].items():
        assert snap["states"][name]["key_groups"] == {
            kg: e for kg, e in state["key_groups"].items() if 40 <= kg < 90
        }


def test_restore_checks_formats_kinds_and_max_parallelism(make: Any) -> None:
    b = make()
    with pytest.raises(UnsupportedSnapshotFormatError, match="format 2"):
        b.restore([{"format": 2, "max_parallelism": 128, "states": {}}], range(128))
    with pytest.raises(UnsupportedSnapshotFormatError, match="not a keyed state snapshot"):
        b.restore([[1, 2]], range(128))  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="max_parallelism 64"):
        b.restore([{"format": 1, "max_parallelism": 64, "states": {}}], range(128))
    with pytest.raises(ConfigurationError, match="range"):
        b.restore([], [0, 1])  # type: ignore[arg-type]
    b.get_state(ValueStateDescriptor("s"))
    snap = {
        "format": 1,
        "max_parallelism": 128,
        "states": {"s": {"kind": "list", "key_groups": {}}},
    }
    with pytest.raises(ConfigurationError, match="registered as value state"):
        b.restore([snap], range(128))
    bad = {
        "format": 1,
        "max_parallelism": 128,
        "states": {"t": {"kind": "list", "key_groups": {0: {"k": "not a list"}}}},
    }
    with pytest.raises(UnsupportedSnapshotFormatError, match="list state 't'"):
        b.restore([bad], range(128))


def test_restored_values_keep_their_ttl_form(make: Any) -> None:
    snap = {
        "format": 1,
        "max_parallelism": 128,
        "states": {"s": {"kind": "value", "key_groups": {key_group_for("k", 128): {"k": 5}}}},
    }
    b = make()
    b.restore([snap], range(128))
    d = ValueStateDescriptor("s")
    d.enable_time_to_live(StateTtlConfig(timedelta(seconds=1)))
    with pytest.raises(ConfigurationError, match="stored without TTL"):
        b.get_state(d)


def test_restore_with_a_snapshot_outstanding_is_refused(make: Any) -> None:
    b = make()
    view = b.snapshot()
    with pytest.raises(ConfigurationError, match="outstanding"):
        b.restore([], range(128))
    view.release()


def test_without_incremental_views_have_no_materialize_to(make: Any) -> None:
    b = make(incremental=False)
    view = b.snapshot()
    try:
        assert not hasattr(view, "materialize_to")
        assert view.materialize()["format"] == 1
    finally:
        view.release()


# -- keys and key groups ---------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
KEYS_STRATEGY = SCALARS | st.tuples(SCALARS, SCALARS) | st.tuples(SCALARS, st.tuples(SCALARS))


@settings(max_examples=300, deadline=None)
@given(KEYS_STRATEGY)
def test_the_scalar_key_group_equals_the_vectorized_one(key: Any) -> None:
    for mp in (1, 7, 128, 32768):
        assert key_group_of(key, mp) == key_group_for(key, mp)


@settings(max_examples=300, deadline=None)
@given(KEYS_STRATEGY)
def test_keys_encode_deterministically_and_decode_to_an_equal_key(key: Any) -> None:
    encoded = encode_key(key)
    decoded = decode_key(encoded)
    assert decoded == key and type(decoded) is type(key)
    assert encode_key(decoded) == encoded


def test_equal_tuples_encode_alike_whatever_their_object_identity() -> None:
    shared = "x" * 30
    assert encode_key((shared, shared)) == encode_key(("x" * 30, "".join(["x"] * 30)))


def test_a_key_that_cannot_be_serialized_raises_unsupported_key_error() -> None:
    with pytest.raises(UnsupportedKeyError, match="cannot serialize the key"):
        encode_key(threading.Lock())


def test_rows_of_a_key_group_range_are_contiguous(make: Any) -> None:
    b = make()
    v = b.get_state(ValueStateDescriptor("v"))
    w = b.get_state(ValueStateDescriptor("w"))
    for k in range(2000):
        b.current_key = k
        v.update(k)
        w.update(-k)
    groups = [key_group_for(k, 128) for k in b.keys("v")]  # keys() walks the rows in order
    assert groups == sorted(groups)


def test_keys_of_different_types_never_match_as_documented(make: Any) -> None:
    b = make()
    s = b.get_state(ValueStateDescriptor("v"))
    for key, value in [(1, "int"), (1.0, "float"), (True, "bool")]:
        b.current_key = key
        s.update(value)
    values = {}
    for key in (1, 1.0, True):
        b.current_key = key
        values[type(key).__name__] = s.value()
    assert values == {"int": "int", "float": "float", "bool": "bool"}
    assert sorted(map(repr, b.keys("v"))) == ["1", "1.0", "True"]

"""Typed keyed state (``type=`` on a descriptor): stored as Arrow columns in canonical
snapshots, restored into either backend, and the state evolution contract of
docs/state_evolution.md, one test per row, on the heap and the RocksDB backends
(M-T4, M-S1)."""

from __future__ import annotations

import dataclasses
import datetime
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, Optional, TypedDict

import pyarrow as pa
import pytest

import lockgate as lg
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.checkpoint.shared_registry import SharedStateUploader
from lockgate.state.keyed import HeapKeyedStateBackend
from lockgate.state.rocksdb.backend import RocksDBKeyedStateBackend
from lockgate.state.typed.registry import is_typed_entry

MP = 128
KEYS = ["a", "b", "c", "d"]


@pytest.fixture(params=["heap", "rocksdb"])
def make_backend(request: Any, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    made: list[Any] = []

    def make() -> Any:
        if request.param == "heap":
            b: Any = HeapKeyedStateBackend("op", MP)
        else:
            b = RocksDBKeyedStateBackend(
                "op", MP, local_dir=str(tmp_path / f"db{len(made)}"), incremental=False
            )
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def snapshot_of(backend: Any) -> dict[str, Any]:
    snap = backend.snapshot()
    try:
        return pickle.loads(pickle.dumps(snap.materialize()))  # as a checkpoint holds it
    finally:
        snap.release()


def write(make: Callable[[], Any], descriptor: Any, values: dict[str, Any]) -> dict[str, Any]:
    """A canonical snapshot of a backend whose state ``descriptor`` holds ``values``."""
    b = make()
    handle = b.get_state(descriptor)
    for key, value in values.items():
        b.current_key = key
        if descriptor.kind == "list":
            handle.update(value)
        elif descriptor.kind == "map":
            handle.put_all(value)
        else:
            handle.update(value)
    return snapshot_of(b)


def read(make: Callable[[], Any], snap: dict[str, Any], descriptor: Any) -> dict[str, Any]:
    b = make()
    b.restore([snap], range(MP))
    handle = b.get_state(descriptor)
    out = {}
    for key in KEYS:
        b.current_key = key
        if descriptor.kind == "map":
            out[key] = dict(handle.items())
        elif descriptor.kind == "list":
            out[key] = handle.get()
        else:
            out[key] = handle.value()
    return out


# -- the types ------------------------------------------------------------------------------
@dataclasses.dataclass
class ProfileV1:
    name: str
    visits: int
    score: float


@dataclasses.dataclass
class Address:
    city: str
    zip_code: str


@dataclasses.dataclass
class Customer:
    name: str
    address: Address
    tags: list[str]
    limits: dict[str, int]
    seen: Optional[datetime.datetime] = None  # noqa: UP045 (what users write)


class Point(NamedTuple):
    x: int
    y: int = 0


class Totals(TypedDict):
    n: int
    sum: float


V1 = {k: ProfileV1(k, i, i / 2) for i, k in enumerate(KEYS)}


def test_typed_value_state_is_stored_as_arrow_columns_not_pickles() -> None:
    b = HeapKeyedStateBackend("op", MP)
    s = b.get_state(lg.ValueStateDescriptor("p", type=ProfileV1))
    b.current_key = "a"
    s.update(ProfileV1("a", 1, 0.5))
    entry = snapshot_of(b)["states"]["p"]
    assert is_typed_entry(entry) and entry["kind"] == "value"
    table = pa.ipc.open_stream(pa.py_buffer(entry["arrow"])).read_all()
    assert table.column_names == ["key_group", "key", "value"]
    assert table.schema.field("value").type == pa.struct(
        [
            pa.field("name", pa.string(), nullable=False),
            pa.field("visits", pa.int64(), nullable=False),
            pa.field("score", pa.float64(), nullable=False),
        ]
    )
    assert table.column("value").to_pylist() == [{"name": "a", "visits": 1, "score": 0.5}]
    assert table.schema.metadata[b"lockgate.typed_state"] == b"1"


@pytest.mark.parametrize(
    ("descriptor", "values"),
    [
        (lg.ValueStateDescriptor("n", type=int), {k: i for i, k in enumerate(KEYS)}),
        (lg.ValueStateDescriptor("p", type=ProfileV1), V1),
        (
            lg.ValueStateDescriptor("c", type=Customer),
            {
                k: Customer(
                    k,
                    Address("Oslo", f"0{i}"),
                    [k, "x"],
                    {"day": i},
                    datetime.datetime(2026, 1, 1 + i) if i % 2 else None,
                )
                for i, k in enumerate(KEYS)
            },
        ),
        (lg.ValueStateDescriptor("pt", type=Point), {k: Point(i, -i) for i, k in enumerate(KEYS)}),
        (
            lg.ValueStateDescriptor("t", type=Totals),
            {k: {"n": i, "sum": i * 1.5} for i, k in enumerate(KEYS)},
        ),
        (
            lg.ValueStateDescriptor(
                "arrow", type=pa.struct([("a", pa.int32()), ("b", pa.string())])
            ),
            {k: {"a": i, "b": k} for i, k in enumerate(KEYS)},
        ),
        (
            lg.ValueStateDescriptor("schema", type=pa.schema([("a", pa.int64())])),
            {k: {"a": i} for i, k in enumerate(KEYS)},
        ),
        (lg.ListStateDescriptor("l", type=ProfileV1), {k: [V1[k], V1[k]] for k in KEYS}),
        (
            lg.MapStateDescriptor("m", key_type=str, type=float),
            {k: {"x": 1.0, k: 2.5} for k in KEYS},
        ),
        (lg.ValueStateDescriptor("tup", type=tuple[int, ...]), {k: (1, 2) for k in KEYS}),
    ],
    ids=lambda v: getattr(v, "name", None) or "values",
)
def test_typed_state_round_trips_through_a_snapshot_into_either_backend_M_T4(
    make_backend: Callable[[], Any], descriptor: Any, values: dict[str, Any]
) -> None:
    snap = write(make_backend, descriptor, values)
    assert is_typed_entry(snap["states"][descriptor.name])
    assert read(make_backend, snap, descriptor) == values


def test_typed_state_with_ttl_keeps_each_values_timestamp(make_backend: Callable[[], Any]) -> None:
    clock = lg.ManualClock(1_000)
    ttl = lg.StateTtlConfig(ttl=5_000)
    d = lg.ValueStateDescriptor("n", type=int)
    d.enable_time_to_live(ttl)
    b = make_backend()
    b.clock = clock
    s = b.get_state(d)
    b.current_key = "a"
    s.update(1)
    snap = snapshot_of(b)
    b2 = make_backend()
    b2.clock = lg.ManualClock(5_999)
    b2.restore([snap], range(MP))
    d2 = lg.ValueStateDescriptor("n", type=int)
    d2.enable_time_to_live(ttl)
    s2 = b2.get_state(d2)
    b2.current_key = "a"
    assert s2.value() == 1
    b2.clock.advance(6_001 - 5_999)  # type: ignore[attr-defined]
    assert s2.value() is None  # expired on its original schedule


def test_rescaling_restores_only_the_subtasks_key_groups(make_backend: Callable[[], Any]) -> None:
    d = lg.ValueStateDescriptor("n", type=int)
    snap = write(make_backend, d, {str(i): i for i in range(200)})
    halves = []
    for key_groups in (range(0, 64), range(64, 128)):
        b = make_backend()
        b.restore([snap], key_groups)
        b.get_state(lg.ValueStateDescriptor("n", type=int))
        halves.append(set(b.keys("n")))
    assert not halves[0] & halves[1]
    assert halves[0] | halves[1] == {str(i) for i in range(200)}


def test_a_typed_state_nobody_asks_for_is_kept_in_the_next_snapshot(
    make_backend: Callable[[], Any],
) -> None:
    snap = write(make_backend, lg.ValueStateDescriptor("p", type=ProfileV1), V1)
    b = make_backend()
    b.restore([snap], range(MP))
    again = snapshot_of(b)  # the job did not call get_state("p") (yet)
    assert read(make_backend, again, lg.ValueStateDescriptor("p", type=ProfileV1)) == V1


def test_a_value_that_does_not_fit_the_type_fails_the_snapshot_naming_key_and_value() -> None:
    b = HeapKeyedStateBackend("op", MP)
    s = b.get_state(lg.ValueStateDescriptor("n", type=int))
    b.current_key = "k1"
    s.update("not a number")
    snap = b.snapshot()
    with pytest.raises(TypeError, match=r"state 'n'.*key 'k1' holds 'not a number'"):
        snap.materialize()
    snap.release()


@pytest.mark.parametrize(
    "spec",
    [set[int], int | str, object, dict[ProfileV1, int], "int"],
    ids=["set", "union", "object", "struct-keys", "string"],
)
def test_a_type_that_cannot_be_stored_is_refused_when_the_descriptor_is_made(spec: Any) -> None:
    with pytest.raises(lg.StateTypeError, match=r"ValueStateDescriptor\('x'\)"):
        lg.ValueStateDescriptor("x", type=spec)


def test_typed_map_state_needs_its_key_type() -> None:
    with pytest.raises(lg.StateTypeError, match="key_type=str"):
        lg.MapStateDescriptor("m", type=int)
    with pytest.raises(lg.ConfigurationError, match="need type="):
        lg.ValueStateDescriptor("x", aliases={"a": "b"})


# -- the evolution contract, one test per row ---------------------------------------------------
@dataclasses.dataclass
class AddedWithDefault:
    name: str
    visits: int
    score: float
    level: int = 3


@dataclasses.dataclass
class AddedOptional:
    name: str
    visits: int
    score: float
    email: Optional[str]  # noqa: UP045


@dataclasses.dataclass
class AddedRequired:
    name: str
    visits: int
    score: float
    email: str


@dataclasses.dataclass
class Removed:
    name: str
    score: float


@dataclasses.dataclass
class Reordered:
    score: float
    visits: int
    name: str


@dataclasses.dataclass
class Renamed:
    full_name: str
    visits: int
    score: float


@dataclasses.dataclass
class IntToFloat:
    name: str
    visits: float
    score: float


@dataclasses.dataclass
class Changed:
    name: str
    visits: str
    score: float


def test_contract_added_field_takes_its_default(make_backend: Callable[[], Any]) -> None:
    snap = write(make_backend, lg.ValueStateDescriptor("p", type=ProfileV1), V1)
    got = read(make_backend, snap, lg.ValueStateDescriptor("p", type=AddedWithDefault))
    assert got == {k: AddedWithDefault(v.name, v.visits, v.score, 3) for k, v in V1.items()}


def test_contract_added_optional_field_is_null(make_backend: Callable[[], Any]) -> None:
    snap = write(make_backend, lg.ValueStateDescriptor("p", type=ProfileV1), V1)
    got = read(make_backend, snap, lg.ValueStateDescriptor("p", type=AddedOptional))
    assert got == {k: AddedOptional(v.name, v.visits, v.score, None) for k, v in V1.items()}


def test_contract_removed_field_is_dropped(make_backend: Callable[[], Any]) -> None:
    snap = write(make_backend, lg.ValueStateDescriptor("p", type=ProfileV1), V1)
    got = read(make_backend, snap, lg.ValueStateDescriptor("p", type=Removed))
    assert got == {k: Removed(v.name, v.score) for k, v in V1.items()}


def test_contract_reordered_fields_match_by_name(make_backend: Callable[[], Any]) -> None:
    snap = write(make_backend, lg.ValueStateDescriptor("p", type=ProfileV1), V1)
    got = read(make_backend, snap, lg.ValueStateDescriptor("p", type=Reordered))
    assert got == {k: Reordered(v.score, v.visits, v.name) for k, v in V1.items()}


def test_contract_renamed_field_through_an_alias(make_backend: Callable[[], Any]) -> None:
    snap = write(make_backend, lg.ValueStateDescriptor("p", type=ProfileV1), V1)
    d = lg.ValueStateDescriptor("p", type=Renamed, aliases={"full_name": "name"})
    got = read(make_backend, snap, d)
    assert got == {k: Renamed(v.name, v.visits, v.score) for k, v in V1.items()}


@dataclasses.dataclass
class Inner:
    town: str
    zip_code: str


@dataclasses.dataclass
class Outer:
    name: str
    address: Inner
    tags: list[str]
    limits: dict[str, int]
    seen: Optional[datetime.datetime] = None  # noqa: UP045


def test_contract_renamed_nested_field_through_a_dotted_alias(
    make_backend: Callable[[], Any],
) -> None:
    values = {k: Customer(k, Address("Oslo", "01"), [], {}, None) for k in KEYS}
    snap = write(make_backend, lg.ValueStateDescriptor("c", type=Customer), values)
    d = lg.ValueStateDescriptor("c", type=Outer, aliases={"address.town": "address.city"})
    got = read(make_backend, snap, d)
    assert got == {k: Outer(k, Inner("Oslo", "01"), [], {}, None) for k in KEYS}


@pytest.mark.parametrize(
    ("old", "new", "value", "expected"),
    [
        (pa.int32(), pa.int64(), 2**31 - 1, 2**31 - 1),
        (pa.int8(), pa.int32(), -5, -5),
        (pa.float32(), pa.float64(), 0.5, 0.5),
        (int, float, 7, 7.0),
        (pa.int32(), float, 3, 3.0),
        (int, Optional[int], 4, 4),  # noqa: UP045
    ],
    ids=["int32-int64", "int8-int32", "float32-float64", "int-float", "int32-float", "nullable"],
)
def test_contract_numbers_widen(
    make_backend: Callable[[], Any], old: Any, new: Any, value: Any, expected: Any
) -> None:
    snap = write(make_backend, lg.ValueStateDescriptor("n", type=old), dict.fromkeys(KEYS, value))
    got = read(make_backend, snap, lg.ValueStateDescriptor("n", type=new))
    assert got == dict.fromkeys(KEYS, expected)
    assert all(type(v) is type(expected) for v in got.values())


def test_contract_widening_inside_lists_and_map_values(make_backend: Callable[[], Any]) -> None:
    snap = write(
        make_backend,
        lg.MapStateDescriptor("m", key_type=str, type=pa.int32()),
        {k: {"x": 1} for k in KEYS},
    )
    got = read(make_backend, snap, lg.MapStateDescriptor("m", key_type=str, type=float))
    assert got == {k: {"x": 1.0} for k in KEYS}
    snap = write(make_backend, lg.ListStateDescriptor("l", type=ProfileV1), {"a": [V1["a"]]})
    got = read(make_backend, snap, lg.ListStateDescriptor("l", type=AddedWithDefault))
    assert got["a"] == [AddedWithDefault("a", 0, 0.0, 3)]


def refused(
    make: Callable[[], Any], old: Any, new: Any, match: str, values: Any = None, **kw: Any
) -> None:
    snap = write(make, lg.ValueStateDescriptor("p", type=old), values or V1)
    with pytest.raises(lg.IncompatibleStateError, match=match) as caught:
        read(make, snap, lg.ValueStateDescriptor("p", type=new, **kw))
    assert "operator 'op', state 'p'" in str(caught.value)
    assert isinstance(caught.value, lg.NonRestartableError)  # no restart can fix it


def test_contract_changed_type_is_refused_naming_the_field_and_both_types(
    make_backend: Callable[[], Any],
) -> None:
    refused(make_backend, ProfileV1, Changed, r"field 'visits' changed type from int64 to string")


def test_contract_narrowed_number_is_refused(make_backend: Callable[[], Any]) -> None:
    refused(
        make_backend,
        int,
        pa.int32(),
        r"the value changed type from int64 to int32",
        values=dict.fromkeys(KEYS, 1),
    )
    refused(
        make_backend,
        float,
        int,
        r"the value changed type from double to int64",
        values=dict.fromkeys(KEYS, 1.5),
    )


def test_contract_added_field_without_default_or_null_is_refused(
    make_backend: Callable[[], Any],
) -> None:
    refused(make_backend, ProfileV1, AddedRequired, r"field 'email' was added .* no default")


def test_contract_nullable_to_non_null_is_refused(make_backend: Callable[[], Any]) -> None:
    refused(
        make_backend,
        Optional[int],  # noqa: UP045
        int,
        r"was nullable .* declare it Optional",
        values=dict.fromkeys(KEYS, 1),
    )


def test_contract_changed_map_key_type_is_refused(make_backend: Callable[[], Any]) -> None:
    snap = write(
        make_backend,
        lg.MapStateDescriptor("m", key_type=str, type=int),
        {k: {"x": 1} for k in KEYS},
    )
    with pytest.raises(lg.IncompatibleStateError, match=r"user key type .* string to int64"):
        read(make_backend, snap, lg.MapStateDescriptor("m", key_type=int, type=int))


def test_contract_changed_kind_or_dropped_type_is_refused(make_backend: Callable[[], Any]) -> None:
    snap = write(make_backend, lg.ValueStateDescriptor("p", type=ProfileV1), V1)
    with pytest.raises(lg.IncompatibleStateError, match="is value state .* list state"):
        read(make_backend, snap, lg.ListStateDescriptor("p", type=ProfileV1))
    with pytest.raises(lg.IncompatibleStateError, match=r"typed .* declares no type"):
        read(make_backend, snap, lg.ValueStateDescriptor("p"))


def test_pickled_state_becomes_typed_when_a_type_is_declared(
    make_backend: Callable[[], Any],
) -> None:
    snap = write(make_backend, lg.ValueStateDescriptor("p"), V1)  # pickled values
    assert not is_typed_entry(snap["states"]["p"])
    b = make_backend()
    b.restore([snap], range(MP))
    b.get_state(lg.ValueStateDescriptor("p", type=ProfileV1))
    again = snapshot_of(b)
    assert is_typed_entry(again["states"]["p"])
    assert read(make_backend, again, lg.ValueStateDescriptor("p", type=ProfileV1)) == V1


def test_an_incremental_rocksdb_checkpoint_restores_typed_state_and_refuses_a_type_change(
    tmp_path: Path,
) -> None:
    """Values of an incremental checkpoint stay in the database as written: the same
    type restores; a changed type is refused, pointing at savepoints (which migrate)."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "chk"))
    b = RocksDBKeyedStateBackend("op", MP, local_dir=str(tmp_path / "db"), incremental=True)
    s = b.get_state(lg.ValueStateDescriptor("p", type=ProfileV1))
    for k, v in V1.items():
        b.current_key = k
        s.update(v)
    view = b.snapshot()
    try:
        payload = view.materialize_to(SharedStateUploader(storage, 1, "op/0"))
    finally:
        view.release()
        b.close()
    assert payload["typed"]["p"]["kind"] == "value"

    def restored(descriptor: Any) -> dict[str, Any]:
        r = RocksDBKeyedStateBackend("op", MP, local_dir=str(tmp_path / "r"), incremental=True)
        try:
            r.restore([payload], range(MP))
            handle = r.get_state(descriptor)
            out = {}
            for k in KEYS:
                r.current_key = k
                out[k] = handle.value()
            return out
        finally:
            r.close()

    assert restored(lg.ValueStateDescriptor("p", type=ProfileV1)) == V1
    with pytest.raises(lg.IncompatibleStateError, match=r"'level' added.*through a savepoint"):
        restored(lg.ValueStateDescriptor("p", type=AddedWithDefault))
    with pytest.raises(lg.IncompatibleStateError, match="declares no type"):
        restored(lg.ValueStateDescriptor("p"))


def test_the_savepoint_reader_reads_typed_state_without_the_jobs_classes() -> None:
    from lockgate.savepoint.decode import decode_subtask
    from lockgate.savepoint.rows import state_rows

    b = HeapKeyedStateBackend("op", MP)
    s = b.get_state(lg.ValueStateDescriptor("p", type=ProfileV1))
    b.current_key = "a"
    s.update(ProfileV1("a", 1, 0.5))
    payload = {"lockgate_state": 1, "keyed": snapshot_of(b)}
    decoded = decode_subtask("op", 0, payload)
    part = decoded.parts["p"]
    assert part.type_name == "ProfileV1"
    assert state_rows(part.kind, [(0, part)]) == [
        ("a", None, {"name": "a", "visits": 1, "score": 0.5})
    ]

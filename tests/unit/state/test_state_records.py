"""lockgate's own state as named, versioned records and plain data in the state tree
(lockgate.core.state_records, lockgate.checkpoint.state_tree; docs/savepoint_format.md,
M-S1): splits, transactions and window accumulators decode without unpickling anything,
a record's layout changes only with a migration, and nothing in a file can name a class
or function for the reader to import or call."""

from __future__ import annotations

import dataclasses
import os
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from test_state_tree import Tripwire

from lockgate.checkpoint.state_tree import (
    TREE_MAGIC,
    WALK_LIMIT,
    PickledValue,
    TreeFormatError,
    decode_tree,
    encode_tree,
    has_pickles,
)
from lockgate.connectors.delta.files import DataFile
from lockgate.connectors.delta.sink import DeltaTransaction
from lockgate.connectors.files.sink import FileTransaction
from lockgate.connectors.files.source import DoneFiles, FileSplit
from lockgate.connectors.kafka.source import KafkaSplit
from lockgate.connectors.kafka.transactions import KafkaTransaction
from lockgate.connectors.postgres.cdc.snapshot import ChunkRange
from lockgate.connectors.postgres.cdc.splits import ChunkSplit, StreamSplit
from lockgate.connectors.postgres.cdc.types import Column
from lockgate.connectors.postgres.sink import PgTransaction
from lockgate.core import state_records
from lockgate.core.state_records import (
    RECORD_MODULES,
    RecordFormatError,
    spec_named,
    spec_of,
    state_record,
)
from lockgate.windowing.aggregate_specs import WindowAggregate
from lockgate.windowing.aggregates import WindowAggregation


def no_pickles(value: Any) -> Any:
    """``value`` through a state file, read without unpickling; asserts none was needed."""
    decoded = decode_tree(encode_tree(value), unpickle=False)
    assert not has_pickles(decoded), "a pickled part where data was expected"
    return decoded


def test_every_record_name_resolves_to_its_class_in_the_module_the_table_names() -> None:
    for name, module in RECORD_MODULES.items():
        spec = spec_named(name, "test")
        assert spec.name == name and spec.cls.__module__ == module
        assert spec_of(spec.cls) is spec


def test_splits_and_transactions_round_trip_as_records_without_unpickling() -> None:
    state = {
        "splits": [KafkaSplit("orders", 3, 1_234, None), FileSplit("f-1", "/in/a.jsonl", 7)],
        "done": DoneFiles(frozenset({"a.jsonl", "b.jsonl"}), bounded=True),
        "pending": [
            (4, FileTransaction("/out/.p.inprogress", "/out/part-0-1.jsonl", 0, 1, 10, 99)),
            (5, KafkaTransaction("lockgate-x-0-1", 7, 2, 10, (("t", 0, 3), ("t", 1, 2)))),
        ],
        "current": DeltaTransaction(
            "app:0:run",
            0,
            "stem",
            4,
            [DataFile("part-0.parquet", 10, {"day": "2026-12-06", "x": None}, "{}", 3)],
        ),
        "pg": PgTransaction("gid", 3, "run", "name"),
        "cdc": [
            StreamSplit(
                10,
                None,
                {"public.t": (Column("id", 23, key=True), Column("v", 25))},
                (ChunkRange("public.t", None, 100), ChunkRange("public.t", 100, None)),
                {0: "1:2:"},
                {1: "3:4:"},
            ),
            ChunkSplit(0, ChunkRange("public.t", None, 100), "5:6:"),
        ],
    }
    assert no_pickles(state) == state


def test_a_thousand_splits_are_records_not_one_pickle() -> None:
    splits = [KafkaSplit("t", p, p * 10) for p in range(WALK_LIMIT * 16)]
    assert no_pickles({"splits": splits})["splits"] == splits


def test_window_accumulators_are_records_of_arrays() -> None:
    from lockgate.windowing.aggregates import Accumulators

    aggregation = WindowAggregation(
        (WindowAggregate("count", None, "count"), WindowAggregate("sum", "v", "sum_v"))
    )
    acc = Accumulators(
        aggregation,
        [(np.array([1, 2], np.int64),), (np.array([1.5, 2.5]), np.array([1, 2], np.int64))],
        [None, pa.float64()],
    )
    back = no_pickles({"payload": acc})["payload"]
    assert back.aggregation == aggregation and back.types == acc.types
    for fs, gs in zip(back.fields, acc.fields):
        for f, g in zip(fs, gs):
            np.testing.assert_array_equal(f, g)
            assert f.dtype == g.dtype


@pytest.mark.parametrize(
    "array",
    [
        np.arange(5, dtype=np.int32),
        np.array([[1.5, 2.5], [3.5, 4.5]], dtype=np.float32).T,  # not C-contiguous
        np.array([True, False]),
        np.array(["2026-12-06T10:00"], dtype="datetime64[ms]"),
        np.zeros((0,), dtype=np.uint64),
    ],
)
def test_numeric_arrays_are_data_and_come_back_writable(array: np.ndarray) -> None:
    back = no_pickles([array])[0]
    np.testing.assert_array_equal(back, array)
    assert back.dtype == array.dtype and back.shape == array.shape
    back[...] = back  # writable


def test_an_object_array_or_a_users_object_stays_a_pickled_part() -> None:
    decoded = decode_tree(encode_tree([np.array([object()], dtype=object)]), unpickle=False)
    assert isinstance(decoded[0], PickledValue)


def test_arrow_types_are_data() -> None:
    types = [pa.int64(), pa.timestamp("ms", "UTC"), pa.struct([("a", pa.list_(pa.string()))])]
    assert no_pickles(types) == types


def test_large_containers_and_sets_of_plain_values_are_data() -> None:
    timers = [(1_000 + i, f"key-{i}", None) for i in range(10_000)]
    value = {
        "timers": timers,
        "seen": {1, 2, 3},
        "names": frozenset({"x"}),
        "raw": bytearray(b"ab"),
    }
    assert no_pickles(value) == value


def _tree_with_plain_part(payload: bytes) -> bytes:
    """A version-2 state tree whose one value is a ``p`` (plain data) part holding ``payload``."""
    return (
        TREE_MAGIC
        + struct.pack("<H", 2)
        + b"p"
        + struct.pack("<Q", len(payload))
        + payload
        + (struct.pack("<IQ", 0, 0))
    )


def test_a_plain_data_part_that_names_a_function_is_refused_and_nothing_runs(
    tmp_path: Path,
) -> None:
    """The ``p`` tag's unpickler names no class or function, whatever the file holds:
    a forged part that would call ``open`` (or ``os.system``) is refused."""
    marker = tmp_path / "fired"
    for forged in (pickle.dumps(Tripwire(str(marker))), pickle.dumps(os.system)):
        with pytest.raises(TreeFormatError, match="plain-data part .* names"):
            decode_tree(_tree_with_plain_part(forged), unpickle=False, where="sp/op-x")
        with pytest.raises(TreeFormatError):
            decode_tree(_tree_with_plain_part(forged), unpickle=True, where="sp/op-x")
    assert not marker.exists()
    assert decode_tree(_tree_with_plain_part(pickle.dumps([1, "a"])), unpickle=False) == [1, "a"]


def test_an_unknown_record_name_is_refused_and_imports_nothing() -> None:
    data = encode_tree(KafkaSplit("t", 0, 1))
    forged = data.replace(b"kafka.split", b"os.system!!")
    with pytest.raises(TreeFormatError, match="unknown state record 'os.system!!'"):
        decode_tree(forged, unpickle=False)


# -- layout changes: only with a migration ----------------------------------------------------
@pytest.fixture
def test_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(RECORD_MODULES, "test.thing", __name__)
    monkeypatch.setattr(state_records, "_BY_NAME", dict(state_records._BY_NAME))
    monkeypatch.setattr(state_records, "_BY_CLASS", dict(state_records._BY_CLASS))


def _thing_v1() -> bytes:
    @state_record("test.thing", version=1)
    @dataclasses.dataclass
    class Thing:
        a: int
        b: str

    return encode_tree(Thing(1, "x"))


@pytest.mark.usefixtures("test_records")
def test_a_field_added_with_a_default_reads_older_files_without_a_version_bump() -> None:
    old = _thing_v1()

    @state_record("test.thing", version=1)
    @dataclasses.dataclass
    class Thing:
        a: int
        b: str
        c: float = 0.5

    assert decode_tree(old, unpickle=False) == Thing(1, "x", 0.5)


@pytest.mark.usefixtures("test_records")
def test_a_changed_layout_without_a_migration_is_refused_naming_the_record() -> None:
    old = _thing_v1()

    @state_record("test.thing", version=2)
    @dataclasses.dataclass
    class Thing:
        a: int
        label: str

    with pytest.raises(TreeFormatError, match="'test.thing' version 1 has no upgrade"):
        decode_tree(old, where="sp/op-x")


@pytest.mark.usefixtures("test_records")
def test_a_changed_layout_with_its_migration_reads_older_files() -> None:
    old = _thing_v1()

    def upgrade(version: int, fields: dict[str, Any]) -> dict[str, Any]:
        assert version == 1
        fields["label"] = fields.pop("b")
        return fields

    @state_record("test.thing", version=2, upgrade=upgrade)
    @dataclasses.dataclass
    class Thing:
        a: int
        label: str

    assert decode_tree(old) == Thing(1, "x")


@pytest.mark.usefixtures("test_records")
def test_a_record_of_a_newer_version_or_with_fields_that_do_not_fit_is_refused() -> None:
    @state_record("test.thing", version=3)
    @dataclasses.dataclass
    class Newer:
        a: int

    newer = encode_tree(Newer(1))

    @state_record("test.thing", version=1)
    @dataclasses.dataclass
    class Thing:
        a: int
        b: str

    with pytest.raises(TreeFormatError, match="version 3 was written by a newer lockgate"):
        decode_tree(newer)

    @state_record("test.thing", version=3)
    @dataclasses.dataclass
    class Other:
        z: int

    with pytest.raises(TreeFormatError, match="does not fit"):
        decode_tree(newer)


def test_a_record_outside_the_table_or_not_a_dataclass_is_refused_at_definition() -> None:
    with pytest.raises(RecordFormatError, match="update the table"):

        @state_record("kafka.split")
        @dataclasses.dataclass
        class Impostor:
            a: int

    with pytest.raises(RecordFormatError, match="update the table"):

        @state_record("not.in.the.table")
        @dataclasses.dataclass
        class Unlisted:
            a: int


def test_a_record_holding_a_users_object_keeps_it_a_pickled_part() -> None:
    class Opaque:
        pass

    data = encode_tree(PgTransaction("gid", 1, "run", "name", deferred=Opaque()))  # type: ignore[arg-type]
    lazy = decode_tree(data, unpickle=False)
    assert isinstance(lazy, PgTransaction) and isinstance(lazy.deferred, PickledValue)
    assert has_pickles(lazy)
    assert isinstance(decode_tree(data).deferred, Opaque)


def test_a_version_1_tree_still_reads() -> None:
    """Files written before records (tree version 1) use a subset of the tags."""
    data = encode_tree({"a": [1, "x", None, b"y"], "b": 2.5})
    v1 = data[:4] + struct.pack("<H", 1) + data[6:]
    assert decode_tree(v1, unpickle=False) == {"a": [1, "x", None, b"y"], "b": 2.5}


def test_arrow_batches_tables_schemas_and_row_batches_are_data() -> None:
    """In-flight data (channel state of unaligned checkpoints, buffers) is data too."""
    from lockgate.core.batch import RowBatch

    batch = pa.record_batch({"k": [1, 2], "s": ["a", None]})
    table = pa.table({"x": [1.5]})
    rows = RowBatch([{"k": 1}, {"k": 2}], np.array([10, 20], np.int64), None)
    back = no_pickles({"b": batch, "t": table, "schema": batch.schema, "rows": rows})
    assert back["b"].equals(batch) and isinstance(back["b"], pa.RecordBatch)
    assert back["t"].equals(table) and isinstance(back["t"], pa.Table)
    assert back["schema"].equals(batch.schema)
    assert back["rows"] == rows
    np.testing.assert_array_equal(back["rows"].timestamps, rows.timestamps)
    empty = no_pickles(batch.slice(0, 0))
    assert isinstance(empty, pa.RecordBatch) and empty.num_rows == 0

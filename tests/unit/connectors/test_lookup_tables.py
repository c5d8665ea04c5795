"""The tables a lookup join reads (lockgate/api/lookup_table.py and the connectors'
lookup modules): files through FileSource's readers, Delta versions, Iceberg snapshots,
and the errors for a table that is not there or an argument that is wrong. PostgreSQL
queries are tested against the real server in tests/connectors/test_postgres_lookup.py."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg
from lockgate.connectors import CollectionSource
from lockgate.errors import ConfigurationError


def doubles(n: int, factor: int = 2) -> pa.Table:
    return pa.table({"x": pa.array(range(n), pa.int64()), "y": [factor * i for i in range(n)]})


# -- files ------------------------------------------------------------------------------


def test_parquet_csv_and_json_files_load_as_filesource_reads_them(tmp_path: Path) -> None:
    """A folder of two Parquet files, a CSV file (a converter for one column) and a
    JSON-lines file: the same rows, in file order."""
    folder = tmp_path / "pq"
    folder.mkdir()
    pq.write_table(doubles(3), folder / "a.parquet")
    pq.write_table(doubles(5).slice(3), folder / "b.parquet")
    (tmp_path / "t.csv").write_text("x,y,zip\n1,2,01234\n2,4,09999\n")
    (tmp_path / "t.jsonl").write_text('{"x": 1, "y": "a"}\n\n{"x": 2, "y": null}\n')

    parquet = lg.LookupTable.parquet(folder, columns=["x"]).source.load()
    assert parquet.table.to_pylist() == [{"x": i} for i in range(5)] and parquet.version is None
    csv = lg.LookupTable.csv(tmp_path / "t.csv", csv_types={"zip": str}).source.load().table
    assert csv.to_pylist() == [{"x": 1, "y": 2, "zip": "01234"}, {"x": 2, "y": 4, "zip": "09999"}]
    json = lg.LookupTable.json(tmp_path / "t.jsonl").source.load().table
    assert json.to_pylist() == [{"x": 1, "y": "a"}, {"x": 2, "y": None}]


def test_a_missing_file_is_refused_when_the_table_is_made(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"LookupTable.parquet: .*does not exist"):
        lg.LookupTable.parquet(tmp_path / "nope.parquet")


def test_a_malformed_line_fails_the_load_naming_its_place(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"x": 1}\n{"x": \n')
    with pytest.raises(lg.MalformedRecordError, match="t.jsonl"):
        lg.LookupTable.json(tmp_path / "t.jsonl").source.load()


def test_any_bounded_source_can_be_a_table() -> None:
    table = lg.LookupTable.from_source(CollectionSource([{"x": 1, "y": 2}, {"x": 2, "y": 4}]))
    assert table.source.load().table.to_pylist() == [{"x": 1, "y": 2}, {"x": 2, "y": 4}]


# -- Delta and Iceberg: versions ---------------------------------------------------------


def test_a_delta_table_loads_its_newest_version_or_a_pinned_one(tmp_path: Path) -> None:
    uri = str(tmp_path / "delta")
    deltalake.write_deltalake(uri, doubles(3))
    deltalake.write_deltalake(uri, doubles(3, factor=10), mode="overwrite")
    source = lg.LookupTable.delta(uri).source
    newest = source.load()
    assert newest.version == 1 and newest.table.column("y").to_pylist() == [0, 10, 20]
    pinned = source.load(0)
    assert pinned.version == 0 and pinned.table.column("y").to_pylist() == [0, 2, 4]
    assert lg.LookupTable.delta(uri).versioned


def test_a_missing_delta_table_is_refused_when_the_table_is_made(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no Delta table at"):
        lg.LookupTable.delta(tmp_path / "nothing")


def test_a_delta_version_that_is_gone_says_what_to_do(tmp_path: Path) -> None:
    uri = str(tmp_path / "delta")
    deltalake.write_deltalake(uri, doubles(3))
    with pytest.raises(ConfigurationError, match="cannot read version 7 .* restore from a newer"):
        lg.LookupTable.delta(uri).source.load(7)


def sqlite_catalog(tmp_path: Path) -> dict[str, str]:
    return {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }


def test_an_iceberg_table_loads_its_current_snapshot_or_a_pinned_one(tmp_path: Path) -> None:
    from pyiceberg.catalog import load_catalog

    props = sqlite_catalog(tmp_path)
    catalog = load_catalog("default", **props)
    catalog.create_namespace("ref")
    table = catalog.create_table("ref.doubles", schema=doubles(1).schema)
    empty = lg.LookupTable.iceberg(props, "ref.doubles").source.load()
    assert empty.version is None and empty.table.num_rows == 0
    table.append(doubles(3))
    first = table.current_snapshot().snapshot_id
    table.overwrite(doubles(3, factor=10))
    source = lg.LookupTable.iceberg(props, "ref.doubles").source
    newest = source.load()
    assert newest.version == table.current_snapshot().snapshot_id != first
    assert sorted(newest.table.column("y").to_pylist()) == [0, 10, 20]
    assert sorted(source.load(first).table.column("y").to_pylist()) == [0, 2, 4]
    with pytest.raises(ConfigurationError, match="has no snapshot 12345"):
        source.load(12345)


def test_a_missing_iceberg_table_is_refused_when_the_table_is_made(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigurationError, match="LookupTable.iceberg: catalog 'default' has no table"
    ):
        lg.LookupTable.iceberg(sqlite_catalog(tmp_path), "ref.nothing")
    with pytest.raises(ConfigurationError, match="LookupTable.iceberg table must be"):
        lg.LookupTable.iceberg(sqlite_catalog(tmp_path), "no_namespace")


# -- the join's arguments ----------------------------------------------------------------


@pytest.fixture
def stream() -> lg.DataStream:
    return lg.StreamEnvironment(parallelism=1).from_collection([{"key": 1}])


@pytest.fixture
def table(tmp_path: Path) -> lg.LookupTable:
    pq.write_table(doubles(3), tmp_path / "t.parquet")
    return lg.LookupTable.parquet(tmp_path / "t.parquet")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"how": "outer"}, "how= must be 'inner' .* or 'left'"),
        ({"how": "LEFT"}, "how= must be"),
        ({"refresh": timedelta(0)}, "refresh= must be positive"),
        ({"refresh": timedelta(seconds=-1)}, "refresh= must be positive"),
        ({"refresh": 5}, "refresh= must be a datetime.timedelta"),
        ({"on": ""}, "on= must be the stream's key field"),
        ({"on": True}, "on= must be"),
        ({"table_key": None}, "table_key= must be the table's key column"),
        ({"table_suffix": ""}, "table_suffix= must be a non-empty str"),
    ],
)
def test_bad_arguments_are_refused_when_the_job_is_built(
    stream: lg.DataStream, table: lg.LookupTable, kwargs: dict, message: str
) -> None:
    args = {"on": "key", "table_key": "x", **kwargs}
    with pytest.raises(ConfigurationError, match=message):
        stream.lookup_join(table, **args)


def test_a_table_that_is_not_a_lookup_table_is_refused(stream: lg.DataStream) -> None:
    with pytest.raises(ConfigurationError, match="lookup_join takes a LookupTable, got str"):
        stream.lookup_join("t.parquet", on="key", table_key="x")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="LookupTable wraps a LookupSource"):
        lg.LookupTable(pa.table({"x": [1]}))  # type: ignore[arg-type]

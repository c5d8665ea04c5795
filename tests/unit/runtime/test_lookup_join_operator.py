"""The lookup join operator (lockgate/runtime/operators/lookup/operator.py), driven by
the OperatorHarness: output against pandas' merge for Arrow, dict and tuple batches,
the refresh on the task's processing-time clock (a manual clock, nothing sleeps), one
version per batch, and the version and refresh point carried through a snapshot
(M-T4, M-R1)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg
from lockgate.api.lookup_join import lookup_join_factory
from lockgate.connectors.lookup_source import LoadedTable, LookupSource
from lockgate.core.batch import RowBatch, scalar_batch, with_timestamps
from lockgate.errors import ConfigurationError
from lockgate.runtime.operators.lookup.operator import LookupJoinOperator
from lockgate.testing import OperatorHarness


class Versions(LookupSource):
    """A versioned table in memory: version ``i`` is ``tables[i]``; ``current`` is what
    a load without a version reads. Records every load."""

    versioned = True

    def __init__(self, *tables: pa.Table) -> None:
        self.tables = list(tables)
        self.current = 0
        self.loads: list[int | None] = []

    def load(self, version: int | None = None) -> LoadedTable:
        self.loads.append(version)
        v = self.current if version is None else version
        return LoadedTable(self.tables[v], v)

    def describe(self) -> str:
        return "versions in memory"


def doubles(n: int, factor: int = 2) -> pa.Table:
    return pa.table({"x": pa.array(range(n), pa.int64()), "y": [factor * i for i in range(n)]})


def harness(
    table: LookupSource | lg.LookupTable,
    *,
    on: Any = "key",
    table_key: str = "x",
    how: str = "inner",
    refresh: timedelta | None = None,
    suffix: str = "_table",
) -> OperatorHarness:
    if isinstance(table, LookupSource):
        table = lg.LookupTable(table)
    factory = lookup_join_factory(
        table, on, table_key, refresh=refresh, how=how, table_suffix=suffix
    )
    return OperatorHarness(factory.create())


def expected(records: list[dict[str, Any]], table: pa.Table, how: str) -> list[dict[str, Any]]:
    """pandas' merge of the records with the table (key -> x), as records."""
    left = pd.DataFrame(records)
    right = table.to_pandas()
    out = left.merge(right, left_on="key", right_on="x", how=how, sort=False)
    rows = out.astype(object).where(out.notna(), None).to_dict("records")
    return [
        {k: (int(v) if isinstance(v, float) and v.is_integer() else v) for k, v in r.items()}
        for r in rows
    ]


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("form", ["arrow", "dicts"])
def test_the_join_equals_pandas_merge(how: str, form: str) -> None:
    """Keys inside and outside the table, a key with two table rows (two outputs, in
    table order): Arrow and dict batches give pandas' merge."""
    table = pa.concat_tables([doubles(50), pa.table({"x": pa.array([7], pa.int64()), "y": [-7]})])
    rng = np.random.default_rng(1)
    records = [{"key": int(k), "v": i} for i, k in enumerate(rng.integers(0, 80, 300))]
    h = harness(Versions(table), how=how).open()
    batch = pa.RecordBatch.from_pylist(records) if form == "arrow" else records
    h.process(batch)
    assert h.output == expected(records, table, how)
    assert any(r["key"] == 7 for r in records), "the duplicate key is probed"


def test_tuple_records_are_joined_by_position_and_get_the_values_appended() -> None:
    h = harness(Versions(doubles(5)), on=0, how="left").open()
    h.process([(3, "a"), (9, "b")])
    assert h.output == [(3, "a", 3, 6), (9, "b", None, None)]


def test_a_table_column_named_like_a_field_gets_the_suffix() -> None:
    table = pa.table({"x": [1], "v": ["table's"]})
    h = harness(Versions(table), suffix="_t").open()
    h.process(pa.RecordBatch.from_pylist([{"key": 1, "v": "stream's"}]))
    h.process([{"key": 1, "v": "stream's"}])
    assert h.output == [{"key": 1, "v": "stream's", "x": 1, "v_t": "table's"}] * 2


def test_event_timestamps_follow_their_records() -> None:
    h = harness(Versions(pa.concat_tables([doubles(3), doubles(3, factor=3)]))).open()
    batch = with_timestamps(
        pa.RecordBatch.from_pylist([{"key": 1}, {"key": 8}, {"key": 2}]),
        np.array([10, 20, 30], dtype=np.int64),
    )
    h.process(batch)
    h.process(RowBatch([{"key": 2}], np.array([40], dtype=np.int64)))
    assert h.timestamps == [10, 10, 30, 30, 40, 40]


def test_a_refresh_on_the_processing_time_clock_joins_the_new_rows(tmp_path: Path) -> None:
    """A Parquet table rewritten mid-stream: records before the refresh interval passed
    join the old rows, records after it the new ones; the clock is the harness's manual
    processing time, so the refresh happens exactly when the test moves it."""
    path = tmp_path / "table.parquet"
    pq.write_table(doubles(10), path)
    h = harness(lg.LookupTable.parquet(path), refresh=timedelta(seconds=30)).open()
    h.process([{"key": 4}, {"key": 12}])
    pq.write_table(doubles(20, factor=10), path)
    assert h.advance_processing_time(29_999) == 0, "no refresh before its interval"
    h.process([{"key": 4}])
    assert h.advance_processing_time(1) == 1
    h.process([{"key": 4}, {"key": 12}])
    assert h.output == [
        {"key": 4, "x": 4, "y": 8},
        {"key": 4, "x": 4, "y": 8},
        {"key": 4, "x": 4, "y": 40},
        {"key": 12, "x": 12, "y": 120},
    ]
    assert h.next_processing_time == 60_000, "the next refresh is one interval later"


def test_a_refresh_that_finds_the_same_version_keeps_the_index() -> None:
    source = Versions(doubles(3))
    h = harness(source, refresh=timedelta(milliseconds=100)).open()
    op = h.operator
    assert isinstance(op, LookupJoinOperator)
    first = op.index
    h.advance_processing_time(100)
    assert source.loads == [None, None] and op.index is first


def test_a_restore_pins_the_checkpointed_version_and_the_time_left_M_R1() -> None:
    """Snapshot at version 0 with 40 s left until the refresh; the table moves on to
    version 1; the restored operator joins against version 0 and refreshes (to version
    1) 40 s after the restore, not at once and not a whole interval later."""
    source = Versions(doubles(5), doubles(5, factor=100))
    h = harness(source, refresh=timedelta(seconds=60)).open()
    h.advance_processing_time(20_000)
    snapshot = h.snapshot()
    assert snapshot.state() == {"version": 0, "refresh_in_ms": 40_000}
    source.current = 1
    restored = harness(source, refresh=timedelta(seconds=60))
    restored.clock.advance(1_000_000)  # the restart happens later on the clock
    restored.open(restored=snapshot)
    assert source.loads[-1] == 0, "the restore loads the pinned version"
    restored.process([{"key": 2}])
    restored.advance_processing_time(39_999)
    restored.process([{"key": 2}])
    restored.advance_processing_time(1)
    restored.process([{"key": 2}])
    assert [r["y"] for r in restored.output] == [4, 4, 200]


def test_a_table_without_versions_is_reloaded_on_restore(tmp_path: Path) -> None:
    """Files keep no versions: the restored operator joins the file as it is now."""
    path = tmp_path / "t.parquet"
    pq.write_table(doubles(5), path)
    h = harness(lg.LookupTable.parquet(path)).open()
    snapshot = h.snapshot()
    assert snapshot.state() == {"version": None, "refresh_in_ms": None}
    pq.write_table(doubles(5, factor=100), path)
    restored = harness(lg.LookupTable.parquet(path)).open(restored=snapshot)
    restored.process([{"key": 2}])
    assert restored.output == [{"key": 2, "x": 2, "y": 200}]


# -- errors at run time ---------------------------------------------------------------


def test_a_stream_without_the_key_field_fails_naming_the_fields() -> None:
    h = harness(Versions(doubles(3))).open()
    with pytest.raises(ConfigurationError, match=r"no field 'key'; their fields are \['id'\]"):
        h.process(pa.RecordBatch.from_pylist([{"id": 1}]))
    with pytest.raises(ConfigurationError, match="has no key 'key'"):
        h.process([{"id": 1}])


def test_a_key_of_another_kind_than_the_tables_fails_naming_both_types() -> None:
    h = harness(Versions(doubles(3))).open()
    with pytest.raises(
        ConfigurationError, match=r"'key' is string but the table's key 'x' is int64"
    ):
        h.process([{"key": "1"}])


def test_a_table_without_its_key_column_fails_at_open() -> None:
    h = harness(Versions(doubles(3)), table_key="id")
    with pytest.raises(
        ConfigurationError, match=r"no key column 'id' \(its columns: \['x', 'y'\]\)"
    ):
        h.open()


def test_bare_values_are_refused_with_how_to_fix_it() -> None:
    h = harness(Versions(doubles(3))).open()
    with pytest.raises(ConfigurationError, match="bare values"):
        h.process(scalar_batch([1, 2]))

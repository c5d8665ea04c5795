"""A PostgreSQL query as a lookup join's table (lockgate/connectors/postgres/lookup.py),
against the real server ``scripts/services.sh`` starts: the job's output equals pandas'
merge with the query's rows on both executors, a reload runs the query again, and a
query that cannot run fails with the query and the server named but no password."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

import lockgate as lg
from lockgate.errors import ConfigurationError
from pg_fixtures import DSN, query


def fill(pg_table: Any, n: int, factor: int = 2) -> str:
    table = pg_table("x bigint, y bigint, name text")
    query(
        f"INSERT INTO {table} SELECT g, {factor} * g, 'n' || g FROM generate_series(0, %s) g",
        (n - 1,),
    )
    return table


@pytest.mark.parametrize("how", ["inner", "left"])
def test_a_query_table_joined_equals_pandas_merge(executor: Any, pg_table: Any, how: str) -> None:
    table = fill(pg_table, 300)
    records = [{"id": i, "key": (i * 7) % 400} for i in range(2_000)]
    env = lg.StreamEnvironment(parallelism=2)
    (
        env.from_collection(records)
        .lookup_join(
            lg.LookupTable.postgres(
                DSN, f"SELECT x, y, name FROM {table} WHERE x >= %s", params=(10,)
            ),
            on="key",
            table_key="x",
            how=how,
        )
        .sink_to(lg.connectors.CollectSink())
        .uid("out")
        .set_parallelism(1)
    )
    result = env.execute(f"postgres lookup {how}", executor=executor)
    got = sorted(tuple(r.values()) for part in result.sink_results["out"] for r in part)
    rows = pd.DataFrame(
        query(f"SELECT x, y, name FROM {table} WHERE x >= 10"), columns=["x", "y", "name"]
    )
    want = pd.DataFrame(records).merge(rows, left_on="key", right_on="x", how=how)
    want = want.astype(object).where(want.notna(), None)
    assert got == sorted(tuple(r) for r in want[["id", "key", "x", "y", "name"]].values.tolist())
    assert len(got) == (
        len(records) if how == "left" else sum(r["key"] in range(10, 300) for r in records)
    )


def test_a_reload_runs_the_query_again(pg_table: Any) -> None:
    """No versions: each load is the query's result at that moment."""
    table = fill(pg_table, 3)
    source = lg.LookupTable.postgres(DSN, f"SELECT x, y FROM {table} ORDER BY x").source
    first = source.load()
    assert first.version is None and first.table.column("y").to_pylist() == [0, 2, 4]
    query(f"UPDATE {table} SET y = 100 * x")
    assert source.load(first.version).table.column("y").to_pylist() == [0, 100, 200]


def test_an_empty_result_keeps_its_column_types(pg_table: Any) -> None:
    table = fill(pg_table, 0)
    loaded = lg.LookupTable.postgres(DSN, f"SELECT x, name FROM {table}").source.load()
    assert [str(t) for t in loaded.table.schema.types] == ["int64", "string"]


def test_a_missing_table_fails_naming_the_query_without_the_password() -> None:
    dsn = DSN.replace("postgres@", "postgres:s3cret-pw@", 1)
    source = lg.LookupTable.postgres(dsn, "SELECT x FROM no_such_table_here").source
    with pytest.raises(ConfigurationError, match="no_such_table_here") as failure:
        source.load()
    assert "s3cret-pw" not in str(failure.value)
    assert "s3cret-pw" not in repr(source)


def test_bad_arguments_are_refused_when_the_table_is_made() -> None:
    with pytest.raises(ConfigurationError, match="dsn must be a connection string"):
        lg.LookupTable.postgres("", "SELECT 1")
    with pytest.raises(ConfigurationError, match="query must be a SELECT statement"):
        lg.LookupTable.postgres(DSN, "  ")

"""PostgresCdcSource's stream reader with and without its compiled pass
(``postgres_cdc/change_columns.py``), on the same slot of the wal_level=logical
PostgreSQL on 127.0.0.1:5433: the same changelog batches' rows, kinds, metadata and
types, and the same errors (M-X1: the fast path changes nothing that is emitted)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from cdc_fixtures import CDC_DSN, Cdc, open_cdc

from conftest import wait_until
from lockgate.connectors.base import ReaderOutput
from lockgate.connectors.postgres.cdc import change_columns as cc
from lockgate.connectors.postgres.cdc import reader as reader_module
from lockgate.connectors.postgres.cdc.reader import CdcReader
from lockgate.connectors.postgres.cdc.source import PostgresCdcSource
from lockgate.core.batch import kinds_of
from lockgate.errors import ConfigurationError
from lockgate.runtime.context import RuntimeContext

TYPES = (
    "id int PRIMARY KEY, s smallint, b bigint, r real, d double precision, "
    "n numeric(12,3), nn numeric, flag boolean, t text, vc varchar(10), c char(3), "
    "ts timestamp, tz timestamptz, day date, tod time, j json, jb jsonb, u uuid, "
    "raw bytea, ints int[], texts text[], iv interval, big text"
)
VALUES = (
    "-3, 9007199254740993, 1.5, 'NaN', 12.345, 123456789012345678901234567890.5, true, "
    "'é\"x', 'abc', 'ab', '2024-02-29 12:34:56.789', '2024-02-29 12:34:56.5+02', "
    "'2024-02-29', '23:59:59.25', '{\"a\": [1, 2]}', '{\"b\": null}', "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x00ff', '{1,NULL,3}', "
    '\'{"a,b","c\\"d",NULL}\', \'1 day 02:00:00\''
)
BIG = "(SELECT string_agg(md5(g::text || random()::text), '') FROM generate_series(1, 400) g)"


@pytest.fixture
def cdc() -> Iterator[Cdc]:
    if not cc.available():
        pytest.skip(f"numba unusable here: {cc._UNAVAILABLE}")
    yield from open_cdc()


class Batches(ReaderOutput):
    def __init__(self) -> None:
        self.batches: list[pa.RecordBatch] = []
        self.rows = 0

    def emit(self, batch: Any) -> None:
        self.emit_from_split(None, batch)

    def emit_from_split(self, split_id: Any, batch: Any) -> None:
        self.batches.append(batch)
        self.rows += batch.num_rows

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        raise AssertionError(f"no dead letters expected: {record}")


def context() -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="cdc",
        operator_uid="cdc",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
        attempt_number=0,
        run_id="run-test",
    )


def read(source: PostgresCdcSource, splits: list[Any], fast: bool, rows: int) -> Batches:
    """The first ``rows`` changes a new reader of ``splits`` emits (the slot is never
    confirmed: a later reader reads the same changes)."""
    reader = source.create_reader(context())
    assert isinstance(reader, CdcReader)
    reader.fast_decoding = fast
    out = Batches()
    try:
        reader.add_splits(splits)
        wait_until(
            lambda: (reader.poll(out), out.rows >= rows)[1],
            f"{rows} changes ({'fast' if fast else 'reference'} path)",
            timeout_s=60,
            every_s=0.01,
        )
    finally:
        reader.close()
    assert out.rows == rows
    return out


def flat(out: Batches) -> list[tuple[Any, ...]]:
    """Every row emitted, in order: its table's schema, kind and values (NaN as text)."""
    rows = []
    for batch in out.batches:
        kinds = kinds_of(batch)
        assert kinds is not None, "stream batches carry their kinds"
        for kind, row in zip(kinds.tolist(), batch.to_pylist()):
            rows.append((str(batch.schema), kind, repr(row)))
    return rows


@pytest.mark.parametrize(
    "min_run", [1, 10**9, None], ids=["columns", "one-by-one", "without-numba"]
)
def test_the_compiled_pass_emits_what_message_by_message_decoding_emits_M_X1(
    cdc, monkeypatch, min_run
) -> None:
    """Every type, NULLs, FULL identity old rows (-U), an unchanged TOASTed value filled
    from the old row, key changes (-U of the old key), key-only deletes, several tables
    interleaved in one transaction, a table of the publication the source does not read,
    and a transaction larger than one read of frames: the compiled pass (its runs of
    changes made into columns together, or taken one by one from it) gives the same
    rows, kinds, metadata and Arrow types, in the same order, as the reference
    decoder. Without numba (the kernels unavailable) the reader decodes message by
    message."""
    if min_run is None:
        monkeypatch.setattr(cc, "_KERNELS", None)
        monkeypatch.setattr(cc, "_UNAVAILABLE", "numba: not installed (test)")
    else:
        monkeypatch.setattr(reader_module, "MIN_DECODED_RUN", min_run)
    full = cdc.table(TYPES, identity="FULL")
    keyed = cdc.table("id int PRIMARY KEY, v text")
    other = cdc.table("id int PRIMARY KEY")
    pub = cdc.publication()
    cdc.sql(f"CREATE PUBLICATION {pub} FOR TABLE {full}, {keyed}, {other}")
    source = PostgresCdcSource(
        CDC_DSN, [full, keyed], slot=cdc.slot(), publication=pub, snapshot="never"
    )
    splits = source.create_splits(1)
    nulls = ", ".join(["NULL"] * 22)
    cdc.transaction(  # more frames than one read takes
        f"INSERT INTO {keyed} SELECT g, 'v' || g FROM generate_series(1, 9000) g",
    )
    cdc.transaction(
        f"INSERT INTO {full} VALUES (1, {VALUES}, {BIG}), (2, {nulls})",
        f"INSERT INTO {other} VALUES (1)",
        f"UPDATE {keyed} SET v = NULL WHERE id <= 3",
        f"UPDATE {full} SET s = 4, t = NULL WHERE id = 1",  # big: unchanged, filled
        f"UPDATE {keyed} SET id = -id WHERE id BETWEEN 4 AND 5",  # -U old key, +U
        f"UPDATE {full} SET id = 3 WHERE id = 2",
        f"DELETE FROM {keyed} WHERE id BETWEEN 6 AND 8",  # key only
    )
    cdc.sql(f"DELETE FROM {full} WHERE id = 1")  # the whole old row
    rows = 9000 + (2 + 3 + 2 + 4 + 2 + 3) + 1
    reference = read(source, splits, fast=False, rows=rows)
    fast = read(source, splits, fast=True, rows=rows)
    assert flat(fast) == flat(reference)
    kinds = [k for _, k, _ in flat(fast)]
    assert kinds.count(1) == 4 and kinds.count(2) == 7 and kinds.count(3) == 4  # -U +U -D
    filled = [
        row["big"]
        for batch in fast.batches
        if "big" in batch.schema.names
        for kind, row in zip(kinds_of(batch).tolist(), batch.to_pylist())  # type: ignore[union-attr]
        if kind == 2 and row["id"] == 1
    ]
    assert len(filled) == 1 and len(filled[0]) == 400 * 32  # the unchanged value, filled


def test_an_unsent_toasted_value_without_the_old_row_fails_the_same_way_on_both_paths(
    cdc,
) -> None:
    """No REPLICA IDENTITY FULL: an update leaving a TOASTed value unchanged cannot be
    emitted; both paths fail saying to set FULL (no row with a null in its place)."""
    table = cdc.table("id int PRIMARY KEY, big text, n int")
    cdc.sql(f"INSERT INTO {table} VALUES (1, {BIG}, 0)")
    source = PostgresCdcSource(
        CDC_DSN, table, slot=cdc.slot(), publication=cdc.publication(), snapshot="never"
    )
    splits = source.create_splits(1)
    cdc.transaction(
        f"INSERT INTO {table} VALUES (2, 'x', 0)", f"UPDATE {table} SET n = 1 WHERE id = 1"
    )
    for fast in (False, True):
        with pytest.raises(ConfigurationError, match=r"left TOASTed column\(s\) \['big'\].*FULL"):
            read(source, splits, fast=fast, rows=2)

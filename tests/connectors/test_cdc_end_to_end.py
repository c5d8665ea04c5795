"""Change data capture end to end (issue 39's first "done when"): a PostgreSQL table of
200,000 rows under a concurrent writer (inserts, updates, deletes, some in
multi-statement transactions), replicated by PostgresCdcSource (initial snapshot, then
the WAL) into a Delta table (``DeltaSink(mode="merge")``) and a second PostgreSQL table
(``PostgresSink(mode="upsert")``) at once, with five injected failures: one during the
snapshot, one at each sink while records flow, one between a PostgreSQL pre-commit and
its commit, one between a Delta pre-commit and its commit. At the end both targets
equal the source table row by row, and the slot's confirmed LSN reached the end read
(M-X1, M-X2, M-X3, M-R1). On both executors."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from cdc_fixtures import CDC_DSN, Cdc, EndAt, open_cdc, write_concurrently

import lockgate as lg
from changelog_helpers import delta_rows
from checkpoint_paced import CheckpointPacedSource
from lockgate.connectors.postgres.cdc.pgoutput import parse_lsn
from lockgate.testing import FailAtRecord, FailCommit, inject_faults

ROWS = 200_000
WRITES = 3_000  # transactions of the concurrent writer, 1 to 4 statements each


@pytest.fixture
def cdc() -> Iterator[Cdc]:
    yield from open_cdc()


def table_columns(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The table's columns, without the source's metadata (one row per row: each keeps
    its kind)."""
    return batch.drop_columns([n for n in batch.schema.names if n.startswith("_")])


@pytest.mark.hang_guard(600)
def test_a_changing_table_replicates_into_delta_and_postgres_exactly_once_through_5_failures_M_X1_M_R1(
    executor: Any, cdc: Cdc, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source_table = cdc.table("id bigint PRIMARY KEY, v int, s text")
    cdc.sql(
        f"INSERT INTO {source_table} SELECT g, g, md5(g::text) FROM generate_series(1, {ROWS}) g"
    )
    target_table = cdc.table("id bigint PRIMARY KEY, v int, s text")
    delta = tmp_path / "delta"
    end_file = str(tmp_path / "end-lsn")
    source = lg.connectors.PostgresCdcSource(
        CDC_DSN,
        source_table,
        slot=cdc.slot(),
        publication=cdc.publication(),
        snapshot="initial",
        chunk_size=20_000,
        drop_slot_on_finish=False,  # the test reads the slot's confirmed LSN at the end
    )
    done = threading.Event()
    writer = threading.Thread(
        target=write_concurrently,
        args=(CDC_DSN, source_table, WRITES, 11, done, ROWS, ROWS),
        name="writer",
        daemon=True,
    )

    def end_after_the_writer() -> None:
        writer.join(timeout=300)
        assert not writer.is_alive(), "the writer did not finish within 300 s"
        with open(end_file, "w") as f:
            f.write(cdc.sql("SELECT pg_current_wal_flush_lsn()::text")[0][0])

    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(timedelta(milliseconds=100))
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=5, delay=0))
    # 10,000 changes per completed checkpoint, and no end before three checkpoints of
    # the attempt: every attempt lives through checkpoints with its fault still ahead,
    # however slow the machine (the record faults come first, while most rows are ahead)
    paced = CheckpointPacedSource(
        EndAt(source, end_file), records_per_checkpoint=10_000, end_after=3
    )
    changes = (
        env.from_source(paced, name="cdc")
        .uid("cdc")
        .key_by("id")  # each key's changes to one sink subtask, in order
        .map_batches(table_columns)
        .uid("columns")
    )
    changes.sink_to(
        lg.connectors.PostgresSink(CDC_DSN, target_table, mode="upsert", key="id"), name="pg"
    ).uid("pg")
    changes.sink_to(lg.connectors.DeltaSink(str(delta), mode="merge", key="id"), name="delta").uid(
        "delta"
    )
    inject_faults(
        env,
        FailAtRecord("cdc", record=5_000, attempt=0, after_checkpoints=1),  # in the snapshot
        FailAtRecord("pg", record=1_000, attempt=1, after_checkpoints=1),
        FailAtRecord("delta", record=1_000, attempt=2, after_checkpoints=1),
        FailCommit("pg", checkpoint=2, attempt=3),  # pre-committed, not committed
        FailCommit("delta", checkpoint=2, attempt=4),
    )
    before = cdc.lsn()
    writer.start()
    ender = threading.Thread(target=end_after_the_writer, daemon=True)
    ender.start()
    with caplog.at_level(logging.INFO, logger="lockgate.recovery.failover"):
        result = env.execute("cdc into delta and postgres", executor=executor)
    ender.join(timeout=5)
    assert result.attempts == 6, "each of the five faults restarted the job"
    restores = [r for r in caplog.records if " restores " in r.getMessage()]
    assert len(restores) == 5, "every later attempt restored a checkpoint"
    expected = cdc.rows(source_table)
    assert len(expected) > ROWS * 0.9
    assert cdc.rows(target_table) == expected, "the PostgreSQL target equals the source"
    assert delta_rows(delta) == expected, "the Delta target equals the source"
    with open(end_file) as f:
        end = parse_lsn(f.read())
    confirmed = cdc.confirmed(source.slot)
    assert confirmed is not None and confirmed >= end > before, "the slot followed the checkpoints"

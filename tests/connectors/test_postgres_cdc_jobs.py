"""PostgresCdcSource in jobs on the local executor against the wal_level=logical
PostgreSQL on 127.0.0.1:5433: an initial snapshot and the stream under a concurrent
writer (inserts, updates, deletes, multi-statement transactions), with injected failures
during the snapshot and during the stream, replicated exactly once (M-X1, M-R1): the
collected changelog applied strictly equals the table row by row, and the slot's
confirmed LSN advanced."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from cdc_fixtures import CDC_DSN, Cdc, EndAt, open_cdc, write_concurrently

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from lockgate.connectors.builtin.collect_sink import CollectSink
from lockgate.connectors.postgres.cdc.pgoutput import parse_lsn
from lockgate.connectors.postgres.cdc.source import PostgresCdcSource
from lockgate.executor.local import LocalExecutor
from lockgate.testing import FailAtRecord, inject_faults


@pytest.fixture
def cdc() -> Iterator[Cdc]:
    yield from open_cdc()


def apply(changes: list[lg.Change]) -> dict[Any, dict[str, Any]]:
    """The changelog applied strictly (REPLICA IDENTITY FULL: every -U/-D names the row
    present): a duplicate insert or a retraction of a row not there fails."""
    table: dict[Any, dict[str, Any]] = {}
    for change in changes:
        row = {k: v for k, v in change.value.items() if not k.startswith("_")}
        k = row["id"]
        kind = change.kind.short
        if kind == "+I":
            assert k not in table, f"+I of present key {k}: a duplicate"
            table[k] = row
        elif kind == "+U":
            table[k] = row
        else:
            assert table.get(k) == row, f"{kind} {row} but the table has {table.get(k)}"
            del table[k]
    return table


def test_snapshot_and_stream_under_a_concurrent_writer_with_failures_exactly_once_M_X1_M_R1(
    cdc, tmp_path, caplog
) -> None:
    """M-X1, M-R1: 3,000 rows snapshotted in chunks of 250 by two subtasks while a writer
    commits 400 transactions; attempt 0 fails during the snapshot, attempt 1 later (each
    after a completed checkpoint of its attempt). The changelog collected exactly once,
    applied strictly, equals the table; the slot's confirmed LSN reached the end read."""
    table = cdc.table("id int PRIMARY KEY, v int, s text", identity="FULL")
    cdc.sql(f"INSERT INTO {table} SELECT g, g, md5(g::text) FROM generate_series(1, 3000) g")
    target = str(tmp_path / "target-lsn")
    source = PostgresCdcSource(
        CDC_DSN,
        table,
        slot=cdc.slot(),
        publication=cdc.publication(),
        snapshot="initial",
        chunk_size=250,
        batch_size=200,
    )
    done = threading.Event()
    thread = threading.Thread(
        target=write_concurrently,
        args=(CDC_DSN, table, 400, 7, done),
        name="cdc-writer",
        daemon=True,
    )

    def finish_writer() -> None:
        thread.join(timeout=120)
        assert not thread.is_alive(), "the writer did not finish within 120 s"
        with open(target, "w") as f:
            f.write(cdc.sql("SELECT pg_current_wal_flush_lsn()::text")[0][0])

    env = lg.StreamEnvironment(parallelism=2, executor=LocalExecutor())
    env.enable_checkpointing(timedelta(milliseconds=100))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=2, delay=0))
    paced = CheckpointPacedSource(EndAt(source, target), records_per_checkpoint=400)
    stream = env.from_source(paced, name="cdc").uid("cdc")
    stream.sink_to(CollectSink(changelog=True), name="collect").uid("collect").set_parallelism(1)
    inject_faults(
        env,
        FailAtRecord("collect", record=900, attempt=0, after_checkpoints=1),  # in the snapshot
        FailAtRecord("collect", record=2500, attempt=1, after_checkpoints=2),
    )
    before = cdc.lsn()
    thread.start()
    finisher = threading.Thread(target=finish_writer, daemon=True)
    finisher.start()
    with caplog.at_level(logging.INFO, logger="lockgate.recovery.failover"):
        result = env.execute("cdc exactly once")
    finisher.join(timeout=5)
    restores = [r for r in caplog.records if " restores " in r.getMessage()]
    assert len(restores) == 2, "both faults fired and each attempt restored a checkpoint"
    changes = [c for part in result.sink_results["collect"] for c in part]
    state = apply(changes)
    expected = cdc.rows(table)
    assert len(expected) > 2500
    assert state == expected
    # the final checkpoint (after the end was read) confirmed the slot up to the end
    confirmed = cdc.confirmed(source.slot)
    with open(target) as f:
        end = parse_lsn(f.read())
    assert confirmed is not None and confirmed >= end > before


@pytest.mark.parametrize("drop", [None, False, True], ids=["default", "keep", "drop"])
def test_a_finished_bounded_job_drops_its_slot_unless_asked_to_keep_it_M_X1(cdc, drop) -> None:
    """A bounded job ends at the WAL position of its start; its final checkpoint confirms
    the slot there; the finished job leaves no slot behind (default), unless
    drop_slot_on_finish=False (a later job goes on from it)."""
    table = cdc.table("id int PRIMARY KEY, v int", identity="FULL")
    cdc.sql(f"INSERT INTO {table} SELECT g, g FROM generate_series(1, 500) g")
    source = PostgresCdcSource(
        CDC_DSN,
        table,
        slot=cdc.slot(),
        publication=cdc.publication(),
        snapshot="initial",
        chunk_size=100,
        bounded=True,
        **({} if drop is None else {"drop_slot_on_finish": drop}),
    )
    env = lg.StreamEnvironment(parallelism=2, executor=LocalExecutor())
    env.enable_checkpointing(timedelta(milliseconds=50))
    stream = env.from_source(source, name="cdc").uid("cdc")
    stream.sink_to(CollectSink(changelog=True), name="collect").uid("collect").set_parallelism(1)
    result = env.execute("bounded cdc")
    changes = [c for part in result.sink_results["collect"] for c in part]
    assert apply(changes) == cdc.rows(table)
    slots = cdc.sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (source.slot,))
    assert slots == ([(1,)] if drop is False else [])

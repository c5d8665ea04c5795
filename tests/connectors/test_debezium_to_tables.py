"""Debezium-JSON events on Kafka applied to tables (issue 39's second "done when"): a
table's change history in Debezium's documented format (snapshot reads, inserts,
updates, deletes with tombstones, primary-key changes, multi-row transactions, the
default replica identity: updates without ``before``, deletes with only the key), on a
3-partition topic keyed by the row's key, read by ``KafkaSource(format="debezium-json")``
and applied by ``PostgresSink(mode="upsert")`` and ``DeltaSink(mode="merge")`` at once,
through a failure while records flow and one between a pre-commit and its commit: both
tables equal the source table row by row (M-X1, M-X2, M-R1). On both executors."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from debezium_events import history, produce_events

import lockgate as lg
from changelog_helpers import delta_rows
from checkpoint_paced import CheckpointPacedSource
from kafka_fixtures import BOOTSTRAP
from lockgate.connectors import DeltaSink, KafkaSource, PostgresSink
from lockgate.testing import FailAtRecord, FailCommit, inject_faults
from pg_fixtures import DSN, query


def pg_rows(table: str) -> dict[Any, dict[str, Any]]:
    return {
        r[0]: {"id": r[0], "status": r[1], "qty": r[2]}
        for r in query(f"SELECT id, status, qty FROM {table}")
    }


@pytest.mark.hang_guard(300)
def test_debezium_json_events_apply_to_postgres_and_delta_exactly_once_through_failures_M_X1_M_R1(
    executor: Any, kafka_topic: Any, pg_table: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = history(snapshot_rows=3_000, changes=6_000, full=False, seed=3)
    topic = kafka_topic(3)
    produce_events(topic, h.events, 3)
    table = pg_table("id bigint PRIMARY KEY, status text, qty bigint")
    delta = tmp_path / "delta"
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(timedelta(milliseconds=100))
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=2, delay=0))
    source = KafkaSource(BOOTSTRAP, topic, bounded=True, format="debezium-json")
    # 1,500 events per completed checkpoint, at least three checkpoints an attempt: the
    # faults find the attempt still running however slow the machine
    paced = CheckpointPacedSource(source, records_per_checkpoint=1_500, end_after=3)
    changes = env.from_source(paced, name="debezium").uid("debezium").key_by("id")
    changes.sink_to(PostgresSink(DSN, table, mode="upsert", key="id"), name="pg").uid("pg")
    changes.sink_to(DeltaSink(str(delta), mode="merge", key="id"), name="delta").uid("delta")
    inject_faults(
        env,
        FailAtRecord("delta", record=500, attempt=0, after_checkpoints=1),
        FailCommit("pg", checkpoint=2, attempt=1),  # pre-committed, not committed
    )
    with caplog.at_level(logging.INFO, logger="lockgate.recovery.failover"):
        result = env.execute("debezium into tables", executor=executor)
    assert result.attempts == 3, "each fault restarted the job"
    assert len([r for r in caplog.records if " restores " in r.getMessage()]) == 2
    assert pg_rows(table) == h.table, "the PostgreSQL table equals the source table"
    assert delta_rows(delta) == h.table, "the Delta table equals the source table"

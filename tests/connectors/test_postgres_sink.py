"""PostgresSink against the real PostgreSQL server (M-X1, M-X2, M-X3).

exactly_once ends each checkpoint interval's transaction with PREPARE TRANSACTION and
finishes it with COMMIT PREPARED; a restart commits the transactions of the restored
checkpoint and rolls back the others; a finished or cancelled job leaves nothing in
pg_prepared_xacts. upsert is idempotent on its key; append is at-least-once.
"""

from __future__ import annotations

import uuid

import pytest

import lockgate as lg
from conftest import wait_until
from lockgate.connectors import PostgresSink, SequenceSource
from lockgate.connectors.two_phase_commit import TwoPhaseCommitWriter
from lockgate.core.batch import RowBatch
from lockgate.errors import ConfigurationError
from lockgate.runtime.context import RuntimeContext
from lockgate.testing import FailAtRecord, inject_faults
from pg_fixtures import DSN, prepared, query


def completed(client: lg.JobClient) -> list[lg.CheckpointStats]:
    return [c for c in client.checkpoints() if c.status == "completed"]


#: the run id of the test now running: transaction ids (and their commit markers in
#: lockgate_commits) never repeat, as with real runs
RUN = "run"


@pytest.fixture(autouse=True)
def fresh_run() -> None:
    global RUN
    RUN = f"run{uuid.uuid4().hex[:8]}"


def ctx(attempt: int = 0, subtask: int = 0, parallelism: int = 1, run: str | None = None):
    run = RUN if run is None else run
    return RuntimeContext(
        task_name="t",
        operator_name="pg",
        operator_uid="pg-uid",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
        attempt_number=attempt,
        job_name="pg unit",
        run_id=run,
    )


def rows(n0: int, n1: int) -> RowBatch:
    return RowBatch([{"k": i % 7, "v": i} for i in range(n0, n1)])


def table_values(table: str) -> list[int]:
    return [r[0] for r in query(f"SELECT v FROM {table} ORDER BY v")]


def writer(sink: PostgresSink, c: RuntimeContext, states=()) -> TwoPhaseCommitWriter:
    w = sink.create_writer(c)
    assert isinstance(w, TwoPhaseCommitWriter)
    w.initialize_state(list(states))
    return w


# ------------------------------------------------------------------------- the transactions


def test_m_x2_prepared_rows_are_invisible_until_the_checkpoint_completes(pg_table) -> None:
    table = pg_table("k bigint, v bigint")
    w = writer(PostgresSink(DSN, table), ctx())
    try:
        w.write(rows(0, 100))
        w.snapshot_state(1)
        assert table_values(table) == [], "pre-committed rows must not be visible"
        gids = prepared()
        assert len(gids) == 1 and gids[0].endswith(f":{RUN}:0:0:1"), gids
        w.write(rows(100, 150))  # the next interval's transaction
        w.notify_checkpoint_complete(1)
        assert table_values(table) == list(range(100))
        assert prepared() == []
    finally:
        w.close()
    assert table_values(table) == list(range(100)), "closing rolls back the open transaction"


def test_m_x2_an_empty_interval_prepares_nothing(pg_table) -> None:
    table = pg_table("k bigint, v bigint")
    w = writer(PostgresSink(DSN, table), ctx())
    try:
        snapshot = w.snapshot_state(1)
        assert prepared() == [] and snapshot["pending"][0][1].gid is None
        w.notify_checkpoint_complete(1)
    finally:
        w.close()


def test_m_x2_commit_is_idempotent(pg_table) -> None:
    table = pg_table("k bigint, v bigint")
    sink = PostgresSink(DSN, table)
    w = writer(sink, ctx())
    try:
        w.write(rows(0, 10))
        snapshot = w.snapshot_state(1)
        w.notify_checkpoint_complete(1)
        sink.recover_and_commit(snapshot["pending"][0][1])  # again: already committed
        assert table_values(table) == list(range(10))
    finally:
        w.close()


def test_m_r1_m_x2_a_restart_commits_the_restored_checkpoint_and_rolls_back_the_rest(
    pg_table,
) -> None:
    """Attempt 0 pre-commits for checkpoints 1 and 2 and crashes before either completes
    (its connection dies). Attempt 1 restores checkpoint 1: the transaction of 1 is
    committed, the one prepared for 2 (never completed) rolled back; subtask 1 restoring
    alongside leaves attempt 1's own transactions alone."""
    table = pg_table("k bigint, v bigint")
    w0 = writer(PostgresSink(DSN, table), ctx(attempt=0, parallelism=2))
    w0.write(rows(0, 10))
    at_1 = w0.snapshot_state(1)
    w0.write(rows(10, 20))
    w0.snapshot_state(2)
    w0.write(rows(20, 30))  # open, never prepared
    w0.close()  # the crash
    assert len(prepared()) == 2

    other = writer(PostgresSink(DSN, table), ctx(attempt=1, subtask=1, parallelism=2))
    try:
        other.write(rows(1000, 1005))
        other.snapshot_state(3)  # attempt 1's own prepared transaction
        w1 = PostgresSink(DSN, table).create_writer(ctx(attempt=1, parallelism=2))
        assert isinstance(w1, TwoPhaseCommitWriter)
        w1.initialize_state([at_1], every_state=[at_1, None])
        try:
            assert table_values(table) == list(range(10))
            assert [g.split(":")[-3:] for g in prepared()] == [["1", "1", "3"]], (
                "only attempt 1's own prepared transaction may remain"
            )
        finally:
            w1.close()
        other.notify_checkpoint_complete(3)
    finally:
        other.close()
    assert table_values(table) == list(range(10)) + list(range(1000, 1005))
    assert prepared() == []


# ------------------------------------------------------------------------------- whole jobs


def sequence_job(
    executor,
    table: str,
    mode: str = "exactly_once",
    key=None,
    n: int = 20_000,
    faults=(),
    checkpoints: bool = True,
    row=None,
) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    if checkpoints:
        env.enable_checkpointing(100)
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=5, delay=0))
    (
        env.from_source(SequenceSource(0, n, rows_per_second=80_000, batch_size=500))
        .uid("numbers")
        .map(row or (lambda x: {"k": x % 100, "v": x}), name="to row")
        .uid("to row")
        .sink_to(PostgresSink(DSN, table, mode, key=key), name="pg")
        .uid("pg")
    )
    if faults:
        inject_faults(env, *faults)
    return env


def test_m_x1_an_exactly_once_job_writes_every_record_once_and_leaves_nothing_prepared(
    executor, pg_table
) -> None:
    table = pg_table("k bigint, v bigint")
    env = sequence_job(executor, table, faults=[FailAtRecord("pg", 3_000)])
    result = env.execute("pg exactly once")
    assert result.attempts == 2
    assert table_values(table) == list(range(20_000))
    assert prepared() == []


def test_m_x2_without_checkpoints_a_bounded_job_commits_once_at_its_end(executor, pg_table) -> None:
    table = pg_table("k bigint, v bigint")
    sequence_job(executor, table, n=5_000, checkpoints=False).execute("pg no checkpoints")
    assert table_values(table) == list(range(5_000))
    assert prepared() == []


def test_m_x1_upsert_is_idempotent_on_the_key_through_replays(executor, pg_table) -> None:
    table = pg_table("k bigint PRIMARY KEY, v bigint")
    query(f"INSERT INTO {table} SELECT k, -1 FROM generate_series(0, 19999, 2) AS k")
    env = sequence_job(
        executor,
        table,
        "upsert",
        key="k",
        faults=[FailAtRecord("pg", 4_000)],
        row=lambda x: {"k": x, "v": 2 * x},
    )
    assert env.execute("pg upsert").attempts == 2
    # replayed records update their rows again: the same table as without the failure
    assert query(f"SELECT k, v FROM {table} ORDER BY k") == [(k, 2 * k) for k in range(20_000)]


def test_append_writes_at_least_every_record(executor, pg_table) -> None:
    table = pg_table("k bigint, v bigint")
    env = sequence_job(executor, table, "append", faults=[FailAtRecord("pg", 4_000)])
    assert env.execute("pg append").attempts == 2
    values = table_values(table)
    assert set(values) == set(range(20_000)), "at-least-once: nothing lost"


def test_m_x2_a_cancelled_job_commits_its_completed_checkpoints_and_leaves_nothing_prepared(
    executor, pg_table
) -> None:
    table = pg_table("k bigint, v bigint")
    env = sequence_job(executor, table, n=10**9)
    client = env.execute_async("pg cancelled")
    try:
        wait_until(
            lambda: len(completed(client)) >= 3 and table_values(table),
            "three checkpoints completed and rows committed",
            timeout_s=60,
        )
    finally:
        client.cancel()
    assert client.wait(60).status is lg.JobStatus.CANCELED
    assert prepared() == [], "a cancelled job must leave no prepared transaction"
    values = table_values(table)
    assert len(values) == len(set(values)), "no record twice"


# ------------------------------------------------------------------------------- bad input


def test_a_server_without_prepared_transactions_is_refused_at_job_start(
    pg_without_prepared_transactions,
) -> None:
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.from_collection([{"k": 1, "v": 2}]).sink_to(
        PostgresSink(pg_without_prepared_transactions, "t")
    )
    with pytest.raises(ConfigurationError, match=r"max_prepared_transactions = 0.*ALTER SYSTEM"):
        env.execute("no 2pc")
    assert query("SELECT count(*) FROM t", dsn=pg_without_prepared_transactions) == [(0,)]
    # upsert applies a changelog in two-phase-commit transactions too: refused the same
    query(
        "CREATE TABLE IF NOT EXISTS u (k bigint PRIMARY KEY, v bigint)",
        dsn=pg_without_prepared_transactions,
    )
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.from_collection([{"k": 1, "v": 2}]).sink_to(
        PostgresSink(pg_without_prepared_transactions, "u", "upsert", key="k")
    )
    with pytest.raises(ConfigurationError, match=r"max_prepared_transactions = 0"):
        env.execute("upsert without 2pc")
    # append needs no prepared transactions
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.from_collection([{"k": 1, "v": 2}]).sink_to(
        PostgresSink(pg_without_prepared_transactions, "u", "append")
    )
    env.execute("append without 2pc")
    assert query("SELECT k, v FROM u", dsn=pg_without_prepared_transactions) == [(1, 2)]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"dsn": ""}, "dsn must be a connection string"),
        ({"table": ""}, "table must be a table name"),
        ({"table": "a.b.c"}, "'table' or 'schema.table'"),
        ({"mode": "twice"}, "mode must be one of exactly_once, upsert, append"),
        ({"mode": "upsert"}, "needs key="),
        ({"key": "k"}, "key='k' is for mode='upsert'"),
        ({"mode": "upsert", "key": ["k", ""]}, "key must be a column name"),
        ({"transaction_prefix": "it's"}, "transaction_prefix must be"),
        ({"connect_timeout_s": 0}, "connect_timeout_s must be > 0"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(kwargs, needle) -> None:
    args = {"dsn": DSN, "table": "t", **kwargs}
    with pytest.raises(ConfigurationError, match=needle.replace("(", r"\(")):
        PostgresSink(**args)


def test_a_missing_table_or_an_unkeyed_upsert_table_is_refused_at_job_start(pg_table) -> None:
    for sink, needle in [
        (PostgresSink(DSN, "lg_no_such_table"), "does not exist.*CREATE TABLE"),
        (
            PostgresSink(DSN, pg_table("k bigint, v bigint"), "upsert", key="k"),
            "no primary key or unique index",
        ),
        (
            PostgresSink(DSN, pg_table("k bigint PRIMARY KEY"), "upsert", key="x"),
            r"names columns \['x'\]",
        ),
        (
            PostgresSink("postgresql://postgres@127.0.0.1:1/test", "t"),
            "cannot connect to PostgreSQL.*start the server or fix the dsn",
        ),
    ]:
        env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
        env.from_collection([{"k": 1}]).sink_to(sink)
        with pytest.raises(ConfigurationError, match=needle):
            env.execute("bad table")


def test_a_record_with_a_field_the_table_lacks_fails_the_job_naming_it(pg_table) -> None:
    table = pg_table("k bigint, v bigint")
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.from_collection([{"k": 1, "v": 2}, {"k": 1, "wrong": 3}]).sink_to(
        PostgresSink(DSN, table), name="pg"
    )
    with pytest.raises(lg.JobFailedError, match=r"fields \['wrong'\].*no columns for"):
        env.execute("bad record")
    assert table_values(table) == [] and prepared() == []


def test_m_s1_stop_with_savepoint_then_restore_writes_every_record_once(
    executor, pg_table, tmp_path
) -> None:
    """The savepoint is the newest snapshot of a stopped job: its pre-committed
    transactions are committed (not rolled back), and the job restored from it goes on
    from there, so the table holds every record once."""
    table = pg_table("k bigint, v bigint")

    def job(bounded: bool) -> lg.StreamEnvironment:
        env = lg.StreamEnvironment(parallelism=2, executor=executor)
        env.enable_checkpointing(100)
        env.checkpoint_config.storage = str(tmp_path / "checkpoints")
        # the stopped job emits slowly (its 20,000 records take 10 s), so the stop comes
        # well before its end even on a loaded machine; the restored one runs fast
        rate = 20_000 if bounded else 2_000
        (
            env.from_source(
                SequenceSource(0, 20_000, rows_per_second=rate, batch_size=200, bounded=bounded)
            )
            .uid("numbers")
            .map(lambda x: {"k": x % 100, "v": x}, name="to row")
            .uid("to row")
            .sink_to(PostgresSink(DSN, table), name="pg")
            .uid("pg")
        )
        return env

    client = job(bounded=False).execute_async("pg savepoint")
    wait_until(
        lambda: len(completed(client)) >= 2 and table_values(table),
        "two checkpoints completed and rows committed",
        timeout_s=60,
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "savepoint"), timeout=60)
    assert prepared() == [], "the stopped job must leave no prepared transaction"
    before = table_values(table)
    assert 0 < len(before) < 20_000 and before == sorted(set(before))
    job(bounded=True).execute("pg restored", restore_from=savepoint)
    assert table_values(table) == list(range(20_000))
    assert prepared() == []


def test_m_x1_arrow_batches_go_in_by_column_and_an_unknown_column_fails(pg_table) -> None:
    import pyarrow as pa

    table = pg_table("k bigint, v bigint, note text")

    def columns(extra: bool):
        def make(batch: pa.RecordBatch) -> pa.RecordBatch:
            v = batch.column(0)
            arrays, names = [v, v], ["v", "k"]
            if extra:
                arrays, names = [*arrays, v], [*names, "wrong"]
            return pa.RecordBatch.from_arrays(arrays, names=names)

        return make

    for extra in (False, True):
        env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
        (
            env.from_source(SequenceSource(0, 1_000))
            .map_batches(columns(extra))
            .sink_to(PostgresSink(DSN, table), name="pg")
        )
        if extra:
            with pytest.raises(lg.JobFailedError, match=r"fields \['wrong'\]"):
                env.execute("arrow with an unknown column")
        else:
            env.execute("arrow columns")
    assert query(f"SELECT k, v, note FROM {table} ORDER BY v") == [
        (i, i, None) for i in range(1_000)
    ]
    assert prepared() == []

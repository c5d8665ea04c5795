"""PostgresSink(mode="upsert", key=...) applies a changelog exactly once, against the real
PostgreSQL server (issue 39 section 3; M-X1, M-X2, M-X3).

* A changelog (inserts, in-place and key-changing updates, deletes carrying only their
  key, bursts of changes to one key within a checkpoint, re-inserts) over many
  checkpoints leaves the table equal, row by row, to the oracle (the changelog applied
  to a dict); with failures injected (in the sink after checkpoints, in the source, and
  between pre-commit and commit) too. A trigger logs every row the sink writes: per key
  the logged change numbers rise strictly, so no change was applied twice, nor an old
  one after a newer (which the final table alone could not show: upserts are
  idempotent).
* The changes of an interval are prepared on the checkpoint barrier and visible only once
  the checkpoint completes; a restart commits the restored checkpoint's and rolls back
  the others.
* An interval whose barrier comes while an earlier interval is still prepared (its rows
  locked) is kept in the checkpoint and applied by its commit, once: the writer never
  waits on its own locks (the DSN's lock_timeout turns such a wait into a failure).
* A changelog into the default (append) mode fails naming the sink; bad keys are refused.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from changelog_source import (
    PG_COLUMNS,
    ChangelogSource,
    make_changelog,
    oracle_rows,
    to_batch,
)

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from lockgate.connectors import PostgresSink
from lockgate.connectors.changelog_compaction import ChangeKeyError
from lockgate.connectors.two_phase_commit import TwoPhaseCommitWriter
from lockgate.core.batch import RowBatch
from lockgate.core.row_kind import RowKind
from lockgate.errors import ConfigurationError
from lockgate.runtime.context import RuntimeContext
from lockgate.testing import FailAtRecord, FailCommit, inject_faults
from pg_fixtures import DSN, prepared, query

#: a writer that waits on a row lock fails after 5 s instead of hanging the test
LOCK_TIMEOUT_DSN = DSN + ("&" if "?" in DSN else "?") + "options=-c%20lock_timeout%3D5000"

RUN = "run"
#: the transaction prefix of the jobs' sinks (new for each test)
PREFIX = "lgup"


@pytest.fixture(autouse=True)
def fresh_run() -> None:
    global RUN, PREFIX
    RUN = f"run{uuid.uuid4().hex[:8]}"
    PREFIX = f"lgup-{uuid.uuid4().hex[:8]}"


def ctx(attempt: int = 0, subtask: int = 0, parallelism: int = 1) -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="pg",
        operator_uid="pg-uid",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
        attempt_number=attempt,
        job_name="pg upsert unit",
        run_id=RUN,
    )


def writer(sink: PostgresSink, c: RuntimeContext, states=()) -> TwoPhaseCommitWriter:
    w = sink.create_writer(c)
    assert isinstance(w, TwoPhaseCommitWriter)
    w.initialize_state(list(states))
    return w


def rows_of(table: str) -> list[tuple[Any, ...]]:
    return query(f"SELECT id, name, amount, seq FROM {table} ORDER BY id")


@pytest.fixture
def audited_table(pg_table):
    """``make()``: a table for the changelog with a trigger that logs (id, seq) of every
    row written into it (inserted or updated) into a second table; returns both names.
    The trigger functions are dropped at the end (the tables by ``pg_table``)."""
    functions: list[str] = []

    def make() -> tuple[str, str]:
        table = pg_table(PG_COLUMNS)
        audit = pg_table("n bigserial PRIMARY KEY, id bigint, seq bigint")
        functions.append(f"{table}_log")
        query(
            f"CREATE FUNCTION {table}_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"INSERT INTO {audit} (id, seq) VALUES (NEW.id, NEW.seq); RETURN NEW; END $$"
        )
        query(
            f"CREATE TRIGGER {table}_log AFTER INSERT OR UPDATE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {table}_log()"
        )
        return table, audit

    yield make
    for name in functions:
        query(f"DROP FUNCTION IF EXISTS {name}() CASCADE")


def assert_each_change_applied_at_most_once_in_order(audit: str) -> None:
    """Per key, the change numbers of the rows written rise strictly (M-X2): a change
    applied twice repeats its number, an old one applied after a newer goes back."""
    writes: dict[int, list[int]] = {}
    for key, seq in query(f"SELECT id, seq FROM {audit} ORDER BY n"):
        writes.setdefault(key, []).append(seq)
    bad = {k: s for k, s in writes.items() if any(b <= a for a, b in zip(s, s[1:]))}
    assert not bad, f"changes applied twice or out of order (key: seqs written): {bad}"


# ------------------------------------------------------------------------------ writer level


def test_m_x2_an_interval_is_compacted_per_key_prepared_and_visible_only_when_complete(
    pg_table,
) -> None:
    """Repeated changes to one key in one interval: the last one wins; a key-changing
    update moves the row; a delete carrying only the key removes the row."""
    table = pg_table(PG_COLUMNS)
    query(f"INSERT INTO {table} VALUES (1, 'one', 1, 0), (2, 'two', 2, 0), (3, 'three', 3, 0)")
    w = writer(PostgresSink(DSN, table, "upsert", key="id"), ctx())
    try:
        changes = [
            (RowKind.UPDATE_BEFORE, {"id": 1, "name": "one", "amount": 1, "seq": 0}),
            (RowKind.UPDATE_AFTER, {"id": 1, "name": "one b", "amount": 10, "seq": 1}),
            (RowKind.UPDATE_BEFORE, {"id": 1, "name": "one b", "amount": 10, "seq": 1}),
            (RowKind.UPDATE_AFTER, {"id": 1, "name": "one c", "amount": 11, "seq": 2}),
            (RowKind.UPDATE_BEFORE, {"id": 2, "name": "two", "amount": 2, "seq": 0}),
            (RowKind.UPDATE_AFTER, {"id": 20, "name": "two moved", "amount": 2, "seq": 3}),
            (RowKind.DELETE, {"id": 3, "name": None, "amount": None, "seq": None}),
            (RowKind.INSERT, {"id": 4, "name": "four", "amount": 4, "seq": 4}),
            (RowKind.DELETE, {"id": 4, "name": "four", "amount": 4, "seq": 4}),
            (RowKind.INSERT, {"id": 5, "name": "five", "amount": 5, "seq": 5}),
        ]
        w.write(to_batch(changes[:4]))
        w.write(to_batch(changes[4:]))
        w.snapshot_state(1)
        assert len(prepared()) == 1
        before = [(1, "one", 1, 0), (2, "two", 2, 0), (3, "three", 3, 0)]
        assert rows_of(table) == before, "prepared changes must not be visible"
        w.notify_checkpoint_complete(1)
        assert rows_of(table) == [(1, "one c", 11, 2), (5, "five", 5, 5), (20, "two moved", 2, 3)]
        assert prepared() == []
    finally:
        w.close()


def test_m_x2_python_records_with_kinds_are_applied_too(pg_table) -> None:
    table = pg_table(PG_COLUMNS)
    query(f"INSERT INTO {table} VALUES (7, 'seven', 7, 0)")
    w = writer(PostgresSink(DSN, table, "upsert", key=["id"]), ctx())
    try:
        kinds = np.array([RowKind.INSERT, RowKind.UPDATE_AFTER, RowKind.DELETE], dtype=np.int8)
        w.write(
            RowBatch(
                [
                    {"id": 8, "name": "a", "amount": 1},
                    {"id": 8, "name": "b", "amount": 2},
                    {"id": 7},
                ],
                kinds=kinds,
            )
        )
        w.snapshot_state(1)
        w.notify_checkpoint_complete(1)
        assert query(f"SELECT id, name, amount FROM {table}") == [(8, "b", 2)]
    finally:
        w.close()


def test_m_x2_an_interval_after_a_still_prepared_one_is_deferred_to_its_commit_once(
    pg_table,
) -> None:
    """Checkpoint 1's transaction is prepared (key 1 locked) and not committed when the
    barrier of checkpoint 2 comes with changes to key 1: writing them would wait for the
    commit of 1, which only this task can make (the lock_timeout would fail it). They
    are kept in checkpoint 2's transaction and applied by its commit, after 1's; applied
    again (a restore, the driver) they change nothing, not even after a newer change."""
    table = pg_table(PG_COLUMNS)
    sink = PostgresSink(LOCK_TIMEOUT_DSN, table, "upsert", key="id")
    w = writer(sink, ctx())
    try:
        w.write(to_batch([(RowKind.INSERT, {"id": 1, "name": "a", "amount": 1, "seq": 1})]))
        w.snapshot_state(1)
        w.write(
            to_batch(
                [
                    (RowKind.UPDATE_BEFORE, {"id": 1, "name": "a", "amount": 1, "seq": 1}),
                    (RowKind.UPDATE_AFTER, {"id": 1, "name": "b", "amount": 2, "seq": 2}),
                    (RowKind.INSERT, {"id": 2, "name": "c", "amount": 3, "seq": 3}),
                ]
            )
        )
        at_2 = w.snapshot_state(2)  # 1 still prepared: deferred, not written
        deferred = at_2["pending"][1][1]
        assert deferred.gid is None and deferred.deferred is not None
        assert len(prepared()) == 1 and rows_of(table) == []
        w.notify_checkpoint_complete(2)  # commits 1, then applies 2
        assert rows_of(table) == [(1, "b", 2, 2), (2, "c", 3, 3)]
        w.write(to_batch([(RowKind.UPDATE_AFTER, {"id": 1, "name": "d", "amount": 4, "seq": 4})]))
        w.snapshot_state(3)
        w.notify_checkpoint_complete(3)  # nothing prepared before it: written and prepared
        sink.recover_and_commit(deferred)  # again (a restore of checkpoint 2)
        assert rows_of(table) == [(1, "d", 4, 4), (2, "c", 3, 3)], "a deferred interval twice"
        assert prepared() == []
    finally:
        w.close()
    # the driver (a sink copy never opened) applies a deferred interval too, once
    w = writer(PostgresSink(LOCK_TIMEOUT_DSN, table, "upsert", key="id"), ctx(attempt=1))
    try:
        w.write(to_batch([(RowKind.DELETE, {"id": 2, "name": None, "amount": None, "seq": 5})]))
        w.snapshot_state(4)
        w.write(to_batch([(RowKind.DELETE, {"id": 1, "name": None, "amount": None, "seq": 6})]))
        w.finish()  # end of input while 4 is still prepared: deferred
        final = w.result()
        w.notify_checkpoint_complete(4)
    finally:
        w.close()
    driver = PostgresSink(LOCK_TIMEOUT_DSN, table, "upsert", key="id")
    for transaction in final.transactions:
        driver.recover_and_commit(transaction)
        driver.recover_and_commit(transaction)
    driver.close()
    assert rows_of(table) == []


def test_m_r1_m_x2_a_restart_commits_the_restored_checkpoint_and_rolls_back_the_rest(
    pg_table,
) -> None:
    table = pg_table(PG_COLUMNS)
    w0 = writer(PostgresSink(DSN, table, "upsert", key="id"), ctx(attempt=0))
    w0.write(to_batch([(RowKind.INSERT, {"id": 1, "name": "a", "amount": 1, "seq": 1})]))
    at_1 = w0.snapshot_state(1)
    w0.notify_checkpoint_complete(1)
    w0.write(to_batch([(RowKind.DELETE, {"id": 1, "name": "a", "amount": 1, "seq": 2})]))
    w0.snapshot_state(2)  # prepared; checkpoint 2 never completes
    w0.close()  # the crash
    assert len(prepared()) == 1
    w1 = writer(PostgresSink(DSN, table, "upsert", key="id"), ctx(attempt=1), [at_1])
    try:
        assert prepared() == [], "the transaction of checkpoint 2 must be rolled back"
        assert rows_of(table) == [(1, "a", 1, 1)]
        # the replay of the changes after checkpoint 1
        w1.write(to_batch([(RowKind.DELETE, {"id": 1, "name": "a", "amount": 1, "seq": 2})]))
        w1.snapshot_state(2)
        w1.notify_checkpoint_complete(2)
        assert rows_of(table) == []
    finally:
        w1.close()


# ---------------------------------------------------------------------------------- jobs


def changelog_job(
    table: str, changes, *, faults=(), per_checkpoint: int = 400, end_after: int = 2
) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    env.enable_checkpointing(timedelta(milliseconds=50))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=len(faults) + 2, delay=0))
    source = CheckpointPacedSource(
        ChangelogSource(changes, batch_size=50), per_checkpoint, end_after
    )
    (
        env.from_source(source, name="changes")
        .uid("changes")
        .key_by("id")
        .sink_to(PostgresSink(DSN, table, "upsert", key="id", transaction_prefix=PREFIX), name="pg")
        .uid("pg")
    )
    if faults:
        inject_faults(env, *faults)
    return env


def test_m_x1_a_changelog_over_many_checkpoints_equals_the_oracle_row_by_row(
    audited_table,
) -> None:
    table, audit = audited_table()
    changes = make_changelog(seed=39, n=6_000, keys=400)
    kinds = {k for k, _ in changes}
    assert kinds == set(RowKind), "the changelog has every kind"
    result = changelog_job(table, changes).execute("pg upsert changelog")
    assert rows_of(table) == oracle_rows(changes)
    assert_each_change_applied_at_most_once_in_order(audit)
    assert prepared(PREFIX) == []
    # paced by checkpoints: the changes went in through many transactions of both subtasks
    committed = query("SELECT gid FROM lockgate_commits WHERE gid LIKE %s", (f"{PREFIX}:%",))
    subtasks = {gid.split(":")[3] for (gid,) in committed}
    assert len(committed) >= 10 and subtasks == {"0", "1"}, committed
    assert result.attempts == 1


@pytest.mark.hang_guard(300)
def test_m_x2_m_x3_a_changelog_through_failures_is_applied_exactly_once(
    audited_table,
) -> None:
    """Three failures: in the sink after two checkpoints, in the source after three, and
    between pre-commit and commit (the completion notice of the second checkpoint of an
    attempt): the table is still the oracle's, no change applied twice."""
    table, audit = audited_table()
    changes = make_changelog(seed=7, n=6_000, keys=300)
    faults = [
        FailAtRecord("pg", 1_000, attempt=0, subtask=0, after_checkpoints=2),
        FailAtRecord("changes", 2_000, attempt=1, after_checkpoints=3),
        FailCommit("pg", checkpoint=2, attempt=2, subtask=1),
    ]
    result = changelog_job(table, changes, faults=faults).execute("pg upsert with failures")
    assert result.attempts == 4, "every fault fired once"
    assert rows_of(table) == oracle_rows(changes)
    assert_each_change_applied_at_most_once_in_order(audit)
    assert prepared(PREFIX) == []


def test_a_changelog_into_the_append_modes_fails_naming_the_sink(pg_table) -> None:
    table = pg_table(PG_COLUMNS)
    changes = make_changelog(seed=1, n=200, keys=20)
    for mode in ("exactly_once", "append"):
        env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
        env.enable_checkpointing(timedelta(milliseconds=50))
        env.from_source(ChangelogSource(changes), name="changes").sink_to(
            PostgresSink(DSN, table, mode), name="pg out"
        )
        with pytest.raises(lg.JobFailedError) as failed:
            env.execute(f"changelog into {mode}")
        text = str(failed.value)
        assert "sink 'pg out' (PostgresSink) writes append-only" in text, text
        assert "PostgresSink(mode='upsert'" in text
    assert query(f"SELECT count(*) FROM {table}") == [(0,)]
    assert prepared() == []


def test_accepts_changes_and_commits_on_checkpoint_only_in_upsert_mode() -> None:
    upsert = PostgresSink(DSN, "t", "upsert", key="id")
    assert upsert.accepts_changes and upsert.commits_on_checkpoint
    for mode in ("exactly_once", "append"):
        assert not PostgresSink(DSN, "t", mode).accepts_changes


def test_a_change_without_a_usable_key_fails_naming_the_change(pg_table) -> None:
    table = pg_table(PG_COLUMNS)
    w = writer(PostgresSink(DSN, table, "upsert", key="id"), ctx())
    try:
        w.write(RowBatch([{"name": "no id"}], kinds=np.array([RowKind.DELETE], np.int8)))
        with pytest.raises(ChangeKeyError, match=r"\{'name': 'no id'\} \(-D\) lacks the key"):
            w.snapshot_state(1)
    finally:
        w.close()
    w = writer(PostgresSink(DSN, table, "upsert", key="id"), ctx(attempt=1))
    try:
        w.write(pa.RecordBatch.from_pydict({"id": [1, None], "name": ["a", "b"]}))
        with pytest.raises(ChangeKeyError, match=r"null key field 'id'"):
            w.snapshot_state(1)
    finally:
        w.close()
    assert query(f"SELECT count(*) FROM {table}") == [(0,)]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"mode": "upsert"}, r"needs key=.*mode='upsert', key='id'"),
        ({"mode": "append", "key": "id"}, r"key='id' is for mode='upsert'.*drop key="),
        ({"mode": "upsert", "key": ["id", "id"]}, "names a column twice"),
        ({"mode": "upsert", "key": [1]}, "key must be a column name"),
    ],
)
def test_bad_upsert_arguments_are_refused_saying_how_to_fix(kwargs, needle) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        PostgresSink(DSN, "t", **kwargs)


def test_a_key_without_a_usable_unique_constraint_is_refused_at_job_start(pg_table) -> None:
    """ON CONFLICT needs a unique index on exactly the key columns, immediate, over the
    whole table: a missing column, no index, a partial or a deferrable one are refused,
    each naming the fix."""
    no_index = pg_table("id bigint, name text")
    partial = pg_table("id bigint, name text")
    query(f"CREATE UNIQUE INDEX ON {partial} (id) WHERE id > 0")
    deferrable = pg_table("id bigint UNIQUE DEFERRABLE INITIALLY DEFERRED, name text")
    wider = pg_table("id bigint, name text, PRIMARY KEY (id, name)")
    cases = [
        (no_index, "id", r"no primary key or unique index.*ADD PRIMARY KEY \(id\)"),
        (partial, "id", "no primary key or unique index"),
        (deferrable, "id", "no primary key or unique index"),
        (wider, "id", "no primary key or unique index"),
        (no_index, "nope", r"names columns \['nope'\] that table"),
    ]
    for table, key, needle in cases:
        env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
        env.from_collection([{"id": 1}]).sink_to(PostgresSink(DSN, table, "upsert", key=key))
        with pytest.raises(ConfigurationError, match=needle):
            env.execute("bad key")
    # the same table with a composite key matching its primary key is fine
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.from_collection([{"id": 1, "name": "x"}]).sink_to(
        PostgresSink(DSN, wider, "upsert", key=["name", "id"])
    )
    env.execute("composite key")
    assert query(f"SELECT id, name FROM {wider}") == [(1, "x")]

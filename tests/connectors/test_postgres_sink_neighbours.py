"""PostgresSinks of different jobs (and runs) side by side in one database (issue 18,
items 1, 16 and 11; M-X1, M-X2, M-X3).

A job only touches prepared transactions it can prove its own: ids exactly of its
grammar ``<prefix>:<run>:<attempt>:<subtask>:<checkpoint>`` with its own prefix, of its
own run, named in the checkpoint it restores, or left by the run that wrote that
checkpoint once that run is gone. A ``COMMIT PREPARED`` that finds nothing is "already
committed" only when the commit marker written inside the transaction is there;
otherwise the job fails instead of reporting success without those rows.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

import lockgate as lg
from lockgate.connectors import PostgresSink, SequenceSource
from lockgate.connectors.postgres.sink import PgTransaction
from lockgate.connectors.postgres.transactions import (
    MAX_PREFIX_BYTES,
    MAX_RUN_BYTES,
    TransactionLostError,
)
from lockgate.connectors.two_phase_commit import TwoPhaseCommitWriter
from lockgate.core.batch import RowBatch
from lockgate.errors import ConfigurationError, JobFailedError
from lockgate.runtime.context import RuntimeContext
from pg_fixtures import DSN, query

WAIT_S = 60.0


def all_prepared() -> list[str]:
    return [
        r[0]
        for r in query(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() ORDER BY gid"
        )
    ]


def ctx(
    job: str, run: str, attempt: int = 0, subtask: int = 0, parallelism: int = 1
) -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="pg",
        operator_uid="pg",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
        attempt_number=attempt,
        job_name=job,
        run_id=run,
    )


def rows(n0: int, n1: int) -> RowBatch:
    return RowBatch([{"v": i} for i in range(n0, n1)])


def values(table: str) -> list[int]:
    return [r[0] for r in query(f"SELECT v FROM {table} ORDER BY v")]


def run_id() -> str:
    return uuid.uuid4().hex[:12]


def writer(
    sink: PostgresSink, c: RuntimeContext, states: Any = (), every_state: Any = None
) -> TwoPhaseCommitWriter:
    w = sink.create_writer(c)
    assert isinstance(w, TwoPhaseCommitWriter)
    w.initialize_state(list(states), every_state=every_state)
    return w


def prepare_one(sink: PostgresSink, c: RuntimeContext, n0: int) -> tuple[TwoPhaseCommitWriter, Any]:
    """A writer with one transaction prepared for checkpoint 1 (not committed)."""
    w = writer(sink, c)
    w.write(rows(n0, n0 + 10))
    return w, w.snapshot_state(1)


# ---------------------------------------------------------------- item 11: the id limit


@pytest.mark.parametrize(
    "prefix",
    ["é" * 100, "x" * (MAX_PREFIX_BYTES + 1)],
    ids=["100-two-byte-characters", "one-byte-too-many"],
)
def test_issue18_11_a_prefix_too_long_for_postgres_ids_is_refused_when_the_sink_is_built(
    prefix: str,
) -> None:
    """'é' * 100 is 100 characters (accepted before) but 200 bytes: no id made from it
    fits PostgreSQL's 200-byte limit, which failed only at the first PREPARE."""
    with pytest.raises(ConfigurationError, match="transaction_prefix must be at most"):
        PostgresSink(DSN, "t", transaction_prefix=prefix)


def test_issue18_1_a_prefix_may_not_contain_the_id_delimiter() -> None:
    with pytest.raises(ConfigurationError, match="transaction_prefix must be a name without"):
        PostgresSink(DSN, "t", transaction_prefix="sales:eu")


def test_issue18_11_the_longest_prefix_accepted_prepares_and_commits(pg_table) -> None:
    table = pg_table("v bigint")
    """With the longest run id, attempt and checkpoint numbers the id has 199 bytes."""
    sink = PostgresSink(DSN, table, transaction_prefix="lgtest-" + "p" * (MAX_PREFIX_BYTES - 7))
    w = writer(
        sink,
        ctx(
            "longest",
            uuid.uuid4().hex[:MAX_RUN_BYTES].ljust(MAX_RUN_BYTES, "r"),
            attempt=9_999_999_999,
        ),
    )
    try:
        w.write(rows(0, 10))
        at_end = w.snapshot_state(10**19)
        assert len(at_end["pending"][0][1].gid.encode()) == 199 - 9  # subtask '0' of 10 digits
        w.notify_checkpoint_complete(10**19)
    finally:
        w.close()
    assert values(table) == list(range(10))


# ------------------------------------------------- item 1: recovery keeps to its own ids


@pytest.mark.parametrize(
    "mine, theirs",
    [
        ("lgtest-x", "lgtest-x-b"),  # like 'lockgate' against the default 'lockgate-<hash>'
        ("lgtest-sales", "lgtest-sales-eu"),
        ("lgtest-same", "lgtest-same"),  # two runs of one job (same name and uid)
    ],
)
def test_issue18_1_m_x2_recovery_never_rolls_back_another_jobs_prepared_transactions(
    pg_table, mine: str, theirs: str
) -> None:
    """A neighbour (another job, or another run with the same prefix) has a transaction
    prepared; this job restarts (attempt 1 recovers, subtask 0 rolls back lingering
    transactions). The neighbour's transaction must survive and commit."""
    table = pg_table("v bigint")
    neighbour, _ = prepare_one(
        PostgresSink(DSN, table, transaction_prefix=theirs), ctx("neighbour", run_id()), 1000
    )
    try:
        mine_run = run_id()
        crashed, at_1 = prepare_one(
            PostgresSink(DSN, table, transaction_prefix=mine), ctx("mine", mine_run), 0
        )
        crashed.close()
        restarted = writer(
            PostgresSink(DSN, table, transaction_prefix=mine),
            ctx("mine", mine_run, attempt=1),
            [at_1],
        )
        restarted.close()
        assert values(table) == list(range(10)), "the restored checkpoint is committed"
        neighbour.notify_checkpoint_complete(1)
    finally:
        neighbour.close()
    assert values(table) == list(range(10)) + list(range(1000, 1010)), (
        "the neighbour's prepared transaction was rolled back by another job's recovery"
    )


def test_issue18_1_m_x2_a_restored_run_commits_and_cleans_up_after_the_run_it_restores(
    pg_table,
) -> None:
    """Run A prepares for checkpoints 1 and 2 and dies (checkpoint 1 completed, its
    notice never arrived). Run B restores checkpoint 1: it commits A's transaction of 1
    (named in the state) and rolls back A's transaction of 2 (A is gone), but not the
    transaction of run C, which shares the prefix and is still running."""
    table = pg_table("v bigint")
    prefix = "lgtest-lineage"
    run_c, c_at_1 = prepare_one(
        PostgresSink(DSN, table, transaction_prefix=prefix), ctx("job", run_id()), 1000
    )
    try:
        run_a = writer(PostgresSink(DSN, table, transaction_prefix=prefix), ctx("job", run_id()))
        run_a.write(rows(0, 10))
        at_1 = run_a.snapshot_state(1)
        run_a.write(rows(10, 20))
        run_a.snapshot_state(2)
        run_a.close()  # the crash: its connections (and its run lock) are gone
        assert len([g for g in all_prepared() if g.startswith(prefix)]) == 3

        run_b = writer(
            PostgresSink(DSN, table, transaction_prefix=prefix), ctx("job", run_id()), [at_1]
        )
        run_b.close()
        assert values(table) == list(range(10))
        assert [g for g in all_prepared() if g.startswith(prefix + ":")] == [
            c_at_1["pending"][0][1].gid
        ], "only run C's transaction may remain"
        run_c.notify_checkpoint_complete(1)
    finally:
        run_c.close()
    assert values(table) == list(range(10)) + list(range(1000, 1010))
    assert [g for g in all_prepared() if g.startswith(prefix + ":")] == []


def test_issue18_1_m_x2_a_fresh_run_leaves_what_a_dead_run_of_its_prefix_prepared(
    pg_table, caplog: pytest.LogCaptureFixture
) -> None:
    """A run that died without settling left a transaction prepared for a checkpoint that
    completed (a restore from it would commit it). A fresh run with the same prefix does
    not restore that checkpoint: it must not roll the transaction back, and says so."""
    table = pg_table("v bigint")
    prefix = "lgtest-dead"
    dead, at_1 = prepare_one(
        PostgresSink(DSN, table, transaction_prefix=prefix), ctx("job", run_id()), 0
    )
    dead.close()
    gid = at_1["pending"][0][1].gid
    with caplog.at_level(logging.WARNING, logger="lockgate.connectors.postgres.sink"):
        writer(PostgresSink(DSN, table, transaction_prefix=prefix), ctx("job", run_id())).close()
    assert gid in all_prepared(), "a fresh run rolled back another run's transaction"
    assert any(
        gid in r.getMessage() and "held by no running job" in r.getMessage() for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
    restored = writer(
        PostgresSink(DSN, table, transaction_prefix=prefix), ctx("job", run_id()), [at_1]
    )  # restoring its checkpoint commits it
    restored.close()
    assert values(table) == list(range(10))


def test_issue18_1_m_x2_a_restore_leaves_the_transactions_of_a_restored_run_still_running(
    pg_table,
) -> None:
    """Restoring a checkpoint of a run that is still running (a fork) commits what the
    checkpoint names but never rolls back what that live run prepared later."""
    table = pg_table("v bigint")
    prefix = "lgtest-fork"
    live = writer(PostgresSink(DSN, table, transaction_prefix=prefix), ctx("job", run_id()))
    try:
        live.write(rows(0, 10))
        at_1 = live.snapshot_state(1)
        live.write(rows(10, 20))
        live.snapshot_state(2)
        fork = writer(
            PostgresSink(DSN, table, transaction_prefix=prefix), ctx("job", run_id()), [at_1]
        )
        fork.close()
        live.notify_checkpoint_complete(2)  # its own commit of 1 finds the marker
    finally:
        live.close()
    assert values(table) == list(range(20))


# ---------------------------------------------- item 1: a lost transaction is an error


def test_issue18_1_m_x3_committing_a_transaction_someone_rolled_back_raises(pg_table) -> None:
    table = pg_table("v bigint")
    sink = PostgresSink(DSN, table, transaction_prefix="lgtest-lost")
    w, at_1 = prepare_one(sink, ctx("job", run_id()), 0)
    try:
        gid = at_1["pending"][0][1].gid
        query(f"ROLLBACK PREPARED '{gid}'")  # a neighbour's doing
        with pytest.raises(TransactionLostError, match="gone and was never committed"):
            w.notify_checkpoint_complete(1)
        with pytest.raises(TransactionLostError):
            sink.recover_and_commit(at_1["pending"][0][1])  # a restore cannot pass it either
    finally:
        w.close()
    assert values(table) == []


def test_issue18_1_m_x2_committing_again_after_a_commit_is_still_idempotent(pg_table) -> None:
    table = pg_table("v bigint")
    sink = PostgresSink(DSN, table, transaction_prefix="lgtest-again")
    w, at_1 = prepare_one(sink, ctx("job", run_id()), 0)
    try:
        w.notify_checkpoint_complete(1)
        sink.recover_and_commit(at_1["pending"][0][1])  # the marker proves the commit
        sink.recover_and_commit(PgTransaction())  # nothing prepared: nothing to do
    finally:
        w.close()
    assert values(table) == list(range(10))


# --------------------------------------------------- whole jobs side by side (local)


@dataclass
class Gate:
    """Holds a HeldSink's first commit until the test releases it."""

    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    gid: str | None = None


#: table -> its gate; HeldSink (pickled by reference) finds it in this process
GATES: dict[str, Gate] = {}


class HeldSink(PostgresSink):
    """A PostgresSink whose first commit of a prepared transaction waits for the test:
    while it waits, that transaction is prepared and not committed."""

    def commit(self, transaction: PgTransaction) -> None:
        gate = GATES.get(self.table)
        if gate is not None and transaction.gid is not None and not gate.held.is_set():
            gate.gid = transaction.gid
            gate.held.set()
            if not gate.release.wait(WAIT_S):
                raise RuntimeError(f"the test never released the commit of {transaction.gid}")
        super().commit(transaction)


def job(sink: PostgresSink, n: int, restarts: int = 0) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.enable_checkpointing(100)
    env.set_restart_strategy(
        lg.RestartStrategy.fixed_delay(attempts=restarts, delay=0)
        if restarts
        else lg.RestartStrategy.none()
    )
    (
        env.from_source(SequenceSource(0, n, rows_per_second=50_000, batch_size=500))
        .uid("numbers")
        .map(lambda x: {"v": x}, name="to row")
        .uid("to row")
        .sink_to(sink, name="pg")
        .uid("pg")
    )
    return env


def held_victim(table: str, name: str, prefix: str | None) -> tuple[lg.JobClient, Gate]:
    """Job ``name`` writing 6,000 rows into ``table``, stopped with its first committed
    transaction prepared."""
    gate = GATES[table] = Gate()
    client = job(HeldSink(DSN, table, transaction_prefix=prefix), 6_000).execute_async(name)
    if not gate.held.wait(WAIT_S):
        client.cancel()
        pytest.fail(f"the victim job prepared no transaction within {WAIT_S}s")
    assert gate.gid in all_prepared()
    return client, gate


@pytest.mark.parametrize(
    "victim_prefix, neighbour_prefix",
    [
        (None, "lockgate"),  # the default 'lockgate-<hash>' against 'lockgate'
        ("lgtest-sales-eu", "lgtest-sales"),  # one prefix starting another
    ],
)
def test_issue18_1_m_x1_a_neighbour_job_finishing_beside_a_running_job_takes_nothing_from_it(
    pg_table, victim_prefix: str | None, neighbour_prefix: str
) -> None:
    """Job B (6,000 rows) holds a prepared transaction while job A runs to its end
    beside it; A's end settles (rolls back) its own lingering transactions. B must still
    end with every one of its rows (before the fix: FINISHED with rows missing)."""
    table, other = pg_table("v bigint"), pg_table("v bigint")
    victim, gate = held_victim(table, "victim job", victim_prefix)
    try:
        job(PostgresSink(DSN, other, transaction_prefix=neighbour_prefix), 3_000).execute(
            "neighbour job"
        )
        assert gate.gid in all_prepared(), "job A rolled back job B's prepared transaction"
    finally:
        gate.release.set()
    assert victim.wait(WAIT_S).status is lg.JobStatus.FINISHED
    assert values(table) == list(range(6_000))
    assert values(other) == list(range(3_000))


def test_issue18_16_m_x1_a_second_job_with_the_same_name_runs_beside_the_first_and_says_so(
    pg_table, caplog: pytest.LogCaptureFixture
) -> None:
    """Two jobs named alike share the default transaction prefix. The second one logs
    that it shares it with a running run and keeps to its own transactions; the first
    keeps every row."""
    table, other = pg_table("v bigint"), pg_table("v bigint")
    victim, gate = held_victim(table, "twin job", None)
    try:
        with caplog.at_level(logging.WARNING, logger="lockgate.connectors.postgres.sink"):
            job(PostgresSink(DSN, other), 3_000).execute("twin job")
        assert gate.gid in all_prepared(), "the second twin rolled back the first's transaction"
    finally:
        gate.release.set()
    assert victim.wait(WAIT_S).status is lg.JobStatus.FINISHED
    assert values(table) == list(range(6_000))
    assert values(other) == list(range(3_000))
    said = [r.getMessage() for r in caplog.records if "same transaction prefix" in r.getMessage()]
    assert said and "'twin job'" in said[0] and gate.gid.split(":")[0] in said[0], (
        f"the second job with the same name must say it shares the prefix; logged: "
        f"{[r.getMessage() for r in caplog.records]}"
    )


def test_issue18_1_m_x3_a_job_whose_prepared_transaction_was_rolled_back_fails(pg_table) -> None:
    """Something outside the job rolls back its prepared transaction before the commit:
    the job must fail naming the lost transaction (before the fix it FINISHED with those
    rows missing), also after a restart (the restored commit cannot prove it either)."""
    table = pg_table("v bigint")
    GATES[table] = gate = Gate()
    client = job(
        HeldSink(DSN, table, transaction_prefix="lgtest-victim"), 6_000, restarts=1
    ).execute_async("victim job")
    try:
        assert gate.held.wait(WAIT_S), "the job prepared no transaction"
        query(f"ROLLBACK PREPARED '{gate.gid}'")
    finally:
        gate.release.set()
    with pytest.raises(JobFailedError) as failed:
        client.wait(WAIT_S)
    assert "gone and was never committed" in repr(failed.value) + repr(failed.value.__cause__)
    assert len(values(table)) < 6_000

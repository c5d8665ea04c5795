"""The PostgreSQL test fixtures leave other test sessions' prepared transactions alone.

The test database on 127.0.0.1 is shared by every pytest session on the machine
(several worktrees run suites at once). ``pg_table``'s teardown used to roll back
*every* prepared transaction of the database whose id starts with ``lockgate-`` or
``lgtest-``: a test ending in one session rolled back, in another, the prepared
transaction of a job whose writer had just died (its host killed) and which the
restarted attempt was about to commit from its checkpoint; the job then failed for good
with ``TransactionLostError`` (test_multi_host_cluster.py::
test_m_r1_a_killed_executor_then_a_killed_worker_host_recover_with_exact_output,
2026-11-28 00:38). The teardown now rolls back only the prepared transactions that hold
a lock on a table it made.
"""

from __future__ import annotations

import uuid

from lockgate.connectors import PostgresSink
from lockgate.connectors.two_phase_commit import TwoPhaseCommitWriter
from lockgate.core.batch import RowBatch
from lockgate.runtime.context import RuntimeContext
from pg_fixtures import DSN, prepared, query, release_tables


def _ctx(run: str, attempt: int) -> RuntimeContext:
    return RuntimeContext(
        task_name="sums -> files -> postgres",
        operator_name="postgres",
        operator_uid="postgres",
        subtask_index=0,
        parallelism=2,
        max_parallelism=128,
        attempt_number=attempt,
        job_name="faults",
        run_id=run,
    )


def _table(kind: str) -> str:
    name = f"lg_fixture_{kind}_{uuid.uuid4().hex[:6]}"
    query(f"CREATE TABLE {name} (v bigint)")
    return name


def _writer(sink: PostgresSink, ctx: RuntimeContext, states: list) -> TwoPhaseCommitWriter:
    w = sink.create_writer(ctx)
    assert isinstance(w, TwoPhaseCommitWriter)
    w.initialize_state(states, every_state=states)
    return w


def test_a_table_teardown_leaves_a_dead_writers_prepared_transaction_to_its_job() -> None:
    """The incident, step by step: attempt 1's subtask 0 prepares its transaction for
    checkpoint 4 and dies before committing it (its host is killed); meanwhile a test of
    another session tears down its own table; attempt 2 restores checkpoint 4 and must
    commit that transaction. Before the fix the teardown rolled it back and attempt 2
    raised TransactionLostError ('... is gone and was never committed')."""
    job_table, other_table = _table("job"), _table("other")
    prefix = f"lgtest-{uuid.uuid4().hex[:10]}"  # as ClusterPostgres names the job's ids
    run = uuid.uuid4().hex[:12]
    sink = PostgresSink(DSN, job_table, transaction_prefix=prefix)
    try:
        attempt_1 = _writer(sink, _ctx(run, 1), [])
        attempt_1.write(RowBatch([{"v": i} for i in range(767)]))
        checkpoint_4 = attempt_1.snapshot_state(4)
        attempt_1.close()  # its host died: no completion notice, no commit
        (lost,) = prepared(prefix)
        assert lost == f"{prefix}:{run}:1:0:4"

        # another session's test ends: its table had a transaction left prepared on it
        other = PostgresSink(DSN, other_table, transaction_prefix=f"lgtest-{uuid.uuid4().hex[:8]}")
        left = _writer(other, _ctx(uuid.uuid4().hex[:12], 0), [])
        left.write(RowBatch([{"v": 1}]))
        left.snapshot_state(1)
        left.close()
        release_tables([other_table])  # rolls back what blocks its DROP, nothing else
        assert query("SELECT to_regclass(%s)::text", (other_table,)) == [(None,)]
        assert prepared(prefix) == [lost], "the teardown rolled back another job's transaction"

        # attempt 2 restores checkpoint 4 and commits the transaction it holds
        attempt_2 = _writer(
            PostgresSink(DSN, job_table, transaction_prefix=prefix), _ctx(run, 2), [checkpoint_4]
        )
        attempt_2.close()
        assert query(f"SELECT count(*) FROM {job_table}") == [(767,)]
        assert prepared(prefix) == []
    finally:
        sink.close()
        release_tables([job_table, other_table])

"""TwoPhaseCommitSink and its writer (M-X2, M-X3), driven hook by hook as the runtime would."""

from __future__ import annotations

import pickle
import threading
from typing import Any

import pytest

from lockgate.connectors import FinalCommit, TwoPhaseCommitSink
from lockgate.connectors.two_phase_commit import (
    CommitFailedError,
    TwoPhaseCommitWriter,
    commit_final,
)
from lockgate.core.batch import Batch, RowBatch, to_rows
from lockgate.runtime.context import RuntimeContext


def context(subtask: int = 0, parallelism: int = 1) -> RuntimeContext:
    return RuntimeContext(
        task_name="sink task",
        operator_name="sink",
        operator_uid="sink",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
    )


class RecordingSink(TwoPhaseCommitSink[str]):
    """Transactions are names ``t0, t1, ...``; every call is recorded in ``calls``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.begun = 0
        #: transactions whose next commit raises (once)
        self.fail_commit: set[str] = set()

    def open(self, ctx: RuntimeContext) -> None:
        self.calls.append(("open", ctx.subtask_index))

    def begin_transaction(self) -> str:
        txn = f"t{self.begun}"
        self.begun += 1
        self.calls.append(("begin", txn))
        return txn

    def write(self, transaction: str, batch: Batch) -> None:
        self.calls.append(("write", transaction, to_rows(batch)))

    def pre_commit(self, transaction: str) -> None:
        self.calls.append(("pre_commit", transaction))

    def commit(self, transaction: str) -> None:
        if transaction in self.fail_commit:
            self.fail_commit.discard(transaction)
            raise OSError(f"cannot reach the store to commit {transaction}")
        self.calls.append(("commit", transaction))

    def abort(self, transaction: str) -> None:
        self.calls.append(("abort", transaction))

    def recover_and_commit(self, transaction: str) -> None:
        self.calls.append(("recover_and_commit", transaction))
        super().recover_and_commit(transaction)

    def recover_and_abort(self, transaction: str) -> None:
        self.calls.append(("recover_and_abort", transaction))
        super().recover_and_abort(transaction)

    def finish_recovery(self, recovered: list[str]) -> None:
        self.calls.append(("finish_recovery", list(recovered)))

    def close(self) -> None:
        self.calls.append(("close",))


def new_writer(sink: RecordingSink) -> TwoPhaseCommitWriter[str]:
    writer = sink.create_writer(context())
    assert isinstance(writer, TwoPhaseCommitWriter)
    return writer


def started(
    sink: RecordingSink | None = None, states: list[Any] | None = None
) -> tuple[RecordingSink, TwoPhaseCommitWriter[str]]:
    sink = sink or RecordingSink()
    writer = new_writer(sink)
    writer.initialize_state(states or [])
    sink.calls.clear()
    return sink, writer


def test_m_x2_a_fresh_writer_opens_the_sink_then_begins_one_transaction() -> None:
    sink = RecordingSink()
    writer = new_writer(sink)
    writer.initialize_state([])
    writer.write(RowBatch([1, 2]))
    assert sink.calls == [
        ("open", 0),
        ("finish_recovery", []),
        ("begin", "t0"),
        ("write", "t0", [1, 2]),
    ]


def test_m_x2_the_barrier_pre_commits_begins_the_next_and_completion_commits() -> None:
    sink, writer = started()
    writer.write(RowBatch([1]))
    snapshot = writer.snapshot_state(1)
    writer.write(RowBatch([2]))
    assert snapshot == {"pending": [(1, "t0")], "current": "t1"}
    assert sink.calls == [
        ("write", "t0", [1]),
        ("pre_commit", "t0"),
        ("begin", "t1"),
        ("write", "t1", [2]),
    ]
    sink.calls.clear()
    writer.notify_checkpoint_complete(1)
    assert sink.calls == [("commit", "t0")]
    writer.notify_checkpoint_complete(1)
    assert sink.calls == [("commit", "t0")], "a transaction is committed once"


def test_m_x2_one_notice_commits_every_pending_transaction_up_to_its_id_in_order() -> None:
    sink, writer = started()
    for cp in (1, 2, 3):
        writer.write(RowBatch([cp]))
        writer.snapshot_state(cp)
    sink.calls.clear()
    writer.notify_checkpoint_complete(2)
    assert sink.calls == [("commit", "t0"), ("commit", "t1")]
    writer.notify_checkpoint_complete(3)
    assert sink.calls == [("commit", "t0"), ("commit", "t1"), ("commit", "t2")]


def test_m_x2_an_aborted_checkpoint_leaves_its_transaction_for_a_later_one() -> None:
    sink, writer = started()
    writer.write(RowBatch([1]))
    writer.snapshot_state(1)
    sink.calls.clear()
    writer.notify_checkpoint_aborted(1)
    assert sink.calls == []
    writer.write(RowBatch([2]))
    assert writer.snapshot_state(2)["pending"] == [(1, "t0"), (2, "t1")]
    writer.notify_checkpoint_complete(2)
    assert sink.calls[-2:] == [("commit", "t0"), ("commit", "t1")]


def test_m_x3_a_failed_commit_propagates_stays_pending_and_is_retried_on_the_next_notice() -> None:
    sink, writer = started()
    sink.fail_commit = {"t0"}
    writer.snapshot_state(1)
    writer.snapshot_state(2)
    sink.calls.clear()
    with pytest.raises(OSError, match="commit t0"):
        writer.notify_checkpoint_complete(2)
    assert sink.calls == [], "nothing after the failed commit is committed out of order"
    assert writer.snapshot_state(3)["pending"] == [(1, "t0"), (2, "t1"), (3, "t2")]
    writer.notify_checkpoint_complete(3)
    assert [c for c in sink.calls if c[0] == "commit"] == [
        ("commit", "t0"),
        ("commit", "t1"),
        ("commit", "t2"),
    ]


def test_m_x2_restore_recovers_and_commits_pending_in_checkpoint_order_and_aborts_the_open_one() -> (
    None
):
    sink, writer = started()
    writer.write(RowBatch([1]))
    writer.snapshot_state(1)
    writer.write(RowBatch([2]))
    snapshot = pickle.loads(pickle.dumps(writer.snapshot_state(2)))
    writer.write(RowBatch([3]))  # into t2, begun after checkpoint 2
    writer.close()  # the task fails
    assert ("abort", "t2") not in sink.calls and ("close",) in sink.calls

    snapshot["pending"].reverse()  # order comes from the checkpoint ids
    restored = RecordingSink()
    restored.begun = 3
    writer = new_writer(restored)
    writer.initialize_state([snapshot])
    assert restored.calls == [
        ("open", 0),
        ("recover_and_commit", "t0"),
        ("commit", "t0"),
        ("recover_and_commit", "t1"),
        ("commit", "t1"),
        ("recover_and_abort", "t2"),
        ("abort", "t2"),
        ("finish_recovery", ["t0", "t1", "t2"]),
        ("begin", "t3"),
    ]


def test_m_x2_restoring_several_snapshots_recovers_each() -> None:
    first = {"pending": [(4, "a0")], "current": "a1"}
    second = {"pending": [(4, "b0")], "current": "b1"}
    sink = RecordingSink()
    new_writer(sink).initialize_state([first, None, second])
    assert [c for c in sink.calls if c[0].startswith("recover")] == [
        ("recover_and_commit", "a0"),
        ("recover_and_abort", "a1"),
        ("recover_and_commit", "b0"),
        ("recover_and_abort", "b1"),
    ]


def test_m_x2_a_restore_fails_loudly_on_a_value_that_is_not_a_snapshot() -> None:
    writer = new_writer(RecordingSink())
    with pytest.raises(ValueError, match="cannot restore from"):
        writer.initialize_state([{"pending": 5}])


def test_the_snapshot_is_a_copy_that_later_writes_do_not_change() -> None:
    class ListSink(RecordingSink):
        def begin_transaction(self) -> Any:
            return []

        def write(self, transaction: Any, batch: Batch) -> None:
            transaction.extend(to_rows(batch))

    _, writer = started(ListSink())
    writer.write(RowBatch([1]))
    snapshot = writer.snapshot_state(1)
    writer.write(RowBatch([2]))
    writer.snapshot_state(2)
    assert snapshot == {"pending": [(1, [1])], "current": []}


def test_close_after_a_failure_neither_commits_nor_aborts() -> None:
    sink, writer = started()
    writer.write(RowBatch([1]))
    writer.snapshot_state(1)
    writer.write(RowBatch([2]))
    sink.calls.clear()
    writer.close()
    assert sink.calls == [("close",)]


def test_without_initialize_state_the_first_write_begins_a_transaction() -> None:
    sink = RecordingSink()
    writer = new_writer(sink)
    writer.write(RowBatch(["x"]))
    assert sink.calls == [("open", 0), ("begin", "t0"), ("write", "t0", ["x"])]
    with pytest.raises(RuntimeError, match="initialize_state must be called once"):
        writer.initialize_state([])


def test_m_x2_end_of_input_pre_commits_without_committing_and_the_driver_commits_the_rest() -> None:
    sink, writer = started()
    writer.write(RowBatch([1]))
    writer.snapshot_state(1)
    writer.write(RowBatch([2]))
    writer.finish()
    assert sink.calls[-1] == ("pre_commit", "t1")
    assert not [c for c in sink.calls if c[0] == "commit"]
    assert writer.result() == FinalCommit(["t0", "t1"])
    writer.notify_checkpoint_complete(1)
    final = pickle.loads(pickle.dumps(writer.result()))
    assert final == FinalCommit(["t1"])
    with pytest.raises(RuntimeError, match="after the end of input"):
        writer.write(RowBatch([3]))

    driver = RecordingSink()  # the driver's copy: never opened
    commit_final(driver, final)
    assert driver.calls == [("recover_and_commit", "t1"), ("commit", "t1")]


def test_m_x2_a_checkpoint_after_the_end_of_input_covers_the_last_transaction() -> None:
    sink, writer = started()
    writer.write(RowBatch([1]))
    writer.finish()
    sink.calls.clear()
    assert writer.snapshot_state(5) == {"pending": [(5, "t0")]}
    assert sink.calls == [], "no new transaction after the end of input"
    writer.notify_checkpoint_complete(5)
    assert sink.calls == [("commit", "t0")]
    assert writer.result() == FinalCommit([])


def test_m_x3_commit_final_names_the_sink_and_the_transaction_when_a_commit_fails() -> None:
    driver = RecordingSink()
    driver.fail_commit = {"t1"}
    with pytest.raises(CommitFailedError) as err:
        commit_final(driver, FinalCommit(["t0", "t1", "t2"]))
    assert "RecordingSink" in str(err.value) and "'t1'" in str(err.value)
    assert isinstance(err.value.__cause__, OSError)
    assert [c for c in driver.calls if c[0] == "commit"] == [("commit", "t0")]


# -- background pre-commits (pre_commits_in_background, the KafkaSink's): the barrier only
# ends the transaction, the checkpoint's asynchronous part pre-commits it (M-X2, M-X3, M-T3)


class BackgroundSink(RecordingSink):
    pre_commits_in_background = True

    def __init__(self) -> None:
        super().__init__()
        #: transactions whose next pre-commit raises (once)
        self.fail_pre_commit: set[str] = set()
        #: set while a pre-commit runs; a test can hold one with ``gate``
        self.gate: threading.Event | None = None
        self.pre_committing = threading.Event()

    def pre_commit(self, transaction: str) -> None:
        self.pre_committing.set()
        if self.gate is not None:
            assert self.gate.wait(10), "the test never opened the gate"
        if transaction in self.fail_pre_commit:
            self.fail_pre_commit.discard(transaction)
            raise TimeoutError(f"records of {transaction} not acknowledged")
        super().pre_commit(transaction)


def started_in_background() -> tuple[BackgroundSink, TwoPhaseCommitWriter[str]]:
    sink = BackgroundSink()
    writer = new_writer(sink)
    writer.initialize_state([])
    sink.calls.clear()
    return sink, writer


def test_m_x2_the_barrier_begins_the_next_transaction_and_the_view_pre_commits() -> None:
    sink, writer = started_in_background()
    writer.write(RowBatch([1]))
    view = writer.snapshot_state(1)
    writer.write(RowBatch([2]))
    assert ("pre_commit", "t0") not in sink.calls, "the barrier must not pre-commit"
    assert sink.calls == [("write", "t0", [1]), ("begin", "t1"), ("write", "t1", [2])]
    state = view.materialize()
    assert state == {"pending": [(1, "t0")], "current": "t1"}
    assert sink.calls[-1] == ("pre_commit", "t0")
    sink.calls.clear()
    writer.notify_checkpoint_complete(1)
    assert sink.calls == [("commit", "t0")]


def test_m_x2_the_task_writes_on_while_the_asynchronous_part_pre_commits() -> None:
    sink, writer = started_in_background()
    writer.write(RowBatch([1]))
    view = writer.snapshot_state(1)
    sink.gate = threading.Event()
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(view.materialize()))
    thread.start()
    assert sink.pre_committing.wait(10)
    writer.write(RowBatch([2]))  # not held up by the pre-commit in progress
    assert ("write", "t1", [2]) in sink.calls and ("pre_commit", "t0") not in sink.calls
    sink.gate.set()
    thread.join(10)
    assert out == [{"pending": [(1, "t0")], "current": "t1"}]


def test_m_t3_a_view_never_materialized_leaves_its_transaction_to_the_next_one() -> None:
    """A cancelled asynchronous part (M-T3) did not pre-commit: the next checkpoint's
    view pre-commits both, in order, and its completion commits both."""
    sink, writer = started_in_background()
    writer.write(RowBatch([1]))
    writer.snapshot_state(1).release()  # cancelled: never materialized
    writer.write(RowBatch([2]))
    state = writer.snapshot_state(2).materialize()
    assert state == {"pending": [(1, "t0"), (2, "t1")], "current": "t2"}
    pre = [c for c in sink.calls if c[0] == "pre_commit"]
    assert pre == [("pre_commit", "t0"), ("pre_commit", "t1")]
    sink.calls.clear()
    writer.notify_checkpoint_complete(2)
    assert sink.calls == [("commit", "t0"), ("commit", "t1")]


def test_m_x3_a_failed_pre_commit_fails_that_checkpoint_and_is_tried_again() -> None:
    sink, writer = started_in_background()
    writer.write(RowBatch([1]))
    sink.fail_pre_commit.add("t0")
    with pytest.raises(TimeoutError, match="t0"):
        writer.snapshot_state(1).materialize()
    state = writer.snapshot_state(2).materialize()
    assert state == {"pending": [(1, "t0"), (2, "t1")], "current": "t2"}
    writer.notify_checkpoint_complete(2)
    assert [c for c in sink.calls if c[0] == "commit"] == [("commit", "t0"), ("commit", "t1")]


def test_m_x2_a_commit_never_publishes_a_transaction_not_pre_committed() -> None:
    sink, writer = started_in_background()
    writer.write(RowBatch([1]))
    writer.snapshot_state(1)  # its asynchronous part has not run
    writer.notify_checkpoint_complete(1)
    assert sink.calls[-2:] == [("pre_commit", "t0"), ("commit", "t0")]


def test_m_x2_the_end_of_input_pre_commits_what_a_cancelled_view_left() -> None:
    sink, writer = started_in_background()
    writer.write(RowBatch([1]))
    writer.snapshot_state(1)  # never materialized
    writer.write(RowBatch([2]))
    writer.finish()
    pre = [c for c in sink.calls if c[0] == "pre_commit"]
    assert pre == [("pre_commit", "t0"), ("pre_commit", "t1")]
    assert writer.result().transactions == ["t0", "t1"]


def test_m_x2_the_final_checkpoint_records_the_end_of_input_transaction() -> None:
    sink, writer = started_in_background()
    writer.write(RowBatch([1]))
    writer.finish()
    state = writer.snapshot_state(1).materialize()
    assert state == {"pending": [(1, "t0")]}
    assert [c for c in sink.calls if c[0] == "begin"] == [], "nothing begins after the end"

"""Two-phase-commit sinks: exactly-once output end to end (M-X1, M-X2, M-X3).

A :class:`TwoPhaseCommitSink` (Flink's ``TwoPhaseCommitSinkFunction``) writes
each checkpoint interval of a subtask into one *transaction* (a picklable
value of the user's choosing, ``TXN``: e.g. the path of a temporary file):

* ``begin_transaction`` starts one; ``write`` adds records to it;
* on the checkpoint barrier the writer ``pre_commit``s it (flushed, durable,
  closed for writes), keeps it as *pending* in the checkpoint and begins the
  next one (M-X2);
* when the checkpoint completes, every pending transaction it covers is
  ``commit``ted: published atomically;
* on restore, the pending transactions of the checkpoint are committed again
  (``recover_and_commit``; ``commit`` must be idempotent) and the transaction
  that was open at the checkpoint is discarded (``recover_and_abort``); then
  ``abort_lingering`` discards whatever else earlier attempts left behind (a
  transaction pre-committed for a checkpoint that never completed);
* when the job is cancelled or fails for good, the driver commits the pending
  transactions of the run's newest completed checkpoint (they belong to it;
  committing is idempotent); however the job ends it calls ``abort_lingering``
  once more, so a sink that keeps transactions in an external system (such as
  PostgreSQL's prepared transactions) leaves none behind.

A commit that raises fails the task; the transaction stays pending, so the
restarted job (or the next completion notice) commits it again (M-X3).

At the end of a bounded input the writer pre-commits its last transaction
but does not commit it yet. With checkpoints, the task then waits for its
final checkpoint (Flink's FLIP-147): the next checkpoint records that
transaction as pending (:meth:`TwoPhaseCommitWriter.snapshot_state`), and its
completion notice commits it, in the task, before the task ends; a failure
before that restores the checkpoint and commits it there (M-X2). Without
checkpoints the writer's ``result()`` is a :class:`FinalCommit` that the
driver commits with :func:`commit_final` once the whole job has finished: a
bounded job then writes each subtask's records in one transaction, published
when the job succeeds and never otherwise.

Together with a replayable source this gives exactly-once end-to-end output:
every record is published once, and nothing a reader sees is ever retracted.
"""

from __future__ import annotations

import copy
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..core.batch import Batch
from ..errors import LockgateError
from ..runtime.context import RuntimeContext
from .base import Sink, SinkWriter

TXN = TypeVar("TXN")


class CommitFailedError(LockgateError, RuntimeError):
    """The driver could not commit a sink's final transaction; ``__cause__`` says why."""


class TwoPhaseCommitSink(Sink, Generic[TXN]):
    """Base class of transactional sinks; subclass it and implement the transaction methods.

    Every subtask gets its own unpickled copy of the sink, so a subclass may
    keep per-subtask resources (connections, open files) on ``self``, set up
    in :meth:`open`. The driver also holds a copy and calls :meth:`commit` /
    :meth:`recover_and_commit` on it *without* ``open`` having been called:
    committing must work from the transaction value alone.

    Transactions must be picklable: they are stored in checkpoints and sent
    to the driver.
    """

    @property
    def commits_on_checkpoint(self) -> bool:
        """True: transactions are published when checkpoints complete. A subclass with
        a mode that writes outside transactions overrides this (``FileSink`` does, for
        ``exactly_once=False``); the default also honours the convention of a ``mode``
        attribute: any value but ``"exactly_once"`` (``PostgresSink``'s ``"upsert"``
        and ``"append"``) writes outside transactions."""
        return getattr(self, "mode", "exactly_once") == "exactly_once"

    def open(self, ctx: RuntimeContext) -> None:
        """Called once per subtask, before any transaction is begun or recovered."""

    @abstractmethod
    def begin_transaction(self) -> TXN:
        """Start a new transaction and return its (picklable) handle."""

    @abstractmethod
    def write(self, transaction: TXN, batch: Batch) -> None:
        """Add the records of ``batch`` to ``transaction``."""

    @abstractmethod
    def pre_commit(self, transaction: TXN) -> None:
        """Flush ``transaction`` and make it durable; nothing is written to it afterwards.

        After this returns, :meth:`commit` must succeed from the transaction
        value alone, also in another process after a crash of this one.
        """

    @abstractmethod
    def commit(self, transaction: TXN) -> None:
        """Publish a pre-committed ``transaction`` atomically.

        Must be idempotent: it may be called again for a transaction that is
        already committed (after a restart, M-X2).
        """

    @abstractmethod
    def abort(self, transaction: TXN) -> None:
        """Discard ``transaction`` and whatever was written to it."""

    def recover_and_commit(self, transaction: TXN) -> None:
        """Commit a transaction restored from a checkpoint (or sent to the driver)."""
        self.commit(transaction)

    def recover_and_abort(self, transaction: TXN) -> None:
        """Discard a transaction restored from a checkpoint that was open when it was taken."""
        self.abort(transaction)

    def finish_recovery(self, recovered: list[TXN]) -> None:
        """Called once per subtask after restored transactions were committed or aborted.

        ``recovered`` holds every restored transaction (empty on a fresh
        start); it comes before the first new transaction is begun.
        """

    def pre_commit_at(self, transaction: TXN, checkpoint_id: int | None) -> None:
        """:meth:`pre_commit` for the checkpoint ``checkpoint_id`` whose barrier ends
        ``transaction`` (None: the end of a bounded input). Override it when the id
        matters, e.g. to name the transaction; the default calls :meth:`pre_commit`."""
        self.pre_commit(transaction)

    def abort_lingering(
        self, keep: list[TXN], ctx: RuntimeContext, *, job_ended: bool = False
    ) -> None:
        """Abort the transactions this sink left pre-committed in an external system
        that no checkpoint will commit, except those in ``keep``.

        Called by every subtask after recovery (``keep`` holds the pending transactions
        of *every* old subtask in the restored checkpoint, which their new owners
        commit; transactions of the attempt now running, ``ctx.attempt_number`` of
        ``ctx.run_id``, must be left alone), and once on the driver when the job has
        ended (``job_ended=True``; ``ctx`` names the job, run and sink, with subtask 0
        of 1; ``keep`` was just committed, and nothing runs any more). Sinks whose
        uncommitted transactions are private (temporary files) need not override it;
        the default does nothing.
        """

    def hold_run(self, ctx: RuntimeContext) -> Any:
        """Called on the driver when a run starts (``ctx`` names the job, run and sink):
        mark the run alive for as long as it may commit this sink's transactions, so that
        a later run restoring one of its checkpoints or savepoints never deletes or aborts
        what it may still commit (a sink never touches what a live run may commit).
        Returns an object whose ``release(forget=True)`` the driver calls once the run's
        transactions were settled, or None. Default: None (nothing to mark; PostgresSink
        marks its runs with its writers' sessions)."""
        return None

    def close(self) -> None:
        """Release this subtask's resources; pending transactions must be left intact."""

    def create_writer(self, ctx: RuntimeContext) -> SinkWriter:
        return TwoPhaseCommitWriter(self, ctx)


@dataclass
class FinalCommit(Generic[TXN]):
    """The pre-committed, not yet committed transactions of a subtask at the end of its input.

    A writer's ``result()``; the driver commits them, in order, with
    :func:`commit_final` once the whole job has finished.
    """

    transactions: list[TXN] = field(default_factory=list)


def commit_final(sink: TwoPhaseCommitSink[TXN], final: FinalCommit[TXN]) -> None:
    """Commit ``final``'s transactions in order on the driver (at the end of a bounded job).

    Uses ``recover_and_commit``: the sink copy on the driver was never opened,
    and a transaction may already have been committed by an earlier attempt.
    Raises :class:`CommitFailedError` naming the sink and the transaction if
    one fails; the transactions before it stay committed, those after it are
    left for a retry (commits are idempotent).
    """
    for transaction in final.transactions:
        try:
            sink.recover_and_commit(transaction)
        except Exception as e:
            raise CommitFailedError(
                f"{type(sink).__name__} could not commit its final transaction {transaction!r}: "
                f"{type(e).__name__}: {e}; the output of this transaction is not published. "
                "Committing is idempotent: fix the cause and commit again."
            ) from e


@dataclass
class _Pending(Generic[TXN]):
    """A pre-committed transaction; ``checkpoint_id`` is None until a checkpoint covers it."""

    checkpoint_id: int | None
    transaction: TXN


class TwoPhaseCommitWriter(SinkWriter, Generic[TXN]):
    """Drives a :class:`TwoPhaseCommitSink` for one subtask.

    The runtime calls, in this order: :meth:`initialize_state` (once, before
    any write), :meth:`write` for the records, :meth:`snapshot_state` on
    each checkpoint barrier, :meth:`notify_checkpoint_complete` /
    :meth:`notify_checkpoint_aborted` as checkpoints end, :meth:`finish` at
    the end of a bounded input (then, with checkpoints, :meth:`snapshot_state`
    and :meth:`notify_checkpoint_complete` of the final checkpoint, FLIP-147),
    then :meth:`result` (a :class:`FinalCommit` for the driver) and
    :meth:`close` (also after a failure).

    Exceptions of the sink's methods propagate unchanged (the task fails and
    the job restarts, M-X3); the writer's bookkeeping stays consistent, so
    nothing pending is lost or committed twice out of order.
    """

    #: the sink operator passes the states of every old subtask too (``every_state``)
    wants_every_state = True

    def __init__(self, sink: TwoPhaseCommitSink[TXN], ctx: RuntimeContext) -> None:
        self.sink = sink
        self.ctx = ctx
        self._pending: list[_Pending[TXN]] = []
        #: the open transaction (at most one)
        self._current: list[TXN] = []
        self._initialized = False
        self._finished = False
        sink.open(ctx)

    # ---------------------------------------------------------------- lifecycle

    def initialize_state(self, states: list[Any], *, every_state: list[Any] | None = None) -> None:
        """Recover the snapshots ``states`` (empty on a fresh start), then begin a transaction.

        For each snapshot: recover-and-commit its pending transactions in
        checkpoint order, then recover-and-abort the transaction that was open
        (begun after that checkpoint, M-X2). Then ``abort_lingering`` gets the
        pending transactions of ``every_state`` (the snapshots of every old subtask,
        ``states`` when not given) to keep.
        """
        if self._initialized or self._current or self._pending:
            raise RuntimeError(
                f"{self._where()}: initialize_state must be called once, before any write"
            )
        self._initialized = True
        recovered: list[TXN] = []
        for state in states:
            if state is None:
                continue
            pending, current = self._parse(state)
            for _, transaction in pending:
                self.sink.recover_and_commit(transaction)
                recovered.append(transaction)
            for transaction in current:
                self.sink.recover_and_abort(transaction)
                recovered.append(transaction)
        self.sink.finish_recovery(recovered)
        keep = [
            txn
            for state in (states if every_state is None else every_state)
            if state is not None
            for _, txn in self._parse(state)[0]
        ]
        self.sink.abort_lingering(keep, self.ctx)
        self._begin()

    def write(self, batch: Batch) -> None:
        """Write ``batch`` into the current transaction (begun now if there is none)."""
        if self._finished:
            raise RuntimeError(f"{self._where()}: write after the end of input")
        if not self._current:
            self._begin()
        self.sink.write(self._current[0], batch)

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """On the barrier of ``checkpoint_id``: pre-commit the current transaction and begin
        the next (M-X2).

        Returns a picklable copy ``{"pending": [(checkpoint_id, txn), ...],
        "current": txn}`` ("current" absent after the end of input), which
        later calls never change.
        """
        self._pre_commit_current(checkpoint_id)
        for p in self._pending:
            if p.checkpoint_id is None:  # pre-committed at the end of input
                p.checkpoint_id = checkpoint_id
        if not self._finished:
            self._begin()
        snapshot: dict[str, Any] = {
            "pending": [(p.checkpoint_id, p.transaction) for p in self._pending],
        }
        if self._current:
            snapshot["current"] = self._current[0]
        return copy.deepcopy(snapshot)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commit, in order, every pending transaction of a checkpoint up to ``checkpoint_id``.

        A commit that raises propagates; that transaction and the later ones
        stay pending for the next notice or the restarted job (M-X3).
        """
        while self._pending:
            head = self._pending[0]
            if head.checkpoint_id is None or head.checkpoint_id > checkpoint_id:
                return
            self.sink.commit(head.transaction)
            self._pending.pop(0)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Nothing to do: its pending transaction is committed with a later checkpoint."""

    def finish(self) -> None:
        """End of a bounded input: pre-commit the current transaction, but do not commit it.

        Another subtask may still fail and the job replay. With checkpoints the
        task's final checkpoint records it and its completion notice commits it
        (FLIP-147); without, the driver commits it (see :meth:`result`) once the
        whole job has finished.
        """
        if self._finished:
            return
        self._pre_commit_current(None)
        self._finished = True

    def result(self) -> FinalCommit[TXN]:
        """Every transaction pre-committed and not committed yet, in order, for the driver
        (empty after a final checkpoint committed them, FLIP-147)."""
        return FinalCommit(copy.deepcopy([p.transaction for p in self._pending]))

    def close(self) -> None:
        """Release resources; pending and open transactions are left as they are.

        Pending ones may be part of a checkpoint (committed on restore), and the
        open one is aborted by ``recover_and_abort`` on restore.
        """
        self.sink.close()

    # ---------------------------------------------------------------- helpers

    def _begin(self) -> None:
        self._current = [self.sink.begin_transaction()]

    def _pre_commit_current(self, checkpoint_id: int | None) -> None:
        if self._current:
            transaction = self._current[0]
            self.sink.pre_commit_at(transaction, checkpoint_id)
            # pending only once pre_commit succeeded; a failure leaves it open (aborted on restore)
            self._pending.append(_Pending(checkpoint_id, transaction))
            self._current = []

    def _where(self) -> str:
        return (
            f"{type(self.sink).__name__} writer of '{self.ctx.operator_name}' "
            f"(subtask {self.ctx.subtask_index + 1}/{self.ctx.parallelism})"
        )

    def _parse(self, state: Any) -> tuple[list[tuple[int, TXN]], list[TXN]]:
        try:
            pending = [(int(cp), txn) for cp, txn in state["pending"]]
            current = [state["current"]] if "current" in state else []
        except (TypeError, KeyError, ValueError) as e:
            raise ValueError(
                f"{self._where()}: cannot restore from {state!r}; expected a snapshot_state "
                "value {'pending': [(checkpoint_id, transaction), ...], 'current': transaction}"
            ) from e
        pending.sort(key=lambda p: p[0])
        return pending, current


def pending_transactions(state: Any) -> list[Any]:
    """The pending transactions of a :meth:`TwoPhaseCommitWriter.snapshot_state` value."""
    if not isinstance(state, dict):
        return []
    return [txn for _, txn in state.get("pending", [])]

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

A sink whose :attr:`TwoPhaseCommitSink.pre_commits_in_background` is True (the
``KafkaSink``) is pre-committed in the checkpoint's asynchronous part instead: on the
barrier the writer only moves the transaction to the pending ones and begins the next,
so the task goes on writing while the old transaction is flushed; the snapshot it
returns is a view whose ``materialize`` (on the asynchronous thread) pre-commits every
pending transaction not pre-committed yet, in order, and only then gives the state. A
checkpoint therefore never records a transaction that was not pre-committed, as before;
one whose asynchronous part was cancelled or failed leaves its transaction to the next
checkpoint's, and a commit or the end of input pre-commits whatever is left first.

Together with a replayable source this gives exactly-once end-to-end output:
every record is published once, and nothing a reader sees is ever retracted.
"""

from __future__ import annotations

import copy
import threading
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

    #: True: :meth:`pre_commit_at` runs on the checkpoint's asynchronous thread (see the
    #: module docstring), concurrently with :meth:`begin_transaction`, :meth:`write` and
    #: :meth:`commit` of other transactions on the task thread; a sink sets it only when
    #: its pre-commit shares nothing unguarded with those. Never two pre-commits at once.
    pre_commits_in_background: bool = False

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
    """A transaction ended by a barrier (or the end of input); ``checkpoint_id`` is None
    until a checkpoint covers it. ``pre_committed`` is False only while a background
    pre-commit (``pre_commits_in_background``) has not run yet."""

    checkpoint_id: int | None
    transaction: TXN
    pre_committed: bool = True


class _PreCommitView(Generic[TXN]):
    """A background-pre-committing writer's snapshot: :meth:`materialize`, on the
    checkpoint's asynchronous thread, pre-commits the pending transactions the barrier
    saw (those not pre-committed yet, in order), then returns the snapshot value."""

    def __init__(
        self, writer: TwoPhaseCommitWriter[TXN], pending: list[_Pending[TXN]], current: Any
    ) -> None:
        self._writer = writer
        self._pending = pending
        self._current = current

    def materialize(self) -> dict[str, Any]:
        self._writer._pre_commit_pending(self._pending)
        snapshot: dict[str, Any] = {
            "pending": [(p.checkpoint_id, p.transaction) for p in self._pending]
        }
        if self._current is not None:
            snapshot["current"] = self._current
        return copy.deepcopy(snapshot)

    def release(self) -> None:
        """Nothing to give back: a transaction left unpre-committed is the next one's."""


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
        self._background = bool(getattr(sink, "pre_commits_in_background", False))
        #: held while pending transactions are pre-committed (the asynchronous thread's
        #: view, or the task thread catching up on what a cancelled one left)
        self._pre_commit_lock = threading.Lock()
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
        later calls never change. A sink that ``pre_commits_in_background`` is
        pre-committed by the returned view's ``materialize`` instead (the
        checkpoint's asynchronous part), which returns that value.
        """
        if self._background:
            return self._snapshot_for_background(checkpoint_id)
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
            if not head.pre_committed:  # a completed checkpoint pre-committed it: defensive
                self._pre_commit_pending([head])
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
        self._pre_commit_pending(list(self._pending))
        self._pre_commit_current(None)
        self._finished = True

    def result(self) -> FinalCommit[TXN]:
        """Every transaction pre-committed and not committed yet, in order, for the driver
        (empty after a final checkpoint committed them, FLIP-147)."""
        self._pre_commit_pending(list(self._pending))
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

    def _snapshot_for_background(self, checkpoint_id: int) -> _PreCommitView[TXN]:
        """The barrier's part for a sink that pre-commits in the background: the current
        transaction joins the pending ones (pre-committed by the view), the next begins."""
        if self._current:
            self._pending.append(_Pending(checkpoint_id, self._current[0], pre_committed=False))
            self._current = []
        for p in self._pending:
            if p.checkpoint_id is None:  # pre-committed at the end of input
                p.checkpoint_id = checkpoint_id
        if not self._finished:
            self._begin()
        current = copy.deepcopy(self._current[0]) if self._current else None
        return _PreCommitView(self, list(self._pending), current)

    def _pre_commit_pending(self, entries: list[_Pending[TXN]]) -> None:
        """Pre-commit, in order, those of ``entries`` not pre-committed yet (any thread;
        one at a time). A failure leaves that one and the later ones for the next try."""
        with self._pre_commit_lock:
            for p in entries:
                if not p.pre_committed:
                    self.sink.pre_commit_at(p.transaction, p.checkpoint_id)
                    p.pre_committed = True

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

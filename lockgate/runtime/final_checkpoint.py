"""The task side of the final checkpoint (Flink's FLIP-147).

A task that reaches the end of its data (a bounded source read everything, or
every input channel delivered its end of data) finishes its operators and sends
``END_OF_DATA`` downstream, but does not end yet: with checkpoints enabled it
waits until a checkpoint it takes *after* that point completes and its
completion notice has been handled in the task. That notice is where
two-phase-commit sinks commit the transaction they pre-committed at the end of
their input (M-X2), in the task, instead of the driver doing it after the job.
Only then does the task send its end of partition and end, so the coordinator
records it as finished in later checkpoints and a restore never runs it again.

:class:`FinalCheckpoint` is that wait as a small state machine (no threads, time
from the injected clock):

* :meth:`start` at the end of data, with the newest checkpoint id the task had
  snapshotted until then: any completed checkpoint with a higher id was taken
  after the end of data (the coordinator waits for every running task's
  acknowledgement, so a completed checkpoint holds this task's snapshot);
* :meth:`completed` with every completion notice the task handled;
* :attr:`done` once such a checkpoint's notice was handled;
* :meth:`check_deadline` raises :class:`~lockgate.errors.CheckpointFailedError`
  when none came within ``limit_ms`` (:func:`wait_limit_ms`): the wait is
  bounded, a job whose checkpoints stopped fails instead of hanging.
"""

from __future__ import annotations

import logging
import pickle
from typing import Any

from ..checkpoint.config import CheckpointConfig
from ..core.clock import Clock
from ..errors import CheckpointFailedError

log = logging.getLogger(__name__)


def wait_limit_ms(config: CheckpointConfig) -> float:
    """How long a task waits for its final checkpoint: long enough for the coordinator
    to fail ``tolerable_failures`` checkpoints in a row (it fails the job itself after
    that, M-C6) and complete one more, each taking at most an interval, a minimum pause
    and the checkpoint timeout."""
    per_attempt = config.interval_ms + config.min_pause_ms + config.timeout_ms
    return float((config.tolerable_failures + 2) * per_attempt)


class FinalCheckpoint:
    """Whether a task's final checkpoint completed (see the module docstring)."""

    def __init__(self, clock: Clock, limit_ms: float, where: str) -> None:
        if limit_ms <= 0:
            raise ValueError(f"the final checkpoint wait limit must be positive, got {limit_ms}")
        self._clock = clock
        self._limit_ms = limit_ms
        self._where = where
        #: checkpoints with a higher id were taken after the end of data (None: not yet)
        self.after: int | None = None
        #: the final checkpoint: the first such checkpoint whose notice was handled
        self.final_id: int | None = None
        self._deadline_ms: float | None = None

    @property
    def started(self) -> bool:
        return self.after is not None

    @property
    def done(self) -> bool:
        return self.final_id is not None

    @property
    def deadline_ms(self) -> float | None:
        """Monotonic time (ms) by which the final checkpoint must have completed."""
        return self._deadline_ms

    def start(self, last_snapshot_id: int) -> None:
        """The end of data: ``last_snapshot_id`` is the newest checkpoint the task
        snapshotted so far (0: none)."""
        if self.after is None:
            self.after = last_snapshot_id
            self._deadline_ms = self._clock.monotonic_ms() + self._limit_ms

    def completed(self, checkpoint_id: int) -> None:
        """The task handled the completion notice of ``checkpoint_id`` (its operators,
        sinks included, saw ``notify_checkpoint_complete``)."""
        if self.after is not None and self.final_id is None and checkpoint_id > self.after:
            self.final_id = checkpoint_id

    def check_deadline(self) -> None:
        """Raise ``CheckpointFailedError`` when the wait exceeded its limit."""
        if self._deadline_ms is None or self.done:
            return
        if self._clock.monotonic_ms() >= self._deadline_ms:
            raise CheckpointFailedError(
                f"{self._where} reached the end of its data {self._limit_ms:.0f} ms ago and "
                f"no checkpoint it took since then completed (its final checkpoint, after "
                f"checkpoint {self.after}): the task cannot end without one, because its "
                "two-phase-commit sinks commit their last transaction when it completes. "
                "Look for failing or expiring checkpoints in the log; the limit is "
                "(tolerable_failures + 2) x (interval + min_pause + timeout)"
            )


def finished_task_results(task: Any, *, pickled: bool = False) -> dict[str, Any] | None:
    """What a task that finished reports to the driver with its end, with checkpoints
    on: its sink results (``chain.results()``), kept by the driver so that an attempt
    restoring the task as finished returns them (it runs nothing); None for a task that
    was itself restored as finished, or without checkpoints. ``pickled``: the results
    travel pickled (another process): results that cannot be pickled are left out, with
    a warning."""
    if getattr(task, "checkpointer", None) is None or getattr(task, "restored_finished", False):
        return None
    results: dict[str, Any] = task.chain.results()
    if not pickled:
        return results
    try:
        pickle.dumps(results, protocol=5)
    except Exception as e:  # noqa: BLE001 - the job goes on; only a later restore lacks them
        log.warning(
            "%s (%d): its sink results cannot be pickled (%s); a restore that "
            "deploys it as finished returns none for it",
            task.name,
            task.subtask_index,
            e,
        )
        return None
    return results

"""The link between a running job and its client (``env.execute_async``).

The executor publishes what a client may look at (the checkpoint coordinator
of the running attempt) and installs how to cancel it; the client reads and
cancels from another thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .restart_causes import RestartCauses


class JobHandle:
    def __init__(self) -> None:
        self.cancel_requested = threading.Event()
        #: set once every subtask of the running attempt is deployed
        self.running = threading.Event()
        self._lock = threading.Lock()
        self._canceller: Callable[[], None] | None = None
        self._coordinator: Any = None
        #: the running attempt's watermark diagnostic (a callable returning
        #: ``OperatorWatermark`` entries), set by the executor
        self.watermarks: Callable[[], list[Any]] | None = None
        #: the running attempt's subtask metrics (a callable returning
        #: ``lockgate.runtime.task_metrics.task_sample`` dicts), set by the executor
        self.metrics: Callable[[], list[dict[str, Any]]] | None = None
        #: the job's REST address (``JobClient.rest_url``), named in the Spark UI
        self.rest_url: str | None = None
        #: the savepoint the job is being stopped with (``stop_with_savepoint``): the
        #: newest snapshot when it ends, whose transactions the driver commits
        self.final_savepoint: str | None = None
        #: (vertex id, subtask) -> the sink results of that task, reported when it
        #: finished (checkpointed jobs): a later attempt that restores it as finished
        #: does not run it again, and returns these (FLIP-147)
        self.finished_results: dict[tuple[int, int], dict[str, Any]] = {}
        #: every failure of the run so far, per operator and error, with how often it
        #: repeated (the failover loop records; ``JobClient.restart_causes()`` reads)
        self.restart_causes = RestartCauses()

    @property
    def cancelled(self) -> bool:
        """Whether the job ends because it was cancelled: a cancel that is not the end of
        a stop with a savepoint. A job stopped with a savepoint ends ``FINISHED``, so
        its retained checkpoints are kept as after any normal end (M-S3): only a cancel
        applies ``ExternalizedRetention.DELETE_ON_CANCELLATION``."""
        return self.cancel_requested.is_set() and self.final_savepoint is None

    @property
    def coordinator(self) -> Any:
        """The checkpoint coordinator of the current (or last) attempt, or None."""
        with self._lock:
            return self._coordinator

    def attach(self, coordinator: Any, canceller: Callable[[], None]) -> None:
        """Called by the executor when an attempt starts; cancels at once if a cancel
        was requested before."""
        with self._lock:
            self._coordinator = coordinator
            self._canceller = canceller
        if self.cancel_requested.is_set():
            canceller()

    def detach(self) -> None:
        with self._lock:
            self._canceller = None
        self.running.clear()

    def cancel(self) -> None:
        self.cancel_requested.set()
        with self._lock:
            canceller = self._canceller
        if canceller is not None:
            canceller()

"""JobClient: a job started with ``env.execute_async``."""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..checkpoint.types import CheckpointStats
from ..errors import ConfigurationError
from ..executor.job_handle import JobHandle
from ..executor.result import JobExecutionResult


class JobClient:
    """Controls and observes a job running in the background.

    ``wait()`` returns the job's result (or raises its ``JobFailedError``);
    ``cancel()`` stops it (its result then has status ``CANCELED``);
    ``checkpoints()`` lists its checkpoints with their metrics.
    """

    def __init__(self, job_name: str, run: Callable[[JobHandle], JobExecutionResult]) -> None:
        self.job_name = job_name
        self._handle = JobHandle()
        self._done = threading.Event()
        self._result: JobExecutionResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(run,),
                                        name=f"lockgate job client {job_name}", daemon=True)
        self._thread.start()

    def _run(self, run: Callable[[JobHandle], JobExecutionResult]) -> None:
        try:
            self._result = run(self._handle)
        except BaseException as e:  # noqa: BLE001 - re-raised by wait()
            self._error = e
        finally:
            self._done.set()

    def __repr__(self) -> str:
        state = "done" if self._done.is_set() else "running"
        return f"JobClient({self.job_name!r}, {state})"

    @property
    def running(self) -> bool:
        """Whether every subtask is deployed and the job has not ended."""
        return self._handle.running.is_set() and not self._done.is_set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> JobExecutionResult:
        """Block until the job ends; return its result or raise its error.
        Raises ``TimeoutError`` when ``timeout`` seconds pass first."""
        if timeout is not None and (isinstance(timeout, bool) or timeout < 0):
            raise ConfigurationError(f"wait timeout must be seconds >= 0, got {timeout!r}")
        if not self._done.wait(timeout):
            raise TimeoutError(f"job '{self.job_name}' still running after {timeout}s")
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        """Stop the job (idempotent; returns at once, ``wait()`` for the end)."""
        self._handle.cancel()

    def checkpoints(self) -> list[CheckpointStats]:
        """Every checkpoint of the job so far (ascending id): completed, failed and in
        progress, with their metrics (M-B10)."""
        coordinator: Any = self._handle.coordinator
        if coordinator is None:
            return []
        stats: list[CheckpointStats] = coordinator.stats()
        return stats

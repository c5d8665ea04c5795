"""The RuntimeContext a user function receives in ``open(ctx)``."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError
from ..state.descriptors import StateDescriptor
from ..state.keyed import HeapKeyedStateBackend
from ..time.clock import Clock, SystemClock


class RuntimeContext:
    """Where a function runs: its task, subtask, parallelism and attempt (0 for the first,
    +1 for each restart); and its state.

    ``get_state`` is available to functions of keyed operators
    (``key_by(...).process(...)``); the state it returns is scoped to the key
    of the record being processed.
    """

    def __init__(
        self,
        *,
        task_name: str,
        operator_name: str,
        operator_uid: str,
        subtask_index: int,
        parallelism: int,
        max_parallelism: int,
        attempt_number: int = 0,
        job_name: str = "",
        clock: Clock | None = None,
        keyed_backend: HeapKeyedStateBackend | None = None,
        run_id: str = "",
    ) -> None:
        self.task_name = task_name
        self.operator_name = operator_name
        self.operator_uid = operator_uid
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.attempt_number = attempt_number
        self.job_name = job_name
        #: unique per run of the job, the same in every attempt of the run
        self.run_id = run_id
        self.clock: Clock = clock or SystemClock()
        self._keyed_backend = keyed_backend

    def get_state(self, descriptor: StateDescriptor[Any]) -> Any:
        """The keyed state named by ``descriptor`` (e.g. a ``ValueState``)."""
        if self._keyed_backend is None:
            raise ConfigurationError(
                f"operator '{self.operator_name}' asked for keyed state {descriptor!r}, but it "
                "is not keyed: apply it after key_by(...), e.g. stream.key_by('k').process(fn)"
            )
        return self._keyed_backend.get_state(descriptor)

    def __repr__(self) -> str:
        return (
            f"RuntimeContext(task={self.task_name!r}, subtask={self.subtask_index}/"
            f"{self.parallelism}, attempt={self.attempt_number})"
        )

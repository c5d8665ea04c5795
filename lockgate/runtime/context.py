"""The RuntimeContext a user function receives in ``open(ctx)``."""

from __future__ import annotations

from typing import Any

from ..core.clock import Clock, SystemClock
from ..errors import ConfigurationError
from ..state.backends import HashMapStateBackend, StateBackend
from ..state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
)
from ..state.operator_state import OperatorListState, OperatorStateStore


class RuntimeContext:
    """Where a function runs: its task, subtask, parallelism and attempt (0 for the first,
    +1 for each restart); and its state.

    Keyed state (``get_state`` and the typed ``get_*_state`` methods) is available to
    functions of keyed operators (``key_by(...).process(...)``); the state it returns
    is scoped to the key of the record being processed. Operator state
    (``get_operator_list_state``, ``get_union_list_state``) is available to every
    function operator (map, flat_map, process, keyed process, ...) and is kept per
    subtask (M-T4).
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
        keyed_backend: Any = None,
        run_id: str = "",
        state_backend: StateBackend | None = None,
        processing_time_service: Any = None,
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
        #: the job's state backend (``env.set_state_backend``)
        self.state_backend: StateBackend = state_backend or HashMapStateBackend()
        self._keyed_backend = keyed_backend
        #: processing-time callbacks run by the subtask's thread (a ProcessingTimeService)
        self.processing_time_service = processing_time_service
        #: the subtask's mailbox (``put(action)`` runs ``action`` in the task thread) and
        #: ``run_mail_until(done)`` (task thread: run mails until ``done()``); set by the
        #: task for operators that wait for asynchronous work
        self.mailbox: Any = None
        self.run_mail_until: Any = None
        self._operator_state: OperatorStateStore | None = None

    # -- keyed state --------------------------------------------------------------------
    def get_state(self, descriptor: StateDescriptor[Any]) -> Any:
        """The keyed state ``descriptor`` names (a ``ValueState`` for a
        ``ValueStateDescriptor``, a ``ListState`` for a ``ListStateDescriptor``, ...)."""
        if self._keyed_backend is None:
            raise ConfigurationError(
                f"operator '{self.operator_name}' asked for keyed state {descriptor!r}, but it "
                "is not keyed: apply it after key_by(...), e.g. stream.key_by('k').process(fn); "
                "non-keyed functions can keep operator state "
                "(ctx.get_operator_list_state(lg.ListStateDescriptor('name')))"
            )
        return self._keyed_backend.get_state(descriptor)

    def _typed(self, descriptor: Any, kind: type[StateDescriptor[Any]], method: str) -> Any:
        if not isinstance(descriptor, kind):
            raise ConfigurationError(
                f"operator '{self.operator_name}': {method} needs a {kind.__name__}, got "
                f"{descriptor!r}"
            )
        return self.get_state(descriptor)

    def get_list_state(self, descriptor: ListStateDescriptor[Any]) -> Any:
        """Keyed ``ListState`` (PyFlink's ``get_list_state``)."""
        return self._typed(descriptor, ListStateDescriptor, "get_list_state")

    def get_map_state(self, descriptor: MapStateDescriptor[Any]) -> Any:
        """Keyed ``MapState``."""
        return self._typed(descriptor, MapStateDescriptor, "get_map_state")

    def get_reducing_state(self, descriptor: ReducingStateDescriptor[Any]) -> Any:
        """Keyed ``ReducingState``."""
        return self._typed(descriptor, ReducingStateDescriptor, "get_reducing_state")

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor[Any]) -> Any:
        """Keyed ``AggregatingState``."""
        return self._typed(descriptor, AggregatingStateDescriptor, "get_aggregating_state")

    # -- operator state -----------------------------------------------------------------
    @property
    def operator_state(self) -> OperatorStateStore:
        """The operator state store of this subtask (Flink's ``getOperatorStateStore``)."""
        if self._operator_state is None:
            raise ConfigurationError(
                f"operator '{self.operator_name}' has no operator state: operator state is "
                "available to the functions of map, flat_map, process and keyed process "
                "operators, in open() or later"
            )
        return self._operator_state

    def get_operator_list_state(
        self, descriptor: ListStateDescriptor[Any]
    ) -> OperatorListState[Any]:
        """List state of this subtask; on restore at another parallelism the elements of
        all old subtasks are split evenly among the new ones (M-T4)."""
        return self.operator_state.get_list_state(descriptor)

    def get_union_list_state(self, descriptor: ListStateDescriptor[Any]) -> OperatorListState[Any]:
        """List state of this subtask; on restore every subtask gets the elements of all
        old subtasks (M-T4)."""
        return self.operator_state.get_union_list_state(descriptor)

    def __repr__(self) -> str:
        return (
            f"RuntimeContext(task={self.task_name!r}, subtask={self.subtask_index}/"
            f"{self.parallelism}, attempt={self.attempt_number})"
        )

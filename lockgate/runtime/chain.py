"""The operator chain of one subtask: operators wired by direct calls, ending in record writers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cloudpickle

from ..core.batch import Batch
from ..core.clock import Clock
from ..core.elements import StreamElement, StreamStatus, Watermark
from ..core.latency.marker import LatencyMarker
from ..core.partitioners import attribute_key_errors
from ..graph.execution_plan import VertexPlan
from ..graph.operator_factory import OperatorFactory
from .context import RuntimeContext
from .latency.forwarding import ForwardOnce
from .operators.base import Cancellation, Output, StreamOperator, refusing_changes
from .operators.io import SinkOperator, SourceOperator
from .processing_time import ProcessingTimeService
from .record_writer import RecordWriter

Target = Callable[[Batch], None]


class _FanOut(Output):
    """An operator's output: the chained operators and record writers behind it."""

    def __init__(self) -> None:
        self.main: list[Target] = []
        self.side: dict[str, list[Target]] = {}
        self.element_targets: list[Callable[[StreamElement], None]] = []

    def emit(self, batch: Batch) -> None:
        for target in self.main:
            target(batch)

    def emit_side(self, tag: str, batch: Batch) -> None:
        for target in self.side.get(tag, ()):
            target(batch)

    def emit_element(self, element: StreamElement) -> None:
        for target in self.element_targets:
            target(element)


class _AnnouncedStatus:
    """What a task announces downstream through one record writer (M-W2).

    A task whose announced status is IDLE does not forward watermarks generated inside it
    (a periodic generator of ``assign_timestamps_and_watermarks`` or a timer-driven
    operator): downstream valves would otherwise advance on an input they consider
    idle. The status itself goes out only when it changes, so a chain that sees IDLE or
    ACTIVE from several operators announces each change once. Batches are not affected:
    an operator that emits data while idle announces ACTIVE first (M-W2), which this
    output then forwards.
    """

    __slots__ = ("_deliver", "idle")

    def __init__(self, deliver: Callable[[StreamElement], None]) -> None:
        self._deliver = deliver
        self.idle = False

    def __call__(self, element: StreamElement) -> None:
        if isinstance(element, Watermark):
            if self.idle:
                return
        elif isinstance(element, StreamStatus):
            idle = element is StreamStatus.IDLE
            if idle == self.idle:
                return
            self.idle = idle
        self._deliver(element)


def _element_target(op: StreamOperator) -> Callable[[StreamElement], None]:
    """Delivers watermarks, stream statuses and latency markers to a chained operator
    (its input 0)."""

    def deliver(element: StreamElement) -> None:
        if isinstance(element, Watermark):
            op.process_watermark(element, 0)
        elif isinstance(element, StreamStatus):
            op.process_status(element, 0)
        elif isinstance(element, LatencyMarker):
            op.process_latency_marker(element)

    return deliver


class OperatorChain:
    """Instantiates a vertex's operators for one subtask and runs their lifecycle."""

    def __init__(
        self,
        vertex: VertexPlan,
        subtask_index: int,
        writers: dict[int, RecordWriter],
        *,
        job_name: str = "",
        attempt_number: int = 0,
        clock: Clock,
        restore: Any = None,
        run_id: str = "",
        state_backend: Any = None,
    ) -> None:
        self.vertex = vertex
        #: the checkpoint this attempt restores (a ``RestoreSpec``), or None
        self.restore = restore
        self.subtask_index = subtask_index
        self.writers = writers
        self.operators: list[StreamOperator] = []
        #: set when the task is cancelled; function operators read it between records
        self.cancellation = Cancellation(f"{vertex.name} ({subtask_index})")
        #: processing-time callbacks of this subtask's operators (run by the task)
        self.processing_time = ProcessingTimeService(clock)
        by_id: dict[int, StreamOperator] = {}
        for op_plan in vertex.operators:
            factory: OperatorFactory[StreamOperator] = cloudpickle.loads(op_plan.payload)
            op = factory.create()
            if not op.accepts_changes:
                op.process_batch = refusing_changes(op)  # type: ignore[method-assign]
            by_id[op_plan.id] = op
        for op_plan in vertex.operators:
            op = by_id[op_plan.id]
            out = _FanOut()
            seen: set[int] = set()
            for target_id, tag in op_plan.chained_outputs:
                target_op = by_id[target_id]
                fn: Target = target_op.process_batch
                (out.side.setdefault(tag, []) if tag else out.main).append(fn)
                if id(target_op) not in seen:  # watermarks and statuses reach every output
                    seen.add(id(target_op))
                    out.element_targets.append(_element_target(target_op))
            for edge_id, tag in op_plan.edge_outputs:
                writer = writers[edge_id]
                (out.side.setdefault(tag, []) if tag else out.main).append(
                    attribute_key_errors(writer.write, writer.partitioner, op)
                )
                if id(writer) not in seen:
                    seen.add(id(writer))
                    out.element_targets.append(
                        _AnnouncedStatus(ForwardOnce(writer.broadcast_event))
                    )
            ctx = RuntimeContext(
                task_name=vertex.name,
                operator_name=op_plan.name,
                operator_uid=op_plan.uid,
                subtask_index=subtask_index,
                parallelism=op_plan.parallelism,
                max_parallelism=op_plan.max_parallelism,
                attempt_number=attempt_number,
                job_name=job_name,
                clock=clock,
                run_id=run_id,
                state_backend=state_backend,
                processing_time_service=self.processing_time,
            )
            op.setup(op_plan.name, op_plan.uid, ctx, out)
            op.cancellation = self.cancellation
            self.operators.append(op)
        self.head = self.operators[0]
        self._opened: list[StreamOperator] = []

    @property
    def source(self) -> SourceOperator | None:
        return self.head if isinstance(self.head, SourceOperator) else None

    def open(self) -> None:
        """Open downstream operators first, so the head never emits into an unopened one.
        Each operator first gets the state it restores (``initialize_state``, M-R1)."""
        restore = self.restore
        for op in reversed(self.operators):
            self._opened.append(op)  # close() runs even if open() fails
            op.initialize_state(
                restore.operator(op.uid, self.subtask_index, op.ctx.parallelism)
                if restore is not None
                else None
            )
            op.open()

    def finish(self) -> None:
        """End of input, head first: each operator's last output reaches the next before it
        finishes."""
        for op in self.operators:
            op.finish()

    def close(self) -> BaseException | None:
        """Close every opened operator; return the first error instead of raising it."""
        first: BaseException | None = None
        for op in self._opened:
            try:
                op.close()
            except BaseException as e:  # noqa: BLE001 - collect, keep closing the rest
                first = first or e
        self._opened = []
        return first

    def counters(self) -> dict[str, Any]:
        return {op.uid: op.counters for op in self.operators}

    def results(self) -> dict[str, Any]:
        return {op.uid: op.result() for op in self.operators if isinstance(op, SinkOperator)}

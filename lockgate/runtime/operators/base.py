"""The operator contract and the outputs that connect chained operators.

Lifecycle, in order: ``setup`` → ``open`` → ``process_batch``* → ``finish``
(only at end of input) → ``close`` (always, also after a failure).
``process_batch`` is never called after ``finish``; nothing is called after
``close``. Exceptions from user code are raised as
:class:`~lockgate.errors.UserFunctionError` naming the operator and subtask.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from ...errors import UserFunctionError
from ..batch import Batch, num_rows
from ..context import RuntimeContext
from ..elements import StreamElement
from ..metrics import OperatorCounters


class Output:
    """Where an operator's results go: its main output and its side outputs."""

    def emit(self, batch: Batch) -> None:
        raise NotImplementedError

    def emit_side(self, tag: str, batch: Batch) -> None:
        raise NotImplementedError

    def emit_element(self, element: StreamElement) -> None:
        """Forward a control element (watermark, status)."""
        raise NotImplementedError


class StreamOperator:
    """Base of every operator. Subclasses implement ``process_batch``; the rest defaults."""

    def __init__(self) -> None:
        self.name = "operator"
        self.uid = ""
        self.ctx: RuntimeContext
        self.output: Output
        self.counters = OperatorCounters()

    def setup(self, name: str, uid: str, ctx: RuntimeContext, output: Output) -> None:
        self.name = name
        self.uid = uid
        self.ctx = ctx
        self.output = output

    def initialize_state(self, restored: Any) -> None:
        """Called once before ``open``: ``restored`` is the operator's recorded state to
        take over (a :class:`~lockgate.recovery.restore.OperatorRestore`), or None on a
        fresh start or when the restored checkpoint holds nothing for this operator
        (M-R1). Stateless operators ignore it."""

    def open(self) -> None:
        """Called once before the first batch."""

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """End of input: emit whatever is still held. Not called on failure."""

    # checkpoints (M-T1, M-T3, M-T4) ------------------------------------------------
    def prepare_snapshot_pre_barrier(self, checkpoint_id: int) -> None:
        """Emit what must precede the barrier of ``checkpoint_id`` (called before the
        barrier is forwarded)."""

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """The synchronous part of a snapshot: None (no state), a picklable value that
        later processing cannot change, or an object with ``materialize()`` (run in the
        background, returns the picklable state) and ``release()``."""
        return None

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed (every task acknowledged it)."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` was aborted."""

    def close(self) -> None:
        """Release resources. Always called, after ``finish`` or after a failure."""

    # helpers ---------------------------------------------------------------
    def user_error(self, error: BaseException) -> UserFunctionError:
        return UserFunctionError(self.name, self.ctx.subtask_index, self.ctx.parallelism, error)

    def emit(self, batch: Batch) -> None:
        n = num_rows(batch)
        if n:
            self.counters.records_out += n
            self.output.emit(batch)


@dataclass
class OperatorFactory:
    """Picklable recipe for an operator: its class, arguments and the user functions in it
    (named, so that validation can point at them)."""

    operator_class: type[StreamOperator]
    kwargs: dict[str, Any] = field(default_factory=dict)
    user_functions: dict[str, Any] = field(default_factory=dict)

    def create(self) -> StreamOperator:
        return self.operator_class(**self.kwargs)


_PLAIN_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, partial)


def bind_function(obj: Any, method: str) -> Callable[..., Any]:
    """The callable to run: ``obj.<method>`` for function objects, else ``obj`` itself."""
    if not isinstance(obj, _PLAIN_CALLABLES):
        bound = getattr(obj, method, None)
        if callable(bound):
            return bound
    if callable(obj):
        return obj
    raise TypeError(f"{obj!r} is neither callable nor has a {method}() method")


def open_function(obj: Any, ctx: RuntimeContext) -> None:
    """Call ``obj.open(ctx)`` for function objects that define it."""
    if isinstance(obj, _PLAIN_CALLABLES):
        return
    opener = getattr(obj, "open", None)
    if callable(opener):
        opener(ctx)


def close_function(obj: Any) -> None:
    if isinstance(obj, _PLAIN_CALLABLES):
        return
    closer = getattr(obj, "close", None)
    if callable(closer):
        closer()

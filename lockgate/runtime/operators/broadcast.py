"""The two-input operators of the broadcast state pattern and their contexts.

``stream.connect(rules.broadcast(descriptor)).process(fn)`` runs a
:class:`BroadcastProcessOperator` (``key_by(...).connect(...)``: a
:class:`KeyedBroadcastProcessOperator`). Input 0 is the connected stream (forward /
rebalance, or key-group partitioned for the keyed variant), input 1 the broadcast
stream (every element reaches every subtask).

* Input 0: ``fn.process_element(value, ctx)`` with a :class:`ReadOnlyContext`:
  ``ctx.get_broadcast_state(descriptor)`` is read-only, ``ctx.current_key`` is the
  record's key (keyed variant; keyed state is scoped to it), ``ctx.output(tag, v)``
  emits to a side output.
* Input 1: ``fn.process_broadcast_element(value, ctx)`` with a
  :class:`BroadcastContext`: the broadcast state is writable; in the keyed variant
  (:class:`KeyedBroadcastContext`) ``ctx.apply_to_keyed_state(descriptor, fn)`` calls
  ``fn(key, state)`` for every key of this subtask that has a value of that state.
  Keyed state is not scoped to any key there otherwise: using it outside
  ``apply_to_keyed_state`` raises a ConfigurationError.

Both methods yield (or return an iterable of) output records. The two inputs are not
ordered against each other (as in Flink): a function that needs a broadcast element
before the records it applies to must buffer those records in state.

State (M-T4): operator state as every function operator, keyed state as the keyed
process operator, and the broadcast state: deep-copied in the synchronous part of a
snapshot (M-T3) and written as the payload's ``broadcast`` part. On restore each
subtask takes the broadcast part of the old subtask with its own index at the same
parallelism, otherwise of old subtask ``i % old parallelism`` (every old subtask held
the same broadcast state), so every new subtask, also after rescaling, starts with the
full broadcast state (M-R1, M-S1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core.batch import Batch, RowBatch, to_rows
from ...core.partitioners import KeySelector
from ...core.user_functions import bind_function
from ...errors import ConfigurationError, UnsupportedKeyError
from ...state.broadcast import (
    BroadcastState,
    BroadcastStateStore,
    ReadOnlyBroadcastState,
)
from ...state.descriptors import MapStateDescriptor, StateDescriptor
from ...state.snapshot import OperatorStateSnapshot, payload_part
from .base import StreamOperator
from .basic import _SINGLE_RECORDS, ProcessOperator, _FunctionOperator, single_record_error
from .keyed import ElementContext, KeyedProcessOperator

#: the input index of the broadcast stream (the connected stream is input 0)
BROADCAST_INPUT = 1


class ReadOnlyContext(ElementContext):
    """The ``ctx`` of ``process_element(value, ctx)`` in a broadcast process function:
    an :class:`~lockgate.runtime.operators.keyed.ElementContext` (``current_key`` in the
    keyed variant, ``timestamp``, ``output(tag, value)``) that also reads the broadcast
    state. Reused across records: do not keep it."""

    __slots__ = ("_store",)

    def __init__(self, operator: StreamOperator, store: BroadcastStateStore) -> None:
        super().__init__(operator, None)
        self._store = store

    def get_broadcast_state(
        self, descriptor: MapStateDescriptor[Any]
    ) -> ReadOnlyBroadcastState[Any, Any]:
        """The broadcast state of ``descriptor`` (one given to ``stream.broadcast``),
        read-only: writes raise ConfigurationError."""
        return self._store.read_only(descriptor)


class BroadcastContext(ElementContext):
    """The ``ctx`` of ``process_broadcast_element(value, ctx)``: the writable broadcast
    state and side outputs (``output(tag, value)``). ``current_key`` is None: a
    broadcast element belongs to no key. Reused across elements: do not keep it."""

    __slots__ = ("_store",)

    def __init__(self, operator: StreamOperator, store: BroadcastStateStore) -> None:
        super().__init__(operator, None)
        self._store = store

    def get_broadcast_state(self, descriptor: MapStateDescriptor[Any]) -> BroadcastState[Any, Any]:
        """The writable broadcast state of ``descriptor`` (one given to
        ``stream.broadcast``). Change it only from the broadcast elements, so that every
        subtask keeps the same state."""
        return self._store.writable(descriptor)


class KeyedBroadcastContext(BroadcastContext):
    """The broadcast side's ``ctx`` in a keyed broadcast process function: adds
    :meth:`apply_to_keyed_state`."""

    __slots__ = ("_apply",)

    def __init__(
        self,
        operator: StreamOperator,
        store: BroadcastStateStore,
        apply: Callable[[StateDescriptor[Any], Callable[[Any, Any], Any]], None],
    ) -> None:
        super().__init__(operator, store)
        self._apply = apply

    def apply_to_keyed_state(
        self, descriptor: StateDescriptor[Any], function: Callable[[Any, Any], Any]
    ) -> None:
        """Call ``function(key, state)`` for every key of this subtask that has a value of
        the keyed state ``descriptor`` names; ``state`` is that state's handle, scoped to
        ``key`` while ``function`` runs (it may read, update or clear it). Keys are listed
        before the first call, so ``function`` may change the state freely. Return values
        are ignored: collect outputs in a list and yield them from
        ``process_broadcast_element``."""
        self._apply(descriptor, function)


class _NoCurrentKey:
    """The keyed backend's current key while a broadcast element is processed: keyed
    state handles hash their key on every access (the heap backend with ``hash``, the
    RocksDB backend with the stable key hash, which refuses this type), so any use
    fails; the operator reports it with :meth:`error`."""

    @staticmethod
    def error() -> ConfigurationError:
        return ConfigurationError(
            "keyed state was used in process_broadcast_element, where there is no current "
            "key (a broadcast element belongs to no key): use "
            "ctx.apply_to_keyed_state(descriptor, fn) to visit every key's state there, or "
            "use keyed state in process_element"
        )

    def __hash__(self) -> int:
        raise self.error()

    def __eq__(self, other: object) -> bool:
        return other is self

    def __repr__(self) -> str:
        return "<no current key: broadcast element>"


NO_CURRENT_KEY: Any = _NoCurrentKey()


class _BroadcastOperator(_FunctionOperator):
    """What the keyed and the non-keyed broadcast operator share: the broadcast state
    store, its snapshot and restore, and input 1 (the broadcast elements)."""

    two_input = True
    method = "process_element"
    element_ctx: ElementContext

    def __init__(self, fn: Any, descriptors: list[MapStateDescriptor[Any]]) -> None:
        # not super(): the keyed process operator's __init__ (next in the keyed variant's
        # MRO) takes a key selector, which the keyed variant sets itself
        _FunctionOperator.__init__(self, fn)
        self.descriptors = list(descriptors)
        self.call_broadcast = bind_function(fn, "process_broadcast_element")
        self.broadcast_state = BroadcastStateStore("broadcast operator", self.descriptors)

    def setup(self, name: str, uid: str, ctx: Any, output: Any) -> None:
        super().setup(name, uid, ctx, output)
        self.broadcast_state.operator_name = name

    def _broadcast_context(self) -> BroadcastContext:
        return BroadcastContext(self, self.broadcast_state)

    def open(self) -> None:
        super().open()
        self.element_ctx = ReadOnlyContext(self, self.broadcast_state)
        self.broadcast_ctx = self._broadcast_context()

    # -- state (M-T4) ----------------------------------------------------------------------
    def restore_state(self, restored: Any) -> None:
        """Operator (and keyed) state as the base operator, then the broadcast state: the
        part of the old subtask with this index at the same parallelism, else of old
        subtask ``i % old parallelism`` (all held the same state)."""
        super().restore_state(restored)
        if restored.same_parallelism:
            payload = restored.own()
        else:
            by_subtask = restored.by_subtask()  # read (and cached) by the base restore already
            old = sorted(by_subtask)
            payload = by_subtask[old[restored.subtask % len(old)]] if old else None
        self.broadcast_state.restore(payload_part(payload, "broadcast"))

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """The base snapshot (keyed view, operator state copies) plus deep copies of the
        broadcast state, taken now, in the synchronous part (M-T3)."""
        base = super().snapshot_state(checkpoint_id)
        broadcast = self.broadcast_state.snapshot()
        if broadcast is None:
            return base
        if base is None:
            return OperatorStateSnapshot(None, None, broadcast)
        base.broadcast = broadcast
        return base

    # -- input 1 ---------------------------------------------------------------------------
    def _before_broadcast(self) -> None:
        """Hook: prepare keyed state for a broadcast element (the keyed variant)."""

    def _broadcast_error(self, error: Exception) -> Exception:
        """Hook: the error to report for ``error`` raised by process_broadcast_element."""
        return error

    def _process_broadcast(self, batch: Batch) -> None:
        rows = to_rows(batch)
        self.counters.records_in += len(rows)
        fn = self.call_broadcast
        bctx = self.broadcast_ctx
        out: list[Any] = []
        extend = out.extend
        self._before_broadcast()
        cancel = self.cancellation
        try:
            for r in rows:
                if cancel.requested:  # stop within one record, not one batch
                    break
                result = fn(r, bctx)
                if result is not None:
                    if isinstance(result, _SINGLE_RECORDS):
                        raise single_record_error("process_broadcast_element", result)
                    extend(result)
        except Exception as e:
            raise self.user_error(self._broadcast_error(e)) from e
        cancel.check()
        bctx.flush_side_outputs()
        self.emit(RowBatch(out))


class BroadcastProcessOperator(_BroadcastOperator, ProcessOperator):
    """A ``BroadcastProcessFunction`` on a non-keyed stream connected to a broadcast
    stream (input 0: ``process_element``, input 1: ``process_broadcast_element``)."""

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        if input_index == BROADCAST_INPUT:
            self._process_broadcast(batch)
        else:
            ProcessOperator.process_batch(self, batch, input_index)


class KeyedBroadcastProcessOperator(_BroadcastOperator, KeyedProcessOperator):
    """A ``KeyedBroadcastProcessFunction`` on a keyed stream connected to a broadcast
    stream: ``process_element`` runs with the record's key current (keyed state as in
    the keyed process operator); ``process_broadcast_element`` may visit every key's
    state with ``ctx.apply_to_keyed_state``."""

    def __init__(
        self, fn: Any, descriptors: list[MapStateDescriptor[Any]], key_selector: KeySelector
    ) -> None:
        _BroadcastOperator.__init__(self, fn, descriptors)
        self.key_selector = key_selector

    def _broadcast_context(self) -> BroadcastContext:
        return KeyedBroadcastContext(self, self.broadcast_state, self.apply_to_keyed_state)

    def _before_broadcast(self) -> None:
        self.backend.current_key = NO_CURRENT_KEY

    def _broadcast_error(self, error: Exception) -> Exception:
        """Keyed state used outside ``apply_to_keyed_state``: the RocksDB backend refuses
        the no-key marker as an unsupported key; say what really went wrong."""
        if isinstance(error, UnsupportedKeyError) and repr(NO_CURRENT_KEY) in str(error):
            return _NoCurrentKey.error()
        return error

    def apply_to_keyed_state(
        self, descriptor: StateDescriptor[Any], function: Callable[[Any, Any], Any]
    ) -> None:
        """``function(key, state)`` for every key of this subtask with a value of
        ``descriptor``'s state, the key current during each call."""
        if not callable(function):
            raise ConfigurationError(
                f"operator '{self.name}': apply_to_keyed_state needs a function "
                f"(key, state) -> None, got {function!r}"
            )
        backend = self.backend
        state = backend.get_state(descriptor)  # checks the descriptor
        try:
            for key in backend.keys(descriptor.name):
                backend.current_key = key
                function(key, state)
        finally:
            backend.current_key = NO_CURRENT_KEY

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        if input_index == BROADCAST_INPUT:
            self._process_broadcast(batch)
        else:
            KeyedProcessOperator.process_batch(self, batch, input_index)

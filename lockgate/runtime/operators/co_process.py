"""The two-input operators of connected streams (``a.connect(b)``, b a DataStream).

Each operator runs one method of the user function per input: input 0 (the stream
``connect`` was called on) ``map1`` / ``flat_map1`` / ``process_element1``, input 1 (the
argument of ``connect``) ``map2`` / ``flat_map2`` / ``process_element2``. They reuse the
one-input operators whole (the per-record loop, timestamps, side outputs, operator and
keyed state, timers, snapshot and restore): before each batch the operator switches
its bound method (and, keyed, its key selector) to the batch's input.

* :class:`CoMapOperator`, :class:`CoFlatMapOperator`, :class:`CoProcessOperator`: no
  keyed state; used for non-keyed connected streams, and for ``map`` / ``flat_map`` of
  keyed ones (their inputs are then key-group partitioned, so equal keys of both inputs
  meet in one subtask).
* :class:`KeyedCoProcessOperator`: a ``KeyedCoProcessFunction`` on two keyed streams.
  Each input's records are keyed by that input's key selector; keyed state and timers
  are one key space shared by both inputs (a key of input 0 and the equal key of input
  1 see the same state), checkpointed and rescaled by key group as the keyed process
  operator's (M-T4, M-R1). Keys are held by value (an int32 key of input 0 and the
  equal int64 key of input 1 are one key, as are string, large_string and dictionary
  strings); keys of kinds that never match (an integer and a string or a float) fail
  the job with a ConfigurationError naming both (:mod:`lockgate.core.key_types`).

Event time (M-W5, M-W4, M-W6): the operator's watermark is the minimum of its two
inputs' (:class:`~lockgate.runtime.operators.base.StreamOperator` with ``two_input``);
an idle input does not hold it back; event-time timers fire on that combined
watermark. The two inputs are not ordered against each other (as in Flink): a function
that needs the other side's record first keeps what it has in state.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ...core.batch import Batch, take
from ...core.key_types import KeyKindCheck, arrow_types, key_kinds, python_types, schema_kinds
from ...core.partitioners import KeySelector
from ...core.user_functions import bind_function
from .basic import FlatMapOperator, MapOperator, ProcessOperator
from .keyed import KeyedProcessOperator


class _TwoMethods:
    """A function operator calling ``methods[input_index]`` of its function: binds both
    methods once and switches ``self.call`` (the one-input operators' bound method) per
    batch."""

    two_input = True
    methods: tuple[str, str]
    call: Any
    function: Any

    def _bind_both(self) -> None:
        self.calls = tuple(bind_function(self.function, m) for m in self.methods)

    def _select(self, input_index: int) -> None:
        self.call = self.calls[input_index]


class CoMapOperator(_TwoMethods, MapOperator):
    """``map1(value)`` for input 0, ``map2(value)`` for input 1: one output record per
    input record (None fails the job, as map)."""

    methods = ("map1", "map2")
    method = "map1"

    def __init__(self, fn: Any) -> None:
        super().__init__(fn)
        self._bind_both()

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        self._select(input_index)
        MapOperator.process_batch(self, batch, input_index)


class CoFlatMapOperator(_TwoMethods, FlatMapOperator):
    """``flat_map1(value)`` / ``flat_map2(value)``: zero or more output records each (an
    iterable, or a generator)."""

    methods = ("flat_map1", "flat_map2")
    method = "flat_map1"

    def __init__(self, fn: Any) -> None:
        super().__init__(fn)
        self._bind_both()

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        self._select(input_index)
        FlatMapOperator.process_batch(self, batch, input_index)


class CoProcessOperator(_TwoMethods, ProcessOperator):
    """``process_element1(value, ctx)`` / ``process_element2(value, ctx)`` with the
    non-keyed process function's context (``ctx.timestamp``, ``ctx.output(tag,
    value)``); no keyed state and no timers, as a non-keyed ``ProcessFunction``."""

    methods = ("process_element1", "process_element2")
    method = "process_element1"

    def __init__(self, fn: Any) -> None:
        super().__init__(fn)
        self._bind_both()

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        self._select(input_index)
        ProcessOperator.process_batch(self, batch, input_index)


class KeyedCoProcessOperator(_TwoMethods, KeyedProcessOperator):
    """A ``KeyedCoProcessFunction`` on two keyed streams: ``process_element1`` /
    ``process_element2`` run with the record's key (by its input's key selector) current,
    keyed state scoped to it, ``ctx.timer_service()`` for event- and processing-time
    timers of that key, and ``on_timer(timestamp, ctx)`` when they fire."""

    methods = ("process_element1", "process_element2")
    method = "process_element1"

    def __init__(self, fn: Any, key_selector: KeySelector, key_selector2: KeySelector) -> None:
        super().__init__(fn, key_selector)
        self.key_selectors = (key_selector, key_selector2)
        self._bind_both()
        self._kinds: KeyKindCheck | None = None

    def process_batch(self, batch: Batch, input_index: int = 0) -> None:
        self._select(input_index)
        self.key_selector = self.key_selectors[input_index]
        self._check_key_kind(batch, input_index)
        KeyedProcessOperator.process_batch(self, batch, input_index)

    def _check_key_kind(self, batch: Batch, input_index: int) -> None:
        """Refuse keys of the two inputs that can never be equal (see the module
        docstring): from the schema of an Arrow batch keyed by columns, else from the
        key of the batch's first record."""
        if self._kinds is None:
            first, second = self.key_selectors
            self._kinds = KeyKindCheck(
                f"keyed connect '{self.name}'",
                (
                    f"the key of input 1 ({first.describe()})",
                    f"the key of input 2 ({second.describe()})",
                ),
            )
        selector = self.key_selector
        columns = selector.columns
        if columns is not None and isinstance(batch, pa.RecordBatch):
            self._kinds.observe(
                input_index, schema_kinds(batch.schema, columns), arrow_types(batch.schema, columns)
            )
            return
        try:
            key = selector.keys(take(batch, np.zeros(1, dtype=np.int64)))[0]
        except Exception:  # noqa: BLE001 - the operator reports the failing record itself
            return
        self._kinds.observe(input_index, key_kinds(key), python_types(key))

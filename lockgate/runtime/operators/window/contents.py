"""What a window holds per key, and how results leave it.

A window operator keeps, for every (key, window) *row*, a payload row. The four
kinds of contents differ only in that payload and in how records get in and
results get out; the windowing logic (assignment, merging, firing, lateness,
snapshots) is the same for all (:mod:`.store`, :mod:`.operator`):

* :class:`BuiltinContents` - ``aggregate(lg.agg.count(), ...)``: a columnar
  :class:`~lockgate.windowing.aggregates.Accumulators`; records are reduced a
  batch at a time with numpy (the fast path, no per-record Python).
* :class:`AggregateFunctionContents` - ``aggregate(MyAggregateFunction())``: one
  accumulator object per row, ``add(value, acc)`` per record.
* :class:`ReduceContents` - ``reduce(fn)``: the reduced value per row.
* :class:`ProcessContents` - ``process(MyProcessWindowFunction())``: the list of
  the row's records.

Result shapes (each result record's event timestamp is the window's
``end - 1``):

* built-in aggregates: an Arrow batch per firing with the key column(s)
  (``key_by("k")`` -> ``k``; ``key_by(["a", "b"])`` -> ``a`` and ``b``; a key
  function -> ``key``), ``window_start``, ``window_end`` (int64 epoch ms) and one
  column per aggregate;
* ``AggregateFunction`` and ``reduce``: one dict per (key, window) with the same
  key field(s), ``window_start``, ``window_end`` and ``result`` (``get_result(acc)``,
  or the reduced value);
* ``process``: whatever ``process(key, context, elements)`` yields;
  ``context.window`` gives the window's ``start`` and ``end``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa

from ....core.batch import Batch, RowBatch, to_arrow, to_rows, with_timestamps
from ....core.moved_modules import loads as moved_loads
from ....core.user_functions import bind_function, is_default_method
from ....errors import ConfigurationError
from ....windowing.aggregate_specs import WINDOW_END, WINDOW_START
from ....windowing.aggregates import (
    Accumulators,
    WindowAggregation,
    WindowPartials,
    window_result_batch,
)
from ....windowing.assigners import TimeWindow, WindowAssignment
from ..element_context import tag_name

#: the field of AggregateFunction and reduce results holding the value
RESULT_FIELD = "result"


class WindowView(TimeWindow):
    """The window a ``ProcessWindowFunction`` is called for: a :class:`TimeWindow`
    (``start``, ``end``, ``max_timestamp()``) that may also be called, as PyFlink's
    ``context.window()`` is."""

    def __call__(self) -> TimeWindow:
        return self


class WindowContext:
    """The ``context`` of ``ProcessWindowFunction.process(key, context, elements)``.
    Reused across calls: do not keep it."""

    __slots__ = ("_operator", "_side", "window")

    def __init__(self, operator: Any) -> None:
        self._operator = operator
        self._side: dict[str, list[Any]] = {}
        self.window: WindowView = WindowView(0, 1)

    def current_watermark(self) -> int:
        """The operator's event time (the last watermark it processed)."""
        return int(self._operator.current_watermark)

    def current_processing_time(self) -> int:
        """The operator's processing time (epoch ms, from its injectable clock)."""
        return int(self._operator.ctx.clock.time_ms())

    def output(self, tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``tag`` (an ``lg.OutputTag``)."""
        self._side.setdefault(tag_name(tag), []).append(value)

    def take_side_outputs(self) -> dict[str, list[Any]]:
        side, self._side = self._side, {}
        return side


class WindowContents(abc.ABC):
    """The payload of a window operator's rows (see the module docstring).

    Payloads are row-aligned with the store's (key, window) rows. Methods returning a
    payload leave their inputs untouched unless they say otherwise."""

    #: the name recorded in snapshots; a restore checks it
    kind: str = ""
    #: records are reduced a batch at a time (``partials``), not folded one by one
    vectorized = False

    def open(self, operator: Any) -> None:
        """Called once before any record (``operator`` reports user errors)."""
        self.operator = operator

    def describe(self) -> str:
        """What the contents compute (checked on restore)."""
        return self.kind

    # -- input ----------------------------------------------------------------------
    def prepare(self, batch: Batch) -> Any:
        """The batch in the form ``partials``/``fold`` take."""
        return to_rows(batch)

    def partials(
        self, data: Any, codes: np.ndarray, assignment: WindowAssignment, timestamps: np.ndarray
    ) -> WindowPartials:
        raise NotImplementedError

    def partial_rows(
        self,
        data: Any,
        group_ids: np.ndarray,
        num_groups: int,
        records: np.ndarray,
        timestamps: np.ndarray,
    ) -> Any:
        """Vectorized contents: the records ``records`` of ``data`` reduced into
        ``num_groups`` rows (record ``records[i]`` into row ``group_ids[i]``)."""
        raise NotImplementedError

    def fold(self, payload: Any, rows: np.ndarray, data: Any, records: np.ndarray) -> None:
        """Per-record contents, in place: record ``records[i]`` of ``data`` into row
        ``rows[i]``, in that order."""
        raise NotImplementedError

    # -- payload rows ---------------------------------------------------------------
    @abc.abstractmethod
    def empty(self, n: int) -> Any: ...

    @abc.abstractmethod
    def length(self, payload: Any) -> int: ...

    @abc.abstractmethod
    def take(self, payload: Any, rows: np.ndarray) -> Any: ...

    @abc.abstractmethod
    def concat(self, parts: list[Any]) -> Any: ...

    @abc.abstractmethod
    def combine(self, payload: Any, groups: np.ndarray, n: int) -> Any:
        """``n`` rows: row ``g`` combines the rows of ``payload`` in group ``g`` (in row
        order); rows of an empty group are empty. Merging (session) windows use it."""

    def merge_rows(self, into: Any, other: Any) -> Any:
        """Vectorized contents: row ``i`` of the result absorbs row ``i`` of ``other``."""
        raise NotImplementedError

    def merge_into(self, payload: Any, rows: np.ndarray, other: Any) -> None:
        """Vectorized contents, in place: row ``rows[i]`` absorbs row ``i`` of ``other``;
        ``rows`` has no repeats (one partial per (key, window))."""
        raise NotImplementedError

    # -- snapshots ------------------------------------------------------------------
    def freeze(self, payload: Any) -> Any:
        """The synchronous part of a snapshot of ``payload``: a value later processing
        cannot change (the store copies vectorized payloads on write instead)."""
        return payload

    def thaw(self, frozen: Any) -> Any:
        """A payload from what :meth:`freeze` returned (restores)."""
        return frozen

    # -- output ---------------------------------------------------------------------
    @abc.abstractmethod
    def results(
        self, keys: Any, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, payload: Any
    ) -> list[Batch]:
        """The result batches of the rows (``payload`` holds exactly them), with
        timestamps ``end - 1``."""


class BuiltinContents(WindowContents):
    """Built-in vectorized aggregates (``lg.agg.*``)."""

    kind = "builtin"
    vectorized = True

    def __init__(self, aggregation: WindowAggregation) -> None:
        self.aggregation = aggregation

    def describe(self) -> str:
        return f"builtin {[repr(a) for a in self.aggregation.aggregates]}"

    def prepare(self, batch: Batch) -> pa.RecordBatch:
        return to_arrow(batch, operator=f"window aggregate '{self.operator.name}'")

    def partials(
        self, data: Any, codes: np.ndarray, assignment: WindowAssignment, timestamps: np.ndarray
    ) -> WindowPartials:
        return self.aggregation.aggregate_batch(data, codes, assignment, timestamps)

    def partial_rows(
        self,
        data: Any,
        group_ids: np.ndarray,
        num_groups: int,
        records: np.ndarray,
        timestamps: np.ndarray,
    ) -> Accumulators:
        return self.aggregation.partial(
            data, group_ids, num_groups, rows=records, timestamps=timestamps
        )

    def empty(self, n: int) -> Accumulators:
        return self.aggregation.empty(n)

    def length(self, payload: Accumulators) -> int:
        return len(payload)

    def take(self, payload: Accumulators, rows: np.ndarray) -> Accumulators:
        return payload.take(rows)

    def concat(self, parts: list[Any]) -> Accumulators:
        parts = [p for p in parts if len(p)] or parts[:1]
        return parts[0] if len(parts) == 1 else Accumulators.concat(parts)

    def combine(self, payload: Accumulators, groups: np.ndarray, n: int) -> Accumulators:
        return payload.reduce(groups, n)

    def merge_rows(self, into: Accumulators, other: Accumulators) -> Accumulators:
        return into.merge(other)

    def merge_into(self, payload: Accumulators, rows: np.ndarray, other: Accumulators) -> None:
        payload.merge_into(rows, other, distinct=True)

    def results(
        self,
        keys: Any,
        codes: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        payload: Accumulators,
    ) -> list[Batch]:
        if not len(codes):
            return []
        stamps = np.asarray(ends, dtype=np.int64) - 1
        columns = keys.key_columns(codes)
        if columns is None:  # keys Arrow cannot hold: one dict per window instead
            results = payload.results()
            values = {name: col.to_pylist() for name, col in results.items()}
            rows = []
            for i, (key, s, e) in enumerate(
                zip(keys.keys_of(codes), starts.tolist(), ends.tolist())
            ):
                row = keys.key_fields(key)
                row[WINDOW_START] = s
                row[WINDOW_END] = e
                row.update({name: v[i] for name, v in values.items()})
                rows.append(row)
            return [RowBatch(rows, stamps)]
        batch = window_result_batch(columns, starts, ends, payload)
        return [with_timestamps(batch, stamps)]


class _Empty:
    """The value of a reduce row that has seen no record yet."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<empty>"

    def __reduce__(self) -> str:
        return "_EMPTY"


_EMPTY = _Empty()


class _ObjectContents(WindowContents):
    """Contents with one Python object per row (user functions, per record)."""

    def freeze(self, payload: list[Any]) -> bytes:
        # objects may be changed in place later (accumulators, element lists): copy now
        try:
            return cloudpickle.dumps(payload)
        except Exception as e:
            raise self.operator.user_error(
                TypeError(
                    f"the window state cannot be pickled for a checkpoint ({e}); keep "
                    "accumulators and records picklable"
                )
            ) from e

    def thaw(self, frozen: bytes) -> list[Any]:
        return list(moved_loads(frozen))

    def length(self, payload: list[Any]) -> int:
        return len(payload)

    def take(self, payload: list[Any], rows: np.ndarray) -> list[Any]:
        return [payload[i] for i in rows.tolist()]

    def concat(self, parts: list[Any]) -> list[Any]:
        out: list[Any] = []
        for p in parts:
            out.extend(p)
        return out

    def combine(self, payload: list[Any], groups: np.ndarray, n: int) -> list[Any]:
        out = self.empty(n)
        seen = np.zeros(n, dtype=bool)
        merge = self._merge
        try:
            for value, g in zip(payload, groups.tolist()):
                if seen[g]:
                    out[g] = merge(out[g], value)
                else:
                    out[g] = value
                    seen[g] = True
        except Exception as e:
            raise self.operator.user_error(e) from e
        return out

    def _merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def _result_rows(
        self,
        keys: Any,
        codes: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        values: Iterable[Any],
    ) -> list[Batch]:
        rows = []
        for key, s, e, v in zip(keys.keys_of(codes), starts.tolist(), ends.tolist(), values):
            row = keys.key_fields(key)
            row[WINDOW_START] = s
            row[WINDOW_END] = e
            row[RESULT_FIELD] = v
            rows.append(row)
        if not rows:
            return []
        return [RowBatch(rows, np.asarray(ends, dtype=np.int64) - 1)]


class AggregateFunctionContents(_ObjectContents):
    """A user ``AggregateFunction``: ``create_accumulator``/``add``/``get_result``
    (and ``merge`` for merging windows)."""

    kind = "aggregate_function"

    def __init__(self, fn: Any) -> None:
        self.function = fn

    def open(self, operator: Any) -> None:
        super().open(operator)
        fn = self.function
        self._create: Callable[[], Any] = bind_function(fn, "create_accumulator")
        self._add: Callable[[Any, Any], Any] = bind_function(fn, "add")
        self._get: Callable[[Any], Any] = bind_function(fn, "get_result")

    def empty(self, n: int) -> list[Any]:
        try:
            return [self._create() for _ in range(n)]
        except Exception as e:
            raise self.operator.user_error(e) from e

    def fold(
        self, payload: list[Any], rows: np.ndarray, data: list[Any], records: np.ndarray
    ) -> None:
        add = self._add
        try:
            for r, i in zip(rows.tolist(), records.tolist()):
                payload[r] = add(data[i], payload[r])
        except Exception as e:
            raise self.operator.user_error(e) from e

    def _merge(self, a: Any, b: Any) -> Any:
        return self.function.merge(a, b)

    def results(
        self, keys: Any, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, payload: list[Any]
    ) -> list[Batch]:
        try:
            values = [self._get(acc) for acc in payload]
        except Exception as e:
            raise self.operator.user_error(e) from e
        return self._result_rows(keys, codes, starts, ends, values)


class ReduceContents(_ObjectContents):
    """A ``ReduceFunction`` (or a callable ``fn(a, b)``): the reduced value per row."""

    kind = "reduce"

    def __init__(self, fn: Any) -> None:
        self.function = fn

    def open(self, operator: Any) -> None:
        super().open(operator)
        self._reduce: Callable[[Any, Any], Any] = bind_function(self.function, "reduce")

    def empty(self, n: int) -> list[Any]:
        return [_EMPTY] * n

    def fold(
        self, payload: list[Any], rows: np.ndarray, data: list[Any], records: np.ndarray
    ) -> None:
        reduce = self._reduce
        try:
            for r, i in zip(rows.tolist(), records.tolist()):
                current = payload[r]
                payload[r] = data[i] if current is _EMPTY else reduce(current, data[i])
        except Exception as e:
            raise self.operator.user_error(e) from e

    def _merge(self, a: Any, b: Any) -> Any:
        if a is _EMPTY:
            return b
        if b is _EMPTY:
            return a
        return self._reduce(a, b)

    def results(
        self, keys: Any, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, payload: list[Any]
    ) -> list[Batch]:
        return self._result_rows(keys, codes, starts, ends, payload)


class ProcessContents(_ObjectContents):
    """A ``ProcessWindowFunction``: every record of the row, given to
    ``process(key, context, elements)`` when the window fires."""

    kind = "process"

    def __init__(self, fn: Any) -> None:
        self.function = fn

    def open(self, operator: Any) -> None:
        super().open(operator)
        self._process: Callable[..., Any] = bind_function(self.function, "process")
        self.context = WindowContext(operator)

    def empty(self, n: int) -> list[Any]:
        return [[] for _ in range(n)]

    def fold(
        self, payload: list[Any], rows: np.ndarray, data: list[Any], records: np.ndarray
    ) -> None:
        for r, i in zip(rows.tolist(), records.tolist()):
            payload[r].append(data[i])

    def _merge(self, a: Any, b: Any) -> Any:
        return a + b

    def results(
        self, keys: Any, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, payload: list[Any]
    ) -> list[Batch]:
        ctx = self.context
        process = self._process
        out: list[Any] = []
        counts = np.zeros(len(codes), dtype=np.int64)
        side: dict[str, tuple[list[Any], list[int]]] = {}
        try:
            for i, (key, s, e) in enumerate(
                zip(keys.keys_of(codes), starts.tolist(), ends.tolist())
            ):
                ctx.window = WindowView(s, e)
                result = process(key, ctx, list(payload[i]))
                if result is not None:
                    if isinstance(result, (str, bytes, dict)):
                        raise TypeError(
                            "process() must return an iterable of records (or yield them), "
                            f"but returned a {type(result).__name__} ({result!r:.80}); wrap a "
                            "single record in a list"
                        )
                    before = len(out)
                    out.extend(result)
                    counts[i] = len(out) - before
                for name, values in ctx.take_side_outputs().items():
                    rows, stamps = side.setdefault(name, ([], []))
                    rows.extend(values)
                    stamps.extend([e - 1] * len(values))
        except Exception as e:
            raise self.operator.user_error(e) from e
        op = self.operator
        for name, (rows, stamps) in side.items():
            op.counters.side_out[name] = op.counters.side_out.get(name, 0) + len(rows)
            op.output.emit_side(name, RowBatch(rows, np.asarray(stamps, dtype=np.int64)))
        if not out:
            return []
        return [RowBatch(out, np.repeat(np.asarray(ends, dtype=np.int64) - 1, counts))]


def check_merge_support(contents: WindowContents) -> None:
    """Merging windows combine rows: an ``AggregateFunction`` must implement ``merge``."""
    if isinstance(contents, AggregateFunctionContents):
        fn = contents.function
        merge = getattr(type(fn), "merge", None)
        if merge is None or is_default_method(merge):
            raise ConfigurationError(
                f"session windows merge accumulators, but {type(fn).__name__} does not "
                "implement AggregateFunction.merge(a, b); implement it (return the "
                "accumulator combining a and b)"
            )

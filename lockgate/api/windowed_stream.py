"""WindowedStream: ``keyed.window(assigner)`` and what runs on its windows.

::

    counts = (events.key_by("user")
              .window(lg.TumblingEventTimeWindows.of(timedelta(seconds=1)))
              .allowed_lateness(timedelta(seconds=5))
              .side_output_late_data(lg.OutputTag("late"))
              .aggregate(lg.agg.count(), lg.agg.sum("amount")))
    late = counts.get_side_output(lg.OutputTag("late"))

Window functions, and the records they produce (each with the event timestamp
``window_end - 1``):

* ``aggregate(lg.agg.count(), lg.agg.mean("v"), ...)`` - built-in aggregates,
  vectorized: an Arrow batch per firing with the key column(s) (the ``key_by``
  column(s); ``key`` for a key function), ``window_start``, ``window_end`` (int64
  epoch ms) and one column per aggregate;
* ``aggregate(MyAggregateFunction())`` - an ``lg.AggregateFunction``, per record:
  ``{<key field(s)>, "window_start": s, "window_end": e, "result": get_result(acc)}``;
* ``reduce(fn)`` - an ``lg.ReduceFunction`` or ``fn(a, b)``, per record: the same
  dict with the reduced value as ``result``;
* ``process(MyProcessWindowFunction())`` - ``process(key, context, elements)``
  sees all the window's records and ``context.window`` (``start``, ``end``); its
  records are emitted as it yields them.

Firing, lateness and late data are described in
:mod:`lockgate.runtime.operators.window.operator`.
"""

from __future__ import annotations

from typing import Any, Generic

from ..core.durations import Duration, to_millis
from ..core.user_functions import bind_function
from ..errors import ConfigurationError
from ..graph.operator_factory import OperatorFactory
from ..runtime.operators.keyed import tag_name
from ..runtime.operators.window.contents import (
    RESULT_FIELD,
    AggregateFunctionContents,
    BuiltinContents,
    ProcessContents,
    ReduceContents,
    WindowContents,
    check_merge_support,
)
from ..runtime.operators.window.keys import KEY_FIELD
from ..runtime.operators.window.operator import WindowOperator
from ..windowing.aggregate_specs import WINDOW_END, WINDOW_START, WindowAggregate
from ..windowing.aggregates import WindowAggregation
from ..windowing.assigners import WindowAssigner
from .stream_protocols import DS, KeyedLike

#: the largest allowed lateness (window bounds plus lateness must stay in int64)
MAX_ALLOWED_LATENESS_MS = 2**62


def check_assigner(assigner: Any) -> None:
    """Raise a ConfigurationError saying how to fix it unless ``assigner`` is a window
    assigner instance (what ``window()`` takes)."""
    if isinstance(assigner, type) and issubclass(assigner, WindowAssigner):
        raise ConfigurationError(
            f"window() needs a window assigner instance, got the class "
            f"{assigner.__name__}; build one, e.g. "
            f"{assigner.__name__}.of(timedelta(seconds=1))"
        )
    if not isinstance(assigner, WindowAssigner):
        raise ConfigurationError(
            f"window() needs a window assigner, e.g. "
            f"lg.TumblingEventTimeWindows.of(timedelta(seconds=1)), got {assigner!r}"
        )


def lateness_ms(lateness: Duration, assigner: WindowAssigner) -> int:
    """``allowed_lateness(lateness)`` in ms for windows of ``assigner``; a
    ConfigurationError saying how to fix it when too large, or when not zero for
    processing-time windows."""
    ms = to_millis(lateness, "allowed_lateness")
    if ms > MAX_ALLOWED_LATENESS_MS:
        raise ConfigurationError(
            f"allowed_lateness must be at most {MAX_ALLOWED_LATENESS_MS} ms, got {ms}"
        )
    if ms and not assigner.is_event_time:
        raise ConfigurationError(
            f"allowed_lateness applies to event-time windows; "
            f"{type(assigner).__name__} fires on processing time, where no record "
            "is late: remove allowed_lateness(...) or use an event-time assigner"
        )
    return ms


class WindowedStream(Generic[DS]):
    """A keyed stream cut into windows; finish it with ``aggregate``, ``reduce`` or
    ``process`` (see the module docstring)."""

    def __init__(self, keyed: KeyedLike[DS], assigner: WindowAssigner) -> None:
        check_assigner(assigner)
        self._keyed = keyed
        self._assigner = assigner
        self._lateness = 0
        self._late_tag: str | None = None

    @property
    def assigner(self) -> WindowAssigner:
        return self._assigner

    # -- settings -------------------------------------------------------------------------
    def allowed_lateness(self, lateness: Duration) -> WindowedStream[DS]:
        """Keep each window's state until the watermark passes ``end - 1 + lateness``
        (a timedelta or int ms); records arriving meanwhile update the window and make it
        fire again. Event-time windows only."""
        self._lateness = lateness_ms(lateness, self._assigner)
        return self

    def side_output_late_data(self, tag: Any) -> WindowedStream[DS]:
        """Send late records (every window they belong to is already dropped) to the side
        output ``tag`` (an ``lg.OutputTag``) instead of dropping them; read it with
        ``result.get_side_output(tag)``. Event-time windows only."""
        name = tag_name(tag)
        if not self._assigner.is_event_time:
            raise ConfigurationError(
                f"side_output_late_data applies to event-time windows; "
                f"{type(self._assigner).__name__} fires on processing time, where no record "
                "is late: remove side_output_late_data(...) or use an event-time assigner"
            )
        self._late_tag = name
        return self

    # -- window functions -----------------------------------------------------------------
    def aggregate(self, *functions: Any, name: str | None = None) -> DS:
        """Aggregate each window: built-in aggregates (``lg.agg.count()``,
        ``lg.agg.sum("v")``, ... several at once, vectorized) or one
        ``lg.AggregateFunction``."""
        if not functions:
            raise ConfigurationError(
                "aggregate(...) needs built-in aggregates (e.g. lg.agg.count(), "
                "lg.agg.sum('v')) or one lg.AggregateFunction"
            )
        if all(isinstance(f, WindowAggregate) for f in functions):
            aggregation = WindowAggregation(tuple(functions))
            self._check_result_names(aggregation.names)
            return self._build(
                BuiltinContents(aggregation),
                name or "Window(aggregate)",
                {"aggregates:object": aggregation},
            )
        if len(functions) == 1 and not isinstance(functions[0], WindowAggregate):
            fn = functions[0]
            if isinstance(fn, type):
                raise ConfigurationError(
                    f"aggregate() needs an AggregateFunction instance, got the class "
                    f"{fn.__name__}; pass {fn.__name__}()"
                )
            missing = [
                m
                for m in ("create_accumulator", "add", "get_result")
                if not callable(getattr(fn, m, None))
            ]
            if missing:
                raise ConfigurationError(
                    f"aggregate() takes lg.agg.* aggregates or an lg.AggregateFunction, got "
                    f"{fn!r} (it has no {', '.join(missing)}() method)"
                )
            self._check_result_names((RESULT_FIELD,))
            return self._build(
                AggregateFunctionContents(fn),
                name or "Window(aggregate)",
                {"aggregate function:add": fn},
            )
        raise ConfigurationError(
            "aggregate() takes either built-in aggregates (lg.agg.*) or one "
            f"lg.AggregateFunction, not a mix: got {list(functions)!r}"
        )

    def reduce(self, fn: Any, name: str | None = None) -> DS:
        """Combine each window's records pairwise: ``fn(a, b)`` (or an
        ``lg.ReduceFunction``'s ``reduce``) returns the combination."""
        try:
            bind_function(fn, "reduce")
        except TypeError:
            raise ConfigurationError(
                f"reduce() needs a function fn(a, b) or an lg.ReduceFunction, got {fn!r}"
            ) from None
        self._check_result_names((RESULT_FIELD,))
        return self._build(ReduceContents(fn), name or "Window(reduce)", {"function:reduce": fn})

    def process(self, fn: Any, name: str | None = None) -> DS:
        """Run an ``lg.ProcessWindowFunction`` (or ``fn(key, context, elements)``) on each
        fired window with all its records; ``context.window`` is the window."""
        if isinstance(fn, type):
            raise ConfigurationError(
                f"process() needs a ProcessWindowFunction instance, got the class "
                f"{fn.__name__}; pass {fn.__name__}()"
            )
        try:
            bind_function(fn, "process")
        except TypeError:
            raise ConfigurationError(
                "process() needs an lg.ProcessWindowFunction (process(key, context, "
                f"elements)) or such a function, got {fn!r}"
            ) from None
        return self._build(ProcessContents(fn), name or "Window(process)", {"function:process": fn})

    # -- internals ----------------------------------------------------------------------
    def _key_fields(self) -> tuple[str, ...]:
        columns = self._keyed.key_selector.columns
        return columns if columns is not None else (KEY_FIELD,)

    def _check_result_names(self, names: tuple[str, ...]) -> None:
        keys = self._key_fields()
        clash = sorted(set(keys) & (set(names) | {WINDOW_START, WINDOW_END}))
        if clash:
            raise ConfigurationError(
                f"the window results would have two fields named {clash}: the key "
                f"({', '.join(keys)}) and a result field ({WINDOW_START}, {WINDOW_END} or "
                f"{', '.join(names)}); rename the key column upstream or name the aggregate "
                "otherwise (e.g. lg.agg.count(name='n'))"
            )

    def _build(self, contents: WindowContents, name: str, functions: dict[str, Any]) -> DS:
        if self._assigner.is_merging:
            check_merge_support(contents)
        keyed = self._keyed
        factory = OperatorFactory(
            WindowOperator,
            {
                "assigner": self._assigner,
                "key_selector": keyed.key_selector,
                "contents": contents,
                "allowed_lateness": self._lateness,
                "late_tag": self._late_tag,
            },
            {**functions, **keyed._key_functions()},
        )
        stream = keyed._one_input(name, factory, keyed=True)
        if self._late_tag is not None:
            # the late records were asked for: they must be read (and reach a sink)
            stream.transformation.required_side_outputs = (self._late_tag,)
        return stream

    def __repr__(self) -> str:
        return f"WindowedStream({self._assigner!r})"

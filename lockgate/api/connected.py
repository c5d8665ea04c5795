"""ConnectedStreams: two streams, possibly of different types, processed by one
two-input operator (``a.connect(b)``, b a DataStream; Flink's ``ConnectedStreams``).

``.map(lg.CoMapFunction)``, ``.flat_map(lg.CoFlatMapFunction)`` and
``.process(lg.CoProcessFunction)`` run a function with one method per input;
``.key_by(key1, key2)`` (or ``a.key_by(ka).connect(b.key_by(kb))``) partitions both by
key, and ``.process(lg.KeyedCoProcessFunction)`` then has keyed state shared by both
inputs, timers and ``ctx.current_key``. See :mod:`lockgate.runtime.operators.co_process`
for the operators, their event time (M-W5) and state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic

from ..errors import ConfigurationError
from ..graph.operator_factory import OperatorFactory
from ..graph.transformations import Kind, Transformation
from ..runtime.operators.co_process import (
    CoFlatMapOperator,
    CoMapOperator,
    CoProcessOperator,
    KeyedCoProcessOperator,
)
from .functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
)
from .stream_protocols import DS, EnvironmentLike, StreamLike

#: what each call needs: the function's methods and the base class to subclass
_NEEDS = {
    "map": (("map1", "map2"), "lg.CoMapFunction"),
    "flat_map": (("flat_map1", "flat_map2"), "lg.CoFlatMapFunction"),
    "process": (("process_element1", "process_element2"), "lg.CoProcessFunction"),
}
#: the call that takes each base class (a hint when a function reaches the wrong one)
_CALL_OF = {
    CoMapFunction: "map",
    CoFlatMapFunction: "flat_map",
    CoProcessFunction: "process",
    KeyedCoProcessFunction: "process",
}


class ConnectedStreams(Generic[DS]):
    """Two connected streams: ``first`` (input 1 of the function: ``map1``,
    ``process_element1``, ...) and ``second`` (input 2). Both keep their own type; the
    records of the two are not ordered against each other. Made by
    ``first.connect(second)``."""

    def __init__(self, env: EnvironmentLike, first: StreamLike[DS], second: StreamLike[DS]) -> None:
        self._env = env
        self._first = first
        self._second = second

    @property
    def first_input(self) -> StreamLike[DS]:
        """The stream ``connect`` was called on (input 1)."""
        return self._first

    @property
    def second_input(self) -> StreamLike[DS]:
        """The stream passed to ``connect`` (input 2)."""
        return self._second

    @property
    def keyed(self) -> bool:
        """Whether both inputs are keyed streams (``key_by`` on both)."""
        return self._first._as_keyed() is not None and self._second._as_keyed() is not None

    def __repr__(self) -> str:
        return (
            f"ConnectedStreams({self._first.transformation.describe()}, "
            f"{self._second.transformation.describe()})"
        )

    def key_by(
        self,
        key1: str | Sequence[str] | Callable[[Any], Any],
        key2: str | Sequence[str] | Callable[[Any], Any],
    ) -> ConnectedStreams[DS]:
        """Both inputs partitioned by key: ``key1`` of the first input's records,
        ``key2`` of the second's (each a column name, a list of column names or a
        function, as ``DataStream.key_by``). Equal keys of both inputs reach the same
        subtask and, with a ``KeyedCoProcessFunction``, the same keyed state."""
        return ConnectedStreams(self._env, self._first.key_by(key1), self._second.key_by(key2))

    def map(self, fn: Any, name: str | None = None) -> DS:
        """``fn.map1(value)`` for each record of the first input, ``fn.map2(value)`` for
        each of the second: one output record each (an ``lg.CoMapFunction``)."""
        self._check(fn, "map")
        return self._operator(name, "CoMap", fn, "map", OperatorFactory(CoMapOperator, {"fn": fn}))

    def flat_map(self, fn: Any, name: str | None = None) -> DS:
        """``fn.flat_map1(value)`` / ``fn.flat_map2(value)``: zero or more output records
        each, yielded or returned as an iterable (an ``lg.CoFlatMapFunction``)."""
        self._check(fn, "flat_map")
        return self._operator(
            name, "CoFlatMap", fn, "flat_map", OperatorFactory(CoFlatMapOperator, {"fn": fn})
        )

    def process(self, fn: Any, name: str | None = None) -> DS:
        """``fn.process_element1(value, ctx)`` / ``fn.process_element2(value, ctx)``.

        On keyed connected streams ``fn`` is an ``lg.KeyedCoProcessFunction`` (or an
        ``lg.CoProcessFunction``), run with keyed state shared by both inputs,
        ``ctx.current_key``, ``ctx.timer_service()`` and ``on_timer``; otherwise an
        ``lg.CoProcessFunction`` (``ctx.timestamp``, ``ctx.output``; no state per key,
        no timers)."""
        self._check(fn, "process")
        if isinstance(fn, KeyedCoProcessFunction) and not self.keyed:
            raise ConfigurationError(
                f"{fn!r} is a KeyedCoProcessFunction, but {self._unkeyed_inputs()} not keyed: "
                "key both inputs, with a.key_by(ka).connect(b.key_by(kb)) or "
                "a.connect(b).key_by(ka, kb), or subclass lg.CoProcessFunction"
            )
        if not self.keyed:
            return self._operator(
                name, "CoProcess", fn, "process", OperatorFactory(CoProcessOperator, {"fn": fn})
            )
        first, second = self._first._as_keyed(), self._second._as_keyed()
        assert first is not None and second is not None
        factory: OperatorFactory[Any] = OperatorFactory(
            KeyedCoProcessOperator,
            {
                "fn": fn,
                "key_selector": first.key_selector,
                "key_selector2": second.key_selector,
            },
        )
        return self._operator(name, "KeyedCoProcess", fn, "process", factory, keyed=True)

    # -- helpers --------------------------------------------------------------------------
    def _operator(
        self,
        name: str | None,
        default_name: str,
        fn: Any,
        call: str,
        factory: OperatorFactory[Any],
        *,
        keyed: bool = False,
    ) -> DS:
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigurationError(f"name must be a non-empty string, got {name!r}")
        methods = _NEEDS[call][0]
        factory.user_functions = {
            f"function:{methods[0]}": fn,
            **_key_functions(self._first, "key selector 1"),
            **_key_functions(self._second, "key selector 2"),
        }
        inputs = [self._first.transformation, self._second.transformation]
        t = Transformation(
            Kind.OPERATOR, name or default_name, inputs, factory=factory, keyed=keyed
        )
        return self._first._derive(t)

    def _unkeyed_inputs(self) -> str:
        unkeyed = [
            which
            for which, s in (("the first input", self._first), ("the second input", self._second))
            if s._as_keyed() is None
        ]
        return " and ".join(unkeyed) + (" are" if len(unkeyed) == 2 else " is")

    def _check(self, fn: Any, call: str) -> None:
        methods, base = _NEEDS[call]
        if self.keyed and call == "process":
            base = "lg.KeyedCoProcessFunction"
        if isinstance(fn, type):
            raise ConfigurationError(
                f"{call}() on connected streams needs a function object, got the class "
                f"{fn.__name__}; pass an instance: {fn.__name__}(...)"
            )
        missing = [m for m in methods if not callable(getattr(fn, m, None))]
        if not missing:
            missing = [
                m
                for m in methods
                for cls in _CALL_OF
                if isinstance(fn, cls) and getattr(type(fn), m, None) is getattr(cls, m, None)
            ]
        if missing:
            hint = ""
            for cls, right in _CALL_OF.items():
                if isinstance(fn, cls) and right != call:
                    hint = f" ({fn!r} is a {cls.__name__}: call .{right}(fn) with it)"
            raise ConfigurationError(
                f"{call}() on connected streams needs an object with "
                f"{methods[0]}(...) and {methods[1]}(...) methods, one per input (subclass "
                f"{base} and override both); {fn!r} does not define "
                f"{' or '.join(dict.fromkeys(missing))}{hint}"
            )


def _key_functions(stream: StreamLike[Any], label: str) -> dict[str, Any]:
    keyed = stream._as_keyed()
    if keyed is None or keyed.key_selector.fn is None:
        return {}
    return {f"{label}:__call__": keyed.key_selector.fn}

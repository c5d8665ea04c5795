"""BroadcastStream and BroadcastConnectedStream: the fluent API of the broadcast state
pattern.

``rules.broadcast(descriptor, ...)`` makes a :class:`BroadcastStream` (every element
goes to every subtask of the operator it feeds; ``descriptor`` names broadcast state,
an ``lg.MapStateDescriptor``). ``stream.connect(broadcast_stream)`` (or
``stream.key_by(...).connect(broadcast_stream)``) makes a
:class:`BroadcastConnectedStream`, whose ``process(fn)`` runs an
``lg.BroadcastProcessFunction`` (``lg.KeyedBroadcastProcessFunction`` for a keyed
stream). See :mod:`lockgate.runtime.operators.broadcast` for what the function sees
and how its state is checkpointed.
"""

from __future__ import annotations

from typing import Any, Generic

from ..errors import ConfigurationError
from ..graph.operator_factory import OperatorFactory
from ..graph.transformations import Kind, Transformation
from ..runtime.operators.broadcast import BroadcastProcessOperator, KeyedBroadcastProcessOperator
from ..state.descriptors import MapStateDescriptor
from .functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction
from .stream_protocols import DS, EnvironmentLike, StreamLike

_METHODS = ("process_element", "process_broadcast_element")
_BASES = (BroadcastProcessFunction, KeyedBroadcastProcessFunction)


class BroadcastStream:
    """A stream whose every element reaches every subtask of the operator it is
    connected to, with the broadcast states it declares. Only usable as the argument
    of ``stream.connect(...)``."""

    def __init__(
        self,
        env: EnvironmentLike,
        transformation: Transformation,
        descriptors: list[MapStateDescriptor[Any]],
    ) -> None:
        self._env = env
        self._t = transformation
        self._descriptors = list(descriptors)

    @property
    def transformation(self) -> Transformation:
        return self._t

    @property
    def descriptors(self) -> list[MapStateDescriptor[Any]]:
        """The broadcast state descriptors given to ``stream.broadcast(...)``."""
        return list(self._descriptors)

    def __repr__(self) -> str:
        names = ", ".join(repr(d.name) for d in self._descriptors)
        return f"BroadcastStream(of {self._t.inputs[0].describe()}, states {names})"


class BroadcastConnectedStream(Generic[DS]):
    """A (keyed or non-keyed) stream connected to a :class:`BroadcastStream`; call
    :meth:`process` with a broadcast process function."""

    def __init__(
        self, env: EnvironmentLike, stream: StreamLike[DS], broadcast: BroadcastStream
    ) -> None:
        self._env = env
        self._stream = stream
        self._broadcast = broadcast

    @property
    def keyed(self) -> bool:
        """Whether the non-broadcast side is a keyed stream (``key_by(...).connect``)."""
        return self._stream._as_keyed() is not None

    def process(self, fn: Any, name: str | None = None) -> DS:
        """Run ``fn``: ``fn.process_element(value, ctx)`` for the connected stream's
        records (broadcast state read-only) and ``fn.process_broadcast_element(value,
        ctx)`` for the broadcast elements (broadcast state writable). Both yield (or
        return an iterable of) output records. ``fn`` is an
        ``lg.BroadcastProcessFunction``, or an ``lg.KeyedBroadcastProcessFunction`` when
        the stream is keyed (then ``process_element`` has keyed state and
        ``ctx.current_key``, and ``process_broadcast_element`` has
        ``ctx.apply_to_keyed_state``)."""
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigurationError(f"name must be a non-empty string, got {name!r}")
        self._check_function(fn)
        descriptors = self._broadcast.descriptors
        inputs = [self._stream.transformation, self._broadcast.transformation]
        functions: dict[str, Any] = {"function:process_element": fn}
        factory: OperatorFactory[Any]
        keyed = self._stream._as_keyed()
        if keyed is not None:
            factory = OperatorFactory(
                KeyedBroadcastProcessOperator,
                {"fn": fn, "descriptors": descriptors, "key_selector": keyed.key_selector},
                {**functions, **keyed._key_functions()},
            )
            t = Transformation(
                Kind.OPERATOR, name or "KeyedBroadcastProcess", inputs, factory=factory, keyed=True
            )
        else:
            factory = OperatorFactory(
                BroadcastProcessOperator, {"fn": fn, "descriptors": descriptors}, functions
            )
            t = Transformation(Kind.OPERATOR, name or "BroadcastProcess", inputs, factory=factory)
        return self._stream._derive(t)

    def _check_function(self, fn: Any) -> None:
        if isinstance(fn, type):
            raise ConfigurationError(
                f"process() needs a broadcast process function object, got the class "
                f"{fn.__name__}; pass an instance: {fn.__name__}(...)"
            )
        missing = [m for m in _METHODS if not callable(getattr(fn, m, None))]
        if not missing:
            missing = [
                m
                for m in _METHODS
                for base in _BASES
                if isinstance(fn, base) and getattr(type(fn), m) is getattr(base, m)
            ]
        if missing:
            which = (
                "lg.KeyedBroadcastProcessFunction" if self.keyed else "lg.BroadcastProcessFunction"
            )
            raise ConfigurationError(
                f"process() on a stream connected to a broadcast stream needs an object with "
                f"process_element(value, ctx) and process_broadcast_element(value, ctx) "
                f"methods (subclass {which} and override both); {fn!r} does not define "
                f"{' or '.join(missing)}"
            )
        if self.keyed and isinstance(fn, BroadcastProcessFunction):
            raise ConfigurationError(
                f"{fn!r} is a BroadcastProcessFunction, but the connected stream is keyed "
                "(key_by(...).connect(...)): subclass lg.KeyedBroadcastProcessFunction, or "
                "connect the stream without key_by"
            )
        if not self.keyed and isinstance(fn, KeyedBroadcastProcessFunction):
            raise ConfigurationError(
                f"{fn!r} is a KeyedBroadcastProcessFunction, but the connected stream is not "
                "keyed: call key_by(...) before connect(...), or subclass "
                "lg.BroadcastProcessFunction"
            )

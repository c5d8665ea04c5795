"""What the stream classes a DataStream builds see of it, as protocols.

``DataStream`` builds the windowed, joined, connected, broadcast-connected and
interval-joined streams; they take the streams they were built from and give back
streams of the same class, through :meth:`StreamLike._derive`, without importing
``DataStream``. So the API's modules import in one direction only (``datastream`` and
``environment`` above, these below), and no cycle ties them (``tests/unit/project/test_layers.py``).
The builder classes are generic in the class of the streams they give back: a
``WindowedStream[DataStream]``'s ``aggregate(...)`` is typed as a ``DataStream``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from ..core.partitioners import KeySelector
from ..graph.operator_factory import OperatorFactory
from ..graph.transformations import Transformation
from ..job.result import JobExecutionResult


class EnvironmentLike(Protocol):
    """What streams use of their ``StreamEnvironment``."""

    @property
    def parallelism(self) -> int: ...

    def _register(self, t: Transformation) -> None: ...

    def _unregister(self, t: Transformation) -> None: ...

    def execute(self, job_name: str = ..., *, executor: Any = ...) -> JobExecutionResult: ...


class HasTransformation(Protocol):
    """A stream, as far as a builder hands it back: its transformation."""

    @property
    def transformation(self) -> Transformation: ...


D = TypeVar("D", bound=HasTransformation, covariant=True)
#: the class of the streams a builder gives back (``DataStream``), for the builders
DS = TypeVar("DS", bound=HasTransformation)


class StreamLike(Protocol[D]):
    """A stream a builder was made from; ``D`` is the class of the streams it makes."""

    @property
    def transformation(self) -> Transformation: ...

    @property
    def _env(self) -> EnvironmentLike: ...

    def _derive(self, transformation: Transformation) -> D:
        """A new stream of this one's environment on ``transformation`` (registered)."""
        ...

    def _as_keyed(self) -> KeyedLike[D] | None:
        """This stream if it is keyed, else None."""
        ...

    def map(self, fn: Callable[[Any], Any], name: str | None = None) -> StreamLike[D]: ...

    def map_batches(self, fn: Callable[[Any], Any], name: str | None = None) -> StreamLike[D]: ...

    def union(self, *others: Any) -> StreamLike[D]: ...

    def key_by(self, key: str | Sequence[str] | Callable[[Any], Any]) -> KeyedLike[D]: ...


class KeyedLike(StreamLike[D], Protocol[D]):
    """A keyed stream a builder was made from."""

    @property
    def key_selector(self) -> KeySelector: ...

    def _key_functions(self) -> dict[str, Any]: ...

    def _one_input(self, name: str, factory: OperatorFactory[Any], *, keyed: bool = ...) -> D: ...

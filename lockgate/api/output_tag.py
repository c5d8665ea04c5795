"""Side outputs."""

from __future__ import annotations

from ..errors import ConfigurationError


class OutputTag:
    """Names a side output: ``ctx.output(tag, value)`` emits to it and
    ``stream.get_side_output(tag)`` reads it."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"an OutputTag needs a non-empty string name, got {name!r}")
        self.name = name

    def __repr__(self) -> str:
        return f"OutputTag({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("OutputTag", self.name))


DEAD_LETTER = OutputTag("dead-letter")

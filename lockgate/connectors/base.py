"""The source and sink contracts.

Sources follow Flink's split model: a :class:`Source` cuts its input into
splits (``create_splits``), each subtask's :class:`SourceReader` reads the
splits assigned to it and records a read position per split (checkpoints
store it). ``poll`` emits at most one batch per call, never blocks for long,
and says whether more is available now, later, or never.

A :class:`Sink` makes one :class:`SinkWriter` per subtask.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any

from ..runtime.batch import Batch
from ..runtime.context import RuntimeContext

DEAD_LETTER_TAG = "dead-letter"


class InputStatus(enum.Enum):
    MORE_AVAILABLE = "more"
    NOTHING_AVAILABLE = "nothing now"
    END_OF_INPUT = "end"


class ReaderOutput(ABC):
    """What a reader emits into."""

    @abstractmethod
    def emit(self, batch: Batch) -> None: ...

    def emit_from_split(self, split_id: Any, batch: Batch) -> None:
        """Emit ``batch``, read from split ``split_id``: with a watermark strategy, each
        split gets its own watermark generator and the source's watermark is the
        minimum over its active splits (M-W1, M-W2), so one lagging split holds back
        only what it must. Readers that know their splits should call this."""
        self.emit(batch)

    def split_finished(self, split_id: Any) -> None:
        """Split ``split_id`` is exhausted: it no longer holds the watermark back."""

    @abstractmethod
    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        """Send an unparseable input record to the dead-letter side output."""


class SourceReader(ABC):
    """Reads the splits of one subtask."""

    @abstractmethod
    def add_splits(self, splits: list[Any]) -> None: ...

    @abstractmethod
    def poll(self, output: ReaderOutput) -> InputStatus:
        """Emit the next batch if one is ready; say what to expect next."""

    def wait_hint_ms(self) -> float | None:
        """After NOTHING_AVAILABLE: how long until data may be ready (None: unknown)."""
        return None

    def snapshot_positions(self) -> list[Any]:
        """The unfinished splits with their read positions (stored in checkpoints)."""
        return []

    def close(self) -> None: ...


class Source(ABC):
    """A source of records. ``bounded`` sources end; their job then finishes."""

    bounded: bool = True
    #: a short name shown in plans when the user gives none
    default_name: str = "source"

    @abstractmethod
    def create_splits(self, parallelism: int) -> list[Any]:
        """Cut the input into splits; subtask i reads splits i, i+p, i+2p, ..."""

    @abstractmethod
    def create_reader(self, ctx: RuntimeContext) -> SourceReader: ...

    def max_parallelism(self) -> int | None:
        """The largest parallelism this source can use (None: any)."""
        return None


class SinkWriter(ABC):
    """Writes one subtask's records."""

    @abstractmethod
    def write(self, batch: Batch) -> None: ...

    def finish(self) -> None:
        """End of input: everything written must now be durable/visible."""

    def close(self) -> None:
        """Release resources (also after a failure)."""

    def result(self) -> Any:
        """A value returned to the client when the job ends (e.g. collected records)."""
        return None


class Sink(ABC):
    default_name: str = "sink"

    @abstractmethod
    def create_writer(self, ctx: RuntimeContext) -> SinkWriter: ...


def assign_splits(splits: list[Any], subtask_index: int, parallelism: int) -> list[Any]:
    """The splits of subtask ``subtask_index``: every ``parallelism``-th, from its index."""
    return splits[subtask_index::parallelism]
